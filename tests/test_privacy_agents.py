"""Differential privacy in the runtime, against a real Mosquitto: nothing unmasked is published.

A private leaf's published snapshots must be exactly the masked summaries of `FPCAEdge` with
the same privacy settings and seed (block by block, and its idle / final flush as one short
masked block), every message must carry the configured `PrivacyParams`, aggregators must
report the weakest guarantee of the children they cover, and status documents each device's
guarantee. Restores never bring back a summary under other privacy settings nor replay a
noise stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiomqtt
import numpy as np
import pytest
from helpers import collect_retained, low_rank_data

from edge_runtime.agents import AgentSettings, AggregatorAgent, LeafAgent
from edge_runtime.agents.aggregator import weakest_privacy
from edge_runtime.checkpoint import load_checkpoint, save_checkpoint
from edge_runtime.fpca import FPCAEdge, Subspace
from edge_runtime.fpca.privacy import noise_std
from edge_runtime.monitor import ModelWatcher, covers
from edge_runtime.topology import Topology, parse_topology
from edge_runtime.wire import (
    PrivacyParams,
    SubspaceMessage,
    decode_status,
    decode_subspace,
    encode_readings,
    encode_subspace,
)

ROOT = Path(__file__).resolve().parent.parent
PRIVATE_TOPOLOGY = ROOT / "topologies" / "motes-light-private.toml"
D = 6  # features of the synthetic readings
BLOCK = 10
RANK = 2
SEED = 1234
PARAMS = PrivacyParams(2.0, 1e-5, 4.0)


def private_topology(
    leaves: dict[str, dict[str, object]], *, idle_flush_s: float = 30.0
) -> Topology:
    """root -> the given leaves; each leaf's dict holds its extra TOML keys (privacy)."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    lines = [
        f'prefix = "{prefix}"',
        "[defaults]",
        f"rank = {RANK}",
        f"block_size = {BLOCK}",
        f"idle_flush_s = {idle_flush_s}",
        "[[nodes]]",
        'id = "root"',
    ]
    for leaf, keys in leaves.items():
        lines += ["[[nodes]]", f'id = "{leaf}"', 'parent = "root"']
        lines += [f'sensor_topic = "{prefix}-sensors/{leaf}"']
        lines += [f"{key} = {value!r}" for key, value in keys.items()]
    return parse_topology("\n".join(lines) + "\n")


def keys_of(params: PrivacyParams, **more: object) -> dict[str, object]:
    return {
        "epsilon": params.epsilon,
        "delta": params.delta,
        "clip_norm": params.clip_norm,
        **more,
    }


def settings_for(broker) -> AgentSettings:
    # float64 snapshots on the wire: these tests compare with the offline answer to 1e-9
    return AgentSettings(host=broker.host, port=broker.port, timeout_s=5.0, wire_dtype="float64")


def reference(params: PrivacyParams, seed: int | None) -> FPCAEdge:
    """The estimator a private leaf of `private_topology` runs (same settings and seed)."""
    return FPCAEdge(
        D,
        RANK,
        block_size=BLOCK,
        privacy=(params.epsilon, params.delta),
        clip_norm=params.clip_norm,
        random_state=seed,
    )


def readings(n: int, seed: int = 0) -> np.ndarray:
    """Rows of norm ~2-8 around ``clip_norm`` = 4: some are clipped, some are not."""
    return 0.5 * low_rank_data(n, D, RANK, seed=seed)


async def publish_rows(broker, topic: str, rows: np.ndarray, start: int = 0) -> None:
    async with aiomqtt.Client(broker.host, broker.port, timeout=5) as client:
        for i, row in enumerate(rows, start=start):
            await client.publish(topic, encode_readings(row, source="s", seq=i), qos=1)


