"""Agents started and stopped while the others run: `AgentHost.add_agents` / `remove_agents`
in this process, `WorkerPool.add_agents` / `remove_agents` in a worker process."""

from __future__ import annotations

import uuid

import aiomqtt
import numpy as np
import pytest

from edge_runtime.monitor import ModelWatcher
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology, parse_topology
from edge_runtime.topology.deployed import with_node
from edge_runtime.wire import encode_readings
from edge_runtime.workers import AgentHost, WorkerPool

pytestmark = pytest.mark.mqtt

WAIT_S = 15.0


def settings_for(broker) -> AgentSettings:
    return AgentSettings(host=broker.host, port=broker.port, timeout_s=5.0)


def open_tree() -> Topology:
    """root -> site-0 (open) -> leaf-0; unique prefix, quick leaves."""
    return parse_topology(
        f"""
        name = "hosting"
        prefix = "h{uuid.uuid4().hex[:10]}"
        [defaults]
        rank = 2
        block_size = 10
        idle_flush_s = 0.1
        [[nodes]]
        id = "root"
        [[nodes]]
        id = "site-0"
        parent = "root"
        open = true
        [[nodes]]
        id = "leaf-0"
        parent = "site-0"
        sensor_topic = "s-{uuid.uuid4().hex[:8]}/leaf-0"
        """
    )


def newcomer(topology: Topology) -> Topology:
    """``topology`` with an undeclared leaf ``pi-<random>`` as site-0 admits it."""
    node = f"pi-{uuid.uuid4().hex[:6]}"
    return with_node(topology, topology.admitted_leaf("site-0", node))


async def feed(settings: AgentSettings, topology: Topology, node: str, rows: int = 20) -> None:
    sensor = topology.nodes[node].sensor_topic
    assert sensor is not None
    data = np.random.default_rng(0).normal(size=(rows, 4))
    async with aiomqtt.Client(**settings.client_kwargs()) as client:
        await client.publish(sensor, encode_readings(data, source=f"t:{node}", seq=0), qos=1)


async def test_a_host_starts_and_stops_agents_while_the_others_run(mosquitto):
    topology = open_tree()
    settings = settings_for(mosquitto)
    joined = newcomer(topology)
    node = next(n for n in joined.nodes if n.startswith("pi-"))
    async with AgentHost(topology, list(topology.nodes), settings, 4) as host:
        await host.add_agents(joined, [node])
        assert [a.node_id for a in host.agents][-1] == node
        assert all(a.connected.is_set() for a in host.agents)
        with pytest.raises(ValueError, match="already hosted"):
            await host.add_agents(joined, [node])
        async with ModelWatcher(topology, settings) as watcher:
            await feed(settings, joined, node)
            model = await watcher.wait_until(
                lambda m: m is not None and m.provenance.get(node) == 20, WAIT_S
            )
        assert model is not None
        (gone,) = await host.remove_agents([node, "not-hosted"])
        assert gone.node == node and gone.messages_published >= 3  # online, detail, snapshot
        assert node not in {a.node_id for a in host.agents}
        (report,) = await host.close()
    assert [a.node for a in report.agents] == [node, "root", "site-0", "leaf-0"]


async def test_a_pool_starts_agents_in_a_running_worker_and_reports_them_once(mosquitto):
    topology = open_tree()
    settings = settings_for(mosquitto)
    joined = newcomer(topology)
    node = next(n for n in joined.nodes if n.startswith("pi-"))
    async with WorkerPool(topology, [["root", "site-0"], ["leaf-0"]], settings, 4) as pool:
        assert await pool.add_agents(joined, [node]) == 1  # the worker with fewer agents
        assert pool.groups == [["root", "site-0"], ["leaf-0", node]]
        with pytest.raises(ValueError, match="already hosted"):
            await pool.add_agents(joined, [node])
        with pytest.raises(ValueError, match="worker must be"):
            await pool.add_agents(newcomer(topology), ["pi-x"], worker=2)
        async with ModelWatcher(topology, settings) as watcher:
            await feed(settings, joined, node)
            await watcher.wait_until(
                lambda m: m is not None and m.provenance.get(node) == 20, WAIT_S
            )
        (gone,) = await pool.remove_agents([node])
        assert gone.node == node and gone.messages_published >= 3
        assert pool.groups == [["root", "site-0"], ["leaf-0"]]
        reports = await pool.close()
    assert [[a.node for a in r.agents] for r in reports] == [["root", "site-0"], [node, "leaf-0"]]
