"""Wire codec: typed, frozen messages <-> bytes, with strict validation and size limits.

Every message that crosses MQTT is one frozen dataclass here, and msgpack (or JSON) appears
nowhere else in the project:

=================  =========================  ==========================================
message            payload                    topic (see `edge_runtime.topology`)
=================  =========================  ==========================================
`SubspaceMessage`  msgpack map, schema v1     ``fpca/<path>/subspace``, ``fpca/<root>/model``
`SensorReadings`   JSON or msgpack array/map  ``sensors/<node id>`` (a leaf's input)
`StatusDetail`     JSON object (UTF-8)        ``fpca/<path>/status/detail``
`ConfirmMessage`   JSON object (UTF-8)        ``fpca/<path>/confirm`` (a leaf's confirmations)
`PrivacyParams`    part of a subspace message
`PrivacyStatus`    part of a status document
=================  =========================  ==========================================

A subspace message carries a node's local summary ``(U, Sigma, n)`` of Grammenos et al.,
"Federated Principal Component Analysis", NeurIPS 2020 (Alg. 1, the inputs of Merge_r in
Alg. 2): ``basis`` U of shape ``(n_features, rank)``, ``singular_values`` Sigma of shape
``(rank,)`` and the number of samples ``n`` it summarises; a centred summary also carries
its ``mean`` ``(n_features,)`` (optional key ``mean``). Samples are rows throughout.

Decoders never trust their input: the size limit is checked before parsing, msgpack ext types
are refused, every field has an exact type (a bool is not an int, an int is not a str; a
float field accepts an int), byte lengths must match the declared shape, numbers must be
finite and the basis orthonormal. Any bytes whatsoever produce either a message or a
`WireError`; nothing else escapes a decoder. Unknown keys in a map are ignored (forward
compatibility) and never read. Encoders run the same checks on their input, so what they
produce always decodes, and ``decode(encode(m))`` reproduces ``m`` exactly (for the
``"float32"`` subspace encoding: exactly the float32-rounded arrays, as float64).

Exception tree
--------------
::

    ValueError                    (builtin)
     +-- WireError                every rejected payload or message; ``.reason`` is one of
                                  REASONS, ``str(exc)`` one line naming the value and what
                                  was expected

Invalid *options* of the functions (``dtype=``, ``fmt=``, ``max_bytes=``, ``tol=``,
``n_features=``) are programming errors and raise a plain `ValueError`.

Reason codes (``WireError.reason``)
-----------------------------------
==================  ========================================================================
``too_large``       payload (or an encoded message) above ``max_bytes``; checked before parsing
``not_msgpack``     not one complete msgpack object (bad byte, truncated, trailing data, bad
                    UTF-8 in a str, non-str/bytes map key)
``not_json``        a payload detected as JSON that is not valid UTF-8 JSON
``ext_type``        a msgpack ext type (including the timestamp ext) where a value was read
``too_deep``        containers nested deeper than the parser or `MAX_JSON_DEPTH` allows
``not_map``         the payload is not a map/object where one is required
``version``         schema version ``v`` is not `SCHEMA_VERSION`
``missing_field``   a required key is absent
``field_type``      a field has the wrong type (e.g. bool for an int, float for an int, str for
                    a number, str for bytes, a non-bytes payload)
``node_id``         node id is not a single MQTT topic level: empty, > 128 characters, or
                    contains ``/``, ``+``, ``#`` or NUL
``epoch``           epoch is empty or longer than 64 characters
``seq``             sequence number outside ``0 <= seq < 2**63``
``n_samples``       sample count outside ``0 <= n < 2**63``
``shape``           ``n_features`` outside ``1 .. MAX_N_FEATURES``; readings nested deeper
                    than 2 or mixing numbers and arrays
``rank``            rank negative or above ``n_features``; status rank out of range
``dtype``           subspace ``dtype`` is neither ``"float64"`` nor ``"float32"``
``byte_length``     ``basis``/``sv`` byte length differs from ``d * r`` / ``r`` items of dtype
``non_finite``      a NaN or infinity anywhere (basis, singular values, timestamp, privacy
                    parameters, readings incl. JSON ``NaN``/``Infinity`` literals and numbers
                    out of float64 range, status numbers)
``not_orthonormal`` ``max |U^T U - I| > tol`` (see "Orthonormality tolerance")
``singular_values`` a singular value is negative, or they increase (beyond a relative slack of
                    `SINGULAR_VALUE_SLACK` times the largest)
``privacy``         privacy parameters out of range: need ``epsilon > 0``, ``0 < delta < 1``,
                    ``clip_norm > 0``, ``mechanism`` and ``neighbours`` names of 1 to
                    `MAX_PRIVACY_NAME_CHARS` characters from ``[a-z0-9+-]``; in a status
                    document also ``noise_std >= 0``, ``block_size``, ``chunk_size`` and
                    ``horizon >= 1``, ``releases`` and ``clipped >= 0``
``provenance``      provenance entry with an invalid leaf id or a count outside
                    ``0 .. 2**63 - 1``, or more than `MAX_PROVENANCE_ENTRIES` entries
``width``           readings width differs from ``n_features``: "reading has 46 values,
                    expected 48"
``ragged``          readings rows of different lengths
``empty``           no readings, or readings rows with no values
``too_many_rows``   more than `MAX_READING_ROWS` readings in one payload
``source``          readings source id empty or longer than 128 characters
``role``            status role empty or longer than 64 characters
``rejects``         status rejects map with a bad key, a negative count or too many entries
``uptime``          status uptime negative
``extra``           status extra holds an int outside 64 bits
==================  ========================================================================

Orthonormality tolerance
------------------------
A basis is accepted when ``max_ij |(U^T U - I)_ij| <= tol``. For float64 payloads the default
is `ORTHONORMALITY_TOL` = 1e-6: a float64 SVD or QR is orthonormal to ~``d * 1.1e-16``, and a
tree of merges (Alg. 2) keeps it there, so 1e-6 leaves orders of magnitude of headroom while
still refusing anything that is not a basis (the error of ``U^T U`` enters Merge_r's
``Z = U1^T U2`` linearly). For float32 payloads the default is
`FLOAT32_ORTHONORMALITY_TOL` = 1e-4: rounding an orthonormal float64 basis to float32 alone
costs ~``2 * 6e-8`` per entry of ``U^T U``, but a device that computes its SVD in float32
arithmetic is only orthonormal to ~``d * 1.2e-7``, about 1e-4 at d = 1000. Both are options
(``tol=``, ``tol_float32=``) of `decode_subspace` and `encode_subspace`.

Privacy parameters of older peers
---------------------------------
Peers from before issue 10 had one mechanism, streaming MOD-SuLQ (eq. (8) of Grammenos et
al. 2020), and wrote only ``epsilon``, ``delta`` and ``clip_norm``. A ``privacy`` map (of a
subspace message or a status document) without ``mechanism`` therefore decodes as
``mechanism = "fpca-eq8"``, and without ``neighbours`` as ``neighbours = "replace-one"``
(the relation eq. (8) is calibrated for); the encoders always write both keys. A status
``privacy`` map without ``horizon``, ``releases`` or ``clipped`` decodes them as None.

Memory
------
A decoder allocates O(``max_bytes``) memory: the parsed object tree, then one float64 copy
of the arrays. Pathological msgpack (millions of empty containers) costs up to ~64 bytes of
Python objects per payload byte, so keep ``max_bytes`` at what a device can afford.
"""

