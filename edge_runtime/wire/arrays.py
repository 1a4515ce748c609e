"""Float arrays on the wire: little-endian float64/float32 bytes, their lengths, bases.

A subspace message's basis, singular values and mean and a FedPower round's basis and
reply's product all travel the same way: ``items`` little-endian values of ``dtype``
(``"float64"`` exact, ``"float32"`` half the bytes) in C order, widened to float64 on
decode. This module holds that mapping, the byte-length check of a field against its
declared shape, the finiteness check and the orthonormality check of a basis with its two
default tolerances (the package docstring's "Orthonormality tolerance" says why).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from edge_runtime.wire.fields import MAX_N_FEATURES, SEQ_LIMIT, WireError, as_int, fail_type

__all__ = [
    "FLOAT32_ORTHONORMALITY_TOL",
    "ORTHONORMALITY_TOL",
    "as_blob",
    "as_dims",
    "as_wire_dtype",
    "check_dtype_option",
    "check_finite",
    "check_orthonormal",
    "rounded_to",
    "tolerance_for",
    "widen_blob",
]

ORTHONORMALITY_TOL = 1e-6
"""Default ``max |U^T U - I|`` accepted for float64 bases (module docstring says why)."""

FLOAT32_ORTHONORMALITY_TOL = 1e-4
"""Default ``max |U^T U - I|`` accepted for float32 bases (module docstring says why)."""

_DTYPES: dict[str, str] = {"float64": "<f8", "float32": "<f4"}


def check_dtype_option(dtype: object) -> None:
    """An encoder's ``dtype=`` option: `ValueError` unless ``"float64"`` or ``"float32"``."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}")


def as_wire_dtype(value: object, expected: str, show: Callable[[object], str]) -> str:
    """A decoded ``dtype`` field: ``field_type`` unless a str, ``dtype`` unless a key of
    `_DTYPES` (the message shows ``value`` with ``show`` and names ``expected``)."""
    if not isinstance(value, str):
        fail_type("dtype", value, "a str")
    if value not in _DTYPES:
        raise WireError("dtype", f"dtype {show(value)} is not supported, expected {expected}")
    return value


def tolerance_for(
    dtype: str, tol: float = ORTHONORMALITY_TOL, tol_float32: float = FLOAT32_ORTHONORMALITY_TOL
) -> float:
    """The orthonormality tolerance of a basis sent as ``dtype``."""
    return tol if dtype == "float64" else tol_float32


def rounded_to(array: np.ndarray, dtype: str) -> np.ndarray:
    """``array`` as a C-contiguous array of the wire ``dtype`` (overflow to inf is kept, so
    the caller's finiteness check names it)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.ascontiguousarray(array, dtype=_DTYPES[dtype])


def as_blob(
    label: str, blob: object, items: int, dtype: str, where: str, expected: str = "bytes"
) -> bytes:
    """A bytes field of exactly ``items`` values of ``dtype`` (``where`` names the shape in the
    message, e.g. ``"d=4, r=2"``); ``field_type`` or ``byte_length`` otherwise."""
    if not isinstance(blob, bytes):
        fail_type(label, blob, expected)
    size = items * np.dtype(_DTYPES[dtype]).itemsize
    if len(blob) != size:
        raise WireError(
            "byte_length",
            f"{label} has {len(blob)} bytes, expected {size} ({items} {dtype} values for {where})",
        )
    return blob


def widen_blob(blob: bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """The values of ``blob`` (a checked `as_blob`) as a new float64 array of ``shape``."""
    return np.frombuffer(blob, dtype=np.dtype(_DTYPES[dtype])).reshape(shape).astype(np.float64)


def check_finite(label: str, array: np.ndarray) -> None:
    """``non_finite`` when ``array`` holds a NaN or an infinity."""
    bad = int(np.count_nonzero(~np.isfinite(array)))
    if bad:
        raise WireError("non_finite", f"{label} has {bad} non-finite entries (NaN or inf)")


def check_orthonormal(basis: np.ndarray, tol: float) -> None:
    """``not_orthonormal`` unless ``max |U^T U - I| <= tol`` for ``basis`` ``(d, r)``."""
    gram = basis.T @ basis
    gram[np.diag_indices(basis.shape[1])] -= 1.0
    error = float(np.abs(gram).max())
    if not error <= tol:
        raise WireError(
            "not_orthonormal",
            f"basis is not orthonormal: max |U^T U - I| = {error:.3g}, expected <= {tol:g}",
        )


def as_dims(obj: Mapping[str, object], *, min_rank: int) -> tuple[int, int]:
    """``(d, r)`` of a decoded map: ``1 <= d <= MAX_N_FEATURES`` (reason ``shape``),
    ``min_rank <= r <= d`` (reason ``rank``)."""
    d = as_int("d", obj["d"], "shape", low=1, high=MAX_N_FEATURES + 1)
    r = as_int("r", obj["r"], "rank", low=min_rank, high=SEQ_LIMIT)
    if r > d:
        raise WireError("rank", f"rank r={r} exceeds n_features d={d}")
    return d, r
