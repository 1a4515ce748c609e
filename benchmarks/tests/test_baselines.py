"""The streaming PCA baselines: each recovers a planted subspace with an orthonormal basis under
any chunking, and each meets its paper's claims (Frequent Directions' bounds, the block power
method's convergence, SPIRIT's and GROUSE's tracking, IncrementalPCA equal to scikit-learn's)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import benchmarks.baselines as baselines_pkg
from benchmarks.baselines import ALL_BASELINES, GROUSE, SPIRIT, BlockPower, IncrementalPCA
from edge_runtime.fpca import error_ratio, offline_subspace, principal_angles

D, RANK, N = 30, 5, 3000
FD = baselines_pkg.FrequentDirections
#: Largest angle (rad) to the planted subspace at the defaults; the noise floor is ~1e-3.
PLANTED_ANGLE_BOUND = {
    GROUSE: 1e-2, FD: 3e-3, BlockPower: 5e-2, SPIRIT: 3e-2, IncrementalPCA: 3e-3,
}  # fmt: skip
each = pytest.mark.parametrize("cls", ALL_BASELINES, ids=lambda cls: cls.name)


@pytest.fixture(autouse=True)
def _one_blas_thread() -> Iterator[None]:
    with threadpool_limits(limits=1):
        yield


def planted(seed: int, n: int = N, d: int = D, rank: int = RANK) -> tuple[np.ndarray, np.ndarray]:
    """``(n, d)`` samples of a random ``rank``-dim subspace (scales 3 .. 1) plus noise 0.01,
    and the ``(d, rank)`` planted basis."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(d, rank)))[0]
    x = (rng.normal(size=(n, rank)) * np.linspace(3.0, 1.0, rank)) @ basis.T
    return x + 0.01 * rng.normal(size=(n, d)), basis


def make(cls: type, n_features: int = D, rank: int = RANK, **params: object):
    if cls is IncrementalPCA:
        pytest.importorskip("sklearn")
    return cls(n_features, rank, **params)


def angle(a: np.ndarray, b: np.ndarray) -> float:
    return float(principal_angles(a, b).max())


def test_package_exports_exactly_the_five_baselines() -> None:
    assert set(baselines_pkg.__all__) == {"ALL_BASELINES", *(c.__name__ for c in ALL_BASELINES)}
    assert (GROUSE, FD, BlockPower, SPIRIT, IncrementalPCA) == ALL_BASELINES
    assert len({cls.name for cls in ALL_BASELINES}) == len(ALL_BASELINES)
    assert [cls.centers for cls in ALL_BASELINES] == [False, False, False, False, True]


@each
def test_baseline_recovers_a_planted_subspace_with_an_orthonormal_basis(cls: type) -> None:
    est = make(cls)
    for basis in (est.basis, est.fit(planted(seed=101)[0]).basis):
        assert basis.shape == (D, RANK) and basis.dtype == np.float64
        np.testing.assert_allclose(basis.T @ basis, np.eye(RANK), atol=1e-12)
    assert angle(est.basis, planted(seed=101)[1]) < PLANTED_ANGLE_BOUND[cls]
    assert est.n_samples_seen_ == N and isinstance(est.n_tracked, int) and est.n_tracked >= RANK


@each
def test_any_chunking_gives_the_same_basis_and_fit_forgets(cls: type) -> None:
    x, _ = planted(seed=103, n=1234)
    whole, chunked = make(cls).partial_fit(x), make(cls)
    cuts = np.sort(np.random.default_rng(5).choice(np.arange(1, len(x)), size=40, replace=False))
    for part in [*np.split(x, cuts), x[:0]]:  # 1 to ~100 rows, unaligned; then an empty one
        chunked.partial_fit(part)
    assert chunked.n_samples_seen_ == whole.n_samples_seen_ == x.shape[0]
    # BlockPower accumulates its block sums per chunk: equal up to rounding
    np.testing.assert_allclose(chunked.basis, whole.basis, rtol=0, atol=1e-12 * (cls is BlockPower))
    reused = make(cls).partial_fit(planted(seed=105, n=400)[0]).fit(x[:600])
    np.testing.assert_array_equal(reused.basis, make(cls).fit(x[:600]).basis)
    assert reused.n_samples_seen_ == 600


