"""The field checks every wire message shares: the error, its reasons, limits and parsers.

One place for what each message kind of `edge_runtime.wire` does alike: `WireError` and its
`REASONS`, the contract limits (`SCHEMA_VERSION`, `DEFAULT_MAX_PAYLOAD_BYTES`, the id and
epoch lengths), the exact-type checks of one field (``as_int``, ``as_float``, ``as_text``,
``as_node_id``, ``as_epoch``, ``as_bool``, the count and sequence maps, the optional
keys of an encoded map), the size checks of a payload, the
strict msgpack and JSON parsers, and the schema versions of a message kind (``Schema``,
`understood_versions`) with the version check of a decoded map (``versioned``,
``require``). Every check raises `WireError` with the reason and the one-line text the
package docstring documents; none of them allocates more than its input.
"""

from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NoReturn

import msgpack
import numpy as np

from edge_runtime.errors import EdgeRuntimeError

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "MAX_CONFIRM_SOURCES",
    "MAX_N_FEATURES",
    "REASONS",
    "SCHEMA_VERSION",
    "SEQ_LIMIT",
    "Schema",
    "WireError",
    "as_bool",
    "as_count_map",
    "as_deployment",
    "as_epoch",
    "as_float",
    "as_int",
    "as_node_id",
    "as_seq_map",
    "as_text",
    "check_message",
    "check_options",
    "check_payload",
    "check_size",
    "dump_json",
    "fail_type",
    "load_json",
    "optional_keys",
    "pack",
    "read_map",
    "require",
    "show",
    "understood_versions",
    "unpack",
    "versioned",
]

SCHEMA_VERSION = 1
"""The first schema version, that of every message kind in the release that gave each kind
its own version (`edge_runtime.wire.SCHEMA_VERSIONS` holds each kind's current one)."""

DEFAULT_MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
"""Default payload size limit in bytes (4 MiB): a float64 basis of 48 x 10 is ~4 KiB."""

MAX_N_FEATURES = 1 << 20
"""Largest ``n_features`` accepted in a subspace message (rank 0 carries no bytes to bound it)."""

MAX_ID_CHARS = 128
MAX_EPOCH_CHARS = 64
MAX_CONFIRM_SOURCES = 10_000
"""Most sources one confirmation may list."""
SEQ_LIMIT = 1 << 63
_JSON_INT_DIGITS = 400
_FORBIDDEN_IN_ID = frozenset("/+#\0")

REASONS: tuple[str, ...] = (
    "too_large",
    "not_msgpack",
    "not_json",
    "ext_type",
    "too_deep",
    "not_map",
    "version",
    "version_newer",
    "missing_field",
    "field_type",
    "node_id",
    "epoch",
    "seq",
    "n_samples",
    "shape",
    "rank",
    "dtype",
    "byte_length",
    "non_finite",
    "not_orthonormal",
    "singular_values",
    "privacy",
    "provenance",
    "width",
    "ragged",
    "empty",
    "too_many_rows",
    "source",
    "role",
    "rejects",
    "uptime",
    "extra",
)
"""Every value `WireError.reason` can take (each is described in the module docstring)."""


class WireError(EdgeRuntimeError, ValueError):
    """A payload or message that the wire format refuses.

    Parameters
    ----------
    reason : str
        Short machine-readable code, one of `REASONS` (suitable as a metrics label).
    message : str
        One line naming the offending value and what was expected; ``str(exc)``.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[type[WireError], tuple[str, str]]:
        return (type(self), (self.reason, str(self)))


# --------------------------------------------------------------------------- one field
_REPR = reprlib.Repr()
_REPR.maxlevel = 3  # untrusted values may nest ~1000 deep: never recurse into them
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = 6
_REPR.maxstring = _REPR.maxother = 60


def show(value: object, limit: int = 60) -> str:
    """A one-line, bounded ``repr`` of an untrusted value for error messages.

    Depth and width are bounded (`reprlib`), so a payload nested a thousand levels
    deep cannot turn an error message into a ``RecursionError``.
    """
    try:
        text = _REPR.repr(value)
    except (ValueError, RecursionError):  # an int too long for str(), or worse
        text = f"<int of {value.bit_length()} bits>" if isinstance(value, int) else "<value>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def fail_type(label: str, value: object, expected: str) -> NoReturn:
    """Raise `WireError` for ``value`` of the wrong type (reason ``ext_type`` for a msgpack
    timestamp, else ``field_type``), naming ``label``, the type found and ``expected``."""
    reason = "ext_type" if isinstance(value, msgpack.Timestamp) else "field_type"
    raise WireError(
        reason, f"{label} must be {expected}, got {type(value).__name__} {show(value)}"
    )


def as_int(label: str, value: object, reason: str, *, low: int = 0, high: int = SEQ_LIMIT) -> int:
    """An int (not a bool, not a float) with ``low <= value < high``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        fail_type(label, value, "an int")
    out = int(value)
    if not low <= out < high:
        bound = "2**63" if high == SEQ_LIMIT else str(high)
        raise WireError(reason, f"{label} is {show(out)}, expected {low} <= {label} < {bound}")
    return out


