"""Agents against a real Mosquitto: leaves, aggregators, root model, status, bad input."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import replace

import aiomqtt
import numpy as np
import pytest
from helpers import collect_retained, low_rank_data, tree_topology

from edge_runtime.agents import create_agent
from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.fpca import FPCAEdge, Subspace, merge_many, principal_angles
from edge_runtime.monitor import ModelWatcher, covers
from edge_runtime.runner import run_topology
from edge_runtime.settings import AgentSettings
from edge_runtime.wire import (
    SubspaceMessage,
    decode_subspace,
    encode_readings,
    encode_subspace,
)

pytestmark = pytest.mark.mqtt


def settings_for(broker) -> AgentSettings:
    # float64 snapshots on the wire: these tests compare with the offline answer to 1e-9
    return AgentSettings(host=broker.host, port=broker.port, timeout_s=5.0, wire_dtype="float64")


def offline_leaf(topology, leaf: str, rows: np.ndarray) -> FPCAEdge:
    cfg = topology.nodes[leaf]
    est = FPCAEdge(rows.shape[1], cfg.rank, block_size=cfg.block_size)
    est.partial_fit(rows)
    return est


async def publish_rows(broker, topic: str, rows: np.ndarray, source: str) -> None:
    async with aiomqtt.Client(broker.host, broker.port, timeout=5) as client:
        for i, row in enumerate(rows):
            await client.publish(topic, encode_readings(row, source=source, seq=i), qos=1)


async def test_leaf_snapshot_equals_offline_fpca_edge_on_the_same_rows(mosquitto):
    topology = tree_topology(sites=1, leaves_per_site=1)
    leaf = topology.leaves()[0]
    data = low_rank_data(73, 12, 3, seed=1)
    settings = settings_for(mosquitto)
    async with LeafAgent(topology, leaf, settings, n_features=12) as agent:
        await agent.wait_connected(5)
        await publish_rows(mosquitto, topology.nodes[leaf].sensor_topic, data, "s")
        async with asyncio.timeout(10):
            while agent.snapshot is None or agent.snapshot.n_samples < len(data):
                await asyncio.sleep(0.05)
    retained = decode_subspace(
        await collect_retained(mosquitto.host, mosquitto.port, topology.subspace_topic(leaf))
    )
    expected = offline_leaf(topology, leaf, data).tracked_subspace
    assert retained.rank == 6  # rank 3 + the default oversample
    assert retained.n_samples == 73
    assert retained.provenance == {leaf: 73}
    np.testing.assert_allclose(retained.subspace.singular_values, expected.singular_values)
    np.testing.assert_allclose(retained.subspace.basis, expected.basis, atol=1e-12)


async def test_leaf_drops_readings_it_already_ingested_and_reports_the_last_sequence(mosquitto):
    topology = tree_topology(sites=1, leaves_per_site=1)
    leaf = topology.leaves()[0]
    data = low_rank_data(30, 6, 2, seed=2)
    topic = topology.nodes[leaf].sensor_topic
    async with LeafAgent(topology, leaf, settings_for(mosquitto)) as agent:
        await agent.wait_connected(5)
        await publish_rows(mosquitto, topic, data, "s")
        await publish_rows(mosquitto, topic, data[:10], "s")  # re-sent: duplicates
        async with asyncio.timeout(10):
            while agent.sequencer.duplicates < 10:
                await asyncio.sleep(0.05)
        assert agent.n_samples == 30
        assert agent.ingested == {"s": 29}
        assert agent.status_detail().extra["ingested"] == {"s": 29}


async def test_bad_sensor_payloads_are_counted_and_leave_the_estimate_unchanged(mosquitto):
    topology = tree_topology(sites=1, leaves_per_site=1)
    leaf = topology.leaves()[0]
    topic = topology.nodes[leaf].sensor_topic
    data = low_rank_data(20, 5, 2, seed=3)
    bad = [b"[1, 2, 3]", b"[1, 2, NaN, 4, 5]", b'["a", 1, 2, 3, 4]', b"\xc1\xc1", b"{}", b"x" * 100]
    async with LeafAgent(topology, leaf, settings_for(mosquitto), n_features=5) as agent:
        await agent.wait_connected(5)
        await publish_rows(mosquitto, topic, data, "s")
        async with asyncio.timeout(10):
            while agent.n_samples < 20:
                await asyncio.sleep(0.02)
        before = agent.estimator.subspace
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            for payload in bad:
                await client.publish(topic, payload, qos=1)
        async with asyncio.timeout(10):
            while sum(agent.rejects.values()) < len(bad):
                await asyncio.sleep(0.02)
        after = agent.estimator.subspace
    assert sum(agent.rejects.values()) == len(bad)
    assert "internal_error" not in agent.rejects
    assert agent.n_samples == 20
    np.testing.assert_array_equal(before.basis, after.basis)


async def test_stopping_a_leaf_publishes_its_final_snapshot_and_offline_status(mosquitto):
    topology = tree_topology(sites=1, leaves_per_site=1, idle_flush_s=30.0)
    leaf = topology.leaves()[0]
    data = low_rank_data(15, 6, 2, seed=4)  # one block of 10, then 5 pending rows
    topic = topology.nodes[leaf].sensor_topic
    async with LeafAgent(topology, leaf, settings_for(mosquitto)) as agent:
        await agent.wait_connected(5)
        await publish_rows(mosquitto, topic, data[:10], "s")
        async with asyncio.timeout(10):
            while agent.snapshot is None:
                await asyncio.sleep(0.02)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            for i in range(10, 15):
                await client.publish(topic, encode_readings(data[i], source="s", seq=i), qos=1)
        async with asyncio.timeout(10):
            while agent.n_samples < 15:
                await asyncio.sleep(0.02)
        assert agent.snapshot.n_samples == 10  # no block completed, idle flush far away
    host, port = mosquitto.host, mosquitto.port
    final = decode_subspace(await collect_retained(host, port, topology.subspace_topic(leaf)))
    assert final.n_samples == 15
    assert await collect_retained(host, port, topology.status_topic(leaf)) == b"offline"
    detail = json.loads(await collect_retained(host, port, topology.status_detail_topic(leaf)))
    assert detail["n_samples"] == 15
    assert detail["online"] is False


async def test_tree_of_agents_gives_the_merge_of_the_leaves_offline_estimates(mosquitto):
    topology = tree_topology(sites=2, leaves_per_site=2, rank=4, block_size=16)
    data = low_rank_data(800, 20, 4, seed=5)
    summary = await run_topology(topology, data, settings_for(mosquitto), settle_timeout_s=20)
    assert summary.covered
    assert summary.leaves_reporting == summary.leaves_total == 4
    assert summary.root_n_samples == 800
    assert summary.error_ratio <= 1.01
    model = decode_subspace(
        await collect_retained(mosquitto.host, mosquitto.port, topology.model_topic())
    )
    split = topology.split_rows(800)
    leaves = [
        offline_leaf(topology, leaf, data[rows]).tracked_subspace for leaf, rows in split.items()
    ]
    sites = [merge_many(leaves[:2]), merge_many(leaves[2:])]
    expected = merge_many(sites).truncate(4)
    assert model.rank == 4
    assert principal_angles(model.subspace.basis, expected.basis).max() < 1e-8
    np.testing.assert_allclose(model.subspace.singular_values, expected.singular_values)


def snapshot(node: str, subspace, seq: int, epoch: str = "e0") -> SubspaceMessage:
    return SubspaceMessage(
        node_id=node,
        epoch=epoch,
        seq=seq,
        subspace=subspace,
        timestamp=float(seq),
        provenance={node: subspace.n_samples},
    )


async def test_duplicated_and_shuffled_snapshots_give_the_same_root_estimate(mosquitto):
    topology = tree_topology(sites=1, leaves_per_site=4, rank=3, block_size=10)
    data = low_rank_data(400, 10, 3, seed=6)
    split = topology.split_rows(400)
    # three cumulative snapshots per leaf (after 1/3, 2/3 and all of its rows)
    messages = []
    for leaf, rows in split.items():
        for k, stop in enumerate((len(rows) // 3, 2 * len(rows) // 3, len(rows)), start=1):
            sub = offline_leaf(topology, leaf, data[rows[:stop]]).subspace
            messages.append((leaf, encode_subspace(snapshot(leaf, sub, k))))
    results = []
    for order in range(2):
        topo = tree_topology(sites=1, leaves_per_site=4, rank=3, block_size=10)
        shuffled = messages * 2  # every snapshot twice
        random.Random(order).shuffle(shuffled)
        async with AggregatorAgent(topo, "site-0", settings_for(mosquitto)) as agg:
            await agg.wait_connected(5)
            async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
                for leaf, payload in shuffled:
                    await client.publish(topo.subspace_topic(leaf), payload, qos=1)
            async with asyncio.timeout(10):
                while agg.stats.messages_received < len(shuffled) or agg.core.unpublished:
                    await asyncio.sleep(0.02)
            assert agg.snapshot.n_samples == 400
            assert agg.stats.duplicates >= len(messages)
            results.append(agg.snapshot.subspace)
    finals = [offline_leaf(topology, leaf, data[rows]).subspace for leaf, rows in split.items()]
    expected = merge_many(finals, rank=3)
    for result in results:
        np.testing.assert_array_equal(result.basis, expected.basis)
        np.testing.assert_array_equal(result.singular_values, expected.singular_values)


async def test_aggregator_rejects_malformed_and_foreign_snapshots_without_changing_state(
    mosquitto,
):
    topology = tree_topology(sites=1, leaves_per_site=2, rank=2, block_size=5)
    good = offline_leaf(topology, "leaf-0-0", low_rank_data(30, 6, 2, seed=7)).subspace
    valid = encode_subspace(snapshot("leaf-0-0", good, 1))
    other = encode_subspace(snapshot("leaf-0-1", good, 1))
    bad = [
        ("leaf-0-0", valid[: len(valid) // 2]),  # truncated
        ("leaf-0-0", b"\x00" * 50),  # garbage
        ("leaf-0-0", other),  # another node's snapshot on this child's topic
        ("stranger", valid),  # not a child
    ]
    async with AggregatorAgent(topology, "site-0", settings_for(mosquitto)) as agg:
        await agg.wait_connected(5)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            await client.publish(topology.subspace_topic("leaf-0-0"), valid, qos=1)
            async with asyncio.timeout(10):
                while agg.snapshot is None:
                    await asyncio.sleep(0.02)
            before = agg.snapshot
            for child, payload in bad:
                topic = topology.subspace_topic("leaf-0-0").replace("leaf-0-0", child)
                await client.publish(topic, payload, qos=1)
        async with asyncio.timeout(10):
            while sum(agg.rejects.values()) < len(bad):
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        assert agg.snapshot is before
    assert sum(agg.rejects.values()) == len(bad)
    assert agg.rejects["node_mismatch"] == 1
    assert agg.rejects["unknown_child"] == 1


async def test_a_restarted_aggregator_rebuilds_from_retained_snapshots(mosquitto):
    topology = tree_topology(sites=1, leaves_per_site=2, rank=2, block_size=5)
    data = low_rank_data(60, 6, 2, seed=8)
    settings = settings_for(mosquitto)
    async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
        for i, leaf in enumerate(topology.leaves()):
            sub = offline_leaf(topology, leaf, data[i * 30 : (i + 1) * 30]).subspace
            payload = encode_subspace(snapshot(leaf, sub, 1))
            await client.publish(topology.subspace_topic(leaf), payload, qos=1, retain=True)
    async with (
        ModelWatcher(topology, settings) as watcher,
        create_agent(topology, "root", settings),
        create_agent(topology, "site-0", settings),
    ):
        model = await watcher.wait_until(lambda m: covers(m, {"leaf-0-0": 30, "leaf-0-1": 30}), 5)
    assert model is not None and model.n_samples == 60


async def test_leaf_rejects_readings_of_another_width_than_the_first(mosquitto):
    topology = tree_topology(sites=1, leaves_per_site=1)
    leaf = topology.leaves()[0]
    topic = topology.nodes[leaf].sensor_topic
    async with LeafAgent(topology, leaf, settings_for(mosquitto)) as agent:
        await agent.wait_connected(5)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            await client.publish(topic, b"[1, 2, 3, 4]", qos=1)
            await client.publish(topic, b"[1, 2, 3]", qos=1)
        async with asyncio.timeout(5):
            while agent.n_samples + sum(agent.rejects.values()) < 2:
                await asyncio.sleep(0.02)
    assert agent.n_features == 4
    assert agent.n_samples == 1
    assert sum(agent.rejects.values()) == 1


@pytest.mark.parametrize("policy", ["keep", "drop", "downweight"])
async def test_a_silent_child_is_kept_dropped_or_down_weighted_by_the_staleness_policy(
    mosquitto, policy
):
    topology = tree_topology(sites=1, leaves_per_site=2, rank=2, block_size=5)
    node = topology.nodes["site-0"]
    cfg = replace(node, stale_policy=policy, stale_after_s=1.0, stale_weight=0.5)
    topology = replace(topology, nodes={**topology.nodes, "site-0": cfg})
    data = low_rank_data(60, 6, 2, seed=9)
    subs = {
        leaf: offline_leaf(topology, leaf, data[i * 30 : (i + 1) * 30]).tracked_subspace
        for i, leaf in enumerate(topology.leaves())
    }
    settings = replace(settings_for(mosquitto), status_min_interval_s=0.2)
    async with AggregatorAgent(topology, "site-0", settings) as agg:
        await agg.wait_connected(5)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            for leaf, sub in subs.items():
                payload = encode_subspace(snapshot(leaf, sub, 1))
                await client.publish(topology.subspace_topic(leaf), payload, qos=1)
            # leaf-0-1 keeps reporting (the same data, newer seq); leaf-0-0 falls silent
            async with asyncio.timeout(10):
                for seq in range(2, 60):
                    payload = encode_subspace(snapshot("leaf-0-1", subs["leaf-0-1"], seq))
                    await client.publish(topology.subspace_topic("leaf-0-1"), payload, qos=1)
                    await asyncio.sleep(0.05)
        final = agg.snapshot
        assert agg.status_detail().extra["stale_children"] == (
            [] if policy == "keep" else ["leaf-0-0"]
        )
    both = merge_many(list(subs.values()))
    if policy == "keep":
        assert final.provenance == {"leaf-0-0": 30, "leaf-0-1": 30}
        np.testing.assert_allclose(final.subspace.singular_values, both.singular_values)
    elif policy == "drop":
        assert final.provenance == {"leaf-0-1": 30}
        assert final.n_samples == 30
        np.testing.assert_allclose(
            final.subspace.singular_values, subs["leaf-0-1"].singular_values, rtol=1e-10
        )
    else:
        old = subs["leaf-0-0"]
        weighted = Subspace(old.basis, old.singular_values * 0.5, old.n_samples)
        expected = merge_many([weighted, subs["leaf-0-1"]])
        assert final.provenance == {"leaf-0-0": 30, "leaf-0-1": 30}
        np.testing.assert_allclose(final.subspace.singular_values, expected.singular_values)


async def test_a_snapshot_the_broker_drops_silently_is_counted_as_undelivered(
    make_mosquitto, tmp_path
):
    template = tmp_path / "small.conf"
    template.write_text("persistence false\nmessage_size_limit 2000\n")
    broker = make_mosquitto(config=template)
    broker.start()
    topology = tree_topology(sites=1, leaves_per_site=1, rank=3, block_size=10)
    leaf = topology.leaves()[0]
    settings = replace(settings_for(broker), echo_timeout_s=0.5)
    data = low_rank_data(10, 40, 3, seed=10)  # one block: a 40 x 6 basis is ~2 KB + header
    async with LeafAgent(topology, leaf, settings) as agent:
        await agent.wait_connected(5)
        await publish_rows(broker, topology.nodes[leaf].sensor_topic, data, "s")
        async with asyncio.timeout(10):
            while agent.undelivered < 1:
                await asyncio.sleep(0.05)
        assert agent.snapshot is not None and agent.snapshot.n_samples == 10
        assert agent.status_detail().extra["undelivered"] == 1


async def test_a_leaf_resumes_from_its_checkpoint_exactly_where_it_stopped(mosquitto, tmp_path):
    topology = tree_topology(sites=1, leaves_per_site=1, rank=3, block_size=10)
    leaf = topology.leaves()[0]
    topic = topology.nodes[leaf].sensor_topic
    data = low_rank_data(60, 8, 3, seed=12)
    settings = settings_for(mosquitto)
    async with LeafAgent(topology, leaf, settings, state_dir=tmp_path) as first:
        await first.wait_connected(5)
        await publish_rows(mosquitto, topic, data[:35], "s")
        async with asyncio.timeout(10):
            while first.n_samples < 35:
                await asyncio.sleep(0.02)
    assert (tmp_path / f"{leaf}.ckpt").is_file()
    async with LeafAgent(topology, leaf, settings, state_dir=tmp_path) as second:
        assert second.restored_from == "checkpoint"
        assert (second.n_samples, second.ingested, second.epoch) == (35, {"s": 34}, first.epoch)
        await second.wait_connected(5)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            for i in range(30, 60):  # 30..34 again (duplicates), then new rows
                await client.publish(topic, encode_readings(data[i], source="s", seq=i), qos=1)
        async with asyncio.timeout(10):
            while second.n_samples < 60:
                await asyncio.sleep(0.02)
        resumed = second.estimator.tracked_subspace
    expected = offline_leaf(topology, leaf, data).tracked_subspace
    np.testing.assert_array_equal(resumed.singular_values, expected.singular_values)
    np.testing.assert_array_equal(resumed.basis, expected.basis)


async def test_a_leaf_without_a_checkpoint_resumes_from_its_retained_snapshot(mosquitto):
    topology = tree_topology(sites=1, leaves_per_site=1, rank=3, block_size=10)
    leaf = topology.leaves()[0]
    data = low_rank_data(30, 8, 3, seed=13)
    settings = settings_for(mosquitto)
    async with LeafAgent(topology, leaf, settings) as first:
        await first.wait_connected(5)
        await publish_rows(mosquitto, topology.nodes[leaf].sensor_topic, data, "s")
        async with asyncio.timeout(10):
            while first.snapshot is None or first.snapshot.n_samples < 30:
                await asyncio.sleep(0.02)
    async with LeafAgent(topology, leaf, settings) as second:
        await second.wait_connected(5)
        assert second.restored_from == "retained snapshot"
        assert (second.n_samples, second.epoch, second.seq) == (30, first.epoch, first.seq)
        expected = offline_leaf(topology, leaf, data).tracked_subspace
        assert (
            principal_angles(second.estimator.tracked_subspace.basis, expected.basis).max() < 1e-9
        )


@pytest.fixture
def mosquitto(shared_mosquitto):
    """This worker's broker (conftest): the tests here are isolated by their topic prefix."""
    return shared_mosquitto
