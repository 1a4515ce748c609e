"""The fields of the secure-aggregation messages on the wire: each checked on decode (and,
through the decoder, on encode) and refused with a one-line `WireError` naming the field,
its value and what was expected. `edge_runtime.wire.secagg` builds the messages from them;
its docstring lists the rules and why `MAX_SECAGG_LEAVES` is 64.
"""

from __future__ import annotations

import re

import numpy as np

from edge_runtime.secagg.masking import triangle_size
from edge_runtime.secagg.share_cipher import CIPHERTEXT_BYTES
from edge_runtime.secagg.shares import SHARE_BYTES, share_index
from edge_runtime.wire.fields import (
    MAX_N_FEATURES,
    WireError,
    as_int,
    as_node_id,
    fail_type,
    show,
)

__all__ = [
    "MAX_LEAF_ID_CHARS",
    "MAX_OUTCOME_REASON_CHARS",
    "MAX_SECAGG_ENTRIES",
    "MAX_SECAGG_LEAVES",
    "RESERVED_IDS",
    "WORD",
    "as_entries",
    "as_fixed_bytes",
    "as_ids",
    "as_leaf_id",
    "as_list",
    "as_pairs",
    "as_reason",
    "as_slot",
    "as_vector",
    "check_disjoint",
    "check_unique",
]

MAX_SECAGG_LEAVES = 64
"""Most leaves of one site in secure aggregation: ids, advertisements, ciphertexts or shares
one message may list (the module docstring says why 64)."""

MAX_SECAGG_ENTRIES = triangle_size(MAX_N_FEATURES)
"""Most entries ``m`` of a masked input or a sum: ``d (d + 1) / 2`` at ``MAX_N_FEATURES``."""

MAX_OUTCOME_REASON_CHARS = 1000
"""Longest ``reason`` of a `SlotOutcome`, in characters."""

_SLOT_LIMIT = 1 << 64
WORD = np.dtype("<u8")

# The topology's node-id rule (`edge_runtime.topology.checks.check_node_id`), mirrored here:
# the topology imports the wire, so the wire cannot import it back. A test checks they agree.
MAX_LEAF_ID_CHARS = 64
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
RESERVED_IDS = frozenset(
    {"subspace", "status", "model", "confirm", "scores", "round", "reply", "secagg"}
)


def as_leaf_id(label: str, value: object) -> str:
    """A node id as the topology accepts it (reason ``node_id``)."""
    text = as_node_id(label, value)
    if len(text) > MAX_LEAF_ID_CHARS:
        raise WireError(
            "node_id",
            f"{label} {show(text)} has {len(text)} characters, expected 1 to "
            f"{MAX_LEAF_ID_CHARS} (the topology's limit)",
        )
    if _CONTROL_CHARS.search(text):
        raise WireError("node_id", f"{label} {show(text)} contains a control character")
    if text in RESERVED_IDS:
        raise WireError(
            "node_id", f"{label} {text!r} is reserved for topic names, expected a node id"
        )
    return text


