"""Wire codec: typed, frozen messages <-> bytes, with strict validation and size limits.

Every message that crosses MQTT is one frozen dataclass here, and msgpack (or JSON) appears
nowhere else in the project:

=================  =========================  ==========================================
message            payload                    topic (see `edge_runtime.topology`)
=================  =========================  ==========================================
`SubspaceMessage`  msgpack map                ``fpca/<path>/subspace``, ``fpca/<root>/model``
`SensorReadings`   JSON or msgpack array/map  ``sensors/<node id>`` (a leaf's input)
`StatusDetail`     JSON object (UTF-8)        ``fpca/<path>/status/detail``
`ConfirmMessage`   JSON object (UTF-8)        ``fpca/<path>/confirm`` (a leaf's confirmations)
`PrivacyParams`    part of a subspace message
`PrivacyStatus`    part of a status document
=================  =========================  ==========================================

FedPower's round and reply (`edge_runtime.wire.fedpower`) and the eight messages of a
secure-aggregation slot (`edge_runtime.wire.secagg`: ``encode_secagg``/``decode_secagg``,
topics proposed in its docstring) live in their modules, loaded on first use.

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
``version``         schema version ``v`` is older than the kind's versions understood (see
                    "Schema versions and rolling upgrades"): the sender must be upgraded
``version_newer``   schema version ``v`` is newer than the kind's versions understood: "subspace
                    message has schema version 2, newer than this node understands (version
                    1): upgrade this node"
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

Schema versions and rolling upgrades
------------------------------------
Every message kind has its own schema version, the ``v`` its encoder writes:
`SUBSPACE_VERSION`, `READINGS_VERSION`, `STATUS_VERSION`, `CONFIRM_VERSION` and FedPower's
round and reply versions, ``fedpower.ROUND_VERSION`` and ``fedpower.REPLY_VERSION``
(`SCHEMA_VERSIONS` maps each kind's name to its version). A kind's version goes up by one
when its layout changes in a way an older decoder would misread (a renamed or retyped key, a
changed meaning); a new optional key that older decoders ignore needs no new version
(unknown keys are ignored).

A decoder reads the current version of its kind and the one before it
(`understood_versions`: ``{current - 1, current}``, only ``{1}`` at version 1), so a fleet
upgrades one device at a time: while it does, nodes of two consecutive releases read each
other's messages as long as readers are upgraded before writers (parents before their
children). A message of the previous version is turned into the current layout by the
kind's upgrade step (the identity while a kind has had one layout: every kind is at version
1 today) and then decoded as usual. Outside that window the decoder refuses, with a reason
an agent counts in its ``rejects`` and logs in one line (rate-limited): a version *newer*
than it understands is ``version_newer`` ("... newer than this node understands ...:
upgrade this node"), one *older* is ``version`` ("...: upgrade the sender"). The version is
checked before any other field, since a newer layout may lack today's fields. Readings come
from third-party sensors: a bare array carries no version and a map without ``v`` is
version 1. `SCHEMA_VERSION` (1) is the first version of every kind. The directory
``tests/golden/`` holds the bytes of every kind as each release encoded it; every later
release must decode them.

Privacy parameters of older peers
---------------------------------
Peers from before the mechanism became a choice had one, streaming MOD-SuLQ (eq. (8) of Grammenos et
al. 2020), and wrote only ``epsilon``, ``delta`` and ``clip_norm``. A ``privacy`` map (of a
subspace message or a status document) without ``mechanism`` therefore decodes as
``mechanism = "fpca-eq8"``, and without ``neighbours`` as ``neighbours = "replace-one"``
(the relation eq. (8) is calibrated for); the encoders always write both keys. A status
``privacy`` map without ``horizon``, ``releases`` or ``clipped`` decodes them as None.

Modules
-------
What a user imports from here (``__all__``) is the codec: the message classes, their
``encode_*``/``decode_*`` functions, `WireError`, `REASONS` and `SCHEMA_VERSIONS`. The
limits, tolerances and per-kind versions named above are importable from here too, for the
runtime's own modules, and live in the module of their kind.

One module a message kind: `edge_runtime.wire.subspace` (`SubspaceMessage`),
`edge_runtime.wire.guarantee` (`PrivacyParams`, `PrivacyStatus`),
`edge_runtime.wire.readings` (`SensorReadings`), `edge_runtime.wire.status`
(`StatusDetail`), `edge_runtime.wire.confirm` (`ConfirmMessage`),
`edge_runtime.wire.fedpower` (FedPower's round and reply, imported from there) and
`edge_runtime.wire.secagg` (secure aggregation, imported from there); beneath them
`edge_runtime.wire.fields` (`WireError`, `REASONS`, the limits, the field checks, parsers
and schema-version check) and `edge_runtime.wire.arrays` (float arrays as bytes,
orthonormality). The package imports only `edge_runtime.errors`, `edge_runtime.fpca`,
`edge_runtime.fedpower` and (``wire.secagg``, without ``cryptography``)
`edge_runtime.secagg`.

Memory
------
A decoder allocates O(``max_bytes``) memory: the parsed object tree, then one float64 copy
of the arrays. Pathological msgpack (millions of empty containers) costs up to ~64 bytes of
Python objects per payload byte, so keep ``max_bytes`` at what a device can afford.
"""

