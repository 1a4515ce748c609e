"""Symmetric MOD-SuLQ (Chaudhuri, Sarwate, Sinha, JMLR 14, 2013, Alg. 1), for comparison.

For ``n`` samples in the unit ball, release ``A + E`` with ``A = (1/n) X^T X`` (rows are
samples, so ``A`` is ``d x d``) and ``E`` symmetric: its upper triangle, diagonal
included, i.i.d. ``N(0, beta**2)``, mirrored below the diagonal, with

    beta = (d + 1) / (epsilon n) sqrt(2 ln((d**2 + d) / (2 delta sqrt(2 pi))))
           + 1 / (sqrt(epsilon) n)

(`edge_runtime.fpca.privacy.mod_sulq_noise_std`; eq. (6) of Grammenos et al. 2020).
The output is the top-``k`` eigenvectors of the masked matrix; the release is
``(epsilon, delta)``-differentially private with respect to replacing one sample.
FPCA-Edge's ``mechanism="fpca-eq8"`` masks each block with a *non-symmetric* mask of
standard deviation ``omega`` (eq. (8)) instead, about four times ``beta`` at d = 20.
"""

from __future__ import annotations

import numpy as np

from benchmarks.privacy._common import check_rank, unit_rows
from edge_runtime.fpca.privacy import mod_sulq_noise_std

__all__ = ["mod_sulq", "mod_sulq_eigenpairs", "symmetric_gaussian"]


def symmetric_gaussian(n_features: int, std: float, rng: np.random.Generator) -> np.ndarray:
    """A symmetric ``(d, d)`` matrix whose upper triangle (with diagonal) is i.i.d. N(0, std**2).

    Parameters
    ----------
    n_features : int
        ``d``, >= 1.
    std : float
        Standard deviation of every entry, >= 0.
    rng : numpy.random.Generator

    Returns
    -------
    ndarray of shape (n_features, n_features)
        ``E == E.T``; ``d (d + 1) / 2`` independent entries.
    """
    if std < 0:
        raise ValueError(f"std must be >= 0, got {std}")
    upper = np.triu(rng.standard_normal((n_features, n_features)) * std)
    return upper + np.triu(upper, 1).T


def mod_sulq_eigenpairs(
    x: np.ndarray,
    rank: int,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``rank`` largest eigenpairs of ``(1/n) X^T X + E``, E the symmetric MOD-SuLQ mask.

    Parameters
    ----------
    x : ndarray of shape (n_samples, n_features)
        Samples as rows, every row of norm <= 1.
    rank : int
        Eigenpairs returned, ``1 <= rank <= n_features``.
    epsilon, delta : float
        Privacy budget, ``epsilon > 0``, ``0 < delta < 1``.
    rng : numpy.random.Generator
        Source of the mask (one `symmetric_gaussian` draw).

    Returns
    -------
    basis : ndarray of shape (n_features, rank)
        Orthonormal eigenvectors, in decreasing order of eigenvalue.
    eigenvalues : ndarray of shape (rank,)
        The masked second moment's eigenvalues (unit-ball units; may be negative).

    Raises
    ------
    ValueError
        If a row has norm > 1, or a budget or size is out of range.
    """
    arr = unit_rows(x)
    n, d = arr.shape
    k = check_rank(rank, d)
    beta = mod_sulq_noise_std(epsilon, delta, d, n)
    masked = (arr.T @ arr) / n + symmetric_gaussian(d, beta, rng)
    values, vectors = np.linalg.eigh(masked)
    return np.ascontiguousarray(vectors[:, ::-1][:, :k]), values[::-1][:k].copy()


def mod_sulq(
    x: np.ndarray,
    rank: int,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Top-``rank`` eigenvectors of ``(1/n) X^T X + E``, E the symmetric MOD-SuLQ mask.

    `mod_sulq_eigenpairs` without the eigenvalues.

    Parameters
    ----------
    x : ndarray of shape (n_samples, n_features)
        Samples as rows, every row of norm <= 1.
    rank : int
        Directions returned, ``1 <= rank <= n_features``.
    epsilon, delta : float
        Privacy budget, ``epsilon > 0``, ``0 < delta < 1``.
    rng : numpy.random.Generator
        Source of the mask.

    Returns
    -------
    ndarray of shape (n_features, rank)
        Orthonormal columns, in decreasing order of the masked eigenvalues.

    Raises
    ------
    ValueError
        If a row has norm > 1, or a budget or size is out of range.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.eye(3)[[0, 0, 0, 1]] * 0.9
    >>> basis = mod_sulq(x, 1, 1e6, 0.05, np.random.default_rng(0))
    >>> round(abs(float(basis[0, 0])), 6)
    1.0
    """
    return mod_sulq_eigenpairs(x, rank, epsilon, delta, rng)[0]
