"""Forged snapshots against the real broker (issue 14): a device publishing with a leaf's
own credentials on the leaf's own topic is quarantined at its aggregator, the quarantine
shows in the status document and in ``watch``, and the root's model stays good."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import aiomqtt
import numpy as np
import pytest
from helpers import collect_retained

from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import FPCAEdge, Subspace, error_ratio
from edge_runtime.monitor import ModelWatcher
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import parse_topology
from edge_runtime.wire import SubspaceMessage, decode_subspace, encode_subspace

pytestmark = pytest.mark.mqtt

MOTES = Path(__file__).resolve().parents[1] / "topologies" / "motes-light.toml"


def motes_topology():
    text = MOTES.read_text().replace('prefix = "fpca"', f'prefix = "q{uuid.uuid4().hex[:8]}"')
    topology = parse_topology(text, MOTES)
    assert topology.nodes["pi-01"].valid_range is not None  # declared in the shipped file
    return topology


def leaf_snapshot(leaf: str, sub: Subspace, seq: int, epoch: str) -> SubspaceMessage:
    return SubspaceMessage(
        node_id=leaf,
        epoch=epoch,
        seq=seq,
        subspace=sub,
        timestamp=time.time(),
        provenance={leaf: sub.n_samples},
        deployment="motes-light",
    )


async def wait_for(predicate, timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.05)


async def test_forged_snapshots_are_quarantined_shown_and_kept_out_of_the_root(mosquitto):
    topology = motes_topology()
    data = np.array(load_dataset("motes-light"), dtype=np.float64)
    split = topology.split_rows(data.shape[0])
    settings = AgentSettings(host=mosquitto.host, port=mosquitto.port, timeout_s=5.0)
    honest = {}
    for leaf, rows in split.items():
        cfg = topology.nodes[leaf]
        est = FPCAEdge(48, cfg.rank, block_size=cfg.block_size).fit(data[rows])
        honest[leaf] = leaf_snapshot(leaf, est.tracked_subspace, 1, f"{leaf}-epoch")
    agents = [AggregatorAgent(topology, node, settings) for node in ("root", "site-a", "site-b")]
    watcher = ModelWatcher(topology, settings, watch_nodes=True)
    async with agents[0] as root, agents[1] as site_a, agents[2] as site_b, watcher:
        for agent in (root, site_a, site_b):
            await agent.wait_connected(5)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            for leaf, msg in honest.items():
                await client.publish(topology.subspace_topic(leaf), encode_subspace(msg), qos=1)
            await wait_for(
                lambda: root.snapshot is not None and root.snapshot.n_samples == 7712, 20
            )
            clean = error_ratio(data, root.model().subspace.basis)

            # (1) pi-03's topic: n_samples 1, singular values 1e7, a random basis, new epoch
            basis = np.linalg.qr(np.random.default_rng(0).normal(size=(48, 10)))[0]
            forged = leaf_snapshot("pi-03", Subspace(basis, np.full(10, 1e7), 1), 1, "forged")
            await client.publish(topology.subspace_topic("pi-03"), encode_subspace(forged), qos=1)
            # (2) pi-05's topic, its own epoch: 10^9 more samples one second later
            real = honest["pi-05"]
            jump = leaf_snapshot(
                "pi-05",
                Subspace(real.subspace.basis, real.subspace.singular_values, 10**9),
                2,
                real.epoch,
            )
            await asyncio.sleep(1.0)
            await client.publish(topology.subspace_topic("pi-05"), encode_subspace(jump), qos=1)

            await wait_for(lambda: "pi-03" in site_a.core.quarantined, 10)
            await wait_for(lambda: "pi-05" in site_b.core.quarantined, 10)
            assert site_a.core.quarantined["pi-03"].reason == "energy_bound"
            assert site_b.core.quarantined["pi-05"].reason == "n_samples_rate"
            # watch: from the aggregators' status documents
            await wait_for(lambda: set(watcher.quarantined()) == {"pi-03", "pi-05"}, 15)
            detail = json.loads(
                await collect_retained(
                    mosquitto.host, mosquitto.port, topology.status_detail_topic("site-a")
                )
            )
            assert detail["extra"]["quarantined"]["pi-03"]["reason"] == "energy_bound"
            assert detail["rejects"]["energy_bound"] == 1

    model = decode_subspace(
        await collect_retained(mosquitto.host, mosquitto.port, topology.model_topic())
    )
    assert model.n_samples == 7712  # the forged samples never reached the root
    assert error_ratio(data, model.subspace.basis) <= min(1.01, clean + 1e-9)
