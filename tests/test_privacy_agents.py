"""Differential privacy in the runtime, against a real Mosquitto: nothing unreleased is published.

A private leaf's published snapshots must be exactly the released summaries of `FPCAEdge`
with the same privacy settings, mechanism, horizon and seed (block by block, and its idle /
final flush as one short block), every message must carry the configured `PrivacyParams`
(mechanism and neighbours included), aggregators must report the weakest guarantee of the
children they cover (mixed mechanisms joined by ``+``), and status documents each device's
guarantee and ledger. Restores never bring back a summary under other privacy settings
(another mechanism or release horizon included) nor replay a noise stream.
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

from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent, weakest_privacy
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.checkpoint import load_checkpoint, save_checkpoint
from edge_runtime.fpca import FPCAEdge, Subspace
from edge_runtime.fpca.privacy import noise_std
from edge_runtime.fpca.private_gram import release_noise_std
from edge_runtime.monitor import ModelWatcher, covers, privacy_of
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import DEFAULT_RELEASE_HORIZON, Topology, parse_topology
from edge_runtime.wire import (
    PrivacyParams,
    PrivacyStatus,
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
PARAMS = PrivacyParams(2.0, 1e-5, 4.0)  # mechanism "gaussian", replace-one: the defaults
EQ8 = PrivacyParams(2.0, 1e-5, 4.0, mechanism="fpca-eq8")


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
    """The TOML keys of a leaf with ``params`` (``mechanism`` written only for eq. (8), so
    the gaussian leaves exercise the topology's default)."""
    mechanism = {} if params.mechanism == "gaussian" else {"mechanism": params.mechanism}
    return {
        "epsilon": params.epsilon,
        "delta": params.delta,
        "clip_norm": params.clip_norm,
        **mechanism,
        **more,
    }


def settings_for(broker) -> AgentSettings:
    # float64 snapshots on the wire: these tests compare with the offline answer to 1e-9
    return AgentSettings(host=broker.host, port=broker.port, timeout_s=5.0, wire_dtype="float64")


def horizon_of(params: PrivacyParams) -> int:
    """The release horizon of a leaf of `private_topology` without ``release_horizon``."""
    return DEFAULT_RELEASE_HORIZON if params.mechanism == "gaussian" else 1


def reference(params: PrivacyParams, seed: int | None, horizon: int | None = None) -> FPCAEdge:
    """The estimator a private leaf of `private_topology` runs (same settings and seed)."""
    return FPCAEdge(
        D,
        RANK,
        block_size=BLOCK,
        privacy=(params.epsilon, params.delta),
        clip_norm=params.clip_norm,
        random_state=seed,
        mechanism=params.mechanism,
        horizon=horizon_of(params) if horizon is None else horizon,
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
@pytest.mark.parametrize("params", [PARAMS, EQ8], ids=["gaussian", "fpca-eq8"])
async def test_a_private_leaf_publishes_exactly_the_masked_block_summaries(mosquitto, params):
    topology = private_topology({"leaf": keys_of(params, noise_seed=SEED)})
    data = readings(3 * BLOCK, seed=1)
    expected = {}
    est = reference(params, SEED)
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
        assert message.privacy == params
        assert (message.privacy.mechanism, message.privacy.neighbours) == (
            params.mechanism,
            "replace-one",
        )
        assert message.provenance == {"leaf": message.n_samples}
        assert_same_subspace(message.subspace, expected[message.n_samples])


@pytest.mark.mqtt
@pytest.mark.parametrize("params", [PARAMS, EQ8], ids=["gaussian", "fpca-eq8"])
async def test_the_idle_flush_publishes_the_pending_rows_as_one_masked_short_block(
    mosquitto, params
):
    topology = private_topology({"leaf": keys_of(params, noise_seed=SEED)}, idle_flush_s=0.3)
    data = readings(BLOCK + 5, seed=2)  # one block, then 5 pending rows
    est = reference(params, SEED).partial_fit(data[:BLOCK])
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
    assert detail.privacy is not None and detail.privacy.releases == 2  # the block, the flush
    assert [m.n_samples for m in published] in ([BLOCK, BLOCK + 5], [BLOCK + 5])
    for message in published:
        assert message.privacy == params
        want = after_block if message.n_samples == BLOCK else flushed
        assert_same_subspace(message.subspace, want)
    last = published[-1].subspace.singular_values
    size = min(last.size, unmasked.rank)
    assert not np.allclose(last[:size], unmasked.singular_values[:size], rtol=1e-3)


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
def privacy_message(node: str, privacy: PrivacyParams | None) -> SubspaceMessage:
    sub = Subspace(np.eye(3)[:, :1], np.ones(1), 5)
    return SubspaceMessage(node, "e", 1, sub, 0.0, privacy, {node: 5})


def test_weakest_privacy_is_none_if_any_is_none_else_the_largest_of_each_parameter():
    a = privacy_message("a", PrivacyParams(1.0, 1e-6, 9.0))
    b = privacy_message("b", PrivacyParams(3.0, 1e-7, 2.0))
    assert weakest_privacy([a]) == a.privacy
    assert weakest_privacy([a, b]) == PrivacyParams(3.0, 1e-6, 9.0)
    assert weakest_privacy([a, privacy_message("c", None)]) is None
    assert weakest_privacy([]) is None


def test_weakest_privacy_joins_distinct_mechanisms_sorted_and_keeps_a_shared_one():
    gaussian = privacy_message("a", PrivacyParams(1.0, 1e-6, 9.0))
    eq8 = privacy_message("b", PrivacyParams(3.0, 1e-7, 2.0, mechanism="fpca-eq8"))
    both = weakest_privacy([gaussian, eq8])
    assert both == PrivacyParams(3.0, 1e-6, 9.0, mechanism="fpca-eq8+gaussian")
    assert both.neighbours == "replace-one"  # shared: kept as it is
    assert weakest_privacy([eq8, gaussian]) == both  # order does not matter
    # a sub-aggregator's join is split first: no "fpca-eq8+gaussian+gaussian"
    upper = privacy_message("site", both)
    assert weakest_privacy([upper, gaussian]).mechanism == "fpca-eq8+gaussian"
    other = privacy_message("c", PrivacyParams(1.0, 1e-6, 9.0, neighbours="add-remove"))
    assert weakest_privacy([gaussian, other]).neighbours == "add-remove+replace-one"
    long = [
        privacy_message(f"n{i}", PrivacyParams(1.0, 1e-6, 1.0, mechanism=f"mechanism-{i:02d}"))
        for i in range(4)
    ]
    assert weakest_privacy(long).mechanism == "mixed"  # the join would exceed 32 characters


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
        assert watcher.privacy == model.privacy
        assert (None if watcher.privacy is None else list(watcher.privacy.to_json().items())) == (
            None
            if model.privacy is None
            else [
                ("epsilon", model.privacy.epsilon),
                ("delta", model.privacy.delta),
                ("clip_norm", model.privacy.clip_norm),
                ("mechanism", model.privacy.mechanism),
                ("neighbours", model.privacy.neighbours),
            ]
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
async def test_a_private_gaussian_tree_carries_its_mechanism_and_neighbours_to_the_root(
    mosquitto,
):
    topology = private_topology({"a": keys_of(PARAMS), "b": keys_of(PARAMS)}, idle_flush_s=0.3)
    model = await run_tree(
        mosquitto, topology, {"a": readings(2 * BLOCK, seed=21), "b": readings(BLOCK, seed=22)}
    )
    assert model.privacy == PARAMS
    assert (model.privacy.mechanism, model.privacy.neighbours) == ("gaussian", "replace-one")
    assert privacy_of(model) == PrivacyParams(
        PARAMS.epsilon, PARAMS.delta, PARAMS.clip_norm, "gaussian", "replace-one"
    )
    assert list(privacy_of(model).to_json().items()) == [
        ("epsilon", PARAMS.epsilon),
        ("delta", PARAMS.delta),
        ("clip_norm", PARAMS.clip_norm),
        ("mechanism", "gaussian"),
        ("neighbours", "replace-one"),
    ]


@pytest.mark.mqtt
async def test_an_aggregator_over_gaussian_and_eq8_leaves_reports_both_mechanisms(mosquitto):
    topology = private_topology({"g": keys_of(PARAMS), "e": keys_of(EQ8)}, idle_flush_s=0.3)
    model = await run_tree(
        mosquitto, topology, {"g": readings(BLOCK, seed=23), "e": readings(BLOCK + 2, seed=24)}
    )
    assert model.privacy == PrivacyParams(2.0, 1e-5, 4.0, mechanism="fpca-eq8+gaussian")
    assert model.privacy.neighbours == "replace-one"
    host, port = mosquitto.host, mosquitto.port
    root = decode_status(await collect_retained(host, port, topology.status_detail_topic("root")))
    assert root.privacy is not None
    assert (root.privacy.mechanism, root.privacy.neighbours) == (
        "fpca-eq8+gaussian",
        "replace-one",
    )
    assert (root.privacy.noise_std, root.privacy.releases, root.privacy.horizon) == (None,) * 3
    children = json.loads(await collect_retained(host, port, topology.status_detail_topic("root")))[
        "extra"
    ]["children"]
    assert (children["g"]["mechanism"], children["e"]["mechanism"]) == ("gaussian", "fpca-eq8")


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
def clipped_rows(rows: np.ndarray, clip_norm: float) -> int:
    return int(np.count_nonzero(np.linalg.norm(rows, axis=1) > clip_norm))


@pytest.mark.mqtt
async def test_status_documents_show_each_devices_guarantee_and_ledger(mosquitto):
    topology = private_topology(
        {
            "gaussian": keys_of(PARAMS, release_horizon=4),
            "eq8": keys_of(EQ8, chunk_size=3),
            "plain": {},
        },
        idle_flush_s=0.3,
    )
    rows = {
        "gaussian": readings(2 * BLOCK + 4, seed=11),  # 2 blocks and a flushed short one
        "eq8": readings(BLOCK, seed=25),
        "plain": readings(10, seed=12),
    }
    assert clipped_rows(rows["gaussian"], PARAMS.clip_norm) > 0  # the count is exercised
    await run_tree(mosquitto, topology, rows)
    host, port = mosquitto.host, mosquitto.port
    docs = {
        node: json.loads(await collect_retained(host, port, topology.status_detail_topic(node)))
        for node in topology.nodes
    }
    assert docs["gaussian"]["privacy"] == {
        "mechanism": "gaussian",
        "epsilon": PARAMS.epsilon,
        "delta": PARAMS.delta,
        "neighbours": "replace-one",
        "clip_norm": PARAMS.clip_norm,
        "noise_std": release_noise_std(PARAMS.epsilon, PARAMS.delta, 4),
        "block_size": BLOCK,
        "chunk_size": None,
        "horizon": 4,
        "releases": 3,
        "clipped": clipped_rows(rows["gaussian"], PARAMS.clip_norm),
    }
    assert docs["eq8"]["privacy"] == {
        "mechanism": "fpca-eq8",
        "epsilon": EQ8.epsilon,
        "delta": EQ8.delta,
        "neighbours": "replace-one",
        "clip_norm": EQ8.clip_norm,
        "noise_std": noise_std(EQ8.epsilon, EQ8.delta, D, BLOCK),
        "block_size": BLOCK,
        "chunk_size": 3,
        "horizon": None,
        "releases": 1,
        "clipped": clipped_rows(rows["eq8"], EQ8.clip_norm),
    }
    assert docs["plain"]["privacy"] is None
    assert docs["root"]["privacy"] is None  # covers the plain leaf
    children = docs["root"]["extra"]["children"]
    assert (children["gaussian"]["epsilon"], children["plain"]["epsilon"]) == (
        PARAMS.epsilon,
        None,
    )
    for node in topology.nodes:  # and every document is valid for our own decoder
        detail = decode_status(
            await collect_retained(host, port, topology.status_detail_topic(node))
        )
        assert (detail.privacy is None) == (docs[node]["privacy"] is None)


def test_a_private_leaf_reports_its_guarantee_before_its_first_reading():
    topology = private_topology({"leaf": keys_of(PARAMS)})
    status = LeafAgent(topology, "leaf").status_detail().privacy
    sigma = release_noise_std(PARAMS.epsilon, PARAMS.delta, DEFAULT_RELEASE_HORIZON)
    assert status == PrivacyStatus(
        PARAMS.epsilon,
        PARAMS.delta,
        PARAMS.clip_norm,
        noise_std=sigma,  # known before the width: sigma is in unit-ball Gram units
        block_size=BLOCK,
        mechanism="gaussian",
        neighbours="replace-one",
        horizon=DEFAULT_RELEASE_HORIZON,
        releases=0,
        clipped=0,
    )
    assert status.params == PARAMS
    with_width = LeafAgent(topology, "leaf", n_features=D).status_detail().privacy
    assert with_width == status


def test_an_eq8_leaf_reports_a_full_blocks_omega_once_the_width_is_known():
    topology = private_topology({"leaf": keys_of(EQ8)})
    status = LeafAgent(topology, "leaf").status_detail().privacy
    assert status is not None
    assert status.params == EQ8
    assert (status.noise_std, status.block_size, status.chunk_size) == (None, BLOCK, None)
    assert (status.horizon, status.releases, status.clipped) == (None, 0, 0)
    with_width = LeafAgent(topology, "leaf", n_features=D).status_detail().privacy
    assert with_width is not None
    assert with_width.noise_std == noise_std(EQ8.epsilon, EQ8.delta, D, BLOCK)
    assert with_width.chunk_size == min(D, BLOCK)  # FPCAEdge's default


def test_a_gaussian_leaf_without_block_size_reports_the_mechanisms_default_once_known():
    prefix = f"t{uuid.uuid4().hex[:10]}"
    topology = parse_topology(
        f'prefix = "{prefix}"\n[defaults]\nrank = {RANK}\n[[nodes]]\nid = "root"\n'
        '[[nodes]]\nid = "leaf"\nparent = "root"\n'
        "epsilon = 1.0\ndelta = 1e-5\nclip_norm = 4.0\nrelease_horizon = 1\n"
    )
    assert LeafAgent(topology, "leaf").status_detail().privacy.block_size is None
    agent = LeafAgent(topology, "leaf", n_features=48)
    assert agent.estimator.block_size == 517  # gaussian_default_block_size(1, 1e-5, 48, 1)
    assert agent.status_detail().privacy.block_size == 517


# ---------------------------------------------------------------------------------- restores
def leaf_checkpoint(path: Path, est: FPCAEdge, restarts: int | None = None) -> None:
    """A leaf's checkpoint file as `LeafAgent.checkpoint` writes it."""
    state: dict[str, object] = est.get_state()
    state.update(n_features=D, leaf_epoch="old-epoch", leaf_seq=3, ingested={"s": BLOCK - 1})
    if restarts is not None:
        state["noise_restarts"] = restarts
    save_checkpoint(path, state)


@pytest.mark.parametrize("params", [PARAMS, EQ8], ids=["gaussian", "fpca-eq8"])
def test_a_restore_from_checkpoint_draws_fresh_noise_from_the_seed_and_a_restart_count(
    tmp_path, params
):
    topology = private_topology({"leaf": keys_of(params, noise_seed=SEED)})
    path = tmp_path / "leaf.ckpt"
    before = reference(params, SEED).partial_fit(readings(BLOCK + 3, seed=13))
    leaf_checkpoint(path, before)
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
        # nothing released is lost: the same estimate, releases and clipped readings
        assert_same_subspace(agent.estimator.tracked_subspace, before.tracked_subspace)
        assert (agent.estimator.n_releases_, agent.estimator.n_clipped_) == (
            before.n_releases_,
            before.n_clipped_,
        )
        agent.estimator.partial_fit(more)
        rng = np.random.default_rng(np.random.SeedSequence([SEED, restarts]))
        want = FPCAEdge.from_state(saved, random_state=rng)
        want.partial_fit(more)
        assert_same_subspace(agent.estimator.tracked_subspace, want.tracked_subspace)
        results.append(agent.estimator.tracked_subspace)
    # never the noise of the seed's own stream, nor the checkpoint's open segment again
    replayed = FPCAEdge.from_state(saved, random_state=SEED).partial_fit(more).tracked_subspace
    for result in results:
        assert not np.allclose(result.singular_values, replayed.singular_values)
    assert not np.allclose(results[0].singular_values, results[1].singular_values)


def test_restore_closes_a_gaussian_segment_with_a_fresh_key_and_keeps_the_rest():
    est = reference(PARAMS, SEED, horizon=4).partial_fit(readings(2 * BLOCK, seed=26))
    state = est.get_state()
    assert state["gram_step"] == 2  # two releases into a segment of 4
    out = FPCAEdge.from_state(state, random_state=7).get_state()
    assert (out["gram_step"], int(np.abs(out["gram_open"]).max())) == (0, 0)
    np.testing.assert_array_equal(out["gram_closed"], state["gram_released"])
    np.testing.assert_array_equal(out["gram_released"], state["gram_released"])
    assert not np.array_equal(out["gram_key"], state["gram_key"])
    assert out["gram_releases"] == state["gram_releases"] == 2
    assert state["gram_step"] == 2  # the input is not modified
    restored = FPCAEdge.from_state(state)
    assert_same_subspace(restored.tracked_subspace, est.tracked_subspace)


@pytest.mark.parametrize(
    "checkpointed", ["plain", "other-epsilon", "other-mechanism", "other-horizon"]
)
def test_a_checkpoint_under_other_privacy_settings_is_refused_and_counted(tmp_path, checkpointed):
    topology = private_topology({"leaf": keys_of(PARAMS, noise_seed=SEED)})
    if checkpointed == "plain":
        est = FPCAEdge(D, RANK, block_size=BLOCK)
    elif checkpointed == "other-epsilon":
        est = reference(PrivacyParams(8.0, PARAMS.delta, PARAMS.clip_norm), SEED)
    elif checkpointed == "other-mechanism":  # e.g. a checkpoint from before issue 10
        est = reference(EQ8, SEED)
    else:  # the same guarantee per reading, but another continual release
        est = reference(PARAMS, SEED, horizon=4)
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
@pytest.mark.parametrize("retained", ["plain", "other-clip-norm", "other-mechanism"])
async def test_a_retained_snapshot_under_other_privacy_settings_is_not_restored(
    mosquitto, retained
):
    topology = private_topology({"leaf": keys_of(PARAMS, noise_seed=SEED)}, idle_flush_s=0.3)
    rows = readings(BLOCK, seed=17)
    if retained == "plain":
        old, privacy = FPCAEdge(D, RANK, block_size=BLOCK), None
    elif retained == "other-clip-norm":
        privacy = PrivacyParams(PARAMS.epsilon, PARAMS.delta, 100.0)
        old = reference(privacy, SEED)
    else:
        old, privacy = reference(EQ8, SEED), EQ8
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
        mechanism="gaussian",
        horizon=DEFAULT_RELEASE_HORIZON,
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
    assert summary["privacy"] == {
        "epsilon": 1.0,
        "delta": 1e-5,
        "clip_norm": 8230.0,
        "mechanism": "gaussian",
        "neighbours": "replace-one",
    }
    # the utility cost (the topology's comments): about 3.4; eq. (8) gave 21-25, random ~20
    assert 1.0 <= summary["error_ratio"] <= 6.0


@pytest.fixture
def mosquitto(shared_mosquitto):
    """This worker's broker (conftest): the tests here are isolated by their topic prefix."""
    return shared_mosquitto
