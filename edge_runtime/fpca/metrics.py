"""Accuracy measures for subspace estimates, and the exact offline baseline.

The error of a basis ``U`` on data ``X`` is the mean squared residual of projecting
each sample onto ``span(U)`` (supplementary eq. (66) of Grammenos et al. (2020),
written for rows). Dividing by the error of the exact rank-``r`` truncated SVD of
``X`` gives the error ratio reported in the paper's experiments: 1.0 is optimal.
"""

from __future__ import annotations

import numpy as np

from edge_runtime.fpca._validation import as_float_array, check_finite_2d, check_int
from edge_runtime.fpca.linalg import thin_svd
from edge_runtime.fpca.subspace import Subspace, flip_signs

__all__ = ["error_ratio", "offline_subspace", "principal_angles", "projection_error"]

#: Squared errors at or below this fraction of the mean squared norm of the samples
#: (a residual norm of 1e-10 relative) count as zero in `error_ratio`.
ZERO_ERROR_RTOL = 1e-20

#: When the offline error is zero, an estimate's squared error at or below this fraction of
#: the mean squared norm still counts as zero: a basis that went through float32 (the wire's
#: default dtype) leaves about 6e-15 of rounding (measured on 400 x 3 Gaussian rows).
ESTIMATE_ZERO_RTOL = 1e-12


def _as_data(x: object, name: str = "X") -> np.ndarray:
    """``x`` as a finite float64 ``(n_samples, n_features)`` array with >= 1 row."""
    arr = as_float_array(x, name)
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (n_samples, n_features), got {arr.ndim}-D with shape {arr.shape}"
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must have at least one sample and one feature, got {arr.shape}")
    check_finite_2d(arr, name)
    return arr


def _as_basis(basis: object, n_features: int, name: str = "basis") -> np.ndarray:
    arr = as_float_array(basis, name)
    if arr.ndim != 2 or arr.shape[0] != n_features:
        raise ValueError(f"{name} must have shape ({n_features}, rank), got {arr.shape}")
    check_finite_2d(arr, name)
    return arr


def offline_subspace(X: np.ndarray, rank: int) -> Subspace:  # noqa: N803 (scikit-learn name)
    """The exact rank-``rank`` truncated SVD of ``X``: the batch (centralised) answer.

    Costs one economy SVD, ``O(n_samples * n_features * min(n_samples, n_features))``
    time and ``O(n_samples * n_features)`` memory.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Samples as rows, finite, at least one row. Not centred (as in the paper).
    rank : int
        Number of leading right singular vectors to keep, >= 0; capped at
        ``min(n_samples, n_features)``.

    Returns
    -------
    Subspace
        ``basis`` of shape ``(n_features, rank)``: the top right singular vectors of
        ``X`` as columns with deterministic signs; ``singular_values`` of shape
        ``(rank,)``; ``n_samples = X.shape[0]``.

    Raises
    ------
    TypeError
        If ``X`` is not numeric or ``rank`` not an integer.
    ValueError
        If ``X`` is not 2-D, is empty, contains NaN or infinity, or ``rank < 0``.

    Examples
    --------
    >>> import numpy as np
    >>> from edge_runtime.fpca import offline_subspace
    >>> offline_subspace(np.diag([3.0, 2.0, 1.0]), 2).singular_values
    array([3., 2.])
    """
    x = _as_data(X)
    r = check_int(rank, "rank", 0)
    r = min(r, *x.shape)
    _, s, vt = thin_svd(x)
    return Subspace(flip_signs(vt[:r].T), s[:r], x.shape[0])


def projection_error(X: np.ndarray, basis: np.ndarray) -> float:  # noqa: N803 (scikit-learn name)
    """Mean squared residual ``(1/n) ||X - X U U^T||_F^2`` of projecting onto ``span(U)``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Samples as rows, finite, at least one row.
    basis : array-like of shape (n_features, rank)
        ``U``, assumed orthonormal (not checked); rank 0 gives the mean squared norm.

    Returns
    -------
    float
        Non-negative, in squared units of ``X`` per sample.

    Raises
    ------
    ValueError
        If shapes disagree, ``X`` is empty or either contains NaN or infinity.

    Notes
    -----
    Supplementary eq. (66) of Grammenos et al. (2020), with samples as rows.

    Examples
    --------
    >>> import numpy as np
    >>> from edge_runtime.fpca import projection_error
    >>> projection_error(np.array([[3.0, 4.0]]), np.array([[1.0], [0.0]]))
    16.0
    """
    x = _as_data(X)
    u = _as_basis(basis, x.shape[1])
    resid = x - (x @ u) @ u.T
    return float(np.einsum("ij,ij->", resid, resid) / x.shape[0])