from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, NoReturn

import msgpack
import numpy as np

from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.fpca.subspace import Subspace

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "FLOAT32_ORTHONORMALITY_TOL",
    "LEGACY_MECHANISM",
    "LEGACY_NEIGHBOURS",
    "MAX_CONFIRM_SOURCES",
    "MAX_JSON_DEPTH",
    "MAX_N_FEATURES",
    "MAX_PRIVACY_NAME_CHARS",
    "MAX_PROVENANCE_ENTRIES",
    "MAX_READING_ROWS",
    "ORTHONORMALITY_TOL",
    "REASONS",
    "SCHEMA_VERSION",
    "SINGULAR_VALUE_SLACK",
    "ConfirmMessage",
    "PrivacyParams",
    "PrivacyStatus",
    "SensorReadings",
    "StatusDetail",
    "SubspaceMessage",
    "WireError",
    "decode_confirm",
    "decode_readings",
    "decode_status",
    "decode_subspace",
    "encode_confirm",
    "encode_readings",
    "encode_status",
    "encode_subspace",
    "with_deployment",
]

SCHEMA_VERSION = 1
"""Schema version ``v`` written by the encoders; decoders accept only this one."""

DEFAULT_MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
"""Default payload size limit in bytes (4 MiB): a float64 basis of 48 x 10 is ~4 KiB."""

ORTHONORMALITY_TOL = 1e-6
"""Default ``max |U^T U - I|`` accepted for float64 bases (module docstring says why)."""

FLOAT32_ORTHONORMALITY_TOL = 1e-4
"""Default ``max |U^T U - I|`` accepted for float32 bases (module docstring says why)."""

SINGULAR_VALUE_SLACK = 1e-12
"""Relative slack (times the largest singular value) allowed when singular values increase."""

MAX_N_FEATURES = 1 << 20
"""Largest ``n_features`` accepted in a subspace message (rank 0 carries no bytes to bound it)."""

MAX_PROVENANCE_ENTRIES = 100_000
"""Most leaves a subspace message's provenance may list."""

MAX_READING_ROWS = 100_000
"""Most readings (rows) one sensor payload may carry."""

MAX_JSON_DEPTH = 32
"""Deepest nesting of a status document's ``extra`` (levels below the ``extra`` map)."""

MAX_PRIVACY_NAME_CHARS = 32
"""Longest ``mechanism`` / ``neighbours`` name of a privacy map, in characters."""

LEGACY_MECHANISM = "fpca-eq8"
"""``mechanism`` of a privacy map that has none (peers before issue 10 only had eq. (8))."""

LEGACY_NEIGHBOURS = "replace-one"
"""``neighbours`` of a privacy map that has none (the relation eq. (8) is calibrated for)."""

MAX_ID_CHARS = 128
MAX_EPOCH_CHARS = 64
MAX_ROLE_CHARS = 64
MAX_REJECT_ENTRIES = 1000
MAX_CONFIRM_SOURCES = 10_000
"""Most sources one confirmation may list."""
_SEQ_LIMIT = 1 << 63
_JSON_INT_DIGITS = 400
_DTYPES: dict[str, str] = {"float64": "<f8", "float32": "<f4"}
_FORBIDDEN_IN_ID = frozenset("/+#\0")
_STRIP = b" \t\r\n"

