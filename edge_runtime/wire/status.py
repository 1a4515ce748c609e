"""Status documents: a node's JSON state, retained on ``fpca/<path>/status/detail``.

`StatusDetail` is what a node tells dashboards (Home Assistant, Node-RED, Telegraf) and the
`edge_runtime.monitor`: role, rank, coverage, sequence, epoch, rejects per reason, uptime,
free-form ``extra`` JSON data and its differential-privacy ledger (`PrivacyStatus`). It is
JSON, not msgpack, so those tools read it without our code; `encode_status` and
`decode_status` map it to compact UTF-8 JSON and back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from edge_runtime.wire.fields import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_N_FEATURES,
    SEQ_LIMIT,
    Schema,
    WireError,
    as_bool,
    as_count_map,
    as_epoch,
    as_float,
    as_int,
    as_node_id,
    as_text,
    check_message,
    dump_json,
    fail_type,
    load_json,
    read_map,
    show,
)
from edge_runtime.wire.guarantee import (
    PrivacyStatus,
    check_privacy_type,
    privacy_status_from_json,
)

__all__ = ["MAX_JSON_DEPTH", "STATUS_VERSION", "StatusDetail", "decode_status", "encode_status"]

STATUS_VERSION = 1
"""Schema version ``v`` that `encode_status` writes; `decode_status` reads it and the one
before it (`edge_runtime.wire.fields.understood_versions`)."""

_SCHEMA = Schema("status document", STATUS_VERSION)

MAX_JSON_DEPTH = 32
"""Deepest nesting of a status document's ``extra`` (levels below the ``extra`` map)."""

MAX_ROLE_CHARS = 64
MAX_REJECT_ENTRIES = 1000
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


@dataclass(frozen=True)
class StatusDetail:
    """A node's JSON status document, retained on ``fpca/<path>/status/detail``.

    JSON so that dashboards (Home Assistant, Node-RED, Telegraf) read it without our code;
    its keys are the field names plus ``"v"`` (the schema version, `STATUS_VERSION`).

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
        object.__setattr__(self, "node_id", as_node_id("node_id", self.node_id))
        object.__setattr__(self, "role", as_text("role", self.role, "role", MAX_ROLE_CHARS))
        object.__setattr__(self, "online", as_bool("online", self.online))
        object.__setattr__(self, "rank", as_int("rank", self.rank, "rank", high=MAX_N_FEATURES + 1))
        object.__setattr__(self, "n_samples", as_int("n_samples", self.n_samples, "n_samples"))
        object.__setattr__(self, "seq", as_int("seq", self.seq, "seq"))
        object.__setattr__(self, "epoch", as_epoch("epoch", self.epoch))
        rejects = as_count_map(
            "rejects",
            self.rejects,
            "rejects",
            max_entries=MAX_REJECT_ENTRIES,
            keys_are_node_ids=False,
        )
        object.__setattr__(self, "rejects", rejects)
        uptime = as_float("uptime_s", self.uptime_s)
        if uptime < 0:
            raise WireError("uptime", f"uptime_s is {uptime!r}, expected >= 0")
        object.__setattr__(self, "uptime_s", uptime)
        if not isinstance(self.extra, Mapping):
            fail_type("extra", self.extra, "a map")
        extra = _json_data(self.extra, 0)
        assert isinstance(extra, dict)
        object.__setattr__(self, "extra", MappingProxyType(extra))
        check_privacy_type(self.privacy, PrivacyStatus)


def encode_status(detail: StatusDetail, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> bytes:
    """Encode a status document as compact UTF-8 JSON.

    Parameters
    ----------
    detail : StatusDetail
    max_bytes : int, default `DEFAULT_MAX_PAYLOAD_BYTES`
        Refuse to produce a payload above this many bytes.

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
    ValueError
        For an invalid ``max_bytes``.
    """
    check_message(detail, StatusDetail, "detail", max_bytes)
    doc = {
        "v": STATUS_VERSION,
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
    return dump_json(doc, "status", max_bytes)


def decode_status(payload: bytes, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> StatusDetail:
    """Decode and validate a status document produced by `encode_status`.

    Reads schema versions `STATUS_VERSION` and the one before it (none before 1).

    Parameters
    ----------
    payload : bytes
        A node's retained ``fpca/<path>/status/detail`` document (UTF-8 JSON), refused
        unread when longer than ``max_bytes`` bytes.
    max_bytes : int, default `DEFAULT_MAX_PAYLOAD_BYTES`

    Returns
    -------
    StatusDetail
        Unknown keys are ignored; a document without ``privacy`` has ``privacy=None``.

    Raises
    ------
    WireError
        For anything but a valid document; never any other exception for any bytes.
        Reasons: ``too_large``, ``not_json``, ``too_deep``, ``not_map``, ``version_newer``
        (a newer schema version than this node reads: upgrade it), ``version`` (an older
        one), ``missing_field``, and those of `StatusDetail`.
    ValueError
        For invalid ``max_bytes``.
    """
    obj = read_map(
        payload,
        load_json,
        what="status",
        keys=_STATUS_KEYS,
        schema=_SCHEMA,
        max_bytes=max_bytes,
    )
    fields = {key: obj[key] for key in _STATUS_KEYS if key != "v"}
    return StatusDetail(**fields, privacy=privacy_status_from_json(obj.get("privacy")))


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
            raise WireError("extra", f"extra holds {show(value)}, not valid UTF-8 text") from None
        return str(value)
    if isinstance(value, int | np.integer):
        out = int(value)
        if not -SEQ_LIMIT <= out < 2 * SEQ_LIMIT:
            raise WireError("extra", f"extra holds int {show(out)}, expected one within 64 bits")
        return out
    if isinstance(value, float | np.floating):
        return as_float("extra number", value)
    if isinstance(value, Mapping):
        copy: dict[str, object] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                fail_type("extra key", key, "a str")
            copy[str(_json_data(key, depth))] = _json_data(item, depth + 1)
        return copy
    if isinstance(value, list | tuple):
        return [_json_data(item, depth + 1) for item in value]
    fail_type("extra value", value, "JSON data (null, bool, number, str, list or map)")