def as_slot(value: object) -> int:
    """A slot number, an int with ``0 <= slot < 2**64`` (``field_type``, ``seq``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        fail_type("slot", value, "an int")
    if not 0 <= value < _SLOT_LIMIT:
        raise WireError("seq", f"slot is {show(value)}, expected 0 <= slot < 2**64")
    return int(value)


def as_fixed_bytes(label: str, value: object, size: int) -> bytes:
    """A bytes field of exactly ``size`` bytes (``field_type``, ``byte_length``)."""
    if not isinstance(value, bytes):
        fail_type(label, value, f"bytes ({size} long)")
    if len(value) != size:
        raise WireError("byte_length", f"{label} has {len(value)} bytes, expected {size}")
    return value


def _share(label: str, value: object) -> bytes:
    """A Shamir share of `SHARE_BYTES` bytes whose index and value are in range."""
    share = as_fixed_bytes(label, value, SHARE_BYTES)
    try:
        share_index(share)
    except ValueError:
        raise WireError(
            "field_type", f"{label} has a share index or value out of range, expected a share"
        ) from None
    return share


def as_list(label: str, value: object, *, least: int) -> list[object]:
    """A msgpack array of ``least`` to `MAX_SECAGG_LEAVES` items."""
    if not isinstance(value, list):
        fail_type(label, value, "an array")
    if len(value) > MAX_SECAGG_LEAVES:
        raise WireError(
            "too_large",
            f"{label} has {len(value)} entries, expected at most {MAX_SECAGG_LEAVES} "
            "(MAX_SECAGG_LEAVES)",
        )
    if len(value) < least:
        raise WireError("empty", f"{label} has {len(value)} entries, expected at least {least}")
    return value


def check_unique(label: str, ids: list[str]) -> None:
    """``node_id`` when ``ids`` names one node twice."""
    seen: set[str] = set()
    for node in ids:
        if node in seen:
            raise WireError("node_id", f"{label} names {node!r} twice, expected each at most once")
        seen.add(node)


def as_ids(label: str, value: object, *, least: int) -> frozenset[str]:
    """A set of distinct node ids (an array on the wire)."""
    items = as_list(label, value, least=least)
    ids = [as_leaf_id(f"{label}[{i}]", item) for i, item in enumerate(items)]
    check_unique(label, ids)
    return frozenset(ids)


def as_pairs(
    label: str,
    value: object,
    *,
    owner: tuple[str, str] | None,
    least: int,
    shares: bool,
) -> tuple[tuple[str, bytes], ...]:
    """``[[id, bytes], ...]``: distinct ids (never ``owner``, a ``(field, id)``), each with
    a Shamir share (``shares``) or a share ciphertext."""
    items = as_list(label, value, least=least)
    out: list[tuple[str, bytes]] = []
    for i, item in enumerate(items):
        if not isinstance(item, list) or len(item) != 2:
            fail_type(f"{label}[{i}]", item, "an array [id, bytes]")
        node = as_leaf_id(f"{label}[{i}] id", item[0])
        if owner is not None and node == owner[1]:
            raise WireError("node_id", f"{label}[{i}] names {node!r}, the {owner[0]} itself")
        where = f"{label}[{node!r}]"
        blob = (
            _share(where, item[1])
            if shares
            else as_fixed_bytes(where, item[1], CIPHERTEXT_BYTES)
        )
        out.append((node, blob))
    check_unique(label, [node for node, _ in out])
    return tuple(out)


def check_disjoint(survivors: frozenset[str], dropped: frozenset[str], what: str) -> None:
    """``node_id`` when a leaf is both survivor and dropped, ``too_large`` when they name
    more than `MAX_SECAGG_LEAVES` leaves together (``what`` names the message)."""
    both = sorted(survivors & dropped)
    if both:
        raise WireError("node_id", f"{what}: {both[0]!r} is named both survivor and dropped")
    total = len(survivors) + len(dropped)
    if total > MAX_SECAGG_LEAVES:
        raise WireError(
            "too_large",
            f"{what} names {total} leaves (survivors and dropped), expected at most "
            f"{MAX_SECAGG_LEAVES}",
        )


def as_entries(value: object) -> int:
    """The vector length ``m``: an int with ``1 <= m <= MAX_SECAGG_ENTRIES`` (``shape``)."""
    return as_int("m", value, "shape", low=1, high=MAX_SECAGG_ENTRIES + 1)


def as_vector(label: str, value: object, m: int) -> np.ndarray:
    """``m`` little-endian uint64 words as a read-only uint64 array."""
    if not isinstance(value, bytes):
        fail_type(label, value, "bytes")
    size = m * WORD.itemsize
    if len(value) != size:
        raise WireError(
            "byte_length",
            f"{label} has {len(value)} bytes, expected {size} ({m} uint64 words for m={m})",
        )
    vector = np.frombuffer(value, dtype=WORD).astype(np.uint64)
    vector.setflags(write=False)
    return vector


def as_reason(value: object) -> str:
    """An outcome's reason: a UTF-8 str of at most `MAX_OUTCOME_REASON_CHARS` characters."""
    if not isinstance(value, str):
        fail_type("reason", value, "a str")
    if len(value) > MAX_OUTCOME_REASON_CHARS:
        raise WireError(
            "too_large",
            f"reason has {len(value)} characters, expected at most {MAX_OUTCOME_REASON_CHARS}",
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise WireError("field_type", f"reason {show(value)} is not valid UTF-8 text") from None
    return str(value)
