"""Tests of FPCAEdge: block update (eq. (3)), adaptive rank (eq. (4)), chunking, input checks."""

from __future__ import annotations

import numpy as np
import pytest

from edge_runtime.fpca import FPCAEdge, Subspace, error_ratio, offline_subspace, principal_angles


def low_rank_data(
    rng: np.random.Generator, n: int, d: int, scales: list[float], noise: float = 0.0
) -> np.ndarray:
    """``n`` samples in ``d`` dimensions with a random ``len(scales)``-dim signal plus noise."""
    w = np.linalg.qr(rng.normal(size=(d, len(scales))))[0]
    x = (rng.normal(size=(n, len(scales))) * scales) @ w.T
    return x + noise * rng.normal(size=(n, d))


def naive_stream(
    x: np.ndarray, rank: int, block_size: int, forget: float = 1.0, tracked: int | None = None
) -> Subspace:
    """Reference eq. (3): SVD of the explicit concatenation ``[forget U S, B]`` per block.

    Keeps ``tracked`` directions (default ``rank``) after each block, reports ``rank``.
    """
    tracked = rank if tracked is None else tracked
    u, s = np.zeros((x.shape[1], 0)), np.zeros(0)
    for start in range(0, x.shape[0], block_size):
        concat = np.hstack([forget * u * s, x[start : start + block_size].T])
        u, s, _ = np.linalg.svd(concat, full_matrices=False)
        u, s = u[:, :tracked], s[:tracked]
    return Subspace(u[:, :rank], s[:rank], x.shape[0])


def rank_history(edge: FPCAEdge, x: np.ndarray) -> list[int]:
    """``rank_`` after each block when ``x`` is fed one block at a time."""
    ranks = []
    for start in range(0, x.shape[0], edge.block_size):
        edge.partial_fit(x[start : start + edge.block_size])
        ranks.append(edge.rank_)
    return ranks


def assert_same_state(a: FPCAEdge, b: FPCAEdge) -> None:
    sa, sb = a.subspace, b.subspace
    np.testing.assert_array_equal(sa.basis, sb.basis)
    np.testing.assert_array_equal(sa.singular_values, sb.singular_values)
    assert sa.n_samples == sb.n_samples
    assert (a.rank_, a.n_blocks_, a.n_samples_seen_) == (b.rank_, b.n_blocks_, b.n_samples_seen_)


@pytest.fixture(scope="module")
def stream() -> np.ndarray:
    rng = np.random.default_rng(20)
    return low_rank_data(rng, 1037, 12, [9.0, 7.0, 5.0, 3.0, 2.0, 1.0], noise=0.3)


@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("chunk", [1, 7, 50, 333])
def test_partial_fit_gives_bitwise_identical_state_for_any_chunking(
    stream: np.ndarray, chunk: int, adaptive: bool
) -> None:
    whole = FPCAEdge(12, 3, 50, adaptive=adaptive).partial_fit(stream)
    chunked = FPCAEdge(12, 3, 50, adaptive=adaptive)

    for start in range(0, stream.shape[0], chunk):
        chunked.partial_fit(stream[start : start + chunk])

    assert chunked.n_blocks_ == 20
    assert_same_state(whole, chunked)


@pytest.mark.parametrize(("oversample", "tracked"), [(0, 4), (None, 8), (3, 7)])
def test_block_updates_match_the_svd_of_the_explicit_concatenation(
    stream: np.ndarray, oversample: int | None, tracked: int
) -> None:
    edge = FPCAEdge(12, 4, 50, forget=0.9, oversample=oversample).partial_fit(stream[:1000])

    reference = naive_stream(stream[:1000], 4, 50, forget=0.9, tracked=tracked)
    assert edge.n_tracked_ == tracked
    np.testing.assert_allclose(edge.subspace.singular_values, reference.singular_values, rtol=1e-12)
    assert principal_angles(edge.subspace.basis, reference.basis).max() < 1e-8


def test_stream_stays_exact_when_blocks_start_with_samples_of_zeros() -> None:
    rng = np.random.default_rng(21)
    x = rng.normal(size=(60, 8))
    x[0::6] = 0.0  # a stuck sensor at the start of every block of 6
    x[1::6] = 0.0

    edge = FPCAEdge(8, 5, 6).fit(x)

    reference = naive_stream(x, 5, 6, tracked=8)  # oversample min(5, 8 - 5) = 3
    np.testing.assert_allclose(edge.subspace.singular_values, reference.singular_values, rtol=1e-12)
    assert principal_angles(edge.subspace.basis, reference.basis).max() < 1e-8
    gram = edge.subspace.basis.T @ edge.subspace.basis
    assert np.abs(gram - np.eye(5)).max() < 1e-12


