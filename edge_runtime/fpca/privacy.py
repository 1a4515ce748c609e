"""Differential privacy for FPCA-Edge: the mechanisms, their noise scales and block sizes.

Two mechanisms (`MECHANISMS`), chosen by ``FPCAEdge(mechanism=...)`` and the topology key
``mechanism``:

- ``"gaussian"`` (the default): the Gaussian mechanism on each block's Gram matrix with the
  analytic calibration (`analytic_gaussian_sigma`, re-exported from `gaussian_mechanism`),
  kept as a running noisy sum (`private_gram`) with optional continual release
  (`continual`). Its noise does not grow with ``d`` beyond the Gaussian mechanism's own.
- ``"fpca-eq8"``: streaming MOD-SuLQ as printed in the paper, described below; kept to
  reproduce the paper. Its noise carries a factor ``d`` (172-268x the Gaussian
  mechanism's at ``d = 48``), which leaves nothing of the signal at sensor-sized data.

Streaming MOD-SuLQ (Grammenos et al. 2020, Sec. 3.3). A private estimator perturbs each
block's covariance before anything is derived from it. For a block of ``n`` samples
scaled to the unit ball (``||x|| <= 1``), the ``(d, d)`` covariance ``A = (1/n) X^T X``
(rows are samples) is released as ``A + N`` with ``N`` a non-symmetric Gaussian mask of
i.i.d. ``N(0, omega**2)`` entries, built ``c`` columns at a time (eq. (7)): chunk ``j``
is ``(1/n) X^T X[:, J] + N[:, J]``, so the extra memory is ``O(d c)`` and the whole ``d
x d`` matrix never exists. The chunks are reduced to a rank-``t`` summary by the
streaming block update (eq. (3)) and only that summary enters the estimate, so
everything published afterwards is post-processing of masked blocks. Each sample lies in
exactly one block, so the stream as a whole is ``(epsilon, delta)``-differentially
private with respect to replacing one sample (parallel composition over disjoint
blocks).

This module holds the noise scales (eq. (6), eq. (8)), the minimum block size
(Lemma 2.2), the clipping to the unit ball and the masked block summary; `FPCAEdge`
(``privacy=(epsilon, delta)``) applies them block by block.

References
----------
A. Grammenos, R. Mendoza-Smith, J. Crowcroft, C. Mascolo. "Federated Principal
Component Analysis." NeurIPS 2020, arXiv:1907.08059: eq. (5)-(8), Lemma 2.
K. Chaudhuri, A. D. Sarwate, K. Sinha. "A Near-Optimal Algorithm for
Differentially-Private Principal Components." JMLR 14, 2013 (MOD-SuLQ).
"""

from __future__ import annotations

import math

import numpy as np

from edge_runtime.fpca._validation import check_int, check_positive
from edge_runtime.fpca.gaussian_mechanism import NEIGHBOURS, analytic_gaussian_sigma, is_number
from edge_runtime.fpca.linalg import svd_update
from edge_runtime.fpca.private_gram import release_noise_std

__all__ = [
    "DEFAULT_TARGET_SPECTRAL",
    "MAX_DEFAULT_BLOCK_BYTES",
    "MECHANISMS",
    "NEIGHBOURS",
    "analytic_gaussian_sigma",
    "check_budget",
    "clip_to_unit_ball",
    "default_block_size",
    "gaussian_default_block_size",
    "min_block_size",
    "mod_sulq_noise_std",
    "noise_std",
    "private_block_summary",
]

#: The default block size aims at a mask whose expected spectral norm, ``~2 omega
#: sqrt(d)``, is at most this fraction of 1 (the largest eigenvalue a covariance of
#: unit-ball samples can have): ``target_std = DEFAULT_TARGET_SPECTRAL / (2 sqrt(d))``.
DEFAULT_TARGET_SPECTRAL = 0.1

#: `default_block_size` refuses block buffers above this many bytes (64 MiB).
MAX_DEFAULT_BLOCK_BYTES = 64 * 2**20

_SQRT_2PI = math.sqrt(2.0 * math.pi)

#: The private mechanisms, the default first.
MECHANISMS = ("gaussian", "fpca-eq8")