REASONS: tuple[str, ...] = (
    "too_large",
    "not_msgpack",
    "not_json",
    "ext_type",
    "too_deep",
    "not_map",
    "version",
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

_SUBSPACE_KEYS = (
    "v",
    "node",
    "epoch",
    "seq",
    "n",
    "d",
    "r",
    "dtype",
    "basis",
    "sv",
    "ts",
    "privacy",
    "prov",
)
_PRIVACY_KEYS = ("epsilon", "delta", "clip_norm")
_PRIVACY_NAME_KEYS = ("mechanism", "neighbours")
_PRIVACY_STATUS_KEYS = ("noise_std", "block_size", "chunk_size", "horizon", "releases", "clipped")
_PRIVACY_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789+-")
_CONFIRM_KEYS = (
    "v",
    "node_id",
    "epoch",
    "session",
    "connection",
    "ingested",
    "durable",
    "gaps",
)
_STATUS_KEYS = (
    "v",
    "node_id",
    "role",
    "online",
    "rank",
    "n_samples",
    "seq",
    "epoch",
    "rejects",
    "uptime_s",
    "extra",
)


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


# --------------------------------------------------------------------------- field checks
_REPR = reprlib.Repr()
_REPR.maxlevel = 3  # untrusted values may nest ~1000 deep: never recurse into them
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = 6
_REPR.maxstring = _REPR.maxother = 60


def _show(value: object, limit: int = 60) -> str:
    """A one-line, bounded ``repr`` of an untrusted value for error messages.

    Depth and width are bounded (`reprlib`), so a payload nested a thousand levels
    deep cannot turn an error message into a ``RecursionError``.
    """
    try:
        text = _REPR.repr(value)
    except (ValueError, RecursionError):  # an int too long for str(), or worse
        text = f"<int of {value.bit_length()} bits>" if isinstance(value, int) else "<value>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fail_type(label: str, value: object, expected: str) -> NoReturn:
    reason = "ext_type" if isinstance(value, msgpack.Timestamp) else "field_type"
    raise WireError(
        reason, f"{label} must be {expected}, got {type(value).__name__} {_show(value)}"
    )


def _int(label: str, value: object, reason: str, *, low: int = 0, high: int = _SEQ_LIMIT) -> int:
    """An int (not a bool, not a float) with ``low <= value < high``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        _fail_type(label, value, "an int")
    out = int(value)
    if not low <= out < high:
        bound = "2**63" if high == _SEQ_LIMIT else str(high)
        raise WireError(reason, f"{label} is {_show(out)}, expected {low} <= {label} < {bound}")
    return out


def _float(label: str, value: object) -> float:
    """A finite number (an int is accepted; a bool is not), as float."""
    if isinstance(value, bool | np.bool_) or not isinstance(
        value, int | float | np.integer | np.floating
    ):
        _fail_type(label, value, "a number")
    try:
        out = float(value)
    except OverflowError:
        raise WireError("non_finite", f"{label} {_show(value)} is out of float64 range") from None
    if not math.isfinite(out):
        raise WireError("non_finite", f"{label} is {out!r}, expected a finite number")
    return out


def _text(label: str, value: object, reason: str, max_chars: int) -> str:
    """A non-empty str of at most ``max_chars`` characters that encodes as UTF-8."""
    if not isinstance(value, str):
        _fail_type(label, value, "a str")
    if not 1 <= len(value) <= max_chars:
        raise WireError(
            reason,
            f"{label} {_show(value)} has {len(value)} characters, expected 1 to {max_chars}",
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise WireError(reason, f"{label} {_show(value)} is not valid UTF-8 text") from None
    return str(value)


def _node_id(label: str, value: object, reason: str = "node_id") -> str:
    """A valid single MQTT topic level: 1-128 characters, no ``/ + #`` or NUL."""
    text = _text(label, value, reason, MAX_ID_CHARS)
    if not _FORBIDDEN_IN_ID.isdisjoint(text):
        raise WireError(
            reason,
            f"{label} {_show(text)} is not a single MQTT topic level "
            "(expected no '/', '+', '#' or NUL)",
        )
    return text


def _bool(label: str, value: object) -> bool:
    if not isinstance(value, bool | np.bool_):
        _fail_type(label, value, "a bool")
    return bool(value)


def _count_map(
    label: str,
    value: object,
    reason: str,
    *,
    max_entries: int,
    keys_are_node_ids: bool,
) -> Mapping[str, int]:
    """A read-only ``{str: int >= 0}`` copy of ``value`` with at most ``max_entries`` entries."""
    if not isinstance(value, Mapping):
        _fail_type(label, value, "a map of str to int")
    if len(value) > max_entries:
        raise WireError(reason, f"{label} has {len(value)} entries, expected at most {max_entries}")
    out: dict[str, int] = {}
    for key, count in value.items():
        if keys_are_node_ids:
            name = _node_id(f"{label} key", key, reason)
        else:
            name = _text(f"{label} key", key, reason, MAX_ID_CHARS)
        out[name] = _int(f"{label}[{name!r}]", count, reason)
    return MappingProxyType(out)


def _json_data(value: object, depth: int) -> object:
    """A normalised deep copy of JSON data (dict/list/str/int/float/bool/None)."""
    if depth > MAX_JSON_DEPTH:
        raise WireError("too_deep", f"extra is nested deeper than {MAX_JSON_DEPTH} levels")
    if value is None or isinstance(value, bool | np.bool_):
        return None if value is None else bool(value)
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise WireError("extra", f"extra holds {_show(value)}, not valid UTF-8 text") from None
        return str(value)
    if isinstance(value, int | np.integer):
        out = int(value)
        if not -_SEQ_LIMIT <= out < 2 * _SEQ_LIMIT:
            raise WireError("extra", f"extra holds int {_show(out)}, expected one within 64 bits")
        return out
    if isinstance(value, float | np.floating):
        return _float("extra number", value)
    if isinstance(value, Mapping):
        copy: dict[str, object] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                _fail_type("extra key", key, "a str")
            copy[str(_json_data(key, depth))] = _json_data(item, depth + 1)
        return copy
    if isinstance(value, list | tuple):
        return [_json_data(item, depth + 1) for item in value]
    _fail_type("extra value", value, "JSON data (null, bool, number, str, list or map)")


def _check_options(max_bytes: int, tols: tuple[float, ...] = ()) -> None:
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"max_bytes must be an int >= 1, got {max_bytes!r}")
    for tol in tols:
        if not (isinstance(tol, int | float) and math.isfinite(tol) and tol >= 0):
            raise ValueError(f"tolerance must be a finite number >= 0, got {tol!r}")


def _check_payload(payload: object, what: str, max_bytes: int) -> bytes:
    """``payload`` as bytes, refused before parsing when above ``max_bytes``."""
    if not isinstance(payload, bytes | bytearray):
        _fail_type(f"{what} payload", payload, "bytes")
    if len(payload) > max_bytes:
        raise WireError(
            "too_large", f"{what} payload is {len(payload)} bytes, above the limit of {max_bytes}"
        )
    return bytes(payload)


def _check_size(payload: bytes, what: str, max_bytes: int) -> bytes:
    if len(payload) > max_bytes:
        raise WireError(
            "too_large",
            f"encoded {what} is {len(payload)} bytes, above the limit of {max_bytes}",
        )
    return payload


# --------------------------------------------------------------------------- parsing
def _refuse_ext(code: int, data: bytes) -> NoReturn:
    raise WireError("ext_type", f"msgpack ext type {code} ({len(data)} bytes) is not allowed")


def _unpack(payload: bytes, what: str) -> object:
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


def _load_json(payload: bytes, what: str) -> object:
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


def _require(obj: object, keys: tuple[str, ...], what: str) -> dict[str, object]:
    """``obj`` as a map holding all of ``keys``, with schema version `SCHEMA_VERSION`."""
    if not isinstance(obj, dict):
        raise WireError("not_map", f"{what} must be a map, got {type(obj).__name__} {_show(obj)}")
    if "v" in obj:
        version = obj["v"]
        if isinstance(version, bool) or not isinstance(version, int):
            _fail_type("v", version, "an int")
        if version != SCHEMA_VERSION:
            raise WireError(
                "version",
                f"schema version {_show(version)} is not supported, expected {SCHEMA_VERSION}",
            )
    missing = [key for key in keys if key not in obj]
    if missing:
        raise WireError("missing_field", f"{what} lacks field(s) {', '.join(map(repr, missing))}")
    return obj


# --------------------------------------------------------------------------- subspace
@dataclass(frozen=True)
class PrivacyParams:
    """The differential-privacy guarantee of a published subspace.

    Every reading the subspace covers is ``(epsilon, delta)``-differentially private with
    respect to everything published, for neighbouring datasets under the relation
    ``neighbours``, by the mechanism ``mechanism`` (`edge_runtime.fpca.privacy`).

    Parameters
    ----------
    epsilon : float
        Privacy budget epsilon, > 0.
    delta : float
        Failure probability delta, 0 < delta < 1.
    clip_norm : float
        Bound on the L2 norm of each sample (row) before the noise is calibrated, > 0, in
        the readings' units.
    mechanism : str, default "gaussian"
        The mechanism: ``"gaussian"`` (Gaussian mechanism on block Gram matrices, analytic
        calibration) or ``"fpca-eq8"`` (streaming MOD-SuLQ, eq. (8) of Grammenos et al.
        2020); an aggregator over several reports their sorted names joined by ``+``
        (``"fpca-eq8+gaussian"``). Any name of 1 to `MAX_PRIVACY_NAME_CHARS` characters
        from ``[a-z0-9+-]`` is carried (names of later versions included).
    neighbours : str, default "replace-one"
        The neighbouring relation the guarantee holds for (same rules as ``mechanism``).
        Sample counts are published, so only replace-one is claimed, never add/remove.

    Raises
    ------
    WireError
        reason ``field_type`` for a non-number (bools are refused) or a non-str name,
        ``non_finite`` for NaN or inf, ``privacy`` for a value out of range or a bad name.
    """

    epsilon: float
    delta: float
    clip_norm: float
    mechanism: str = "gaussian"
    neighbours: str = LEGACY_NEIGHBOURS

    def __post_init__(self) -> None:
        _set_budget(self)


