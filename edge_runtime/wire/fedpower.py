"""FedPower's two messages on the wire: the root's round and a leaf's reply (msgpack).

=================  ============================  =====================================
message            payload                       topic (see `edge_runtime.topology`)
=================  ============================  =====================================
`RoundMessage`     msgpack map, `ROUND_VERSION`  ``<prefix>/<root>/round`` (retained)
`ReplyMessage`     msgpack map, `REPLY_VERSION`  ``<prefix>/<path>/reply`` (a leaf's)
=================  ============================  =====================================

The same rules as every message of `edge_runtime.wire` (its field checks, parsers and
array codecs, `edge_runtime.wire.fields` and `edge_runtime.wire.arrays`, are reused):
the size limit is checked before parsing, ext types are refused, every field has an exact
type, byte lengths must match the declared shape, numbers must be finite; any bytes give a
message or a `WireError` (reasons of `edge_runtime.wire.REASONS`; a bad round is ``"seq"``).
Matrices travel as ``d * r`` little-endian values of ``dtype`` (``"float32"`` by default
in the agents, as snapshots do; ``"float64"`` exact), C order, shape ``(d, r)``.

A round's ``basis`` is the global basis ``Z`` (orthonormal, checked with the tolerances of
a subspace); it is nil in the first round of a root that does not know ``d`` yet: the
leaves then start from ``Z_0 = orth(G)``, ``G`` a ``(d, r)`` standard normal matrix drawn
with ``numpy.random.default_rng(seed)`` (`edge_runtime.fedpower.power.initial_basis`,
re-exported here), identical on every leaf.

A reply's ``y`` is the last local product ``Y = A_l Q`` (FedPower; `edge_runtime.fedpower.
local_iterations`): finite, of the round's shape, *not* orthonormal (never validated as a
subspace basis), with its leaf's sample count ``n >= 1`` (a leaf without readings does not
reply) and ``privacy`` (nil: the runtime's FedPower leaves publish without noise).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from edge_runtime.wire.arrays import (
    as_blob,
    as_dims,
    as_wire_dtype,
    check_dtype_option,
    check_finite,
    check_orthonormal,
    rounded_to,
    tolerance_for,
    widen_blob,
)
from edge_runtime.wire.fields import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_N_FEATURES,
    Schema,
    WireError,
    as_deployment,
    as_epoch,
    as_float,
    as_int,
    as_node_id,
    as_seq_map,
    check_message,
    fail_type,
    optional_keys,
    pack,
    read_map,
    unpack,
)
from edge_runtime.wire.guarantee import (
    PrivacyParams,
    check_privacy_type,
    privacy_from_wire,
    privacy_to_wire,
)

if TYPE_CHECKING:  # at run time lazily, by __getattr__
    from edge_runtime.fedpower.power import initial_basis

__all__ = [
    "MAX_LOCAL_STEPS",
    "REPLY_VERSION",
    "ROUND_VERSION",
    "ReplyMessage",
    "RoundMessage",
    "decode_reply",
    "decode_round",
    "encode_reply",
    "encode_round",
    "initial_basis",
]


def __getattr__(name: str) -> object:
    """``initial_basis`` (re-exported from `edge_runtime.fedpower.power`), imported lazily."""
    if name == "initial_basis":
        from edge_runtime.fedpower.power import initial_basis

        return initial_basis
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


ROUND_VERSION = 1
"""Schema version ``v`` that `encode_round` writes; `decode_round` reads it and the one
before it (`edge_runtime.wire.fields.understood_versions`)."""

REPLY_VERSION = 1
"""Schema version ``v`` that `encode_reply` writes; `decode_reply` reads it and the one
before it."""

_ROUND_SCHEMA = Schema("round message", ROUND_VERSION)
_REPLY_SCHEMA = Schema("reply message", REPLY_VERSION)

MAX_LOCAL_STEPS = 10_000
"""Most local iterations a round may ask for (a bound on a leaf's work per round)."""

_ROUND_KEYS = ("v", "root", "epoch", "round", "d", "r", "dtype", "basis", "steps", "timeout", "ts")
_REPLY_KEYS = ("v", "node", "epoch", "round", "n", "d", "r", "dtype", "y", "ts", "privacy")


def _matrix(label: str, value: object) -> np.ndarray:
    """A read-only finite float64 copy of a ``(d, r)`` ndarray with ``1 <= r <= d``."""
    if not isinstance(value, np.ndarray) or value.ndim != 2:
        fail_type(label, value, "a 2-D ndarray")
    rows, cols = value.shape
    if not 1 <= cols <= rows <= MAX_N_FEATURES:
        raise WireError("shape", f"{label} has shape {value.shape}, expected (d, r), 1 <= r <= d")
    out = np.array(value, dtype=np.float64)
    check_finite(label, out)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class RoundMessage:
    """The root's call for round ``round``, retained on ``<prefix>/<root>/round``.

    The server step of FedPower's Algorithm 3 (Guo et al., "FedPower: Privacy-Preserving
    Distributed Eigenspace Estimation", arXiv:2103.00704): the global basis the leaves
    start their ``p_k`` local power iterations from.

    Parameters
    ----------
    root : str
        The root's node id.
    epoch : str
        Random id (1-64 characters) of the root's state lineage.
    round : int
        1-based round number, ``< 2**63``.
    rank : int
        ``r``, columns of the basis and of the replies.
    basis : ndarray of shape (d, r) or None
        The global basis ``Z`` (orthonormal, ``1 <= r <= d``; stored as a read-only float64
        copy); None: start from `initial_basis` ``(seed)``.
    local_steps : int
        ``p_k``: local power iterations of this round, 1 .. `MAX_LOCAL_STEPS`.
    timeout_s : float
        Seconds the round stays open at most, > 0 (the root's clock decides; informational).
    seed : int, default 0
        Seed of ``Z_0`` (used when ``basis`` is None), ``0 <= seed < 2**63``.
    timestamp : float, default 0.0
        Wall-clock seconds of the round's start (``time.time()``); finite.
    deployment : str or None, default None
        The topology's name (1-128 characters).

    Raises
    ------
    WireError
        ``node_id`` (``root``), ``epoch``, ``seq`` (a round < 1), ``rank`` (< 1, or not the
        basis's columns), ``field_type`` (also ``local_steps`` out of range, ``timeout_s``
        <= 0, a ``basis`` that is not a 2-D ndarray), ``shape``, ``non_finite``.

    Equality is identity (``basis`` is an array).
    """

    root: str
    epoch: str
    round: int
    rank: int
    basis: np.ndarray | None
    local_steps: int
    timeout_s: float
    seed: int = 0
    timestamp: float = 0.0
    deployment: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", as_node_id("root", self.root))
        object.__setattr__(self, "epoch", as_epoch("epoch", self.epoch))
        object.__setattr__(self, "round", as_int("round", self.round, "seq", low=1))
        object.__setattr__(
            self, "rank", as_int("rank", self.rank, "rank", low=1, high=MAX_N_FEATURES + 1)
        )
        steps = as_int("steps", self.local_steps, "field_type", low=1, high=MAX_LOCAL_STEPS + 1)
        object.__setattr__(self, "local_steps", steps)
        timeout = as_float("timeout", self.timeout_s)
        if timeout <= 0:
            raise WireError("field_type", f"timeout is {timeout!r}, expected > 0")
        object.__setattr__(self, "timeout_s", timeout)
        object.__setattr__(self, "seed", as_int("seed", self.seed, "field_type"))
        object.__setattr__(self, "timestamp", as_float("ts", self.timestamp))
        object.__setattr__(self, "deployment", as_deployment("deployment", self.deployment))
        if self.basis is not None:
            basis = _matrix("basis", self.basis)
            if basis.shape[1] != self.rank:
                raise WireError("rank", f"basis has {basis.shape[1]} columns, rank is {self.rank}")
            object.__setattr__(self, "basis", basis)

    @property
    def n_features(self) -> int | None:
        """``d``, or None when the round carries no basis."""
        return None if self.basis is None else int(self.basis.shape[0])

    def start_basis(self, n_features: int) -> np.ndarray:
        """``Z`` of this round for readings of ``n_features`` values (`initial_basis` when
        the round carries none).

        Raises
        ------
        ValueError
            If the basis has another number of rows, or ``rank > n_features``.
        """
        if self.basis is None:
            if self.rank > n_features:
                raise ValueError(f"rank {self.rank} exceeds n_features {n_features}")
            # Lazily: the package edge_runtime.fedpower imports scipy.linalg (0.1-0.4 s,
            # ~25 MB), which an FPCA agent decoding the wire never needs.
            from edge_runtime.fedpower.power import initial_basis

            return initial_basis(self.seed, n_features, self.rank)
        if self.basis.shape[0] != n_features:
            raise ValueError(f"basis has {self.basis.shape[0]} rows, readings {n_features}")
        return self.basis


@dataclass(frozen=True, eq=False)
class ReplyMessage:
    """A leaf's reply to round ``round``, on ``<prefix>/<path>/reply`` (not retained).

    Parameters
    ----------
    node_id : str
        The replying leaf.
    epoch : str
        The leaf's state epoch.
    round : int
        The round answered (>= 1).
    y : ndarray of shape (d, r)
        The last local product ``Y``; finite, not orthonormal.
    n_samples : int
        Samples of the leaf's second-moment matrix, >= 1 (its weight).
    timestamp : float, default 0.0
        Wall-clock seconds of the reply (``time.time()``); finite.
    privacy : PrivacyParams or None, default None
        The guarantee of ``y`` (None: no noise).
    sources : mapping of str to int, default {}
        Last sequence number per sensor source the reply covers (as a snapshot's); stored
        as a read-only copy.
    deployment : str or None, default None
        The topology's name (1-128 characters).

    Raises
    ------
    WireError
        ``node_id``, ``epoch``, ``seq`` (a round < 1), ``field_type`` (also for a ``y``
        that is not a 2-D ndarray), ``shape`` (``y`` not ``(d, r)`` with
        ``1 <= r <= d <= MAX_N_FEATURES``), ``non_finite``, ``n_samples`` (< 1),
        ``source``.

    Equality is identity (``y`` is an array).
    """

    node_id: str
    epoch: str
    round: int
    y: np.ndarray
    n_samples: int
    timestamp: float = 0.0
    privacy: PrivacyParams | None = None
    sources: Mapping[str, int] = field(default_factory=dict)
    deployment: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_id", as_node_id("node_id", self.node_id))
        object.__setattr__(self, "epoch", as_epoch("epoch", self.epoch))
        object.__setattr__(self, "round", as_int("round", self.round, "seq", low=1))
        object.__setattr__(self, "y", _matrix("y", self.y))
        object.__setattr__(self, "n_samples", as_int("n", self.n_samples, "n_samples", low=1))
        object.__setattr__(self, "timestamp", as_float("ts", self.timestamp))
        check_privacy_type(self.privacy, PrivacyParams)
        object.__setattr__(self, "sources", as_seq_map("sources", self.sources))
        object.__setattr__(self, "deployment", as_deployment("deployment", self.deployment))

    @property
    def n_features(self) -> int:
        """``d``, rows of ``y``."""
        return int(self.y.shape[0])

    @property
    def rank(self) -> int:
        """``r``, columns of ``y``."""
        return int(self.y.shape[1])


def _to_wire(label: str, matrix: np.ndarray, dtype: str) -> bytes:
    wire = rounded_to(matrix, dtype)
    bad = int(np.count_nonzero(~np.isfinite(wire)))
    if bad:
        raise WireError("non_finite", f"{label} has {bad} entries that are not finite in {dtype}")
    return wire.tobytes(order="C")


def _from_wire(label: str, blob: object, d: int, r: int, dtype: object) -> np.ndarray:
    kind = as_wire_dtype(dtype, "float64 or float32", repr)
    out = widen_blob(as_blob(label, blob, d * r, kind, f"d={d}, r={r}"), kind, (d, r))
    check_finite(label, out)
    return out


def encode_round(
    msg: RoundMessage,
    *,
    dtype: Literal["float64", "float32"] = "float64",
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> bytes:
    """Encode a round as a msgpack map.

    Parameters
    ----------
    msg : RoundMessage
    dtype : {"float64", "float32"}, default "float64"
        Wire precision of the basis.
    max_bytes : int, default `DEFAULT_MAX_PAYLOAD_BYTES`
        Refuse to produce a payload above this many bytes.

    Returns
    -------
    bytes
        Keys ``v, root, epoch, round, d, r, dtype, basis, steps, timeout, ts, seed`` and
        ``dep`` when set; ``basis`` is ``d * r`` little-endian values of ``dtype`` in C order,
        ``d`` and ``basis`` nil without a basis. The basis is checked orthonormal after
        rounding to ``dtype`` (`ORTHONORMALITY_TOL` / `FLOAT32_ORTHONORMALITY_TOL`).
        ``v`` is `ROUND_VERSION`.

    Raises
    ------
    WireError
        ``field_type``, ``non_finite``, ``not_orthonormal``, ``too_large``.
    ValueError
        An unknown ``dtype`` or a bad ``max_bytes``.
    """
    check_dtype_option(dtype)
    check_message(msg, RoundMessage, "msg", max_bytes)
    basis = None
    if msg.basis is not None:
        basis = _to_wire("basis", msg.basis, dtype)
        check_orthonormal(widen_blob(basis, dtype, msg.basis.shape), tolerance_for(dtype))
    obj: dict[str, object] = {
        "v": ROUND_VERSION,
        "root": msg.root,
        "epoch": msg.epoch,
        "round": msg.round,
        "d": msg.n_features,
        "r": msg.rank,
        "dtype": dtype,
        "basis": basis,
        "steps": msg.local_steps,
        "timeout": msg.timeout_s,
        "ts": msg.timestamp,
        "seed": msg.seed,
    }
    return pack(optional_keys(obj, {}, msg.deployment), "round message", max_bytes)


def decode_round(payload: bytes, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> RoundMessage:
    """Decode and validate a round from `encode_round`.

    Reads schema versions `ROUND_VERSION` and the one before it (none before 1).

    Parameters
    ----------
    payload : bytes
        The root's retained ``<prefix>/<root>/round`` payload.
    max_bytes : int, default `DEFAULT_MAX_PAYLOAD_BYTES`
        Size limit in bytes, checked before parsing.

    Returns
    -------
    RoundMessage
        Its basis (if any) float64 ``(d, r)``, float32 payloads widened exactly.

    Raises
    ------
    WireError
        For anything else, never another exception for any bytes: ``too_large``,
        ``not_msgpack``, ``ext_type``, ``too_deep``, ``not_map``, ``version_newer`` (a newer
        schema version than this node reads: upgrade it), ``version`` (an older one),
        ``missing_field``, ``shape``, ``rank``, ``dtype``, ``byte_length``, ``non_finite``,
        ``not_orthonormal`` and those of `RoundMessage`.
    ValueError
        For an invalid ``max_bytes``.
    """
    obj = read_map(
        payload,
        unpack,
        what="round",
        keys=_ROUND_KEYS,
        schema=_ROUND_SCHEMA,
        max_bytes=max_bytes,
    )
    basis = None
    r = as_int("r", obj["r"], "rank", low=1, high=MAX_N_FEATURES + 1)
    if obj["basis"] is not None:
        d, r = as_dims(obj, min_rank=1)
        basis = _from_wire("basis", obj["basis"], d, r, obj["dtype"])
        check_orthonormal(basis, tolerance_for(obj["dtype"]))  # type: ignore[arg-type]
    return RoundMessage(
        root=obj["root"],  # type: ignore[arg-type]
        epoch=obj["epoch"],  # type: ignore[arg-type]
        round=obj["round"],  # type: ignore[arg-type]
        rank=r,
        basis=basis,
        local_steps=obj["steps"],  # type: ignore[arg-type]
        timeout_s=obj["timeout"],  # type: ignore[arg-type]
        seed=obj.get("seed", 0),  # type: ignore[arg-type]
        timestamp=obj["ts"],  # type: ignore[arg-type]
        deployment=obj.get("dep"),  # type: ignore[arg-type]
    )


def encode_reply(
    msg: ReplyMessage,
    *,
    dtype: Literal["float64", "float32"] = "float64",
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> bytes:
    """Encode a reply as a msgpack map.

    Parameters
    ----------
    msg : ReplyMessage
        The leaf's product ``Y`` of the round, its weight and guarantee.
    dtype : {"float64", "float32"}, default "float64"
        Wire precision of ``y``: ``"float32"`` halves the payload (values above the float32
        range are refused, not rounded to inf).
    max_bytes : int, default `DEFAULT_MAX_PAYLOAD_BYTES`
        Largest payload produced, in bytes (``too_large`` above).

    Returns
    -------
    bytes
        Keys ``v, node, epoch, round, n, d, r, dtype, y, ts, privacy`` and ``src``, ``dep``
        when set; ``y`` is ``d * r`` little-endian values of ``dtype`` in C order,
        ``privacy`` the map of a subspace message's or nil; ``v`` is `REPLY_VERSION`.

    Raises
    ------
    WireError
        ``field_type``, ``non_finite`` (also for values that overflow float32),
        ``too_large``.
    ValueError
        An unknown ``dtype`` or a bad ``max_bytes``.
    """
    check_dtype_option(dtype)
    check_message(msg, ReplyMessage, "msg", max_bytes)
    obj: dict[str, object] = {
        "v": REPLY_VERSION,
        "node": msg.node_id,
        "epoch": msg.epoch,
        "round": msg.round,
        "n": msg.n_samples,
        "d": msg.n_features,
        "r": msg.rank,
        "dtype": dtype,
        "y": _to_wire("y", msg.y, dtype),
        "ts": msg.timestamp,
        "privacy": privacy_to_wire(msg.privacy),
    }
    return pack(optional_keys(obj, msg.sources, msg.deployment), "reply message", max_bytes)


def decode_reply(payload: bytes, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> ReplyMessage:
    """Decode and validate a reply from `encode_reply`.

    Reads schema versions `REPLY_VERSION` and the one before it (none before 1).

    Parameters
    ----------
    payload : bytes
        A leaf's ``<prefix>/<path>/reply`` payload; at most ``max_bytes`` bytes are parsed
        (a longer payload is ``too_large`` unread).
    max_bytes : int, default `DEFAULT_MAX_PAYLOAD_BYTES`

    Returns
    -------
    ReplyMessage
        ``y`` float64 ``(d, r)``, float32 payloads widened exactly.

    Raises
    ------
    WireError
        For any payload that is not a valid reply (never another exception): the reasons
        of `decode_round` but ``not_orthonormal`` (``y`` is no basis), and ``privacy`` and
        the reasons of `ReplyMessage`.
    ValueError
        If ``max_bytes`` is not an int >= 1.
    """
    obj = read_map(
        payload,
        unpack,
        what="reply",
        keys=_REPLY_KEYS,
        schema=_REPLY_SCHEMA,
        max_bytes=max_bytes,
    )
    d, r = as_dims(obj, min_rank=1)
    y = _from_wire("y", obj["y"], d, r, obj["dtype"])
    return ReplyMessage(
        node_id=obj["node"],  # type: ignore[arg-type]
        epoch=obj["epoch"],  # type: ignore[arg-type]
        round=obj["round"],  # type: ignore[arg-type]
        y=y,
        n_samples=obj["n"],  # type: ignore[arg-type]
        timestamp=obj["ts"],  # type: ignore[arg-type]
        privacy=privacy_from_wire(obj["privacy"]),
        sources=obj.get("src", {}),  # type: ignore[arg-type]
        deployment=obj.get("dep"),  # type: ignore[arg-type]
    )
