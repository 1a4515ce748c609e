"""Tests of FPCAEdge.get_state / from_state (bit-exact resume) and from_subspace (recovery)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_runtime.fpca import FPCAEdge, Subspace, principal_angles
from edge_runtime.fpca.subspace import flip_signs


@dataclass(frozen=True)
class Config:
    n_features: int
    rank: int
    block_size: int
    kwargs: dict[str, Any]

    def new(self) -> FPCAEdge:
        return FPCAEdge(self.n_features, self.rank, self.block_size, **self.kwargs)


def stream(seed: int, n: int, d: int, deficient: bool = False) -> np.ndarray:
    """``n`` samples: a decaying spectrum (so adaptive ranks move) plus noise and an offset.

    ``deficient`` makes the data exactly rank 1, which sends updates to the QR + SVD path.
    """
    rng = np.random.default_rng(seed)
    if deficient:
        return rng.normal(size=(n, 1)) @ rng.normal(size=(1, d))
    scales = 4.0 * 0.5 ** np.arange(d)
    x = rng.normal(size=(n, d)) * scales @ np.linalg.qr(rng.normal(size=(d, d)))[0]
    return x + 0.05 * rng.normal(size=(n, d)) + rng.normal(size=d)


def assert_states_equal(a: FPCAEdge, b: FPCAEdge) -> None:
    """Complete internal states and published subspaces bitwise equal."""
    sa, sb = a.get_state(), b.get_state()
    assert sa.keys() == sb.keys()
    for key, value in sa.items():
        if isinstance(value, np.ndarray):
            assert value.shape == sb[key].shape, key
            assert value.dtype == sb[key].dtype, key
            np.testing.assert_array_equal(value, sb[key], err_msg=key, strict=True)
        else:
            assert value == sb[key], key
    assert_subspaces_equal(a.tracked_subspace, b.tracked_subspace)
    assert_subspaces_equal(a.subspace, b.subspace)


def assert_subspaces_equal(a: Subspace, b: Subspace) -> None:
    np.testing.assert_array_equal(a.basis, b.basis, strict=True)
    np.testing.assert_array_equal(a.singular_values, b.singular_values, strict=True)
    assert a.n_samples == b.n_samples
    if a.mean is None:
        assert b.mean is None
    else:
        np.testing.assert_array_equal(a.mean, b.mean, strict=True)


@st.composite
def configs(draw: st.DrawFn, *, max_features: int = 14) -> Config:
    d = draw(st.integers(2, max_features))
    rank = draw(st.integers(1, d))
    adaptive = draw(st.booleans())
    block = draw(st.integers(rank if adaptive else 1, max(rank, 1) + 7))
    kwargs: dict[str, Any] = {
        "oversample": draw(st.none() | st.integers(0, 4)),
        "adaptive": adaptive,
        "forget": draw(st.sampled_from([1.0, 0.97, 0.5])),
        "center": draw(st.booleans()),
    }
    if adaptive:
        kwargs["holdoff"] = draw(st.integers(1, 3))
        kwargs["max_rank"] = draw(st.none() | st.integers(rank, d))
        kwargs["rank_bounds"] = draw(st.sampled_from([(0.01, 0.10), (0.05, 0.3)]))
    return Config(d, rank, block, kwargs)


# -- get_state / from_state ------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    config=configs(),
    n=st.integers(0, 70),
    split=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32 - 1),
    deficient=st.booleans(),
)
def test_resume_from_state_at_any_split_is_bitwise_identical_to_the_uninterrupted_run(
    config: Config, n: int, split: float, seed: int, deficient: bool
) -> None:
    x = stream(seed, n, config.n_features, deficient)
    k = round(split * n)
    full = config.new().partial_fit(x)
    first = config.new().partial_fit(x[:k])
    resumed = FPCAEdge.from_state(first.get_state()).partial_fit(x[k:])
    assert_states_equal(full, resumed)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"center": True, "forget": 0.9, "oversample": 2},
        {"adaptive": True, "holdoff": 3, "max_rank": 6},
    ],
)
def test_resume_at_every_split_of_a_long_stream(kwargs: dict[str, Any]) -> None:
    x = stream(7, 230, 9)
    full = FPCAEdge(9, 3, 10, **kwargs).partial_fit(x)
    for k in range(0, 231, 7):
        first = FPCAEdge(9, 3, 10, **kwargs).partial_fit(x[:k])
        resumed = FPCAEdge.from_state(first.get_state()).partial_fit(x[k:])
        assert_states_equal(full, resumed)


def test_adaptive_resume_keeps_the_holdoff_counter() -> None:
    # A stream whose rank grows: with holdoff 4 the rank may change only every 4 blocks.
    x = stream(3, 400, 10)
    kwargs = {"adaptive": True, "holdoff": 4, "rank_bounds": (0.05, 0.15)}
    full = FPCAEdge(10, 1, 5, **kwargs).partial_fit(x)
    ranks = FPCAEdge(10, 1, 5, **kwargs)
    history = []
    for start in range(0, 400, 5):
        history.append(ranks.partial_fit(x[start : start + 5]).rank_)
    assert len(set(history)) > 2  # the rank moved, so the counter mattered
    for k in range(5, 400, 15):
        first = FPCAEdge(10, 1, 5, **kwargs).partial_fit(x[:k])
        state = first.get_state()
        assert state["last_rank_change"] == first._last_rank_change
        assert_states_equal(full, FPCAEdge.from_state(state).partial_fit(x[k:]))


def test_get_state_is_a_copy_and_does_not_change_the_estimator() -> None:
    x = stream(1, 57, 8)
    edge = FPCAEdge(8, 2, 10, center=True).partial_fit(x)
    twin = FPCAEdge(8, 2, 10, center=True).partial_fit(x)
    state = edge.get_state()
    assert state["pending"].shape == (7, 8)
    np.testing.assert_array_equal(state["pending"], x[50:])
    for value in state.values():
        if isinstance(value, np.ndarray):
            value.fill(np.nan)
    assert_states_equal(edge, twin)


def test_get_state_has_only_plain_values_and_float64_arrays() -> None:
    state = FPCAEdge(6, 2, 4, center=True).partial_fit(stream(2, 13, 6)).get_state()
    for key, value in state.items():
        if isinstance(value, np.ndarray):
            assert value.dtype == np.float64, key
        else:
            assert value is None or type(value) in (int, float, bool, str), key
    assert state["n_samples_seen_"] == 13
    assert state["n_blocks_"] == 3
    assert state["basis"].shape == (6, 4)
    assert state["mean_weight"] == 12.0


def test_from_state_accepts_read_only_fortran_arrays_and_numpy_scalars() -> None:
    x = stream(4, 44, 7)
    full = FPCAEdge(7, 2, 6, adaptive=True).partial_fit(x)
    state = FPCAEdge(7, 2, 6, adaptive=True).partial_fit(x[:20]).get_state()
    for key, value in list(state.items()):
        if isinstance(value, np.ndarray):
            value = np.asfortranarray(value)
            value.setflags(write=False)
            state[key] = value
        elif isinstance(value, int) and not isinstance(value, bool):
            state[key] = np.int64(value)
    assert_states_equal(full, FPCAEdge.from_state(state).partial_fit(x[20:]))


def test_from_state_ignores_keys_it_does_not_know() -> None:
    state = FPCAEdge(5, 2, 4).partial_fit(stream(5, 9, 5)).get_state()
    state.update(epoch="e1", seq=12, ingested={"s": 9})
    assert FPCAEdge.from_state(state).n_samples_seen_ == 9


def _valid_state(**kwargs: Any) -> dict[str, Any]:
    params = {"center": True, "adaptive": True, **kwargs}
    edge = FPCAEdge(6, 2, 5, **params)
    return edge.partial_fit(stream(6, 23, 6)).get_state()


def _non_orthonormal(state: dict[str, Any]) -> None:
    state["basis"] = state["basis"].copy()
    state["basis"][0, 0] += 1e-7


def _set(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    def mutate(state: dict[str, Any]) -> None:
        state[key] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda s: s.pop("basis"), "basis"),
        (_set("state_format", "FPCAEdge/3"), "state_format"),
        (_set("rank", 0), "rank"),
        (_set("rank", 2.0), "rank"),
        (_set("block_size", True), "block_size"),
        (_set("center", 1), "center"),
        (_set("forget", float("nan")), "forget"),
        (_set("forget", 1.5), "forget"),
        (_set("rank_bounds", np.array([0.3, 0.1])), "rank_bounds"),
        (_set("rank_bounds", np.array([0.1, 0.3, 0.5])), "rank_bounds"),
        (_set("oversample_", 3), "oversample_"),
        (_set("rank_", 6), "rank_"),
        (_set("rank_", 0), "rank_"),
        (lambda s: s.__setitem__("basis", s["basis"].astype(np.float32)), "basis"),
        (lambda s: s.__setitem__("basis", s["basis"][:5]), "basis"),
        (lambda s: s.__setitem__("basis", np.hstack([s["basis"]] * 2)), "basis"),
        (lambda s: s.__setitem__("basis", s["basis"].tolist()), "basis"),
        (lambda s: s.__setitem__("basis", s["basis"] * np.inf), "basis"),
        (_non_orthonormal, "orthonormal"),
        (lambda s: s.__setitem__("singular_values", s["singular_values"][::-1]), "singular"),
        (lambda s: s.__setitem__("singular_values", -s["singular_values"]), "singular"),
        (lambda s: s.__setitem__("singular_values", s["singular_values"][:2]), "singular"),
        (lambda s: s.__setitem__("pending", np.zeros((5, 6))), "pending"),
        (lambda s: s.__setitem__("pending", np.zeros((3, 5))), "pending"),
        (lambda s: s.__setitem__("pending", np.full((3, 6), np.nan)), "pending"),
        (_set("n_samples_seen_", 29), "n_samples_seen_"),
        (_set("n_samples_seen_", -1), "n_samples_seen_"),
        (_set("n_blocks_", 7), "n_samples_seen_"),
        (_set("mean", None), "mean"),
        (_set("mean", np.zeros(5)), "mean"),
        (_set("mean_weight", 21.0), "mean_weight"),
        (_set("mean_weight", None), "mean_weight"),
        (_set("last_rank_change", 9), "last_rank_change"),
        (_set("last_rank_change", -1), "last_rank_change"),
    ],
)
def test_from_state_rejects_an_inconsistent_state_naming_the_field(mutate: Any, field: str) -> None:
    state = _valid_state()
    FPCAEdge.from_state(state)  # valid before the change
    mutate(state)
    with pytest.raises(ValueError, match=field) as info:
        FPCAEdge.from_state(state)
    assert "\n" not in str(info.value)


def test_from_state_rejects_mean_or_holdoff_state_of_a_configuration_without_them() -> None:
    state = FPCAEdge(6, 2, 5).partial_fit(stream(6, 23, 6)).get_state()
    with pytest.raises(ValueError, match="mean"):
        FPCAEdge.from_state({**state, "mean": np.zeros(6)})
    with pytest.raises(ValueError, match="last_rank_change"):
        FPCAEdge.from_state({**state, "last_rank_change": 1})
    with pytest.raises(ValueError, match="rank_"):
        FPCAEdge.from_state({**state, "rank_": 3})


def test_from_state_rejects_an_empty_basis_after_samples_and_a_non_mapping() -> None:
    state = _valid_state()
    state["basis"] = np.zeros((6, 0))
    state["singular_values"] = np.zeros(0)
    with pytest.raises(ValueError, match="basis has 0 directions"):
        FPCAEdge.from_state(state)
    with pytest.raises(ValueError, match="mapping"):
        FPCAEdge.from_state([("rank", 1)])  # type: ignore[arg-type]


def test_state_of_a_fresh_estimator_round_trips() -> None:
    for kwargs in ({}, {"center": True}, {"adaptive": True}):
        fresh = FPCAEdge(4, 1, 3, **kwargs)
        again = FPCAEdge.from_state(fresh.get_state())
        assert_states_equal(fresh, again)
        x = stream(8, 11, 4)
        assert_states_equal(fresh.partial_fit(x), again.partial_fit(x))


# -- from_subspace ------------------------------------------------------------------------------


@st.composite
def gram_d_configs(draw: st.DrawFn) -> Config:
    """Configurations whose updates all use the d x d Gram formulation (d <= block_size)."""
    config = draw(configs(max_features=10))
    block = draw(st.integers(config.n_features, config.n_features + 6))
    kwargs = dict(config.kwargs)
    kwargs["holdoff"] = 1  # the restored estimator does not know when the rank last moved
    return Config(config.n_features, config.rank, block, kwargs)


@settings(max_examples=100, deadline=None)
@given(
    config=gram_d_configs(),
    blocks=st.integers(0, 8),
    extra=st.integers(0, 30),
    seed=st.integers(0, 2**32 - 1),
)
def test_from_subspace_at_a_block_boundary_continues_bitwise_like_the_uninterrupted_run(
    config: Config, blocks: int, extra: int, seed: int
) -> None:
    k = blocks * config.block_size
    x = stream(seed, k + extra, config.n_features)
    full = config.new().partial_fit(x)
    first = config.new().partial_fit(x[:k])
    restored = FPCAEdge.from_subspace(
        first.tracked_subspace,
        rank=config.rank,
        block_size=config.block_size,
        current_rank=first.rank_,
        **config.kwargs,
    )
    assert restored.n_samples_seen_ == k
    assert restored.n_blocks_ == blocks
    resumed = restored.partial_fit(x[k:])
    # The internal states agree bitwise up to the signs of the basis columns (a snapshot's
    # signs are normalised), except the hold-off counter, which restarts.
    state, expected = resumed.get_state(), full.get_state()
    for key in ("basis", "singular_values", "pending", "mean"):
        if key == "basis":
            state[key], expected[key] = flip_signs(state[key]), flip_signs(expected[key])
        if expected[key] is None:
            assert state[key] is None
        else:
            np.testing.assert_array_equal(state[key], expected[key], err_msg=key, strict=True)
    for key in ("rank_", "n_blocks_", "n_samples_seen_", "mean_weight"):
        assert state[key] == expected[key], key
    if extra % config.block_size == 0:
        # Without pending rows the published subspaces are the states': bitwise equal.
        assert_subspaces_equal(full.tracked_subspace, resumed.tracked_subspace)
        assert_subspaces_equal(full.subspace, resumed.subspace)


@pytest.mark.parametrize("kwargs", [{}, {"center": True, "forget": 0.95}])
def test_from_subspace_with_a_wider_space_matches_to_rounding(kwargs: dict[str, Any]) -> None:
    # d > tracked + block: the (t + b) Gram formulation, which sees the normalised signs.
    d, rank, b = 30, 3, 4
    x = stream(11, 200, d)
    full = FPCAEdge(d, rank, b, **kwargs).partial_fit(x)
    for k in (4, 40, 100):
        first = FPCAEdge(d, rank, b, **kwargs).partial_fit(x[:k])
        resumed = FPCAEdge.from_subspace(
            first.tracked_subspace, rank=rank, block_size=b, **kwargs
        ).partial_fit(x[k:])
        a, r = full.subspace, resumed.subspace
        assert principal_angles(a.basis, r.basis).max() < 1e-9
        np.testing.assert_allclose(r.singular_values, a.singular_values, rtol=1e-12)
        assert r.n_samples == a.n_samples


def test_from_subspace_within_a_block_counts_every_sample_and_stays_close() -> None:
    x = stream(12, 300, 8)
    full = FPCAEdge(8, 3, 20, center=True).partial_fit(x)
    first = FPCAEdge(8, 3, 20, center=True).partial_fit(x[:133])
    restored = FPCAEdge.from_subspace(first.tracked_subspace, rank=3, block_size=20, center=True)
    assert (restored.n_samples_seen_, restored.n_blocks_) == (133, 6)
    assert restored.get_state()["pending"].shape == (0, 8)
    np.testing.assert_array_equal(restored.mean_, first.tracked_subspace.mean)
    assert restored._weight == 133.0
    # Its state is a valid one, so it checkpoints and resumes bit-exactly like any other.
    twin = FPCAEdge.from_state(restored.get_state())
    resumed = restored.partial_fit(x[133:])
    assert_states_equal(resumed, twin.partial_fit(x[133:]))
    assert resumed.n_samples_seen_ == 300
    assert resumed.n_blocks_ == 6 + 167 // 20
    assert principal_angles(full.subspace.basis, resumed.subspace.basis).max() < 1e-2
    np.testing.assert_allclose(resumed.subspace.mean, x.mean(axis=0), rtol=0, atol=1e-12)


def test_from_subspace_of_an_empty_snapshot_is_a_fresh_estimator() -> None:
    x = stream(13, 50, 6)
    for kwargs in ({}, {"center": True}):
        fresh = FPCAEdge(6, 2, 7, **kwargs).partial_fit(x)
        restored = FPCAEdge.from_subspace(Subspace.empty(6), rank=2, block_size=7, **kwargs)
        assert_states_equal(fresh, restored.partial_fit(x))


def test_from_subspace_keeps_the_leading_directions_of_a_larger_snapshot() -> None:
    snapshot = FPCAEdge(8, 4, 10).partial_fit(stream(14, 40, 8)).tracked_subspace
    assert snapshot.rank == 8
    restored = FPCAEdge.from_subspace(snapshot, rank=2, block_size=10, oversample=1)
    assert restored.n_tracked_ == 3
    np.testing.assert_array_equal(restored.tracked_subspace.basis, snapshot.basis[:, :3])


def test_from_subspace_rejects_bad_snapshots() -> None:
    good = FPCAEdge(6, 2, 5).partial_fit(stream(15, 20, 6)).tracked_subspace
    centred = FPCAEdge(6, 2, 5, center=True).partial_fit(stream(15, 20, 6)).tracked_subspace
    with pytest.raises(TypeError, match="Subspace"):
        FPCAEdge.from_subspace(good.basis, rank=2, block_size=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="center=False"):
        FPCAEdge.from_subspace(centred, rank=2, block_size=5)
    with pytest.raises(ValueError, match="center=True"):
        FPCAEdge.from_subspace(good, rank=2, block_size=5, center=True)
    skewed = Subspace(good.basis * 1.001, good.singular_values, good.n_samples)
    with pytest.raises(ValueError, match="orthonormal"):
        FPCAEdge.from_subspace(skewed, rank=2, block_size=5)
    increasing = Subspace(good.basis, good.singular_values[::-1], good.n_samples)
    with pytest.raises(ValueError, match="singular_values"):
        FPCAEdge.from_subspace(increasing, rank=2, block_size=5)
    nan_mean = Subspace(centred.basis, centred.singular_values, 20, np.full(6, np.nan))
    with pytest.raises(ValueError, match="mean"):
        FPCAEdge.from_subspace(nan_mean, rank=2, block_size=5, center=True)
    no_samples = Subspace(good.basis, good.singular_values, 0)
    with pytest.raises(ValueError, match="n_samples"):
        FPCAEdge.from_subspace(no_samples, rank=2, block_size=5)
    with pytest.raises(ValueError, match="rank"):
        FPCAEdge.from_subspace(good, rank=7, block_size=5)
    with pytest.raises(ValueError, match="current_rank"):
        FPCAEdge.from_subspace(good, rank=2, block_size=5, current_rank=3)
    with pytest.raises(ValueError, match="current_rank"):
        FPCAEdge.from_subspace(good, rank=2, block_size=5, adaptive=True, current_rank=6)
    with pytest.raises(ValueError, match="current_rank"):
        FPCAEdge.from_subspace(good, rank=2, block_size=5, adaptive=True, current_rank=0)


def test_a_rank_change_at_a_flush_before_the_first_full_block_round_trips() -> None:
    """Adaptive rank may grow at a `flush` of a short first block (n_blocks_ still 0); the
    state records last_rank_change 0, and `from_state` restores it and continues alike."""
    rows = stream(3, 30, 10)
    est = FPCAEdge(10, 2, 100, adaptive=True).partial_fit(rows).flush()
    assert (est.n_blocks_, est._last_rank_change) == (0, 0) and est.rank_ > 2
    back = FPCAEdge.from_state(est.get_state())
    assert back._last_rank_change == 0
    more = stream(4, 250, 10)
    np.testing.assert_array_equal(
        back.partial_fit(more).get_state()["basis"], est.partial_fit(more).get_state()["basis"]
    )
