"""Private argument checks shared by the fedpower modules; messages name the value."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["as_basis", "as_square", "check_fraction", "check_steps"]


def _as_array(value: object, name: str) -> np.ndarray:
    """``value`` as a float64 array; ValueError naming ``name`` if it is not numeric."""
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a numeric array, got {type(value).__name__}") from None


def _finite(arr: np.ndarray, name: str) -> np.ndarray:
    """``arr`` itself; ValueError naming ``name`` if it holds NaN or infinity."""
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinity; expected finite")
    return arr


def as_square(value: object, name: str, n_features: int | None = None) -> np.ndarray:
    """``value`` as a finite float64 ``(d, d)`` array (``d = n_features`` if given).

    Raises
    ------
    ValueError
        One line naming ``name``: not numeric, not square, wrong ``d``, or not finite.
    """
    arr = _as_array(value, name)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] == 0:
        raise ValueError(f"{name} must be a square (d, d) matrix with d >= 1, got {arr.shape}")
    if n_features is not None and arr.shape[0] != n_features:
        raise ValueError(f"{name} must be ({n_features}, {n_features}), got {arr.shape}")
    return _finite(arr, name)


def as_basis(
    value: object, name: str, n_features: int | None = None, rank: int | None = None
) -> np.ndarray:
    """``value`` as a finite float64 ``(d, r)`` array with ``1 <= r <= d``.

    ``d = n_features`` and ``r = rank`` when given. Raises ValueError (one line naming
    ``name``): not numeric, not 2-D, ``r`` out of range, wrong ``d`` or ``r``, not finite.
    """
    arr = _as_array(value, name)
    if arr.ndim != 2 or not 1 <= arr.shape[1] <= arr.shape[0]:
        raise ValueError(
            f"{name} must be 2-D (n_features, rank) with 1 <= rank <= n_features, "
            f"got shape {arr.shape}"
        )
    if n_features is not None and arr.shape[0] != n_features:
        raise ValueError(f"{name} must have {n_features} rows (n_features), got {arr.shape}")
    if rank is not None and arr.shape[1] != rank:
        raise ValueError(f"{name} must have {rank} columns (rank), got {arr.shape}")
    return _finite(arr, name)


def check_steps(value: object, name: str, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (bools and non-integers rejected)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def check_fraction(value: object, name: str) -> float:
    """``value`` as a float in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")
    out = float(value)
    if not (math.isfinite(out) and 0.0 < out <= 1.0):
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return out
