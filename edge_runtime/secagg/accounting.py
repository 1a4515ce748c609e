"""DP accounting of a site's securely summed release with distributed Skellam noise.

Each leaf of a site integer-encodes its (block) Gram increment, adds its share of Skellam
noise and masks it; the aggregator learns only the site's sum. The noise in that sum is
``Sk(mu_total) = Poisson(mu_total) - Poisson(mu_total)`` per entry (variance ``2 mu_total``;
independent Skellams add their parameters), so the site's release is one multidimensional
Skellam mechanism on the summed integer vector, and this module accounts for it.

Guarantee (Agarwal, Kairouz & Liu, "The Skellam Mechanism for Differentially Private
Federated Learning", NeurIPS 2021, Theorem 3.5, the multidimensional Skellam mechanism;
their distributed-DP code uses the same bound): adding i.i.d. ``Sk(mu)`` noise to every
entry of an integer vector query of L1 sensitivity ``Delta_1`` and L2 sensitivity
``Delta_2`` is ``(alpha, eps(alpha))``-Renyi DP for every integer ``alpha > 1`` with::

    eps(alpha) = alpha Delta_2**2 / (4 mu)
                 + min(((2 alpha - 1) Delta_2**2 + 6 Delta_1) / (16 mu**2), 3 Delta_1 / (4 mu))

(``mu`` the Poisson parameter; in the paper's variance form ``V = 2 mu``: ``alpha
Delta_2**2 / (2 V) + min(((2 alpha - 1) Delta_2**2 + 6 Delta_1) / (4 V**2), 3 Delta_1 /
(2 V))``). The first term is the Gaussian mechanism's RDP at variance ``2 mu``; the second
vanishes as ``mu / Delta**2`` grows. Converted to ``(epsilon, delta)`` with the improved
conversion of Balle et al. (AISTATS 2020, Thm. 21) and Canonne, Kamath & Steinke (NeurIPS
2020, Prop. 12)::

    epsilon = min over alpha of  eps(alpha) + log((alpha - 1) / alpha)
                                 - (log delta + log alpha) / (alpha - 1)

over the integer orders `ORDERS`. Through RDP the calibration costs more noise than the
analytic Gaussian mechanism (Balle & Wang 2018) that the private mode uses today: at
``(1, 1e-5)`` the RDP-calibrated Gaussian needs ``sigma = 4.045`` per unit of L2
sensitivity against ``3.731`` (8.4 % more; the tests check the large-``mu`` limit).

Tight bound (`edge_runtime.secagg.gdp`): the same mechanism is ``c(mu) Delta_2``-Gaussian
DP (Dong, Roth & Su 2022), ``c(mu) sqrt(2 mu) = 1 + 1 / (12 mu) + ...`` (the largest
increment of ``Phi^{-1}`` of the Skellam CDF, verified), which converts to ``(epsilon,
delta)`` exactly as the analytic Gaussian mechanism does. A mechanism that satisfies both
bounds has the smaller epsilon: `achieved_epsilon` is the minimum of the two, and at the
site's ``mu`` (about ``6e10`` integer units squared at ``d = 48``, scale ``2**16``) the GDP
bound is the smaller, at ``3.7306`` per unit of sensitivity plus the rounding term below.

Sensitivity of the encoded Gram increment (`gram_sensitivity`). The encoding this module
assumes is `masking.encode`'s (upper triangle with the diagonal, ``m = d (d + 1) / 2``
entries, times ``scale``, rounded to nearest) applied to ``T(G)``, the Gram matrix with
its off-diagonal entries multiplied by ``sqrt(2)`` (`weight_off_diagonal`; the aggregator
divides them again after decoding, post-processing). Then the L2 norm of the encoded
vector is ``scale`` times the Frobenius norm, so i.i.d. noise of variance ``v`` per entry
decodes to ``v / scale**2`` on the diagonal and half that off it: exactly the pattern of
`edge_runtime.fpca.gaussian_mechanism.symmetric_noise`. Replacing one reading (unit ball)
changes ``G`` by at most ``sqrt(2)`` in Frobenius norm (`REPLACE_ONE_SENSITIVITY`, as in
`edge_runtime.fpca.gaussian_mechanism`), and the continual release
(`edge_runtime.fpca.continual`: the slots of a segment release ``R G``, ``R``'s first
column ``c = sqrt_factorisation_coefficients(H)``) multiplies that by ``||c||_2 =
continual_multiplier(H)`` over the ``H`` slots. (This package sits beside
`edge_runtime.fpca` in the import layers, so the caller passes ``c``.) Rounding, bounded in
the worst case and deterministically (no conditional rounding): each entry of each
encoding is off by at most ``1/2``, so two neighbouring encodings differ from ``scale``
times the exact difference by less than 1 per entry, and over the ``n = H m`` entries of a
segment::

    Delta_2 <= scale sqrt(2) multiplier(H) + sqrt(n)
    Delta_1 <= min(scale L1 + n, sqrt(n) Delta_2),   L1 = (2 + sqrt(2) (d - 1)) sum_k c_k

(``L1`` the exact L1 bound of ``T(x x^T) - T(x' x'^T)`` for unit-ball rows, times the L1
norm of the factorisation's first column ``c``). At ``d = 48`` the rounding term
``sqrt(1176) = 34.3`` is ``3.7e-4`` of ``scale sqrt(2)`` at ``scale = 2**16``.

Threshold. Each leaf adds ``Sk(mu_total / t)`` with ``t`` the fewest shares a released
sum may contain (the dropout threshold): with fewer than ``t`` survivors nothing is
released (`site_epsilon` says so), with ``k >= t`` the sum has ``Sk(k mu_total / t)``,
at least the calibrated noise, and `achieved_epsilon` is decreasing in ``mu``: never a
weaker guarantee. (Not covered here: a coalition of leaves that removes its own shares
from the sum; Kairouz et al. 2021 scale the shares up for it.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edge_runtime.secagg import gdp

__all__ = [
    "DEFAULT_MAX_ROWS_PER_SLOT",
    "DEFAULT_SCALE",
    "ORDERS",
    "REPLACE_ONE_SENSITIVITY",
    "SkellamCalibration",
    "achieved_epsilon",
    "calibrate",
    "check_count",
    "gram_calibration",
    "gram_sensitivity",
    "rdp_to_epsilon",
    "required_mu",
    "rounded_sensitivity",
    "site_epsilon",
    "skellam_rdp",
    "unweight_off_diagonal",
    "weight_off_diagonal",
]

#: Integer units per unit-ball Gram unit, the leaves' and their site's default
#: (benchmarks/secagg: resolution 1.5e-5, 3.7e-4 of the sensitivity lost to rounding at
#: d = 48).
DEFAULT_SCALE = 2.0**16
#: Most readings one leaf's slot increment may hold (pending rows, carried over ones
#: included), the leaves' and their site's default. The aggregator's bound check
#: (`masking.sum_bound`) assumes it: at 2**24 rows, scale 2**16, 64 leaves and ``H = 4096`` a
#: sum stays below 2**54, far inside 64 bits.
DEFAULT_MAX_ROWS_PER_SLOT = 2**24

#: Integer Renyi orders ``alpha`` over which the conversion to (epsilon, delta) minimises.
ORDERS = np.arange(2, 1025, dtype=np.float64)

_SQRT2 = math.sqrt(2.0)

#: L2 (Frobenius) sensitivity of a Gram matrix of unit-ball rows under replace-one:
#: ``edge_runtime.fpca.gaussian_mechanism.REPLACE_ONE_SENSITIVITY`` (a test checks).
REPLACE_ONE_SENSITIVITY = _SQRT2


def _positive(value: object, name: str) -> float:
    ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )
    number = float(value) if ok else math.nan  # type: ignore[arg-type]
    if not (math.isfinite(number) and number > 0.0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return number


def _delta(delta: object) -> float:
    ok = isinstance(delta, int | float | np.integer | np.floating) and not isinstance(
        delta, bool | np.bool_
    )
    number = float(delta) if ok else math.nan  # type: ignore[arg-type]
    if not 0.0 < number < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return number


def check_count(value: object, name: str, low: int = 1, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]`` (no upper bound when None), else a one-line
    ValueError naming it (a bool is not an int here)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if int(value) < low or (high is not None and int(value) > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return int(value)


def _sensitivities(l1: object, l2: object) -> tuple[float, float]:
    d2 = _positive(l2, "l2 sensitivity")
    d1 = _positive(l1, "l1 sensitivity")
    if d1 < d2 * (1.0 - 1e-12):
        raise ValueError(f"l1 sensitivity {l1!r} is below the l2 sensitivity {l2!r}")
    return d1, d2


def skellam_rdp(mu: float, l1: float, l2: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """Renyi DP ``eps(alpha)`` of i.i.d. ``Sk(mu)`` noise on an integer vector query.

    Agarwal, Kairouz & Liu (NeurIPS 2021), Theorem 3.5 (integer ``alpha > 1``), with ``mu``
    the Poisson parameter (variance ``2 mu``): ``alpha l2**2 / (4 mu) + min(((2 alpha - 1)
    l2**2 + 6 l1) / (16 mu**2), 3 l1 / (4 mu))``.

    Parameters
    ----------
    mu : float
        Skellam parameter per entry of the released sum, integer units squared, > 0.
    l1, l2 : float
        L1 and L2 sensitivity of the integer query (integer units; `rounded_sensitivity`).
    orders : ndarray of shape (k,)
        Integer orders ``alpha >= 2`` (default `ORDERS`).

    Returns
    -------
    ndarray of shape (k,)
        ``eps(alpha)`` per order, nats.

    Raises
    ------
    ValueError
        ``mu``, ``l1`` or ``l2`` not finite and > 0, ``l1 < l2``, or an order that is not
        an integer >= 2 (one line naming it).
    """
    m = _positive(mu, "mu")
    d1, d2 = _sensitivities(l1, l2)
    alpha = np.asarray(orders, dtype=np.float64)
    if alpha.ndim != 1 or alpha.size == 0 or np.any(alpha < 2) or np.any(alpha != np.rint(alpha)):
        raise ValueError(f"orders must be integers >= 2, got {orders!r}")
    first = alpha * d2 * d2 / (4.0 * m)
    second = np.minimum(
        ((2.0 * alpha - 1.0) * d2 * d2 + 6.0 * d1) / (16.0 * m * m), 3 * d1 / (4 * m)
    )
    return first + second


def rdp_to_epsilon(rdp: np.ndarray, delta: float, orders: np.ndarray = ORDERS) -> float:
    """``(epsilon, delta)``-DP of a mechanism with RDP curve ``rdp`` over ``orders``.

    ``min_alpha rdp(alpha) + log((alpha - 1) / alpha) - (log delta + log alpha) / (alpha - 1)``
    (Balle et al., AISTATS 2020, Thm. 21; Canonne, Kamath & Steinke, NeurIPS 2020, Prop. 12).

    Parameters
    ----------
    rdp : ndarray of shape (k,)
        RDP epsilons, nats, one per order.
    delta : float
        In (0, 1).
    orders : ndarray of shape (k,)
        The orders ``alpha > 1`` of ``rdp``.

    Returns
    -------
    float
        ``epsilon`` (nats), >= 0.

    Raises
    ------
    ValueError
        ``delta`` outside (0, 1), or shapes that differ.
    """
    dlt = _delta(delta)
    alpha = np.asarray(orders, dtype=np.float64)
    curve = np.asarray(rdp, dtype=np.float64)
    if curve.shape != alpha.shape:
        raise ValueError(f"rdp has shape {curve.shape}, orders {alpha.shape}")
    eps = curve + np.log1p(-1.0 / alpha) - (math.log(dlt) + np.log(alpha)) / (alpha - 1.0)
    return max(0.0, float(np.min(eps)))


def achieved_epsilon(mu: float, delta: float, l1: float, l2: float) -> float:
    """The ``epsilon`` at ``delta`` of i.i.d. ``Sk(mu)`` noise on a query of sensitivity (l1, l2).

    The smaller of two bounds, each decreasing in ``mu``: `skellam_rdp` converted by
    `rdp_to_epsilon` over `ORDERS`, and the Gaussian-DP bound
    ``gdp.gdp_epsilon(gdp.skellam_gdp_coefficient(mu) l2, delta)`` (module docstring).

    Parameters
    ----------
    mu : float
        Skellam parameter per entry of the released sum (integer units squared), > 0.
    delta : float
        In (0, 1).
    l1, l2 : float
        Sensitivities of the integer query (integer units), ``l1 >= l2 > 0``.

    Returns
    -------
    float
        epsilon (nats).

    Raises
    ------
    ValueError
        A value out of range (one line naming it).
    """
    rdp = rdp_to_epsilon(skellam_rdp(mu, l1, l2), delta)
    return min(rdp, gdp.gdp_epsilon(gdp.skellam_gdp_coefficient(float(mu)) * float(l2), delta))


def required_mu(epsilon: float, delta: float, l1: float, l2: float) -> float:
    """The smallest total Skellam parameter ``mu`` with ``achieved_epsilon(mu, ...) <= epsilon``.

    Brent's method (`scipy.optimize.brentq`) on ``log mu``; the result is nudged up until
    `achieved_epsilon` is at most ``epsilon`` (relative tolerance 1e-12 on ``mu``).

    Parameters
    ----------
    epsilon : float
        Target, finite and > 0.
    delta : float
        In (0, 1).
    l1, l2 : float
        Sensitivities of the integer query (integer units), ``l1 >= l2 > 0``.

    Returns
    -------
    float
        ``mu`` of the released sum's noise ``Sk(mu)`` per entry (variance ``2 mu``).

    Raises
    ------
    ValueError
        A value out of range (one line naming it).
    """
    from scipy.optimize import brentq

    eps = _positive(epsilon, "epsilon")
    dlt = _delta(delta)
    d1, d2 = _sensitivities(l1, l2)

    def gap(log_mu: float) -> float:
        return achieved_epsilon(math.exp(log_mu), dlt, d1, d2) - eps

    low = high = math.log(d2 * d2)
    while gap(low) <= 0.0:
        low -= 4.0
    while gap(high) > 0.0:
        high += 4.0
    mu = math.exp(brentq(gap, low, high, xtol=1e-13, rtol=1e-13, maxiter=500))
    while achieved_epsilon(mu, dlt, d1, d2) > eps:
        mu *= 1.0 + 1e-12
    return mu


def rounded_sensitivity(
    l2: float, scale: float, entries: int, l1: float | None = None
) -> tuple[float, float]:
    """(L1, L2) sensitivity of ``round(scale * q(D))`` for a real ``q`` of sensitivity (l1, l2).

    Worst-case rounding to nearest: each entry of each encoding is off by at most 1/2, so a
    neighbouring pair's integer difference is within 1 of ``scale`` times the exact one in
    each of the ``entries`` entries: ``L2 <= scale l2 + sqrt(entries)`` and ``L1 <=
    min(scale l1 + entries, sqrt(entries) L2)`` (Cauchy-Schwarz; only it when ``l1`` is None).

    Parameters
    ----------
    l2 : float
        L2 sensitivity of the real query (its units), > 0.
    scale : float
        Integer units per unit of the query, > 0.
    entries : int
        Entries of the encoded vector that may change, >= 1.
    l1 : float or None
        L1 sensitivity of the real query, if known.

    Returns
    -------
    tuple of (float, float)
        ``(L1, L2)`` in integer units.

    Raises
    ------
    ValueError
        A value out of range (one line naming it).
    """
    d2 = _positive(l2, "l2 sensitivity")
    s = _positive(scale, "scale")
    n = check_count(entries, "entries")
    l2_int = s * d2 + math.sqrt(n)
    l1_int = math.sqrt(n) * l2_int
    if l1 is not None:
        l1_int = min(l1_int, s * _positive(l1, "l1 sensitivity") + n)
    return l1_int, l2_int


def gram_sensitivity(
    n_features: int, scale: float, coefficients: np.ndarray | None = None
) -> tuple[float, float]:
    """(L1, L2) sensitivity, integer units, of a segment of encoded Gram increments.

    Replace-one neighbours, unit-ball rows, the off-diagonal weighting of
    `weight_off_diagonal`, ``H = len(coefficients)`` slots of the square-root factorisation
    (one release without ``coefficients``), ``H d (d + 1) / 2`` entries: `rounded_sensitivity`
    of ``l2 = sqrt(2) ||c||_2`` (``sqrt(2) continual_multiplier(H)``) and ``l1 = (2 + sqrt(2)
    (d - 1)) ||c||_1``.

    Parameters
    ----------
    n_features : int
        ``d >= 1``.
    scale : float
        Integer units per unit-ball Gram unit, > 0.
    coefficients : ndarray of shape (H,) or None
        ``c``, the first column of the factorisation ``R``
        (`edge_runtime.fpca.continual.sqrt_factorisation_coefficients(H)`): finite,
        non-negative, ``c[0] = 1``. None: ``[1.0]``, one release.

    Returns
    -------
    tuple of (float, float)

    Raises
    ------
    ValueError
        A value out of range (one line naming it).
    """
    d = check_count(n_features, "n_features")
    c = np.ones(1) if coefficients is None else np.asarray(coefficients, dtype=np.float64)
    if c.ndim != 1 or c.size == 0 or not np.all(np.isfinite(c)) or np.any(c < 0) or c[0] != 1.0:
        raise ValueError(f"coefficients must be finite, >= 0, with c[0] = 1, got {c.tolist()!r}")
    l2 = REPLACE_ONE_SENSITIVITY * math.sqrt(float(c @ c))
    l1 = (2.0 + _SQRT2 * (d - 1)) * float(c.sum())
    return rounded_sensitivity(l2, scale, c.size * d * (d + 1) // 2, l1)


@dataclass(frozen=True)
class SkellamCalibration:
    """The noise of a site's securely summed release, calibrated for ``(epsilon, delta)``.

    Attributes
    ----------
    epsilon, delta : float
        The target guarantee per reading (replace-one).
    l1, l2 : float
        Sensitivities of the integer query (integer units).
    threshold : int
        ``t``: the fewest leaves' shares a released sum may contain.
    total_mu : float
        Skellam parameter per entry of a sum of exactly ``t`` shares (variance ``2
        total_mu``): `required_mu`.
    share_mu : float
        What each leaf adds per entry: ``Sk(share_mu)``, ``share_mu = total_mu / t``.
    """

    epsilon: float
    delta: float
    l1: float
    l2: float
    threshold: int
    total_mu: float
    share_mu: float

    def sum_mu(self, survivors: int) -> float:
        """Skellam parameter per entry of a sum of ``survivors`` shares (``>= threshold``)."""
        k = check_count(survivors, "survivors", self.threshold)
        return k * self.share_mu

    def noise_std(self, scale: float, survivors: int | None = None) -> float:
        """Std per diagonal entry of the decoded sum, ``sqrt(2 mu) / scale`` (Gram units)."""
        k = self.threshold if survivors is None else survivors
        return math.sqrt(2.0 * self.sum_mu(k)) / _positive(scale, "scale")


def calibrate(
    epsilon: float, delta: float, l1: float, l2: float, threshold: int
) -> SkellamCalibration:
    """Per-leaf Skellam shares for a target ``(epsilon, delta)`` at dropout threshold ``t``.

    Parameters
    ----------
    epsilon : float
        Finite and > 0.
    delta : float
        In (0, 1).
    l1, l2 : float
        Sensitivities of the integer query (integer units; `gram_sensitivity`).
    threshold : int
        ``t >= 1``: the fewest shares a released sum may contain.

    Returns
    -------
    SkellamCalibration

    Raises
    ------
    ValueError
        A value out of range (one line naming it).
    """
    t = check_count(threshold, "threshold")
    total = required_mu(epsilon, delta, l1, l2)
    return SkellamCalibration(
        float(epsilon), float(delta), float(l1), float(l2), t, total, total / t
    )


def gram_calibration(
    epsilon: float,
    delta: float,
    n_features: int,
    scale: float,
    threshold: int,
    coefficients: np.ndarray | None = None,
    *,
    given: SkellamCalibration | None = None,
    node: str = "the site",
) -> SkellamCalibration:
    """`calibrate` at `gram_sensitivity` ``(n_features, scale, coefficients)``.

    With ``given`` (a site's leaves and its aggregator take one, or compute it: a few ms):
    that calibration, if it is for this ``(epsilon, delta, threshold)`` and sensitivity
    (relative tolerance 1e-12), else a one-line ValueError saying what ``node`` (``"this
    leaf"``, ``"the site"``) needs.
    """
    l1, l2 = gram_sensitivity(n_features, scale, coefficients)
    if given is None:
        return calibrate(epsilon, delta, l1, l2, threshold)
    wanted = (float(epsilon), float(delta), threshold, l1, l2)
    c = given
    have = (c.epsilon, c.delta, c.threshold, c.l1, c.l2)
    if not np.allclose(have, wanted, rtol=1e-12, atol=0.0):
        raise ValueError(
            f"calibration is for (epsilon, delta, t, l1, l2) = {have}, {node} needs {wanted}"
        )
    return given


def site_epsilon(calibration: SkellamCalibration, survivors: int) -> float:
    """The ``epsilon`` (at the calibration's ``delta``) of a sum of ``survivors`` leaves' shares.

    Parameters
    ----------
    calibration : SkellamCalibration
    survivors : int
        Leaves whose shares are in the sum, >= 0.

    Returns
    -------
    float
        ``0.0`` when ``survivors < threshold`` (nothing is released for the slot); otherwise
        `achieved_epsilon` of ``survivors * share_mu``, at most ``calibration.epsilon``.

    Raises
    ------
    ValueError
        ``survivors`` not an int >= 0.
    """
    k = check_count(survivors, "survivors", 0)
    if k < calibration.threshold:
        return 0.0
    c = calibration
    return achieved_epsilon(c.sum_mu(k), c.delta, c.l1, c.l2)


def weight_off_diagonal(matrix: np.ndarray) -> np.ndarray:
    """``T(G)``: a copy of the symmetric ``(d, d)`` ``matrix``, off-diagonal entries times sqrt(2).

    Its upper triangle (diagonal included) has the L2 norm of ``matrix``'s Frobenius norm,
    so i.i.d. noise on the encoded triangle decodes (`unweight_off_diagonal`) to the
    ``symmetric_noise`` pattern.
    """
    out = np.array(matrix, dtype=np.float64)
    if out.ndim != 2 or out.shape[0] != out.shape[1]:
        raise ValueError(f"matrix must be square (d, d), got shape {out.shape}")
    diagonal = np.diag(out).copy()
    out *= _SQRT2
    np.fill_diagonal(out, diagonal)
    return out


def unweight_off_diagonal(matrix: np.ndarray) -> np.ndarray:
    """The inverse of `weight_off_diagonal`: off-diagonal entries divided by sqrt(2), ``(d, d)``."""
    out = np.array(matrix, dtype=np.float64)
    if out.ndim != 2 or out.shape[0] != out.shape[1]:
        raise ValueError(f"matrix must be square (d, d), got shape {out.shape}")
    diagonal = np.diag(out).copy()
    out /= _SQRT2
    np.fill_diagonal(out, diagonal)
    return out