@each
def test_bad_samples_and_a_rank_above_n_features_are_rejected(cls: type) -> None:
    est, bad = make(cls), np.zeros((3, D))
    bad[1, 2] = np.nan
    for x, error, match in [
        (np.zeros((3, D + 1)), ValueError, rf"shape \(n_samples, {D}\)"),
        (bad, ValueError, "NaN or infinity"),
        ([["a"] * D], TypeError, "numeric"),
    ]:
        with pytest.raises(error, match=match):
            est.partial_fit(x)
    assert est.n_samples_seen_ == 0
    with pytest.raises(ValueError, match="exceeds n_features"):
        make(cls, n_features=4, rank=5)


@pytest.mark.parametrize("variant", ["fast", "exact"])
@pytest.mark.parametrize("ell", [1, 3, 8, 20])
def test_frequent_directions_covariance_error_is_at_most_frobenius_norm_over_ell(
    variant: str, ell: int
) -> None:  # Liberty (2013) Thm. 1.1 / Ghashami et al. (2016) Thm. 3.1 with k = 0
    a = np.random.default_rng(ell).normal(size=(500, 25)) * np.geomspace(5.0, 0.2, 25)
    fd = FD(25, rank=1, ell=ell, variant=variant).fit(a)
    b = fd.sketch
    assert np.linalg.norm(a.T @ a - b.T @ b, 2) <= np.sum(a**2) / ell * (1 + 1e-12)
    assert b.shape[0] <= (2 * ell if variant == "fast" else ell)
    assert fd.n_shrinks_ > 0  # the bound was exercised, not met by storing every row


@pytest.mark.parametrize("variant", ["fast", "exact"])
def test_frequent_directions_projection_error_is_within_ell_over_ell_minus_rank(variant) -> None:
    a = np.random.default_rng(7).normal(size=(2000, 40)) * np.geomspace(3.0, 0.3, 40)
    for rank, ell in [(2, 3), (5, 10), (10, 12)]:  # Ghashami et al. (2016) Thm. 3.1
        assert error_ratio(a, FD(40, rank, ell=ell, variant=variant).fit(a).basis) <= ell / (
            ell - rank
        )


@pytest.mark.parametrize(
    ("variant", "expected"),
    [("fast", 16.0 - 9.0), ("exact", 16.0 - 9.0 - 4.0 - 1.0)],  # one shrink; one per row
)
def test_frequent_directions_shrinks_by_the_ell_th_squared_singular_value(variant, expected):
    b = FD(4, rank=1, ell=2, variant=variant).fit(np.diag([4.0, 3.0, 2.0, 1.0])).sketch
    np.testing.assert_allclose(b.T @ b, np.diag([expected, 0.0, 0.0, 0.0]), atol=1e-12)


def test_frequent_directions_keeps_every_row_until_full_and_defaults_to_twice_the_rank():
    a = np.random.default_rng(8).normal(size=(7, 12))
    fd = FD(12, rank=2, ell=4).fit(a)  # fast: 8 rows before a shrink
    assert fd.n_shrinks_ == 0 and fd.n_tracked == 4 and FD(30, 7).ell == 14
    np.testing.assert_array_equal(fd.sketch, a)
    for kwargs, match in [({"ell": 6}, "ell must be >= rank"), ({"variant": "slow"}, "variant")]:
        with pytest.raises(ValueError, match=match):
            FD(30, 7, **kwargs)


def test_block_power_converges_on_a_gapped_spectrum() -> None:
    rng = np.random.default_rng(9)
    d, rank, block = 20, 3, 800
    truth = np.linalg.qr(rng.normal(size=(d, d)))[0]
    scales = np.array([3.0, 2.5, 2.0] + [1.0] * (d - 3))  # gap: variance 4 -> 1
    bp, angles, one_block_svd = BlockPower(d, rank, block_size=block), [], []
    for _ in range(12):  # 12 blocks of fresh samples
        x = (rng.normal(size=(block, d)) * scales) @ truth.T
        angles.append(angle(bp.partial_fit(x).basis, truth[:, :rank]))
        one_block_svd.append(angle(offline_subspace(x, rank).basis, truth[:, :rank]))
    assert bp.n_blocks_ == 12 and angles[0] > 0.5  # one iteration from random is far off ...
    assert max(angles[-4:]) < 1.5 * float(np.median(one_block_svd))  # ... then sampling noise


def test_block_power_on_a_repeated_block_is_the_classical_power_method() -> None:
    block = np.random.default_rng(10).normal(size=(50, 12)) * np.array([4, 3, 2.5] + [1.0] * 9)
    bp = BlockPower(12, 3, block_size=50)
    for _ in range(80):  # Q <- QR(C Q): rate (lambda_4 / lambda_3) ** iterations
        bp.partial_fit(block)
    assert angle(bp.basis, offline_subspace(block, 3).basis) < 1e-8


