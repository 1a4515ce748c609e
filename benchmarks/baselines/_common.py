"""Input checks and orthonormalisation shared by the baselines (not part of any paper)."""

from __future__ import annotations

import numpy as np

from edge_runtime.fpca._validation import check_finite_2d

__all__ = ["as_rows", "orthonormalize"]


def as_rows(x: object, n_features: int) -> np.ndarray:
    """``x`` as a finite float64 ``(n_samples, n_features)`` array; 1-D is one sample."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"X must be a numeric array, got {type(x).__name__}") from None
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or arr.shape[1] != n_features:
        raise ValueError(f"X must have shape (n_samples, {n_features}), got {arr.shape}")
    check_finite_2d(arr, "X")
    return arr


def orthonormalize(a: np.ndarray) -> np.ndarray:
    """Q factor of ``a`` with ``diag(R) >= 0`` (so an orthonormal ``a`` is returned as is)."""
    q, r = np.linalg.qr(a)
    signs = np.sign(np.diag(r))
    signs[signs == 0] = 1.0
    return q * signs
