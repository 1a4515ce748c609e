"""Streaming MOD-SuLQ (``mechanism="fpca-eq8"``) in FPCAEdge: noise scales, masks, the raw
path and memory (issue 5); the tests not tied to eq. (8) run the default mechanism."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from scipy import linalg, stats
from threadpoolctl import threadpool_limits

from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import FPCAEdge, error_ratio
from edge_runtime.fpca.privacy import (
    clip_to_unit_ball,
    default_block_size,
    min_block_size,
    mod_sulq_noise_std,
    noise_std,
    private_block_summary,
)

EPSILONS = (0.01, 0.1, 0.5, 1.0, 2.0, 4.0, 100.0)
DELTAS = (1e-9, 1e-5, 0.01, 0.05, 0.2)
DIMS = (1, 2, 5, 20, 48, 1000)
SAMPLES = (1, 7, 50, 5000, 10**6)
EQ8 = {"mechanism": "fpca-eq8"}


def omega_eq8(eps: float, delta: float, d: int, n: int) -> float:
    """Eq. (8) of Grammenos et al. (2020), written out independently of the module."""
    return (4 * d / (eps * n)) * math.sqrt(
        2 * math.log(d**2 / (delta * math.sqrt(2 * math.pi)))
    ) + math.sqrt(2) / (math.sqrt(eps) * n)


def beta_eq6(eps: float, delta: float, d: int, n: int) -> float:
    """Eq. (6): symmetric MOD-SuLQ (Chaudhuri et al. 2013)."""
    return ((d + 1) / (eps * n)) * math.sqrt(
        2 * math.log((d**2 + d) / (2 * delta * math.sqrt(2 * math.pi)))
    ) + 1 / (math.sqrt(eps) * n)


def grid() -> list[tuple[float, float, int, int]]:
    cells = []
    for eps in EPSILONS:
        for delta in DELTAS:
            for d in DIMS:
                for n in SAMPLES:
                    cells.append((eps, delta, d, n))
    return cells


# -- eq. (6), eq. (8), Lemma 2.2 ------------------------------------------------------------


def test_noise_std_matches_eq8_and_mod_sulq_matches_eq6_on_a_grid() -> None:
    checked = 0
    for eps, delta, d, n in grid():
        if d == 1 and delta >= 1 / math.sqrt(2 * math.pi):
            continue  # the log of eq. (8) is <= 0 there (tested below)
        assert noise_std(eps, delta, d, n) == pytest.approx(
            omega_eq8(eps, delta, d, n), rel=1e-12, abs=0
        )
        if 2 * delta * math.sqrt(2 * math.pi) < d * d + d:
            assert mod_sulq_noise_std(eps, delta, d, n) == pytest.approx(
                beta_eq6(eps, delta, d, n), rel=1e-12, abs=0
            )
        checked += 1
    assert checked > 1000


def test_min_block_size_is_lemma_2_2_from_eq8_on_a_grid() -> None:
    for eps in EPSILONS:
        for delta in DELTAS:
            for d in (2, 5, 20, 48, 200):
                for target in (1e-4, 1e-3, 0.02, 0.5, 10.0):
                    size = min_block_size(eps, delta, d, target)
                    # T = ceil(K / target), K = n * omega(n) (omega is K / n).
                    k = omega_eq8(eps, delta, d, 1)
                    expected = max(1, math.ceil(k / target))
                    assert abs(size - expected) <= 1  # ceil of a rounded quotient
                    assert omega_eq8(eps, delta, d, size) <= target * (1 + 1e-12)
                    if size > 1:
                        assert omega_eq8(eps, delta, d, size - 1) > target * (1 - 1e-12)


def test_default_block_size_targets_a_tenth_of_the_unit_ball_spectrum() -> None:
    size = default_block_size(1.0, 0.05, 48)
    omega = noise_std(1.0, 0.05, 48, size)
    assert 2 * omega * math.sqrt(48) <= 0.1 < 2 * noise_std(1.0, 0.05, 48, size - 1) * math.sqrt(48)
    assert (
        FPCAEdge(48, 10, privacy=(1.0, 0.05), clip_norm=1.0, mechanism="fpca-eq8").block_size
        == size
    )
    with pytest.raises(ValueError, match="pass block_size"):
        default_block_size(1.0, 0.05, 400)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: noise_std(0.0, 0.05, 4, 10), "epsilon"),
        (lambda: noise_std(float("inf"), 0.05, 4, 10), "epsilon"),
        (lambda: noise_std(1.0, 1.0, 4, 10), "delta"),
        (lambda: noise_std(1.0, 0.0, 4, 10), "delta"),
        (lambda: noise_std(1.0, 0.5, 1, 10), "smaller delta"),
        (lambda: noise_std(1.0, 0.05, 0, 10), "n_features"),
        (lambda: noise_std(1.0, 0.05, 4, 0), "n_samples"),
        (lambda: noise_std("a", 0.05, 4, 10), "numbers"),
        (lambda: min_block_size(1.0, 0.05, 4, 0.0), "target_std"),
        (lambda: min_block_size(1.0, 0.05, 4, "x"), "target_std"),
        (lambda: clip_to_unit_ball(np.ones((2, 2)), -1.0), "clip_norm"),
        (lambda: FPCAEdge(4, 2, 10, privacy=(1.0, 0.05)), "clip_norm"),
        (lambda: FPCAEdge(4, 2, 10, clip_norm=1.0), "only used with privacy"),
        (lambda: FPCAEdge(4, 2, 10, chunk_size=2), "only used with mechanism 'fpca-eq8'"),
        (lambda: FPCAEdge(4, 2, 10, horizon=4), "only used with privacy"),
        (lambda: FPCAEdge(4, 2, 10, privacy=(1, 0.1), clip_norm=1, mechanism="x"), "mechanism"),
        (lambda: FPCAEdge(4, 2, 10, privacy=(1, 0.1), clip_norm=1, horizon=0), "horizon"),
        (
            lambda: FPCAEdge(
                4, 2, 10, privacy=(1, 0.1), clip_norm=1, mechanism="fpca-eq8", horizon=2
            ),
            "horizon",
        ),
        (lambda: FPCAEdge(4, 2, 10, privacy=(1, 0.1), clip_norm=1, chunk_size=2), "fpca-eq8"),
        (lambda: FPCAEdge(4, 2, 10, privacy=1.0, clip_norm=1.0), r"\(epsilon, delta\)"),
        (lambda: FPCAEdge(4, 2, 10, privacy=(1.0, 2.0), clip_norm=1.0), "delta"),
        (lambda: FPCAEdge(4, 2, 10, privacy=(1.0, 0.1), clip_norm=0.0), "clip_norm"),
        (lambda: FPCAEdge(4, 2, 10, privacy=(1.0, 0.1), clip_norm=1, center=True), "mean"),
        (
            lambda: FPCAEdge(
                4, 2, 10, privacy=(1.0, 0.1), clip_norm=1, chunk_size=0, mechanism="fpca-eq8"
            ),
            "chunk",
        ),
        (lambda: FPCAEdge(4, 2, 10, privacy=(1, 0.1), clip_norm=1, random_state="x"), "random"),
    ],
)
def test_bad_privacy_arguments_get_one_line_errors_naming_the_value(call, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


def test_clip_to_unit_ball_keeps_short_rows_and_projects_long_ones() -> None:
    x = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    out = clip_to_unit_ball(x, 2.0)
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.15, 0.2], [0.0, 0.0]])
    assert np.all(np.linalg.norm(out, axis=1) <= 1.0 + 1e-15)


# -- the mask -------------------------------------------------------------------------------


def replayed_mask(seed_rng: np.random.Generator, d: int, c: int) -> np.ndarray:
    """The standard normals a block summary draws, chunk by chunk, from ``seed_rng``."""
    return np.hstack([seed_rng.standard_normal((d, min(c, d - j))) for j in range(0, d, c)])


def test_block_summary_is_exactly_the_svd_of_the_masked_covariance() -> None:
    d, k, c = 13, 40, 5  # 3 chunks, the last one narrower
    rows = clip_to_unit_ball(np.random.default_rng(1).normal(size=(k, d)), 2.0)
    basis, values, omega = private_block_summary(rows, 0.7, 0.05, d, c, np.random.default_rng(9))
    mask = omega * replayed_mask(np.random.default_rng(9), d, c)
    masked = rows.T @ rows / k + mask
    u, s, _ = linalg.svd(masked)
    np.testing.assert_allclose(values, s, rtol=1e-9, atol=1e-12)
    # same left singular subspace, direction by direction (signs arbitrary)
    np.testing.assert_allclose(np.abs(np.sum(basis * u, axis=0)), 1.0, atol=1e-8)
    assert omega == noise_std(0.7, 0.05, d, k)


def test_masks_are_non_symmetric_and_fresh_for_every_block() -> None:
    d, c = 60, 7
    rng = np.random.default_rng(5)
    first = replayed_mask(rng, d, c)
    second = replayed_mask(rng, d, c)  # what the next block of the same estimator draws
    upper = np.triu_indices(d, 1)
    # N_ij and N_ji are independent: their sample correlation over 1770 pairs is ~N(0,
    # 1/1770); |r| > 0.15 has probability ~1e-10. A symmetric mask would give r = 1.
    r_transpose = np.corrcoef(first[upper], first.T[upper])[0, 1]
    r_blocks = np.corrcoef(first.ravel(), second.ravel())[0, 1]
    assert abs(r_transpose) < 0.15
    assert abs(r_blocks) < 0.15

    # The estimator draws exactly these masks, one after the other (zero samples: the
    # masked covariance is the mask itself, and all d directions are tracked).
    edge = FPCAEdge(
        d, d // 2, 30, privacy=(1.0, 0.05), clip_norm=1.0, chunk_size=c, random_state=5, **EQ8
    )
    omega = noise_std(1.0, 0.05, d, 30)
    zeros = np.zeros((30, d))
    edge.partial_fit(zeros)
    np.testing.assert_allclose(
        edge.tracked_subspace.singular_values**2 / 30,
        linalg.svdvals(omega * first),
        rtol=1e-8,
    )
    one_block = edge.get_state()["singular_values"]
    edge.partial_fit(zeros)
    both = np.hstack(
        [linalg.svd(omega * m)[0] * np.sqrt(linalg.svdvals(omega * m)) for m in (first, second)]
    )
    np.testing.assert_allclose(
        edge.tracked_subspace.singular_values**2 / 30, linalg.svdvals(both) ** 2, rtol=1e-8
    )
    assert not np.allclose(edge.tracked_subspace.singular_values, one_block * math.sqrt(2))


FALSE_FAILURE = 1e-9  # per test, both tails together


def test_mask_standard_deviation_is_omega() -> None:
    """||N||_F^2 / omega^2 of a d x d mask is chi-square with d^2 degrees of freedom.

    Zero samples make the masked covariance the mask itself; tracking all ``d``
    directions keeps all its singular values, so sum(s^2) = ||N||_F^2. Three blocks
    are checked; the acceptance interval has total false-failure probability 1e-9.
    """
    d, k = 120, 25
    lo, hi = stats.chi2.ppf([FALSE_FAILURE / 6, 1 - FALSE_FAILURE / 6], d * d)
    edge = FPCAEdge(
        d, d // 2, k, privacy=(0.5, 0.01), clip_norm=3.0, chunk_size=9, random_state=123, **EQ8
    )
    omega = noise_std(0.5, 0.01, d, k)
    previous = np.zeros(0)
    for _ in range(3):
        edge.reset()
        edge.partial_fit(np.zeros((k, d)))
        s = edge.tracked_subspace.singular_values
        assert edge.last_noise_std_ == omega
        values = s**2 / (3.0**2 * k)  # back from the data's scale: s = C sqrt(k value)
        statistic = float(np.sum(values**2)) / omega**2
        assert lo < statistic < hi
        assert not np.array_equal(values, previous)  # reset keeps the generator going
        previous = values
    # A standard deviation off by 5% would fail: the interval is about +-7.5% of d^2.
    assert hi / (d * d) < 1.05**2 and lo / (d * d) > 0.95**2


# -- nothing raw leaves ---------------------------------------------------------------------


def test_changed_sample_that_clips_to_the_same_point_gives_identical_output() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 8))
    clip = 1.5
    long_row = int(np.argmax(np.linalg.norm(x, axis=1)))
    assert np.linalg.norm(x[long_row]) > clip
    changed = x.copy()
    changed[long_row] *= 7.0  # same direction, longer: clipped to the same point
    other = x.copy()
    other[long_row] = np.roll(x[long_row], 1)  # clipped to a different point

    def run(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        edge = FPCAEdge(8, 3, 100, privacy=(1.0, 0.05), clip_norm=clip, random_state=11)
        edge.partial_fit(data).flush()
        snapshot = edge.tracked_subspace
        return snapshot.basis, snapshot.singular_values

    base, changed_out, other_out = run(x), run(changed), run(other)
    assert np.array_equal(base[0], changed_out[0]) and np.array_equal(base[1], changed_out[1])
    assert not np.array_equal(base[1], other_out[1])  # the test can tell outputs apart


def test_pending_rows_never_reach_a_snapshot_until_masked() -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(size=(260, 6))
    edge = FPCAEdge(6, 2, 100, privacy=(2.0, 0.05), clip_norm=3.0, random_state=2)
    edge.partial_fit(x[:60])
    for snapshot in (edge.subspace, edge.tracked_subspace):
        assert snapshot.rank == 0 and snapshot.n_samples == 0
    edge.partial_fit(x[60:250])  # two full blocks, 50 pending
    before = edge.tracked_subspace
    edge.partial_fit(1e6 * x[250:])  # huge pending rows: no effect on what is read
    after = edge.tracked_subspace
    assert np.array_equal(before.basis, after.basis)
    assert np.array_equal(before.singular_values, after.singular_values)
    assert after.n_samples == 200 and edge.n_pending_ == 60
    # reading does not draw masks: the same seed gives the same next block either way
    twin = FPCAEdge(6, 2, 100, privacy=(2.0, 0.05), clip_norm=3.0, random_state=2)
    twin.partial_fit(x[:250]).partial_fit(1e6 * x[250:])
    edge.flush()
    twin.flush()
    assert np.array_equal(edge.subspace.basis, twin.subspace.basis)
    assert edge.subspace.n_samples == 260 and edge.n_flushed_ == 60
    # the raw rows are gone from the buffer after their summary
    assert edge.n_pending_ == 0 and not np.any(edge.get_state()["pending"])


def test_restored_private_estimator_draws_fresh_masks_not_the_saved_ones() -> None:
    x = np.random.default_rng(8).normal(size=(250, 5))
    edge = FPCAEdge(5, 2, 100, privacy=(1.0, 0.05), clip_norm=2.0, random_state=1, **EQ8)
    edge.partial_fit(x[:150])
    state = edge.get_state()
    assert state["privacy"].tolist() == [1.0, 0.05] and state["clip_norm"] == 2.0
    resumed = FPCAEdge.from_state(state, random_state=99).partial_fit(x[150:])
    continued = edge.partial_fit(x[150:])
    assert resumed.privacy == (1.0, 0.05) and resumed.n_blocks_ == 2
    assert not np.array_equal(resumed.subspace.singular_values, continued.subspace.singular_values)
    again = FPCAEdge.from_state(state, random_state=99).partial_fit(x[150:])
    assert np.array_equal(again.subspace.basis, resumed.subspace.basis)


def test_huge_epsilon_matches_the_non_private_estimate_on_motes() -> None:
    data = load_dataset("motes-light").data
    clip = float(np.max(np.linalg.norm(data, axis=1)))
    with threadpool_limits(limits=1, user_api="blas"):
        private = FPCAEdge(48, 10, 500, privacy=(1e6, 0.05), clip_norm=clip, random_state=0)
        private.partial_fit(data).flush()
        plain = FPCAEdge(48, 10, 500).partial_fit(data)
    ratio_private = error_ratio(data, private.subspace.basis)
    ratio_plain = error_ratio(data, plain.subspace.basis)
    assert ratio_private <= 1.01 * ratio_plain
    assert private.subspace.n_samples == plain.subspace.n_samples == data.shape[0]


# -- memory ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_private_memory_stays_flat_and_within_d_b_plus_c_plus_r() -> None:
    d, rank, b, c = 48, 10, 100, 16
    rng = np.random.default_rng(61)
    mixing = rng.normal(size=(12, d))
    factors = np.empty((2000, 12))
    chunk = np.empty((2000, d))
    with threadpool_limits(limits=1, user_api="blas"):
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            edge = FPCAEdge(
                d,
                rank,
                b,
                privacy=(1.0, 0.05),
                clip_norm=10.0,
                chunk_size=c,
                random_state=0,
                **EQ8,
            )
            state = tracemalloc.get_traced_memory()[0] - before
            first = highest = peak = 0
            for i in range(100):  # 2 * 10^5 samples, 2000 masked blocks
                rng.standard_normal(out=factors)
                np.matmul(factors, mixing, out=chunk)
                edge.partial_fit(chunk)
                current, traced_peak = tracemalloc.get_traced_memory()
                if i == 0:
                    first = current
                    tracemalloc.reset_peak()
                else:
                    highest = max(highest, current)
                    peak = max(peak, traced_peak)
        finally:
            tracemalloc.stop()
    t = rank + edge.oversample_
    unit = d * (t + b + c) * 8  # 60 KB: O(d (b + c + r)) with r -> t tracked directions
    # Preallocated state: the non-private arrays plus the chunk and its mask (2 d c).
    plain = 8 * (d * (3 * t + b + 3) + min(d, t + b + 1) ** 2 + t) + 2 * d * c * 8
    assert plain - 2048 <= state <= plain + 16384
    assert abs(current - first) < 2048 and highest - first < 2048
    assert peak - first < 4 * unit + chunk.nbytes // 8 + 8192
    assert edge.n_blocks_ == 2000
