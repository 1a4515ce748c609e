"""Input checks shared by the privacy comparators."""

from __future__ import annotations

import numpy as np

#: Rows may exceed norm 1 by this much (rounding of a division by the largest norm).
NORM_SLACK = 1e-9


def unit_rows(x: object, name: str = "X") -> np.ndarray:
    """``x`` as a finite 2-D float64 array whose rows have norm <= 1; ValueError otherwise."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(
            f"{name} must be a non-empty 2-D array (n_samples, n_features), got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} has non-finite values")
    largest = float(np.sqrt(np.max(np.einsum("ij,ij->i", arr, arr))))
    if largest > 1.0 + NORM_SLACK:
        raise ValueError(
            f"{name} must lie in the unit ball (the privacy analysis assumes ||x|| <= 1), "
            f"largest row norm {largest:.6g}; clip first (clip_to_unit_ball)"
        )
    return arr


def check_rank(rank: object, n_features: int) -> int:
    """``rank`` as an int in ``1 .. n_features``; TypeError / ValueError otherwise."""
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer):
        raise TypeError(f"rank must be an integer, got {rank!r}")
    if not 1 <= int(rank) <= n_features:
        raise ValueError(f"rank must be in 1 .. {n_features}, got {rank}")
    return int(rank)


def top_eigenvectors(matrix: np.ndarray, rank: int) -> np.ndarray:
    """Eigenvectors of the symmetric ``matrix`` for its ``rank`` largest eigenvalues.

    Columns in decreasing order of eigenvalue, shape ``(d, rank)``.
    """
    _, vectors = np.linalg.eigh(matrix)
    return np.ascontiguousarray(vectors[:, ::-1][:, :rank])
