"""Replay a dataset as live sensor readings on the leaves' sensor topics."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import aiomqtt
import numpy as np
import structlog

from edge_runtime.agents.settings import AgentSettings
from edge_runtime.delivery import LeafDelivery
from edge_runtime.topology import Topology
from edge_runtime.wire import WireError, decode_confirm, encode_readings

__all__ = ["DEFAULT_BATCH_SIZE", "ReplayStats", "Replayer", "wait_online"]

DEFAULT_BATCH_SIZE = 64
"""Readings per message when replaying as fast as possible (benchmarks/fleet.py)."""


@dataclass(frozen=True)
class ReplayStats:
    """What a replay sent: ``rows`` readings in ``messages`` publishes of ``payload_bytes``.

    ``resent`` counts readings published again (after a reconnect, a leaf restart, a gap a
    leaf reported, or a lost tail); ``unconfirmed`` maps each leaf to the readings it had
    not reported durable when the replay gave up waiting (empty when every reading is safe).
    """

    rows: int
    messages: int
    payload_bytes: int
    wall_s: float
    resent: int = 0
    reconnects: int = 0
    unconfirmed: Mapping[str, int] = field(default_factory=dict)


@dataclass(kw_only=True)
class _Stream(LeafDelivery):
    """The replay's view of one leaf: its rows, and what was sent and confirmed."""

    rows: np.ndarray  # dataset row indices, in sequence order
    order: np.ndarray  # global schedule position of each row (for the rate)


