"""Accounting of the distributed Skellam noise of a securely summed site release (issue 26)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from edge_runtime.fpca.continual import continual_multiplier, sqrt_factorisation_coefficients
from edge_runtime.fpca.gaussian_mechanism import REPLACE_ONE_SENSITIVITY, analytic_gaussian_sigma
from edge_runtime.secagg import accounting as acc


def _gaussian_rdp_epsilon(sigma: float, delta: float, l2: float) -> float:
    """The Gaussian mechanism's epsilon through RDP (alpha l2^2 / (2 sigma^2)), same conversion."""
    return acc.rdp_to_epsilon(acc.ORDERS * l2 * l2 / (2.0 * sigma * sigma), delta)


def test_epsilon_decreases_with_mu() -> None:
    l1, l2 = acc.gram_sensitivity(48, 2.0**8)
    mus = np.geomspace(1e3, 1e9, 25)
    eps = [acc.achieved_epsilon(float(mu), 1e-5, l1, l2) for mu in mus]
    assert all(b < a for a, b in itertools.pairwise(eps))


def test_required_mu_meets_the_target_and_is_tight() -> None:
    l1, l2 = acc.gram_sensitivity(48, 2.0**12, sqrt_factorisation_coefficients(4))
    mu = acc.required_mu(1.0, 1e-5, l1, l2)
    assert acc.achieved_epsilon(mu, 1e-5, l1, l2) <= 1.0
    assert acc.achieved_epsilon(mu * (1 - 1e-6), 1e-5, l1, l2) > 1.0


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-5), (0.5, 1e-6), (4.0, 1e-5)])
def test_large_mu_limit_is_the_analytic_gaussian_calibration(epsilon: float, delta: float) -> None:
    # Huge scale: rounding and the Skellam correction vanish. The Gaussian-DP bound makes the
    # noise std the analytic Gaussian mechanism's (Balle & Wang) within 1e-4; the RDP bound
    # alone would need the RDP-calibrated Gaussian's (8.4 % more at (1, 1e-5)).
    scale = 2.0**30
    l1, l2 = acc.gram_sensitivity(48, scale)
    sigma_int = math.sqrt(2.0 * acc.required_mu(epsilon, delta, l1, l2))
    sigma = sigma_int / scale / math.sqrt(2.0)  # per unit of L2 sensitivity
    analytic = analytic_gaussian_sigma(epsilon, delta)
    assert sigma == pytest.approx(analytic, rel=1e-4)
    assert sigma >= analytic * (1 - 1e-9)
    from scipy.optimize import brentq

    rdp_sigma = brentq(lambda s: _gaussian_rdp_epsilon(s, delta, 1.0) - epsilon, 0.05, 100.0)
    mu_rdp = (rdp_sigma * scale * math.sqrt(2.0)) ** 2 / 2.0
    rdp_only = acc.rdp_to_epsilon(acc.skellam_rdp(mu_rdp, l1, l2), delta)
    assert rdp_only == pytest.approx(epsilon, rel=1e-3)
    if (epsilon, delta) == (1.0, 1e-5):
        assert rdp_sigma / analytic == pytest.approx(1.084, abs=2e-3)


@pytest.mark.parametrize("mu", [1.0, 30.0, 1e3, 1e6, 1e10])
def test_achieved_epsilon_is_the_smaller_of_the_two_bounds(mu: float) -> None:
    from edge_runtime.secagg import gdp

    l1, l2 = 3.0, 2.0
    rdp = acc.rdp_to_epsilon(acc.skellam_rdp(mu, l1, l2), 1e-5)
    gaussian_dp = gdp.gdp_epsilon(gdp.skellam_gdp_coefficient(mu) * l2, 1e-5)
    assert acc.achieved_epsilon(mu, 1e-5, l1, l2) == min(rdp, gaussian_dp)
    if mu >= 1e3:
        assert gaussian_dp < rdp


def test_rounding_bound() -> None:
    l1, l2 = acc.rounded_sensitivity(math.sqrt(2.0), 1.0, 1176)
    assert l2 == pytest.approx(math.sqrt(2.0) + math.sqrt(1176))
    assert l1 == pytest.approx(math.sqrt(1176) * l2)
    # The exact L1 bound is used when it is smaller (large scale: Cauchy-Schwarz wins).
    l1_small, _ = acc.gram_sensitivity(4, 1.0)
    assert l1_small == pytest.approx(
        min(2 + math.sqrt(2) * 3 + 10, math.sqrt(10) * (2**0.5 + 10**0.5))
    )


