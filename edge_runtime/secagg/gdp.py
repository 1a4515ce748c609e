"""Gaussian differential privacy of the multidimensional Skellam mechanism.

`edge_runtime.secagg.accounting` bounds the site's Skellam sum through Renyi DP (Agarwal,
Kairouz & Liu 2021, Thm. 3.5), whose conversion to ``(epsilon, delta)`` costs 8.4 % more
noise than the analytic Gaussian mechanism at ``(1, 1e-5)``. This module gives the tight
bound, in the f-DP framework of Dong, Roth & Su ("Gaussian Differential Privacy", JRSS-B
2022; "GDP" below):

1. One entry. ``X ~ Sk(mu)`` (``mu`` the Poisson parameter, variance ``2 mu``) is discrete
   log-concave (a convolution of two log-concave Poisson pmfs), so the likelihood ratio of
   ``X + v`` against ``X`` is monotone and the Neyman-Pearson tests are thresholds: the
   trade-off function ``T(X, X + v)`` is the piecewise linear interpolation of the points
   ``(alpha_k, beta_k) = (1 - F(k - 1), F(k - 1 - v))``, ``F`` the CDF. With ``z =
   Phi^{-1}(F)``, a point lies on or above the Gaussian trade-off ``G_m`` (GDP, Def. 2.7)
   exactly when ``z(k - 1) - z(k - 1 - v) <= m``, and, ``G_m`` being convex, the segments
   between such points do too. The left side is a sum of ``v`` increments ``z(j) - z(j -
   1)``: if every increment is at most ``c``, ``T(X, X + v) >= G_{c |v|}`` for every
   integer ``v`` (and by the symmetry of ``Sk`` in both directions).
2. The increments. They are largest at the centre, ``z(0) - z(-1) = 2 Phi^{-1}((1 +
   p(0)) / 2)``, ``p(0) = e^{-2 mu} I_0(2 mu)``, and decrease in ``|k|`` (Skellam's tails
   are heavier than the Gaussian's): `skellam_gdp_coefficient`. This is verified, not
   proved: exactly in 40-digit arithmetic over the whole support for small ``mu``, and to
   1e-7 in double precision up to ``mu = 1e8`` (`tests/test_secagg_gdp.py`). The code
   adds a relative margin `MARGIN` on top. ``c sqrt(2 mu) = 1 + 1 / (12 mu) + ...``: at
   the deployed ``mu`` (about ``6e10`` at d = 48, scale 2**16) the mechanism is the
   Gaussian's to 1e-12 (the margin, 1e-6, is what it costs).
3. All entries. The entries are independent, so ``T(M(D), M(D')) = ⊗_i T(X_i, X_i +
   v_i) >= ⊗_i G_{c |v_i|} = G_{c ||v||_2}`` (GDP, Thm. 3.2 and Cor. 3.3; ``⊗`` is
   monotone), and ``||v||_2 <= Delta_2``: the release is ``c Delta_2``-GDP.
4. ``m``-GDP is ``(epsilon, delta(epsilon))``-DP with ``delta(epsilon) = Phi(-epsilon / m
   + m / 2) - e^epsilon Phi(-epsilon / m - m / 2)`` (GDP, Cor. 2.13), the analytic Gaussian
   mechanism's curve at ``m = Delta / sigma`` (Balle & Wang 2018): `gdp_delta`,
   `gdp_epsilon`.

Pure numpy/scipy; no I/O.
"""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.special import erfinv, i0e, log_ndtr

__all__ = ["MARGIN", "gdp_delta", "gdp_epsilon", "skellam_gdp_coefficient"]

#: Relative margin on the centre increment (covers the double-precision verification).
MARGIN = 1e-6


def skellam_gdp_coefficient(mu: float) -> float:
    """``c``: ``Sk(mu)`` noise on an integer query of L2 sensitivity ``Delta`` is ``c Delta``-GDP.

    ``c = (1 + MARGIN) 2 sqrt(2) erfinv(p(0))`` with ``p(0) = e^{-2 mu} I_0(2 mu)``
    (`scipy.special.i0e`), the largest increment of ``Phi^{-1}`` of the Skellam CDF (module
    docstring, steps 1-3); ``c sqrt(2 mu) -> 1`` as ``mu`` grows.

    Parameters
    ----------
    mu : float
        Skellam parameter per entry (integer units squared), finite and > 0.

    Returns
    -------
    float
        ``c``, per integer unit of L2 sensitivity.

    Raises
    ------
    ValueError
        ``mu`` not finite and > 0.
    """
    if not (isinstance(mu, int | float) and math.isfinite(mu) and mu > 0):
        raise ValueError(f"mu must be a finite number > 0, got {mu!r}")
    return (1.0 + MARGIN) * 2.0 * math.sqrt(2.0) * float(erfinv(i0e(2.0 * float(mu))))


def gdp_delta(m: float, epsilon: float) -> float:
    """``delta(epsilon)`` of ``m``-GDP: ``Phi(-epsilon/m + m/2) - e^epsilon Phi(-epsilon/m - m/2)``.

    Dong, Roth & Su (2022), Corollary 2.13; in logs (`scipy.special.log_ndtr`) so that large
    ``epsilon`` does not overflow.

    Parameters
    ----------
    m : float
        GDP parameter (``Delta / sigma``), > 0.
    epsilon : float
        >= 0, nats.

    Returns
    -------
    float
        ``delta`` in [0, 1].
    """
    first = math.exp(float(log_ndtr(-epsilon / m + m / 2.0)))
    second = math.exp(epsilon + float(log_ndtr(-epsilon / m - m / 2.0)))
    return max(0.0, first - second)


def gdp_epsilon(m: float, delta: float) -> float:
    """The smallest ``epsilon >= 0`` with ``gdp_delta(m, epsilon) <= delta`` (Brent's method).

    Parameters
    ----------
    m : float
        GDP parameter, finite and > 0.
    delta : float
        In (0, 1).

    Returns
    -------
    float
        ``epsilon`` (nats), rounded up by a relative 1e-12.

    Raises
    ------
    ValueError
        ``m`` not finite and > 0, or ``delta`` outside (0, 1).
    """
    if not (math.isfinite(m) and m > 0):
        raise ValueError(f"the GDP parameter must be finite and > 0, got {m!r}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if gdp_delta(m, 0.0) <= delta:
        return 0.0
    high = 1.0
    while gdp_delta(m, high) > delta:
        high *= 2.0
    eps = brentq(lambda e: gdp_delta(m, e) - delta, 0.0, high, xtol=1e-14, rtol=1e-14)
    while gdp_delta(m, eps) > delta:
        eps *= 1.0 + 1e-12
    return float(eps)
