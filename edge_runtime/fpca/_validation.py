"""Private argument checks shared by the fpca modules; messages name the value."""

from __future__ import annotations

import math
import operator

import numpy as np

from edge_runtime.errors import EdgeRuntimeError

__all__ = [
    "NotFittedError",
    "as_float",
    "as_float_array",
    "check_batch",
    "check_finite_2d",
    "check_forget",
    "check_int",
    "check_positive",
    "check_samples",
]


class NotFittedError(EdgeRuntimeError, ValueError, AttributeError):
    """An estimator used before it learned anything (like scikit-learn's NotFittedError:
    a ``ValueError`` and an ``AttributeError``)."""


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


def as_float(value: object, message: str, error: type[Exception] = ValueError) -> float:
    """``float(value)``; ``error(message)`` for bools and for what ``float`` refuses."""
    if isinstance(value, bool):
        raise error(message)
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise error(message) from None


def check_forget(forget: object) -> float:
    """``forget`` as a float in (0, 1], else TypeError/ValueError naming it."""
    value = as_float(forget, f"forget must be a number in (0, 1], got {forget!r}", TypeError)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"forget must be in (0, 1], got {value}")
    return value


def check_positive(value: object, name: str) -> float:
    """``value`` as a finite float > 0, else ValueError naming ``name`` (bools rejected)."""
    message = f"{name} must be a finite number > 0, got {value!r}"
    out = as_float(value, message)
    if not (math.isfinite(out) and out > 0.0):
        raise ValueError(message)
    return out


def as_float_array(value: object, name: str) -> np.ndarray:
    """``value`` as a float64 ndarray of any shape; TypeError naming ``name`` if not numeric.

    A scipy sparse matrix or array is a TypeError too (densify it first).
    """
    if getattr(value, "format", None) in _SPARSE_FORMATS and hasattr(value, "toarray"):
        raise TypeError(
            f"{name} is a sparse {type(value).__name__}: sparse input is not "
            "supported, pass a dense array (X.toarray())"
        )
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{name} must be a numeric array, got {type(value).__name__} ({exc})"
        ) from None


_SPARSE_FORMATS = frozenset({"csr", "csc", "coo", "bsr", "lil", "dok", "dia"})


def check_finite_2d(x: np.ndarray, name: str) -> None:
    """Raise ValueError naming ``name`` and the first offending row if ``x`` has NaN/inf."""
    if not np.isfinite(x).all():
        row = int(np.argwhere(~np.isfinite(x))[0][0])
        raise ValueError(f"{name} contains NaN or infinity (first in row {row}); expected finite")


#: numpy dtype kinds accepted as samples: bool, integers, floats, and objects (converted).
_REAL_KINDS = "biufO"


def check_samples(samples: object, n_features: int) -> np.ndarray:
    """Samples ``X`` as a finite float64 array of shape ``(n_samples, n_features)``.

    A 1-D input is one sample (reshaped to ``(1, n_features)``); a numpy array of a
    non-real dtype (bool is allowed, as an integer; an object array is converted
    element-wise, as by scikit-learn) and a non-numeric or sparse input are a
    TypeError; another number of dimensions or of features, NaN or infinity a
    ValueError naming the value (`FPCAEdge.partial_fit`'s messages).
    """
    if isinstance(samples, np.ndarray) and samples.dtype.kind not in _REAL_KINDS:
        raise TypeError(f"X must have a real numeric dtype, got {samples.dtype}")
    x = as_float_array(samples, "X")
    if x.ndim == 1:
        x = x.reshape(1, -1)
    elif x.ndim != 2:
        raise ValueError(
            f"X must be 1-D (one sample) or 2-D (n_samples, n_features), got "
            f"{x.ndim}-D with shape {x.shape}"
        )
    if x.shape[1] != n_features:
        raise ValueError(f"X has {x.shape[1]} features, expected {n_features}")
    check_finite_2d(x, "X")
    return x


def check_batch(samples: object) -> np.ndarray:
    """Samples ``X`` as a finite float64 2-D array of its own width (`check_samples`'s errors).

    For `FPCAEdge` before it knows ``n_features``, and for `FPCAEdge.transform`: a 1-D
    input is a ValueError (one sample or one feature? reshape it).
    """
    if isinstance(samples, np.ndarray) and samples.dtype.kind not in _REAL_KINDS:
        raise TypeError(f"X must have a real numeric dtype, got {samples.dtype}")
    x = as_float_array(samples, "X")
    if x.ndim != 2:
        raise ValueError(
            f"X must be 2-D (n_samples, n_features), got {x.ndim}-D with shape {x.shape}. "
            "Reshape your data: X.reshape(1, -1) for one sample"
        )
    if not x.shape[1]:
        raise ValueError(
            f"Found array with 0 feature(s) (shape={x.shape}) while a minimum of 1 is required."
        )
    check_finite_2d(x, "X")
    return x
