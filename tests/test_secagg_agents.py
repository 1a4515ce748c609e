"""Secure aggregation in the deployed runtime, end to end against a real Mosquitto (issue 26).

A root over one site of four leaves of mechanism ``"gaussian-secagg"`` (``t = 3``), all agents
in this process (`LeafAgent`, `AggregatorAgent`), slots of a few seconds: the leaves' readings
go in, the site releases slots, the root's model arrives with the leaves' guarantee and
matches the offline answer (epsilon is huge, so the noise is negligible); then one leaf is
stopped during a slot, and that slot completes from the three others or is skipped and
reported, never released from fewer than ``t``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path

import aiomqtt
import numpy as np
import pytest

pytest.importorskip("cryptography")
pytest.importorskip("shamirs")

from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.fpca import principal_angles
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology, parse_topology
from edge_runtime.wire import SubspaceMessage, decode_subspace, encode_readings

D = 6
RANK = 2
ROWS = 60
SLOT_S = 8.0  # phase timeouts 0.67, 0.67, 2, 0.67 s (slot_timeouts): room on a loaded machine
LEAVES = ("pi-0", "pi-1", "pi-2", "pi-3")
EPSILON = 1e6  # negligible noise: the model is the exact answer's


def secagg_topology() -> Topology:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    lines = [
        f'prefix = "{prefix}"',
        "[defaults]",
        f"rank = {RANK}",
        "[[nodes]]",
        'id = "root"',
        "[[nodes]]",
        'id = "site"',
        'parent = "root"',
        f"secagg_slot_s = {SLOT_S}",
    ]
    for leaf in LEAVES:
        lines += ["[[nodes]]", f'id = "{leaf}"', 'parent = "site"']
        lines += [f'sensor_topic = "{prefix}-sensors/{leaf}"', 'mechanism = "gaussian-secagg"']
        lines += [f"epsilon = {EPSILON}", "delta = 1e-5", "clip_norm = 30.0", "release_horizon = 1"]
    return parse_topology("\n".join(lines) + "\n")


def data(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(D, RANK)))[0]
    out = {}
    for leaf in LEAVES:
        scores = rng.normal(size=(ROWS, RANK)) * np.array([10.0, 4.0])
        out[leaf] = scores @ basis.T + 0.1 * rng.normal(size=(ROWS, D))
    return out


async def wait_for(condition, timeout_s: float, what: str) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            while not condition():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}") from None


@pytest.mark.mqtt
async def test_a_secagg_site_releases_slots_to_the_root_and_survives_a_leaf_stopped_mid_slot(
    mosquitto,
) -> None:
    topology = secagg_topology()
    settings = AgentSettings(host=mosquitto.host, port=mosquitto.port, timeout_s=5.0)
    rows = data()
    models: list[SubspaceMessage] = []
    async with contextlib.AsyncExitStack() as stack:
        listener = await stack.enter_async_context(
            aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5)
        )
        await listener.subscribe(topology.model_topic(), qos=1)

        async def listen() -> None:
            async for message in listener.messages:
                if message.payload:
                    models.append(decode_subspace(bytes(message.payload)))  # type: ignore[arg-type]

        listening = asyncio.create_task(listen())
        stack.callback(listening.cancel)
        root = await stack.enter_async_context(AggregatorAgent(topology, "root", settings))
        site = await stack.enter_async_context(
            AggregatorAgent(topology, "site", settings, n_features=D)
        )
        leaves = {}
        for leaf in LEAVES:
            leaves[leaf] = await stack.enter_async_context(
                LeafAgent(topology, leaf, settings, n_features=D)
            )
        for agent in [root, site, *leaves.values()]:
            await agent.wait_connected(5)
        assert site.secagg is not None and site.secagg.site is not None
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as sensor:
            for leaf, values in rows.items():
                topic = topology.nodes[leaf].sensor_topic
                for i in range(0, ROWS, 10):
                    await sensor.publish(topic, encode_readings(values[i : i + 10]), qos=1)
        await wait_for(
            lambda: all(a.release_shell.release.pending_rows == ROWS for a in leaves.values()),
            5,
            "the leaves' readings",
        )

        # slot 0: every leaf survives, the root's model arrives
        await wait_for(
            lambda: site.secagg.site.status()["slots_released"] >= 1, 3 * SLOT_S, "slot 0"
        )
        expected = dict.fromkeys(LEAVES, ROWS)  # from the leaves' status documents
        await wait_for(
            lambda: bool(models) and dict(models[-1].provenance) == expected, 5, "the root's model"
        )
        model = models[-1]
        assert model.n_samples == len(LEAVES) * ROWS
        assert model.privacy is not None and model.privacy.mechanism == "gaussian-secagg"
        assert model.privacy.epsilon == EPSILON
        exact = np.linalg.svd(np.vstack(list(rows.values())), full_matrices=False)[2][:RANK].T
        assert np.max(principal_angles(model.subspace.basis, exact)) < 0.02  # random: ~1
        first = site.secagg.site.status()["recent"][0]
        assert first["released"] and first["survivors"] == 4
        # released at the 3rd unmask response: the 4th is the protocol's surplus, not a reject
        await wait_for(
            lambda: site.secagg.surplus_unmask_responses == 1, 5, "the 4th unmask response"
        )
        assert site.rejects["secagg_late"] == 0
        assert all(
            a.release_shell.release.ledger()["readings_released"] == ROWS for a in leaves.values()
        )

        # slot 1: pi-3 stops once the slot started (after its advertisement was taken)
        await wait_for(lambda: site.secagg.site.slot is not None, 2 * SLOT_S, "slot 1 to start")
        assert site.secagg.site.slot == 1
        await leaves["pi-3"].aclose()
        await wait_for(
            lambda: len(site.secagg.site.status()["recent"]) >= 2, 2 * SLOT_S, "slot 1's outcome"
        )
        status = site.status_detail()
        recent = status.extra["secagg"]["recent"]
        second = recent[1]
        assert second["slot"] == 1
        if second["released"]:
            assert second["survivors"] == 3
        else:
            assert second["reason"]
        assert all(r["survivors"] >= 3 for r in recent if r["released"])
        assert status.extra["secagg"]["threshold"] == 3
        leaf_status = leaves["pi-0"].status_detail().extra["secagg"]
        assert leaf_status["mechanism"] == "gaussian-secagg"
        assert leaf_status["slots_contributed"] >= 1


def test_a_secagg_leaf_with_a_state_directory_writes_no_checkpoint(tmp_path: Path) -> None:
    # Its pending slot increment is in no checkpoint: a checkpoint of its local estimator
    # would confirm readings that a crash loses for the site's sum. Confirmations follow the
    # readings revealed in a slot only.
    leaf = LeafAgent(secagg_topology(), "pi-0", n_features=D, state_dir=tmp_path)
    assert leaf.checkpoint_path is None
    assert not leaf.core.checkpointing
    assert leaf.release_shell.revealed == {}


def test_a_deployed_configuration_keeps_a_secagg_leafs_local_estimator_without_privacy() -> None:
    import dataclasses

    leaf = LeafAgent(secagg_topology(), "pi-0", n_features=D)
    new = dataclasses.replace(leaf.config, valid_range=(-100.0, 100.0))
    change = leaf.core.apply_config(leaf.config, new, "v2", 0.0)
    assert change.applied and change.refused is None
    assert leaf.core.config.valid_range == (-100.0, 100.0)  # the live key applies
    assert leaf.core.config.epsilon is None and leaf.core.config.mechanism is None
    leaf.core.apply(np.ones((3, D)), 0.0)  # its first readings: a local estimator, no privacy
    assert leaf.core.estimator is not None and leaf.core.estimator.privacy is None


def test_a_secagg_node_without_the_extra_stops_at_start_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    from edge_runtime.secagg.errors import SecAggError

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "shamirs" else real(name, *a)
    )
    topology = secagg_topology()
    with pytest.raises(SecAggError, match=r"needs the secagg extra, missing shamirs: pip install"):
        LeafAgent(topology, "pi-0", n_features=D)
    with pytest.raises(SecAggError, match="'site'"):
        AggregatorAgent(topology, "site", n_features=D)