def test_fit_is_reset_followed_by_partial_fit(stream: np.ndarray) -> None:
    fitted = FPCAEdge(12, 3, 50, adaptive=True).partial_fit(stream[:400])
    fitted.fit(stream[400:])

    fresh = FPCAEdge(12, 3, 50, adaptive=True).partial_fit(stream[400:])
    reset = FPCAEdge(12, 3, 50, adaptive=True).partial_fit(stream[:400]).reset()
    reset.partial_fit(stream[400:])

    assert_same_state(fitted, fresh)
    assert_same_state(reset, fresh)


def test_subspace_includes_pending_samples_without_changing_the_state(stream: np.ndarray) -> None:
    read = FPCAEdge(12, 3, 50).partial_fit(stream[:137])
    unread = FPCAEdge(12, 3, 50).partial_fit(stream[:137])

    first, second = read.subspace, read.subspace

    np.testing.assert_array_equal(first.basis, second.basis)
    np.testing.assert_array_equal(first.singular_values, second.singular_values)
    assert first.n_samples == read.n_samples_seen_ == 137
    assert read.n_blocks_ == 2
    # The 37 pending rows count: the result is the update with them as a final block.
    reference = naive_stream(stream[:137], 3, 50, tracked=6)
    np.testing.assert_allclose(first.singular_values, reference.singular_values, rtol=1e-12)
    read.partial_fit(stream[137:])
    unread.partial_fit(stream[137:])
    assert_same_state(read, unread)


def test_subspace_of_fewer_samples_than_a_block_is_their_exact_svd(stream: np.ndarray) -> None:
    edge = FPCAEdge(12, 4, 50).partial_fit(stream[:30])

    exact = offline_subspace(stream[:30], 4)
    assert edge.n_blocks_ == 0
    np.testing.assert_allclose(edge.subspace.singular_values, exact.singular_values, rtol=1e-12)
    np.testing.assert_allclose(edge.subspace.basis, exact.basis, atol=1e-10)
    assert FPCAEdge(12, 4, 50).partial_fit(stream[:2]).subspace.rank == 2


def test_subspace_before_any_sample_is_empty() -> None:
    edge = FPCAEdge(5, 2, 10)

    assert edge.subspace.rank == 0
    assert edge.subspace.n_features == 5
    assert edge.subspace.n_samples == 0


def test_a_one_dimensional_array_is_one_sample(stream: np.ndarray) -> None:
    rows = FPCAEdge(12, 3, 5)
    for row in stream[:12]:
        rows.partial_fit(row)

    batch = FPCAEdge(12, 3, 5).partial_fit(stream[:12])

    assert rows.n_samples_seen_ == 12
    assert_same_state(rows, batch)


def test_partial_fit_of_zero_rows_changes_nothing(stream: np.ndarray) -> None:
    edge = FPCAEdge(12, 3, 50).partial_fit(stream[:70])
    before = edge.subspace

    edge.partial_fit(np.zeros((0, 12)))

    np.testing.assert_array_equal(edge.subspace.basis, before.basis)
    assert edge.n_samples_seen_ == 70


def test_partial_fit_copies_samples_so_later_changes_to_the_callers_array_do_not_matter(
    stream: np.ndarray,
) -> None:
    x = stream[:30].copy()
    edge = FPCAEdge(12, 3, 50).partial_fit(x)
    before = edge.subspace

    x[:] = 1e6

    np.testing.assert_array_equal(edge.subspace.basis, before.basis)


def test_rank_ten_stream_is_within_one_percent_of_the_offline_svd() -> None:
    rng = np.random.default_rng(22)
    scales = list(np.linspace(20.0, 4.0, 10))
    x = low_rank_data(rng, 5000, 48, scales, noise=1.0)

    edge = FPCAEdge(48, 10, 50).fit(x)

    assert edge.subspace.rank == 10
    assert error_ratio(x, edge.subspace.basis) <= 1.01


