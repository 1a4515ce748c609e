"""Tests of the streaming PCA baselines in `benchmarks.baselines` (comparison only).

Each baseline must recover a planted subspace, return an orthonormal basis, accept any
chunking and reset on `fit`; the algorithm-specific tests check the papers' claims:
the Frequent Directions bounds (Liberty 2013; Ghashami et al. 2016), the convergence of
the block power method (Mitliagkas et al. 2013) on a gapped spectrum, SPIRIT's tracking
of a subspace that changes (Papadimitriou et al. 2005), GROUSE's scale invariance with
normalised steps, and that the IncrementalPCA wrapper is exactly scikit-learn's.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import benchmarks.baselines as baselines_pkg
from benchmarks.baselines import (
    ALL_BASELINES,
    GROUSE,
    SPIRIT,
    BlockPower,
    FrequentDirections,
    IncrementalPCA,
)
from edge_runtime.fpca import error_ratio, offline_subspace, principal_angles

D, RANK, N = 30, 5, 3000

#: Largest principal angle (radians) to the planted subspace each baseline must reach
#: on `planted` data with the default parameters. The noise floor (the offline SVD's
#: own angle) is about 1e-3 rad; a method that fails to converge stays near pi / 2.
PLANTED_ANGLE_BOUND = {
    GROUSE: 1e-2,
    FrequentDirections: 3e-3,
    BlockPower: 5e-2,
    SPIRIT: 3e-2,
    IncrementalPCA: 3e-3,
}


@pytest.fixture(autouse=True)
def _one_blas_thread() -> Iterator[None]:
    """Small matrices: one BLAS thread is faster, and immune to a busy second core."""
    with threadpool_limits(limits=1):
        yield


def planted(
    seed: int, n: int = N, d: int = D, rank: int = RANK, noise: float = 0.01
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` samples of a random ``rank``-dim subspace (scales 3 .. 1) plus isotropic noise.

    Returns the ``(n, d)`` samples and the ``(d, rank)`` orthonormal planted basis.
    """
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(d, rank)))[0]
    x = (rng.normal(size=(n, rank)) * np.linspace(3.0, 1.0, rank)) @ basis.T
    return x + noise * rng.normal(size=(n, d)), basis


def make(cls: type, n_features: int = D, rank: int = RANK, **params: object):
    """An instance of baseline ``cls``; skips the test if scikit-learn is missing."""
    if cls is IncrementalPCA:
        pytest.importorskip("sklearn")
    return cls(n_features, rank, **params)


def assert_orthonormal(basis: np.ndarray, shape: tuple[int, int]) -> None:
    assert basis.shape == shape
    assert basis.dtype == np.float64
    np.testing.assert_allclose(basis.T @ basis, np.eye(shape[1]), atol=1e-12)


def test_package_exports_exactly_the_five_baselines() -> None:
    assert set(baselines_pkg.__all__) == {
        "ALL_BASELINES",
        "GROUSE",
        "SPIRIT",
        "BlockPower",
        "FrequentDirections",
        "IncrementalPCA",
    }
    assert (GROUSE, FrequentDirections, BlockPower, SPIRIT, IncrementalPCA) == ALL_BASELINES
    assert len({cls.name for cls in ALL_BASELINES}) == len(ALL_BASELINES)
    assert [cls.centers for cls in ALL_BASELINES] == [False, False, False, False, True]


@pytest.mark.parametrize("cls", ALL_BASELINES, ids=lambda cls: cls.name)
def test_baseline_recovers_a_planted_subspace(cls: type) -> None:
    x, truth = planted(seed=101)
    est = make(cls).fit(x)
    angle = principal_angles(est.basis, truth).max()
    assert angle < PLANTED_ANGLE_BOUND[cls], f"{cls.name}: largest angle {angle:.2e} rad"
    assert est.n_samples_seen_ == N


@pytest.mark.parametrize("cls", ALL_BASELINES, ids=lambda cls: cls.name)
def test_basis_is_orthonormal_before_and_after_data(cls: type) -> None:
    est = make(cls)
    assert_orthonormal(est.basis, (D, RANK))
    x, _ = planted(seed=102, n=777)
    est.partial_fit(x)
    assert_orthonormal(est.basis, (D, RANK))
    assert isinstance(est.n_tracked, int) and est.n_tracked >= RANK