def error_ratio(X: np.ndarray, basis: np.ndarray) -> float:  # noqa: N803 (scikit-learn name)
    """``projection_error(X, basis)`` divided by that of the exact rank-``r`` basis.

    ``r = basis.shape[1]``; 1.0 means the estimate is as good as the offline SVD
    (`offline_subspace`), larger is worse. When the offline error is zero (``X`` has
    rank <= ``r``; zero means at most ``ZERO_ERROR_RTOL`` times the mean squared norm
    of the samples), the ratio is 1.0 if the estimate's error is zero to float32
    precision (at most ``ESTIMATE_ZERO_RTOL`` times that norm), else ``inf``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Samples as rows, finite, at least one row.
    basis : array-like of shape (n_features, rank)
        Orthonormal estimate, e.g. ``FPCAEdge(...).subspace.basis``.

    Returns
    -------
    float
        >= 1.0 up to rounding, or ``inf``.

    Raises
    ------
    ValueError
        As `projection_error`.

    Examples
    --------
    >>> import numpy as np
    >>> from edge_runtime.fpca import error_ratio, offline_subspace
    >>> x = np.random.default_rng(0).normal(size=(100, 5))
    >>> round(error_ratio(x, offline_subspace(x, 2).basis), 12)
    1.0
    """
    x = _as_data(X)
    u = _as_basis(basis, x.shape[1])
    err = projection_error(x, u)
    best = projection_error(x, offline_subspace(x, u.shape[1]).basis)
    zero = ZERO_ERROR_RTOL * float(np.einsum("ij,ij->", x, x) / x.shape[0])
    if best <= zero:
        return 1.0 if err <= zero * (ESTIMATE_ZERO_RTOL / ZERO_ERROR_RTOL) else float("inf")
    return err / best


def principal_angles(a_basis: np.ndarray, b_basis: np.ndarray) -> np.ndarray:
    """Principal angles between ``span(a_basis)`` and ``span(b_basis)``, in radians.

    Parameters
    ----------
    a_basis : array-like of shape (n_features, r_a)
    b_basis : array-like of shape (n_features, r_b)
        Need not be orthonormal (orthonormalised first, as `scipy.linalg.subspace_angles`).

    Returns
    -------
    ndarray of shape (min(r_a, r_b),)
        Angles in [0, pi/2], largest first; 0 for equal spans; empty if either
        rank is 0.

    Raises
    ------
    ValueError
        If the ``n_features`` differ or an input is not 2-D or not finite.

    Examples
    --------
    >>> import numpy as np
    >>> from edge_runtime.fpca import principal_angles
    >>> a = np.eye(3)[:, :2]
    >>> principal_angles(a, a @ np.array([[0.0, 1.0], [1.0, 0.0]]))
    array([0., 0.])
    """
    a = np.asarray(a_basis, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"a_basis must be 2-D (n_features, rank), got shape {a.shape}")
    b = _as_basis(b_basis, a.shape[0], "b_basis")
    check_finite_2d(a, "a_basis")
    if a.shape[1] == 0 or b.shape[1] == 0:
        return np.zeros(0)
    return _subspace_angles(a, b)


def _orth(a: np.ndarray) -> np.ndarray:
    """Orthonormal basis of ``range(a)`` by SVD, numerical rank as `scipy.linalg.orth`."""
    u, s, _ = thin_svd(a)
    if s.shape[0] == 0:
        return u
    tol = max(a.shape) * np.finfo(np.float64).eps * s[0]
    return u[:, : int(np.sum(s > tol))]


def _subspace_angles(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`scipy.linalg.subspace_angles` in numpy (Knyazev & Argentati, SIAM J. Sci.
    Comput. 23(6), 2002: the sines of the small angles from the SVD of the difference,
    where the cosines lose precision), largest angle first."""
    qa, qb = _orth(a), _orth(b)
    cross = qa.T @ qb
    cos = np.linalg.svd(cross, compute_uv=False)
    diff = qb - qa @ cross if qa.shape[1] >= qb.shape[1] else qa - qb @ cross.T
    mask = cos**2 >= 0.5
    small = (
        np.arcsin(np.clip(np.linalg.svd(diff, compute_uv=False), -1.0, 1.0)) if mask.any() else 0.0
    )
    return np.where(mask, small, np.arccos(np.clip(cos[::-1], -1.0, 1.0)))