def test_forget_factor_lets_recent_samples_dominate() -> None:
    rng = np.random.default_rng(23)
    old = np.outer(rng.normal(size=500), np.eye(6)[0])
    new = np.outer(rng.normal(size=100), np.eye(6)[1])
    x = np.vstack([old, new])

    remembers = FPCAEdge(6, 1, 20).fit(x).subspace.basis[:, 0]
    forgets = FPCAEdge(6, 1, 20, forget=0.5).fit(x).subspace.basis[:, 0]

    np.testing.assert_allclose(np.abs(remembers), np.eye(6)[0], atol=1e-8)
    np.testing.assert_allclose(np.abs(forgets), np.eye(6)[1], atol=1e-8)


def test_fixed_rank_never_changes_without_adaptive() -> None:
    rng = np.random.default_rng(24)
    x = low_rank_data(rng, 1000, 20, [10.0, 8.0, 1.0], noise=0.001)

    assert set(rank_history(FPCAEdge(20, 10, 25), x)) == {10}


def test_adaptive_rank_grows_on_data_of_higher_rank() -> None:
    rng = np.random.default_rng(25)
    x = low_rank_data(rng, 3000, 20, [4.0, 3.0, 2.5, 2.0, 2.0, 1.0], noise=0.001)

    ranks = rank_history(FPCAEdge(20, 2, 25, adaptive=True), x)

    assert ranks[0] == 3
    assert ranks[-40:] == [6] * 40


def test_adaptive_rank_shrinks_on_data_of_lower_rank() -> None:
    rng = np.random.default_rng(26)
    x = low_rank_data(rng, 3000, 20, [10.0, 8.0, 1.0], noise=0.001)

    edge = FPCAEdge(20, 10, 25, adaptive=True)
    ranks = rank_history(edge, x)

    assert ranks[:3] == [9, 8, 7]
    assert ranks[-40:] == [3] * 40
    assert edge.subspace.rank == 3


def test_adaptive_rank_changes_at_most_once_per_holdoff_blocks() -> None:
    rng = np.random.default_rng(26)
    x = low_rank_data(rng, 3000, 20, [10.0, 8.0, 1.0], noise=0.001)

    ranks = rank_history(FPCAEdge(20, 10, 25, adaptive=True, holdoff=4), x)

    changes = [i for i in range(1, len(ranks)) if ranks[i] != ranks[i - 1]]
    assert ranks[0] == 9
    assert len(changes) >= 5
    assert min(np.diff(changes)) >= 4
    assert ranks[-1] == 3


def test_adaptive_rank_stays_within_max_rank_and_block_size() -> None:
    rng = np.random.default_rng(27)
    x = rng.normal(size=(2000, 12))  # full rank: eq. (4) keeps asking for more

    capped = rank_history(FPCAEdge(12, 2, 25, adaptive=True, max_rank=5), x)
    small_blocks = rank_history(FPCAEdge(12, 2, 4, adaptive=True), x)

    assert max(capped) == 5
    assert capped[-1] == 5
    assert max(small_blocks) == 4


def test_adaptive_rank_never_drops_below_one() -> None:
    rng = np.random.default_rng(28)
    x = low_rank_data(rng, 1000, 12, [5.0])  # exactly rank 1

    ranks = rank_history(FPCAEdge(12, 3, 10, adaptive=True), x)

    assert min(ranks) == 1
    assert ranks[:2] == [2, 1]


@pytest.mark.parametrize(
    ("x", "message"),
    [
        (np.ones((3, 46)), "X has 46 features, expected 48"),
        (np.ones(47), "X has 47 features, expected 48"),
        (np.ones((2, 3, 48)), r"X must be 1-D \(one sample\) or 2-D .* got 3-D"),
        (np.vstack([np.ones((4, 48)), np.full((1, 48), np.nan)]), "X contains NaN or infinity"),
        (np.full((1, 48), np.inf), r"X contains NaN or infinity \(first in row 0\)"),
    ],
)
def test_partial_fit_rejects_bad_input_with_a_message_naming_it_and_keeps_the_state(
    x: np.ndarray, message: str
) -> None:
    edge = FPCAEdge(48, 3, 5).partial_fit(np.ones((7, 48)))

    with pytest.raises(ValueError, match=message):
        edge.partial_fit(x)
    with pytest.raises(ValueError, match=message):
        edge.fit(x)

    assert edge.n_samples_seen_ == 7
    assert edge.n_blocks_ == 1


