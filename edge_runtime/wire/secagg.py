"""Secure aggregation on the wire: the eight messages of one slot as msgpack maps.

`encode_secagg` and `decode_secagg` map the cores' frozen dataclasses of
`edge_runtime.secagg.messages` (Bonawitz et al., "Practical Secure Aggregation for
Privacy-Preserving Machine Learning", CCS 2017, Fig. 4) to bytes and back. Every payload is
one msgpack map with the keys every kind shares, ``v`` (`SECAGG_VERSION`), ``kind`` (the
tag of `SECAGG_KINDS`), ``slot`` (``0 <= slot < 2**64``, a msgpack uint64) and, when the
sender has one, ``dep`` (the topology's name, as on a subspace message), then the kind's
own keys:

=====================  ==================  ====================================================
message                ``kind``            keys (ids are str, ``bin(k)`` msgpack bin of k bytes)
=====================  ==================  ====================================================
`KeyAdvertisement`     ``keys``            ``leaf``, ``cpk`` bin(32), ``mpk`` bin(32)
`KeyRoster`            ``roster``          ``t``, ``ads``: [[leaf, cpk, mpk], ...]
`ShareUpload`          ``share_upload``    ``sender``, ``ct``: [[recipient, bin(156)], ...]
`ShareDelivery`        ``share_delivery``  ``recipient``, ``ct``: [[sender, bin(156)], ...]
`MaskedInput`          ``masked_input``    ``leaf``, ``m``, ``y`` bin(8 m)
`UnmaskRequest`        ``unmask_request``  ``survivors`` [ids], ``dropped`` [ids]
`UnmaskResponse`       ``unmask_response`` ``leaf``, ``b`` and ``sk``: [[owner, bin(70)], ...]
`SlotOutcome`          ``outcome``         ``m``, ``total`` bin(8 m) or nil, ``survivors``,
                                           ``dropped``, ``reason``
=====================  ==================  ====================================================

A roster's advertisements carry no slot of their own (the roster's, which the core
requires of each). ``cpk``/``mpk`` are the raw X25519 public keys of
`edge_runtime.secagg.masking.KEY_BYTES`; a ciphertext is
`edge_runtime.secagg.share_cipher.CIPHERTEXT_BYTES` long and a Shamir share
`edge_runtime.secagg.shares.SHARE_BYTES` (its index and value in range,
`edge_runtime.secagg.shares.share_index`); a vector (``y``, ``total``) is ``m``
little-endian uint64 words, residues mod ``2**bits`` (``m = d (d + 1) / 2`` for the
encoded Gram of ``d`` features), decoded as a read-only uint64 array. Unmask sets are
written sorted; ``b`` and ``sk`` keep the core's order.

Validation (same rules as every message of `edge_runtime.wire`: any bytes give a message or
a `WireError`, never another exception; the encoder runs the decoder's checks, so what it
writes always decodes, and ``decode_secagg(encode_secagg(m))`` equals ``m``, arrays
compared by value):

- ids are node ids as the topology accepts them (``topology.checks.check_node_id``: one
  MQTT topic level of 1 to 64 characters, no ``/ + #``, NUL or control character, not a
  reserved topic word), reason ``node_id``; a list of ids names each at most once, a leaf
  never lists itself among its peers, and survivors and dropped are disjoint (``node_id``);
- at most `MAX_SECAGG_LEAVES` ids, advertisements, ciphertexts or shares in one message
  (``too_large``); none where at least one is needed, fewer than two in a roster
  (``empty``);
- keys, ciphertexts and shares of exactly their length (``byte_length``); a share whose
  index or value is out of range (``field_type``);
- ``1 <= m <= MAX_SECAGG_ENTRIES`` (``shape``) and a vector of exactly ``8 m`` bytes
  (``byte_length``); a roster's ``t`` in ``2 .. len(ads)`` (``field_type``);
- the slot ``0 <= slot < 2**64`` (``seq``); an unknown ``kind``, or another kind than the
  caller expects on its topic (``expect=``) or another deployment (``deployment=``):
  ``field_type``; and the package's reasons for the payload itself (``too_large`` before
  parsing, ``not_msgpack``, ``ext_type``, ``not_map``, ``version``, ``version_newer``,
  ``missing_field``, ``field_type``).

What the wire does not check is the protocol: sorted rosters, ``t`` above half the roster,
distinct public keys, a cohort, who may send what when. The cores do
(`edge_runtime.secagg.leaf_round`, `edge_runtime.secagg.aggregator_round`) and raise
`edge_runtime.secagg.errors.SecAggError`. Nothing here imports ``cryptography`` or ``shamirs``.

Why `MAX_SECAGG_LEAVES` = 64: the protocol as built is all-pairs Bonawitz et al., so the
aggregator routes ``n (n - 1)`` ciphertexts a slot (4032 at 64, 0.7 MB) and recovers up to
``n`` secrets from ``t > n / 2`` shares each, ``O(t**2)``: 610 ms a secret at ``t = 33``
of 64 on this project's x86 build machine (5 ms at ``t = 5`` of 8), 39 s of combining
for a slot of 64 leaves, several times that on a Pi. 64 leaves on one aggregator is the
most one site can afford; a larger site needs SecAgg+ (Bell et al. 2020, ``O(log n)``
neighbours), not a larger limit.
`MAX_SECAGG_ENTRIES` is ``d (d + 1) / 2`` at `edge_runtime.wire.MAX_N_FEATURES`; in
practice the payload limit binds first: ``8 m + 100`` bytes within
`edge_runtime.wire.DEFAULT_MAX_PAYLOAD_BYTES` (4 MiB) is ``d <= 1023``.

Bytes on the wire of one slot at ``d = 48`` (``m = 1176``), slot 7, ids ``pi-00`` ...,
a 13-character deployment, every leaf surviving, ``t = n / 2 + 1``; the growth is exact
for these id lengths (``tests/test_wire_secagg.py`` runs the slot and checks this table)::

    message (sender)                n = 4    n = 8    grows as
    KeyAdvertisement (leaf)           125      125    2 x 32 B keys
    KeyRoster (agg.)                  348      648    75 n + 48
    ShareUpload (leaf)                558    1 218    165 (n - 1) + 63
    ShareDelivery (agg.)              563    1 223    165 (n - 1) + 68
    MaskedInput (leaf)              9 475    9 475    8 m + 67
    UnmaskRequest (agg.)               92      116    6 n + 68
    UnmaskResponse (leaf)             383      699    79 n + 67
    SlotOutcome (agg.)              9 515    9 539    8 m + 6 n + 83
    one leaf, sent + received      11 544   13 504

Today's private leaf publishes its snapshot instead (`encode_subspace`, d = 48, rank 10,
uncentred, with its guarantee), as float32: 2 228 bytes (the agents' default) or as
float64: 4 188 bytes; the float64 d x d Gram itself would be 18 432. A slot costs a leaf
about 5 (n = 4) to 6 (n = 8) float32 snapshots, in four exchanges instead of one publish;
81 % of it at n = 4 is the masked input, the upper triangle of the Gram as uint64, which
secure summation cannot shrink to a rank-r basis (the sum must be linear). The
aggregator receives ``n`` times a leaf's uploads and routes ``n (n - 1)`` ciphertexts.

Topics (`edge_runtime.topology.topics`, built by `edge_runtime.topology.Topology.secagg_topic`):
each node publishes under its own path ``<prefix>/<path>``, all QoS 1, the slot in the
payload only (one topic per kind and node keeps subscriptions and ACLs static); ``<leaf>``
is ``<prefix>/<site path>/<leaf id>``, ``<site>`` the aggregator's ``<prefix>/<site path>``::

    topic                           kind              retained  publisher   readers
    <leaf>/secagg/keys              KeyAdvertisement  yes       <leaf>      aggregator
    <site>/secagg/roster            KeyRoster         yes       aggregator  site's leaves
    <leaf>/secagg/shares            ShareUpload       no        <leaf>      aggregator only
    <site>/secagg/delivery/<id>     ShareDelivery     no        aggregator  leaf <id> only
    <leaf>/secagg/masked            MaskedInput       no        <leaf>      aggregator only
    <site>/secagg/unmask            UnmaskRequest     no        aggregator  site's leaves
    <leaf>/secagg/unmasked          UnmaskResponse    no        <leaf>      aggregator only
    <site>/secagg/outcome           SlotOutcome       yes       aggregator  site's leaves

The aggregator subscribes to ``<site>/+/secagg/+``. Keys, roster and outcome are retained so
that a node reconnecting mid-slot reads the current ones (their ``slot`` tells a stale one);
the per-phase messages are not, so a past slot's message is never replayed to a newcomer.
ACL (`edge_runtime.acl`): only ``<leaf>`` publishes under its path (the key authenticity the
protocol rests on: docs/secure_aggregation.md, "Key substitution"), only the aggregator
under its own; only the aggregator reads ``shares``, ``masked`` and ``unmasked`` (whoever
reads every masked input and unmask response learns the site's noisy sum; read-everything
users get ``topic deny`` lines for them), and a leaf reads only its own ``delivery`` (the
ciphertexts are encrypted and authenticated to it: defence in depth). The shells check that
a topic's ``<leaf>`` is the message's leaf id. ``secagg`` is a reserved id of the topology
(and of `edge_runtime.wire.secagg_fields`), so no node is named after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from edge_runtime.secagg import messages
from edge_runtime.secagg.masking import KEY_BYTES
from edge_runtime.secagg.messages import SecAggMessage
from edge_runtime.wire.fields import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_ID_CHARS,
    Schema,
    WireError,
    as_deployment,
    as_int,
    check_options,
    fail_type,
    pack,
    read_map,
    show,
    unpack,
)
from edge_runtime.wire.secagg_fields import (
    MAX_OUTCOME_REASON_CHARS,
    MAX_SECAGG_ENTRIES,
    MAX_SECAGG_LEAVES,
    WORD,
    as_entries,
    as_fixed_bytes,
    as_ids,
    as_leaf_id,
    as_list,
    as_pairs,
    as_reason,
    as_slot,
    as_vector,
    check_disjoint,
    check_unique,
)

__all__ = [
    "MAX_OUTCOME_REASON_CHARS",
    "MAX_SECAGG_ENTRIES",
    "MAX_SECAGG_LEAVES",
    "SECAGG_KINDS",
    "SECAGG_VERSION",
    "SecAggMessage",
    "decode_secagg",
    "encode_secagg",
]

SECAGG_VERSION = 1
"""Schema version ``v`` that `encode_secagg` writes; `decode_secagg` reads it and the one
before it (`edge_runtime.wire.fields.understood_versions`)."""

_SCHEMA = Schema("secure-aggregation message", SECAGG_VERSION)


SECAGG_KINDS: Mapping[str, type] = MappingProxyType(
    {
        "keys": messages.KeyAdvertisement,
        "roster": messages.KeyRoster,
        "share_upload": messages.ShareUpload,
        "share_delivery": messages.ShareDelivery,
        "masked_input": messages.MaskedInput,
        "unmask_request": messages.UnmaskRequest,
        "unmask_response": messages.UnmaskResponse,
        "outcome": messages.SlotOutcome,
    }
)
"""The ``kind`` tag of each message class (read-only)."""

TAG_OF: dict[type, str] = {cls: tag for tag, cls in SECAGG_KINDS.items()}

_COMMON_KEYS = ("v", "kind", "slot")
REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "keys": ("leaf", "cpk", "mpk"),
    "roster": ("t", "ads"),
    "share_upload": ("sender", "ct"),
    "share_delivery": ("recipient", "ct"),
    "masked_input": ("leaf", "m", "y"),
    "unmask_request": ("survivors", "dropped"),
    "unmask_response": ("leaf", "b", "sk"),
    "outcome": ("m", "total", "survivors", "dropped", "reason"),
}


# --------------------------------------------------------------------------- map -> message
def _from_wire(obj: dict[str, object], kind: str, slot: int) -> SecAggMessage:
    """The message of a decoded map whose common keys are checked (one path for both ways)."""
    if kind == "keys":
        return messages.KeyAdvertisement(
            slot,
            as_leaf_id("leaf", obj["leaf"]),
            as_fixed_bytes("cpk", obj["cpk"], KEY_BYTES),
            as_fixed_bytes("mpk", obj["mpk"], KEY_BYTES),
        )
    if kind == "roster":
        items = as_list("ads", obj["ads"], least=2)
        ads = []
        for i, item in enumerate(items):
            if not isinstance(item, list) or len(item) != 3:
                fail_type(f"ads[{i}]", item, "an array [leaf, cpk, mpk]")
            leaf = as_leaf_id(f"ads[{i}] leaf", item[0])
            cpk = as_fixed_bytes(f"ads[{leaf!r}] cpk", item[1], KEY_BYTES)
            mpk = as_fixed_bytes(f"ads[{leaf!r}] mpk", item[2], KEY_BYTES)
            ads.append(messages.KeyAdvertisement(slot, leaf, cpk, mpk))
        check_unique("ads", [ad.leaf_id for ad in ads])
        threshold = as_int("t", obj["t"], "field_type", low=2, high=len(ads) + 1)
        return messages.KeyRoster(slot, threshold, tuple(ads))
    if kind in ("share_upload", "share_delivery"):
        own = "sender" if kind == "share_upload" else "recipient"
        node = as_leaf_id(own, obj[own])
        ct = as_pairs("ct", obj["ct"], owner=(own, node), least=1, shares=False)
        cls = messages.ShareUpload if kind == "share_upload" else messages.ShareDelivery
        return cls(slot, node, ct)
    if kind == "masked_input":
        leaf = as_leaf_id("leaf", obj["leaf"])
        m = as_entries(obj["m"])
        return messages.MaskedInput(slot, leaf, as_vector("y", obj["y"], m))
    if kind == "unmask_request":
        survivors = as_ids("survivors", obj["survivors"], least=1)
        dropped = as_ids("dropped", obj["dropped"], least=0)
        check_disjoint(survivors, dropped, "unmask request")
        return messages.UnmaskRequest(slot, survivors, dropped)
    if kind == "unmask_response":
        leaf = as_leaf_id("leaf", obj["leaf"])
        b = as_pairs("b", obj["b"], owner=None, least=1, shares=True)
        sk = as_pairs("sk", obj["sk"], owner=None, least=0, shares=True)
        check_disjoint(frozenset(o for o, _ in b), frozenset(o for o, _ in sk), "unmask response")
        return messages.UnmaskResponse(slot, leaf, b, sk)
    # outcome
    survivors = as_ids("survivors", obj["survivors"], least=0)
    dropped = as_ids("dropped", obj["dropped"], least=0)
    check_disjoint(survivors, dropped, "slot outcome")
    raw_total = obj["total"]
    if raw_total is None:
        m = obj["m"]
        if isinstance(m, bool) or not isinstance(m, int) or m != 0:
            raise WireError(
                "shape", f"total is nil but m is {show(obj['m'])}, expected m = 0 (no sum)"
            )
        total = None
    else:
        m = as_entries(obj["m"])
        total = as_vector("total", raw_total, m)
        if not survivors:
            raise WireError("empty", "slot outcome releases a sum of no survivors")
    return messages.SlotOutcome(slot, total, survivors, dropped, as_reason(obj["reason"]))


# --------------------------------------------------------------------------- message -> map
def _pairs_to_wire(label: str, value: object) -> list[list[object]]:
    if not isinstance(value, tuple | list):
        fail_type(label, value, "a tuple of (id, bytes) pairs")
    out = []
    for i, pair in enumerate(value):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            fail_type(f"{label}[{i}]", pair, "an (id, bytes) pair")
        node, blob = pair
        out.append([node, bytes(blob) if isinstance(blob, bytearray) else blob])
    return out


def _ids_to_wire(label: str, value: object) -> list[object]:
    if not isinstance(value, frozenset | set | tuple | list):
        fail_type(label, value, "a frozenset of ids")
    for node in value:
        if not isinstance(node, str):
            fail_type(f"{label} id", node, "a str")
    return sorted(value)


def _bytes_to_wire(value: object) -> object:
    return bytes(value) if isinstance(value, bytearray) else value


def _vector_to_wire(label: str, value: object) -> tuple[int, bytes]:
    if not isinstance(value, np.ndarray) or value.dtype != np.uint64 or value.ndim != 1:
        detail = (
            f"{value.dtype} array of shape {value.shape}"
            if isinstance(value, np.ndarray)
            else type(value).__name__
        )
        raise WireError("field_type", f"{label} must be a 1-D uint64 ndarray, got {detail}")
    return int(value.shape[0]), value.astype(WORD, copy=False).tobytes()


def _to_wire(msg: SecAggMessage) -> dict[str, object]:
    """The kind's own keys of ``msg`` (unchecked beyond what building the map needs)."""
    if isinstance(msg, messages.KeyAdvertisement):
        return {
            "leaf": msg.leaf_id,
            "cpk": _bytes_to_wire(msg.cipher_public_key),
            "mpk": _bytes_to_wire(msg.mask_public_key),
        }
    if isinstance(msg, messages.KeyRoster):
        if not isinstance(msg.advertisements, tuple | list):
            fail_type("advertisements", msg.advertisements, "a tuple of KeyAdvertisement")
        ads = []
        for ad in msg.advertisements:
            if not isinstance(ad, messages.KeyAdvertisement):
                fail_type("advertisement", ad, "a KeyAdvertisement")
            if ad.slot != msg.slot:
                raise WireError(
                    "seq",
                    f"advertisement of {ad.leaf_id!r} is for slot {show(ad.slot)}, "
                    f"expected the roster's {msg.slot}",
                )
            cpk, mpk = _bytes_to_wire(ad.cipher_public_key), _bytes_to_wire(ad.mask_public_key)
            ads.append([ad.leaf_id, cpk, mpk])
        return {"t": msg.threshold, "ads": ads}
    if isinstance(msg, messages.ShareUpload):
        return {"sender": msg.sender, "ct": _pairs_to_wire("ciphertexts", msg.ciphertexts)}
    if isinstance(msg, messages.ShareDelivery):
        return {"recipient": msg.recipient, "ct": _pairs_to_wire("ciphertexts", msg.ciphertexts)}
    if isinstance(msg, messages.MaskedInput):
        m, y = _vector_to_wire("vector", msg.vector)
        return {"leaf": msg.leaf_id, "m": m, "y": y}
    if isinstance(msg, messages.UnmaskRequest):
        return {
            "survivors": _ids_to_wire("survivors", msg.survivors),
            "dropped": _ids_to_wire("dropped", msg.dropped),
        }
    if isinstance(msg, messages.UnmaskResponse):
        return {
            "leaf": msg.leaf_id,
            "b": _pairs_to_wire("self_mask_shares", msg.self_mask_shares),
            "sk": _pairs_to_wire("mask_key_shares", msg.mask_key_shares),
        }
    assert isinstance(msg, messages.SlotOutcome)
    m, total = (0, None) if msg.total is None else _vector_to_wire("total", msg.total)
    return {
        "m": m,
        "total": total,
        "survivors": _ids_to_wire("survivors", msg.survivors),
        "dropped": _ids_to_wire("dropped", msg.dropped),
        "reason": msg.reason,
    }