def test_rounding_bound_holds_on_random_pairs() -> None:
    rng = np.random.default_rng(0)
    d, scale = 6, 3.0
    l1, l2 = acc.gram_sensitivity(d, scale)
    rows = np.triu_indices(d)
    for _ in range(300):
        block = rng.standard_normal((5, d))
        block /= np.maximum(np.linalg.norm(block, axis=1, keepdims=True), 1.0)
        other = block.copy()
        other[0] = rng.standard_normal(d)
        other[0] /= max(np.linalg.norm(other[0]), 1.0)
        a = np.rint(scale * acc.weight_off_diagonal(block.T @ block)[rows])
        b = np.rint(scale * acc.weight_off_diagonal(other.T @ other)[rows])
        assert np.linalg.norm(a - b) <= l2 + 1e-9
        assert np.abs(a - b).sum() <= l1 + 1e-9


def test_sensitivity_constants_match_fpca() -> None:
    assert acc.REPLACE_ONE_SENSITIVITY == REPLACE_ONE_SENSITIVITY
    scale = 2.0**40  # rounding negligible
    _, l2 = acc.gram_sensitivity(10, scale, sqrt_factorisation_coefficients(64))
    assert l2 / scale == pytest.approx(math.sqrt(2.0) * continual_multiplier(64), rel=1e-6)


def test_weighting_round_trip_and_norm() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((7, 5))
    gram = x.T @ x
    weighted = acc.weight_off_diagonal(gram)
    assert np.linalg.norm(weighted[np.triu_indices(5)]) == pytest.approx(np.linalg.norm(gram))
    np.testing.assert_allclose(acc.unweight_off_diagonal(weighted), gram)


def test_threshold_never_weaker() -> None:
    cal = acc.gram_calibration(1.0, 1e-5, 48, 2.0**16, threshold=3)
    assert cal.share_mu == pytest.approx(cal.total_mu / 3)
    assert acc.site_epsilon(cal, 2) == 0.0  # below the threshold nothing is released
    at_threshold = acc.site_epsilon(cal, 3)
    assert at_threshold <= 1.0
    assert acc.site_epsilon(cal, 4) < at_threshold
    assert cal.noise_std(2.0**16, 4) > cal.noise_std(2.0**16)
    with pytest.raises(ValueError, match="survivors"):
        cal.sum_mu(2)


@pytest.mark.parametrize(
    ("call", "word"),
    [
        (lambda: acc.required_mu(0.0, 1e-5, 2.0, 1.0), "epsilon"),
        (lambda: acc.required_mu(float("nan"), 1e-5, 2.0, 1.0), "epsilon"),
        (lambda: acc.required_mu(1.0, 1.0, 2.0, 1.0), "delta"),
        (lambda: acc.required_mu(1.0, True, 2.0, 1.0), "delta"),
        (lambda: acc.achieved_epsilon(-1.0, 1e-5, 2.0, 1.0), "mu"),
        (lambda: acc.achieved_epsilon(1.0, 1e-5, 0.5, 1.0), "l1 sensitivity"),
        (lambda: acc.achieved_epsilon(1.0, 1e-5, 2.0, float("inf")), "l2 sensitivity"),
        (lambda: acc.gram_sensitivity(0, 1.0), "n_features"),
        (lambda: acc.gram_sensitivity(4, 0.0), "scale"),
        (lambda: acc.gram_sensitivity(4, 1.0, np.array([0.5, 1.0])), "coefficients"),
        (lambda: acc.gram_sensitivity(4, 1.0, np.array([])), "coefficients"),
        (lambda: acc.calibrate(1.0, 1e-5, 2.0, 1.0, threshold=0), "threshold"),
        (lambda: acc.calibrate(1.0, 1e-5, 2.0, 1.0, threshold=2.5), "threshold"),
        (lambda: acc.skellam_rdp(1.0, 2.0, 1.0, np.array([1.5])), "orders"),
        (lambda: acc.rounded_sensitivity(1.0, 1.0, 0), "entries"),
    ],
)
def test_refuses_bad_input(call: object, word: str) -> None:
    with pytest.raises(ValueError, match=word) as info:
        call()  # type: ignore[operator]
    assert "\n" not in str(info.value)