def test_partial_fit_rejects_non_numeric_input() -> None:
    edge = FPCAEdge(2, 1, 5)
    with pytest.raises(TypeError, match="X must be a numeric array"):
        edge.partial_fit([["a", "b"]])
    with pytest.raises(TypeError, match="real numeric dtype, got complex128"):
        edge.partial_fit(np.ones((1, 2), dtype=complex))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"rank": 0}, ValueError, "rank must be >= 1, got 0"),
        ({"rank": 49}, ValueError, "rank 49 exceeds n_features 48"),
        (
            {"rank": 10, "block_size": 5, "adaptive": True},
            ValueError,
            r"rank 10 exceeds block_size 5 \(required with adaptive=True\)",
        ),
        ({"oversample": -1}, ValueError, "oversample must be >= 0, got -1"),
        ({"oversample": 1.5}, TypeError, "oversample must be an integer, got 1.5"),
        ({"rank": 3, "max_rank": 2}, ValueError, "rank 3 exceeds max_rank 2"),
        ({"n_features": 0}, ValueError, "n_features must be >= 1, got 0"),
        ({"block_size": 0}, ValueError, "block_size must be >= 1, got 0"),
        ({"holdoff": 0}, ValueError, "holdoff must be >= 1, got 0"),
        ({"forget": 0.0}, ValueError, r"forget must be in \(0, 1\], got 0.0"),
        ({"rank_bounds": (0.2, 0.1)}, ValueError, "0 < lower < upper < 1"),
        ({"rank_bounds": (0.0, 0.1)}, ValueError, "0 < lower < upper < 1"),
        ({"rank_bounds": 0.1}, ValueError, "rank_bounds must be two numbers"),
        ({"rank": 2.0}, TypeError, "rank must be an integer, got 2.0"),
    ],
)
def test_constructor_rejects_out_of_range_parameters(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    params: dict[str, object] = {"n_features": 48, "rank": 3, **kwargs}
    with pytest.raises(error, match=message):
        FPCAEdge(**params)  # type: ignore[arg-type]


def test_constructor_exposes_the_parameters_and_initial_state() -> None:
    edge = FPCAEdge(48, 10, adaptive=True, holdoff=3, max_rank=20, forget=0.99)

    assert (edge.n_features_, edge.rank_, edge.block_size) == (48, 10, 50)
    assert (edge.n_samples_seen_, edge.n_blocks_, edge.n_tracked_) == (0, 0, 0)
    assert edge.rank_bounds == (0.01, 0.10)
    assert (edge.oversample, edge.oversample_, edge.center, edge.mean_) == (None, 10, False, None)
    assert "rank_=10" in repr(edge)
    assert "oversample=10" in repr(edge)


def drifting_data(rng: np.random.Generator, n: int, d: int, k: int, noise: float) -> np.ndarray:
    """``n`` samples whose ``k``-dim signal subspace rotates from one random span to another."""
    start = np.linalg.qr(rng.normal(size=(d, k)))[0]
    end = np.linalg.qr(rng.normal(size=(d, k)))[0]
    factors = rng.normal(size=(n, k)) * np.linspace(10.0, 1.0, k)
    x = np.empty((n, d))
    for i in range(0, n, 50):  # n / 50 steps
        w = np.linalg.qr((1 - i / n) * start + (i / n) * end)[0]
        x[i : i + 50] = factors[i : i + 50] @ w.T
    return x + noise * rng.normal(size=(n, d))


@pytest.fixture(scope="module")
def motes() -> np.ndarray:
    from edge_runtime.datasets import load_dataset

    return load_dataset("motes-light")


def test_default_oversample_tracks_twice_the_rank_capped_by_n_features() -> None:
    assert FPCAEdge(48, 10).oversample_ == 10
    assert FPCAEdge(12, 8).oversample_ == 4
    assert FPCAEdge(12, 12).oversample_ == 0
    assert FPCAEdge(12, 3, 6, oversample=20).partial_fit(np.eye(12)).n_tracked_ == 12


def test_subspace_is_the_leading_rank_directions_of_the_tracked_subspace(
    stream: np.ndarray,
) -> None:
    edge = FPCAEdge(12, 3, 50, oversample=4).partial_fit(stream[:437])

    tracked, reported = edge.tracked_subspace, edge.subspace

    assert (tracked.rank, reported.rank, edge.n_tracked_) == (7, 3, 7)
    assert tracked.n_samples == reported.n_samples == 437
    np.testing.assert_array_equal(reported.basis, tracked.basis[:, :3])
    np.testing.assert_array_equal(reported.singular_values, tracked.singular_values[:3])
    gram = tracked.basis.T @ tracked.basis
    assert np.abs(gram - np.eye(7)).max() < 1e-12


def test_oversampling_brings_motes_light_within_one_percent_of_the_offline_svd(
    motes: np.ndarray,
) -> None:
    # Issue 3: rank 10, b = 50, default oversample; the paper's p = 0 misses the bound.
    default = FPCAEdge(48, 10, 50).fit(motes)
    paper = FPCAEdge(48, 10, 50, oversample=0).fit(motes)

    assert error_ratio(motes, default.subspace.basis) <= 1.01
    assert error_ratio(motes, paper.subspace.basis) > 1.04
    # Equal state with Frequent Directions at 2r = 20 rows (~1.003 there): at or below it.
    assert default.n_tracked_ == 20
    assert error_ratio(motes, default.subspace.basis) <= 1.003
    # Reversed time order reveals the directions in another order: still within bound.
    assert error_ratio(motes, FPCAEdge(48, 10, 50).fit(motes[::-1]).subspace.basis) <= 1.01


def test_oversampling_recovers_directions_of_a_drifting_stream() -> None:
    rng = np.random.default_rng(40)
    x = drifting_data(rng, 4000, 48, 12, noise=0.3)

    ratios = {
        p: error_ratio(x, FPCAEdge(48, 10, 50, oversample=p).fit(x).subspace.basis) for p in (0, 10)
    }

    assert ratios[0] > 1.05
    assert ratios[10] < 1.005


@pytest.mark.parametrize("center", [False, True])
def test_forgetting_tracks_a_drifting_stream_better_than_remembering(center: bool) -> None:
    rng = np.random.default_rng(41)
    x = drifting_data(rng, 6000, 30, 5, noise=0.1) + 4.0  # the offset matters only centred
    recent = x[-500:] - (x[-500:].mean(axis=0) if center else 0.0)

    remember = FPCAEdge(30, 5, 50, center=center).fit(x).subspace.basis
    forget = FPCAEdge(30, 5, 50, center=center, forget=0.9).fit(x).subspace.basis

    assert error_ratio(recent, forget) < 1.05
    assert error_ratio(recent, remember) > 1.5 * error_ratio(recent, forget)


def test_rank_may_exceed_block_size_when_not_adaptive() -> None:
    rng = np.random.default_rng(42)
    x = low_rank_data(rng, 203, 20, list(np.linspace(9.0, 1.0, 12)), noise=0.1)

    edge = FPCAEdge(20, 8, 5, oversample=2).fit(x)

    reference = naive_stream(x, 8, 5, tracked=10)
    assert edge.subspace.rank == 8
    np.testing.assert_allclose(edge.subspace.singular_values, reference.singular_values, rtol=1e-10)
    assert principal_angles(edge.subspace.basis, reference.basis).max() < 1e-8


def test_adaptive_rank_increase_is_reported_at_once_when_the_direction_is_tracked() -> None:
    rng = np.random.default_rng(25)
    x = low_rank_data(rng, 50, 20, [4.0, 3.0, 2.5, 2.0, 2.0, 1.0], noise=0.001)

    tracked = FPCAEdge(20, 2, 25, adaptive=True).partial_fit(x)
    untracked = FPCAEdge(20, 2, 25, adaptive=True, oversample=0).partial_fit(x)

    assert tracked.rank_ == untracked.rank_ == 4
    assert tracked.subspace.rank == 4
    assert untracked.subspace.rank == 3  # the new direction arrives with the next block


def test_adaptive_rank_decisions_use_the_reported_singular_values_only() -> None:
    rng = np.random.default_rng(26)
    x = low_rank_data(rng, 3000, 20, [10.0, 8.0, 1.0], noise=0.001)

    edge = FPCAEdge(20, 10, 25, adaptive=True, oversample=5)
    ranks = rank_history(edge, x)

    assert ranks[-1] == 3
    assert edge.n_tracked_ == 8  # shrinking the rank drops tracked directions too
    assert edge.subspace.rank == 3
