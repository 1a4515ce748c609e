"""Subspace messages: a node's snapshot ``(U, Sigma, n)`` as a msgpack map (`SUBSPACE_VERSION`).

`SubspaceMessage` is what a leaf or an aggregator publishes on ``fpca/<path>/subspace``
and the root on ``fpca/<root>/model``: the local summary of Grammenos et al., "Federated
Principal Component Analysis", NeurIPS 2020 (Alg. 1; the inputs of Merge_r in Alg. 2) with
its provenance, sources, privacy guarantee and deployment. `encode_subspace` and
`decode_subspace` map it to bytes and back, checking the arrays (finite, orthonormal basis,
non-negative non-increasing singular values); `with_deployment` stamps a topology's name
on an encoded snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import msgpack
import numpy as np

from edge_runtime.fpca.subspace import Subspace
from edge_runtime.wire.arrays import (
    FLOAT32_ORTHONORMALITY_TOL,
    ORTHONORMALITY_TOL,
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
    MAX_ID_CHARS,
    MAX_N_FEATURES,
    Schema,
    WireError,
    as_count_map,
    as_deployment,
    as_epoch,
    as_float,
    as_int,
    as_node_id,
    as_seq_map,
    as_text,
    check_message,
    check_payload,
    fail_type,
    optional_keys,
    pack,
    read_map,
    show,
    unpack,
)
from edge_runtime.wire.guarantee import (
    PrivacyParams,
    check_privacy_type,
    privacy_from_wire,
    privacy_to_wire,
)

__all__ = [
    "MAX_PROVENANCE_ENTRIES",
    "SINGULAR_VALUE_SLACK",
    "SUBSPACE_VERSION",
    "SubspaceMessage",
    "decode_subspace",
    "encode_subspace",
    "with_deployment",
]

SUBSPACE_VERSION = 1
"""Schema version ``v`` that `encode_subspace` writes; `decode_subspace` reads it and the
one before it (`edge_runtime.wire.fields.understood_versions`)."""

_SCHEMA = Schema("subspace message", SUBSPACE_VERSION)

SINGULAR_VALUE_SLACK = 1e-12
"""Relative slack (times the largest singular value) allowed when singular values increase."""

MAX_PROVENANCE_ENTRIES = 100_000
"""Most leaves a subspace message's provenance may list."""

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
        object.__setattr__(self, "node_id", as_node_id("node_id", self.node_id))
        object.__setattr__(self, "deployment", as_deployment("deployment", self.deployment))
        object.__setattr__(self, "epoch", as_epoch("epoch", self.epoch))
        object.__setattr__(self, "seq", as_int("seq", self.seq, "seq"))
        object.__setattr__(self, "sources", as_seq_map("sources", self.sources))
        if not isinstance(self.subspace, Subspace):
            fail_type("subspace", self.subspace, "a Subspace")
        as_int("n_samples", self.subspace.n_samples, "n_samples")
        as_int("n_features", self.subspace.n_features, "shape", low=1, high=MAX_N_FEATURES + 1)
        object.__setattr__(self, "timestamp", as_float("timestamp", self.timestamp))
        check_privacy_type(self.privacy, PrivacyParams)
        object.__setattr__(self, "provenance", _provenance("provenance", self.provenance))

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


def _provenance(label: str, value: object) -> Mapping[str, int]:
    """A read-only ``{leaf id: samples}`` copy, at most `MAX_PROVENANCE_ENTRIES` entries."""
    return as_count_map(
        label, value, "provenance", max_entries=MAX_PROVENANCE_ENTRIES, keys_are_node_ids=True
    )


def _check_arrays(basis: np.ndarray, sv: np.ndarray, tol: float) -> None:
    """Finite values, non-negative non-increasing ``sv``, ``max |U^T U - I| <= tol``."""
    check_finite("basis", basis)
    bad = int(np.count_nonzero(~np.isfinite(sv)))
    if bad:
        raise WireError("non_finite", f"singular values have {bad} non-finite entries")
    if sv.shape[0] == 0:
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
    check_orthonormal(basis, tol)


