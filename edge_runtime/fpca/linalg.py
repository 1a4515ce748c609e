"""The kernels shared by `merge_subspaces` (Alg. 2) and `FPCAEdge` (eq. (3)).

Both operations are the same computation: the rank-``t`` truncated SVD of
``M = [lambda * U S, C]`` where ``U`` is an orthonormal ``(n_features, t0)`` basis,
``S`` its singular values and ``C`` a ``(n_features, k)`` matrix of new columns
(``U2 S2`` for a merge, the block transposed for a streaming update), computed without
forming an SVD of the ``(n_features, t0 + k)`` concatenation.

Three formulations, chosen per call (measurements in ``benchmarks/README.md``):

``"gram_d"`` (``n_features <= t0 + k``, e.g. d = 48, t0 = 20, b = 50)
    ``G = M M^T = U (lambda S)^2 U^T + C C^T`` (two ``syrk``), then the symmetric
    eigendecomposition ``G = V W V^T``; the new basis is the leading ``t``
    eigenvectors (orthonormal by construction, also for rank-deficient blocks) and the
    singular values are recomputed as the row norms of ``U_new^T M``, which is as
    precise as an SVD's (absolute error ~ eps * s_1).
``"gram_small"`` (``n_features > t0 + k``)
    ``H = M^T M`` of size ``t0 + k`` from ``S`` (diagonal block), ``(lambda U S)^T C``
    and ``C^T C`` (or ``S2^2`` when ``C = U2 S2`` in a merge); ``H = V W V^T``;
    ``Y = M V_t``, ``s = ||Y_i||``, ``U_new = Y / s`` re-orthonormalised by one Cholesky
    QR (Householder QR if the Gram of ``Y`` is singular).

Both eigendecompositions are `numpy.linalg.eigh` (LAPACK ``dsyevd``, divide and
conquer). They used to be scipy's ``dsytrd`` + ``dstevd`` + ``dormqr`` on the
kept eigenvectors only, 10-15 % faster at n = 48 when measured, but
``lapack.dstevd`` exists only from scipy 1.17 and importing scipy costs a leaf far
more (below); `tests/test_fpca_linalg_fallback.py` checks the two agree.
``"qr_svd"`` (the paper's Alg. 2 as written; the precise fallback)
    Projection ``Z = U^T C`` with re-orthogonalisation, an orthonormal basis ``Q R``
    of the residual (QR, or a truncated SVD when it has more columns than room), SVD
    of the small ``[[lambda S, Z], [0, R]]`` (``gesdd``, ``gesvd`` if it does not
    converge), final re-orthonormalisation.

The two Gram formulations square the condition number: an eigenvector of ``G`` or
``H`` is accurate to about ``eps * s_1**2 / gap`` instead of ``eps * s_1 / gap``. They
are used only when the singular value of the checked rank (the rank a caller reports)
satisfies ``s_r >= GRAM_MIN_RATIO**0.5 * s_1`` (here ``s_r >= 1e-3 s_1``), so they lose
at most three of the SVD's sixteen digits on the reported subspace; otherwise (also
for data of lower rank than the checked rank, or if LAPACK reports a failure) the
call falls back to ``"qr_svd"``. Nothing here inverts a possibly singular matrix: the
Motes blocks are rank-deficient, which only adds zero eigenvalues.

numpy only: every BLAS and LAPACK call is numpy's (``A @ A.T`` is a ``syrk``), so a
leaf never imports scipy, which costs ~0.3 s and ~25 MB of RSS at import (on
a Pi Zero 2 several seconds) and whose LAPACK wrappers differ between the scipy
versions a Pi gets (Debian bookworm's 1.10 has no ``dstevd``). scipy is imported
lazily in one place: `thin_svd`'s ``gesvd`` fallback when ``gesdd`` fails to
converge, which numpy lacks. Against those scipy kernels, side by side with
one BLAS thread: a Motes block update (d = 48, b = 50) takes ~20 % longer (~240 instead
of ~200 us, i.e. ~1 us more per reading: numpy's per-call overhead and dsyevd's full
back-transformation), a d = 48 merge ~25 % longer, a d = 800, r = 100 merge ~13 % less.
"""

from __future__ import annotations

import numpy as np

__all__ = ["GRAM_MIN_RATIO", "TrackedBasis", "UpdateBuffers", "svd_update", "thin_svd"]