def check_budget(epsilon: object, delta: object) -> tuple[float, float]:
    """``(epsilon, delta)`` as floats, checked: ``epsilon`` finite and > 0, ``0 < delta < 1``.

    Returns
    -------
    tuple of (float, float)

    Raises
    ------
    ValueError
        One line naming the value out of range (or not a number).
    """
    if not (is_number(epsilon) and is_number(delta)):
        raise ValueError(
            f"privacy budget must be numbers (epsilon, delta), got ({epsilon!r}, {delta!r})"
        )
    eps = float(epsilon)  # type: ignore[arg-type]
    dlt = float(delta)  # type: ignore[arg-type]
    if not (math.isfinite(eps) and eps > 0.0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not 0.0 < dlt < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return eps, dlt


def _check_sizes(
    epsilon: object, delta: object, n_features: object, n_samples: object
) -> tuple[float, float, int, int]:
    """The arguments of the noise scales, checked (`check_budget`, ``d, n >= 1``)."""
    eps, dlt = check_budget(epsilon, delta)
    return eps, dlt, check_int(n_features, "n_features", 1), check_int(n_samples, "n_samples", 1)


def _log_term(numerator: float, delta: float, what: str) -> float:
    """``sqrt(2 ln(numerator / (delta sqrt(2 pi))))``; ValueError if the log is <= 0."""
    ratio = numerator / (delta * _SQRT_2PI)
    if not ratio > 1.0:
        raise ValueError(
            f"{what} needs {numerator:g} / (delta sqrt(2 pi)) > 1, got delta {delta!r} "
            "(use a smaller delta)"
        )
    return math.sqrt(2.0 * math.log(ratio))


def noise_std(epsilon: float, delta: float, n_features: int, n_samples: int) -> float:
    """Standard deviation ``omega`` of the non-symmetric mask of streaming MOD-SuLQ, eq. (8).

    ``omega = 4 d / (epsilon n) * sqrt(2 ln(d**2 / (delta sqrt(2 pi)))) + sqrt(2) /
    (sqrt(epsilon) n)``, the scale that makes releasing ``(1/n) X^T X + N`` with
    ``N_ij ~ N(0, omega**2)`` i.i.d. (``d x d``, not symmetric)
    ``(epsilon, delta)``-differentially private for ``n`` samples with ``||x|| <= 1``
    (Grammenos et al. 2020, eq. (7)-(8); the form of the authors' reference code).

    Parameters
    ----------
    epsilon : float
        Privacy budget, > 0.
    delta : float
        Failure probability, ``0 < delta < 1`` (and ``d**2 / (delta sqrt(2 pi)) > 1``,
        true for any ``delta < 0.39``).
    n_features : int
        Dimension ``d``, >= 1.
    n_samples : int
        Samples ``n`` in the masked covariance (a block), >= 1.

    Returns
    -------
    float
        ``omega``, in the units of the unit-ball covariance (dimensionless).

    Raises
    ------
    ValueError
        If a value is out of range; the message names it.
    """
    eps, dlt, d, n = _check_sizes(epsilon, delta, n_features, n_samples)
    log_term = _log_term(float(d * d), dlt, "noise_std (eq. (8))")
    return 4.0 * d / (eps * n) * log_term + math.sqrt(2.0) / (math.sqrt(eps) * n)


def mod_sulq_noise_std(epsilon: float, delta: float, n_features: int, n_samples: int) -> float:
    """Standard deviation ``beta`` of symmetric MOD-SuLQ's mask, eq. (6).

    ``beta = (d + 1) / (epsilon n) * sqrt(2 ln((d**2 + d) / (2 delta sqrt(2 pi)))) + 1 /
    (sqrt(epsilon) n)`` (Chaudhuri, Sarwate, Sinha 2013, Alg. 1; Grammenos et al. 2020,
    eq. (6)): the mask is symmetric, its upper triangle (diagonal included) i.i.d.
    ``N(0, beta**2)``. For comparison with `noise_std`; not used by `FPCAEdge`.

    Parameters
    ----------
    epsilon, delta, n_features, n_samples
        As `noise_std` (``(d**2 + d) / (2 delta sqrt(2 pi)) > 1`` is required).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If a value is out of range; the message names it.
    """
    eps, dlt, d, n = _check_sizes(epsilon, delta, n_features, n_samples)
    log_term = _log_term(float(d * d + d) / 2.0, dlt, "mod_sulq_noise_std (eq. (6))")
    return (d + 1.0) / (eps * n) * log_term + 1.0 / (math.sqrt(eps) * n)


def min_block_size(epsilon: float, delta: float, n_features: int, target_std: float) -> int:
    """Smallest block size ``T`` whose mask has ``noise_std(epsilon, delta, d, T) <= target_std``.

    Lemma 2.2 of Grammenos et al. (2020), derived from eq. (8): ``omega`` is
    ``K / n`` with ``K = 4 d / epsilon * sqrt(2 ln(d**2 / (delta sqrt(2 pi)))) +
    sqrt(2 / epsilon)``, so ``omega <= target`` exactly when ``n >= K / target``, and
    ``T = ceil(K / target)``. (The printed lemma carries a stray inverse; this is the
    bound that eq. (8) gives.)

    Parameters
    ----------
    epsilon, delta, n_features
        As `noise_std`.
    target_std : float
        The largest acceptable ``omega``, > 0.

    Returns
    -------
    int
        ``T >= 1``; ``noise_std(..., T) <= target_std < noise_std(..., T - 1)``.

    Raises
    ------
    ValueError
        If a value is out of range; the message names it.
    """
    eps, dlt = check_budget(epsilon, delta)
    d = check_int(n_features, "n_features", 1)
    target = check_positive(target_std, "target_std")
    scale = noise_std(eps, dlt, d, 1)  # K: omega at n = 1
    size = max(1, math.ceil(scale / target))
    # ceil of a rounded quotient can be one off; settle it on omega itself.
    while size > 1 and noise_std(eps, dlt, d, size - 1) <= target:
        size -= 1
    while noise_std(eps, dlt, d, size) > target:
        size += 1
    return size


def default_block_size(epsilon: float, delta: float, n_features: int) -> int:
    """The block size `FPCAEdge` uses with privacy when none is given: ``T`` of Lemma 2.2.

    ``T = min_block_size(epsilon, delta, d, target)`` for ``target =
    DEFAULT_TARGET_SPECTRAL / (2 sqrt(d))``: the mask's expected spectral norm
    (``~2 omega sqrt(d)``) is then at most a tenth of the largest possible eigenvalue
    of a unit-ball covariance.

    Parameters
    ----------
    epsilon, delta, n_features
        As `noise_std`.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        If a value is out of range, or if the block buffer (``T * d * 8`` bytes) would
        exceed `MAX_DEFAULT_BLOCK_BYTES`; the message gives ``T`` and asks for an
        explicit block size.
    """
    d = check_int(n_features, "n_features", 1)
    target = DEFAULT_TARGET_SPECTRAL / (2.0 * math.sqrt(d))
    size = min_block_size(epsilon, delta, d, target)
    return _check_block_bytes(size, d, epsilon, delta, f" for noise std {target:.3g}")


def gaussian_default_block_size(
    epsilon: float, delta: float, n_features: int, horizon: int = 1
) -> int:
    """The block size `FPCAEdge` uses with ``mechanism="gaussian"`` when none is given.

    The smallest ``T`` whose release noise has an expected spectral norm (``sqrt(2)
    sigma sqrt(d)`` for the symmetrised ``d x d`` noise of `release_noise_std` ``sigma``,
    Wigner's semicircle law) of at most `DEFAULT_TARGET_SPECTRAL` times ``T``, the
    largest eigenvalue the Gram matrix of ``T`` unit-ball rows can have. 517 at
    ``epsilon = 1, delta = 1e-5, d = 48`` (``H = 1``).

    Parameters
    ----------
    epsilon, delta : float
        The budget.
    n_features : int
        ``d``.
    horizon : int, default=1
        ``H`` of the continual release.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        If a value is out of range, or the block buffer (``T * d * 8`` bytes) would exceed
        `MAX_DEFAULT_BLOCK_BYTES`.
    """
    eps, dlt = check_budget(epsilon, delta)
    d = check_int(n_features, "n_features", 1)
    spectral = math.sqrt(2.0) * release_noise_std(eps, dlt, horizon) * math.sqrt(d)
    size = max(1, math.ceil(spectral / DEFAULT_TARGET_SPECTRAL))
    return _check_block_bytes(size, d, epsilon, delta)


def _check_block_bytes(size: int, d: int, epsilon: float, delta: float, why: str = "") -> int:
    """``size`` if a ``(size, d)`` float64 block fits `MAX_DEFAULT_BLOCK_BYTES`, else ValueError.

    The message gives the budget, ``T = size``, the block's MiB and ``why`` (appended
    after them), and asks for an explicit block size.
    """
    if size * d * 8 > MAX_DEFAULT_BLOCK_BYTES:
        raise ValueError(
            f"privacy=({epsilon}, {delta}) at n_features={d} needs blocks of T={size} samples "
            f"({size * d * 8 / 2**20:.0f} MiB){why}; pass block_size (smaller blocks are noisier)"
        )
    return size


def clip_to_unit_ball(X: np.ndarray, clip_norm: float, out: np.ndarray | None = None) -> np.ndarray:  # noqa: N803
    """Rows clipped to Euclidean norm ``clip_norm``, then divided by it (``||x|| <= 1``).

    ``x -> x * min(1, C / ||x||) / C``: rows within the norm are only rescaled, longer
    rows keep their direction and get norm 1. The sensitivity analysis behind eq. (6)
    and (8) assumes ``||x|| <= 1``; `FPCAEdge` multiplies by ``C`` again when it
    converts a block summary back to the data's scale.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Finite float64 samples as rows.
    clip_norm : float
        ``C`` > 0, in the data's units.
    out : ndarray of shape (n_samples, n_features) or None
        Where to write the result (may be ``X`` itself); None allocates.

    Returns
    -------
    ndarray of shape (n_samples, n_features)
        float64, every row of norm <= 1.

    Raises
    ------
    ValueError
        If ``clip_norm`` is not a finite number > 0 or ``X`` is not 2-D.
    """
    c = check_positive(clip_norm, "clip_norm")
    x = np.asarray(X, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features), got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1)
    # factor = min(1, C / ||x||) / C = 1 / max(C, ||x||)
    factor = 1.0 / np.maximum(norms, c)
    if out is None:
        out = np.empty_like(x)
    np.multiply(x, factor[:, None], out=out)
    return out