def _privacy_name(label: str, value: object) -> str:
    """A mechanism or neighbours name: 1-32 characters from ``[a-z0-9+-]``."""
    if not isinstance(value, str):
        _fail_type(label, value, "a str")
    if not 1 <= len(value) <= MAX_PRIVACY_NAME_CHARS or not set(value) <= _PRIVACY_NAME_CHARS:
        raise WireError(
            "privacy",
            f"{label} is {_show(value)}, expected 1 to {MAX_PRIVACY_NAME_CHARS} characters "
            "from [a-z0-9+-]",
        )
    return str(value)


def _set_budget(obj: PrivacyParams | PrivacyStatus) -> None:
    """Check and normalise ``epsilon``, ``delta``, ``clip_norm``, ``mechanism`` and
    ``neighbours`` of a frozen ``obj``."""
    epsilon = _float("privacy.epsilon", obj.epsilon)
    delta = _float("privacy.delta", obj.delta)
    clip_norm = _float("privacy.clip_norm", obj.clip_norm)
    if not epsilon > 0:
        raise WireError("privacy", f"privacy.epsilon is {epsilon!r}, expected > 0")
    if not 0 < delta < 1:
        raise WireError("privacy", f"privacy.delta is {delta!r}, expected 0 < delta < 1")
    if not clip_norm > 0:
        raise WireError("privacy", f"privacy.clip_norm is {clip_norm!r}, expected > 0")
    object.__setattr__(obj, "epsilon", epsilon)
    object.__setattr__(obj, "delta", delta)
    object.__setattr__(obj, "clip_norm", clip_norm)
    for key in _PRIVACY_NAME_KEYS:
        object.__setattr__(obj, key, _privacy_name(f"privacy.{key}", getattr(obj, key)))


@dataclass(frozen=True)
class PrivacyStatus:
    """The differential-privacy ledger a node reports in its status document.

    A private leaf reports its own settings and counts; an aggregator (the leaf-only fields
    None) the weakest guarantee over the leaves its snapshot covers, as in its subspace
    message's `PrivacyParams`. In the JSON document it is the object ``privacy`` with these
    field names as keys (null for None; written in the order mechanism, epsilon, delta,
    neighbours, clip_norm, noise_std, block_size, chunk_size, horizon, releases, clipped),
    or null when the node publishes without noise. Unknown keys are ignored on read; see
    the module docstring for documents of older peers.

    Parameters
    ----------
    epsilon, delta, clip_norm, mechanism, neighbours
        As `PrivacyParams`.
    noise_std : float or None
        The noise scale of one release, in units of the readings scaled to the unit ball
        (``reading / clip_norm``); finite and >= 0. ``"gaussian"``: sigma, the std of the
        entries of each release's noise matrix ``W`` (unit-ball Gram units,
        `edge_runtime.fpca.private_gram.release_noise_std`); ``"fpca-eq8"``: omega of
        eq. (8) of the last masked block (covariance units; a full block's before the
        first).
    block_size : int or None
        Readings per block (one release each), >= 1.
    chunk_size : int or None
        Columns of the masked covariance built at a time (eq. (7), ``"fpca-eq8"`` only),
        >= 1.
    horizon : int or None
        Releases per segment of the continual release (``"gaussian"`` only), >= 1.
    releases : int or None
        Blocks released so far, >= 0.
    clipped : int or None
        Readings so far whose norm exceeded ``clip_norm`` (scaled down to it), >= 0.

    Raises
    ------
    WireError
        ``field_type`` for a value of the wrong type (a bool is not a number, a float is
        not an int), ``non_finite``, ``privacy`` for a value out of range.
    """

    epsilon: float
    delta: float
    clip_norm: float
    noise_std: float | None = None
    block_size: int | None = None
    chunk_size: int | None = None
    mechanism: str = "gaussian"
    neighbours: str = LEGACY_NEIGHBOURS
    horizon: int | None = None
    releases: int | None = None
    clipped: int | None = None

    def __post_init__(self) -> None:
        _set_budget(self)
        if self.noise_std is not None:
            omega = _float("privacy.noise_std", self.noise_std)
            if not omega >= 0:
                raise WireError("privacy", f"privacy.noise_std is {omega!r}, expected >= 0")
            object.__setattr__(self, "noise_std", omega)
        for key, low in (
            ("block_size", 1),
            ("chunk_size", 1),
            ("horizon", 1),
            ("releases", 0),
            ("clipped", 0),
        ):
            value = getattr(self, key)
            if value is not None:
                object.__setattr__(self, key, _int(f"privacy.{key}", value, "privacy", low=low))

    @property
    def params(self) -> PrivacyParams:
        """The guarantee as carried by subspace messages (budget, clip norm, mechanism,
        neighbours)."""
        return PrivacyParams(
            self.epsilon, self.delta, self.clip_norm, self.mechanism, self.neighbours
        )

    def as_dict(self) -> dict[str, str | float | int | None]:
        """The JSON object of a status document (every key present, None as null)."""
        return {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "neighbours": self.neighbours,
            "clip_norm": self.clip_norm,
            "noise_std": self.noise_std,
            "block_size": self.block_size,
            "chunk_size": self.chunk_size,
            "horizon": self.horizon,
            "releases": self.releases,
            "clipped": self.clipped,
        }