@pytest.mark.parametrize("cls", ALL_BASELINES, ids=lambda cls: cls.name)
def test_any_chunking_gives_the_same_basis_as_one_call(cls: type) -> None:
    x, _ = planted(seed=103, n=1234)
    whole = make(cls).partial_fit(x)
    chunked = make(cls)
    rng = np.random.default_rng(5)
    cuts = np.sort(rng.choice(np.arange(1, x.shape[0]), size=40, replace=False))
    for part in np.split(x, cuts):  # sizes from 1 to ~100 rows, not aligned to blocks
        chunked.partial_fit(part)
    chunked.partial_fit(x[:0])  # an empty chunk is a no-op
    assert chunked.n_samples_seen_ == whole.n_samples_seen_ == x.shape[0]
    if cls is BlockPower:  # block sums are accumulated per chunk: equal up to rounding
        np.testing.assert_allclose(chunked.basis, whole.basis, atol=1e-12)
    else:
        np.testing.assert_array_equal(chunked.basis, whole.basis)


@pytest.mark.parametrize("cls", ALL_BASELINES, ids=lambda cls: cls.name)
def test_fit_forgets_earlier_samples(cls: type) -> None:
    x, _ = planted(seed=104, n=600)
    other, _ = planted(seed=105, n=400)
    fresh = make(cls).fit(x)
    reused = make(cls).partial_fit(other).fit(x)
    np.testing.assert_array_equal(reused.basis, fresh.basis)
    assert reused.n_samples_seen_ == x.shape[0]


@pytest.mark.parametrize("cls", ALL_BASELINES, ids=lambda cls: cls.name)
def test_samples_with_the_wrong_width_or_non_finite_values_are_rejected(cls: type) -> None:
    est = make(cls)
    with pytest.raises(ValueError, match=rf"shape \(n_samples, {D}\)"):
        est.partial_fit(np.zeros((3, D + 1)))
    bad = np.zeros((3, D))
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity"):
        est.partial_fit(bad)
    with pytest.raises(TypeError, match="numeric"):
        est.partial_fit([["a"] * D])
    assert est.n_samples_seen_ == 0


@pytest.mark.parametrize("cls", ALL_BASELINES, ids=lambda cls: cls.name)
def test_rank_above_n_features_is_rejected(cls: type) -> None:
    with pytest.raises(ValueError, match="exceeds n_features"):
        make(cls, n_features=4, rank=5)


# --- Frequent Directions -------------------------------------------------------------


@pytest.mark.parametrize("variant", ["fast", "exact"])
@pytest.mark.parametrize("ell", [1, 3, 8, 20])
def test_frequent_directions_covariance_error_is_at_most_frobenius_norm_over_ell(
    variant: str, ell: int
) -> None:
    # Liberty (2013) Thm. 1.1 / Ghashami et al. (2016) Thm. 3.1 with k = 0.
    rng = np.random.default_rng(ell)
    a = rng.normal(size=(500, 25)) * np.geomspace(5.0, 0.2, 25)
    fd = FrequentDirections(25, rank=1, ell=ell, variant=variant).fit(a)
    b = fd.sketch
    err = np.linalg.norm(a.T @ a - b.T @ b, 2)
    bound = np.sum(a**2) / ell
    assert err <= bound * (1 + 1e-12)
    assert b.shape[0] <= (2 * ell if variant == "fast" else ell)
    assert fd.n_shrinks_ > 0  # the bound was exercised, not met by storing every row


@pytest.mark.parametrize("variant", ["fast", "exact"])
def test_frequent_directions_projection_error_is_within_ell_over_ell_minus_rank(
    variant: str,
) -> None:
    # Ghashami et al. (2016) Thm. 3.1: ||A - A pi_{B_k}||_F^2 <= ell / (ell - k) ||A - A_k||_F^2.
    rng = np.random.default_rng(7)
    a = rng.normal(size=(2000, 40)) * np.geomspace(3.0, 0.3, 40)
    for rank, ell in [(2, 3), (5, 10), (10, 12)]:
        fd = FrequentDirections(40, rank, ell=ell, variant=variant).fit(a)
        assert error_ratio(a, fd.basis) <= ell / (ell - rank)


def test_frequent_directions_keeps_every_row_until_the_sketch_is_full() -> None:
    a = np.random.default_rng(8).normal(size=(7, 12))
    fd = FrequentDirections(12, rank=2, ell=4).fit(a)  # fast: 8 rows before a shrink
    assert fd.n_shrinks_ == 0
    np.testing.assert_array_equal(fd.sketch, a)
    assert fd.n_tracked == 4


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        ("fast", 16.0 - 9.0),  # one shrink of all four rows by s_2^2 = 9
        ("exact", 16.0 - 9.0 - 4.0 - 1.0),  # a shrink per row from the second on
    ],
)
def test_frequent_directions_shrinks_by_the_ell_th_squared_singular_value(
    variant: str, expected: float
) -> None:
    rows = np.diag([4.0, 3.0, 2.0, 1.0])  # orthogonal rows: singular values 4, 3, 2, 1
    fd = FrequentDirections(4, rank=1, ell=2, variant=variant).fit(rows)
    b = fd.sketch
    np.testing.assert_allclose(b.T @ b, np.diag([expected, 0.0, 0.0, 0.0]), atol=1e-12)


