"""Private argument checks shared by the fpca modules; messages name the value."""

from __future__ import annotations

import math
import operator

import numpy as np

__all__ = ["check_finite_2d", "check_forget", "check_int", "check_positive"]


def check_int(value: object, name: str, minimum: int) -> int:
    """``value`` as an int >= ``minimum``; TypeError for non-integers (and bools)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        out = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r}") from None
    if out < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {out}")
    return out


def check_forget(forget: object) -> float:
    """``forget`` as a float in (0, 1], else TypeError/ValueError naming it."""
    if isinstance(forget, bool):
        raise TypeError(f"forget must be a number in (0, 1], got {forget!r}")
    try:
        value = float(forget)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TypeError(f"forget must be a number in (0, 1], got {forget!r}") from None
    if not 0.0 < value <= 1.0:
        raise ValueError(f"forget must be in (0, 1], got {value}")
    return value


def check_positive(value: object, name: str) -> float:
    """``value`` as a finite float > 0, else ValueError naming ``name`` (bools rejected)."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}") from None
    if not (math.isfinite(out) and out > 0.0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return out


def check_finite_2d(x: np.ndarray, name: str) -> None:
    """Raise ValueError naming ``name`` and the first offending row if ``x`` has NaN/inf."""
    if not np.isfinite(x).all():
        row = int(np.argwhere(~np.isfinite(x))[0][0])
        raise ValueError(f"{name} contains NaN or infinity (first in row {row}); expected finite")
