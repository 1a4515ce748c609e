"""Differential privacy of FedPower's noisy power steps: Renyi-DP accounting and calibration.

The mechanism. A private device adds ``G ~ N(0, sigma**2)`` (i.i.d., ``(d, r)``) to every
local product ``S Q`` (`local_iterations`), where ``S = sum x x^T`` is the Gram sum of its
readings clipped to the unit ball and ``Q`` is orthonormal. Replacing one reading ``x`` by
``x'`` (``||x||, ||x'|| <= 1``) changes ``S Q`` by ``(x x^T - x' x'^T) Q``, whose Frobenius
norm is at most ``||x x^T - x' x'^T||_F ||Q||_2 <= sqrt(2)`` (the bound of
`edge_runtime.fpca.gaussian_mechanism`; reached for orthogonal unit ``x, x'`` in
``span(Q)``, so tight for ``r >= 2``); for ``r = 1`` it is ``||x x^T - x' x'^T||_2 <= 1``
(`power_step_sensitivity`). Sample counts are published, hence replace-one neighbours.

The accounting. FedPower adds Gaussian noise at every iteration and accounts for it with
Renyi DP (Mironov 2017); we do the same for the mechanism above. One step is the Gaussian
mechanism of L2 sensitivity ``Delta``, ``(alpha, alpha Delta**2 / (2 sigma**2))``-RDP for
every ``alpha > 1`` (Mironov 2017, Prop. 7). A reading enters every later product of its
device, whose inputs depend on earlier noisy outputs, so over the ``T`` local iterations a
device performs the guarantee is their adaptive composition: RDP adds (Prop. 1),
``rdp(alpha) = T alpha Delta**2 / (2 sigma**2) = c alpha``. To ``(epsilon, delta)``-DP by

- ``"mironov"`` (Prop. 3, the default): ``epsilon = min_alpha rdp(alpha) + log(1/delta) /
  (alpha - 1) = c + 2 sqrt(c log(1/delta))`` at ``alpha = 1 + sqrt(log(1/delta) / c)``;
- ``"cks"`` (Canonne, Kamath, Steinke, NeurIPS 2020, Prop. 12; Balle et al., AISTATS 2020,
  Thm. 21): ``epsilon = min_alpha rdp(alpha) + log((alpha - 1) / alpha) - (log delta + log
  alpha) / (alpha - 1)``, never larger.

Everything the device publishes (the last product of each round) and everything computed
from it (aggregation, later rounds) is post-processing. Both conversions are looser than the
exact privacy curve of a Gaussian: for one step, ``rdp_epsilon(sigma) >=`` the ``epsilon`` of
`edge_runtime.fpca.gaussian_mechanism.analytic_gaussian_sigma` (Balle & Wang 2018).

References
----------
I. Mironov. "Renyi Differential Privacy." CSF 2017, Prop. 1, 3, 7.
C. Canonne, G. Kamath, T. Steinke. "The Discrete Gaussian for Differential Privacy."
NeurIPS 2020, Prop. 12.
X. Guo, X. Li, X. Chang, S. Wang, Z. Zhang. "FedPower: Privacy-Preserving Distributed
Eigenspace Estimation." arXiv:2103.00704; Machine Learning (2024), doi:10.1007/s10994-024-06620-0.
M. Hardt, E. Price. "The Noisy Power Method." NeurIPS 2014.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from edge_runtime.fedpower import MECHANISM
from edge_runtime.fedpower._checks import check_steps
from edge_runtime.fpca.gaussian_mechanism import (
    NEIGHBOURS,
    REPLACE_ONE_SENSITIVITY,
    is_number,
)
from edge_runtime.fpca.gaussian_mechanism import finite_positive as _positive

__all__ = [
    "CONVERSIONS",
    "MECHANISM",
    "FedPowerBudget",
    "fedpower_noise_std",
    "gaussian_rdp",
    "power_step_sensitivity",
    "rdp_epsilon",
]


#: The RDP -> (epsilon, delta) conversions, the default first.
CONVERSIONS = ("mironov", "cks")

_LOG_ALPHA_MINUS_1 = (-12.0, 14.0)  # search range of log(alpha - 1) for "cks"


def power_step_sensitivity(rank: int) -> float:
    """L2 sensitivity of ``S Q`` (unit-ball rows, orthonormal ``(d, rank)`` ``Q``), replace-one.

    ``1`` for ``rank = 1`` and ``sqrt(2)`` for ``rank >= 2`` (module docstring).
    """
    return 1.0 if check_steps(rank, "rank") == 1 else REPLACE_ONE_SENSITIVITY


def _delta(delta: object) -> float:
    out = float(delta) if is_number(delta) else math.nan  # type: ignore[arg-type]
    if not 0.0 < out < 1.0:
        raise ValueError(f"delta must be a number in (0, 1), got {delta!r}")
    return out


def _conversion(conversion: object) -> str:
    if conversion not in CONVERSIONS:
        raise ValueError(f"conversion must be one of {CONVERSIONS}, got {conversion!r}")
    return str(conversion)


def gaussian_rdp(
    alpha: float, sigma: float, iterations: int = 1, sensitivity: float = 1.0
) -> float:
    """RDP at order ``alpha`` of ``iterations`` composed Gaussian mechanisms.

    ``iterations * alpha * sensitivity**2 / (2 sigma**2)`` (Mironov 2017, Prop. 7 and 1).

    Raises
    ------
    ValueError
        If ``alpha <= 1``, ``sigma`` or ``sensitivity`` is not a finite number > 0, or
        ``iterations < 1`` (one line).
    """
    a = _positive(alpha, "alpha")
    if a <= 1.0:
        raise ValueError(f"alpha must be > 1, got {alpha!r}")
    s = _positive(sigma, "sigma")
    t = check_steps(iterations, "iterations")
    return t * a * _positive(sensitivity, "sensitivity") ** 2 / (2.0 * s * s)


def _cks(c: float, log_delta: float, log_am1: float) -> float:
    """The CKS conversion at ``alpha = 1 + exp(log_am1)`` for ``rdp(alpha) = c alpha``."""
    am1 = math.exp(log_am1)
    alpha = 1.0 + am1
    return c * alpha + math.log(am1 / alpha) - (log_delta + math.log(alpha)) / am1


def _epsilon(c: float, log_delta: float, conversion: str) -> float:
    """``epsilon`` for ``rdp(alpha) = c alpha`` (``c = T Delta**2 / (2 sigma**2)``)."""
    if conversion == "mironov":
        return c + 2.0 * math.sqrt(-c * log_delta)
    grid = np.linspace(*_LOG_ALPHA_MINUS_1, 105)
    values = [_cks(c, log_delta, u) for u in grid]
    i = int(np.argmin(values))
    low, high = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    from scipy.optimize import minimize_scalar  # lazily: 0.35 s of an agent's start-up

    found = minimize_scalar(
        lambda u: _cks(c, log_delta, u),
        bounds=(low, high),
        method="bounded",
        options={"xatol": 1e-12},
    )
    # Any alpha gives a valid bound; keep the best point seen.
    return max(min(float(found.fun), values[i]), 0.0)


def rdp_epsilon(
    sigma: float,
    iterations: int,
    sensitivity: float,
    delta: float,
    conversion: str = "mironov",
) -> float:
    """``epsilon`` of ``iterations`` composed Gaussian mechanisms of std ``sigma``, at ``delta``.

    Parameters
    ----------
    sigma : float
        Noise std per coordinate, > 0, in the units of the query.
    iterations : int
        ``T`` >= 1, noisy steps that see the same reading (a device's local iterations).
    sensitivity : float
        L2 sensitivity ``Delta`` of one step, > 0 (`power_step_sensitivity`).
    delta : float
        In (0, 1).
    conversion : {"mironov", "cks"}, default="mironov"
        RDP -> (epsilon, delta) conversion (module docstring).

    Returns
    -------
    float
        ``epsilon`` >= 0; decreasing in ``sigma`` and ``delta``, increasing in ``T``.

    Raises
    ------
    ValueError
        One line naming the value out of range.

    Examples
    --------
    >>> round(rdp_epsilon(1.0, 1, 1.0, 1e-5), 4)  # 0.5 + 2 sqrt(0.5 ln 1e5)
    5.2985
    """
    s = _positive(sigma, "sigma")
    t = check_steps(iterations, "iterations")
    delta_ = _delta(delta)
    c = t * _positive(sensitivity, "sensitivity") ** 2 / (2.0 * s * s)
    return _epsilon(c, math.log(delta_), _conversion(conversion))


def fedpower_noise_std(
    epsilon: float,
    delta: float,
    iterations: int,
    sensitivity: float,
    conversion: str = "mironov",
) -> float:
    """The smallest ``sigma`` with `rdp_epsilon` ``(sigma, ...) <= epsilon``.

    For ``"mironov"`` in closed form: ``c = (sqrt(log(1/delta) + epsilon) -
    sqrt(log(1/delta)))**2`` solves ``c + 2 sqrt(c log(1/delta)) = epsilon``, and ``sigma =
    Delta sqrt(T / (2 c))``. For ``"cks"`` by Brent's method on ``log sigma`` (relative
    tolerance 1e-12), bracketed below the Mironov ``sigma``.

    Parameters
    ----------
    epsilon : float
        Budget per reading, finite and > 0.
    delta : float
        In (0, 1).
    iterations : int
        ``T`` >= 1: every local iteration the device may perform while holding the reading
        (all rounds of the schedule, `Schedule`; a device that sits a round out spends less).
    sensitivity : float
        ``Delta`` of one step, > 0 (`power_step_sensitivity`).
    conversion : {"mironov", "cks"}, default="mironov"

    Returns
    -------
    float
        ``sigma``, in the units of the query (``S Q`` of unit-ball rows); a device iterating
        on ``A = S / n`` adds ``sigma / n``.

    Raises
    ------
    ValueError
        One line naming the value out of range.

    Examples
    --------
    >>> sigma = fedpower_noise_std(1.0, 1e-5, 10, 2 ** 0.5)
    >>> round(rdp_epsilon(sigma, 10, 2 ** 0.5, 1e-5), 12)
    1.0
    """
    eps = _positive(epsilon, "epsilon")
    log_inv_delta = -math.log(_delta(delta))
    t = check_steps(iterations, "iterations")
    scale = _positive(sensitivity, "sensitivity")
    conv = _conversion(conversion)
    c = (math.sqrt(log_inv_delta + eps) - math.sqrt(log_inv_delta)) ** 2
    sigma_mironov = scale * math.sqrt(t / (2.0 * c))
    if conv == "mironov":
        return sigma_mironov

    def gap(log_sigma: float) -> float:
        c_ = t * scale * scale / (2.0 * math.exp(2.0 * log_sigma))
        return _epsilon(c_, -log_inv_delta, conv) - eps

    high = math.log(sigma_mironov)  # "cks" is never looser: gap(high) <= 0
    low = high - 1.0
    while gap(low) < 0.0:
        low -= 1.0
    from scipy.optimize import brentq  # lazily, as above

    return math.exp(brentq(gap, low, high, xtol=1e-14, rtol=1e-12, maxiter=500))


@dataclass(frozen=True)
class FedPowerBudget:
    """The guarantee of a private FedPower leaf, reported like FPCA's `PrivacyParams`.

    Every reading of the leaf is ``(epsilon, delta)``-DP with respect to everything the
    leaf publishes, for ``neighbours`` (replace-one) datasets, by ``mechanism``.

    Parameters
    ----------
    epsilon, delta : float
        The budget per reading.
    clip_norm : float
        Row norm bound ``C`` (readings' units) before the unit-ball scaling.
    sigma : float
        Noise std per entry of ``S Q`` (unit-ball Gram units), `fedpower_noise_std`.
    iterations : int
        Local iterations ``T`` the budget covers.
    sensitivity : float
        ``Delta`` of one step, `power_step_sensitivity`.
    conversion : str
        RDP conversion used (`CONVERSIONS`).
    mechanism : str, default=MECHANISM
    neighbours : str, default="replace-one"
    """

    epsilon: float
    delta: float
    clip_norm: float
    sigma: float
    iterations: int
    sensitivity: float
    conversion: str = "mironov"
    mechanism: str = MECHANISM
    neighbours: str = NEIGHBOURS

    @classmethod
    def calibrate(
        cls,
        epsilon: float,
        delta: float,
        clip_norm: float,
        iterations: int,
        rank: int,
        conversion: str = "mironov",
    ) -> FedPowerBudget:
        """The budget with ``sigma = fedpower_noise_std(...)`` for a rank-``rank`` step."""
        clip = _positive(clip_norm, "clip_norm")
        sensitivity = power_step_sensitivity(rank)
        sigma = fedpower_noise_std(epsilon, delta, iterations, sensitivity, conversion)
        return cls(
            float(epsilon), float(delta), clip, sigma, int(iterations), sensitivity, conversion
        )

    def as_dict(self) -> dict[str, object]:
        """The fields as a plain dict (for status and summaries)."""
        return asdict(self)
