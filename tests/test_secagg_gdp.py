"""The Gaussian-DP bound of the Skellam mechanism (`edge_runtime.secagg.gdp`, issue 26).

Step 2 of the module's argument, verified: the increments of ``Phi^{-1}`` of the Skellam
CDF are largest at the centre and decrease in ``|k|`` (exactly, in 40-digit arithmetic over
the support down to 1e-40 for small ``mu``; in double precision over the support down to
1e-280 up to ``mu = 1e8``), so ``skellam_gdp_coefficient`` bounds them all; step 4's
conversion is the analytic Gaussian mechanism's; and the whole bound holds against the
exact privacy profiles of small Skellam mechanisms (1 to 3 entries), enumerated.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from mpmath import mp, mpf
from scipy.special import ive, ndtri

from edge_runtime.fpca.gaussian_mechanism import analytic_gaussian_sigma
from edge_runtime.secagg.gdp import MARGIN, gdp_delta, gdp_epsilon, skellam_gdp_coefficient


def _exact_increments(mu: float) -> list[float]:
    """``z(k) - z(k - 1)`` for ``k = 0, 1, ...`` while ``P[X > k] > 1e-40``, 40 digits."""
    with mp.workprec(140):
        x = mpf(2 * mu)
        pmf = []
        k = 0
        while True:
            p = mp.exp(-x) * mp.besseli(k, x)
            pmf.append(p)
            if k > 4 * mu + 10 and p < mpf(10) ** -45:
                break
            k += 1
        survival = []  # P[X > k]
        s = mpf(0)
        for p in reversed(pmf):
            survival.append(s)
            s += p
        survival.reverse()
        z = [math.sqrt(2) * mp.erfinv(1 - 2 * s) for s in survival if s > mpf(10) ** -40]
        centre = 2 * math.sqrt(2) * mp.erfinv(1 - 2 * survival[0])  # z(0) - z(-1)
        return [float(centre)] + [float(b - a) for a, b in itertools.pairwise(z)]


@pytest.mark.parametrize("mu", [0.5, 2.0, 10.0, 60.0])
def test_the_increments_are_largest_at_the_centre_and_decrease_exactly(mu):
    steps = _exact_increments(mu)
    assert len(steps) > 5
    assert all(a >= b for a, b in itertools.pairwise(steps))
    assert steps[0] == pytest.approx(skellam_gdp_coefficient(mu) / (1 + MARGIN), rel=1e-12)


@pytest.mark.parametrize("mu", [1e3, 1e5, 1e7, 1e8])
def test_no_increment_exceeds_the_coefficient_in_double_precision(mu):
    sd = math.sqrt(2 * mu)
    k = np.arange(0, int(40 * sd) + 50)
    pmf = ive(k, 2 * mu)
    assert np.all(np.isfinite(pmf))
    survival = np.concatenate([np.cumsum(pmf[::-1])[::-1][1:], [0.0]])  # P[X > k]
    kept = survival > 1e-280
    z = -ndtri(survival[kept])  # z(k) = Phi^{-1}(1 - P[X > k])
    steps = np.concatenate([[2 * z[0]], np.diff(z)])  # z(0) - z(-1) = 2 z(0) by symmetry
    c = skellam_gdp_coefficient(mu)
    assert steps.max() <= steps[0] * (1 + 1e-7)  # the centre's, to double precision
    assert steps.max() <= c
    assert steps[0] * sd == pytest.approx(1.0, abs=1.0 / mu)
    assert steps[-1] < steps[0]  # the tails are heavier than the Gaussian's


def test_the_conversion_is_the_analytic_gaussian_mechanisms():
    for epsilon, delta in [(1.0, 1e-5), (0.5, 1e-6), (4.0, 1e-3)]:
        m = 1.0 / analytic_gaussian_sigma(epsilon, delta, 1.0)
        assert gdp_epsilon(m, delta) == pytest.approx(epsilon, rel=1e-4)
        assert gdp_delta(m, gdp_epsilon(m, delta)) <= delta


def test_the_coefficient_tends_to_the_gaussians():
    for mu in [10.0, 1e4, 1e10, 1e14]:
        assert 1.0 <= skellam_gdp_coefficient(mu) * math.sqrt(2 * mu) <= 1.0 + 1.0 / mu + 2e-6


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_bad_parameters_are_refused_in_one_line(bad):
    with pytest.raises(ValueError, match="mu must be"):
        skellam_gdp_coefficient(bad)
    with pytest.raises(ValueError, match="GDP parameter"):
        gdp_epsilon(bad, 1e-5)


def _profile(pmf: np.ndarray, shifted: np.ndarray, epsilon: float) -> float:
    """``delta(epsilon) = sum max(0, P - e^epsilon Q)`` of two pmfs on one grid."""
    return float(np.maximum(pmf - math.exp(epsilon) * shifted, 0.0).sum())


@pytest.mark.parametrize(
    ("mu", "shift"), [(1.0, (1,)), (2.0, (3,)), (2.0, (1, 1)), (5.0, (2, 1, 1)), (8.0, (4, 0))]
)
def test_the_exact_privacy_profile_lies_below_the_bound(mu, shift):
    """The whole argument at small ``mu`` (where Skellam is least Gaussian), by enumeration."""
    reach = int(30 * math.sqrt(2 * mu)) + 10
    k = np.arange(-reach, reach + 1)
    one = ive(np.abs(k), 2 * mu)  # Sk(mu) pmf on the grid
    pmf, shifted = np.ones(1), np.ones(1)
    for v in shift:  # the product pmfs of X and X + v, flattened
        pmf = np.outer(pmf, one).ravel()
        shifted = np.outer(shifted, np.roll(one, v)).ravel()
    m = skellam_gdp_coefficient(mu) * math.sqrt(sum(v * v for v in shift))
    for epsilon in [0.0, 0.1, 0.3, 0.6, 1.0, 2.0, 4.0]:
        exact = _profile(pmf, shifted, epsilon)
        assert exact <= gdp_delta(m, epsilon) + 1e-12
        if epsilon <= 1.0 and mu >= 2.0:  # and near the centre the bound is not loose
            assert exact >= 0.5 * gdp_delta(m, epsilon)
