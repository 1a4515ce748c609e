"""Membership against the real broker (issue 23): an open aggregator admits a leaf the
topology does not declare and learns it again from its retained snapshot after a restart;
deleting a child's retained snapshot (a zero-length retained publish, as ``retire
--forget`` does) takes exactly its samples out of the root's model. Bounded waits."""

from __future__ import annotations

import asyncio
import json
import uuid

import aiomqtt
import numpy as np
import pytest
from helpers import collect_retained, low_rank_data, tree_topology

from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.fpca import FPCAEdge, merge_many, principal_angles
from edge_runtime.monitor import ModelWatcher, covers
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology, parse_topology
from edge_runtime.wire import SubspaceMessage, decode_subspace, encode_subspace

pytestmark = pytest.mark.mqtt

WAIT_S = 10.0  # every wait is bounded; the default aggregator publishes within 0.5 s


def settings_for(broker) -> AgentSettings:
    return AgentSettings(host=broker.host, port=broker.port, timeout_s=5.0, wire_dtype="float64")


def open_topology() -> Topology:
    """root -> site-0 (open; declares leaf-0-0) -> leaves; unique prefix."""
    return parse_topology(
        f"""
        name = "fleet"
        prefix = "m{uuid.uuid4().hex[:10]}"
        [defaults]
        rank = 3
        [[nodes]]
        id = "root"
        [[nodes]]
        id = "site-0"
        parent = "root"
        open = true
        [nodes.admit]
        max_reading_rate = 1000
        [[nodes]]
        id = "leaf-0-0"
        parent = "site-0"
        """
    )


def leaf_snapshot(
    leaf: str, rows: np.ndarray, epoch: str = "e0", deployment: str = "fleet"
) -> SubspaceMessage:
    sub = FPCAEdge(rows.shape[1], 3, block_size=10).fit(rows).subspace
    return SubspaceMessage(
        node_id=leaf,
        epoch=epoch,
        seq=1,
        subspace=sub,
        timestamp=0.0,
        provenance={leaf: sub.n_samples},
        deployment=deployment,
    )


async def publish_retained(broker, topic: str, payload: bytes) -> None:
    async with aiomqtt.Client(broker.host, broker.port, timeout=5) as client:
        await client.publish(topic, payload, qos=1, retain=True)


async def wait_for(predicate, what: str, timeout_s: float = WAIT_S) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            while not predicate():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}") from None


async def test_an_open_aggregator_admits_a_leaf_the_topology_does_not_declare(mosquitto):
    topology = open_topology()
    settings = settings_for(mosquitto)
    data = low_rank_data(90, 8, 3, seed=23)
    declared, joined = leaf_snapshot("leaf-0-0", data[:40]), leaf_snapshot("pi-09", data[40:])
    pi09_topic = topology.subspace_topic("leaf-0-0").replace("leaf-0-0", "pi-09")
    assert "pi-09" not in topology.nodes

    async with (
        ModelWatcher(topology, settings) as watcher,
        AggregatorAgent(topology, "root", settings) as root,
        AggregatorAgent(topology, "site-0", settings) as site,
    ):
        await root.wait_connected(5)
        await site.wait_connected(5)
        await publish_retained(
            mosquitto, topology.subspace_topic("leaf-0-0"), encode_subspace(declared)
        )
        await publish_retained(mosquitto, pi09_topic, encode_subspace(joined))
        model = await watcher.wait_until(lambda m: covers(m, {"leaf-0-0": 40, "pi-09": 50}), WAIT_S)

        assert model is not None and model.n_samples == 90
        expected = merge_many([declared.subspace, joined.subspace]).truncate(3)
        assert principal_angles(model.subspace.basis, expected.basis).max() < 1e-8
        assert site.core.child_ids == ["leaf-0-0", "pi-09"] and site.core.joins == 1
        assert not site.rejects
        detail_topic = topology.status_detail_topic("site-0")

        async def joined_in_status() -> bool:
            raw = await collect_retained(mosquitto.host, mosquitto.port, detail_topic)
            return bool(raw) and json.loads(raw)["extra"]["joined"] == ["pi-09"]

        async with asyncio.timeout(WAIT_S):
            while not await joined_in_status():
                await asyncio.sleep(0.1)

    # A restarted open aggregator learns pi-09 from its retained snapshot.
    async with AggregatorAgent(topology, "site-0", settings) as site:
        await site.wait_connected(5)
        await wait_for(
            lambda: (
                site.snapshot is not None
                and site.snapshot.provenance == {"leaf-0-0": 40, "pi-09": 50}
            ),
            "the restarted site to merge both retained snapshots",
        )
        assert site.core.joins == 1 and "pi-09" in site.core.tree


async def test_a_deleted_retained_snapshot_takes_exactly_its_samples_out_of_the_root(mosquitto):
    topology = tree_topology(sites=1, leaves_per_site=3, rank=3)  # closed: declared leaves
    settings = settings_for(mosquitto)
    data = low_rank_data(120, 8, 3, seed=24)
    leaves = topology.leaves()
    rows = {leaf: data[30 * i : 30 * (i + 1) + 10 * i] for i, leaf in enumerate(leaves)}
    snaps = {
        leaf: leaf_snapshot(leaf, r, epoch=f"{leaf}-e", deployment=topology.name)
        for leaf, r in rows.items()
    }
    counts = {leaf: s.n_samples for leaf, s in snaps.items()}
    gone = leaves[1]

    async with (
        ModelWatcher(topology, settings) as watcher,
        AggregatorAgent(topology, "root", settings) as root,
        AggregatorAgent(topology, "site-0", settings) as site,
    ):
        await root.wait_connected(5)
        await site.wait_connected(5)
        for leaf, snap in snaps.items():
            await publish_retained(mosquitto, topology.subspace_topic(leaf), encode_subspace(snap))
        before = await watcher.wait_until(lambda m: covers(m, counts), WAIT_S)
        assert before is not None and before.n_samples == sum(counts.values())

        await publish_retained(mosquitto, topology.subspace_topic(gone), b"")  # retire --forget
        after = await watcher.wait_until(
            lambda m: m is not None and m.seq > before.seq and gone not in m.provenance, WAIT_S
        )

        assert after is not None
        assert after.n_samples == before.n_samples - counts[gone]
        assert after.provenance == {leaf: n for leaf, n in counts.items() if leaf != gone}
        rest = merge_many([snaps[leaf].subspace for leaf in leaves if leaf != gone]).truncate(3)
        assert principal_angles(after.subspace.basis, rest.basis).max() < 1e-8
        assert not site.core.quarantined and not root.core.quarantined
        assert site.core.forgets == 1 and root.core.forgets == 0
        await wait_for(lambda: not site.core.unpublished, "the site to settle")
        detail = json.loads(
            await collect_retained(
                mosquitto.host, mosquitto.port, topology.status_detail_topic("site-0")
            )
        )
        assert detail["extra"]["forgotten"][gone]["n_samples"] == counts[gone]

    model = decode_subspace(
        await collect_retained(mosquitto.host, mosquitto.port, topology.model_topic())
    )
    assert model.n_samples == sum(counts.values()) - counts[gone]