def test_block_power_uses_only_complete_blocks_and_defaults_to_n_features_seeded() -> None:
    x, _ = planted(seed=11, n=300)
    bp = BlockPower(D, RANK, block_size=100).partial_fit(x[:200])
    after_two_blocks = bp.basis
    bp.partial_fit(x[200:250])
    assert bp.n_blocks_ == 2 and bp.n_samples_seen_ == 250
    np.testing.assert_array_equal(bp.basis, after_two_blocks)
    assert BlockPower(48, 10).block_size == 48 and BlockPower(8, 8).block_size == 8
    np.testing.assert_array_equal(*(BlockPower(D, RANK, seed=3).fit(x).basis for _ in range(2)))
    assert not np.array_equal(BlockPower(D, RANK, seed=4).basis, BlockPower(D, RANK, seed=3).basis)


def test_spirit_tracks_a_change_with_forgetting_and_not_without() -> None:
    (first, u1), (second, u2) = planted(13, 1500, 20, 3), planted(14, 1500, 20, 3)
    sp = SPIRIT(20, 3).fit(first)  # forget = 0.96, the paper's value
    assert angle(sp.basis, u1) < 0.03 and angle(sp.basis, u2) > 0.5  # unrelated subspaces
    assert angle(sp.partial_fit(second[:300]).basis, u2) < 0.03
    assert angle(SPIRIT(20, 3, forget=1.0).fit(first).partial_fit(second[:300]).basis, u2) > 0.5


def test_spirit_weights_are_only_approximately_orthonormal_but_span_the_basis() -> None:
    sp = SPIRIT(D, RANK).fit(planted(seed=15, n=500)[0])
    w = sp.weights
    assert 1e-12 < np.abs(w.T @ w - np.eye(RANK)).max() < 0.5
    assert angle(w, sp.basis) < 1e-10
    with pytest.raises(ValueError, match="forget"):
        SPIRIT(D, RANK, forget=1.5)


def test_grouse_step_rotates_the_span_towards_the_sample_by_theta() -> None:
    # Rank 1, t = 1, normalised: theta = eta sin(phi) cos(phi), phi from x to span(U)
    g = GROUSE(6, 1, eta=1.0)
    before = g.basis[:, 0]
    x = np.random.default_rng(20).normal(size=6)
    phi = angle(before[:, None], x[:, None])
    after = g.partial_fit(x).basis[:, 0]
    moved = angle(before[:, None], after[:, None])
    np.testing.assert_allclose(moved, np.sin(phi) * np.cos(phi), rtol=1e-10)
    assert np.linalg.lstsq(np.column_stack([before, x]), after, rcond=None)[1][0] < 1e-20
    np.testing.assert_allclose(angle(after[:, None], x[:, None]), phi - moved, rtol=1e-10)


def test_grouse_with_normalised_steps_ignores_the_scale_of_the_data() -> None:
    x, _ = planted(seed=16, n=1000)
    np.testing.assert_allclose(
        GROUSE(D, RANK).fit(1e4 * x).basis, GROUSE(D, RANK).fit(x).basis, atol=1e-8
    )
    raw_small = GROUSE(D, RANK, normalize=False, eta=10.0).fit(x)
    raw_large = GROUSE(D, RANK, normalize=False, eta=10.0).fit(1e4 * x)
    assert angle(raw_small.basis, raw_large.basis) > 0.1
    assert raw_large.n_skipped_ > 0  # theta >= pi / 2 on the large data: steps dropped


def test_grouse_with_a_constant_step_follows_a_change_and_rejects_bad_steps() -> None:
    (first, u1), (second, u2) = planted(17, 1500, 20, 3), planted(18, 1500, 20, 3)
    g = GROUSE(20, 3, eta=0.3, schedule="constant").fit(first)
    assert angle(g.basis, u1) < 0.05 and angle(g.partial_fit(second).basis, u2) < 0.05
    for kwargs in ({"eta": 0.0}, {"schedule": "sqrt"}):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            GROUSE(D, RANK, **kwargs)


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
    ipca = make(IncrementalPCA)
    assert ipca.centers is True and ipca.batch_size == 50
    np.testing.assert_array_equal(ipca.partial_fit(np.ones((10, D))).basis, np.eye(D, RANK))
    with pytest.raises(ValueError, match="batch_size must be >= rank"):
        IncrementalPCA(D, RANK, batch_size=RANK - 1)