def test_frequent_directions_default_sketch_has_twice_the_rank() -> None:
    assert FrequentDirections(30, 7).ell == 14
    with pytest.raises(ValueError, match="ell must be >= rank"):
        FrequentDirections(30, 7, ell=6)
    with pytest.raises(ValueError, match="variant"):
        FrequentDirections(30, 7, variant="slow")


# --- Block power method --------------------------------------------------------------


def test_block_power_converges_on_a_gapped_spectrum() -> None:
    rng = np.random.default_rng(9)
    d, rank, block = 20, 3, 800
    truth = np.linalg.qr(rng.normal(size=(d, d)))[0]
    scales = np.array([3.0, 2.5, 2.0] + [1.0] * (d - 3))  # gap: variance 4 -> 1
    bp = BlockPower(d, rank, block_size=block)
    angles, one_block_svd = [], []
    for _ in range(12):  # 12 blocks of fresh samples
        x = (rng.normal(size=(block, d)) * scales) @ truth.T
        bp.partial_fit(x)
        angles.append(principal_angles(bp.basis, truth[:, :rank]).max())
        one_block_svd.append(
            principal_angles(offline_subspace(x, rank).basis, truth[:, :rank]).max()
        )
    assert bp.n_blocks_ == 12
    assert angles[0] > 0.5  # one iteration from a random start is far off ...
    # ... and the iterations converge to the sampling noise of one block's covariance.
    assert max(angles[-4:]) < 1.5 * float(np.median(one_block_svd))


def test_block_power_on_a_repeated_block_is_the_classical_power_method() -> None:
    # The same block each time: Q <- QR(C Q) with C = X^T X / B converges to the top
    # eigenvectors of C at the rate (lambda_4 / lambda_3) ** iterations.
    rng = np.random.default_rng(10)
    block = rng.normal(size=(50, 12)) * np.array([4.0, 3.0, 2.5] + [1.0] * 9)
    bp = BlockPower(12, 3, block_size=50)
    for _ in range(80):
        bp.partial_fit(block)
    exact = offline_subspace(block, 3).basis
    assert principal_angles(bp.basis, exact).max() < 1e-8


def test_block_power_uses_only_complete_blocks() -> None:
    x, _ = planted(seed=11, n=250)
    bp = BlockPower(D, RANK, block_size=100).partial_fit(x[:200])
    after_two_blocks = bp.basis
    bp.partial_fit(x[200:250])
    assert bp.n_blocks_ == 2 and bp.n_samples_seen_ == 250
    np.testing.assert_array_equal(bp.basis, after_two_blocks)


def test_block_power_default_block_is_n_features_and_seeded() -> None:
    assert BlockPower(48, 10).block_size == 48
    assert BlockPower(8, 10 - 2).block_size == 8
    x, _ = planted(seed=12, n=300)
    same = [BlockPower(D, RANK, seed=3).fit(x).basis for _ in range(2)]
    np.testing.assert_array_equal(same[0], same[1])
    assert not np.array_equal(BlockPower(D, RANK, seed=4).basis, BlockPower(D, RANK, seed=3).basis)


# --- SPIRIT ----------------------------------------------------------------------------


def test_spirit_tracks_a_planted_subspace_after_it_changes() -> None:
    first, u1 = planted(seed=13, n=1500, d=20, rank=3)
    second, u2 = planted(seed=14, n=1500, d=20, rank=3)
    sp = SPIRIT(20, 3).fit(first)  # forget = 0.96, the paper's value
    assert principal_angles(sp.basis, u1).max() < 0.03
    assert principal_angles(sp.basis, u2).max() > 0.5  # unrelated random subspaces
    sp.partial_fit(second[:300])
    assert principal_angles(sp.basis, u2).max() < 0.03


def test_spirit_without_forgetting_stays_with_the_first_subspace() -> None:
    first, _ = planted(seed=13, n=1500, d=20, rank=3)
    second, u2 = planted(seed=14, n=1500, d=20, rank=3)
    sp = SPIRIT(20, 3, forget=1.0).fit(first).partial_fit(second[:300])
    assert principal_angles(sp.basis, u2).max() > 0.5


