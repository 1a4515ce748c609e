"""Leaves reading local sensor sources (issue 11, item 2) against a real Mosquitto.

A command source printing Motes rows reaches the root with the offline estimate; a file source
survives an agent restart without double counting; bad lines are rejected and counted per
source; MQTT rejects are counted per ``src``; reject logging is journal-friendly.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

import aiomqtt
import numpy as np
import pytest
from helpers import collect_retained

from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.agents.common.core.reject_log import RejectLog as _RejectLog
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import FPCAEdge, merge_many, principal_angles
from edge_runtime.monitor import ModelWatcher, covers
from edge_runtime.settings import AgentSettings
from edge_runtime.sources import SourceError
from edge_runtime.topology import Topology, load_topology
from edge_runtime.wire import encode_readings

EDGE_RUNTIME = str(Path(sys.executable).parent / "edge-runtime")

RANK = 4
BLOCK = 50
LEAF = "pi-01"


def settings_for(broker) -> AgentSettings:
    # float64 snapshots: the estimate is compared with the offline one to 1e-8
    return AgentSettings(host=broker.host, port=broker.port, timeout_s=5.0, wire_dtype="float64")


def motes_rows(n: int) -> np.ndarray:
    return np.asarray(load_dataset("motes-light").data)[:n]


def write_csv(path: Path, rows: np.ndarray, mode: str = "w") -> None:
    with path.open(mode) as f:
        for row in rows:
            f.write(",".join(repr(float(v)) for v in row) + "\n")


def topology_with_source(tmp_path: Path, source: str) -> Topology:
    """root -> LEAF, the leaf reading ``source`` (a TOML inline table), in a file in tmp_path."""
    text = f"""
