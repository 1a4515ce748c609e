"""Tests of anomaly scoring (Q, T^2, their limits) and of the Motes fault generator."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from scipy import stats

from edge_runtime.fpca import FPCAEdge, Subspace, offline_subspace, scoring
from edge_runtime.fpca.scoring import AnomalyScorer, q_limit, t2_limit, total_energy

D, R = 10, 3
#: Covariance of the synthetic readings: r dominant directions plus isotropic noise.
SPIKED = np.array([25.0, 9.0, 4.0] + [0.5] * (D - R))


def gaussian(rng: np.random.Generator, n: int, *, centered: bool) -> np.ndarray:
    """Rows ~ N(mu, Q diag(SPIKED) Q^T) with a fixed rotation Q; mu = 0 if not centred."""
    rot = np.linalg.qr(np.random.default_rng(99).normal(size=(D, D)))[0]
    mu = np.linspace(-5.0, 5.0, D) if centered else np.zeros(D)
    return mu + (rng.normal(size=(n, D)) * np.sqrt(SPIKED)) @ rot.T


def exact_model(x: np.ndarray, *, centered: bool) -> tuple[Subspace, np.ndarray, int]:
    """Full-rank model from the eigendecomposition of the covariance (or second moment)."""
    n = x.shape[0]
    mean = x.mean(axis=0) if centered else None
    xc = x - mean if centered else x
    dof = n - 1 if centered else n
    lam, vec = np.linalg.eigh(xc.T @ xc / dof)
    lam, vec = lam[::-1], vec[:, ::-1]
    return Subspace(vec, np.sqrt(lam * dof), n, mean), lam, dof


def jackson_mudholkar(lam: np.ndarray, alpha: float) -> float:
    t1, t2, t3 = (np.sum(lam**k) for k in (1, 2, 3))
    h0 = 1 - 2 * t1 * t3 / (3 * t2**2)
    c = stats.norm.ppf(1 - alpha)
    return t1 * (c * np.sqrt(2 * t2 * h0**2) / t1 + 1 + t2 * h0 * (h0 - 1) / t1**2) ** (1 / h0)


def test_docstring_examples_run_and_give_the_documented_output() -> None:
    result = doctest.testmod(scoring, verbose=False)

    assert result.attempted > 0
    assert result.failed == 0


@pytest.mark.parametrize("centered", [True, False])
def test_scores_q_t2_and_limits_match_a_direct_computation(centered: bool) -> None:
    rng = np.random.default_rng(1)
    x = gaussian(rng, 500, centered=centered)
    new = gaussian(rng, 40, centered=centered) + rng.normal(scale=3.0, size=(40, D))
    model, lam, _ = exact_model(x, centered=centered)
    scorer = AnomalyScorer(model, alpha=0.05, rank=R)
    u = model.basis[:, :R]
    mean = model.mean if centered else np.zeros(D)

    t = np.array([u.T @ (row - mean) for row in new])
    q = np.array([np.sum((row - mean - u @ u.T @ (row - mean)) ** 2) for row in new])
    t2 = np.array([sum(ti**2 / li for ti, li in zip(tr, lam[:R], strict=True)) for tr in t])
    n = 500
    if centered:
        t2_lim = R * (n - 1) * (n + 1) / (n * (n - R)) * stats.f.ppf(0.95, R, n - R)
    else:
        t2_lim = n * R / (n - R + 1) * stats.f.ppf(0.95, R, n - R + 1)

    np.testing.assert_allclose(scorer.transform(new), t, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(scorer.q(new), q, rtol=1e-10)
    np.testing.assert_allclose(scorer.t2(new), t2, rtol=1e-10)
    np.testing.assert_allclose(scorer.eigenvalues_, lam[:R], rtol=1e-12)
    assert scorer.q_limit == pytest.approx(jackson_mudholkar(lam[R:], 0.05), rel=1e-12)
    assert scorer.t2_limit == pytest.approx(t2_lim, rel=1e-12)
    np.testing.assert_array_equal(scorer.flags(new), (q > scorer.q_limit) | (t2 > t2_lim))
    one = scorer.score(new[0])
    assert one.scores.shape == (1, R) and one.q[0] == pytest.approx(q[0], rel=1e-10)


def clopper_pearson(k: int, n: int, level: float = 0.999) -> tuple[float, float]:
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return ci.low, ci.high


@pytest.mark.parametrize("fit", ["offline", "fpca-edge"])
@pytest.mark.parametrize("centered", [True, False])
def test_false_alarm_rates_of_q_and_t2_are_alpha_on_fault_free_gaussian_data(
    fit: str, centered: bool
) -> None:
    rng = np.random.default_rng(7 + centered)
    train = gaussian(rng, 5000, centered=centered)
    test = gaussian(rng, 20_000, centered=centered)
    energy = total_energy(train, centered=centered)
    if fit == "offline":
        model = exact_model(train, centered=centered)[0]
    else:
        est = FPCAEdge(D, R, oversample=3, center=centered, block_size=100).fit(train)
        model = est.tracked_subspace
    assert model.rank == (D if fit == "offline" else R + 3)
    for alpha in (0.01, 0.05):
        scorer = AnomalyScorer(model, alpha=alpha, rank=R, total_energy=energy)
        out = scorer.score(test)
        for name, exceed in (("Q", out.q > scorer.q_limit), ("T2", out.t2 > scorer.t2_limit)):
            low, high = clopper_pearson(int(exceed.sum()), exceed.size)
            assert low <= alpha <= high, (name, alpha, exceed.mean())


def test_even_spread_of_untracked_energy_approximates_the_exact_q_limit() -> None:
    # An uneven residual spectrum (1.0 down to 0.1): the worst case for an even spread.
    rng = np.random.default_rng(3)
    d, r, p = 30, 3, 3
    lam_true = np.concatenate([[40.0, 20.0, 10.0], np.linspace(1.0, 0.1, d - r)])
    rot = np.linalg.qr(rng.normal(size=(d, d)))[0]
    x = (rng.normal(size=(20_000, d)) * np.sqrt(lam_true)) @ rot.T
    model, lam, _ = exact_model(x, centered=True)
    exact = AnomalyScorer(model, 0.01, rank=r)
    tracked = model.truncate(r + p)
    approx = AnomalyScorer(tracked, 0.01, rank=r, total_energy=total_energy(x, centered=True))
    tracked_only = AnomalyScorer(tracked, 0.01, rank=r)

    rel = approx.q_limit / exact.q_limit - 1
    assert np.sum(approx.discarded_eigenvalues_) == pytest.approx(np.sum(lam[r:]), rel=1e-9)
    # Measured: the even spread underestimates the limit by 4.0 %; without total_energy
    # the tracked directions alone give 0.40 of the exact limit.
    assert -0.05 < rel < 0
    assert tracked_only.q_limit < 0.5 * exact.q_limit


def test_q_limit_falls_back_to_scaled_chi_square_when_h0_is_not_positive() -> None:
    lam = np.array([1.0] + [0.01] * 60)  # theta1 theta3 > 1.5 theta2^2, so h0 < 0
    t1, t2 = lam.sum(), np.sum(lam**2)
    draws = (np.random.default_rng(5).normal(size=(200_000, lam.size)) ** 2) @ lam

    limit = q_limit(lam, 0.01)

    assert limit == pytest.approx(t2 / t1 * stats.chi2.ppf(0.99, t1**2 / t2), rel=1e-12)
    # Measured: 1.5 % of exact draws exceed it (the two-moment fit is conservative in
    # neither direction; Jackson-Mudholkar's formula has no value here at all).
    assert 0.005 < np.mean(draws > limit) < 0.02


def test_limits_without_discarded_energy_and_large_samples_reach_their_limits() -> None:
    assert q_limit([], 0.01) == 0.0
    assert q_limit([0.0, 0.0], 0.01) == 0.0
    assert t2_limit(3, 10**8, 0.01) == pytest.approx(stats.chi2.ppf(0.99, 3), rel=1e-6)
    assert t2_limit(3, 10**8, 0.01, centered=False) == pytest.approx(
        stats.chi2.ppf(0.99, 3), rel=1e-6
    )


@pytest.fixture
def model() -> Subspace:
    x = gaussian(np.random.default_rng(2), 200, centered=True)
    return exact_model(x, centered=True)[0]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"alpha": 0.0}, "alpha must be in (0, 1), got 0.0"),
        ({"alpha": 1.5}, "alpha must be in (0, 1), got 1.5"),
        ({"alpha": "x"}, "alpha must be a number in (0, 1), got 'x'"),
        ({"rank": 11}, "rank must be <= model.rank 10, got 11"),
        ({"rank": 0}, "rank must be >= 1, got 0"),
        ({"rank": 3, "total_energy": -1.0}, "total_energy must be finite and >= 0, got -1.0"),
        ({"rank": 3, "total_energy": 1.0}, "total_energy 1 is below the model's tracked"),
    ],
)
def test_bad_arguments_raise_one_line_value_errors_naming_the_value(
    model: Subspace, kwargs: dict[str, object], needle: str
) -> None:
    with pytest.raises(ValueError) as info:
        AnomalyScorer(model, **kwargs)  # type: ignore[arg-type]
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_models_and_readings_raise_one_line_value_errors(model: Subspace) -> None:
    small = Subspace(model.basis, model.singular_values, 3, model.mean)
    no_rest = model.truncate(5)
    zero_sv = Subspace(model.basis[:, :2], np.array([1.0, 0.0]), 100, model.mean)
    scorer = AnomalyScorer(model, rank=3)
    bad_x = np.ones((4, D))
    bad_x[2, 1] = np.nan
    cases = [
        (lambda: AnomalyScorer(small, rank=3), "n_samples must exceed rank 3"),
        (lambda: AnomalyScorer(no_rest), "model carries no discarded eigenvalues (rank 5"),
        (lambda: AnomalyScorer(zero_sv, rank=2), "model singular value 1 is 0"),
        (lambda: AnomalyScorer(Subspace.empty(D)), "model has rank 0"),
        (lambda: scorer.q(np.ones((4, 9))), "X must have shape (n_samples, 10)"),
        (lambda: scorer.t2(bad_x), "X contains NaN or infinity (first in row 2)"),
        (lambda: q_limit([1.0, -1.0]), "discarded_eigenvalues must be finite and >= 0"),
        (lambda: t2_limit(3, 2, centered=False), "n_samples must be >= rank 3"),
    ]
    for call, needle in cases:
        with pytest.raises(ValueError) as info:
            call()
        assert needle in str(info.value)
        assert "\n" not in str(info.value)
    with pytest.raises(TypeError, match="model must be a Subspace, got ndarray"):
        AnomalyScorer(model.basis)  # type: ignore[arg-type]


def test_uncentred_scorer_of_an_offline_subspace_scores_zero_mean_readings() -> None:
    x = gaussian(np.random.default_rng(4), 1000, centered=False)
    scorer = AnomalyScorer(
        offline_subspace(x, 5), rank=3, total_energy=total_energy(x, centered=False)
    )

    assert not scorer.centered_
    assert scorer.discarded_eigenvalues_.shape == (D - 3,)
    assert scorer.flags(x).mean() < 0.05