def as_float(label: str, value: object) -> float:
    """A finite number (an int is accepted; a bool is not), as float."""
    if isinstance(value, bool | np.bool_) or not isinstance(
        value, int | float | np.integer | np.floating
    ):
        fail_type(label, value, "a number")
    try:
        out = float(value)
    except OverflowError:
        raise WireError("non_finite", f"{label} {show(value)} is out of float64 range") from None
    if not math.isfinite(out):
        raise WireError("non_finite", f"{label} is {out!r}, expected a finite number")
    return out


def as_text(label: str, value: object, reason: str, max_chars: int) -> str:
    """A non-empty str of at most ``max_chars`` characters that encodes as UTF-8."""
    if not isinstance(value, str):
        fail_type(label, value, "a str")
    if not 1 <= len(value) <= max_chars:
        raise WireError(
            reason,
            f"{label} {show(value)} has {len(value)} characters, expected 1 to {max_chars}",
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise WireError(reason, f"{label} {show(value)} is not valid UTF-8 text") from None
    return str(value)


def as_node_id(label: str, value: object, reason: str = "node_id") -> str:
    """A valid single MQTT topic level: 1-128 characters, no ``/ + #`` or NUL."""
    text = as_text(label, value, reason, MAX_ID_CHARS)
    if not _FORBIDDEN_IN_ID.isdisjoint(text):
        raise WireError(
            reason,
            f"{label} {show(text)} is not a single MQTT topic level "
            "(expected no '/', '+', '#' or NUL)",
        )
    return text


def as_deployment(label: str, value: object) -> str | None:
    """None, or a topology (deployment) name of 1-128 characters (reason ``field_type``)."""
    return None if value is None else as_text(label, value, "field_type", MAX_ID_CHARS)


def as_epoch(label: str, value: object) -> str:
    """A state epoch (a random id): 1-64 characters of text (reason ``epoch``)."""
    return as_text(label, value, "epoch", MAX_EPOCH_CHARS)


def as_bool(label: str, value: object) -> bool:
    """A bool (a numpy bool too; not an int), as bool; ``field_type`` otherwise."""
    if not isinstance(value, bool | np.bool_):
        fail_type(label, value, "a bool")
    return bool(value)


def as_count_map(
    label: str,
    value: object,
    reason: str,
    *,
    max_entries: int,
    keys_are_node_ids: bool,
) -> Mapping[str, int]:
    """A read-only ``{str: int >= 0}`` copy of ``value`` with at most ``max_entries`` entries."""
    if not isinstance(value, Mapping):
        fail_type(label, value, "a map of str to int")
    if len(value) > max_entries:
        raise WireError(reason, f"{label} has {len(value)} entries, expected at most {max_entries}")
    out: dict[str, int] = {}
    for key, count in value.items():
        if keys_are_node_ids:
            name = as_node_id(f"{label} key", key, reason)
        else:
            name = as_text(f"{label} key", key, reason, MAX_ID_CHARS)
        out[name] = as_int(f"{label}[{name!r}]", count, reason)
    return MappingProxyType(out)


def as_seq_map(label: str, value: object) -> Mapping[str, int]:
    """A read-only ``{source: seq}`` copy; a seq may be -1 (nothing yet)."""
    if not isinstance(value, Mapping):
        fail_type(label, value, "a map of source to sequence number")
    if len(value) > MAX_CONFIRM_SOURCES:
        raise WireError(
            "too_large",
            f"{label} lists {len(value)} sources, expected at most {MAX_CONFIRM_SOURCES}",
        )
    out: dict[str, int] = {}
    for key, seq in value.items():
        name = as_text(f"{label} key", key, "source", MAX_ID_CHARS)
        out[name] = as_int(f"{label}[{name!r}]", seq, "seq", low=-1)
    return MappingProxyType(out)


# --------------------------------------------------------------------------- options, sizes
def check_options(max_bytes: int, tols: tuple[float, ...] = ()) -> None:
    """An encoder's or decoder's options: `ValueError` (not `WireError`: a programming
    error) unless ``max_bytes`` is an int >= 1 and every tolerance a finite number >= 0."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"max_bytes must be an int >= 1, got {max_bytes!r}")
    for tol in tols:
        if not (isinstance(tol, int | float) and math.isfinite(tol) and tol >= 0):
            raise ValueError(f"tolerance must be a finite number >= 0, got {tol!r}")


def check_message(
    msg: object, kind: type, label: str, max_bytes: int, tols: tuple[float, ...] = ()
) -> None:
    """An encoder's input: valid options (`ValueError`), then ``msg`` of type ``kind``."""
    check_options(max_bytes, tols)
    if not isinstance(msg, kind):
        fail_type(label, msg, f"a {kind.__name__}")


def check_payload(payload: object, what: str, max_bytes: int) -> bytes:
    """``payload`` as bytes, refused before parsing when above ``max_bytes``."""
    if not isinstance(payload, bytes | bytearray):
        fail_type(f"{what} payload", payload, "bytes")
    if len(payload) > max_bytes:
        raise WireError(
            "too_large", f"{what} payload is {len(payload)} bytes, above the limit of {max_bytes}"
        )
    return bytes(payload)


def check_size(payload: bytes, what: str, max_bytes: int) -> bytes:
    """``payload`` (encoded ``what``), refused with ``too_large`` above ``max_bytes``."""
    if len(payload) > max_bytes:
        raise WireError(
            "too_large",
            f"encoded {what} is {len(payload)} bytes, above the limit of {max_bytes}",
        )
    return payload


def optional_keys(
    obj: dict[str, object], sources: Mapping[str, int], deployment: str | None
) -> dict[str, object]:
    """``obj``, an encoded message's map, with the keys left out when empty so that older
    decoders still read it: ``src`` (a copy of ``sources``) when there are any, ``dep``
    (``deployment``) when not None. Changes ``obj`` in place and returns it."""
    if sources:
        obj["src"] = dict(sources)
    if deployment is not None:
        obj["dep"] = deployment
    return obj


def pack(obj: object, what: str, max_bytes: int) -> bytes:
    """``obj`` as msgpack (str as str, bytes as bin), refused above ``max_bytes``."""
    return check_size(msgpack.packb(obj, use_bin_type=True), what, max_bytes)


def dump_json(doc: object, what: str, max_bytes: int) -> bytes:
    """``doc`` as compact UTF-8 JSON (no NaN/Infinity literals), refused above ``max_bytes``."""
    text = json.dumps(doc, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return check_size(text.encode("utf-8"), what, max_bytes)


# --------------------------------------------------------------------------- parsing
def _refuse_ext(code: int, data: bytes) -> NoReturn:
    raise WireError("ext_type", f"msgpack ext type {code} ({len(data)} bytes) is not allowed")


def unpack(payload: bytes, what: str) -> object:
    """One msgpack object; ext types, trailing bytes and non-str/bytes map keys refused."""
    limit = len(payload)
    try:
        return msgpack.unpackb(
            payload,
            raw=False,
            strict_map_key=True,
            use_list=True,
            ext_hook=_refuse_ext,
            max_str_len=limit,
            max_bin_len=limit,
            max_array_len=limit,
            max_map_len=limit,
            max_ext_len=limit,
        )
    except WireError:
        raise
    except (msgpack.StackError, RecursionError):
        raise WireError("too_deep", f"{what} payload is nested too deeply") from None
    except (ValueError, TypeError, OverflowError, msgpack.UnpackException) as exc:
        lines = str(exc).splitlines()
        detail = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        raise WireError("not_msgpack", f"{what} payload is not msgpack ({detail[:100]})") from None


def _refuse_constant(name: str) -> NoReturn:
    raise WireError("non_finite", f"JSON literal {name} is not a finite number")


def _parse_int(text: str) -> int:
    if len(text) > _JSON_INT_DIGITS:
        raise WireError(
            "non_finite", f"JSON integer with {len(text)} digits is out of float64 range"
        )
    return int(text)


def load_json(payload: bytes, what: str) -> object:
    """Strict JSON: UTF-8 only; ``NaN``/``Infinity`` literals refused."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError(
            "not_json", f"{what} payload is not UTF-8: {exc.reason} at byte {exc.start}"
        ) from None
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_int=_parse_int)
    except WireError:
        raise
    except RecursionError:
        raise WireError("too_deep", f"{what} payload is nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise WireError(
            "not_json",
            f"{what} payload is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
        ) from None


def understood_versions(current: int) -> tuple[int, ...]:
    """The schema versions a decoder reads for a kind whose encoder writes ``current``.

    The rule of rolling upgrades: the current version and the one before it,
    ``(current - 1, current)``; only ``(1,)`` for a kind still at version 1.

    Parameters
    ----------
    current : int
        The kind's current schema version, >= 1.

    Returns
    -------
    tuple of int
        Ascending.

    Raises
    ------
    ValueError
        If ``current`` is not an int >= 1.
    """
    if isinstance(current, bool) or not isinstance(current, int) or current < 1:
        raise ValueError(f"a schema version is an int >= 1, got {current!r}")
    return (current - 1, current) if current > 1 else (current,)


def _same_layout(obj: dict[str, object]) -> dict[str, object]:
    return obj


@dataclass(frozen=True)
class Schema:
    """A message kind's schema versions: the one its encoder writes, those its decoder reads.

    Attributes
    ----------
    label : str
        The kind as error messages name it (``"subspace message"``).
    current : int
        The version the encoder writes (the kind's ``*_VERSION`` constant).
    from_previous : callable, default identity
        Turns a decoded map of version ``current - 1`` into the current layout (renamed keys,
        defaults for new ones), so that the rest of the decoder reads one layout only. It
        raises only `WireError`. The identity while the kind has had one layout.
    unversioned : int or None, default None
        The version of a map without ``v`` (readings: 1, the layout of sensors that never
        write one); None: ``v`` is a required field.
    """

    label: str
    current: int
    from_previous: Callable[[dict[str, object]], dict[str, object]] = _same_layout
    unversioned: int | None = None

    def __post_init__(self) -> None:
        understood_versions(self.current)  # ValueError for a bad constant, at import

    @property
    def understood(self) -> tuple[int, ...]:
        """`understood_versions` of `current`."""
        return understood_versions(self.current)


def _versions_text(versions: tuple[int, ...]) -> str:
    if len(versions) == 1:
        return f"version {versions[0]}"
    return "versions " + ", ".join(map(str, versions[:-1])) + f" and {versions[-1]}"


def _check_version(value: object, schema: Schema) -> int:
    """``value`` as a schema version ``schema`` understands: ``version_newer`` above them
    (this node must be upgraded), ``version`` below them (the sender must be)."""
    if isinstance(value, bool) or not isinstance(value, int):
        fail_type("v", value, "an int")
    understood = schema.understood
    if value > understood[-1]:
        raise WireError(
            "version_newer",
            f"{schema.label} has schema version {show(value)}, newer than this node "
            f"understands ({_versions_text(understood)}): upgrade this node",
        )
    if value < understood[0]:
        raise WireError(
            "version",
            f"{schema.label} has schema version {show(value)}, older than this node "
            f"understands ({_versions_text(understood)}): upgrade the sender",
        )
    return int(value)


def versioned(obj: dict[str, object], schema: Schema) -> dict[str, object]:
    """``obj`` in the current layout of ``schema``: its ``v`` checked (`_check_version`),
    and a map of the previous version passed through ``schema.from_previous``.

    A map without ``v`` is left to the caller's missing-field check, unless the kind
    declares the version of such maps (``schema.unversioned``).
    """
    if "v" in obj:
        version = _check_version(obj["v"], schema)
    elif schema.unversioned is not None:
        version = _check_version(schema.unversioned, schema)
    else:
        return obj
    return obj if version == schema.current else schema.from_previous(obj)


def require(obj: object, keys: tuple[str, ...], schema: Schema) -> dict[str, object]:
    """``obj`` as a map of a version ``schema`` understands, in its current layout (checked
    before any other field: a newer kind may lack today's fields), holding all of ``keys``."""
    if not isinstance(obj, dict):
        raise WireError(
            "not_map", f"{schema.label} must be a map, got {type(obj).__name__} {show(obj)}"
        )
    obj = versioned(obj, schema)
    missing = [key for key in keys if key not in obj]
    if missing:
        raise WireError(
            "missing_field", f"{schema.label} lacks field(s) {', '.join(map(repr, missing))}"
        )
    return obj


def read_map(
    payload: object,
    parse: Callable[[bytes, str], object],
    *,
    what: str,
    keys: tuple[str, ...],
    schema: Schema,
    max_bytes: int,
    tols: tuple[float, ...] = (),
) -> dict[str, object]:
    """A decoder's first steps: check the options, refuse an oversized ``payload`` unread,
    ``parse`` it (`unpack` or `load_json`) and `require` a map of a version ``schema``
    understands, in its current layout, with ``keys``."""
    check_options(max_bytes, tols)
    data = check_payload(payload, what, max_bytes)
    return require(parse(data, what), keys, schema)
