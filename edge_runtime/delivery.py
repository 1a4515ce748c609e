"""What a publisher of sequenced readings keeps per leaf to lose nothing: no I/O, no clock.

The replay (`edge_runtime.replay.Replayer`) and the in-memory simulation
(`edge_runtime.simulation`) publish a leaf's readings ``0 .. sent-1`` in the map form
``{"src", "seq", "x"}`` and read the leaf's confirmations (`edge_runtime.wire.ConfirmMessage`).
`LeafDelivery` turns those confirmations into the two decisions a publisher makes: which
readings it may forget (``durable``) and which it must send again (`want_resend`). It re-sends
only what may have been lost — above ``ingested`` after the leaf reconnected or restarted
(a new ``(epoch, session, connection)``), from the first missing sequence of a gap the leaf
reports — never on a timer. `on_confirm` tells whether a confirmation confirmed readings
never confirmed before (progress: re-sends and repeated confirmations are not), and `resume`
continues an earlier publisher's source after what the leaf already ingested.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_runtime.wire import ConfirmMessage

__all__ = ["LeafDelivery"]


@dataclass
class LeafDelivery:
    """A publisher's record of one leaf's readings (memory O(1): nine integers).

    Attributes
    ----------
    sent : int
        Readings ``0 .. sent-1`` were published at least once.
    ingested, durable : int
        The last sequence the leaf reports applied, and safe across its restarts (-1: none).
    session : tuple of (str, str, int) or None
        ``(epoch, session, connection)`` of the leaf's last confirmation; the first one seen
        is the baseline (a retained confirmation, or the leaf's first).
    gap : int or None
        First missing sequence of the last gap re-sent for.
    resend_from : int or None
        Re-send ``resend_from .. sent-1`` when set (`take_resend`).
    confirmed, safe : int
        Highest sequence ever reported ingested, and durable (-1: none); only a
        confirmation that raises one of them is progress.
    skipped : int
        Readings ``0 .. skipped-1`` were confirmed before this publisher started (`resume`).
    """

    sent: int = 0
    ingested: int = -1
    durable: int = -1
    session: tuple[str, str, int] | None = None
    gap: int | None = None
    resend_from: int | None = None
    confirmed: int = -1
    safe: int = -1
    skipped: int = 0

    def unconfirmed(self) -> int:
        """Readings sent and not yet durable."""
        return self.sent - 1 - self.durable

    def want_resend(self, start: int) -> None:
        """Re-send from sequence ``start`` (never below what is durable)."""
        start = max(start, self.durable + 1, 0)
        if start < self.sent:
            self.resend_from = start if self.resend_from is None else min(self.resend_from, start)

    def reconnected(self) -> None:
        """The publisher's own connection was re-opened: what was in flight may be lost.

        Re-send above ``ingested`` now; and if no confirmation was seen yet, take the next
        one as news of a (re)connected leaf (re-send again above what it reports), since
        the leaf may subscribe again only after this re-send (a restarted broker)."""
        self.want_resend(self.ingested + 1)
        if self.session is None:
            self.session = ("", "", -1)  # no real confirmation has this session

    def take_resend(self) -> tuple[int, int] | None:
        """The range ``(first, end)`` to publish again now, or None; clears the request."""
        first, self.resend_from = self.resend_from, None
        if first is None or first >= self.sent:
            return None
        return first, self.sent

    def resume(self, limit: int) -> None:
        """Continue an earlier publisher of this source: readings up to what the leaf
        reported ingested count as sent (at most ``limit``), the next one sent is the one
        after. Call after the leaf's (retained) confirmation was taken, before sending."""
        self.sent = max(self.sent, min(limit, self.ingested + 1))
        self.skipped = self.sent
        self.durable = min(self.durable, self.sent - 1)

    def on_confirm(self, confirm: ConfirmMessage, source: str) -> bool:
        """Take the leaf's confirmation of the readings of ``source``.

        Returns
        -------
        bool
            True when it confirms a reading no earlier confirmation did (progress).
        """
        session = (confirm.epoch, confirm.session, confirm.connection)
        ingested = int(confirm.ingested.get(source, -1))
        if self.session is not None and session != self.session:
            self.want_resend(ingested + 1)  # the leaf reconnected or restarted
        self.session = session
        gap = confirm.gaps.get(source)
        if gap is not None and gap != self.gap:
            self.gap = gap
            self.want_resend(gap)  # a gap the leaf holds readings behind
        self.ingested = ingested
        durable = int(confirm.durable.get(source, -1))
        if durable > self.durable or ingested < self.durable:
            self.durable = min(durable, self.sent - 1) if self.sent else durable
        progress = ingested > self.confirmed or self.durable > self.safe
        self.confirmed = max(self.confirmed, ingested, self.durable)
        self.safe = max(self.safe, self.durable)
        return progress
