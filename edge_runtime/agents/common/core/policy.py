"""Flow-control policies: when a node publishes its snapshot, its status and its confirmations.

Pure decisions, no I/O and no clock: every method takes the current time ``now`` (seconds,
any monotonic origin) as an argument, so each rule is unit-tested with a virtual clock.

Why these rules: a federation exists to send small subspaces instead of readings,
so a node publishes when what it would publish has *changed enough to matter*, never merely
because time passed or a reading arrived:

- `PublishPolicy` — a deadband on the subspace (largest principal angle between the leading
  ``rank`` directions, relative change of the normalised spectrum ``sigma_i / sqrt(n)``,
  relative growth of the sample count), rate-limited by ``min_interval_s``, with a guaranteed
  publish at least every ``max_interval_s`` while anything is unpublished and once the input
  has been idle for ``idle_s`` (the trailing publish, so the root ends up covering every
  reading). Latency bound: a change reaches the parent within ``max_interval_s`` (plus the
  time to publish); see the README's "Flow control" for the tree-wide bound.
- `StatusPolicy` — JSON status documents when their *health* fields change (rate-limited) and as
  a slow heartbeat; progress counters ride along, they do not trigger.
- `ConfirmPolicy` — a leaf's reading confirmations when what is durable changed or a gap
  opened, at most once per interval, with a trailing one: O(1) messages per leaf per interval
  whatever the reading rate.
- `EchoTracker` — a published snapshot that does not come back from the broker is reported
  undelivered only after a bound that follows the load (echo latencies, PUBACK round trips
  and event-loop lag observed), counted from its PUBACK and from the last reconnection, or
  at once when a later snapshot of the same lineage, handed over on the same connection
  after it was acknowledged, comes back first (MQTT delivers one topic in order). A
  publish that failed, or one superseded across a reconnection, is never reported.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from edge_runtime.fpca import Subspace, principal_angles

__all__ = [
    "AGGREGATOR_PUBLISH",
    "LEAF_PUBLISH",
    "ConfirmPolicy",
    "EchoTracker",
    "PublishPolicy",
    "StatusPolicy",
    "largest_angle",
    "largest_angle_orthonormal",
    "subspace_change",
]


def largest_angle(a: np.ndarray, b: np.ndarray) -> float:
    """Largest principal angle, radians, between the spans of ``a`` and ``b``.

    Parameters
    ----------
    a, b : ndarray of shape (n_features, k), float64
        Bases of the two spans (compare leading directions of equal count).

    Returns
    -------
    float
        In ``[0, pi/2]``; 0 when either has no column (`edge_runtime.fpca.principal_angles`).
    """
    angles = principal_angles(a, b)
    return float(angles.max()) if angles.size else 0.0


def largest_angle_orthonormal(a: np.ndarray, b: np.ndarray) -> float:
    """`largest_angle` for orthonormal ``a`` and ``b`` of the same shape ``(n_features, k)``
    (a subspace's basis): ``arcsin`` of the largest singular value of ``(I - a a^T) b``, the
    sines of the principal angles (Bjorck & Golub, Math. Comp. 27, 1973). One SVD of a
    ``(n_features, k)`` matrix instead of the general form's four, what the deadband pays
    per evaluation."""
    if a.shape[1] == 0:
        return 0.0
    sines = np.linalg.svd(b - a @ (a.T @ b), compute_uv=False)
    return float(np.arcsin(min(float(sines[0]), 1.0)))


def subspace_change(
    previous: Subspace | None, current: Subspace, rank: int
) -> tuple[float, float, float]:
    """How far ``current`` moved from ``previous``: (angle, spectrum change, growth).

    ``angle``: largest principal angle (radians) between the leading ``rank`` directions.
    ``spectrum change``: ``max_i |s'_i - s_i| / s_0`` of the normalised singular values
    ``s = sigma / sqrt(n)`` (the square roots of the covariance eigenvalues, so a stationary
    stream does not "move" just by growing). ``growth``: ``n' / n - 1`` of the sample counts.
    Against no previous snapshot (or one of another shape) everything is infinite.
    """
    if previous is None or previous.n_samples == 0 or previous.basis.shape != current.basis.shape:
        return math.inf, math.inf, math.inf
    k = min(rank, previous.rank, current.rank)
    angle = largest_angle_orthonormal(previous.basis[:, :k], current.basis[:, :k])
    s_old = previous.singular_values[:k] / math.sqrt(previous.n_samples)
    s_new = current.singular_values[:k] / math.sqrt(max(current.n_samples, 1))
    top = float(s_old[0]) if k and s_old[0] > 0 else 0.0
    spectrum = 0.0 if k == 0 else float(np.abs(s_new - s_old).max())
    spectrum = spectrum / top if top > 0 else (0.0 if spectrum == 0 else math.inf)
    growth = current.n_samples / previous.n_samples - 1.0
    return angle, spectrum, growth


@dataclass(frozen=True)
class PublishPolicy:
    """When a node publishes its snapshot: a deadband, a rate limit, a guarantee.

    Parameters
    ----------
    min_interval_s : float
        Least time between two publishes, seconds (the rate limit; nothing bypasses it).
    max_interval_s : float
        While anything is unpublished, publish at least this often, seconds: the bound on how
        long a change can wait. >= ``min_interval_s``.
    idle_s : float
        Input idle for this long with something unpublished: publish (the trailing publish that
        makes the root cover everything once a stream pauses or ends), seconds.
    angle_rad : float
        Deadband on the largest principal angle between the leading ``rank`` directions of the
        candidate and the last published snapshot, radians.
    spectrum_change : float
        Deadband on the relative change of the normalised singular values (`subspace_change`).
    growth : float
        Deadband on the relative growth of the sample count (1.0: the count doubled). Keeps
        the number of publishes of a stationary stream logarithmic in its length.

    Notes
    -----
    `decide` returns the reason of a publish — ``"first"``, ``"moved"``, ``"max_interval"``,
    ``"idle"`` — or None. The defaults (`LEAF_PUBLISH`, `AGGREGATOR_PUBLISH`) are measured in
    ``benchmarks/fleet/scaling.py`` (REPORT.md, section "Fleet").
    """

    min_interval_s: float
    max_interval_s: float
    idle_s: float
    angle_rad: float = 0.05
    spectrum_change: float = 0.10
    growth: float = 1.0

    def __post_init__(self) -> None:
        for name in ("min_interval_s", "max_interval_s", "idle_s", "angle_rad"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        for name in ("spectrum_change", "growth"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if self.max_interval_s < self.min_interval_s:
            raise ValueError(
                f"max_interval_s ({self.max_interval_s}) must be >= min_interval_s "
                f"({self.min_interval_s})"
            )

    def may_publish(self, now: float, last_publish: float) -> bool:
        """Whether the rate limit allows a publish at ``now``."""
        return now >= last_publish + self.min_interval_s  # the form next_check computes

    def moved(self, previous: Subspace | None, current: Subspace, rank: int) -> bool:
        """Whether ``current`` is outside the deadband around ``previous``."""
        angle, spectrum, growth = subspace_change(previous, current, rank)
        return angle > self.angle_rad or spectrum > self.spectrum_change or growth >= self.growth

    def decide(
        self,
        now: float,
        *,
        last_publish: float,
        last_input: float,
        unpublished_since: float,
        moved: bool,
        first: bool = False,
        idle_s: float | None = None,
    ) -> str | None:
        """The reason to publish now, or None.

        Parameters
        ----------
        now, last_publish, last_input : float
            Seconds: now, the last publish, the last input (reading or child snapshot).
        unpublished_since : float
            When the oldest unpublished change arrived (``inf`` when nothing is unpublished).
        moved : bool
            The candidate is outside the deadband (`moved`).
        first : bool
            Nothing has been published yet.
        idle_s : float, optional
            The idle time to apply, seconds (default ``self.idle_s``; a leaf stretches it to
            its readings' usual gap, `LeafCore.idle_s`).
        """
        if math.isinf(unpublished_since) or not self.may_publish(now, last_publish):
            return None
        if first:
            return "first"
        if moved:
            return "moved"
        if now >= unpublished_since + self.max_interval_s:
            return "max_interval"
        if now >= last_input + (self.idle_s if idle_s is None else idle_s):
            return "idle"
        return None

    def next_check(
        self,
        now: float,
        *,
        last_publish: float,
        last_input: float,
        unpublished_since: float,
        moved: bool = False,
        first: bool = False,
        idle_s: float | None = None,
    ) -> float:
        """The next time at which `decide` may answer differently without new input."""
        if math.isinf(unpublished_since):
            return math.inf
        earliest = last_publish + self.min_interval_s
        if first or moved:
            return max(earliest, now)
        idle = self.idle_s if idle_s is None else idle_s
        later = min(unpublished_since + self.max_interval_s, last_input + idle)
        return max(earliest, later, now)


LEAF_PUBLISH = PublishPolicy(min_interval_s=0.1, max_interval_s=5.0, idle_s=0.05)
"""Default publish policy of a leaf (see benchmarks/fleet/scaling.py for the measurement)."""

AGGREGATOR_PUBLISH = PublishPolicy(min_interval_s=0.05, max_interval_s=0.5, idle_s=0.05)
"""Default publish policy of an aggregator: coalesce arrivals, forward within 0.5 s."""


@dataclass(frozen=True)
class StatusPolicy:
    """When a node publishes its JSON status document.

    Parameters
    ----------
    heartbeat_s : float
        Publish at least this often, seconds (progress counters are refreshed then).
    min_interval_s : float
        Least time between two documents triggered by a change of health, seconds.
    """

    heartbeat_s: float = 30.0
    min_interval_s: float = 2.0

    def decide(
        self, now: float, *, last_sent: float, changed: bool, started: float = -math.inf
    ) -> bool:
        """Whether to publish the document now (``changed``: a health field changed).

        The heartbeat counts from the last document, or from ``started`` before the first.
        """
        beat = max(last_sent, started) + self.heartbeat_s
        return now >= beat or (changed and now >= last_sent + self.min_interval_s)

    def next_check(
        self, now: float, *, last_sent: float, changed: bool, started: float = -math.inf
    ) -> float:
        """The next time `decide` may answer True without new changes."""
        due = max(last_sent, started) + self.heartbeat_s
        if changed:
            due = min(due, last_sent + self.min_interval_s)
        return max(due, now)


@dataclass(frozen=True)
class ConfirmPolicy:
    """When a leaf publishes its reading confirmations (`edge_runtime.wire.ConfirmMessage`).

    Parameters
    ----------
    min_interval_s : float
        Least time between two confirmations, seconds; a change inside it is sent when it
        ends (trailing), so the last state is always confirmed.
    """

    min_interval_s: float = 0.5

    def decide(self, now: float, *, last_sent: float, changed: bool) -> bool:
        """Whether to publish a confirmation now (``changed``: durable, gaps or epoch)."""
        return changed and now >= last_sent + self.min_interval_s

    def next_check(self, now: float, *, last_sent: float, changed: bool) -> float:
        """The next time `decide` may answer True without new changes."""
        return max(last_sent + self.min_interval_s, now) if changed else math.inf


_MEMORY = 1024  # most keys an `EchoTracker` remembers besides what awaits its echo


@dataclass(slots=True)
class _Outstanding:
    """One published snapshot awaiting its echo (`EchoTracker`)."""

    start: float  # when its clock started: the publish, its PUBACK or the last reconnection
    connection: int  # the connection it was handed over on
    sent_order: int  # event number of `EchoTracker.sent`
    acked_order: int | None = None  # event number of `EchoTracker.acked` (None: no PUBACK yet)


class EchoTracker:
    """Which published snapshots came back from the broker, and which never will.

    A PUBACK proves neither storage nor delivery (an ACL-denied publish is dropped silently in
    MQTT 3.1.1, ``message_size_limit`` drops oversized ones), so a node subscribes to its own
    subspace topic and expects each snapshot back. The shell tells the tracker what happens
    to each publish — `sent` (handed to the client), `acked` (the broker's PUBACK) or
    `failed` (the publish raised: connection lost or PUBACK timed out), `connected` (a new
    connection) — and what it observes of its own load (`load`: event-loop lag).

    A snapshot is reported undelivered when:

    - **its echo is overdue**: ``bound_s`` after its clock started (the PUBACK, not the
      moment it was queued; restarted by a reconnection, so time spent disconnected never
      counts). ``bound_s = max(timeout_s, factor * slowest recent sample)`` over the last
      ``window`` echo latencies, PUBACK round trips and event-loop lags: under load all
      three grow, the last two before the echo of the snapshot in question could come
      back, so the bound keeps ahead of the load instead of learning it too late; or
    - **a later snapshot came back first**: the echo of a snapshot handed over on the
      current connection reports, at once, the earlier ones of the same lineage (key
      ``(epoch, seq)``) whose PUBACK arrived on that connection before it was sent
      (the broker then had them first, and it delivers one topic in order).

    Never reported: a publish that `failed` (it may not have reached the broker; the next
    snapshot supersedes it, the shell re-publishes the latest on reconnection and logs the
    lost connection); a snapshot handed over on an earlier connection when a snapshot of
    the same lineage at least as recent comes back (its own echo may have been lost with
    that connection; the later one supersedes it); anything on the order rule across
    connections, or for a snapshot whose PUBACK had not arrived when the later one was
    sent (a retained copy delivered on re-subscribing precedes what the shell re-publishes
    at connection start, yet was published before it). An echo that arrives after its
    report is counted as late and the report is withdrawn.

    Parameters
    ----------
    timeout_s : float
        Least bound, seconds.
    factor : float, default 4
        Multiple of the slowest recent sample.
    window : int, default 32
        Recent samples of each kind remembered (memory O(window)).
    """

    def __init__(self, timeout_s: float, factor: float = 4.0, window: int = 32) -> None:
        self.timeout_s = timeout_s
        self.factor = factor
        self._latencies: deque[float] = deque(maxlen=window)  # echo, from the clock start
        self._round_trips: deque[float] = deque(maxlen=window)  # PUBACK, from `sent`
        self._lags: deque[float] = deque(maxlen=window)  # event loop, from the shell
        self._awaiting: dict[tuple[Hashable, int], _Outstanding] = {}
        self._sent_at: dict[tuple[Hashable, int], float] = {}
        self._reported: set[tuple[Hashable, int]] = set()
        self._connection = 0
        self._events = 0
        self.undelivered = 0
        self.late = 0
        self.superseded = 0
        self.failed_publishes = 0

    @property
    def bound_s(self) -> float:
        """Current bound, seconds."""
        slowest = max(
            max(self._latencies, default=0.0),
            max(self._round_trips, default=0.0),
            max(self._lags, default=0.0),
        )
        return max(self.timeout_s, self.factor * slowest)

    @property
    def awaiting(self) -> int:
        """Snapshots published and not yet echoed, reported or withdrawn."""
        return len(self._awaiting)

    def _tick(self) -> int:
        self._events += 1
        return self._events

    def sent(self, epoch: Hashable, seq: int, now: float) -> None:
        """A snapshot ``(epoch, seq)`` is about to be published at ``now`` (before the
        publish: its echo may beat the PUBACK). Publishing the same key again (the shell
        re-publishes its latest snapshot on every connection) restarts its record on the
        current connection."""
        key = (epoch, seq)
        self._awaiting[key] = _Outstanding(now, self._connection, self._tick())
        self._sent_at[key] = now
        if len(self._sent_at) > _MEMORY:  # a caller that never acks: keep memory bounded
            del self._sent_at[next(iter(self._sent_at))]

    def acked(self, epoch: Hashable, seq: int, now: float) -> None:
        """The broker acknowledged ``(epoch, seq)`` at ``now`` (PUBACK): its clock starts."""
        key = (epoch, seq)
        out = self._awaiting.get(key)
        sent = self._sent_at.pop(key, None)
        if sent is not None:
            self._round_trips.append(max(0.0, now - sent))
        if out is None:  # its echo beat the PUBACK
            return
        out.acked_order = self._tick()
        out.start = max(out.start, now)

    def failed(self, epoch: Hashable, seq: int) -> None:
        """Publishing ``(epoch, seq)`` raised (connection lost, PUBACK timed out): its
        outcome is unknown and a later snapshot supersedes it, so it is never reported."""
        key = (epoch, seq)
        self._sent_at.pop(key, None)
        if self._awaiting.pop(key, None) is not None:
            self.failed_publishes += 1

    def connected(self, now: float) -> None:
        """A new connection at ``now``: what awaits its echo was handed over on an
        earlier one; its clock restarts (the time disconnected does not count)."""
        self._connection += 1
        self._sent_at.clear()
        for out in self._awaiting.values():
            out.start = max(out.start, now)

    def load(self, lag_s: float) -> None:
        """The shell observed its event loop ``lag_s`` seconds behind (e.g. a timed sleep
        that ended that late); an echo can be as late as the loop that reads it."""
        if lag_s > 0 and math.isfinite(lag_s):
            self._lags.append(lag_s)

    def echoed(self, epoch: Hashable, seq: int, now: float) -> list[int]:
        """Snapshot ``(epoch, seq)`` came back; returns the seqs now known undelivered."""
        key = (epoch, seq)
        out = self._awaiting.pop(key, None)
        if out is not None:
            self._latencies.append(max(0.0, now - out.start))
        elif key in self._reported:
            self._reported.discard(key)
            self.undelivered -= 1
            self.late += 1
        lost: list[int] = []
        superseded: list[tuple[Hashable, int]] = []
        for (e, s), other in self._awaiting.items():
            if e != epoch or s >= seq:
                continue
            if other.connection != self._connection:
                superseded.append((e, s))
            elif (
                out is not None
                and out.connection == self._connection
                and other.acked_order is not None
                and other.acked_order < out.sent_order
            ):
                lost.append(s)
        for k in superseded:
            del self._awaiting[k]
        self.superseded += len(superseded)
        lost.sort()
        self._report([(epoch, s) for s in lost])
        return lost

    def expired(self, now: float) -> list[int]:
        """Seqs out for longer than `bound_s`; they are counted undelivered."""
        bound = self.bound_s
        lost = [key for key, out in self._awaiting.items() if now >= out.start + bound]
        self._report(lost)
        return [key[1] for key in lost]

    def _report(self, keys: list[tuple[Hashable, int]]) -> None:
        for key in keys:
            del self._awaiting[key]
            self._sent_at.pop(key, None)
            self._reported.add(key)
        if len(self._reported) > _MEMORY:  # bounded memory: forget the oldest reports
            self._reported = set(sorted(self._reported, key=lambda k: k[1])[-_MEMORY // 2 :])
        self.undelivered += len(keys)

    def next_check(self) -> float:
        """Earliest time a snapshot may expire (``inf`` when none is awaited)."""
        if not self._awaiting:
            return math.inf
        return min(out.start for out in self._awaiting.values()) + self.bound_s
