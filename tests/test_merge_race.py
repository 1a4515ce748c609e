"""An aggregator's merge is safe against a concurrent `receive` (issue 21, item 4).

The shell merges large problems in a worker thread (`asyncio.to_thread`) while the event loop
keeps handling inbound snapshots. A child's first snapshot handled *during* such a merge must
enter the tree: before the fix, one that arrived between the merge's plan and its swap of the
changed set was marked merged without entering the tree, and stayed out of the model until the
child published again (a finished leaf never does). One scheme serialises every agent's core:
`Agent._numerics`, an `asyncio.Lock` held across the worker thread.

The race is made deterministic: the worker thread, inside the merge, hands the loop the
arrival and waits (bounded) for the loop to have handled it.
"""

from __future__ import annotations

import asyncio
import threading

import aiomqtt
import numpy as np
import pytest
from helpers import low_rank_data

from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.fpca import FPCAEdge
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import parse_topology
from edge_runtime.wire import SubspaceMessage, encode_subspace

pytestmark = pytest.mark.timeout(60)

TOPOLOGY = """
prefix = "{prefix}"
[defaults]
rank = 2
block_size = 10
[[nodes]]
id = "root"
[[nodes]]
id = "a"
parent = "root"
[[nodes]]
id = "b"
parent = "root"
"""


def _snapshot(node: str, seed: int) -> SubspaceMessage:
    est = FPCAEdge(6, 2, block_size=10)
    est.partial_fit(low_rank_data(40, 6, 2, seed=seed))
    sub = est.tracked_subspace
    return SubspaceMessage(node, f"e-{node}", 1, sub, 1.0, provenance={node: sub.n_samples})


def _message(topic: str, msg: SubspaceMessage) -> aiomqtt.Message:
    payload = encode_subspace(msg, dtype="float64")
    return aiomqtt.Message(topic, payload, qos=1, retain=False, mid=1, properties=None)


async def test_a_first_snapshot_handled_during_an_offloaded_merge_enters_the_model(
    mosquitto, unique_topic
) -> None:
    topology = parse_topology(TOPOLOGY.format(prefix=unique_topic))
    settings = AgentSettings(
        host=mosquitto.host, port=mosquitto.port, offload_min_cells=0, wire_dtype="float64"
    )
    agent = AggregatorAgent(topology, "root", settings)
    core = agent.core
    loop = asyncio.get_running_loop()
    topic_b = f"{unique_topic}/root/b/subspace"
    arrival_handled = threading.Event()
    plans = 0
    plan = core._plan

    def racing_plan():  # runs in the merge's worker thread
        nonlocal plans
        planned = plan()
        if threading.current_thread() is threading.main_thread():
            return planned  # (the loop's own look at the pending work)
        plans += 1
        if plans == 1:  # the first merge in a worker: b's first snapshot arrives right now
            loop.call_soon_threadsafe(
                lambda: loop.create_task(
                    _handle_then(agent, _message(topic_b, _snapshot("b", 2)), arrival_handled)
                )
            )
            arrival_handled.wait(1.0)  # bounded: with one lock the loop waits for us instead
        return planned

    core._plan = racing_plan
    async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
        await agent.handle(_message(f"{unique_topic}/root/a/subspace", _snapshot("a", 1)))
        now = loop.time()
        for i in range(20):  # bounded: each pass is one work-loop step
            await agent.step(client, now + 1.0 * i)
            await asyncio.sleep(0.05)
            if agent.snapshot is not None and set(agent.snapshot.provenance) == {"a", "b"}:
                break
    assert plans >= 1, "no merge ran in a worker thread"
    assert agent.snapshot is not None
    assert set(agent.snapshot.provenance) == {"a", "b"}, (
        f"b's first snapshot handled during the merge is missing: {agent.snapshot.provenance}"
    )
    assert agent.snapshot.n_samples == 80
    assert np.isfinite(agent.snapshot.subspace.singular_values).all()


async def _handle_then(agent: AggregatorAgent, message, done: threading.Event) -> None:
    await agent.handle(message)
    done.set()
