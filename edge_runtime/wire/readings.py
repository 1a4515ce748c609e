"""Sensor readings: the rows a leaf receives on ``sensors/<node id>``, as JSON or msgpack.

`SensorReadings` is a batch of readings, one per row, shape ``(n_readings, n_features)``
float64, with the id and sequence number of the source that numbered them. A sensor sends
a flat array (one reading), a 2-D array, or the map ``{"src", "seq", "x"}``, in JSON (for
devices without msgpack) or msgpack; `decode_readings` takes any of them, `encode_readings`
writes the array or map form. Readings are the only payloads whose format is guessed (JSON
when the first non-whitespace byte is ``[`` or ``{``).

Schema version: sensors are third-party devices, so a bare array carries none and a map
without ``v`` is version 1, the layout every release so far has read. The map form may
carry ``v`` (`READINGS_VERSION`); `encode_readings` writes it only when it is not 1, so
payloads of version 1 stay byte for byte what earlier releases wrote.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import chain
from typing import Literal

import numpy as np

from edge_runtime.wire.fields import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_ID_CHARS,
    Schema,
    WireError,
    as_int,
    as_text,
    check_options,
    check_payload,
    check_size,
    fail_type,
    load_json,
    pack,
    unpack,
    versioned,
)

__all__ = [
    "MAX_READING_ROWS",
    "READINGS_VERSION",
    "SensorReadings",
    "decode_readings",
    "encode_readings",
]

READINGS_VERSION = 1
"""Schema version of the readings map form that `encode_readings` writes (as ``v``, left out
while it is 1); `decode_readings` reads it and the one before it
(`edge_runtime.wire.fields.understood_versions`)."""

_SCHEMA = Schema("readings", READINGS_VERSION, unversioned=1)

MAX_READING_ROWS = 100_000
"""Most readings (rows) one sensor payload may carry."""

_STRIP = b" \t\r\n"
_FLOAT64 = 0xCB  # msgpack's tag of a float64 value (8 big-endian bytes follow)
_FLOAT64_TAG = bytes((_FLOAT64,))
_CELL = 9  # bytes of one msgpack float64 value
_LIST = frozenset((list,))
_NUMBERS = frozenset((float, int))
"""The types a value of a reading may have as decoded (not bool, a subclass of int)."""


@dataclass(frozen=True, eq=False)
class SensorReadings:
    """A batch of sensor readings for a leaf, as received on its sensor topic.

    Parameters
    ----------
    values : ndarray of shape (n_readings, n_features), float64
        One reading per row (a 1-D array is one reading); finite; at most
        `MAX_READING_ROWS` rows; stored as a read-only float64 copy.
    source : str or None
        Id of the producing sensor (1-128 characters), if it numbers its readings.
    seq : int or None
        The source's sequence number of the first row (rows are consecutive),
        ``0 <= seq < 2**63``.

    Raises
    ------
    WireError
        ``field_type`` (non-numeric values), ``shape`` (not 1-D or 2-D), ``ragged``,
        ``empty``, ``too_many_rows``, ``non_finite``, ``source``, ``seq``.
    """

    values: np.ndarray
    source: str | None = None
    seq: int | None = None

    def __post_init__(self) -> None:
        values = _values_array(self.values)
        if values.ndim == 1:
            values = values.reshape(1, -1)
        values.setflags(write=False)
        object.__setattr__(self, "values", values)
        if self.source is not None:
            source = as_text("source", self.source, "source", MAX_ID_CHARS)
            object.__setattr__(self, "source", source)
        if self.seq is not None:
            object.__setattr__(self, "seq", as_int("seq", self.seq, "seq"))


def _decoded(values: np.ndarray, source: str | None, seq: int | None) -> SensorReadings:
    """A `SensorReadings` of parts `decode_readings` has checked as `SensorReadings` would
    (``values`` a fresh finite float64 array of shape ``(n_readings, n_features)``,
    ``source`` and ``seq`` valid), without checking and copying them a second time."""
    readings = object.__new__(SensorReadings)
    values.setflags(write=False)
    object.__setattr__(readings, "values", values)
    object.__setattr__(readings, "source", source)
    object.__setattr__(readings, "seq", seq)
    return readings


def _values_array(values: object) -> np.ndarray:
    """``values`` as a fresh finite float64 array of 1 or 2 dimensions (encoder side)."""
    try:
        arr = np.asarray(values)
    except ValueError:
        raise WireError("ragged", "readings rows have different lengths") from None
    if arr.dtype.kind not in "iuf":
        raise WireError("field_type", f"readings must be numbers, got array of dtype {arr.dtype}")
    if arr.ndim not in (1, 2):
        raise WireError("shape", f"readings have shape {arr.shape}, expected 1-D or 2-D")
    if arr.size == 0:
        raise WireError("empty", f"readings have shape {arr.shape}, expected at least one value")
    rows = 1 if arr.ndim == 1 else arr.shape[0]
    if rows > MAX_READING_ROWS:
        raise WireError("too_many_rows", f"{rows} readings, expected at most {MAX_READING_ROWS}")
    arr = np.array(arr, dtype=np.float64, copy=True)
    if not np.isfinite(arr).all():
        raise WireError("non_finite", "readings contain NaN or inf")
    return arr


def _array_header(data: bytes, pos: int) -> tuple[int, int] | None:
    """``(length, header bytes)`` of the msgpack array whose header starts at ``data[pos]``
    (fixarray, array 16 or array 32), or None when no array header starts there."""
    if pos >= len(data):
        return None
    tag = data[pos]
    if 0x90 <= tag <= 0x9F:
        return tag & 0x0F, 1
    if tag == 0xDC and pos + 3 <= len(data):
        return int.from_bytes(data[pos + 1 : pos + 3], "big"), 3
    if tag == 0xDD and pos + 5 <= len(data):
        return int.from_bytes(data[pos + 1 : pos + 5], "big"), 5
    return None


def float64_rows(data: bytes) -> np.ndarray | None:
    """The readings of a msgpack payload in the form `encode_readings` writes for a bare
    array -- one array of float64 values, or an array of such arrays of one length and one
    header -- as a fresh float64 array of shape ``(n_readings, n_features)``, read with
    numpy straight from the bytes; None for any other payload (another form, an int or
    float32 value, trailing bytes, no reading, too many rows, a value not finite), which
    `decode_readings` then parses value by value. Where both apply they agree: the bytes
    are the msgpack encoding of exactly these values, and msgpack's float64 is numpy's
    ``>f8``."""
    outer = _array_header(data, 0)
    if outer is None or outer[0] == 0:
        return None
    n, pos = outer
    if pos < len(data) and data[pos] == _FLOAT64:  # one reading: a flat array
        rows, width, head, pos = 1, n, pos, 0
    else:
        inner = _array_header(data, pos)
        if inner is None or inner[0] == 0 or n > MAX_READING_ROWS:
            return None
        rows, (width, head) = n, inner
    row_bytes = head + _CELL * width
    if len(data) != pos + rows * row_bytes:
        return None
    header, tags = data[pos : pos + head], _FLOAT64_TAG * width
    for start in range(pos, len(data), row_bytes):  # each row: its header, then its tags
        end = start + row_bytes
        if data[start : start + head] != header or data[start + head : end : _CELL] != tags:
            return None
    values = np.ndarray((rows, width), ">f8", data, pos + head + 1, (row_bytes, _CELL)).astype(
        np.float64
    )
    return values if np.isfinite(values).all() else None


def _check_numbers(row: list[object], index: int) -> None:
    for column, value in enumerate(row):
        kind = type(value)
        if kind is float or kind is int:
            continue
        if kind is list:
            raise WireError(
                "shape", f"reading {index} has an array at column {column}, expected a number"
            )
        fail_type(f"reading {index} column {column}", value, "a number (int or float)")


def _readings_from_wire(body: object, n_features: int | None) -> np.ndarray:
    """The readings of a decoded payload as a fresh finite float64 array of shape
    ``(n_readings, width)``.

    Well-formed bodies are checked with a few C-level passes over the rows and values
    (their types and lengths as sets); only a body that fails them goes through the
    row-by-row checks, which name the first reading and column at fault. Both give the
    same verdict: the fast passes only decide whether the slow ones may be skipped."""
    if not isinstance(body, list):
        fail_type("readings", body, "an array of numbers or a 2-D array")
    if not body:
        raise WireError("empty", "readings are empty, expected at least one reading")
    if isinstance(body[0], list):
        if len(body) > MAX_READING_ROWS:
            raise WireError(
                "too_many_rows", f"{len(body)} readings, expected at most {MAX_READING_ROWS}"
            )
        width = len(body[0])
        if set(map(type, body)) != _LIST or len(set(map(len, body))) != 1:
            _check_rows(body, width)  # raises: a row that is no array or of another length
        rows = body
    else:
        width = len(body)
        rows = [body]
    if width == 0:
        raise WireError("empty", "readings have no values, expected at least one per reading")
    if not _NUMBERS.issuperset(map(type, chain.from_iterable(rows))):
        for i, row in enumerate(rows):  # raises: a value that is no int or float
            _check_numbers(row, i)
    if n_features is not None and width != n_features:
        extra = f" ({len(rows)} readings)" if len(rows) > 1 else ""
        raise WireError("width", f"reading has {width} values, expected {n_features}{extra}")
    try:
        values = np.array(rows, dtype=np.float64)
    except OverflowError:
        raise WireError("non_finite", "readings hold an integer out of float64 range") from None
    finite = np.isfinite(values)
    if not finite.all():
        i, j = (int(k) for k in np.argwhere(~finite)[0])
        raise WireError(
            "non_finite",
            f"reading {i} column {j} is {float(values[i, j])!r}, expected a finite number",
        )
    return values


def _check_rows(body: list[object], width: int) -> None:
    """Raise for the first row of ``body`` that is no array (``shape``) or does not hold
    ``width`` values (``ragged``)."""
    for i, row in enumerate(body):
        if not isinstance(row, list):
            raise WireError(
                "shape", f"reading {i} is {type(row).__name__}, but reading 0 is an array"
            )
        if len(row) != width:
            raise WireError("ragged", f"reading {i} has {len(row)} values, reading 0 has {width}")


def encode_readings(
    values: object,
    *,
    source: str | None = None,
    seq: int | None = None,
    fmt: Literal["msgpack", "json"] = "msgpack",
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> bytes:
    """Encode sensor readings as a sensor publishes them.

    Parameters
    ----------
    values : array_like of shape (n_features,) or (n_readings, n_features)
        Finite numbers; a 1-D array is one reading and is sent as a flat array.
    source, seq : optional
        When either is given the payload is the map ``{"src": source, "seq": seq, "x": values}``
        (keys with None are left out; ``v``, `READINGS_VERSION`, only when it is not 1);
        otherwise the bare array.
    fmt : {"msgpack", "json"}
    max_bytes : int
        Refuse to produce a payload above this size.

    Returns
    -------
    bytes
        Floats are written as float64 (msgpack) or shortest round-trip decimals (JSON), so
        `decode_readings` reproduces ``values`` exactly.

    Raises
    ------
    WireError
        As `SensorReadings`, and ``too_large``.
    ValueError
        For an unknown ``fmt`` or invalid ``max_bytes``.
    """
    if fmt not in ("msgpack", "json"):
        raise ValueError(f"fmt must be 'msgpack' or 'json', got {fmt!r}")
    check_options(max_bytes)
    arr = _values_array(values)
    readings = SensorReadings(arr, source, seq)  # validates source and seq
    body = arr.tolist()
    obj: object = body
    if source is not None or seq is not None:
        unversioned = _SCHEMA.unversioned == READINGS_VERSION
        mapping: dict[str, object] = {} if unversioned else {"v": READINGS_VERSION}
        for key, value in (("src", readings.source), ("seq", readings.seq), ("x", body)):
            if value is not None:
                mapping[key] = value
        obj = mapping
    if fmt == "json":
        text = json.dumps(obj, allow_nan=False, separators=(",", ":"))  # ASCII: \uXXXX escapes
        return check_size(text.encode("utf-8"), "readings", max_bytes)
    return pack(obj, "readings", max_bytes)


def decode_readings(
    payload: bytes,
    *,
    n_features: int | None = None,
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> SensorReadings:
    """Decode sensor readings in any of the accepted forms.

    Accepted (JSON when the first non-whitespace byte is ``[`` or ``{``, else msgpack):
    an array of numbers (one reading), a 2-D array (one reading per row), or a map
    ``{"src": str, "seq": int, "x": <array or 2-D array>}`` where ``src`` and ``seq`` may be
    absent or nil. Unknown map keys are ignored. A map may carry its schema version ``v``
    (absent: 1); versions `READINGS_VERSION` and the one before it are read.

    Parameters
    ----------
    payload : bytes
    n_features : int or None
        Required width of each reading; None accepts any (consistent) width.
    max_bytes : int
        Size limit in bytes, checked before parsing.

    Returns
    -------
    SensorReadings
        ``values`` of shape (n_readings, n_features), float64.

    Raises
    ------
    WireError
        For anything else; never any other exception for any bytes. Reasons: ``too_large``,
        ``not_json``, ``not_msgpack``, ``ext_type``, ``too_deep``, ``version_newer`` (a map
        of a newer schema version than this node reads: upgrade it), ``version`` (an older
        one), ``missing_field``,
        ``field_type`` (strings, bools, nil, maps as values), ``shape`` (nested deeper than 2
        or mixed), ``ragged``, ``empty``, ``width``, ``too_many_rows``, ``non_finite``
        (including JSON ``NaN``/``Infinity``), ``source``, ``seq``.
    ValueError
        For invalid ``n_features`` or ``max_bytes``.
    """
    if n_features is not None and (
        isinstance(n_features, bool) or not isinstance(n_features, int) or n_features < 1
    ):
        raise ValueError(f"n_features must be None or an int >= 1, got {n_features!r}")
    check_options(max_bytes)
    data = check_payload(payload, "readings", max_bytes)
    fast = float64_rows(data)
    if fast is not None and (n_features is None or fast.shape[1] == n_features):
        return _decoded(fast, None, None)
    if data.lstrip(_STRIP)[:1] in (b"[", b"{"):
        obj = load_json(data, "readings")
    else:
        obj = unpack(data, "readings")
    source = seq = None
    if isinstance(obj, dict):
        obj = versioned(obj, _SCHEMA)
        if "x" not in obj:
            raise WireError("missing_field", "readings map lacks field 'x'")
        if obj.get("src") is not None:
            source = as_text("src", obj["src"], "source", MAX_ID_CHARS)
        if obj.get("seq") is not None:
            seq = as_int("seq", obj["seq"], "seq")
        obj = obj["x"]
    return _decoded(_readings_from_wire(obj, n_features), source, seq)
