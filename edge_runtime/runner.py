"""One-process demo: every agent of a topology, a replay, and the root's final estimate."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass

import aiomqtt
import numpy as np

from edge_runtime.agents import Agent, AgentSettings, AggregatorAgent, create_agent
from edge_runtime.fpca import error_ratio
from edge_runtime.monitor import ModelWatcher, covers, leaves_reporting, privacy_of
from edge_runtime.replay import Replayer
from edge_runtime.topology import Topology

__all__ = ["Progress", "RunSummary", "clear_retained", "run_topology"]


@dataclass(frozen=True)
class Progress:
    """A progress report: rows replayed, leaves the root covers, the root's rank."""

    samples_replayed: int
    samples_total: int
    leaves_reporting: int
    leaves_total: int
    root_rank: int
    root_n_samples: int
    elapsed_s: float


@dataclass(frozen=True)
class RunSummary:
    """The outcome of `run_topology` (the keys of ``edge-runtime run --json``).

    ``messages`` / ``payload_bytes`` count what the agents published (subspace, model
    and status messages); ``raw_bytes`` is what shipping the readings themselves as
    float64 would take (``samples * n_features * 8``); ``sensor_*`` count the replay.
    ``error_ratio`` compares the root's basis with the offline rank-r SVD of all the
    replayed rows, r being the root's rank (1.0 is optimal). ``privacy`` is the root
    model's differential-privacy guarantee, ``{"epsilon", "delta", "clip_norm"}`` (the
    weakest over the leaves), or None when some leaf publishes without noise.
    """

    samples: int
    n_features: int
    leaves_reporting: int
    leaves_total: int
    rank: int
    root_n_samples: int
    error_ratio: float
    messages: int
    payload_bytes: int
    raw_bytes: int
    sensor_messages: int
    sensor_bytes: int
    merges: int
    rejects: int
    wall_s: float
    covered: bool
    privacy: dict[str, float] | None = None

    def as_dict(self) -> dict[str, object]:
        """The summary as a JSON-ready mapping."""
        return asdict(self)


async def clear_retained(topology: Topology, settings: AgentSettings) -> None:
    """Delete the retained subspace, status and model messages of every node.

    A zero-length retained publish removes the retained message (MQTT 3.1.1 §3.3.1.3),
    so a new run never merges a previous run's snapshots.
    """
    topics = [topology.model_topic()]
    for node in topology.nodes:
        topics += [
            topology.subspace_topic(node),
            topology.status_topic(node),
            topology.status_detail_topic(node),
        ]
    async with aiomqtt.Client(**settings.client_kwargs()) as client:
        for topic in topics:
            await client.publish(topic, b"", qos=1, retain=True)


async def run_topology(
    topology: Topology,
    data: np.ndarray,
    settings: AgentSettings,
    *,
    rate: float | None = None,
    settle_timeout_s: float = 60.0,
    progress: Callable[[Progress], None] | None = None,
) -> RunSummary:
    """Run all agents of ``topology`` in this process, replay ``data`` and summarise.

    Each agent has its own MQTT connection to the broker in ``settings``. Returns once
    the root's model covers every leaf's final snapshot, or ``settle_timeout_s``
    seconds after the replay ended (then ``covered`` is False).

    Parameters
    ----------
    data : ndarray of shape (n_samples, n_features)

    Raises
    ------
    aiomqtt.MqttError
        If the broker cannot be reached.
    """
    start = time.monotonic()
    n_samples, n_features = data.shape
    await clear_retained(topology, settings)
    replayer = Replayer(topology, data, settings, rate=rate)
    expected = replayer.expected_samples()
    sent = 0

    agents: list[Agent] = [
        create_agent(topology, node, settings, n_features=n_features, restore_from_broker=False)
        for node in topology.nodes
    ]
    root = next(a for a in agents if a.node_id == topology.root)
    assert isinstance(root, AggregatorAgent)

    def report(_: object = None) -> None:
        if progress is None:
            return
        model = root.snapshot
        progress(
            Progress(
                samples_replayed=sent,
                samples_total=n_samples,
                leaves_reporting=leaves_reporting(model, expected),
                leaves_total=len(expected),
                root_rank=0 if model is None else model.rank,
                root_n_samples=0 if model is None else model.n_samples,
                elapsed_s=time.monotonic() - start,
            )
        )

    def on_sent(rows: int) -> None:
        nonlocal sent
        sent = rows
        report()

    model = None
    async with AsyncExitStack() as stack:
        for agent in agents:
            await stack.enter_async_context(agent)
        for agent in agents:
            await agent.wait_connected(settings.timeout_s)
        watcher = await stack.enter_async_context(ModelWatcher(topology, settings, report))
        replay = await replayer.run(on_sent)
        try:
            model = await watcher.wait_until(lambda m: covers(m, expected), settle_timeout_s)
        except TimeoutError:
            model = watcher.model
        # leaving the stack stops the watcher, then every agent (final snapshots)
    report()

    ratio = float("nan")
    if model is not None and model.rank > 0:
        ratio = error_ratio(data, model.subspace.basis)
    return RunSummary(
        samples=replay.rows,
        n_features=n_features,
        leaves_reporting=leaves_reporting(model, expected),
        leaves_total=len(expected),
        rank=0 if model is None else model.rank,
        root_n_samples=0 if model is None else model.n_samples,
        error_ratio=ratio,
        messages=sum(a.stats.messages_published for a in agents),
        payload_bytes=sum(a.stats.bytes_published for a in agents),
        raw_bytes=n_samples * n_features * 8,
        sensor_messages=replay.messages,
        sensor_bytes=replay.payload_bytes,
        merges=sum(a.merges for a in agents if isinstance(a, AggregatorAgent)),
        rejects=sum(sum(a.rejects.values()) for a in agents),
        wall_s=round(time.monotonic() - start, 3),
        covered=covers(model, expected),
        privacy=privacy_of(model),
    )