@dataclass(frozen=True, eq=False)
class SubspaceMessage:
    """One node's cumulative snapshot, as published on ``fpca/<path>/subspace``.

    Parameters
    ----------
    node_id : str
        Publishing node; a single MQTT topic level (1-128 characters, no ``/ + #`` or NUL).
    epoch : str
        Random id (1-64 characters) of this node's state lineage; kept across restarts.
    seq : int
        Publish counter within the epoch, ``0 <= seq < 2**63``; snapshots with a larger
        ``(epoch, seq)`` supersede older ones.
    subspace : Subspace
        The summary ``(U, Sigma, n)``: basis ``(n_features, rank)`` float64, singular values
        ``(rank,)`` float64, ``n_samples`` (``< 2**63``). Its arrays are checked (finite,
        orthonormal, ordered) by `encode_subspace` / `decode_subspace`, not here.
    timestamp : float
        Publish time, seconds since the Unix epoch (``time.time()``); finite.
    privacy : PrivacyParams or None
        Differential-privacy parameters, or None when published without noise.
    provenance : Mapping[str, int]
        Leaf id -> number of that leaf's samples this snapshot covers (at most
        `MAX_PROVENANCE_ENTRIES` entries); stored as a read-only copy.
    sources : Mapping[str, int]
        A leaf's snapshot: sensor source id -> last sequence number it covers (at most
        `MAX_CONFIRM_SOURCES` entries), so a leaf restored from its own retained snapshot
        continues each source exactly where the snapshot ends. Empty for aggregators; the
        wire key ``src`` is left out when empty, so older decoders still read the message.
    deployment : str or None
        Name of the topology (deployment) the publisher belongs to, 1-128 characters, or
        None (older publishers). An aggregator refuses a snapshot of another deployment;
        None is accepted. The wire key ``dep`` is left out when None.

    Raises
    ------
    WireError
        With the reason of the first invalid field (``node_id``, ``epoch``, ``seq``,
        ``n_samples``, ``shape``, ``field_type``, ``non_finite``, ``provenance``).

    Equality is identity (as for `Subspace`); compare fields and arrays explicitly.
    """

    node_id: str
    epoch: str
    seq: int
    subspace: Subspace
    timestamp: float
    privacy: PrivacyParams | None = None
    provenance: Mapping[str, int] = field(default_factory=dict)
    sources: Mapping[str, int] = field(default_factory=dict)
    deployment: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_id", _node_id("node_id", self.node_id))
        if self.deployment is not None:
            dep = _text("deployment", self.deployment, "field_type", MAX_ID_CHARS)
            object.__setattr__(self, "deployment", dep)
        object.__setattr__(self, "epoch", _text("epoch", self.epoch, "epoch", MAX_EPOCH_CHARS))
        object.__setattr__(self, "seq", _int("seq", self.seq, "seq"))
        object.__setattr__(self, "sources", _seq_map("sources", self.sources))
        if not isinstance(self.subspace, Subspace):
            _fail_type("subspace", self.subspace, "a Subspace")
        _int("n_samples", self.subspace.n_samples, "n_samples")
        _int("n_features", self.subspace.n_features, "shape", low=1, high=MAX_N_FEATURES + 1)
        object.__setattr__(self, "timestamp", _float("timestamp", self.timestamp))
        if self.privacy is not None and not isinstance(self.privacy, PrivacyParams):
            _fail_type("privacy", self.privacy, "PrivacyParams or None")
        provenance = _count_map(
            "provenance",
            self.provenance,
            "provenance",
            max_entries=MAX_PROVENANCE_ENTRIES,
            keys_are_node_ids=True,
        )
        object.__setattr__(self, "provenance", provenance)

    @property
    def n_samples(self) -> int:
        """Number of samples the subspace summarises."""
        return self.subspace.n_samples

    @property
    def n_features(self) -> int:
        """Dimension ``d`` of the ambient space."""
        return self.subspace.n_features

    @property
    def rank(self) -> int:
        """Number of basis vectors ``r``."""
        return self.subspace.rank


def _check_arrays(basis: np.ndarray, sv: np.ndarray, tol: float) -> None:
    """Finite values, non-negative non-increasing ``sv``, ``max |U^T U - I| <= tol``."""
    bad = int(np.count_nonzero(~np.isfinite(basis)))
    if bad:
        raise WireError("non_finite", f"basis has {bad} non-finite entries (NaN or inf)")
    bad = int(np.count_nonzero(~np.isfinite(sv)))
    if bad:
        raise WireError("non_finite", f"singular values have {bad} non-finite entries")
    rank = sv.shape[0]
    if rank == 0:
        return
    if sv.min() < 0:
        i = int(np.argmin(sv))
        raise WireError("singular_values", f"singular value {i} is {float(sv[i])!r}, expected >= 0")
    rises = np.flatnonzero(np.diff(sv) > SINGULAR_VALUE_SLACK * sv.max())
    if rises.size:
        i = int(rises[0])
        raise WireError(
            "singular_values",
            f"singular values increase from {float(sv[i])!r} (index {i}) to {float(sv[i + 1])!r}, "
            "expected non-increasing",
        )
    largest = float(np.abs(basis).max())
    if not largest <= 1.0 + tol:
        raise WireError(
            "not_orthonormal",
            f"basis has an entry of magnitude {largest:.6g} > 1, so it is not orthonormal",
        )
    gram = basis.T @ basis
    gram[np.diag_indices(rank)] -= 1.0
    error = float(np.abs(gram).max())
    if not error <= tol:
        raise WireError(
            "not_orthonormal",
            f"basis is not orthonormal: max |U^T U - I| = {error:.3g}, expected <= {tol:g}",
        )


