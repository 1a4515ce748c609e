"""Replay a dataset as live sensor readings on the leaves' sensor topics."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field

import aiomqtt
import numpy as np
import structlog

from edge_runtime.agents.settings import AgentSettings
from edge_runtime.topology import Topology
from edge_runtime.wire import WireError, decode_status, encode_readings

__all__ = ["ReplayStats", "Replayer", "wait_online"]


@dataclass(frozen=True)
class ReplayStats:
    """What a replay sent: ``rows`` readings in ``messages`` publishes of ``payload_bytes``.

    ``resent`` counts readings published again after a reconnect or a leaf restart;
    ``unconfirmed`` maps each leaf to the readings it had not reported durable when
    the replay gave up waiting (empty when every reading is safe).
    """

    rows: int
    messages: int
    payload_bytes: int
    wall_s: float
    resent: int = 0
    reconnects: int = 0
    unconfirmed: Mapping[str, int] = field(default_factory=dict)


class Replayer:
    """Publishes the rows of ``data`` to the leaves' sensor topics as a live stream.

    Rows are split across leaves by `Topology.split_rows` and interleaved in time
    (step t sends each leaf its t-th row), one reading per message, QoS 1, in the map
    form ``{"src": "replay:<leaf>", "seq": i, "x": row}``. At most ``max_in_flight``
    publishes await their PUBACK at once; within a topic, order is preserved.

    End-to-end delivery, not broker trust (a PUBACK means neither stored nor
    delivered): with ``resend`` on, the replay keeps every reading until its leaf
    reports it *durable* (in its last checkpoint, or in its last published snapshot)
    in the ``durable`` map of its JSON status document, at most ``window`` readings in
    all. After any reconnect of its own, whenever a leaf reports a lower ``ingested``
    sequence than before (it restarted from an older state), and whenever a leaf's
    ``ingested`` stays below a reading sent ``resend_after_s`` ago, it publishes again,
    in order, the kept readings above what the leaf reports ingested; the leaf
    drops duplicates and re-orders by sequence number (`SourceSequencer`), so nothing
    is lost or counted twice. `run` returns once every reading is durable, or after
    ``confirm_timeout_s`` seconds without progress.

    Parameters
    ----------
    topology : Topology
    data : ndarray of shape (n_samples, n_features), float64
    settings : AgentSettings
        Broker address, credentials and timeouts.
    rate : float, optional
        Samples per second over all leaves; ``None`` sends as fast as the broker accepts.
    max_in_flight : int, default 64
        Bound of unacknowledged publishes.
    resend : bool, default True
        Keep and re-send readings until durable (see above); False sends each once.
    window : int, default 10_000
        Most readings kept awaiting confirmation; sending pauses while it is full.
    confirm_timeout_s : float, default 60
        Seconds to wait for confirmations without progress before giving up.
    resend_after_s : float, default 2
        A leaf whose reported ``ingested`` stays below a reading sent this many seconds
        ago gets the readings above it again (they were lost between broker and leaf,
        e.g. when the broker crashed before the leaf re-subscribed). Must stay below the
        leaves' gap timeout (10 s) so the re-send arrives before the gap is given up.

    Raises
    ------
    ValueError
        If ``data`` is not 2-D, or ``rate``, ``max_in_flight`` or ``window`` is not
        positive.
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
        window: int = 10_000,
        confirm_timeout_s: float = 60.0,
        resend_after_s: float = 2.0,
    ) -> None:
        data = np.asarray(data, dtype=np.float64)
        if data.ndim != 2:
            raise ValueError(f"data must be 2-D (n_samples, n_features), got shape {data.shape}")
        if rate is not None and not rate > 0:
            raise ValueError(f"rate must be > 0 samples/s, got {rate}")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        if window < 1:
            raise ValueError(f"window must be >= 1 reading, got {window}")
        self.topology = topology
        self.data = data
        self.settings = settings
        self.rate = rate
        self.max_in_flight = max_in_flight
        self.resend = resend
        self.window = window
        self.confirm_timeout_s = confirm_timeout_s
        self.resend_after_s = resend_after_s
        self.assignment = topology.split_rows(data.shape[0])
        self.log = structlog.get_logger("edge_runtime.replay")
        # delivery state, kept across reconnects
        self._schedule_list = list(self._schedule())
        self._next = 0
        self._pending: dict[str, dict[int, bytes]] = {leaf: {} for leaf in self.assignment}
        self._ingested: dict[str, int] = {leaf: -1 for leaf in self.assignment}
        self._sent_at: dict[str, dict[int, float]] = {leaf: {} for leaf in self.assignment}
        self._resend_due: set[str] = set()
        self._progress = asyncio.Event()
        self._messages = 0
        self._bytes = 0
        self._resent = 0
        self._reconnects = 0
        self._status_topics = {topology.status_detail_topic(leaf): leaf for leaf in self.assignment}

    def expected_samples(self) -> dict[str, int]:
        """Rows each leaf receives."""
        return {leaf: len(rows) for leaf, rows in self.assignment.items()}

    @staticmethod
    def source(leaf: str) -> str:
        """The source id of the readings replayed to ``leaf``."""
        return f"replay:{leaf}"

    def _schedule(self) -> Iterator[tuple[str, int, int]]:
        longest = max((len(r) for r in self.assignment.values()), default=0)
        for t in range(longest):
            for leaf, rows in self.assignment.items():
                if t < len(rows):
                    yield leaf, t, int(rows[t])

    def _pending_total(self) -> int:
        return sum(len(p) for p in self._pending.values())

    def _on_status(self, leaf: str, payload: bytes) -> None:
        """Take a leaf's status document: drop durable readings, notice restarts."""
        try:
            detail = decode_status(payload)
        except WireError:
            return
        src = self.source(leaf)
        ingested = detail.extra.get("ingested", {})
        durable = detail.extra.get("durable", {})
        if not isinstance(ingested, dict) or not isinstance(durable, dict):
            return
        now_ingested = int(ingested.get(src, -1))
        pending = self._pending[leaf]
        sent_at = self._sent_at[leaf]
        if now_ingested < self._ingested[leaf]:
            self._resend_due.add(leaf)  # the leaf restarted from an older state
        elif (
            now_ingested + 1 in pending
            and time.monotonic() - sent_at.get(now_ingested + 1, 0.0) > self.resend_after_s
        ):
            self._resend_due.add(leaf)  # stuck: the next reading was lost on the way
        self._ingested[leaf] = now_ingested
        done = int(durable.get(src, -1))
        for seq in [s for s in pending if s <= done]:
            del pending[seq]
            sent_at.pop(seq, None)
        self._progress.set()

    async def _listen(self, client: aiomqtt.Client) -> None:
        async for message in client.messages:
            leaf = self._status_topics.get(str(message.topic))
            if leaf is not None and isinstance(message.payload, bytes | bytearray):
                self._on_status(leaf, bytes(message.payload))

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
                if self._messages == 0 and attempt == 0 and self._next == 0:
                    raise group.exceptions[0] from None
                self._reconnects += 1
                delay = min(
                    self.settings.reconnect_max_s, self.settings.reconnect_min_s * 2**attempt
                )
                attempt += 1
                self.log.warning("replay_reconnecting", error=str(group.exceptions[0]))
            await asyncio.sleep(random.uniform(self.settings.reconnect_min_s, delay))
        if progress is not None:
            progress(self._next)
        return ReplayStats(
            rows=self._next,
            messages=self._messages,
            payload_bytes=self._bytes,
            wall_s=time.monotonic() - start,
            resent=self._resent,
            reconnects=self._reconnects,
            unconfirmed=unconfirmed,
        )

    async def _serve(self, start: float, progress: Callable[[int], None] | None) -> dict[str, int]:
        window = asyncio.Semaphore(self.max_in_flight)
        topics = {leaf: self.topology.nodes[leaf].sensor_topic for leaf in self.assignment}

        async def send(client: aiomqtt.Client, leaf: str, payload: bytes) -> None:
            try:
                topic = topics[leaf]
                assert topic is not None
                await client.publish(topic, payload, qos=1, timeout=self.settings.timeout_s)
            finally:
                window.release()

        async def put(
            client: aiomqtt.Client, group: asyncio.TaskGroup, leaf: str, seq: int, payload: bytes
        ) -> None:
            await window.acquire()
            if self.resend:
                self._sent_at[leaf][seq] = time.monotonic()
            group.create_task(send(client, leaf, payload))
            self._messages += 1
            self._bytes += len(payload)

        async def resend(
            client: aiomqtt.Client, group: asyncio.TaskGroup, leaves: list[str]
        ) -> None:
            for leaf in leaves:
                above = self._ingested[leaf]
                # a copy: confirmations arriving while we send remove entries
                todo = sorted((s, p) for s, p in self._pending[leaf].items() if s > above)
                for seq, payload in todo:
                    await put(client, group, leaf, seq, payload)
                    self._resent += 1

        async with (
            aiomqtt.Client(
                **self.settings.client_kwargs(),
                max_inflight_messages=self.max_in_flight,
            ) as client,
            asyncio.TaskGroup() as group,
        ):
            # the window bounds unacknowledged publishes; aiomqtt warns above its threshold
            client.pending_calls_threshold = self.max_in_flight + 1
            listener = None
            if self.resend:
                for topic in self._status_topics:
                    await client.subscribe(topic, qos=1)
                listener = group.create_task(self._listen(client), name="replay:status")
                if self._messages:
                    await resend(client, group, list(self.assignment))
            while self._next < len(self._schedule_list):
                if self._resend_due:
                    leaves, self._resend_due = list(self._resend_due), set()
                    await resend(client, group, leaves)
                if self.resend and self._pending_total() >= self.window:
                    self._progress.clear()
                    try:
                        async with asyncio.timeout(self.confirm_timeout_s):
                            await self._progress.wait()
                    except TimeoutError:
                        break  # no confirmations: report what is unconfirmed
                    continue
                if self.rate is not None:
                    delay = start + self._next / self.rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                leaf, seq, row = self._schedule_list[self._next]
                payload = encode_readings(self.data[row], source=self.source(leaf), seq=seq)
                if self.resend:
                    self._pending[leaf][seq] = payload
                await put(client, group, leaf, seq, payload)
                self._next += 1
                if progress is not None and self._next % 64 == 0:
                    progress(self._next)
            unconfirmed = await self._confirm(client, group, resend)
            if listener is not None:
                listener.cancel()
        return unconfirmed

    async def _confirm(
        self,
        client: aiomqtt.Client,
        group: asyncio.TaskGroup,
        resend_to: Callable[[aiomqtt.Client, asyncio.TaskGroup, list[str]], Awaitable[None]],
    ) -> dict[str, int]:
        """Wait until every kept reading is durable, re-sending after leaf restarts."""
        while self.resend and self._pending_total():
            if self._resend_due:
                leaves, self._resend_due = list(self._resend_due), set()
                await resend_to(client, group, leaves)
            self._progress.clear()
            try:
                async with asyncio.timeout(self.confirm_timeout_s):
                    await self._progress.wait()
            except TimeoutError:
                break
        return {leaf: len(p) for leaf, p in self._pending.items() if p}


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
        for topic in topics:
            await client.subscribe(topic, qos=1)
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
