"""Continual release of prefix sums: the square-root factorisation of the prefix-sum matrix.

A leaf that publishes after every block releases the prefix sums ``S_t = sum_{j <= t}
G_j`` of its blocks' Gram matrices, ``t = 1..H`` (``H``, the horizon, declared in the
topology). Noising every block independently and summing makes the noise of ``S_t`` grow
as ``sqrt(t)``. The square-root factorisation ``M = R R`` of the ``H x H`` lower-triangular
all-ones matrix ``M`` (``R`` lower-triangular Toeplitz with ``c_k = binom(2k, k) / 4**k``)
releases ``R (G_1..G_H) + Z`` and outputs ``R (R G + Z) = M G + R Z``: the prefix sums
plus ``sum_{j <= t} c_{t-j} Z_j``. Changing one reading changes one ``G_j`` by at most
``Delta`` (Frobenius), so ``R G`` changes by at most ``Delta * ||R e_1|| = Delta *
sqrt(sum_{k < H} c_k**2)``: the noise ``Z_j`` is the Gaussian mechanism's at that
sensitivity (`continual_multiplier`), and the noise of ``S_t`` has std ``sigma *
multiplier(H) * multiplier(t)``, which grows like ``1 + ln(t) / pi`` instead of ``sqrt(t)``.
``H = 1`` is the plain independent release of every block.

After ``H`` releases the segment closes: its last output is kept as a constant and a new
segment (fresh noise, the next blocks) starts. Segments cover disjoint readings, so
the guarantee per reading is unchanged; the noise of a long stream grows as
``multiplier(H)**2 * sqrt(number of segments)``.

Memory: the noise ``Z_j`` is not stored but regenerated from a per-segment secret key
and ``j`` (`numpy.random.SeedSequence`), so a segment costs one ``(d, d)`` work matrix and
``O(t d**2)`` time per release (``t <= H``).

References
----------
M. Henzinger, J. Upadhyay, S. Upadhyay. "Almost Tight Error Bounds on Differentially
Private Continual Counting." SODA 2023.
H. Fichtenberger, M. Henzinger, J. Upadhyay. "Constant Matters: Fine-grained Error Bound
on Differentially Private Continual Observation." ICML 2023.
"""

from __future__ import annotations

import math

import numpy as np

from edge_runtime.fpca.gaussian_mechanism import symmetric_noise

__all__ = [
    "MAX_HORIZON",
    "continual_multiplier",
    "prefix_noise",
    "sqrt_factorisation_coefficients",
]

#: Largest horizon accepted: a release at step t regenerates t noise matrices.
MAX_HORIZON = 4096


def sqrt_factorisation_coefficients(horizon: int) -> np.ndarray:
    """``c_k = binom(2k, k) / 4**k`` for ``k < horizon``: the first column of ``sqrt(M)``.

    ``c_0 = 1`` and ``c_k = c_{k-1} (2k - 1) / (2k)``; ``sum_{i <= k} c_i c_{k-i} = 1``
    for every ``k`` (so ``R R = M``, the prefix-sum matrix).

    Parameters
    ----------
    horizon : int
        ``H >= 1``.

    Returns
    -------
    ndarray of shape (horizon,)
        float64, decreasing from 1.
    """
    k = np.arange(1, horizon, dtype=np.float64)
    return np.concatenate(([1.0], np.cumprod((2.0 * k - 1.0) / (2.0 * k))))


def continual_multiplier(horizon: int) -> float:
    """``sqrt(sum_{k < H} c_k**2)``: the sensitivity factor of ``R`` (its first column's norm).

    1 for ``H = 1``; 1.22 for 4, 1.55 for 64, 1.81 for 1024.

    Parameters
    ----------
    horizon : int
        ``H >= 1``.

    Returns
    -------
    float
    """
    coeffs = sqrt_factorisation_coefficients(horizon)
    return math.sqrt(float(coeffs @ coeffs))


def prefix_noise(
    step: int, n_features: int, sigma: float, key: np.ndarray, coefficients: np.ndarray
) -> np.ndarray:
    """The noise of the ``step``-th prefix sum of a segment: ``sum_{j=1}^{step} c_{step-j} Z_j``.

    ``Z_j`` is `symmetric_noise` of std ``sigma``, drawn from a generator seeded by
    ``SeedSequence(key, spawn_key=(j,))``, so every call regenerates the same ``Z_j``.

    Parameters
    ----------
    step : int
        ``t``, 1 <= t <= len(coefficients).
    n_features : int
        ``d``.
    sigma : float
        Std of the entries of each ``W_j`` behind ``Z_j = (W_j + W_j^T) / 2``.
    key : ndarray of uint32
        The segment's secret entropy.
    coefficients : ndarray of shape (H,)
        `sqrt_factorisation_coefficients`.

    Returns
    -------
    ndarray of shape (n_features, n_features)
        float64, symmetric.
    """
    total = np.zeros((n_features, n_features))
    for j in range(1, step + 1):
        seed = np.random.SeedSequence([int(v) for v in key], spawn_key=(j,))
        rng = np.random.Generator(np.random.PCG64(seed))
        total += coefficients[step - j] * symmetric_noise(n_features, sigma, rng)
    return total
