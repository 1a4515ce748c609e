"""Two deployments on one broker with the same prefix and root id: their topics never mix.

An aggregator refuses a snapshot from a node that is not its child (``unknown_child``, with a
hint at the prefix) and a snapshot stamped with another deployment's name
(``foreign_deployment``); both are counted and the roots' models stay their own.
"""

from __future__ import annotations

import asyncio
import uuid

import aiomqtt
import numpy as np
import pytest
import structlog
from helpers import low_rank_data

from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.fpca import FPCAEdge
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology, parse_topology
from edge_runtime.wire import (
    SubspaceMessage,
    WireError,
    decode_subspace,
    encode_readings,
    encode_subspace,
    with_deployment,
)

pytestmark = pytest.mark.timeout(60)


def _topology(name: str, prefix: str, leaves: list[str]) -> Topology:
    lines = [
        f'name = "{name}"',
        f'prefix = "{prefix}"',
        "[defaults]",
        "rank = 2",
        "block_size = 5",
        "idle_flush_s = 0.2",
        "[[nodes]]",
        'id = "root"',
    ]
    for leaf in leaves:
        lines += [
            "[[nodes]]",
            f'id = "{leaf}"',
            'parent = "root"',
            f'sensor_topic = "{prefix}-{name}-sensors/{leaf}"',
        ]
    return parse_topology("\n".join(lines) + "\n")


def _settings(broker) -> AgentSettings:
    return AgentSettings(host=broker.host, port=broker.port, timeout_s=5.0, wire_dtype="float64")


async def _feed(broker, topology: Topology, leaf: str, rows: np.ndarray) -> None:
    topic = topology.nodes[leaf].sensor_topic
    async with aiomqtt.Client(broker.host, broker.port, timeout=5) as client:
        for i, row in enumerate(rows):
            await client.publish(topic, encode_readings(row, source="t", seq=i), qos=1)


async def _until(predicate, timeout_s: float = 20.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.02)


def test_with_deployment_stamps_a_payload_and_decoders_read_it_back() -> None:
    est = FPCAEdge(6, 2, block_size=5)
    est.partial_fit(low_rank_data(20, 6, 2, seed=1))
    msg = SubspaceMessage("leaf-1", "e0", 1, est.subspace, 1.0, provenance={"leaf-1": 20})
    plain = encode_subspace(msg)
    assert decode_subspace(plain).deployment is None  # absent: accepted, as before
    stamped = with_deployment(plain, "alpha")
    assert decode_subspace(stamped).deployment == "alpha"
    assert with_deployment(stamped, "alpha") is stamped
    again = decode_subspace(encode_subspace(decode_subspace(stamped)))
    assert again.deployment == "alpha"
    with pytest.raises(WireError):
        with_deployment(plain, "")


async def test_two_deployments_with_one_prefix_and_root_id_keep_their_own_models(mosquitto):
    prefix = f"t{uuid.uuid4().hex[:10]}"
    alpha = _topology("alpha", prefix, ["a-1", "a-2"])
    beta = _topology("beta", prefix, ["site-a"])
    data = low_rank_data(60, 6, 2, seed=3)
    settings = _settings(mosquitto)
    agents = {
        "alpha": [AggregatorAgent(alpha, "root", settings)]
        + [LeafAgent(alpha, leaf, settings) for leaf in alpha.leaves()],
        "beta": [AggregatorAgent(beta, "root", settings), LeafAgent(beta, "site-a", settings)],
    }
    root_a, root_b = agents["alpha"][0], agents["beta"][0]
    running = [a for group in agents.values() for a in group]
    capture = structlog.testing.capture_logs()
    logs = capture.__enter__()
    for agent in running:
        await agent.__aenter__()
    try:
        for agent in running:
            await agent.wait_connected(10)
        await _feed(mosquitto, alpha, "a-1", data[:20])
        await _feed(mosquitto, alpha, "a-2", data[20:40])
        await _feed(mosquitto, beta, "site-a", data[40:60])

        def settled() -> bool:
            a, b = root_a.snapshot, root_b.snapshot
            return (
                a is not None
                and b is not None
                and a.n_samples == 40
                and b.n_samples == 20
                and root_a.rejects["unknown_child"] >= 1
                and root_b.rejects["unknown_child"] >= 2
            )

        await _until(settled)
        # A leaf of beta named like one of alpha's (its id collides): refused by name.
        est = FPCAEdge(6, 2, block_size=5)
        est.partial_fit(data[:10] * 100.0)
        foreign = SubspaceMessage(
            "a-1", "other-epoch", 10**6, est.subspace, 1.0, provenance={"a-1": 10**6}
        )
        payload = with_deployment(encode_subspace(foreign), "beta")
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            await client.publish(alpha.subspace_topic("a-1"), payload, qos=1)
        await _until(lambda: root_a.rejects["foreign_deployment"] >= 1)
        await asyncio.sleep(0.3)
        a, b = root_a.snapshot, root_b.snapshot
        assert a is not None and b is not None
        assert dict(a.provenance) == {"a-1": 20, "a-2": 20}
        assert dict(b.provenance) == {"site-a": 20}
        assert (a.deployment, b.deployment) == ("alpha", "beta")
        assert root_a.rejects["foreign_deployment"] == 1
        assert root_b.rejects["foreign_deployment"] == 0
        assert set(root_a.rejects) <= {"unknown_child", "foreign_deployment"}
        assert set(root_b.rejects) <= {"unknown_child"}
        # the refusal is counted in the status document too
        assert root_a.status_detail().rejects["foreign_deployment"] == 1
    finally:
        for agent in running:
            await agent.aclose()
        capture.__exit__(None, None, None)
    details = {
        (e.get("node"), e.get("reason")): e.get("detail")
        for e in logs
        if e.get("event") == "message_rejected"
    }
    assert (
        details[("root", "unknown_child")]
        in {
            "snapshot from 'site-a' which is not a child of 'root' in topology 'alpha': another "
            "deployment on this broker? give each deployment its own prefix",
            "snapshot from 'a-1' which is not a child of 'root' in topology 'alpha': another "
            "deployment on this broker? give each deployment its own prefix",
        }
        or "'root' in topology 'beta'" in details[("root", "unknown_child")]
    )
    foreign = details[("root", "foreign_deployment")]
    assert "'a-1' of deployment 'beta', not 'alpha'" in foreign
    assert "own prefix" in foreign