@contextlib.asynccontextmanager
async def collecting(broker, topic: str) -> AsyncIterator[list[SubspaceMessage]]:
    """Every message published on ``topic`` while the context is open, decoded."""
    messages: list[SubspaceMessage] = []
    async with aiomqtt.Client(broker.host, broker.port, timeout=5) as client:
        await client.subscribe(topic, qos=1)

        async def listen() -> None:
            async for message in client.messages:
                if message.payload:
                    messages.append(decode_subspace(bytes(message.payload)))  # type: ignore[arg-type]

        task = asyncio.create_task(listen())
        try:
            yield messages
            await asyncio.sleep(0.3)  # let the last deliveries in
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def wait_for(condition, timeout_s: float = 10.0, what: str = "condition") -> None:
    """Poll ``condition()`` every 20 ms, at most ``timeout_s`` seconds."""
    try:
        async with asyncio.timeout(timeout_s):
            while not condition():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}") from None


def assert_same_subspace(got: Subspace, want: Subspace) -> None:
    assert got.n_samples == want.n_samples
    assert got.basis.shape == want.basis.shape
    np.testing.assert_allclose(got.singular_values, want.singular_values, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.basis, want.basis, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------ leaves
@pytest.mark.mqtt
async def test_a_private_leaf_publishes_exactly_the_masked_block_summaries(mosquitto):
    topology = private_topology({"leaf": keys_of(PARAMS, noise_seed=SEED)})
    data = readings(3 * BLOCK, seed=1)
    expected = {}
    est = reference(PARAMS, SEED)
    for k in range(1, 4):
        est.partial_fit(data[(k - 1) * BLOCK : k * BLOCK])
        expected[k * BLOCK] = est.tracked_subspace
    async with (
        collecting(mosquitto, topology.subspace_topic("leaf")) as published,
        LeafAgent(topology, "leaf", settings_for(mosquitto), n_features=D) as agent,
    ):
        await agent.wait_connected(5)
        await publish_rows(mosquitto, topology.nodes["leaf"].sensor_topic, data)
        await wait_for(
            lambda: agent.snapshot is not None and agent.snapshot.n_samples == 3 * BLOCK,
            what="the third block's snapshot",
        )
    assert published, "no snapshot was published"
    assert {m.n_samples for m in published} <= set(expected)
    assert published[-1].n_samples == 3 * BLOCK
    for message in published:
        assert message.privacy == PARAMS
        assert message.provenance == {"leaf": message.n_samples}
        assert_same_subspace(message.subspace, expected[message.n_samples])


@pytest.mark.mqtt
async def test_the_idle_flush_publishes_the_pending_rows_as_one_masked_short_block(mosquitto):
    topology = private_topology({"leaf": keys_of(PARAMS, noise_seed=SEED)}, idle_flush_s=0.3)
    data = readings(BLOCK + 5, seed=2)  # one block, then 5 pending rows
    est = reference(PARAMS, SEED).partial_fit(data[:BLOCK])
    after_block = est.tracked_subspace
    est.partial_fit(data[BLOCK:])
    assert est.tracked_subspace.n_samples == BLOCK  # the 5 rows are not in a snapshot ...
    flushed = est.flush().tracked_subspace  # ... until they are flushed as a masked block
    assert flushed.n_samples == BLOCK + 5
    unmasked = FPCAEdge(D, RANK, block_size=BLOCK).partial_fit(data).tracked_subspace
    async with (
        collecting(mosquitto, topology.subspace_topic("leaf")) as published,
        LeafAgent(topology, "leaf", settings_for(mosquitto), n_features=D) as agent,
    ):
        await agent.wait_connected(5)
        await publish_rows(mosquitto, topology.nodes["leaf"].sensor_topic, data)
        await wait_for(
            lambda: agent.snapshot is not None and agent.snapshot.n_samples == BLOCK + 5,
            what="the idle flush",
        )
        assert agent.estimator.n_pending_ == 0
        detail = agent.status_detail()
    assert detail.extra["published_n_samples"] == BLOCK + 5
    assert detail.extra["pending_rows"] == 0
    assert [m.n_samples for m in published] in ([BLOCK, BLOCK + 5], [BLOCK + 5])
    for message in published:
        assert message.privacy == PARAMS
        want = after_block if message.n_samples == BLOCK else flushed
        assert_same_subspace(message.subspace, want)
    last = published[-1].subspace.singular_values
    assert not np.allclose(last, unmasked.singular_values[: last.size], rtol=1e-3)


@pytest.mark.mqtt
async def test_the_final_snapshot_of_a_private_leaf_is_a_flushed_masked_summary(mosquitto):
    topology = private_topology({"leaf": keys_of(PARAMS, noise_seed=SEED)})  # idle: 30 s
    data = readings(BLOCK + 7, seed=3)
    flushed = reference(PARAMS, SEED).partial_fit(data).flush().tracked_subspace
    settings = settings_for(mosquitto)
    async with LeafAgent(topology, "leaf", settings, n_features=D) as agent:
        await agent.wait_connected(5)
        await publish_rows(mosquitto, topology.nodes["leaf"].sensor_topic, data)
        await wait_for(lambda: agent.n_samples == BLOCK + 7, what="every reading ingested")
        # the block is published once the rate limit allows; the 7 pending rows are not
        await wait_for(lambda: agent.snapshot is not None, what="the block's snapshot")
        assert agent.snapshot.n_samples == BLOCK
    host, port = mosquitto.host, mosquitto.port
    final = decode_subspace(await collect_retained(host, port, topology.subspace_topic("leaf")))
    assert final.privacy == PARAMS
    assert_same_subspace(final.subspace, flushed)


@pytest.mark.mqtt
async def test_a_private_leaf_without_a_seed_still_masks_and_labels_every_snapshot(mosquitto):
    topology = private_topology({"leaf": keys_of(PARAMS)}, idle_flush_s=0.3)
    data = readings(2 * BLOCK + 3, seed=4)
    async with (
        collecting(mosquitto, topology.subspace_topic("leaf")) as published,
        LeafAgent(topology, "leaf", settings_for(mosquitto)) as agent,
    ):
        await agent.wait_connected(5)
        await publish_rows(mosquitto, topology.nodes["leaf"].sensor_topic, data)
        await wait_for(
            lambda: agent.snapshot is not None and agent.snapshot.n_samples == len(data),
            what="the idle flush",
        )
    assert published
    assert all(m.privacy == PARAMS for m in published)
    assert all(m.n_samples in (BLOCK, 2 * BLOCK, len(data)) for m in published)


# -------------------------------------------------------------------------------- aggregators
def test_weakest_privacy_is_none_if_any_is_none_else_the_largest_of_each_parameter():
    sub = Subspace(np.eye(3)[:, :1], np.ones(1), 5)

    def message(node: str, privacy: PrivacyParams | None) -> SubspaceMessage:
        return SubspaceMessage(node, "e", 1, sub, 0.0, privacy, {node: 5})

    a = message("a", PrivacyParams(1.0, 1e-6, 9.0))
    b = message("b", PrivacyParams(3.0, 1e-7, 2.0))
    assert weakest_privacy([a]) == a.privacy
    assert weakest_privacy([a, b]) == PrivacyParams(3.0, 1e-6, 9.0)
    assert weakest_privacy([a, message("c", None)]) is None
    assert weakest_privacy([]) is None


async def run_tree(broker, topology: Topology, data: dict[str, np.ndarray]) -> SubspaceMessage:
    """Run ``topology``'s agents, feed each leaf its rows, return the model covering them."""
    settings = settings_for(broker)
    expected = {leaf: len(rows) for leaf, rows in data.items()}
    async with contextlib.AsyncExitStack() as stack:
        root = await stack.enter_async_context(AggregatorAgent(topology, "root", settings))
        leaves = [LeafAgent(topology, leaf, settings, n_features=D) for leaf in topology.leaves()]
        for agent in leaves:
            await stack.enter_async_context(agent)
        watcher = await stack.enter_async_context(ModelWatcher(topology, settings))
        for agent in [root, *leaves]:
            await agent.wait_connected(5)
        for leaf, rows in data.items():
            await publish_rows(broker, topology.nodes[leaf].sensor_topic, rows)
        model = await watcher.wait_until(lambda m: covers(m, expected), 15)
        assert watcher.privacy == (
            None
            if model.privacy is None
            else {
                "epsilon": model.privacy.epsilon,
                "delta": model.privacy.delta,
                "clip_norm": model.privacy.clip_norm,
            }
        )
        await wait_for(lambda: root.snapshot is not None and covers(root.snapshot, expected))
        assert root.snapshot.privacy == model.privacy
        status = root.status_detail()
        assert (None if status.privacy is None else status.privacy.params) == model.privacy
    assert model is not None
    return model


@pytest.mark.mqtt
async def test_an_aggregator_over_a_private_and_a_plain_leaf_reports_no_guarantee(mosquitto):
    topology = private_topology({"private": keys_of(PARAMS), "plain": {}}, idle_flush_s=0.3)
    model = await run_tree(
        mosquitto, topology, {"private": readings(15, seed=5), "plain": readings(12, seed=6)}
    )
    assert model.privacy is None
    assert dict(model.provenance) == {"private": 15, "plain": 12}


@pytest.mark.mqtt
async def test_an_aggregator_over_two_private_leaves_reports_the_weakest_guarantee(mosquitto):
    strong, weak = PrivacyParams(0.5, 1e-7, 4.0), PrivacyParams(3.0, 1e-6, 2.0)
    topology = private_topology(
        {"strong": keys_of(strong), "weak": keys_of(weak)}, idle_flush_s=0.3
    )
    model = await run_tree(
        mosquitto, topology, {"strong": readings(20, seed=7), "weak": readings(13, seed=8)}
    )
    assert model.privacy == PrivacyParams(3.0, 1e-6, 4.0)
    assert dict(model.provenance) == {"strong": 20, "weak": 13}


@pytest.mark.mqtt
async def test_an_aggregator_reports_the_guarantee_of_the_children_it_covers_now(mosquitto):
    topology = private_topology({"private": keys_of(PARAMS), "plain": {}})
    settings = settings_for(mosquitto)
    sub = reference(PARAMS, SEED).partial_fit(readings(BLOCK, seed=9)).tracked_subspace
    plain = FPCAEdge(D, RANK, block_size=BLOCK).partial_fit(readings(BLOCK, seed=10))
    private_msg = SubspaceMessage("private", "e", 1, sub, 1.0, PARAMS, {"private": BLOCK})
    plain_msg = SubspaceMessage("plain", "e", 1, plain.tracked_subspace, 1.0, None, {"plain": 10})
    async with AggregatorAgent(topology, "root", settings) as root:
        await root.wait_connected(5)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            await client.publish(
                topology.subspace_topic("private"), encode_subspace(private_msg), qos=1
            )
            await wait_for(lambda: root.snapshot is not None, what="the first merge")
            assert root.snapshot.privacy == PARAMS
            assert root.model().privacy == PARAMS
            await client.publish(
                topology.subspace_topic("plain"), encode_subspace(plain_msg), qos=1
            )
            await wait_for(lambda: len(root.coverage()) == 2, what="the second merge")
            assert root.snapshot.privacy is None
            assert root.model().privacy is None
            assert root.status_detail().privacy is None


# ------------------------------------------------------------------------------------ status
@pytest.mark.mqtt
async def test_status_documents_show_each_devices_guarantee(mosquitto):
    topology = private_topology(
        {"private": keys_of(PARAMS, chunk_size=3), "plain": {}}, idle_flush_s=0.3
    )
    await run_tree(
        mosquitto, topology, {"private": readings(BLOCK, seed=11), "plain": readings(10, seed=12)}
    )
    host, port = mosquitto.host, mosquitto.port
    docs = {
        node: json.loads(await collect_retained(host, port, topology.status_detail_topic(node)))
        for node in topology.nodes
    }
    assert docs["private"]["privacy"] == {
        "epsilon": PARAMS.epsilon,
        "delta": PARAMS.delta,
        "clip_norm": PARAMS.clip_norm,
        "noise_std": noise_std(PARAMS.epsilon, PARAMS.delta, D, BLOCK),
        "block_size": BLOCK,
        "chunk_size": 3,
    }
    assert docs["plain"]["privacy"] is None
    assert docs["root"]["privacy"] is None  # covers the plain leaf
    children = docs["root"]["extra"]["children"]
    assert (children["private"]["epsilon"], children["plain"]["epsilon"]) == (PARAMS.epsilon, None)
    for node in topology.nodes:  # and every document is valid for our own decoder
        detail = decode_status(
            await collect_retained(host, port, topology.status_detail_topic(node))
        )
        assert (detail.privacy is None) == (docs[node]["privacy"] is None)


def test_a_private_leaf_reports_its_guarantee_before_its_first_reading():
    topology = private_topology({"leaf": keys_of(PARAMS)})
    status = LeafAgent(topology, "leaf").status_detail().privacy
    assert status is not None
    assert status.params == PARAMS
    assert (status.noise_std, status.block_size, status.chunk_size) == (None, BLOCK, None)
    with_width = LeafAgent(topology, "leaf", n_features=D).status_detail().privacy
    assert with_width is not None
    assert with_width.noise_std == noise_std(PARAMS.epsilon, PARAMS.delta, D, BLOCK)
    assert with_width.chunk_size == min(D, BLOCK)  # FPCAEdge's default


# ---------------------------------------------------------------------------------- restores
def leaf_checkpoint(path: Path, est: FPCAEdge, restarts: int | None = None) -> None:
    """A leaf's checkpoint file as `LeafAgent.checkpoint` writes it."""
    state: dict[str, object] = est.get_state()
    state.update(n_features=D, leaf_epoch="old-epoch", leaf_seq=3, ingested={"s": BLOCK - 1})
    if restarts is not None:
        state["noise_restarts"] = restarts
    save_checkpoint(path, state)


def test_a_restore_from_checkpoint_draws_fresh_noise_from_the_seed_and_a_restart_count(
    tmp_path,
):
    topology = private_topology({"leaf": keys_of(PARAMS, noise_seed=SEED)})
    path = tmp_path / "leaf.ckpt"
    leaf_checkpoint(path, reference(PARAMS, SEED).partial_fit(readings(BLOCK + 3, seed=13)))
    saved = load_checkpoint(path)
    assert saved is not None
    more = readings(BLOCK, seed=14)
    results = []
    for restarts in (1, 2):
        agent = LeafAgent(topology, "leaf", state_dir=tmp_path)
        assert agent.restored_from == "checkpoint"
        assert agent.epoch == "old-epoch"
        # the restart is on disk before any reading is masked
        assert load_checkpoint(path)["noise_restarts"] == restarts
        assert agent.noise_restarts == restarts
        agent.estimator.partial_fit(more)
        want = FPCAEdge.from_state(
            saved, random_state=np.random.default_rng(np.random.SeedSequence([SEED, restarts]))
        ).partial_fit(more)
        assert_same_subspace(agent.estimator.tracked_subspace, want.tracked_subspace)
        results.append(agent.estimator.tracked_subspace)
    replayed = FPCAEdge.from_state(saved, random_state=SEED).partial_fit(more).tracked_subspace
    for result in results:  # never the seed's own stream again
        assert not np.allclose(result.singular_values, replayed.singular_values)
    assert not np.allclose(results[0].singular_values, results[1].singular_values)


@pytest.mark.parametrize("checkpointed", ["plain", "other-epsilon"])
def test_a_checkpoint_under_other_privacy_settings_is_refused_and_counted(tmp_path, checkpointed):
    topology = private_topology({"leaf": keys_of(PARAMS, noise_seed=SEED)})
    if checkpointed == "plain":
        est = FPCAEdge(D, RANK, block_size=BLOCK)
    else:
        est = reference(PrivacyParams(8.0, PARAMS.delta, PARAMS.clip_norm), SEED)
    leaf_checkpoint(tmp_path / "leaf.ckpt", est.partial_fit(readings(BLOCK, seed=15)))
    agent = LeafAgent(topology, "leaf", n_features=D, state_dir=tmp_path)
    assert agent.restored_from is None
    assert agent.rejects["privacy_mismatch"] == 1
    assert agent.epoch != "old-epoch"
    assert agent.n_samples == 0
    assert agent.ingested == {}
    assert LeafAgent.snapshot_privacy(agent.estimator) == PARAMS
    # an earlier incarnation may have used the seed's stream: not again
    more = readings(BLOCK, seed=16)
    agent.estimator.partial_fit(more)
    seeded = reference(PARAMS, SEED).partial_fit(more).tracked_subspace
    assert not np.allclose(agent.estimator.tracked_subspace.singular_values, seeded.singular_values)


async def retain(broker, topic: str, message: SubspaceMessage) -> None:
    async with aiomqtt.Client(broker.host, broker.port, timeout=5) as client:
        await client.publish(topic, encode_subspace(message), qos=1, retain=True)


@pytest.mark.mqtt
@pytest.mark.parametrize("retained", ["plain", "other-clip-norm"])
async def test_a_retained_snapshot_under_other_privacy_settings_is_not_restored(
    mosquitto, retained
):
    topology = private_topology({"leaf": keys_of(PARAMS, noise_seed=SEED)}, idle_flush_s=0.3)
    rows = readings(BLOCK, seed=17)
    if retained == "plain":
        old, privacy = FPCAEdge(D, RANK, block_size=BLOCK), None
    else:
        privacy = PrivacyParams(PARAMS.epsilon, PARAMS.delta, 100.0)
        old = reference(privacy, SEED)
    old_msg = SubspaceMessage(
        "leaf", "old-epoch", 5, old.partial_fit(rows).tracked_subspace, 1.0, privacy, {"leaf": 10}
    )
    await retain(mosquitto, topology.subspace_topic("leaf"), old_msg)
    data = readings(BLOCK, seed=18)
    async with LeafAgent(topology, "leaf", settings_for(mosquitto), n_features=D) as agent:
        await agent.wait_connected(5)
        assert agent.restored_from is None
        assert agent.rejects["privacy_mismatch"] == 1
        await publish_rows(mosquitto, topology.nodes["leaf"].sensor_topic, data)
        await wait_for(
            lambda: agent.snapshot is not None and agent.snapshot.n_samples == BLOCK,
            what="a snapshot of the new readings",
        )
        assert agent.snapshot.epoch != "old-epoch"
        assert agent.snapshot.privacy == PARAMS


@pytest.mark.mqtt
async def test_a_retained_snapshot_under_the_same_privacy_is_restored_with_fresh_noise(
    mosquitto,
):
    topology = private_topology({"leaf": keys_of(PARAMS, noise_seed=SEED)}, idle_flush_s=0.3)
    old = reference(PARAMS, SEED).partial_fit(readings(BLOCK, seed=19)).tracked_subspace
    await retain(
        mosquitto,
        topology.subspace_topic("leaf"),
        SubspaceMessage("leaf", "old-epoch", 5, old, 1.0, PARAMS, {"leaf": BLOCK}),
    )
    data = readings(BLOCK, seed=20)
    async with LeafAgent(topology, "leaf", settings_for(mosquitto), n_features=D) as agent:
        await agent.wait_connected(5)
        assert agent.restored_from == "retained snapshot"
        assert not agent.rejects
        await publish_rows(mosquitto, topology.nodes["leaf"].sensor_topic, data)
        await wait_for(
            lambda: agent.snapshot is not None and agent.snapshot.n_samples == 2 * BLOCK,
            what="a snapshot of the restored and the new readings",
        )
        published = agent.snapshot
    assert published.epoch == "old-epoch" and published.seq == 6
    assert published.privacy == PARAMS
    seeded = FPCAEdge.from_subspace(
        old,
        rank=RANK,
        block_size=BLOCK,
        privacy=(PARAMS.epsilon, PARAMS.delta),
        clip_norm=PARAMS.clip_norm,
        random_state=SEED,
    ).partial_fit(data)
    assert not np.allclose(
        published.subspace.singular_values, seeded.tracked_subspace.singular_values
    )


# ----------------------------------------------------------------------------- command line
@pytest.mark.mqtt
def test_run_the_shipped_private_topology_reports_its_guarantee():
    proc = subprocess.run(
        [sys.executable, "-m", "edge_runtime.cli", "run", str(PRIVATE_TOPOLOGY), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["covered"] is True
    assert summary["leaves_reporting"] == summary["leaves_total"] == 8
    assert summary["root_n_samples"] == 7712
    assert summary["privacy"] == {"epsilon": 1.0, "delta": 1e-5, "clip_norm": 8630.0}
    assert summary["error_ratio"] >= 1.0  # the utility cost: see the topology's comments