# --------------------------------------------------------------------------- public
def _check_expect(expect: object) -> tuple[type, ...] | None:
    if expect is None:
        return None
    kinds = expect if isinstance(expect, tuple) else (expect,)
    if not kinds or any(kind not in TAG_OF for kind in kinds):
        raise ValueError(
            f"expect must be None, a secure-aggregation message class or a tuple of them, "
            f"got {expect!r}"
        )
    return kinds  # type: ignore[return-value]


def _tag(value: object) -> str:
    if not isinstance(value, str):
        fail_type("kind", value, "a str")
    if value not in SECAGG_KINDS:
        raise WireError(
            "field_type",
            f"kind {show(value)} is not a secure-aggregation message, expected one of "
            + ", ".join(map(repr, SECAGG_KINDS)),
        )
    return value


def encode_secagg(
    msg: SecAggMessage,
    *,
    deployment: str | None = None,
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> bytes:
    """Encode a secure-aggregation message as a msgpack map of schema `SECAGG_VERSION`.

    Parameters
    ----------
    msg : KeyAdvertisement, KeyRoster, ShareUpload, ShareDelivery, MaskedInput, \
UnmaskRequest, UnmaskResponse or SlotOutcome
        A message of `edge_runtime.secagg.messages`; a vector is a 1-D uint64 ndarray.
    deployment : str or None, default None
        The topology's name (1-128 characters), written as ``dep``; None writes no ``dep``.
    max_bytes : int, default `DEFAULT_MAX_PAYLOAD_BYTES`
        Refuse to produce a payload that receivers with this limit would refuse.

    Returns
    -------
    bytes
        The map of the module docstring's table, checked exactly as `decode_secagg` checks
        it (what this writes always decodes, to a message equal to ``msg``).

    Raises
    ------
    WireError
        ``field_type`` if ``msg`` is not one of the eight messages (or a field has another
        type), ``too_large``, and the reasons of `decode_secagg` for an invalid field.
    ValueError
        For an invalid ``max_bytes``.
    """
    check_options(max_bytes)
    if type(msg) not in TAG_OF:
        fail_type("msg", msg, "a secure-aggregation message (edge_runtime.secagg.messages)")
    kind = TAG_OF[type(msg)]
    slot = as_slot(msg.slot)
    obj: dict[str, object] = {"v": SECAGG_VERSION, "kind": kind, "slot": slot, **_to_wire(msg)}
    if deployment is not None:
        obj["dep"] = as_deployment("deployment", deployment)
    _from_wire(obj, kind, slot)  # the decoder's checks: what is written always decodes
    return pack(obj, "secure-aggregation message", max_bytes)


def decode_secagg(
    payload: bytes,
    *,
    expect: type | tuple[type, ...] | None = None,
    deployment: str | None = None,
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> SecAggMessage:
    """Decode and validate a secure-aggregation message produced by `encode_secagg`.

    Reads schema versions `SECAGG_VERSION` and the one before it (none before 1).

    Parameters
    ----------
    payload : bytes
        The MQTT payload; refused unread when longer than ``max_bytes``.
    expect : class, tuple of classes or None, default None
        The message class(es) the caller's topic carries (e.g. `ShareDelivery` on a leaf's
        delivery topic); a payload of another kind is refused (``field_type``) before its
        fields are read. None accepts every kind.
    deployment : str or None, default None
        This node's topology name: a payload whose ``dep`` is another or absent is refused
        (``field_type``); secure aggregation is newer than ``dep``, so every sender in a
        named deployment writes it. None accepts any ``dep`` or none.
    max_bytes : int, default `DEFAULT_MAX_PAYLOAD_BYTES`

    Returns
    -------
    KeyAdvertisement, KeyRoster, ShareUpload, ShareDelivery, MaskedInput, UnmaskRequest, \
UnmaskResponse or SlotOutcome
        Keys, ciphertexts and shares as bytes, pairs as tuples, sets as frozensets, a
        vector as a read-only uint64 array of shape ``(m,)``.

    Raises
    ------
    WireError
        For anything but a valid message; never any other exception for any bytes. Reasons:
        ``too_large``, ``not_msgpack``, ``ext_type``, ``too_deep``, ``not_map``,
        ``version_newer``, ``version``, ``missing_field``, ``field_type``, ``seq`` (the
        slot), ``node_id``, ``empty``, ``byte_length``, ``shape`` (``m``).
    ValueError
        For an invalid ``max_bytes``, ``expect`` or ``deployment`` option.
    """
    kinds = _check_expect(expect)
    if deployment is not None and (
        not isinstance(deployment, str) or not 1 <= len(deployment) <= MAX_ID_CHARS
    ):
        raise ValueError(f"deployment must be None or 1-128 characters, got {deployment!r}")
    obj = read_map(
        payload,
        unpack,
        what="secure-aggregation",
        keys=_COMMON_KEYS,
        schema=_SCHEMA,
        max_bytes=max_bytes,
    )
    kind = _tag(obj["kind"])
    if kinds is not None and SECAGG_KINDS[kind] not in kinds:
        wanted = " or ".join(repr(TAG_OF[cls]) for cls in kinds)
        raise WireError("field_type", f"kind is {kind!r}, expected {wanted} on this topic")
    dep = as_deployment("dep", obj.get("dep"))
    if deployment is not None and dep != deployment:
        raise WireError(
            "field_type",
            f"dep is {show(dep)}, expected this node's deployment {deployment!r}",
        )
    slot = as_slot(obj["slot"])
    missing = [key for key in REQUIRED_KEYS[kind] if key not in obj]
    if missing:
        raise WireError(
            "missing_field",
            f"secure-aggregation message of kind {kind!r} lacks field(s) "
            + ", ".join(map(repr, missing)),
        )
    return _from_wire(obj, kind, slot)
