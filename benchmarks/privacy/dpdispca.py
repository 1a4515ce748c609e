"""DPdisPCA (Imtiaz and Sarwate, IEEE JSTSP 12(6), 2018), for comparison.

Distributed differentially private PCA in one round. Site ``s`` holds ``N_s`` samples in
the unit ball and computes

    A_s = (1/N_s) X_s^T X_s + E_s                      (rows are samples; d x d)

with ``E_s`` a symmetric Gaussian mask (upper triangle, diagonal included, i.i.d.
``N(0, tau_s**2)``, mirrored), the Gaussian mechanism of Imtiaz and Sarwate, "Symmetric
matrix perturbation for differentially-private principal component analysis", ICASSP
2016, with

    tau_s = sqrt(2 ln(1.25 / delta)) / (N_s epsilon).

It then sends ``P_s = U_R |Lambda_R|^{1/2}``, the leading ``R`` eigenpairs of ``A_s``
ranked by magnitude (the SVD of the symmetric ``A_s``, as the authors' MATLAB code
computes it); the aggregator forms ``(1/S) sum_s P_s P_s^T`` and outputs its top-``k``
eigenvectors. Every site's release is ``(epsilon, delta)``-DP in its own samples, and
the sites hold disjoint samples. ``S = 1`` is the centralised algorithm.

Calibration used, and why: ``tau_s`` above is the constant of the papers, which is
also the one in the authors' reference code (``my_AG`` in ``hafizimtiaz/capePCA``):
the classical Gaussian mechanism, ``sqrt(2 ln(1.25/delta)) * sensitivity / epsilon``,
with L2 sensitivity ``1/N_s`` of the upper triangle of ``(1/N_s) X_s^T X_s`` for rows of
norm <= 1. We keep it so that the comparator is the published algorithm. Two caveats,
both in DPdisPCA's favour, reported with the benchmark: replacing one sample ``e1`` by
``e2`` moves that upper triangle by ``sqrt(2)/N_s`` in L2 (so under the replace-one
relation used by MOD-SuLQ and FPCA-Edge the mask would be up to ``sqrt(2)`` larger),
and the classical Gaussian-mechanism bound is proven only for ``epsilon < 1``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from benchmarks.privacy._common import check_rank, top_eigenvectors, unit_rows
from benchmarks.privacy.mod_sulq import symmetric_gaussian
from edge_runtime.fpca.privacy import check_budget

__all__ = ["dpdispca", "dpdispca_noise_std", "site_factor"]


def dpdispca_noise_std(epsilon: float, delta: float, n_samples: int) -> float:
    """``tau = sqrt(2 ln(1.25 / delta)) / (n_samples epsilon)``, one site's mask std.

    Parameters
    ----------
    epsilon : float
        > 0.
    delta : float
        In (0, 1).
    n_samples : int
        The site's ``N_s``, >= 1.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If a value is out of range.

    Examples
    --------
    >>> round(dpdispca_noise_std(1.0, 0.05, 100), 6)
    0.025373
    """
    epsilon, delta = check_budget(epsilon, delta)
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples!r}")
    return math.sqrt(2.0 * math.log(1.25 / delta)) / (n_samples * epsilon)


def site_factor(
    x: np.ndarray,
    intermediate_rank: int,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """One site's message ``P_s = U_R |Lambda_R|^{1/2}``, shape ``(d, R)``.

    Parameters
    ----------
    x : ndarray of shape (N_s, n_features)
        The site's samples, rows of norm <= 1.
    intermediate_rank : int
        ``R``, ``1 <= R <= n_features``.
    epsilon, delta : float
        The site's budget.
    rng : numpy.random.Generator
        Source of the mask.

    Returns
    -------
    ndarray of shape (n_features, R)
    """
    arr = unit_rows(x)
    n, d = arr.shape
    r = check_rank(intermediate_rank, d)
    masked = (arr.T @ arr) / n + symmetric_gaussian(d, dpdispca_noise_std(epsilon, delta, n), rng)
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
    """DPdisPCA over ``sites``: top-``rank`` eigenvectors of ``(1/S) sum_s P_s P_s^T``.

    Parameters
    ----------
    sites : sequence of ndarray of shape (N_s, n_features)
        One array per site (``S >= 1``), rows of norm <= 1, the same ``n_features``.
    rank : int
        ``k``, directions returned, ``1 <= k <= n_features``.
    epsilon, delta : float
        Every site's budget.
    rng : numpy.random.Generator
        Source of all sites' masks.
    intermediate_rank : int or None, default=None
        ``R``, the rank of each site's message, ``>= rank``; None means
        ``min(n_features, 2 rank)`` (the default of the authors' code).

    Returns
    -------
    ndarray of shape (n_features, rank)
        Orthonormal columns in decreasing order of the aggregate's eigenvalues.

    Raises
    ------
    ValueError
        If there are no sites, the sites' dimensions differ, a row has norm > 1, or a
        budget or rank is out of range.

    Examples
    --------
    >>> import numpy as np
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
    aggregate = np.zeros((d, d))
    for s in sites:
        p = site_factor(s, r, epsilon, delta, rng)
        aggregate += p @ p.T
    aggregate /= len(sites)
    return top_eigenvectors(aggregate, k)