from collections.abc import Mapping
from types import MappingProxyType

from edge_runtime.wire.arrays import FLOAT32_ORTHONORMALITY_TOL as FLOAT32_ORTHONORMALITY_TOL
from edge_runtime.wire.arrays import ORTHONORMALITY_TOL as ORTHONORMALITY_TOL
from edge_runtime.wire.confirm import (
    CONFIRM_VERSION,
    ConfirmMessage,
    decode_confirm,
    encode_confirm,
)
from edge_runtime.wire.fields import DEFAULT_MAX_PAYLOAD_BYTES as DEFAULT_MAX_PAYLOAD_BYTES
from edge_runtime.wire.fields import MAX_CONFIRM_SOURCES as MAX_CONFIRM_SOURCES
from edge_runtime.wire.fields import MAX_N_FEATURES as MAX_N_FEATURES
from edge_runtime.wire.fields import (
    REASONS,
    WireError,
)
from edge_runtime.wire.fields import SCHEMA_VERSION as SCHEMA_VERSION
from edge_runtime.wire.fields import understood_versions as understood_versions
from edge_runtime.wire.guarantee import LEGACY_MECHANISM as LEGACY_MECHANISM
from edge_runtime.wire.guarantee import LEGACY_NEIGHBOURS as LEGACY_NEIGHBOURS
from edge_runtime.wire.guarantee import MAX_PRIVACY_NAME_CHARS as MAX_PRIVACY_NAME_CHARS
from edge_runtime.wire.guarantee import (
    PrivacyParams,
    PrivacyStatus,
)
from edge_runtime.wire.readings import MAX_READING_ROWS as MAX_READING_ROWS
from edge_runtime.wire.readings import (
    READINGS_VERSION,
    SensorReadings,
    decode_readings,
    encode_readings,
)
from edge_runtime.wire.status import MAX_JSON_DEPTH as MAX_JSON_DEPTH
from edge_runtime.wire.status import (
    STATUS_VERSION,
    StatusDetail,
    decode_status,
    encode_status,
)
from edge_runtime.wire.subspace import MAX_PROVENANCE_ENTRIES as MAX_PROVENANCE_ENTRIES
from edge_runtime.wire.subspace import SINGULAR_VALUE_SLACK as SINGULAR_VALUE_SLACK
from edge_runtime.wire.subspace import (
    SUBSPACE_VERSION,
    SubspaceMessage,
    decode_subspace,
    encode_subspace,
)
from edge_runtime.wire.subspace import with_deployment as with_deployment

SCHEMA_VERSIONS: Mapping[str, int]  # built on first use (`__getattr__`)
"""Each message kind's current schema version (read-only): what its encoder writes."""


def _schema_versions() -> Mapping[str, int]:
    """`SCHEMA_VERSIONS`, built on first use: FedPower's versions are in its module."""
    from edge_runtime.wire import fedpower

    return MappingProxyType(
        {
            "subspace": SUBSPACE_VERSION,
            "readings": READINGS_VERSION,
            "status": STATUS_VERSION,
            "confirm": CONFIRM_VERSION,
            "round": fedpower.ROUND_VERSION,
            "reply": fedpower.REPLY_VERSION,
        }
    )


def __getattr__(name: str) -> object:
    """``fedpower``, ``secagg`` and ``secagg_fields`` (the modules) and `SCHEMA_VERSIONS`,
    loaded on first use (PEP 562): an FPCA node does not load FedPower's or secure
    aggregation's messages (a leaf's import time and RSS stay low)."""
    if name in ("fedpower", "secagg", "secagg_fields"):
        import importlib  # not ``from edge_runtime.wire import``: that would call back here

        return importlib.import_module(f"edge_runtime.wire.{name}")
    if name == "SCHEMA_VERSIONS":
        value = globals()["SCHEMA_VERSIONS"] = _schema_versions()
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "REASONS",
    "SCHEMA_VERSIONS",
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
]
