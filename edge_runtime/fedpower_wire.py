"""FedPower's two messages on the wire: the root's round and a leaf's reply (msgpack).

=================  ==========================  =====================================
message            payload                     topic (see `edge_runtime.topology`)
=================  ==========================  =====================================
`RoundMessage`     msgpack map, schema v1      ``<prefix>/<root>/round`` (retained)
`ReplyMessage`     msgpack map, schema v1      ``<prefix>/<path>/reply`` (a leaf's)
=================  ==========================  =====================================

The same rules as every message of `edge_runtime.wire` (and its field checks are reused):
the size limit is checked before parsing, ext types are refused, every field has an exact
type, byte lengths must match the declared shape, numbers must be finite; any bytes give a
message or a `WireError` (reasons of `edge_runtime.wire.REASONS`; a bad round is ``"seq"``).
Matrices travel as ``d * r`` little-endian values of ``dtype`` (``"float32"`` by default
in the agents, as snapshots do; ``"float64"`` exact), C order, shape ``(d, r)``.

A round's ``basis`` is the global basis ``Z`` (orthonormal, checked with the tolerances of
a subspace); it is nil in the first round of a root that does not know ``d`` yet: the
leaves then start from ``Z_0 = orth(G)``, ``G`` a ``(d, r)`` standard normal matrix drawn
with ``numpy.random.default_rng(seed)`` (`initial_basis`), identical on every leaf.

A reply's ``y`` is the last local product ``Y = A_l Q`` (FedPower; `edge_runtime.fedpower.
local_iterations`): finite, of the round's shape, *not* orthonormal (never validated as a
subspace basis), with its leaf's sample count ``n >= 1`` (a leaf without readings does not
reply) and ``privacy`` (nil: the runtime's FedPower leaves publish without noise).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import msgpack
import numpy as np

from edge_runtime.fedpower.power import orthonormalise
from edge_runtime.wire import (
    _DTYPES,
    _SEQ_LIMIT,
    DEFAULT_MAX_PAYLOAD_BYTES,
    FLOAT32_ORTHONORMALITY_TOL,
    MAX_EPOCH_CHARS,
    MAX_ID_CHARS,
    MAX_N_FEATURES,
    ORTHONORMALITY_TOL,
    SCHEMA_VERSION,
    PrivacyParams,
    WireError,
    _check_options,
    _check_payload,
    _check_size,
    _fail_type,
    _float,
    _int,
    _node_id,
    _privacy_from_wire,
    _require,
    _seq_map,
    _text,
    _unpack,
)

__all__ = [
    "MAX_LOCAL_STEPS",
    "ReplyMessage",
    "RoundMessage",
    "decode_reply",
    "decode_round",
    "encode_reply",
    "encode_round",
    "initial_basis",
]

MAX_LOCAL_STEPS = 10_000
"""Most local iterations a round may ask for (a bound on a leaf's work per round)."""

_ROUND_KEYS = ("v", "root", "epoch", "round", "d", "r", "dtype", "basis", "steps", "timeout", "ts")
_REPLY_KEYS = ("v", "node", "epoch", "round", "n", "d", "r", "dtype", "y", "ts", "privacy")


def initial_basis(seed: int, n_features: int, rank: int) -> np.ndarray:
    """``Z_0``: the orthonormalised ``(n_features, rank)`` Gaussian matrix of ``seed``."""
    g = np.random.default_rng(seed).standard_normal((n_features, rank))
    return orthonormalise(g)


def _matrix(label: str, value: object, *, d: int | None = None, r: int | None = None) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.ndim != 2:
        _fail_type(label, value, "a 2-D ndarray")
    rows, cols = value.shape
    if not (1 <= cols <= rows <= MAX_N_FEATURES) or (d, r) not in ((None, None), (rows, cols)):
        raise WireError("shape", f"{label} has shape {value.shape}, expected (d, r), 1 <= r <= d")
    out = np.array(value, dtype=np.float64)
    bad = int(np.count_nonzero(~np.isfinite(out)))
    if bad:
        raise WireError("non_finite", f"{label} has {bad} non-finite entries (NaN or inf)")
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class RoundMessage:
    """The root's call for round ``round`` (FedPower, Algorithm 3), retained on
    ``<prefix>/<root>/round``.

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
        The global basis ``Z`` (orthonormal); None: start from `initial_basis` ``(seed)``.
    local_steps : int
        ``p_k``: local power iterations of this round, 1 .. `MAX_LOCAL_STEPS`.
    timeout_s : float
        Seconds the round stays open at most (the root's clock decides; informational).
    seed : int
        Seed of ``Z_0`` (used when ``basis`` is None).
    timestamp : float
        Wall-clock seconds of the round's start.
    deployment : str or None
        The topology's name.
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
        object.__setattr__(self, "root", _node_id("root", self.root))
        object.__setattr__(self, "epoch", _text("epoch", self.epoch, "epoch", MAX_EPOCH_CHARS))
        object.__setattr__(self, "round", _int("round", self.round, "seq", low=1))
        object.__setattr__(
            self, "rank", _int("rank", self.rank, "rank", low=1, high=MAX_N_FEATURES + 1)
        )
        steps = _int("steps", self.local_steps, "field_type", low=1, high=MAX_LOCAL_STEPS + 1)
        object.__setattr__(self, "local_steps", steps)
        timeout = _float("timeout", self.timeout_s)
        if timeout <= 0:
            raise WireError("field_type", f"timeout is {timeout!r}, expected > 0")
        object.__setattr__(self, "timeout_s", timeout)
        object.__setattr__(self, "seed", _int("seed", self.seed, "field_type"))
        object.__setattr__(self, "timestamp", _float("ts", self.timestamp))
        if self.deployment is not None:
            dep = _text("deployment", self.deployment, "field_type", MAX_ID_CHARS)
            object.__setattr__(self, "deployment", dep)
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
    timestamp : float
    privacy : PrivacyParams or None
        The guarantee of ``y`` (None: no noise).
    sources : mapping of str to int
        Last sequence number per sensor source the reply covers (as a snapshot's).
    deployment : str or None
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
        object.__setattr__(self, "node_id", _node_id("node_id", self.node_id))
        object.__setattr__(self, "epoch", _text("epoch", self.epoch, "epoch", MAX_EPOCH_CHARS))
        object.__setattr__(self, "round", _int("round", self.round, "seq", low=1))
        object.__setattr__(self, "y", _matrix("y", self.y))
        object.__setattr__(self, "n_samples", _int("n", self.n_samples, "n_samples", low=1))
        object.__setattr__(self, "timestamp", _float("ts", self.timestamp))
        if self.privacy is not None and not isinstance(self.privacy, PrivacyParams):
            _fail_type("privacy", self.privacy, "PrivacyParams or None")
        object.__setattr__(self, "sources", _seq_map("sources", self.sources))
        if self.deployment is not None:
            dep = _text("deployment", self.deployment, "field_type", MAX_ID_CHARS)
            object.__setattr__(self, "deployment", dep)

    @property
    def n_features(self) -> int:
        return int(self.y.shape[0])

    @property
    def rank(self) -> int:
        return int(self.y.shape[1])


def _to_wire(label: str, matrix: np.ndarray, dtype: str) -> bytes:
    with np.errstate(over="ignore", invalid="ignore"):
        wire = np.ascontiguousarray(matrix, dtype=_DTYPES[dtype])
    bad = int(np.count_nonzero(~np.isfinite(wire)))
    if bad:
        raise WireError("non_finite", f"{label} has {bad} entries that are not finite in {dtype}")
    return wire.tobytes(order="C")


def _from_wire(label: str, blob: object, d: int, r: int, dtype: object) -> np.ndarray:
    if not isinstance(dtype, str):
        _fail_type("dtype", dtype, "a str")
    if dtype not in _DTYPES:
        raise WireError("dtype", f"dtype {dtype!r} is not supported, expected float64 or float32")
    wire_dtype = np.dtype(_DTYPES[dtype])
    if not isinstance(blob, bytes):
        _fail_type(label, blob, "bytes")
    if len(blob) != d * r * wire_dtype.itemsize:
        raise WireError(
            "byte_length",
            f"{label} has {len(blob)} bytes, expected {d * r * wire_dtype.itemsize} "
            f"({d * r} {dtype} values for d={d}, r={r})",
        )
    out = np.frombuffer(blob, dtype=wire_dtype).reshape(d, r).astype(np.float64)
    bad = int(np.count_nonzero(~np.isfinite(out)))
    if bad:
        raise WireError("non_finite", f"{label} has {bad} non-finite entries (NaN or inf)")
    return out


def _shape(obj: Mapping[str, object]) -> tuple[int, int]:
    d = _int("d", obj["d"], "shape", low=1, high=MAX_N_FEATURES + 1)
    r = _int("r", obj["r"], "rank", low=1, high=_SEQ_LIMIT)
    if r > d:
        raise WireError("rank", f"rank r={r} exceeds n_features d={d}")
    return d, r


def encode_round(
    msg: RoundMessage,
    *,
    dtype: Literal["float64", "float32"] = "float64",
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> bytes:
    """Encode a round as a msgpack map (keys ``v, root, epoch, round, d, r, dtype, basis,
    steps, timeout, ts`` and ``seed``, ``dep`` when set; ``d`` and ``basis`` nil without a
    basis). The basis is checked orthonormal after rounding to ``dtype``.

    Raises
    ------
    WireError
        ``field_type``, ``non_finite``, ``not_orthonormal``, ``too_large``.
    ValueError
        An unknown ``dtype`` or a bad ``max_bytes``.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    _check_options(max_bytes)
    if not isinstance(msg, RoundMessage):
        _fail_type("msg", msg, "a RoundMessage")
    basis = None
    if msg.basis is not None:
        basis = _to_wire("basis", msg.basis, dtype)
        rounded = np.frombuffer(basis, dtype=_DTYPES[dtype]).reshape(msg.basis.shape)
        tol = ORTHONORMALITY_TOL if dtype == "float64" else FLOAT32_ORTHONORMALITY_TOL
        _check_orthonormal(rounded.astype(np.float64), tol)
    obj: dict[str, object] = {
        "v": SCHEMA_VERSION,
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
    if msg.deployment is not None:
        obj["dep"] = msg.deployment
    return _check_size(msgpack.packb(obj, use_bin_type=True), "round message", max_bytes)


def _check_orthonormal(basis: np.ndarray, tol: float) -> None:
    gram = basis.T @ basis
    gram[np.diag_indices(basis.shape[1])] -= 1.0
    error = float(np.abs(gram).max())
    if not error <= tol:
        raise WireError(
            "not_orthonormal",
            f"basis is not orthonormal: max |U^T U - I| = {error:.3g}, expected <= {tol:g}",
        )


def decode_round(payload: bytes, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> RoundMessage:
    """Decode and validate a round from `encode_round`; `WireError` for anything else."""
    _check_options(max_bytes)
    data = _check_payload(payload, "round", max_bytes)
    obj = _require(_unpack(data, "round"), _ROUND_KEYS, "round message")
    basis = None
    r = _int("r", obj["r"], "rank", low=1, high=MAX_N_FEATURES + 1)
    if obj["basis"] is not None:
        d, r = _shape(obj)
        basis = _from_wire("basis", obj["basis"], d, r, obj["dtype"])
        dtype = obj["dtype"]
        _check_orthonormal(
            basis, ORTHONORMALITY_TOL if dtype == "float64" else FLOAT32_ORTHONORMALITY_TOL
        )
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
    """Encode a reply as a msgpack map (keys ``v, node, epoch, round, n, d, r, dtype, y, ts,
    privacy`` and ``src``, ``dep`` when set).

    Raises
    ------
    WireError
        ``field_type``, ``non_finite`` (also for values that overflow float32),
        ``too_large``.
    ValueError
        An unknown ``dtype`` or a bad ``max_bytes``.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    _check_options(max_bytes)
    if not isinstance(msg, ReplyMessage):
        _fail_type("msg", msg, "a ReplyMessage")
    p = msg.privacy
    obj: dict[str, object] = {
        "v": SCHEMA_VERSION,
        "node": msg.node_id,
        "epoch": msg.epoch,
        "round": msg.round,
        "n": msg.n_samples,
        "d": msg.n_features,
        "r": msg.rank,
        "dtype": dtype,
        "y": _to_wire("y", msg.y, dtype),
        "ts": msg.timestamp,
        "privacy": None
        if p is None
        else {
            "epsilon": p.epsilon,
            "delta": p.delta,
            "clip_norm": p.clip_norm,
            "mechanism": p.mechanism,
            "neighbours": p.neighbours,
        },
    }
    if msg.sources:
        obj["src"] = dict(msg.sources)
    if msg.deployment is not None:
        obj["dep"] = msg.deployment
    return _check_size(msgpack.packb(obj, use_bin_type=True), "reply message", max_bytes)


def decode_reply(payload: bytes, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> ReplyMessage:
    """Decode and validate a reply from `encode_reply`; `WireError` for anything else."""
    _check_options(max_bytes)
    data = _check_payload(payload, "reply", max_bytes)
    obj = _require(_unpack(data, "reply"), _REPLY_KEYS, "reply message")
    d, r = _shape(obj)
    y = _from_wire("y", obj["y"], d, r, obj["dtype"])
    return ReplyMessage(
        node_id=obj["node"],  # type: ignore[arg-type]
        epoch=obj["epoch"],  # type: ignore[arg-type]
        round=obj["round"],  # type: ignore[arg-type]
        y=y,
        n_samples=obj["n"],  # type: ignore[arg-type]
        timestamp=obj["ts"],  # type: ignore[arg-type]
        privacy=_privacy_from_wire(obj["privacy"]),
        sources=obj.get("src", {}),  # type: ignore[arg-type]
        deployment=obj.get("dep"),  # type: ignore[arg-type]
    )