def encode_subspace(
    msg: SubspaceMessage,
    *,
    dtype: Literal["float64", "float32"] = "float64",
    tol: float = ORTHONORMALITY_TOL,
    tol_float32: float = FLOAT32_ORTHONORMALITY_TOL,
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> bytes:
    """Encode a snapshot as a schema-v1 msgpack map.

    Parameters
    ----------
    msg : SubspaceMessage
    dtype : {"float64", "float32"}
        Wire precision of ``basis`` and ``sv``; float32 halves the payload.
    tol, tol_float32 : float
        Orthonormality tolerance applied to the (rounded) basis, for float64 / float32.
    max_bytes : int
        Refuse to produce a payload that receivers with this limit would refuse.

    Returns
    -------
    bytes
        Map with keys ``v, node, epoch, seq, n, d, r, dtype, basis, sv, ts, privacy, prov``;
        ``basis`` is ``d * r`` little-endian values of ``dtype`` in C order of shape
        ``(d, r)``, ``sv`` is ``r`` values; ``privacy`` is a map
        ``{epsilon, delta, clip_norm, mechanism, neighbours}`` or nil; ``prov`` a map of
        str to int. A centred summary (``subspace.mean`` not None) adds ``mean``: ``d``
        values of ``dtype``; the key is absent for uncentred summaries, so older decoders
        still read them. A leaf's snapshot adds ``src``, the map of
        `SubspaceMessage.sources`; a message with a `SubspaceMessage.deployment` adds
        ``dep`` (a str).

    Raises
    ------
    WireError
        ``non_finite`` (also for values that overflow float32), ``singular_values``,
        ``not_orthonormal``, ``too_large``, ``field_type`` if ``msg`` is not a
        SubspaceMessage.
    ValueError
        For an unknown ``dtype`` or invalid ``tol``/``max_bytes``.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    _check_options(max_bytes, (tol, tol_float32))
    if not isinstance(msg, SubspaceMessage):
        _fail_type("msg", msg, "a SubspaceMessage")
    wire_dtype = _DTYPES[dtype]
    with np.errstate(over="ignore", invalid="ignore"):
        basis = np.ascontiguousarray(msg.subspace.basis, dtype=wire_dtype)
        sv = np.ascontiguousarray(msg.subspace.singular_values, dtype=wire_dtype)
    _check_arrays(
        basis.astype(np.float64), sv.astype(np.float64), tol if dtype == "float64" else tol_float32
    )
    privacy = msg.privacy
    obj = {
        "v": SCHEMA_VERSION,
        "node": msg.node_id,
        "epoch": msg.epoch,
        "seq": msg.seq,
        "n": msg.n_samples,
        "d": msg.n_features,
        "r": msg.rank,
        "dtype": dtype,
        "basis": basis.tobytes(order="C"),
        "sv": sv.tobytes(),
        "ts": msg.timestamp,
        "privacy": None
        if privacy is None
        else {
            "epsilon": privacy.epsilon,
            "delta": privacy.delta,
            "clip_norm": privacy.clip_norm,
            "mechanism": privacy.mechanism,
            "neighbours": privacy.neighbours,
        },
        "prov": dict(msg.provenance),
    }
    if msg.sources:
        obj["src"] = dict(msg.sources)
    if msg.deployment is not None:
        obj["dep"] = msg.deployment
    mean = msg.subspace.mean
    if mean is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            wire_mean = np.ascontiguousarray(mean, dtype=wire_dtype)
        _check_mean(wire_mean.astype(np.float64))
        obj["mean"] = wire_mean.tobytes()
    return _check_size(msgpack.packb(obj, use_bin_type=True), "subspace message", max_bytes)


def _check_mean(mean: np.ndarray) -> None:
    bad = int(np.count_nonzero(~np.isfinite(mean)))
    if bad:
        raise WireError("non_finite", f"mean has {bad} non-finite entries (NaN or inf)")


def _mean_from_wire(blob: object, d: int, wire_dtype: np.dtype) -> np.ndarray | None:
    """The optional ``mean`` field: absent or nil for uncentred summaries."""
    if blob is None:
        return None
    if not isinstance(blob, bytes):
        _fail_type("mean", blob, "bytes or nil")
    if len(blob) != d * wire_dtype.itemsize:
        raise WireError(
            "byte_length",
            f"mean has {len(blob)} bytes, expected {d * wire_dtype.itemsize} "
            f"({d} {wire_dtype.name} values for d={d})",
        )
    mean = np.frombuffer(blob, dtype=wire_dtype).astype(np.float64)
    _check_mean(mean)
    return mean


def decode_subspace(
    payload: bytes,
    *,
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    tol: float = ORTHONORMALITY_TOL,
    tol_float32: float = FLOAT32_ORTHONORMALITY_TOL,
) -> SubspaceMessage:
    """Decode and validate a subspace message produced by `encode_subspace`.

    Parameters
    ----------
    payload : bytes
        The MQTT payload; refused unread when longer than ``max_bytes``.
    max_bytes : int
        Size limit in bytes, default `DEFAULT_MAX_PAYLOAD_BYTES`.
    tol, tol_float32 : float
        Largest ``max |U^T U - I|`` accepted for float64 / float32 bases.

    Returns
    -------
    SubspaceMessage
        Its subspace holds a float64 basis ``(d, r)`` and singular values ``(r,)``
        (float32 payloads are widened exactly), both read-only.

    Raises
    ------
    WireError
        For anything but a valid message; never any other exception for any bytes. Reasons:
        ``too_large``, ``not_msgpack``, ``ext_type``, ``too_deep``, ``not_map``, ``version``,
        ``missing_field``, ``field_type``, ``node_id``, ``epoch``, ``seq``, ``n_samples``,
        ``shape``, ``rank``, ``dtype``, ``byte_length``, ``non_finite``, ``not_orthonormal``,
        ``singular_values``, ``privacy``, ``provenance``.
    ValueError
        For invalid ``max_bytes`` or tolerances.
    """
    _check_options(max_bytes, (tol, tol_float32))
    data = _check_payload(payload, "subspace", max_bytes)
    obj = _require(_unpack(data, "subspace"), _SUBSPACE_KEYS, "subspace message")
    node_id = _node_id("node", obj["node"])
    epoch = _text("epoch", obj["epoch"], "epoch", MAX_EPOCH_CHARS)
    seq = _int("seq", obj["seq"], "seq")
    n_samples = _int("n", obj["n"], "n_samples")
    d = _int("d", obj["d"], "shape", low=1, high=MAX_N_FEATURES + 1)
    r = _int("r", obj["r"], "rank", high=_SEQ_LIMIT)
    if r > d:
        raise WireError("rank", f"rank r={r} exceeds n_features d={d}")
    dtype = obj["dtype"]
    if not isinstance(dtype, str):
        _fail_type("dtype", dtype, "a str")
    if dtype not in _DTYPES:
        raise WireError(
            "dtype", f"dtype {_show(dtype)} is not supported, expected 'float64' or 'float32'"
        )
    wire_dtype = np.dtype(_DTYPES[dtype])
    raw: dict[str, bytes] = {}
    for key, items in (("basis", d * r), ("sv", r)):
        blob = obj[key]
        if not isinstance(blob, bytes):
            _fail_type(key, blob, "bytes")
        if len(blob) != items * wire_dtype.itemsize:
            raise WireError(
                "byte_length",
                f"{key} has {len(blob)} bytes, expected {items * wire_dtype.itemsize} "
                f"({items} {dtype} values for d={d}, r={r})",
            )
        raw[key] = blob
    timestamp = _float("ts", obj["ts"])
    privacy = _privacy_from_wire(obj["privacy"])
    provenance = _count_map(
        "prov",
        obj["prov"],
        "provenance",
        max_entries=MAX_PROVENANCE_ENTRIES,
        keys_are_node_ids=True,
    )
    basis = np.frombuffer(raw["basis"], dtype=wire_dtype).reshape(d, r).astype(np.float64)
    sv = np.frombuffer(raw["sv"], dtype=wire_dtype).astype(np.float64)
    _check_arrays(basis, sv, tol if dtype == "float64" else tol_float32)
    mean = _mean_from_wire(obj.get("mean"), d, wire_dtype)
    deployment = obj.get("dep")
    if deployment is not None:
        deployment = _text("dep", deployment, "field_type", MAX_ID_CHARS)
    return SubspaceMessage(
        node_id=node_id,
        epoch=epoch,
        seq=seq,
        subspace=Subspace(basis, sv, n_samples, mean),
        timestamp=timestamp,
        privacy=privacy,
        provenance=provenance,
        sources=obj.get("src", {}),
        deployment=deployment,
    )


def with_deployment(payload: bytes, deployment: str) -> bytes:
    """``payload``, a subspace message from `encode_subspace`, with its ``dep`` key set to
    ``deployment`` (returned unchanged when it already is): how an agent stamps its
    topology's name on every snapshot it publishes.

    Raises
    ------
    WireError
        ``field_type`` for a ``deployment`` that is not 1-128 characters of text; the
        decoder's reasons for a ``payload`` that is not a msgpack map.
    """
    deployment = _text("deployment", deployment, "field_type", MAX_ID_CHARS)
    obj = _unpack(_check_payload(payload, "subspace", len(payload) + 1), "subspace")
    if not isinstance(obj, dict):
        raise WireError("not_map", f"subspace message is a {type(obj).__name__}, expected a map")
    if obj.get("dep") == deployment:
        return payload
    obj["dep"] = deployment
    return msgpack.packb(obj, use_bin_type=True)


def _privacy_from_wire(value: object) -> PrivacyParams | None:
    """The ``privacy`` map of a subspace message (unknown keys ignored), or None for nil."""
    if value is None:
        return None
    if not isinstance(value, dict):
        _fail_type("privacy", value, "a map or nil")
    missing = [key for key in _PRIVACY_KEYS if key not in value]
    if missing:
        raise WireError("missing_field", f"privacy lacks field(s) {', '.join(map(repr, missing))}")
    return PrivacyParams(
        value["epsilon"],
        value["delta"],
        value["clip_norm"],
        mechanism=value.get("mechanism", LEGACY_MECHANISM),
        neighbours=value.get("neighbours", LEGACY_NEIGHBOURS),
    )


# --------------------------------------------------------------------------- readings
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
            object.__setattr__(self, "source", _text("source", self.source, "source", MAX_ID_CHARS))
        if self.seq is not None:
            object.__setattr__(self, "seq", _int("seq", self.seq, "seq"))


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


def _check_numbers(row: list[object], index: int) -> None:
    for column, value in enumerate(row):
        kind = type(value)
        if kind is float or kind is int:
            continue
        if kind is list:
            raise WireError(
                "shape", f"reading {index} has an array at column {column}, expected a number"
            )
        _fail_type(f"reading {index} column {column}", value, "a number (int or float)")


def _readings_from_wire(body: object, n_features: int | None) -> np.ndarray:
    if not isinstance(body, list):
        _fail_type("readings", body, "an array of numbers or a 2-D array")
    if not body:
        raise WireError("empty", "readings are empty, expected at least one reading")
    if isinstance(body[0], list):
        if len(body) > MAX_READING_ROWS:
            raise WireError(
                "too_many_rows", f"{len(body)} readings, expected at most {MAX_READING_ROWS}"
            )
        width = len(body[0])
        for i, row in enumerate(body):
            if not isinstance(row, list):
                raise WireError(
                    "shape", f"reading {i} is {type(row).__name__}, but reading 0 is an array"
                )
            if len(row) != width:
                raise WireError(
                    "ragged", f"reading {i} has {len(row)} values, reading 0 has {width}"
                )
        rows = body
    else:
        width = len(body)
        rows = [body]
    if width == 0:
        raise WireError("empty", "readings have no values, expected at least one per reading")
    for i, row in enumerate(rows):
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
        (keys with None are left out); otherwise the bare array.
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
    _check_options(max_bytes)
    arr = _values_array(values)
    readings = SensorReadings(arr, source, seq)  # validates source and seq
    body = arr.tolist()
    obj: object = body
    if source is not None or seq is not None:
        obj = {
            key: value
            for key, value in (("src", readings.source), ("seq", readings.seq), ("x", body))
            if value is not None
        }
    if fmt == "json":
        payload = json.dumps(obj, allow_nan=False, separators=(",", ":")).encode("utf-8")
    else:
        payload = msgpack.packb(obj, use_bin_type=True)
    return _check_size(payload, "readings", max_bytes)


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
    absent or nil. Unknown map keys are ignored.

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
        ``not_json``, ``not_msgpack``, ``ext_type``, ``too_deep``, ``missing_field``,
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
    _check_options(max_bytes)
    data = _check_payload(payload, "readings", max_bytes)
    if data.lstrip(_STRIP)[:1] in (b"[", b"{"):
        obj = _load_json(data, "readings")
    else:
        obj = _unpack(data, "readings")
    source = seq = None
    if isinstance(obj, dict):
        if "x" not in obj:
            raise WireError("missing_field", "readings map lacks field 'x'")
        if obj.get("src") is not None:
            source = _text("src", obj["src"], "source", MAX_ID_CHARS)
        if obj.get("seq") is not None:
            seq = _int("seq", obj["seq"], "seq")
        obj = obj["x"]
    values = _readings_from_wire(obj, n_features)
    return SensorReadings(values, source, seq)


# --------------------------------------------------------------------------- status
@dataclass(frozen=True)
class StatusDetail:
    """A node's JSON status document, retained on ``fpca/<path>/status/detail``.

    JSON so that dashboards (Home Assistant, Node-RED, Telegraf) read it without our code;
    its keys are the field names plus ``"v"`` (the schema version).

    Parameters
    ----------
    node_id : str
        The node; a single MQTT topic level.
    role : str
        ``"leaf"``, ``"aggregator"``, ``"root"`` or another 1-64 character name.
    online : bool
    rank : int
        Current rank, ``0 <= rank <= MAX_N_FEATURES``.
    n_samples : int
        Samples seen, ``0 <= n_samples < 2**63``.
    seq : int
        Sequence number of the latest published snapshot (0 before the first).
    epoch : str
        The node's state epoch (1-64 characters).
    rejects : Mapping[str, int]
        Rejected inbound messages per reason code (at most 1000 entries).
    uptime_s : float
        Seconds since the agent started, finite and >= 0.
    extra : Mapping[str, object]
        Further JSON data (str keys; null, bool, int within 64 bits, finite float, str, list,
        map; at most `MAX_JSON_DEPTH` levels). Stored as a normalised deep copy (tuples
        become lists) behind a read-only top-level view.
    privacy : PrivacyStatus or None, default None
        The node's differential-privacy guarantee, None when it publishes without noise.
        In the JSON document a map (see `PrivacyStatus`) or null; a document without the
        key decodes to None.

    Raises
    ------
    WireError
        ``field_type``, ``node_id``, ``role``, ``rank``, ``n_samples``, ``seq``, ``epoch``,
        ``rejects``, ``uptime``, ``non_finite``, ``extra``, ``too_deep``, ``privacy``.
    """

    node_id: str
    role: str
    online: bool
    rank: int
    n_samples: int
    seq: int
    epoch: str
    rejects: Mapping[str, int]
    uptime_s: float
    extra: Mapping[str, object] = field(default_factory=dict)
    privacy: PrivacyStatus | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_id", _node_id("node_id", self.node_id))
        object.__setattr__(self, "role", _text("role", self.role, "role", MAX_ROLE_CHARS))
        object.__setattr__(self, "online", _bool("online", self.online))
        object.__setattr__(self, "rank", _int("rank", self.rank, "rank", high=MAX_N_FEATURES + 1))
        object.__setattr__(self, "n_samples", _int("n_samples", self.n_samples, "n_samples"))
        object.__setattr__(self, "seq", _int("seq", self.seq, "seq"))
        object.__setattr__(self, "epoch", _text("epoch", self.epoch, "epoch", MAX_EPOCH_CHARS))
        rejects = _count_map(
            "rejects",
            self.rejects,
            "rejects",
            max_entries=MAX_REJECT_ENTRIES,
            keys_are_node_ids=False,
        )
        object.__setattr__(self, "rejects", rejects)
        uptime = _float("uptime_s", self.uptime_s)
        if uptime < 0:
            raise WireError("uptime", f"uptime_s is {uptime!r}, expected >= 0")
        object.__setattr__(self, "uptime_s", uptime)
        if not isinstance(self.extra, Mapping):
            _fail_type("extra", self.extra, "a map")
        extra = _json_data(self.extra, 0)
        assert isinstance(extra, dict)
        object.__setattr__(self, "extra", MappingProxyType(extra))
        if self.privacy is not None and not isinstance(self.privacy, PrivacyStatus):
            _fail_type("privacy", self.privacy, "PrivacyStatus or None")


def encode_status(detail: StatusDetail, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> bytes:
    """Encode a status document as compact UTF-8 JSON.

    Returns
    -------
    bytes
        A JSON object with keys ``v, node_id, role, online, rank, n_samples, seq, epoch,
        rejects, uptime_s, extra, privacy`` (``privacy`` null or the map of
        `PrivacyStatus.as_dict`).

    Raises
    ------
    WireError
        ``field_type`` if ``detail`` is not a StatusDetail, ``too_large``.
    """
    _check_options(max_bytes)
    if not isinstance(detail, StatusDetail):
        _fail_type("detail", detail, "a StatusDetail")
    doc = {
        "v": SCHEMA_VERSION,
        "node_id": detail.node_id,
        "role": detail.role,
        "online": detail.online,
        "rank": detail.rank,
        "n_samples": detail.n_samples,
        "seq": detail.seq,
        "epoch": detail.epoch,
        "rejects": dict(detail.rejects),
        "uptime_s": detail.uptime_s,
        "extra": dict(detail.extra),
        "privacy": None if detail.privacy is None else detail.privacy.as_dict(),
    }
    text = json.dumps(doc, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return _check_size(text.encode("utf-8"), "status", max_bytes)


def decode_status(payload: bytes, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> StatusDetail:
    """Decode and validate a status document produced by `encode_status`.

    Raises
    ------
    WireError
        For anything but a valid document; never any other exception for any bytes.
        Reasons: ``too_large``, ``not_json``, ``too_deep``, ``not_map``, ``version``,
        ``missing_field``, and those of `StatusDetail`.
    ValueError
        For invalid ``max_bytes``.
    """
    _check_options(max_bytes)
    data = _check_payload(payload, "status", max_bytes)
    obj = _require(_load_json(data, "status"), _STATUS_KEYS, "status document")
    fields = {key: obj[key] for key in _STATUS_KEYS if key != "v"}
    return StatusDetail(**fields, privacy=_privacy_status_from_json(obj.get("privacy")))


def _privacy_status_from_json(value: object) -> PrivacyStatus | None:
    """The ``privacy`` map of a status document (unknown keys ignored), or None for null;
    the keys of older peers are defaulted (module docstring)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        _fail_type("privacy", value, "a map or null")
    missing = [key for key in _PRIVACY_KEYS if key not in value]
    if missing:
        raise WireError("missing_field", f"privacy lacks field(s) {', '.join(map(repr, missing))}")
    keys = _PRIVACY_KEYS + _PRIVACY_STATUS_KEYS
    return PrivacyStatus(
        **{key: value.get(key) for key in keys},
        mechanism=value.get("mechanism", LEGACY_MECHANISM),
        neighbours=value.get("neighbours", LEGACY_NEIGHBOURS),
    )


# --------------------------------------------------------------------------- confirmations
@dataclass(frozen=True)
class ConfirmMessage:
    """A leaf's reading confirmations, retained on ``fpca/<path>/confirm`` (JSON).

    What a publisher of sequenced readings (the replay, a gateway) needs to keep each reading
    until it is safe and to re-send only what was lost.

    Parameters
    ----------
    node_id : str
        The leaf.
    epoch : str
        The leaf's state epoch (changes when it starts afresh).
    session : str
        Random id of the leaf's process (1-64 characters); a change means the leaf
        restarted, possibly from an older state.
    connection : int
        Counts the process's connections to the broker (>= 0); a change means the leaf
        reconnected, and readings sent meanwhile may have been lost.
    ingested : Mapping[str, int]
        Per source, the last sequence number applied (in order, exactly once).
    durable : Mapping[str, int]
        Per source, the last sequence number that survives a restart of the leaf (in its last
        checkpoint, or without one in its last published snapshot).
    gaps : Mapping[str, int]
        Per source with readings held behind a gap, the first missing sequence number.

    Raises
    ------
    WireError
        ``field_type``, ``node_id``, ``epoch``, ``seq``, ``source``, ``too_large`` (more than
        `MAX_CONFIRM_SOURCES` sources).
    """

    node_id: str
    epoch: str
    session: str
    connection: int
    ingested: Mapping[str, int]
    durable: Mapping[str, int]
    gaps: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_id", _node_id("node_id", self.node_id))
        object.__setattr__(self, "epoch", _text("epoch", self.epoch, "epoch", MAX_EPOCH_CHARS))
        object.__setattr__(
            self, "session", _text("session", self.session, "epoch", MAX_EPOCH_CHARS)
        )
        object.__setattr__(self, "connection", _int("connection", self.connection, "seq"))
        for name in ("ingested", "durable", "gaps"):
            object.__setattr__(self, name, _seq_map(name, getattr(self, name)))


def _seq_map(label: str, value: object) -> Mapping[str, int]:
    """A read-only ``{source: seq}`` copy; a seq may be -1 (nothing yet)."""
    if not isinstance(value, Mapping):
        _fail_type(label, value, "a map of source to sequence number")
    if len(value) > MAX_CONFIRM_SOURCES:
        raise WireError(
            "too_large",
            f"{label} lists {len(value)} sources, expected at most {MAX_CONFIRM_SOURCES}",
        )
    out: dict[str, int] = {}
    for key, seq in value.items():
        name = _text(f"{label} key", key, "source", MAX_ID_CHARS)
        out[name] = _int(f"{label}[{name!r}]", seq, "seq", low=-1)
    return MappingProxyType(out)


def encode_confirm(msg: ConfirmMessage, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> bytes:
    """Encode confirmations as compact UTF-8 JSON (keys ``v, node_id, epoch, session,
    connection, ingested, durable, gaps``).

    Raises
    ------
    WireError
        ``field_type`` if ``msg`` is not a ConfirmMessage, ``too_large``.
    """
    _check_options(max_bytes)
    if not isinstance(msg, ConfirmMessage):
        _fail_type("msg", msg, "a ConfirmMessage")
    doc = {
        "v": SCHEMA_VERSION,
        "node_id": msg.node_id,
        "epoch": msg.epoch,
        "session": msg.session,
        "connection": msg.connection,
        "ingested": dict(msg.ingested),
        "durable": dict(msg.durable),
        "gaps": dict(msg.gaps),
    }
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    return _check_size(text.encode("utf-8"), "confirmation", max_bytes)


def decode_confirm(payload: bytes, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> ConfirmMessage:
    """Decode and validate confirmations produced by `encode_confirm`.

    Raises
    ------
    WireError
        For anything but a valid document; never any other exception for any bytes.
        Reasons: ``too_large``, ``not_json``, ``too_deep``, ``not_map``, ``version``,
        ``missing_field``, and those of `ConfirmMessage`.
    """
    _check_options(max_bytes)
    data = _check_payload(payload, "confirmation", max_bytes)
    obj = _require(_load_json(data, "confirmation"), _CONFIRM_KEYS, "confirmation")
    return ConfirmMessage(**{key: obj[key] for key in _CONFIRM_KEYS if key != "v"})