def private_block_summary(
    unit_rows: np.ndarray,
    epsilon: float,
    delta: float,
    rank: int,
    chunk_size: int,
    rng: np.random.Generator,
    *,
    check_rank: int | None = None,
    chunk: np.ndarray | None = None,
    noise: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Rank-``rank`` summary of one block's masked covariance, built in column chunks (eq. (7)).

    For ``k`` unit-ball rows ``X`` (``(k, d)``), streams the columns of ``A + N``,
    ``A = (1/k) X^T X``, ``N_ij ~ N(0, omega**2)`` i.i.d. with ``omega = noise_std(epsilon,
    delta, d, k)``, ``chunk_size`` columns at a time through the block update (eq. (3)):
    chunk ``J`` is ``(1/k) X^T X[:, J] + N[:, J]``, a fresh mask for every chunk and
    every call. Only the masked chunks reach the update, so the result is
    ``(epsilon, delta)``-DP in the rows of ``X`` (eq. (8)).

    Parameters
    ----------
    unit_rows : ndarray of shape (k, n_features)
        The block, rows of norm <= 1 (`clip_to_unit_ball`); ``k >= 1``. Not modified.
    epsilon, delta : float
        The budget of this block.
    rank : int
        Directions kept, ``t``.
    chunk_size : int
        Columns ``c`` per chunk, >= 1.
    rng : numpy.random.Generator
        Source of the mask.
    check_rank : int or None
        As `svd_update` (the reported rank; default ``rank``).
    chunk, noise : ndarray of shape (n_features, chunk_size), C order, or None
        Preallocated work arrays (None allocates them).

    Returns
    -------
    basis : ndarray of shape (n_features, t)
        Leading left singular vectors of the masked covariance, ``t = min(rank, d)``.
    values : ndarray of shape (t,)
        Its singular values (estimates of the covariance's eigenvalues,
        dimensionless).
    omega : float
        The mask's standard deviation.

    Raises
    ------
    ValueError
        As `noise_std`, for a budget out of range.
    """
    k, d = unit_rows.shape
    omega = noise_std(epsilon, delta, d, k)
    c = min(chunk_size, d)
    if chunk is None:
        chunk = np.empty((d, c))
    if noise is None:
        noise = np.empty((d, c))
    basis = np.empty((d, 0), order="F")
    values = np.zeros(0)
    inv_k = 1.0 / k
    for start in range(0, d, c):  # ceil(d / c) chunks
        width = min(c, d - start)
        cols = chunk[:, :width]
        mask = noise[:, :width]
        np.matmul(unit_rows.T, unit_rows[:, start : start + width], out=cols)
        cols *= inv_k
        rng.standard_normal(out=mask) if mask.flags.c_contiguous else _fill_normal(rng, mask)
        mask *= omega
        cols += mask
        basis, values = svd_update(basis, values, cols, rank, 1.0, check_rank=check_rank)
    return basis, values, omega


def _fill_normal(rng: np.random.Generator, target: np.ndarray) -> None:
    """Fill a non-contiguous view with standard normals (the last, narrower chunk)."""
    target[...] = rng.standard_normal(target.shape)
