"""The published private PCA algorithms the report compares with (benchmarks, not runtime).

- Symmetric MOD-SuLQ, Chaudhuri, Sarwate, Sinha, JMLR 14 (2013), Alg. 1: top eigenvectors
  of ``(1/n) X^T X + E``, ``E`` symmetric with i.i.d. ``N(0, beta**2)`` upper triangle,
  ``beta`` = `edge_runtime.fpca.privacy.mod_sulq_noise_std` (eq. (6) of Grammenos et al.).
- DPdisPCA, Imtiaz and Sarwate, IEEE JSTSP 12(6) (2018): site ``s`` masks its own second
  moment with ``tau_s = sqrt(2 ln(1.25/delta)) / (N_s epsilon)`` (the papers' and the
  authors' code's classical constant at sensitivity ``1/N_s``; under replace-one it would be
  up to sqrt(2) larger, which favours DPdisPCA) and sends ``P_s = U_R |Lambda_R|^{1/2}``
  (top ``R`` by magnitude); the aggregator returns the top eigenvectors of
  ``(1/S) sum_s P_s P_s^T``. ``S = 1`` is the centralised algorithm.

Samples are rows, ``(n_samples, n_features)``, float64, already in the unit ball (their
privacy analyses assume it): ValueError otherwise. Bases are ``(n_features, rank)``,
orthonormal, in decreasing order of eigenvalue.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from edge_runtime.fpca.privacy import check_budget, mod_sulq_noise_std

__all__ = [
    "check_rank", "dpdispca", "dpdispca_noise_std", "mod_sulq", "mod_sulq_eigenpairs",
    "site_factor", "symmetric_gaussian", "unit_rows",
]  # fmt: skip

#: Rows may exceed norm 1 by this much (rounding of a division by the largest norm).
NORM_SLACK = 1e-9


def unit_rows(x: object) -> np.ndarray:
    """``x`` as a finite non-empty 2-D float64 array of rows of norm <= 1; ValueError else."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"X must be a non-empty 2-D array (n_samples, n_features): {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("X has non-finite values")
    largest = float(np.sqrt(np.max(np.einsum("ij,ij->i", arr, arr))))
    if largest > 1.0 + NORM_SLACK:
        raise ValueError(
            "X must lie in the unit ball (the privacy analysis assumes ||x|| <= 1), largest "
            f"row norm {largest:.6g}; clip first (clip_to_unit_ball)"
        )
    return arr


def check_rank(rank: object, n_features: int) -> int:
    """``rank`` as an int in ``1 .. n_features``; TypeError / ValueError otherwise."""
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer):
        raise TypeError(f"rank must be an integer, got {rank!r}")
    if not 1 <= int(rank) <= n_features:
        raise ValueError(f"rank must be in 1 .. {n_features}, got {rank}")
    return int(rank)


def symmetric_gaussian(n_features: int, std: float, rng: np.random.Generator) -> np.ndarray:
    """``(d, d)`` symmetric matrix, upper triangle (diagonal included) i.i.d. N(0, std**2)."""
    if std < 0:
        raise ValueError(f"std must be >= 0, got {std}")
    upper = np.triu(rng.standard_normal((n_features, n_features)) * std)
    return upper + np.triu(upper, 1).T


def _masked(
    x: object, std: Callable[[int, int], float], rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    """``(1/n) X^T X + E``, ``E`` of std ``std(n, d)`` for unit-ball rows ``x``; and ``d``."""
    arr = unit_rows(x)
    n, d = arr.shape
    return (arr.T @ arr) / n + symmetric_gaussian(d, std(n, d), rng), d


def mod_sulq_eigenpairs(
    x: np.ndarray, rank: int, epsilon: float, delta: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """MOD-SuLQ's ``rank`` largest eigenpairs: basis ``(d, rank)`` and eigenvalues ``(rank,)``
    of the masked second moment (unit-ball units, may be negative); one mask drawn from ``rng``.
    """
    masked, d = _masked(x, lambda n, d: mod_sulq_noise_std(epsilon, delta, d, n), rng)
    k = check_rank(rank, d)
    values, vectors = np.linalg.eigh(masked)
    return np.ascontiguousarray(vectors[:, ::-1][:, :k]), values[::-1][:k].copy()


def mod_sulq(
    x: np.ndarray, rank: int, epsilon: float, delta: float, rng: np.random.Generator
) -> np.ndarray:
    """MOD-SuLQ's basis ``(d, rank)`` (`mod_sulq_eigenpairs` without the eigenvalues).

    >>> x = np.eye(3)[[0, 0, 0, 1]] * 0.9
    >>> round(abs(float(mod_sulq(x, 1, 1e6, 0.05, np.random.default_rng(0))[0, 0])), 6)
    1.0
    """
    return mod_sulq_eigenpairs(x, rank, epsilon, delta, rng)[0]


def dpdispca_noise_std(epsilon: float, delta: float, n_samples: int) -> float:
    """One site's mask std ``tau = sqrt(2 ln(1.25 / delta)) / (n_samples epsilon)``.

    >>> round(dpdispca_noise_std(1.0, 0.05, 100), 6)
    0.025373
    """
    epsilon, delta = check_budget(epsilon, delta)
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples!r}")
    return math.sqrt(2.0 * math.log(1.25 / delta)) / (n_samples * epsilon)


def site_factor(
    x: np.ndarray, intermediate_rank: int, epsilon: float, delta: float, rng: np.random.Generator
) -> np.ndarray:
    """One site's message ``P_s = U_R |Lambda_R|^{1/2}``, ``(d, R)``, from its rows ``(N_s, d)``."""
    masked, d = _masked(x, lambda n, _: dpdispca_noise_std(epsilon, delta, n), rng)
    r = check_rank(intermediate_rank, d)
    values, vectors = np.linalg.eigh(masked)
    keep = np.argsort(-np.abs(values), kind="stable")[:r]
    return vectors[:, keep] * np.sqrt(np.abs(values[keep]))


def dpdispca(
    sites: Sequence[np.ndarray],
    rank: int,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
    *,
    intermediate_rank: int | None = None,
) -> np.ndarray:
    """DPdisPCA's basis ``(d, rank)`` over ``sites`` (``(N_s, d)`` each, every site at the
    budget); ``intermediate_rank`` R defaults to ``min(d, 2 rank)`` (the authors' code).
    ValueError without sites, for differing ``d`` or ``R < rank``.

    >>> x = np.eye(3)[[0, 0, 0, 1]] * 0.9
    >>> basis = dpdispca([x[:2], x[2:]], 1, 1e6, 0.05, np.random.default_rng(0))
    >>> round(abs(float(basis[0, 0])), 6)
    1.0
    """
    if len(sites) == 0:
        raise ValueError("dpdispca needs at least one site")
    dims = {np.shape(s)[-1] for s in sites}
    if len(dims) != 1:
        raise ValueError(f"all sites need the same n_features, got {sorted(dims)}")
    d = dims.pop()
    k = check_rank(rank, d)
    r = min(d, 2 * k) if intermediate_rank is None else check_rank(intermediate_rank, d)
    if r < k:
        raise ValueError(f"intermediate_rank must be >= rank ({k}), got {r}")
    aggregate = sum(p @ p.T for p in (site_factor(s, r, epsilon, delta, rng) for s in sites))
    _, vectors = np.linalg.eigh(aggregate / len(sites))
    return np.ascontiguousarray(vectors[:, ::-1][:, :k])
