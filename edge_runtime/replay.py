"""Replay a dataset as live sensor readings on the leaves' sensor topics."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import aiomqtt
import numpy as np
import structlog

from edge_runtime.delivery import LeafDelivery
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology
from edge_runtime.wire import WireError, decode_confirm, encode_readings

__all__ = ["DEFAULT_BATCH_SIZE", "ReplayStats", "Replayer", "new_run_id"]

DEFAULT_BATCH_SIZE = 64
"""Readings per message when replaying as fast as possible (benchmarks/fleet/scaling.py)."""

RESUME_WAIT_S = 5.0
"""Most seconds `Replayer.run` waits for the leaves' retained confirmations when resuming."""

_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")


def new_run_id() -> str:
    """A fresh replay run id: 8 random hex digits (``secrets``), e.g. ``"3fa2c1d0"``."""
    return secrets.token_hex(4)


@dataclass(frozen=True)
class ReplayStats:
    """What a replay sent: ``rows`` readings in ``messages`` publishes of ``payload_bytes``.

    ``resent`` counts readings published again (after a reconnect, a leaf restart, a gap a
    leaf reported, or a lost tail); ``unconfirmed`` maps each leaf to the readings it had
    not reported durable when the replay gave up waiting (empty when every reading is safe).
    ``run_id`` names the run (its sources are ``replay:<run_id>:<leaf>``); ``confirmed``
    counts the readings of ``rows`` the leaves reported durable, ``rejected`` the readings
    of this run's sources the leaves reported rejecting in their status documents
    (``extra["rejected_by_source"]``; re-sent readings rejected again count again);
    ``skipped`` the readings a resumed run found already confirmed and did not send; ``error``
    is the broker error the replay gave up on (None when it did not).
    """

    rows: int
    messages: int
    payload_bytes: int
    wall_s: float
    resent: int = 0
    reconnects: int = 0
    unconfirmed: Mapping[str, int] = field(default_factory=dict)
    run_id: str = ""
    confirmed: int = 0
    rejected: int = 0
    skipped: int = 0
    error: str | None = None


@dataclass(kw_only=True)
class _Stream(LeafDelivery):
    """The replay's view of one leaf: its rows, and what was sent and confirmed."""

    rows: np.ndarray  # dataset row indices, in sequence order
    order: np.ndarray  # global schedule position of each row (for the rate)