name = "local-source"
prefix = "t{uuid.uuid4().hex[:10]}"
[defaults]
rank = {RANK}
block_size = {BLOCK}
idle_flush_s = 0.2
[[nodes]]
id = "root"
[[nodes]]
id = "{LEAF}"
parent = "root"
source = {source}
"""
    path = tmp_path / "topology.toml"
    path.write_text(text)
    return load_topology(path)


def offline_model(rows: np.ndarray) -> np.ndarray:
    est = FPCAEdge(rows.shape[1], RANK, block_size=BLOCK)
    est.partial_fit(rows)
    return merge_many([est.tracked_subspace]).truncate(RANK).basis


async def wait_for(predicate, timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.02)


# ---------------------------------------------------------------- broker tests
@pytest.mark.mqtt
async def test_a_command_source_printing_motes_rows_gives_the_offline_estimate_at_the_root(
    mosquitto, tmp_path
):
    rows = motes_rows(600)
    write_csv(tmp_path / "motes.csv", rows)
    (tmp_path / "motes.sh").write_text(f'cat "{tmp_path / "motes.csv"}"\n')
    script = tmp_path / "motes.sh"
    topology = topology_with_source(
        tmp_path,
        f'{{ kind = "command", command = ["sh", "{script}"], format = "csv", restart = "never" }}',
    )
    settings = settings_for(mosquitto)
    leaf = LeafAgent(topology, LEAF, settings)
    assert leaf.subscriptions() == []  # a local source: no sensor topic
    async with (
        ModelWatcher(topology, settings) as watcher,
        AggregatorAgent(topology, "root", settings),
        leaf,
    ):
        model = await watcher.wait_until(lambda m: covers(m, {LEAF: len(rows)}), 20)
        await wait_for(lambda: leaf.status_detail().extra["source_state"] == "finished", 5)
        extra = leaf.status_detail().extra
    assert model is not None and model.n_samples == len(rows)
    assert principal_angles(model.subspace.basis, offline_model(rows)).max() < 1e-8
    assert extra["ingested"] == {f"command:{LEAF}": len(rows) - 1}
    assert extra["rejected_by_source"] == {}


@pytest.mark.mqtt
async def test_a_file_source_survives_an_agent_restart_without_double_counting(mosquitto, tmp_path):
    rows = motes_rows(500)
    data = tmp_path / "readings.csv"
    write_csv(data, rows[:300])
    topology = topology_with_source(tmp_path, '{ kind = "file", path = "readings.csv" }')
    sid = f"file:{data}"
    state = tmp_path / "state"
    settings = settings_for(mosquitto)
    async with (
        ModelWatcher(topology, settings) as watcher,
        AggregatorAgent(topology, "root", settings),
    ):
        async with LeafAgent(topology, LEAF, settings, state_dir=state) as first:
            await wait_for(lambda: first.checkpoints >= 1 and first.n_samples >= 100, 15)
        assert first.ingested[sid] == first.n_samples - 1
        write_csv(data, rows[300:], mode="a")
        async with LeafAgent(topology, LEAF, settings, state_dir=state) as second:
            assert second.restored_from == "checkpoint"
            model = await watcher.wait_until(lambda m: covers(m, {LEAF: len(rows)}), 20)
            assert second.n_samples == len(rows)
            assert second.ingested == {sid: len(rows) - 1}
            await asyncio.sleep(0.3)  # a double read would show by now
            assert second.n_samples == len(rows)
            assert second.sequencer.duplicates == 0
    assert model is not None and model.n_samples == len(rows)
    assert principal_angles(model.subspace.basis, offline_model(rows)).max() < 1e-8


@pytest.mark.mqtt
async def test_a_bad_line_is_rejected_counted_per_source_and_the_agent_keeps_reading(
    mosquitto, tmp_path
):
    rows = motes_rows(40)
    data = tmp_path / "readings.csv"
    write_csv(data, rows[:20])
    with data.open("a") as f:
        f.write("1.0,2.0,not-a-number\n")
    topology = topology_with_source(tmp_path, f'{{ kind = "file", path = "{data}" }}')
    sid = f"file:{data}"
    settings = settings_for(mosquitto)
    async with LeafAgent(topology, LEAF, settings) as agent:
        await wait_for(lambda: agent.n_samples == 20 and sum(agent.rejects.values()) == 1, 10)
        write_csv(data, rows[20:], mode="a")
        await wait_for(lambda: agent.n_samples == 40, 10)
        extra = agent.status_detail().extra
        assert extra["rejected_by_source"] == {sid: 1}
        assert extra["source_state"] == "running"
        assert extra["source"]["rejects"] == dict(agent.rejects)
    detail = json.loads(
        await collect_retained(mosquitto.host, mosquitto.port, topology.status_detail_topic(LEAF))
    )
    assert detail["extra"]["rejected_by_source"] == {sid: 1}
    assert detail["n_samples"] == 40


@pytest.mark.mqtt
async def test_mqtt_rejects_are_counted_under_their_src_else_the_sensor_topic(mosquitto, tmp_path):
    text = f"""
