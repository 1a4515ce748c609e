"""Confirmations: what a leaf has applied and made durable, per sensor source (JSON).

`ConfirmMessage` is retained by a leaf on ``fpca/<path>/confirm``: per source, the last
sequence number ingested (applied in order, exactly once), the last durable one (survives
a restart of the leaf) and the first missing one of a gap, with the leaf's epoch, process
session and connection count. A publisher of sequenced readings keeps each reading until it
is durable and re-sends only what was lost (`edge_runtime.delivery.LeafDelivery`).
`encode_confirm` and `decode_confirm` map it to compact UTF-8 JSON and back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from edge_runtime.wire.fields import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_CONFIRM_SOURCES,
    Schema,
    as_epoch,
    as_int,
    as_node_id,
    as_seq_map,
    check_message,
    dump_json,
    load_json,
    read_map,
)

__all__ = [
    "CONFIRM_VERSION",
    "MAX_CONFIRM_SOURCES",
    "ConfirmMessage",
    "decode_confirm",
    "encode_confirm",
]

CONFIRM_VERSION = 1
"""Schema version ``v`` that `encode_confirm` writes; `decode_confirm` reads it and the one
before it (`edge_runtime.wire.fields.understood_versions`)."""

_SCHEMA = Schema("confirmation", CONFIRM_VERSION)

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
        object.__setattr__(self, "node_id", as_node_id("node_id", self.node_id))
        object.__setattr__(self, "epoch", as_epoch("epoch", self.epoch))
        object.__setattr__(self, "session", as_epoch("session", self.session))
        object.__setattr__(self, "connection", as_int("connection", self.connection, "seq"))
        for name in ("ingested", "durable", "gaps"):
            object.__setattr__(self, name, as_seq_map(name, getattr(self, name)))


def encode_confirm(msg: ConfirmMessage, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> bytes:
    """Encode confirmations as compact UTF-8 JSON.

    Parameters
    ----------
    msg : ConfirmMessage
    max_bytes : int, default `DEFAULT_MAX_PAYLOAD_BYTES`
        Refuse to produce a payload above this many bytes.

    Returns
    -------
    bytes
        A JSON object with keys ``v, node_id, epoch, session, connection, ingested,
        durable, gaps`` (the last three maps of source to sequence number); ``v`` is
        `CONFIRM_VERSION`.

    Raises
    ------
    WireError
        ``field_type`` if ``msg`` is not a ConfirmMessage, ``too_large``.
    ValueError
        For an invalid ``max_bytes``.
    """
    check_message(msg, ConfirmMessage, "msg", max_bytes)
    doc = {
        "v": CONFIRM_VERSION,
        "node_id": msg.node_id,
        "epoch": msg.epoch,
        "session": msg.session,
        "connection": msg.connection,
        "ingested": dict(msg.ingested),
        "durable": dict(msg.durable),
        "gaps": dict(msg.gaps),
    }
    return dump_json(doc, "confirmation", max_bytes)


def decode_confirm(payload: bytes, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> ConfirmMessage:
    """Decode and validate confirmations produced by `encode_confirm`.

    Reads schema versions `CONFIRM_VERSION` and the one before it (none before 1).

    Parameters
    ----------
    payload : bytes
        A leaf's retained ``fpca/<path>/confirm`` payload (UTF-8 JSON).
    max_bytes : int, default `DEFAULT_MAX_PAYLOAD_BYTES`
        Longest payload read, in bytes; a longer one is refused before parsing.

    Returns
    -------
    ConfirmMessage
        Its three maps read-only; a sequence number of -1 means none yet.

    Raises
    ------
    WireError
        For anything but a valid document; never any other exception for any bytes.
        Reasons: ``too_large``, ``not_json``, ``too_deep``, ``not_map``, ``version_newer``
        (a newer schema version than this node reads: upgrade it), ``version`` (an older
        one), ``missing_field``, and those of `ConfirmMessage`.
    ValueError
        For an invalid ``max_bytes``.
    """
    obj = read_map(
        payload,
        load_json,
        what="confirmation",
        keys=_CONFIRM_KEYS,
        schema=_SCHEMA,
        max_bytes=max_bytes,
    )
    return ConfirmMessage(**{key: obj[key] for key in _CONFIRM_KEYS if key != "v"})