def test_spirit_weights_are_only_approximately_orthonormal_but_span_the_basis() -> None:
    x, _ = planted(seed=15, n=500)
    sp = SPIRIT(D, RANK).fit(x)
    w = sp.weights
    gram_error = np.abs(w.T @ w - np.eye(RANK)).max()
    assert 1e-12 < gram_error < 0.5
    assert principal_angles(w, sp.basis).max() < 1e-10
    with pytest.raises(ValueError, match="forget"):
        SPIRIT(D, RANK, forget=1.5)


# --- GROUSE ----------------------------------------------------------------------------


def test_grouse_step_rotates_the_span_towards_the_sample_by_theta() -> None:
    # Rank 1, first sample (t = 1, normalised by ||x||^2): theta = eta sin(phi) cos(phi)
    # with phi the angle between x and span(U); the new span is in span(U, x).
    g = GROUSE(6, 1, eta=1.0)
    before = g.basis[:, 0]
    x = np.random.default_rng(20).normal(size=6)
    phi = principal_angles(before[:, None], x[:, None])[0]
    after = g.partial_fit(x).basis[:, 0]
    moved = principal_angles(before[:, None], after[:, None])[0]
    np.testing.assert_allclose(moved, np.sin(phi) * np.cos(phi), rtol=1e-10)
    in_plane = np.linalg.lstsq(np.column_stack([before, x]), after, rcond=None)[1]
    assert in_plane[0] < 1e-20  # squared residual of after in span(before, x)
    closer = principal_angles(after[:, None], x[:, None])[0]
    np.testing.assert_allclose(closer, phi - moved, rtol=1e-10)


def test_grouse_with_normalised_steps_ignores_the_scale_of_the_data() -> None:
    x, _ = planted(seed=16, n=1000)
    small = GROUSE(D, RANK).fit(x)
    large = GROUSE(D, RANK).fit(1e4 * x)
    np.testing.assert_allclose(large.basis, small.basis, atol=1e-8)
    raw_small = GROUSE(D, RANK, normalize=False, eta=10.0).fit(x)
    raw_large = GROUSE(D, RANK, normalize=False, eta=10.0).fit(1e4 * x)
    assert principal_angles(raw_small.basis, raw_large.basis).max() > 0.1
    assert raw_large.n_skipped_ > 0  # theta >= pi / 2 on the large data: steps dropped


def test_grouse_with_a_constant_step_follows_a_subspace_change() -> None:
    first, u1 = planted(seed=17, n=1500, d=20, rank=3)
    second, u2 = planted(seed=18, n=1500, d=20, rank=3)
    g = GROUSE(20, 3, eta=0.3, schedule="constant").fit(first)
    assert principal_angles(g.basis, u1).max() < 0.05
    g.partial_fit(second)
    assert principal_angles(g.basis, u2).max() < 0.05


def test_grouse_rejects_bad_step_parameters() -> None:
    with pytest.raises(ValueError, match="eta"):
        GROUSE(D, RANK, eta=0.0)
    with pytest.raises(ValueError, match="schedule"):
        GROUSE(D, RANK, schedule="sqrt")


# --- IncrementalPCA --------------------------------------------------------------------


def test_incremental_pca_wrapper_equals_sklearn_on_the_same_batches() -> None:
    sklearn_decomposition = pytest.importorskip("sklearn.decomposition")
    x, _ = planted(seed=19, n=1037)
    ours = IncrementalPCA(D, RANK, batch_size=50)
    for part in np.array_split(x, 7):  # chunks not aligned to the batches
        ours.partial_fit(part)
    ref = sklearn_decomposition.IncrementalPCA(n_components=RANK)
    for start in range(0, 1000, 50):  # only complete batches: 37 rows are pending
        ref.partial_fit(x[start : start + 50])
    np.testing.assert_array_equal(ours.basis, ref.components_.T)
    assert ours.estimator_.n_samples_seen_ == 1000 and ours.n_samples_seen_ == 1037


def test_incremental_pca_centres_and_has_identity_basis_before_the_first_batch() -> None:
    pytest.importorskip("sklearn")
    ipca = IncrementalPCA(D, RANK)
    assert ipca.centers is True and ipca.batch_size == 50
    ipca.partial_fit(np.ones((10, D)))
    np.testing.assert_array_equal(ipca.basis, np.eye(D, RANK))
    with pytest.raises(ValueError, match="batch_size must be >= rank"):
        IncrementalPCA(D, RANK, batch_size=RANK - 1)
