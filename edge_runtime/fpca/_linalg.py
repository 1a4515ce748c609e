"""Private kernels shared by `merge_subspaces` (Alg. 2) and `FPCAEdge` (eq. (3)).

Both operations are the same computation: the rank-``r`` truncated SVD of
``[lambda * U1 S1, C]`` where ``U1`` is an orthonormal basis, ``S1`` its singular
values and ``C`` a ``(n_features, k)`` matrix of new columns (``U2 S2`` for a merge,
the block transposed for a streaming update), computed without ever forming the
``(n_features, r1 + k)`` concatenation.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from edge_runtime.fpca.subspace import flip_signs

__all__ = ["svd_update", "thin_svd"]


def thin_svd(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Economy SVD ``a = u @ diag(s) @ vt`` by LAPACK ``gesdd``, ``gesvd`` if it fails.

    ``a`` must already be known to be finite (``check_finite`` is off).
    """
    try:
        return sla.svd(a, full_matrices=False, check_finite=False, lapack_driver="gesdd")
    except np.linalg.LinAlgError:
        # gesdd's divide and conquer occasionally fails to converge; gesvd (QR
        # iteration) is slower but more robust.
        return sla.svd(a, full_matrices=False, check_finite=False, lapack_driver="gesvd")


def svd_update(
    basis: np.ndarray,
    singular_values: np.ndarray,
    cols: np.ndarray,
    rank: int,
    forget: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Rank-``rank`` SVD of ``[forget * basis * singular_values, cols]``, left side only.

    Parameters
    ----------
    basis : ndarray of shape (n_features, r1)
        Orthonormal columns ``U1``.
    singular_values : ndarray of shape (r1,)
        ``S1``, non-negative.
    cols : ndarray of shape (n_features, k)
        New columns ``C``; finite. Not modified.
    rank : int
        Requested rank; the result has ``min(rank, r1 + k, n_features)`` columns.
    forget : float
        Forgetting factor ``lambda`` applied to ``S1``.

    Returns
    -------
    basis : ndarray of shape (n_features, rank'), orthonormal, signs flipped
    singular_values : ndarray of shape (rank',), non-increasing

    Notes
    -----
    Alg. 2 of Grammenos et al. (2020) with ``C = U2 S2``: ``Z = U1^T C``,
    ``[Q, R] = QR(C - U1 Z)`` and the SVD of the small ``(r1 + m) x (r1 + k)`` matrix
    ``[[lambda S1, Z], [0, R]]``; the new basis is ``[U1, Q] U_small``. Three
    safeguards keep it exact in floating point:

    * the projection is done twice (classical Gram-Schmidt with
      re-orthogonalisation), so ``Q`` is orthogonal to ``U1`` to working precision;
    * the QR is column-pivoted, so the rows of ``R`` beyond the numerical rank of
      ``C - U1 Z`` (at most ``n_features - r1``) are negligible and only
      ``m = min(k, n_features - r1)`` columns of ``Q`` need to be kept: the small
      matrix never has more than ``n_features`` rows, e.g. for blocks larger than
      ``n_features - r`` (without pivoting, an all-zero column such as a sample of zeros would
      take one of the ``m`` places);
    * the result is re-orthonormalised by a QR (a no-op up to rounding for the
      directions carrying data; it makes directions with zero singular value, which
      appear when ``rank`` exceeds the rank of the data, orthonormal too).
    """
    n_features, r1 = basis.shape
    k = cols.shape[1]
    rank = min(rank, r1 + k, n_features)
    if rank <= 0:
        return np.zeros((n_features, 0)), np.zeros(0)
    if k == 0:
        return flip_signs(basis[:, :rank]), forget * singular_values[:rank]

    m = min(k, n_features - r1)
    small = np.zeros((r1 + m, r1 + k))
    if r1:
        z = basis.T @ cols
        resid = cols - basis @ z
        z2 = basis.T @ resid
        resid -= basis @ z2
        z += z2
        small[np.arange(r1), np.arange(r1)] = forget * singular_values
        small[:r1, r1:] = z
    else:
        resid = cols
    if m:
        q, r, piv = sla.qr(
            resid, mode="economic", pivoting=True, check_finite=False, overwrite_a=r1 > 0
        )
        q = q[:, :m]
        # resid[:, piv] = q @ r, so column piv[j] of the unpermuted R is r[:, j].
        small[r1:, r1 + piv] = r[:m]

    u_small, s, _ = thin_svd(small)
    u_small = u_small[:, :rank]
    new_basis = basis @ u_small[:r1] if r1 else np.zeros((n_features, rank))
    if m:
        new_basis += q @ u_small[r1:]
    new_basis = sla.qr(new_basis, mode="economic", check_finite=False, overwrite_a=True)[0]
    return flip_signs(new_basis), s[:rank].copy()