class Replayer:
    """Publishes the rows of ``data`` to the leaves' sensor topics as a live stream.

    Rows are split across leaves by `Topology.split_rows`; leaf ``j`` gets its rows in order
    as sequenced readings in the map form ``{"src": "replay:<run>:<leaf>", "seq": first,
    "x": rows}`` (QoS 1), up to ``batch_size`` readings per message (1: one reading per message,
    what a simple sensor script does). Without a ``rate`` each leaf's next batch is sent in
    turn as fast as the broker acknowledges (at most ``max_in_flight`` unacknowledged);
    with a ``rate`` (readings/s over all leaves, in the schedule "step t sends each leaf its
    t-th row") every ``batch_interval_s`` seconds each leaf gets the readings that are due.

    End-to-end delivery, not broker trust (a PUBACK means neither stored nor delivered):
    with ``resend`` on, the replay keeps each leaf's readings until the leaf confirms them
    *durable* on ``<prefix>/<path>/confirm`` (`edge_runtime.wire.ConfirmMessage`), at most
    ``window`` readings per leaf (sending to a leaf pauses while its window is full; the
    others go on). It re-sends, in order, only what may have been lost: everything above a
    leaf's ``ingested`` after a reconnect of the replay, after a leaf reconnected or
    restarted (its confirmation shows a new ``(epoch, session, connection)``), and from the first
    missing reading of a gap the leaf reports — never on a timer while confirmations
    progress. Only when nothing has progressed for half of ``confirm_timeout_s`` at the end
    does it re-send a leaf's unconfirmed tail once (a lost last message reveals no gap).
    Leaves drop duplicates and re-order by sequence number, so nothing is lost or counted
    twice. `run` returns once every reading is durable, or after ``confirm_timeout_s``
    seconds without progress (progress: a reading sent for the first time, or confirmed for
    the first time — never a re-send), or, with ``resend`` off, once the leaves' status
    documents report as rejected every reading not confirmed. A lost broker connection is
    re-opened with jittered exponential backoff in every phase, until ``confirm_timeout_s``
    seconds pass without progress.

    Each run is a new source per leaf, ``replay:<run_id>:<leaf>`` (a fresh random run id
    unless given), so a second replay into running agents adds its readings instead of
    being dropped as duplicates of the first. With ``resume`` the run continues the
    sources of run ``run_id``: each leaf's readings continue after the last one its
    (retained) confirmation reports ingested.

    Parameters
    ----------
    topology : Topology
    data : ndarray of shape (n_samples, n_features), float64
    settings : AgentSettings
        Broker address, credentials and timeouts.
    rate : float, optional
        Readings per second over all leaves; ``None`` sends as fast as the broker accepts.
    max_in_flight : int, default 64
        Bound of unacknowledged publishes.
    resend : bool, default True
        Keep and re-send readings until durable (see above); False sends each once.
    window : int, default 100_000
        Most readings per leaf kept awaiting confirmation (memory: two integers per leaf;
        the readings themselves are rows of ``data``).
    confirm_timeout_s : float, default 60
        Seconds to wait for confirmations without progress before giving up.
    batch_size : int, default `DEFAULT_BATCH_SIZE`
        Most readings per message.
    batch_interval_s : float, default 0.1
        With a ``rate``: seconds between two sends to the same leaf (the latency a batch adds).
    run_id : str, optional
        The run's id (1-32 letters, digits, ``_`` or ``-``); default `new_run_id`.
    resume : bool, default False
        Continue the earlier run ``run_id`` (required then) where its leaves stopped.

    Attributes
    ----------
    first_sent : dict of str to ndarray of shape (n_leaf_rows,)
        ``time.monotonic()`` at which each reading of each leaf was first published (NaN
        until it is), by sequence number.

    Raises
    ------
    ValueError
        If ``data`` is not 2-D, or ``rate``, ``max_in_flight``, ``window``, ``batch_size`` or
        ``batch_interval_s`` is not positive, ``run_id`` is malformed, ``resume`` is
        given without a ``run_id``, or a leaf reads a local source (topology ``source``).
    """

    def __init__(
        self,
        topology: Topology,
        data: np.ndarray,
        settings: AgentSettings,
        *,
        rate: float | None = None,
        max_in_flight: int = 64,
        resend: bool = True,
        window: int = 100_000,
        confirm_timeout_s: float = 60.0,
        batch_size: int = DEFAULT_BATCH_SIZE,
        batch_interval_s: float = 0.1,
        run_id: str | None = None,
        resume: bool = False,
    ) -> None:
        data = np.asarray(data, dtype=np.float64)
        if data.ndim != 2:
            raise ValueError(f"data must be 2-D (n_samples, n_features), got shape {data.shape}")
        if rate is not None and not rate > 0:
            raise ValueError(f"rate must be > 0 readings/s, got {rate}")
        for name, value in (
            ("max_in_flight", max_in_flight),
            ("window", window),
            ("batch_size", batch_size),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if not batch_interval_s > 0:
            raise ValueError(f"batch_interval_s must be > 0 seconds, got {batch_interval_s}")
        if resume and run_id is None:
            raise ValueError("resume needs the run id of the run to continue")
        if run_id is not None and not _RUN_ID.fullmatch(run_id):
            raise ValueError(f"run id must be 1-32 letters, digits, '_' or '-', got {run_id!r}")
        self.run_id = run_id if run_id is not None else new_run_id()
        self.resume = resume
        self.topology = topology
        self.data = data
        self.settings = settings
        self.rate = rate
        self.max_in_flight = max_in_flight
        self.resend = resend
        self.window = window
        self.confirm_timeout_s = confirm_timeout_s
        self.batch_size = batch_size
        self.batch_interval_s = batch_interval_s
        local = [leaf for leaf in topology.leaves() if topology.nodes[leaf].source is not None]
        if local:
            raise ValueError(
                f"leaves {', '.join(map(repr, local))} read a local source (topology key "
                "`source`), not their sensor topic: nothing to replay into them"
            )
        self.assignment = topology.split_rows(data.shape[0])
        self.log = structlog.get_logger("edge_runtime.replay")
        self._streams = self._make_streams()
        self.first_sent: dict[str, np.ndarray] = {
            leaf: np.full(len(rows), np.nan) for leaf, rows in self.assignment.items()
        }
        self._progress = asyncio.Event()
        self._messages = 0
        self._bytes = 0
        self._resent = 0
        self._schedule_offset = 0.0  # schedule position a resumed run starts at
        self._reconnects = 0
        self._confirm_topics = {topology.confirm_topic(leaf): leaf for leaf in self.assignment}
        self._detail_topics = {topology.status_detail_topic(leaf): leaf for leaf in self.assignment}
        self._rejected: dict[str, int] = {}
        self._last_progress = time.monotonic()
        self._resumed = not resume
        self._connected = False
        self._error: str | None = None

    def _make_streams(self) -> dict[str, _Stream]:
        """One stream per leaf, with each row's position in the global schedule (step t
        sends each leaf, in file order, its t-th row)."""
        leaves = list(self.assignment)
        lengths = np.array([len(self.assignment[leaf]) for leaf in leaves], dtype=np.int64)
        longest = int(lengths.max(initial=0))
        steps = np.arange(longest)
        per_step = (lengths[:, None] > steps[None, :]).sum(axis=0)  # leaves active at step t
        before_step = np.concatenate([[0], np.cumsum(per_step)[:-1]]) if longest else steps
        streams: dict[str, _Stream] = {}
        earlier = np.zeros(longest, dtype=np.int64)  # active leaves before this one, by step
        for leaf, n in zip(leaves, lengths, strict=True):
            order = (before_step + earlier)[:n]
            streams[leaf] = _Stream(rows=self.assignment[leaf], order=order)
            earlier += steps < n
        return streams

    def expected_samples(self) -> dict[str, int]:
        """Rows each leaf receives (`Topology.split_rows` of ``data``), by leaf id."""
        return {leaf: len(rows) for leaf, rows in self.assignment.items()}

    def source(self, leaf: str) -> str:
        """The source id of the readings replayed to ``leaf`` in this run."""
        return f"replay:{self.run_id}:{leaf}"

    # --------------------------------------------------------------- confirmations
    def _moved(self) -> None:
        """Progress: a reading sent or confirmed for the first time."""
        self._last_progress = time.monotonic()
        self._progress.set()

    def _on_confirm(self, leaf: str, payload: bytes) -> None:
        """Take a leaf's confirmation: drop durable readings, notice what was lost."""
        try:
            confirm = decode_confirm(payload, max_bytes=self.settings.max_payload_bytes)
        except WireError:
            return
        if self._streams[leaf].on_confirm(confirm, self.source(leaf)):
            self._moved()

    def _on_detail(self, leaf: str, payload: bytes) -> None:
        """Take the readings of this run a leaf reports rejected (its status document's
        ``extra["rejected_by_source"]``; absent: none)."""
        if len(payload) > self.settings.max_payload_bytes:
            return
        try:
            doc = json.loads(payload)
        except ValueError:
            return
        extra = doc.get("extra") if isinstance(doc, dict) else None
        counts = extra.get("rejected_by_source") if isinstance(extra, dict) else None
        count = counts.get(self.source(leaf)) if isinstance(counts, dict) else None
        valid = isinstance(count, int) and not isinstance(count, bool) and count >= 0
        if valid and count != self._rejected.get(leaf, 0):
            self._rejected[leaf] = count
            self._progress.set()  # wake the wait: it may be over (not progress)

    async def _listen(self, client: aiomqtt.Client) -> None:
        async for message in client.messages:
            topic = str(message.topic)
            payload = message.payload
            if not isinstance(payload, bytes | bytearray) or not payload:
                continue
            if (leaf := self._confirm_topics.get(topic)) is not None:
                self._on_confirm(leaf, bytes(payload))
            elif (leaf := self._detail_topics.get(topic)) is not None:
                self._on_detail(leaf, bytes(payload))

    def _all_rejected(self) -> bool:
        """Whether the leaves reported rejecting every reading not confirmed (then nothing
        more can be confirmed without a re-send)."""
        return all(
            self._rejected.get(leaf, 0) >= s.sent - 1 - s.confirmed
            for leaf, s in self._streams.items()
            if s.unconfirmed() > 0
        )

    def _quiet_s(self) -> float:
        return time.monotonic() - self._last_progress

    # ------------------------------------------------------------------- sending
    async def run(
        self, progress: Callable[[int], None] | None = None, *, reached: bool = False
    ) -> ReplayStats:
        """Publish every row (and re-send until durable), then wait for the confirmations.

        A lost connection is re-opened after a full-jitter backoff delay (``reconnect_min_s``
        doubling to ``reconnect_max_s`` seconds of the settings, from the start again after
        a good connection) until ``confirm_timeout_s`` seconds pass without progress; then
        the run ends and the stats name the error (``ReplayStats.error``). Each publish waits
        at most ``settings.timeout_s`` seconds for its PUBACK (QoS 1). Only a failure of the
        very first attempt is raised at once (a wrong address or port fails fast), unless
        ``reached`` says the broker answered before.

        Parameters
        ----------
        progress : callable, optional
            Called with the number of readings sent so far (first sends), as they go and
            once at the end.
        reached : bool, default False
            The broker was reached before this call (``edge-runtime replay`` first waits for
            the leaves on a connection of its own): a first attempt that fails is then a
            broker lost since, e.g. restarting, and is retried like any later one.

        Returns
        -------
        ReplayStats
            What was sent, re-sent, confirmed, skipped and left unconfirmed.

        Raises
        ------
        aiomqtt.MqttError
            If the broker cannot be reached at the first attempt and ``reached`` is False.
        """
        start = time.monotonic()
        self._last_progress = start
        backoff = self.settings.reconnect_backoff()
        unconfirmed: dict[str, int] | None = None
        error: BaseException | None = None
        # bounded: each round either ends the replay, or waits >= reconnect_min_s, and the
        # rounds stop once confirm_timeout_s pass without progress
        while unconfirmed is None:
            connected_before = self._connected
            self._connected = False
            try:
                unconfirmed = await self._serve(start, progress)
            except* aiomqtt.MqttError as group:
                error = group.exceptions[0]
            if unconfirmed is not None:
                break
            if not (self._connected or connected_before or reached) and backoff.failures == 0:
                assert error is not None
                raise error
            if self._connected:
                backoff.reset()  # it was up: back off from the start
            if self._quiet_s() >= self.confirm_timeout_s:
                self._error = str(error)
                self.log.error("replay_gave_up", run=self.run_id, error=str(error))
                unconfirmed = self._unconfirmed()
                break
            self._reconnects += 1
            self.log.warning("replay_reconnecting", run=self.run_id, error=str(error))
            await asyncio.sleep(backoff.next_delay())
        sent = self._rows_sent()
        if progress is not None:
            progress(sent)
        skipped = sum(s.skipped for s in self._streams.values())
        confirmed = sum(max(0, s.durable + 1 - s.skipped) for s in self._streams.values())
        return ReplayStats(
            rows=sent - skipped,
            messages=self._messages,
            payload_bytes=self._bytes,
            wall_s=time.monotonic() - start,
            resent=self._resent,
            reconnects=self._reconnects,
            unconfirmed=unconfirmed,
            run_id=self.run_id,
            confirmed=min(confirmed, sent - skipped),
            rejected=sum(self._rejected.values()),
            skipped=skipped,
            error=self._error,
        )

    def _rows_sent(self) -> int:
        return sum(s.sent for s in self._streams.values())

    def _due(self, stream: _Stream, start: float) -> int:
        """How many of the stream's readings are due by now (all without a rate)."""
        if self.rate is None:
            return len(stream.rows)
        n_due = self._schedule_offset + (time.monotonic() - start) * self.rate
        return int(np.searchsorted(stream.order, n_due, side="left"))

    def _done_sending(self) -> bool:
        return all(s.sent == len(s.rows) for s in self._streams.values())

    async def _resume(self) -> None:
        """Wait (at most `RESUME_WAIT_S`) for every leaf's retained confirmation, then
        continue each leaf's readings after the last one it ingested."""
        deadline = time.monotonic() + min(RESUME_WAIT_S, self.confirm_timeout_s)
        while time.monotonic() < deadline:  # bounded by the deadline
            if all(s.session is not None for s in self._streams.values()):
                break
            self._progress.clear()
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self._progress.wait()
            except TimeoutError:
                break
        for leaf, stream in self._streams.items():
            stream.resume(len(stream.rows))
            self.first_sent[leaf][: stream.skipped] = np.nan
        # the rate's schedule continues at the first reading not yet confirmed, instead of
        # waiting as long as the earlier run had been sending
        unsent = [s.order[s.skipped] for s in self._streams.values() if s.skipped < len(s.rows)]
        self._schedule_offset = float(min(unsent, default=0))
        self.log.info(
            "replay_resumed",
            run=self.run_id,
            skipped={leaf: s.skipped for leaf, s in self._streams.items()},
        )
        self._resumed = True

    async def _serve(self, start: float, progress: Callable[[int], None] | None) -> dict[str, int]:
        slots = asyncio.Semaphore(self.max_in_flight)
        topics = {leaf: self.topology.nodes[leaf].sensor_topic for leaf in self.assignment}

        async def send(client: aiomqtt.Client, leaf: str, payload: bytes) -> None:
            try:
                topic = topics[leaf]
                assert topic is not None
                await client.publish(topic, payload, qos=1, timeout=self.settings.timeout_s)
            finally:
                slots.release()

        async def put(
            client: aiomqtt.Client, group: asyncio.TaskGroup, leaf: str, first: int, end: int
        ) -> None:
            stream = self._streams[leaf]
            for lo in range(first, end, self.batch_size):
                hi = min(end, lo + self.batch_size)
                payload = encode_readings(
                    self.data[stream.rows[lo:hi]], source=self.source(leaf), seq=lo
                )
                await slots.acquire()
                group.create_task(send(client, leaf, payload))
                self._messages += 1
                self._bytes += len(payload)

        async def resend_due(client: aiomqtt.Client, group: asyncio.TaskGroup) -> None:
            for leaf, stream in self._streams.items():
                todo = stream.take_resend()
                if todo is not None:
                    first, end = todo
                    self._resent += end - first
                    self.log.info("replay_resend", leaf=leaf, first=first, readings=end - first)
                    await put(client, group, leaf, first, end)

        async with (
            aiomqtt.Client(
                **self.settings.client_kwargs(),
                max_inflight_messages=self.max_in_flight,
            ) as client,
            asyncio.TaskGroup() as group,
        ):
            self._connected = True
            # the semaphore bounds unacknowledged publishes; aiomqtt warns above its threshold
            client.pending_calls_threshold = self.max_in_flight + 1
            await client.subscribe([(topic, 1) for topic in self._confirm_topics])
            await client.subscribe([(topic, 0) for topic in self._detail_topics])
            listener = group.create_task(self._listen(client), name="replay:confirm")
            if not self._resumed:
                await self._resume()
            if self.resend and self._messages:  # a reconnect: what was in flight may be lost
                for stream in self._streams.values():
                    stream.reconnected()
            while not self._done_sending():
                if self.resend:
                    await resend_due(client, group)
                sent_any = False
                for leaf, stream in self._streams.items():
                    due = self._due(stream, start)
                    if self.resend:
                        due = min(due, stream.durable + 1 + self.window)
                    if due > stream.sent:
                        first, stream.sent = stream.sent, due
                        self.first_sent[leaf][first:due] = time.monotonic()
                        await put(client, group, leaf, first, due)
                        sent_any = True
                        self._moved()
                if progress is not None:
                    progress(self._rows_sent())
                if sent_any and self.rate is None:
                    continue
                if not sent_any and self._quiet_s() >= self.confirm_timeout_s:
                    break  # every window full, nothing confirmed for confirm_timeout_s
                self._progress.clear()
                if self.rate is not None:
                    await asyncio.sleep(self.batch_interval_s)
                    continue
                # every window is full: wait for confirmations
                try:
                    async with asyncio.timeout(self.confirm_timeout_s):
                        await self._progress.wait()
                except TimeoutError:
                    break
            unconfirmed = await self._confirm(client, group, resend_due)
            listener.cancel()
        return unconfirmed

    def _unconfirmed(self) -> dict[str, int]:
        return {leaf: n for leaf, s in self._streams.items() if (n := s.unconfirmed()) > 0}

    async def _confirm(
        self,
        client: aiomqtt.Client,
        group: asyncio.TaskGroup,
        resend_due: Callable[[aiomqtt.Client, asyncio.TaskGroup], Awaitable[None]],
    ) -> dict[str, int]:
        """Wait until every sent reading is durable, re-sending what was lost; stop after
        ``confirm_timeout_s`` without progress (re-sends are none), or, without re-sends,
        once the leaves reported rejecting every reading not confirmed."""
        probe_s = self.confirm_timeout_s / 2
        probed = False
        # bounded: it ends at the latest confirm_timeout_s after the last progress, and
        # progress (a reading confirmed for the first time) happens at most once per reading
        while self._unconfirmed():
            if not self.resend and self._all_rejected():
                break
            if self.resend:
                await resend_due(client, group)
            self._progress.clear()
            try:
                async with asyncio.timeout(min(probe_s, 1.0)):
                    await self._progress.wait()
                continue
            except TimeoutError:
                pass
            quiet = self._quiet_s()
            if quiet >= self.confirm_timeout_s:
                break
            if self.resend and quiet >= probe_s and not probed:
                # nothing moves: the last message to a leaf may have been lost (no gap shows)
                for stream in self._streams.values():
                    if stream.unconfirmed() > 0:
                        stream.want_resend(stream.ingested + 1)
                probed = True
        return self._unconfirmed()