class Replayer:
    """Publishes the rows of ``data`` to the leaves' sensor topics as a live stream.

    Rows are split across leaves by `Topology.split_rows`; leaf ``j`` gets its rows in order
    as sequenced readings in the map form ``{"src": "replay:<leaf>", "seq": first, "x":
    rows}`` (QoS 1), up to ``batch_size`` readings per message (1: one reading per message,
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
    seconds without progress.

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

    Attributes
    ----------
    first_sent : dict of str to ndarray of shape (n_leaf_rows,)
        ``time.monotonic()`` at which each reading of each leaf was first published (NaN
        until it is), by sequence number.

    Raises
    ------
    ValueError
        If ``data`` is not 2-D, or ``rate``, ``max_in_flight``, ``window``, ``batch_size`` or
        ``batch_interval_s`` is not positive.
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
        self._reconnects = 0
        self._confirm_topics = {topology.confirm_topic(leaf): leaf for leaf in self.assignment}

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
        """Rows each leaf receives."""
        return {leaf: len(rows) for leaf, rows in self.assignment.items()}

    @staticmethod
    def source(leaf: str) -> str:
        """The source id of the readings replayed to ``leaf``."""
        return f"replay:{leaf}"

    # --------------------------------------------------------------- confirmations
    def _on_confirm(self, leaf: str, payload: bytes) -> None:
        """Take a leaf's confirmation: drop durable readings, notice what was lost."""
        try:
            confirm = decode_confirm(payload, max_bytes=self.settings.max_payload_bytes)
        except WireError:
            return
        self._streams[leaf].on_confirm(confirm, self.source(leaf))
        self._progress.set()

    async def _listen(self, client: aiomqtt.Client) -> None:
        async for message in client.messages:
            leaf = self._confirm_topics.get(str(message.topic))
            payload = message.payload
            if leaf is not None and isinstance(payload, bytes | bytearray) and payload:
                self._on_confirm(leaf, bytes(payload))

    # ------------------------------------------------------------------- sending
    async def run(self, progress: Callable[[int], None] | None = None) -> ReplayStats:
        """Publish every row (and re-send until durable); ``progress(rows_sent)`` as rows go.

        Raises
        ------
        aiomqtt.MqttError
            If the broker cannot be reached at the first attempt.
        """
        start = time.monotonic()
        attempt = 0
        while True:
            try:
                unconfirmed = await self._serve(start, progress)
                break
            except* aiomqtt.MqttError as group:
                if self._messages == 0 and attempt == 0:
                    raise group.exceptions[0] from None
                self._reconnects += 1
                delay = min(
                    self.settings.reconnect_max_s, self.settings.reconnect_min_s * 2**attempt
                )
                attempt += 1
                self.log.warning("replay_reconnecting", error=str(group.exceptions[0]))
            await asyncio.sleep(random.uniform(self.settings.reconnect_min_s, delay))
        sent = self._rows_sent()
        if progress is not None:
            progress(sent)
        return ReplayStats(
            rows=sent,
            messages=self._messages,
            payload_bytes=self._bytes,
            wall_s=time.monotonic() - start,
            resent=self._resent,
            reconnects=self._reconnects,
            unconfirmed=unconfirmed,
        )

    def _rows_sent(self) -> int:
        return sum(s.sent for s in self._streams.values())

    def _due(self, stream: _Stream, start: float) -> int:
        """How many of the stream's readings are due by now (all without a rate)."""
        if self.rate is None:
            return len(stream.rows)
        n_due = (time.monotonic() - start) * self.rate
        return int(np.searchsorted(stream.order, n_due, side="left"))

    def _done_sending(self) -> bool:
        return all(s.sent == len(s.rows) for s in self._streams.values())

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
            # the semaphore bounds unacknowledged publishes; aiomqtt warns above its threshold
            client.pending_calls_threshold = self.max_in_flight + 1
            listener = None
            if self.resend:
                await client.subscribe([(topic, 1) for topic in self._confirm_topics])
                listener = group.create_task(self._listen(client), name="replay:confirm")
                if self._messages:  # a reconnect: what was in flight may be lost
                    for stream in self._streams.values():
                        stream.want_resend(stream.ingested + 1)
            while not self._done_sending():
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
                if progress is not None:
                    progress(self._rows_sent())
                if sent_any and self.rate is None:
                    continue
                if self.rate is not None:
                    await asyncio.sleep(self.batch_interval_s)
                    continue
                self._progress.clear()  # every window is full: wait for confirmations
                try:
                    async with asyncio.timeout(self.confirm_timeout_s):
                        await self._progress.wait()
                except TimeoutError:
                    break
            unconfirmed = await self._confirm(client, group, resend_due)
            if listener is not None:
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
        """Wait until every sent reading is durable, re-sending what was lost."""
        if not self.resend:
            return {}
        probe_s = self.confirm_timeout_s / 2
        quiet_since = time.monotonic()
        while self._unconfirmed():
            await resend_due(client, group)
            self._progress.clear()
            try:
                async with asyncio.timeout(min(probe_s, 1.0)):
                    await self._progress.wait()
                quiet_since = time.monotonic()
                continue
            except TimeoutError:
                pass
            quiet = time.monotonic() - quiet_since
            if quiet >= self.confirm_timeout_s:
                break
            if quiet >= probe_s and not math.isinf(probe_s):
                # nothing moves: the last message to a leaf may have been lost (no gap shows)
                for stream in self._streams.values():
                    if stream.unconfirmed() > 0:
                        stream.want_resend(stream.ingested + 1)
                probe_s = math.inf  # once
        return self._unconfirmed()


async def wait_online(
    topology: Topology, nodes: list[str], settings: AgentSettings, timeout_s: float
) -> list[str]:
    """Wait until every node in ``nodes`` has a retained ``online`` status.

    Returns
    -------
    list of str
        The nodes still not online after ``timeout_s`` seconds (empty when all are).
    """
    missing = set(nodes)
    topics = {topology.status_topic(n): n for n in nodes}
    async with aiomqtt.Client(**settings.client_kwargs()) as client:
        if topics:
            await client.subscribe([(topic, 1) for topic in topics])
        try:
            async with asyncio.timeout(timeout_s):
                async for message in client.messages:
                    node = topics.get(str(message.topic))
                    if node is None:
                        continue
                    if message.payload == b"online":
                        missing.discard(node)
                    else:
                        missing.add(node)
                    if not missing:
                        break
        except TimeoutError:
            pass
    return sorted(missing)