def encode_subspace(
    msg: SubspaceMessage,
    *,
    dtype: Literal["float64", "float32"] = "float64",
    tol: float = ORTHONORMALITY_TOL,
    tol_float32: float = FLOAT32_ORTHONORMALITY_TOL,
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> bytes:
    """Encode a snapshot as a msgpack map of schema version `SUBSPACE_VERSION`.

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
        ``dep`` (a str). ``v`` is `SUBSPACE_VERSION`.

    Raises
    ------
    WireError
        ``non_finite`` (also for values that overflow float32), ``singular_values``,
        ``not_orthonormal``, ``too_large``, ``field_type`` if ``msg`` is not a
        SubspaceMessage.
    ValueError
        For an unknown ``dtype`` or invalid ``tol``/``max_bytes``.
    """
    check_dtype_option(dtype)
    check_message(msg, SubspaceMessage, "msg", max_bytes, (tol, tol_float32))
    basis = rounded_to(msg.subspace.basis, dtype)
    sv = rounded_to(msg.subspace.singular_values, dtype)
    _check_arrays(
        basis.astype(np.float64), sv.astype(np.float64), tolerance_for(dtype, tol, tol_float32)
    )
    obj: dict[str, object] = {
        "v": SUBSPACE_VERSION,
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
        "privacy": privacy_to_wire(msg.privacy),
        "prov": dict(msg.provenance),
    }
    optional_keys(obj, msg.sources, msg.deployment)
    mean = msg.subspace.mean
    if mean is not None:
        wire_mean = rounded_to(mean, dtype)
        check_finite("mean", wire_mean.astype(np.float64))
        obj["mean"] = wire_mean.tobytes()
    return pack(obj, "subspace message", max_bytes)


def _mean_from_wire(blob: object, d: int, dtype: str) -> np.ndarray | None:
    """The optional ``mean`` field: absent or nil for uncentred summaries."""
    if blob is None:
        return None
    mean = widen_blob(as_blob("mean", blob, d, dtype, f"d={d}", "bytes or nil"), dtype, (d,))
    check_finite("mean", mean)
    return mean


def decode_subspace(
    payload: bytes,
    *,
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    tol: float = ORTHONORMALITY_TOL,
    tol_float32: float = FLOAT32_ORTHONORMALITY_TOL,
) -> SubspaceMessage:
    """Decode and validate a subspace message produced by `encode_subspace`.

    Reads schema versions `SUBSPACE_VERSION` and the one before it (none before 1): a
    rolling upgrade mixes nodes of two consecutive releases.

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
        ``too_large``, ``not_msgpack``, ``ext_type``, ``too_deep``, ``not_map``,
        ``version_newer`` (a newer schema version than this node reads: upgrade it),
        ``version`` (an older one than it reads), ``missing_field``, ``field_type``,
        ``node_id``, ``epoch``, ``seq``, ``n_samples``, ``shape``, ``rank``, ``dtype``,
        ``byte_length``, ``non_finite``, ``not_orthonormal``, ``singular_values``,
        ``privacy``, ``provenance``.
    ValueError
        For invalid ``max_bytes`` or tolerances.
    """
    obj = read_map(
        payload,
        unpack,
        what="subspace",
        keys=_SUBSPACE_KEYS,
        schema=_SCHEMA,
        max_bytes=max_bytes,
        tols=(tol, tol_float32),
    )
    node_id = as_node_id("node", obj["node"])
    epoch = as_epoch("epoch", obj["epoch"])
    seq = as_int("seq", obj["seq"], "seq")
    n_samples = as_int("n", obj["n"], "n_samples")
    d, r = as_dims(obj, min_rank=0)
    dtype = as_wire_dtype(obj["dtype"], "'float64' or 'float32'", show)
    where = f"d={d}, r={r}"
    raw_basis = as_blob("basis", obj["basis"], d * r, dtype, where)
    raw_sv = as_blob("sv", obj["sv"], r, dtype, where)
    timestamp = as_float("ts", obj["ts"])
    privacy = privacy_from_wire(obj["privacy"])
    provenance = _provenance("prov", obj["prov"])
    basis = widen_blob(raw_basis, dtype, (d, r))
    sv = widen_blob(raw_sv, dtype, (r,))
    _check_arrays(basis, sv, tolerance_for(dtype, tol, tol_float32))
    mean = _mean_from_wire(obj.get("mean"), d, dtype)
    deployment = as_deployment("dep", obj.get("dep"))
    return SubspaceMessage(
        node_id=node_id,
        epoch=epoch,
        seq=seq,
        subspace=Subspace(basis, sv, n_samples, mean),
        timestamp=timestamp,
        privacy=privacy,
        provenance=provenance,
        sources=obj.get("src", {}),  # type: ignore[arg-type]
        deployment=deployment,
    )


def with_deployment(payload: bytes, deployment: str) -> bytes:
    """``payload``, a subspace message from `encode_subspace`, with its ``dep`` key set to
    ``deployment`` (returned unchanged when it already is): how an agent stamps its
    topology's name on every snapshot it publishes.

    Only the map is read (no field is validated) and the other keys are written back as
    they were, so the payload decodes exactly as before but for ``dep``.

    Parameters
    ----------
    payload : bytes
        An encoded subspace message (no size limit is applied: it is the agent's own).
    deployment : str
        The topology's name, 1-128 characters.

    Returns
    -------
    bytes
        The re-packed msgpack map (``payload`` itself when ``dep`` already matches).

    Raises
    ------
    WireError
        ``field_type`` for a ``deployment`` that is not 1-128 characters of text; the
        decoder's reasons for a ``payload`` that is not a msgpack map.
    """
    deployment = as_text("deployment", deployment, "field_type", MAX_ID_CHARS)
    obj = unpack(check_payload(payload, "subspace", len(payload) + 1), "subspace")
    if not isinstance(obj, dict):
        raise WireError("not_map", f"subspace message is a {type(obj).__name__}, expected a map")
    if obj.get("dep") == deployment:
        return payload
    obj["dep"] = deployment
    return msgpack.packb(obj, use_bin_type=True)