#: The Gram formulations are used when ``s_r**2 >= GRAM_MIN_RATIO * s_1**2`` for the
#: checked rank ``r`` (i.e. ``s_r >= 1e-3 * s_1``), else the QR + SVD formulation.
GRAM_MIN_RATIO = 1e-6

_LinAlgError = np.linalg.LinAlgError


def thin_svd(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Economy SVD ``a = u @ diag(s) @ vt`` by LAPACK ``gesdd``, ``gesvd`` if it fails.

    ``a`` must be finite. ``gesdd`` is numpy's; only if its divide and conquer fails to
    converge (rare) is scipy imported, for ``gesvd`` (QR iteration), which numpy lacks.
    """
    try:
        return np.linalg.svd(a, full_matrices=False)
    except _LinAlgError:
        import scipy.linalg  # lazily: numpy has no gesvd; 0.1-0.4 s and ~25 MB at import

        return scipy.linalg.svd(a, full_matrices=False, check_finite=False, lapack_driver="gesvd")


class UpdateBuffers:
    """Preallocated work arrays for repeated `svd_update` calls of bounded size.

    Parameters
    ----------
    n_features : int
        ``d``.
    max_tracked : int
        Largest ``t0`` (columns of the basis) and ``t`` (columns kept), ``<= d``.
    max_cols : int
        Largest ``k`` (new columns per update).

    Memory: ``d * max_tracked + min(d, max_tracked + max_cols)**2 + max_tracked``
    float64 values, i.e. ``O(d * (max_tracked + max_cols))`` (the square is at most
    ``d * (max_tracked + max_cols)``).
    """

    def __init__(self, n_features: int, max_tracked: int, max_cols: int) -> None:
        side = min(n_features, max_tracked + max_cols)
        self.scaled = np.empty((n_features, max_tracked), order="F")
        self.square = np.empty(side * side)
        self.lambda_s = np.empty(max_tracked)

    def square_view(self, n: int) -> np.ndarray:
        """The first ``n * n`` entries as an ``(n, n)`` Fortran-ordered view."""
        if n * n > self.square.shape[0]:  # only for a forced method beyond the sizes
            return np.empty((n, n), order="F")
        return self.square[: n * n].reshape((n, n), order="F")


def _scale(
    basis: np.ndarray, lambda_s: np.ndarray, buffers: UpdateBuffers | None
) -> np.ndarray | None:
    """``lambda U S`` ``(d, t0)`` (a buffer's view), None if ``t0 = 0``."""
    d, t0 = basis.shape
    if not t0:
        return None
    scaled = buffers.scaled[:, :t0] if buffers is not None else np.empty((d, t0), order="F")
    return np.multiply(basis, lambda_s, out=scaled)


def _gram_surely_rejected(lambda_s: np.ndarray, cols_sv: np.ndarray, check_rank: int) -> bool:
    """Whether the Gram test must fail for ``M = [U diag(lambda_s), U2 diag(cols_sv)]``.

    Weyl's inequality for ``M M^T = A + B`` (``A``, ``B`` positive semi-definite with
    eigenvalues ``a = lambda_s**2``, ``b = cols_sv**2``, descending) bounds
    ``lambda_r(M M^T) <= min_{i + j = r + 1} (a_i + b_j)`` (zero beyond their lengths),
    and ``lambda_1(M M^T) >= max(a_1, b_1)``. If even these bounds fail the test, a
    merge goes straight to ``"qr_svd"`` instead of computing the Gram matrix first.
    """
    r = check_rank
    a = np.zeros(r + 1)
    b = np.zeros(r + 1)
    sq = np.sort(np.square(lambda_s))[::-1][:r]
    a[1 : sq.shape[0] + 1] = sq
    sq = np.sort(np.square(cols_sv))[::-1][:r]
    b[1 : sq.shape[0] + 1] = sq
    # i = 1..r, j = r + 1 - i; a[0] = b[0] = 0 stand for "no such eigenvalue".
    upper = float(np.min(a[1:] + b[r:0:-1]))
    top = max(float(a[1]), float(b[1]))
    return upper < GRAM_MIN_RATIO * top


def _accept_gram(w: np.ndarray, check_rank: int) -> bool:
    """Whether eigenvalues ``w`` (ascending) are conditioned enough for the Gram paths."""
    top = w[-1]
    if top <= 0.0:
        return top == 0.0  # all-zero data: any orthonormal basis is exact
    return bool(w[w.shape[0] - check_rank] >= GRAM_MIN_RATIO * top)


def _eigh_top(a: np.ndarray, k: int, out: np.ndarray) -> np.ndarray | None:
    """Eigenvalues (ascending) of ``a``; its ``k`` leading eigenvectors into ``out``.

    ``a`` is ``(n, n)`` with its lower triangle set (the upper one is not read).
    ``out`` (``(n, k)``) gets the eigenvectors of the ``k`` largest eigenvalues, largest
    first. None if LAPACK reports a failure. `numpy.linalg.eigh` (``dsyevd``).
    """
    n = a.shape[0]
    if n == 1:
        out[0, :k] = 1.0
        return a[0].copy()
    try:
        w, v = np.linalg.eigh(a, UPLO="L")
    except _LinAlgError:
        return None
    np.copyto(out, v[:, n - k :][:, ::-1])
    return w


def _gram_d(
    basis: np.ndarray,
    lambda_s: np.ndarray,
    cols: np.ndarray,
    t: int,
    check_rank: int,
    out_basis: np.ndarray,
    buffers: UpdateBuffers | None,
) -> np.ndarray | None:
    """``"gram_d"``: writes the basis into ``out_basis[:, :t]``, returns the singular values."""
    d = basis.shape[0]
    gram = buffers.square_view(d) if buffers is not None else np.empty((d, d), order="F")
    # numpy calls syrk for a product with its own transpose: C C^T + (lambda U S)(...)^T.
    np.matmul(cols, cols.T, out=gram)
    scaled = _scale(basis, lambda_s, buffers)
    if scaled is not None:
        gram += scaled @ scaled.T
    new = out_basis[:, :t]
    w = _eigh_top(gram, t, new)
    if w is None or not _accept_gram(w, check_rank):
        return None
    # Singular values as the row norms of U_new^T M: an SVD's precision, not sqrt(w)'s.
    proj = new.T @ cols
    sq = np.einsum("ij,ij->i", proj, proj)
    if scaled is not None:
        proj = new.T @ scaled
        sq += np.einsum("ij,ij->i", proj, proj)
    return np.sqrt(sq, out=sq)


def _gram_small(
    basis: np.ndarray,
    lambda_s: np.ndarray,
    cols: np.ndarray,
    cols_sv: np.ndarray | None,
    t: int,
    check_rank: int,
    out_basis: np.ndarray,
    buffers: UpdateBuffers | None,
) -> np.ndarray | None:
    """``"gram_small"``: writes the basis into ``out_basis[:, :t]``, returns the singular values."""
    t0 = basis.shape[1]
    n = t0 + cols.shape[1]
    h = buffers.square_view(n) if buffers is not None else np.empty((n, n), order="F")
    h.fill(0.0)  # eigh reads the lower triangle only
    flat_diag = h.reshape(-1, order="F")[:: n + 1]
    scaled = _scale(basis, lambda_s, buffers)
    if scaled is not None:
        np.square(lambda_s, out=flat_diag[:t0])  # (lambda U S)^T (lambda U S), exactly
        h[t0:, :t0] = cols.T @ scaled
    if cols_sv is not None:
        np.square(cols_sv, out=flat_diag[t0:])  # C^T C of C = U2 S2, exactly
    else:
        h[t0:, t0:] = cols.T @ cols  # syrk
    lead = np.empty((n, t), order="F")
    w = _eigh_top(h, t, lead)
    if w is None or not _accept_gram(w, check_rank):
        return None
    y = out_basis[:, :t]
    if scaled is not None:
        np.matmul(scaled, lead[:t0], out=y)
        y += cols @ lead[t0:]
    else:
        np.matmul(cols, lead, out=y)
    sv = np.sqrt(np.einsum("ij,ij->j", y, y))
    np.divide(y, np.where(sv > 0.0, sv, 1.0), out=y)
    _orthonormalise(y)
    return sv


def _orthonormalise(y: np.ndarray) -> None:
    """Make the nearly orthonormal columns of ``y`` orthonormal in place.

    One Cholesky QR (``y <- y R^{-1}``, ``R^T R = y^T y``) keeps each column's direction
    and sign up to the correction; if ``y^T y`` is not numerically positive definite
    (columns of directions with zero singular value), a Householder QR instead.
    """
    if y.shape[1] == 0:
        return
    try:
        low = np.linalg.cholesky(y.T @ y)  # y^T y = L L^T, R = L^T
    except _LinAlgError:
        low = None
    # The columns have unit norm, so a diagonal of R far below 1 means (nearly)
    # dependent columns, for which Cholesky QR would lose orthogonality.
    if low is not None and np.min(np.diagonal(low)) > 0.5:
        # y R^{-1} = y (L^{-1})^T. numpy has no triangular solve; L is close to the
        # identity (condition ~1), so its explicit inverse loses nothing, and inverting
        # the small L then one product is 3-4x faster than numpy's general solve.
        np.matmul(y, np.linalg.inv(low).T, out=y)
        return
    y[...] = np.linalg.qr(y)[0]


def _qr_svd(
    basis: np.ndarray,
    lambda_s: np.ndarray,
    cols: np.ndarray,
    t: int,
    out_basis: np.ndarray,
) -> np.ndarray:
    """``"qr_svd"`` (Alg. 2 as written): precise for any conditioning and rank.

    * the projection is done twice (classical Gram-Schmidt with re-orthogonalisation),
      so the residual is orthogonal to ``U`` to working precision;
    * only ``m = min(k, d - t0)`` columns of the residual's orthonormal basis ``Q`` are
      kept, so the small matrix never has more than ``d`` rows: a QR of the residual
      if ``k <= d - t0`` (nothing to drop), else its SVD truncated to ``m`` (the
      residual has rank ``<= d - t0``, so what is dropped is rounding; an unpivoted
      QR could give one of the ``m`` places to an all-zero column such as a sample of
      zeros);
    * the result is re-orthonormalised by a QR (a no-op up to rounding for directions
      carrying data; it makes directions with zero singular value orthonormal too).
    """
    d, t0 = basis.shape
    k = cols.shape[1]
    m = min(k, d - t0)
    small = np.zeros((t0 + m, t0 + k))
    if t0:
        z = basis.T @ cols
        resid = cols - basis @ z
        z2 = basis.T @ resid
        resid -= basis @ z2
        z += z2
        small[np.arange(t0), np.arange(t0)] = lambda_s
        small[:t0, t0:] = z
    else:
        resid = np.array(cols, copy=True)
    q = None
    if m == k:
        q, small[t0:, t0:] = np.linalg.qr(resid)
    elif m:
        q, s_res, vt_res = thin_svd(resid)
        q = q[:, :m]
        np.multiply(s_res[:m, None], vt_res[:m], out=small[t0:, t0:])
    u_small, s, _ = thin_svd(small)
    u_small = u_small[:, :t]
    new = basis @ u_small[:t0] if t0 else np.zeros((d, t))
    if q is not None:
        new += q @ u_small[t0:]
    out_basis[:, :t] = np.linalg.qr(new)[0]
    return s[:t].copy()


def svd_update(
    basis: np.ndarray,
    singular_values: np.ndarray,
    cols: np.ndarray,
    rank: int,
    forget: float = 1.0,
    *,
    cols_singular_values: np.ndarray | None = None,
    check_rank: int | None = None,
    out_basis: np.ndarray | None = None,
    buffers: UpdateBuffers | None = None,
    method: str = "auto",
) -> tuple[np.ndarray, np.ndarray]:
    """Rank-``rank`` SVD of ``[forget * basis * singular_values, cols]``, left side only.

    Parameters
    ----------
    basis : ndarray of shape (n_features, t0)
        Orthonormal columns ``U``. Not modified.
    singular_values : ndarray of shape (t0,)
        ``S``, non-negative.
    cols : ndarray of shape (n_features, k)
        New columns ``C``; finite. Not modified.
    rank : int
        Columns to keep; the result has ``t = min(rank, t0 + k, n_features)``.
    forget : float
        Forgetting factor ``lambda`` applied to ``S``.
    cols_singular_values : ndarray of shape (k,) or None
        If given, ``cols = U2 * cols_singular_values`` with orthonormal ``U2`` (a merge),
        so ``C^T C`` is exactly ``diag(cols_singular_values**2)``.
    check_rank : int or None
        Rank whose conditioning decides whether a Gram formulation is accurate enough
        (see the module docstring); default ``rank``.
    out_basis : ndarray of shape (n_features, >= t), Fortran order, or None
        Where to write the new basis (its first ``t`` columns); must not overlap
        ``basis``. None allocates.
    buffers : UpdateBuffers or None
        Preallocated work arrays (None allocates them).
    method : {"auto", "gram_d", "gram_small", "qr_svd"}
        Formulation; "auto" picks ``"gram_d"`` if ``n_features <= t0 + k`` else
        ``"gram_small"``, and ``"qr_svd"`` when a Gram formulation is not accurate
        enough. Forcing a Gram formulation still falls back to ``"qr_svd"``.

    Returns
    -------
    basis : ndarray of shape (n_features, t)
        Orthonormal; a view of ``out_basis`` if given. Signs are not normalised.
    singular_values : ndarray of shape (t,)
        Non-increasing, non-negative.
    """
    d, t0 = basis.shape
    k = cols.shape[1]
    t = min(rank, t0 + k, d)
    if out_basis is None:
        out_basis = np.empty((d, max(t, 0)), order="F")
    if t <= 0:
        return out_basis[:, :0], np.zeros(0)
    if buffers is not None:
        lambda_s = np.multiply(singular_values, forget, out=buffers.lambda_s[:t0])
    else:
        lambda_s = forget * np.asarray(singular_values, dtype=np.float64)
    if k == 0:
        out_basis[:, :t] = basis[:, :t]
        return out_basis[:, :t], lambda_s[:t].copy()
    check = t if check_rank is None else max(1, min(check_rank, t))
    if method == "auto":
        method = "gram_d" if d <= t0 + k else "gram_small"
        if cols_singular_values is not None and _gram_surely_rejected(
            lambda_s, cols_singular_values, check
        ):
            method = "qr_svd"
    sv = None
    if method == "gram_d":
        sv = _gram_d(basis, lambda_s, cols, t, check, out_basis, buffers)
    elif method == "gram_small":
        sv = _gram_small(
            basis,
            lambda_s,
            cols,
            cols_singular_values,
            t,
            check,
            out_basis,
            buffers,
        )
    elif method != "qr_svd":
        raise ValueError(f"unknown method {method!r}")
    if sv is None:
        sv = _qr_svd(basis, lambda_s, cols, t, out_basis)
    elif sv.shape[0] > 1 and np.any(sv[1:] > sv[:-1]):
        # Recomputed singular values of (near) ties can be out of order by rounding.
        order = np.argsort(-sv, kind="stable")
        sv = sv[order]
        out_basis[:, :t] = out_basis[:, :t][:, order]
    return out_basis[:, :t], sv


class TrackedBasis:
    """A streaming state ``(U, S)`` in two preallocated basis buffers, swapped per update.

    ``basis`` ``(d, t)`` (a view of one buffer) and ``singular_values`` ``(t)``, ``t <=
    max_tracked``; each `update` (eq. (3), `svd_update`) writes the next basis into the
    spare buffer, so no update allocates a basis. Memory: ``2 d max_tracked`` float64
    values plus `UpdateBuffers`.
    """

    def __init__(self, n_features: int, max_tracked: int, max_cols: int) -> None:
        self._buffers = (
            np.empty((n_features, max_tracked), order="F"),
            np.empty((n_features, max_tracked), order="F"),
        )
        self._work = UpdateBuffers(n_features, max_tracked, max_cols)
        self.empty()

    def empty(self) -> None:
        """No directions."""
        self._current = 0
        self.basis = self._buffers[0][:, :0]
        self.singular_values = np.zeros(0)

    def update(
        self,
        cols: np.ndarray,
        cols_singular_values: np.ndarray | None,
        rank: int,
        forget: float,
        check_rank: int,
    ) -> None:
        """State <- `svd_update` of the state and ``cols`` ``(d, k)``, keeping ``rank``."""
        out = self._buffers[1 - self._current]
        self.basis, self.singular_values = svd_update(
            self.basis,
            self.singular_values,
            cols,
            rank,
            forget,
            cols_singular_values=cols_singular_values,
            check_rank=check_rank,
            out_basis=out,
            buffers=self._work,
        )
        self._current = 1 - self._current

    def set(self, basis: np.ndarray, singular_values: np.ndarray, *, spare: bool = True) -> None:
        """State <- ``basis`` ``(d, t)`` copied into a buffer (the spare one), ``singular_values``.

        ``singular_values`` is kept as given with ``spare``; copied into buffer 0 (a
        restore) otherwise.
        """
        if spare:
            out = self._buffers[1 - self._current]
            self._current = 1 - self._current
        else:
            out = self._buffers[0]
            self._current = 0
            singular_values = np.array(singular_values, dtype=np.float64, copy=True)
        t = basis.shape[1]
        out[:, :t] = basis
        self.basis = out[:, :t]
        self.singular_values = singular_values

    def truncate(self, keep: int) -> None:
        """Keep the leading ``keep`` directions."""
        self.basis = self.basis[:, :keep]
        self.singular_values = self.singular_values[:keep]
