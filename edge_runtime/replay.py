"""Replay a dataset as live sensor readings on the leaves' sensor topics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import aiomqtt
import numpy as np

from edge_runtime.agents.settings import AgentSettings
from edge_runtime.topology import Topology
from edge_runtime.wire import encode_readings

__all__ = ["ReplayStats", "Replayer", "wait_online"]


@dataclass(frozen=True)
class ReplayStats:
    """What a replay sent: ``rows`` readings in ``messages`` publishes of ``payload_bytes``."""

    rows: int
    messages: int
    payload_bytes: int
    wall_s: float


class Replayer:
    """Publishes the rows of ``data`` to the leaves' sensor topics as a live stream.

    Rows are split across leaves by `Topology.split_rows` and interleaved in time
    (step t sends each leaf its t-th row), one reading per message, QoS 1, in the map
    form ``{"src": "replay:<leaf>", "seq": i, "x": row}`` so leaves de-duplicate and
    report what they ingested. At most ``max_in_flight`` publishes await their PUBACK at
    once; within a topic, order is preserved.

    Parameters
    ----------
    topology : Topology
    data : ndarray of shape (n_samples, n_features), float64
    settings : AgentSettings
        Broker address and timeouts.
    rate : float, optional
        Samples per second over all leaves; ``None`` sends as fast as the broker accepts.
    max_in_flight : int, default 64
        Bound of unacknowledged publishes.

    Raises
    ------
    ValueError
        If ``data`` is not 2-D, or ``rate`` / ``max_in_flight`` is not positive.
    """

    def __init__(
        self,
        topology: Topology,
        data: np.ndarray,
        settings: AgentSettings,
        *,
        rate: float | None = None,
        max_in_flight: int = 64,
    ) -> None:
        data = np.asarray(data, dtype=np.float64)
        if data.ndim != 2:
            raise ValueError(f"data must be 2-D (n_samples, n_features), got shape {data.shape}")
        if rate is not None and not rate > 0:
            raise ValueError(f"rate must be > 0 samples/s, got {rate}")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.topology = topology
        self.data = data
        self.settings = settings
        self.rate = rate
        self.max_in_flight = max_in_flight
        self.assignment = topology.split_rows(data.shape[0])

    def expected_samples(self) -> dict[str, int]:
        """Rows each leaf receives."""
        return {leaf: len(rows) for leaf, rows in self.assignment.items()}

    def _schedule(self) -> Iterator[tuple[str, int, np.ndarray]]:
        longest = max((len(r) for r in self.assignment.values()), default=0)
        for t in range(longest):
            for leaf, rows in self.assignment.items():
                if t < len(rows):
                    yield leaf, t, self.data[rows[t]]

    async def run(self, progress: Callable[[int], None] | None = None) -> ReplayStats:
        """Publish every row once; ``progress(rows_sent)`` is called as rows go out.

        Raises
        ------
        aiomqtt.MqttError
            If the broker cannot be reached or a publish times out.
        """
        start = time.monotonic()
        sent = 0
        nbytes = 0
        window = asyncio.Semaphore(self.max_in_flight)
        topics = {leaf: self.topology.nodes[leaf].sensor_topic for leaf in self.assignment}

        async def send(client: aiomqtt.Client, topic: str, payload: bytes) -> None:
            try:
                await client.publish(topic, payload, qos=1, timeout=self.settings.timeout_s)
            finally:
                window.release()

        async with (
            aiomqtt.Client(
                **self.settings.client_kwargs(),
                max_inflight_messages=self.max_in_flight,
            ) as client,
            asyncio.TaskGroup() as group,
        ):
            # the window bounds unacknowledged publishes; aiomqtt warns above its threshold
            client.pending_calls_threshold = self.max_in_flight + 1
            for leaf, seq, row in self._schedule():
                if self.rate is not None:
                    delay = start + sent / self.rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                await window.acquire()
                payload = encode_readings(row, source=f"replay:{leaf}", seq=seq)
                topic = topics[leaf]
                assert topic is not None
                group.create_task(send(client, topic, payload))
                sent += 1
                nbytes += len(payload)
                if progress is not None and sent % 64 == 0:
                    progress(sent)
        if progress is not None:
            progress(sent)
        return ReplayStats(sent, sent, nbytes, time.monotonic() - start)


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