prefix = "t{uuid.uuid4().hex[:10]}"
[defaults]
rank = 2
[[nodes]]
id = "root"
[[nodes]]
id = "{LEAF}"
parent = "root"
"""
    (tmp_path / "t.toml").write_text(text)
    topology = load_topology(tmp_path / "t.toml")
    topic = topology.nodes[LEAF].sensor_topic
    async with LeafAgent(topology, LEAF, settings_for(mosquitto), n_features=3) as agent:
        await agent.wait_connected(5)
        assert agent.subscriptions() == [topic]
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            for seq in range(2):  # wrong width, msgpack and JSON
                await client.publish(
                    topic, encode_readings(np.ones(5), source="replay:run-1", seq=seq), qos=1
                )
            await client.publish(topic, b'{"src": "json-src", "seq": 0, "x": [1, 2]}', qos=1)
            await client.publish(topic, b"\xc1 not a payload", qos=1)
            await client.publish(topic, encode_readings(np.ones(3), source="ok", seq=0), qos=1)
        await wait_for(lambda: agent.n_samples == 1, 10)
        by_source = agent.status_detail().extra["rejected_by_source"]
    assert by_source == {"replay:run-1": 2, "json-src": 1, topic: 1}


@pytest.mark.mqtt
async def test_a_source_that_cannot_run_stops_the_agent_with_a_one_line_error(mosquitto, tmp_path):
    missing = tmp_path / "no-such-sensor-reader"
    topology = topology_with_source(tmp_path, f'{{ kind = "command", command = ["{missing}"] }}')
    agent = LeafAgent(topology, LEAF, settings_for(mosquitto))
    with pytest.raises(SourceError) as info:
        async with agent:
            await wait_for(lambda: agent.source_error is not None, 10)
    assert "\n" not in str(info.value) and str(missing) in str(info.value)
    assert agent.status_detail().extra["source_state"] == "failed"


# --------------------------------------------------------------- reject logging
def test_reject_log_lets_the_first_few_through_then_one_summary_per_interval() -> None:
    log = _RejectLog(burst=3, interval_s=10.0)
    allowed = [log.allow("width", t * 0.01)[0] for t in range(50)]
    assert allowed == [True] * 3 + [False] * 47
    assert log.due(5.0) == {}  # the interval is not over yet
    assert log.due(10.5) == {"width": 47}  # one summary line
    assert log.due(11.0) == {}
    assert log.allow("width", 12.0) == (True, 0)  # a new interval: logged again
    assert log.allow("json", 12.0) == (True, 0)  # reasons are limited independently
    for t in range(5):
        log.allow("width", 12.0 + t * 0.01)
    assert log.flush() == {"width": 3}


def test_replay_refuses_a_tree_whose_leaves_read_local_sources(tmp_path: Path) -> None:
    topo = tmp_path / "local.toml"
    topo.write_text(
        'name = "local"\nprefix = "local"\n[defaults]\nrank = 2\nblock_size = 10\n'
        '[[nodes]]\nid = "root"\n[[nodes]]\nid = "leaf"\nparent = "root"\n'
        'source = { kind = "file", path = "readings.csv" }\n'
    )
    data = tmp_path / "data.csv"
    data.write_text("1,2,3\n4,5,6\n")
    done = subprocess.run(
        [EDGE_RUNTIME, "replay", "--topology", str(topo), "--data", str(data),
         "--broker", "mqtt://127.0.0.1:29997"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done
    assert done.stderr.count("\n") == 1 and "local source" in done.stderr


async def test_a_local_source_leaf_checkpoints_while_the_broker_is_unreachable(tmp_path):
    """No broker at all (a closed loopback port): the leaf reads its file source, and its
    readings become durable on disk by the core's rules (here, the pause after the file's
    last line) although the work loop never runs; a restart resumes from that checkpoint."""
    rows = motes_rows(130)
    data = tmp_path / "readings.csv"
    write_csv(data, rows)
    topology = topology_with_source(tmp_path, '{ kind = "file", path = "readings.csv" }')
    state = tmp_path / "state"
    from edge_runtime.broker import free_port

    settings = AgentSettings(host="127.0.0.1", port=free_port(), timeout_s=1.0)
    async with LeafAgent(topology, LEAF, settings, state_dir=state) as leaf:
        await wait_for(lambda: leaf.n_samples == len(rows), 15)
        assert not leaf.connected.is_set()
        await wait_for(lambda: leaf.checkpoints >= 1 and leaf.durable, 20)
        assert leaf.durable == {f"file:{data}": len(rows) - 1}
    again = LeafAgent(topology, LEAF, settings, state_dir=state)
    assert again.restored_from == "checkpoint" and again.n_samples == len(rows)


@pytest.fixture
def mosquitto(shared_mosquitto):
    """This worker's broker (conftest): the tests here are isolated by their topic prefix."""
    return shared_mosquitto
