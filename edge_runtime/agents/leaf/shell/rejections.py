"""A leaf's rejected readings: counted by reason and source, logged journal-friendly.

Every rejected reading is counted by reason (``rejects``) and by source
(``extra["rejected_by_source"]``: a local source's id; for an MQTT payload its ``src``, else
the sensor topic). Per reason the first `REJECT_LOG_BURST` rejections of a
`REJECT_LOG_INTERVAL_S` interval are logged as ``message_rejected`` lines (readings clipped
into ``valid_range``: ``readings_clipped``), the rest as one ``messages_rejected_suppressed``
(``readings_clipped_suppressed``) line per reason and interval with their count: a sensor
sending 50 bad readings per second costs ``burst + 1`` lines per reason per interval.
"""

from __future__ import annotations

import json
import time
from typing import Any

import msgpack

from edge_runtime.agents.common.core.reject_log import REJECT_LOG_INTERVAL_S, RejectLog

__all__ = ["REJECT_LOG_BURST", "REJECT_LOG_INTERVAL_S", "Rejections", "peek_source"]

REJECT_LOG_BURST = 3
"""Rejections of one reason logged individually per interval (then summarised)."""

_MAX_SOURCE_CHARS = 128  # longest source id counted under its own name (the wire's limit)


def peek_source(payload: bytes) -> str | None:
    """The ``src`` of a readings payload that failed validation, if it has a usable one
    (JSON or msgpack map with a short string ``src``); None otherwise. Best effort: the
    payload is already known to be at most the size limit."""
    try:
        text = payload.lstrip()
        obj = json.loads(text) if text[:1] == b"{" else msgpack.unpackb(payload, raw=False)
    except Exception:  # any undecodable payload simply has no source
        return None
    if isinstance(obj, dict):
        src = obj.get("src")
        if isinstance(src, str) and 0 < len(src) <= _MAX_SOURCE_CHARS:
            return src
    return None


class Rejections:
    """A leaf shell's rejected readings and messages: counted by reason and source in the
    core, logged journal-friendly (a part `LeafAgent` holds).

    Parameters
    ----------
    core : LeafCore
        Counts them (`LeafCore.count_reject`; ``rejects`` and ``clipped`` for the lines).
    reject_log : RejectLog
        Which lines are logged (`REJECT_LOG_BURST` per reason and interval).
    log : structlog logger
        Where the lines go (bound to the agent's node and role).
    sensor_topic : str
        The topic logged for a range event (``""`` for a leaf with a local source).
    """

    def __init__(self, core: Any, reject_log: RejectLog, log: Any, sensor_topic: str) -> None:
        self._core = core
        self._reject_log = reject_log
        self._log = log
        self._sensor_topic = sensor_topic

    def reject(self, reason: str, topic: str, detail: str, *, source: str | None = None) -> None:
        """Count one rejected reading or message by reason and by source (``source``, else
        ``topic``), and log it journal-friendly (`RejectLog`: the first
        `REJECT_LOG_BURST` per reason and interval, then one summary line)."""
        count_as = source or topic or "?"
        self._core.count_reject(reason, count_as)
        self._log_reject(reason, topic, count_as, detail)

    def log_range(self, reason: str, source: str, detail: str) -> None:
        """A core's `RangeEvent`: readings outside ``valid_range`` were rejected (already
        counted) or clipped; logged as `reject` logs."""
        self._log_reject(reason, self._sensor_topic, source, detail)

    def _log_reject(self, reason: str, topic: str, source: str, detail: str) -> None:
        log_it, suppressed = self._reject_log.allow(reason, time.monotonic())
        if not log_it:
            return
        extra = {"suppressed": suppressed} if suppressed else {}
        self._log.warning(
            "readings_clipped" if reason == "clipped" else "message_rejected",
            reason=reason,
            topic=topic,
            source=source,
            detail=detail,
            count=self._count(reason),
            **extra,
        )

    def _count(self, reason: str) -> int:
        return self._core.clipped if reason == "clipped" else self._core.rejects[reason]

    def log_suppressed(self, counts: dict[str, int]) -> None:
        """One summary line per reason whose lines `RejectLog` held back (``counts``)."""
        for reason, suppressed in counts.items():
            self._log.warning(
                "readings_clipped_suppressed"
                if reason == "clipped"
                else "messages_rejected_suppressed",
                reason=reason,
                suppressed=suppressed,
                interval_s=REJECT_LOG_INTERVAL_S,
                count=self._count(reason),
            )
