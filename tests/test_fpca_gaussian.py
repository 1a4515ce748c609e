"""FPCAEdge with the Gaussian mechanism (issue 10): the estimator around `PrivateGram`."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import FPCAEdge, error_ratio, merge_many
from edge_runtime.fpca.privacy import gaussian_default_block_size
from edge_runtime.fpca.private_gram import release_noise_std


def _released(edge: FPCAEdge) -> np.ndarray:
    """The public snapshot as a unit-ball Gram matrix, ``U diag(s**2) U^T / C**2``."""
    snap = edge.tracked_subspace
    assert edge.clip_norm is not None
    scaled = snap.basis * (snap.singular_values / edge.clip_norm)
    return scaled @ scaled.T


def test_snapshot_is_the_psd_part_of_the_released_gram_with_calibrated_noise() -> None:
    """With every direction tracked, the snapshot is the release with negative eigenvalues
    set to zero; the release minus the exact Gram has the calibrated variance."""
    d, k, clip = 6, 40, 2.0
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(k, d))
    unit = rows / np.maximum(np.linalg.norm(rows, axis=1), clip)[:, None]
    exact = unit.T @ unit
    sigma = release_noise_std(1.0, 1e-5)
    diag, off = [], []
    for seed in range(300):
        edge = FPCAEdge(d, d, k, privacy=(1.0, 1e-5), clip_norm=clip, random_state=seed)
        edge.partial_fit(rows)
        released = edge._gram.released  # type: ignore[union-attr]
        values, vectors = np.linalg.eigh(released)
        psd = (vectors * np.maximum(values, 0.0)) @ vectors.T
        np.testing.assert_allclose(_released(edge), psd, atol=1e-9 * np.abs(psd).max())
        noise = released - exact
        assert np.allclose(noise, noise.T)
        diag.extend(np.diag(noise))
        off.extend(noise[np.triu_indices(d, 1)])
    assert edge.last_noise_std_ == pytest.approx(sigma)
    # 1800 diagonal and 4500 off-diagonal draws: variances sigma^2 and sigma^2 / 2 within 10 %
    # (relative std of a sample variance: sqrt(2 / n) = 3.3 % and 2.1 %).
    assert np.var(diag) / sigma**2 == pytest.approx(1.0, rel=0.1)
    assert np.var(off) / (sigma**2 / 2) == pytest.approx(1.0, rel=0.1)


def test_reset_and_fit_start_a_fresh_released_sum() -> None:
    x = np.zeros((20, 4))
    x[:, 0] = 1.0
    y = np.zeros((20, 4))
    y[:, 3] = 1.0
    edge = FPCAEdge(4, 1, 10, privacy=(1e6, 0.1), clip_norm=1.0, random_state=0).partial_fit(x)
    edge.fit(y)
    assert abs(edge.subspace.basis[3, 0]) > 0.999
    assert edge._gram.releases == 2  # type: ignore[union-attr]
    assert edge.n_releases_ == 4  # the ledger counts every release ever made


def test_clipped_samples_and_releases_are_counted_and_raw_rows_not_kept() -> None:
    x = np.ones((25, 4))  # norm 2
    x[::5] *= 10.0  # 5 rows of norm 20
    edge = FPCAEdge(4, 2, 10, privacy=(1.0, 1e-5), clip_norm=3.0, random_state=0)
    edge.partial_fit(x)
    assert (edge.n_releases_, edge.n_clipped_, edge.n_pending_) == (2, 4, 5)
    assert edge.subspace.n_samples == 20  # pending rows are never in a private snapshot
    edge.flush()
    assert (edge.n_releases_, edge.n_clipped_, edge.n_flushed_) == (3, 5, 5)
    assert not np.any(edge.get_state()["pending"])


@pytest.mark.parametrize("horizon", [1, 8])
def test_checkpoint_restore_closes_the_segment_and_never_reuses_its_key(horizon: int) -> None:
    """A restored estimator starts from the saved release but never draws noise from the
    saved key again: the process that wrote the checkpoint may have released later blocks
    with it, and other readings under the same noise would let it cancel."""
    x = np.random.default_rng(5).normal(size=(70, 5))
    first = FPCAEdge(5, 2, 10, privacy=(2.0, 1e-6), clip_norm=3.0, horizon=horizon, random_state=1)
    first.partial_fit(x[:35])
    state = first.get_state()
    assert state["mechanism"] == "gaussian" and state["horizon"] == horizon
    resumed = FPCAEdge.from_state(state, random_state=77).partial_fit(x[35:60])
    first.partial_fit(x[35:60])  # blocks 4-6: in the open segment when horizon = 8
    assert not np.array_equal(resumed.subspace.singular_values, first.subspace.singular_values)
    restored = FPCAEdge.from_state(state)
    np.testing.assert_array_equal(restored._gram.released, state["gram_released"])  # type: ignore[union-attr]
    assert restored._gram.get_state()["gram_step"] == 0  # type: ignore[union-attr]
    assert not np.array_equal(restored._gram.get_state()["gram_key"], state["gram_key"])  # type: ignore[union-attr]
    assert (resumed.n_releases_, resumed.n_samples_seen_) == (first.n_releases_, 60)


def test_state_of_another_mechanism_or_a_bad_gram_is_refused() -> None:
    edge = FPCAEdge(4, 2, 10, privacy=(1.0, 1e-5), clip_norm=1.0, random_state=0)
    edge.partial_fit(np.ones((10, 4)))
    state = edge.get_state()
    bad = dict(state, gram_open=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="gram_open"):
        FPCAEdge.from_state(bad)
    with pytest.raises(ValueError, match="mechanism"):
        FPCAEdge.from_state(dict(state, mechanism="laplace"))
    old = {k: v for k, v in state.items() if not k.startswith("gram_")}
    del old["mechanism"]  # an FPCAEdge/2 state before issue 10: eq. (8)
    assert FPCAEdge.from_state(old).mechanism == "fpca-eq8"


def test_from_subspace_restarts_the_released_sum_from_the_snapshot() -> None:
    x = np.random.default_rng(9).normal(size=(40, 6))
    edge = FPCAEdge(6, 6, 20, privacy=(1.0, 1e-5), clip_norm=4.0, random_state=2).partial_fit(x)
    snap = edge.tracked_subspace
    resumed = FPCAEdge.from_subspace(
        snap, rank=6, block_size=20, privacy=(1.0, 1e-5), clip_norm=4.0, random_state=3
    )
    np.testing.assert_allclose(
        resumed._gram.released,  # type: ignore[union-attr]
        _released(edge),
        atol=1e-12 * np.abs(_released(edge)).max(),
    )
    assert resumed.n_samples_seen_ == 40 and resumed.mechanism == "gaussian"


def test_default_block_size_bounds_the_noise_spectrum_by_a_tenth_of_the_block() -> None:
    size = gaussian_default_block_size(1.0, 1e-5, 48)
    spectral = np.sqrt(2.0) * release_noise_std(1.0, 1e-5) * np.sqrt(48)
    assert spectral / size <= 0.1 < spectral / (size - 1)
    assert FPCAEdge(48, 10, privacy=(1.0, 1e-5), clip_norm=1.0).block_size == size == 517
    # Measured on the real noise: the spectral norm of 20 symmetrised releases is within
    # 10 % of the semicircle-law value the rule uses.
    rng = np.random.default_rng(0)
    sigma = release_noise_std(1.0, 1e-5)
    norms = []
    for _ in range(20):
        w = rng.normal(scale=sigma, size=(48, 48))
        norms.append(np.linalg.norm((w + w.T) / 2, 2))
    assert np.median(norms) == pytest.approx(spectral, rel=0.1)


def test_gaussian_is_far_more_accurate_than_eq8_on_motes() -> None:
    """Motes light, 8 leaves, eps 1, delta 1e-5, clip 8230, rank 10, one release per leaf:
    the median root error ratio over 10 seeds is below 3.3 (the Done-when median over 20
    seeds is <= 3.0, measured in benchmarks/ section (f)), while eq. (8) is no better than
    a random subspace (error ratio about 24)."""
    data = load_dataset("motes-light").data
    parts = np.array_split(data, 8)

    def root_error(mechanism: str, block: int, seed: int) -> float:
        leaves = [
            FPCAEdge(
                48, 10, block, privacy=(1.0, 1e-5), clip_norm=8230.0,
                mechanism=mechanism, random_state=seed * 100 + i,
            ).partial_fit(part).flush().tracked_subspace
            for i, part in enumerate(parts)
        ]  # fmt: skip
        sites = [merge_many(leaves[:4], rank=20), merge_many(leaves[4:], rank=20)]
        return error_ratio(data, merge_many(sites, rank=10).basis)

    with threadpool_limits(limits=1, user_api="blas"):
        gaussian = [root_error("gaussian", 964, seed) for seed in range(10)]
        eq8 = [root_error("fpca-eq8", 241, seed) for seed in range(3)]
    assert np.median(gaussian) < 3.3
    assert min(eq8) > 15.0
