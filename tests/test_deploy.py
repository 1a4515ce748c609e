"""Devices that do not carry the tree (issue 23, item 4): ``edge-runtime deploy``, agents
started from the deployed topology, and running agents following it (live keys applied at
once, privacy and restart-only changes refused and counted). Broker tests use a real
Mosquitto (`mosquitto` fixture); every wait is bounded."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import aiomqtt
import numpy as np
import pytest
from helpers import collect_retained
from structlog.testing import capture_logs

from edge_runtime.acl import generate_acl
from edge_runtime.agents import create_agent
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import ConfirmPolicy
from edge_runtime.agents.common.core.reconfigure import (
    NEEDS_RESTART,
    PRIVACY_CHANGE,
    classify_config,
)
from edge_runtime.agents.common.shell.core_shell import status_policy_of
from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.cli import CliError
from edge_runtime.cli.deploy import cmd_deploy, deployable_payload, read_deployed
from edge_runtime.cli.parser import build_parser
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import parse_topology
from edge_runtime.topology.deployed import NodeEntry, config_version
from edge_runtime.topology.topics import config_node_topic
from edge_runtime.wire import decode_subspace, encode_readings

TREE = """\
name = "deploy-test"
[defaults]
rank = 2
block_size = 5
publish_min_interval_s = {low}
publish_max_interval_s = 5.0
{extra}
[[nodes]]
id = "root"
[[nodes]]
id = "site-a"
parent = "root"
open = true
[[nodes]]
id = "pi-01"
parent = "site-a"
"""

PRIVATE = "epsilon = 1.0\ndelta = 1e-5\nclip_norm = 10.0"


def tree(low: float = 0.1, extra: str = "") -> str:
    return TREE.format(low=low, extra=extra)


def settings_for(broker) -> AgentSettings:
    return AgentSettings(host=broker.host, port=broker.port, timeout_s=5.0)


async def deploy(broker, path: Path, text: str) -> str:
    """``edge-runtime deploy`` in process; the deployed version."""
    path.write_text(text, encoding="utf-8")
    args = build_parser().parse_args(["deploy", str(path), "--broker", broker.url])
    assert await cmd_deploy(args) == 0
    return config_version(path.read_bytes())


async def wait_until(predicate, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.02)


# ---------------------------------------------------------------- core, virtual clock
def leaf_core(text: str, now: float) -> LeafCore:
    cfg = parse_topology(text).nodes["pi-01"]
    s = AgentSettings()
    return LeafCore(
        cfg,
        policy=publish_policy_for(cfg, leaf=True),
        status_policy=status_policy_of(s),
        confirm_policy=ConfirmPolicy(s.confirm_interval_s),
        now=now,
        echo_timeout_s=0.0,
        rng=random.Random(1),
    )


def test_policy_changes_apply_at_once_and_move_the_next_decision_on_a_virtual_clock() -> None:
    old = parse_topology(tree(low=4.0)).nodes["pi-01"]
    new = parse_topology(tree(low=0.5, extra="valid_range = [0.0, 1.0]")).nodes["pi-01"]
    core = leaf_core(tree(low=4.0), now=0.0)
    core.last_publish, core.last_input, core.unpublished_since = 1.0, 1.5, 1.5
    assert core.next_wakeup(2.0) == pytest.approx(5.0)  # held by the 4 s rate limit
    change = core.apply_config(old, new, "v2", now=2.0)
    assert change.applied and change.refused is None
    assert change.changed == ("publish_min_interval_s", "valid_range")
    assert core.policy.min_interval_s == 0.5 and core.config_version == "v2"
    assert core.config == new and core.config_changed_at == 2.0
    assert core.next_wakeup(2.0) < 5.0  # the next decision moved with the new policy
    kept = core.screen([(np.array([[0.5, 0.5], [2.0, 0.5]]), "s", 1)], "s", now=2.0)
    assert sum(len(block) for block, _, _ in kept) == 1  # the new range applies
    assert core.rejects["out_of_range"] == 1
    assert not any(k.startswith("config_") for k in core.rejects)


def test_privacy_and_restart_changes_are_refused_whole_and_counted() -> None:
    old = parse_topology(tree()).nodes["pi-01"]
    private = parse_topology(tree(low=0.5, extra=PRIVATE)).nodes["pi-01"]
    core = leaf_core(tree(), now=0.0)
    change = core.apply_config(old, private, "v2", now=1.0)
    assert change.refused == PRIVACY_CHANGE and "epsilon" in change.blocking
    assert core.policy.min_interval_s == 0.1  # the live key in it is not applied either
    assert core.config is not private and core.config_version is None
    ranked = parse_topology(tree().replace("rank = 2", "rank = 3")).nodes["pi-01"]
    assert core.apply_config(old, ranked, "v3", now=2.0).refused == NEEDS_RESTART
    assert core.rejects[PRIVACY_CHANGE] == 1 and core.rejects[NEEDS_RESTART] == 1
    same = core.apply_config(old, old, "v4", now=3.0)
    assert not same.applied and same.refused is None and core.config_version == "v4"
    assert classify_config(old, old, tree_changes=["path"]).refused == NEEDS_RESTART


def test_deploy_names_a_nameless_topology_after_its_file_as_load_topology_does(tmp_path) -> None:
    path = tmp_path / "plant-7.toml"
    path.write_text(tree().replace('name = "deploy-test"\n', ""), encoding="utf-8")
    payload, topology = deployable_payload(path)
    assert topology.name == "plant-7"
    assert parse_topology(payload.decode()).name == "plant-7"  # what a device parses


def test_static_acl_lets_every_node_read_the_config_and_only_the_operator_write_it() -> None:
    text = generate_acl(parse_topology(tree()), replay=None, operator="ops")
    sections = {s.split("\nuser ")[1].split("\n")[0]: s for s in text.split("\n\n")[1:]}
    assert "topic readwrite fpca/config\n" in sections["ops"]
    assert "topic readwrite fpca/config/nodes/+" in sections["ops"]
    for node in ("root", "site-a", "pi-01"):
        assert "topic read fpca/config\n" in sections[node]
        assert f"topic read fpca/config/nodes/{node}" in sections[node]
        assert "write fpca/config" not in sections[node]


# ---------------------------------------------------------------- broker
@pytest.mark.mqtt
async def test_a_running_leaf_and_aggregator_follow_a_new_publish_min_interval_and_refuse_privacy(
    mosquitto, tmp_path: Path
) -> None:
    path = tmp_path / "tree.toml"
    v1 = await deploy(mosquitto, path, tree(low=0.1))
    settings = settings_for(mosquitto)
    topology, version = await read_deployed(settings, "fpca", "pi-01", 5.0)
    assert version == v1
    leaf = create_agent(topology, "pi-01", settings, n_features=3)
    site = create_agent(topology, "site-a", settings)
    leaf.config_watch.started_from(leaf, version)
    async with leaf, site:
        await leaf.wait_connected(5)
        await site.wait_connected(5)
        leaf_core, site_core = leaf.core, site.core
        assert leaf_core.policy.min_interval_s == 0.1
        v2 = await deploy(mosquitto, path, tree(low=0.7))
        await wait_until(
            lambda: (
                leaf.core.policy.min_interval_s == 0.7 and site.core.policy.min_interval_s == 0.7
            )
        )
        assert leaf.core is leaf_core and site.core is site_core  # no restart
        assert leaf.core.config_version == v2 and site.core.config_version == v2
        assert leaf.config.publish_min_interval_s == 0.7
        with capture_logs() as logs:
            v3 = await deploy(mosquitto, path, tree(low=0.3, extra=PRIVATE))
            await wait_until(lambda: leaf.core.rejects[PRIVACY_CHANGE] == 1)
            await wait_until(lambda: site.core.config_version == v3)  # nothing of its own
        refused = [e for e in logs if e["event"] == "config_refused"]
        assert len(refused) == 1 and refused[0]["node"] == "pi-01"
        assert refused[0]["reason"] == PRIVACY_CHANGE and "epsilon" in refused[0]["fields"]
        assert leaf.core.policy.min_interval_s == 0.7 and leaf.privacy is None
        assert leaf.core.config_version == v2
        async with aiomqtt.Client(mosquitto.host, mosquitto.port) as client:  # readings flow
            for i in range(10):
                row = encode_readings(np.arange(3.0) + i, source="s", seq=i)
                await client.publish("sensors/pi-01", row, qos=1)
        await wait_until(lambda: leaf.snapshot is not None and leaf.snapshot.n_samples == 10)
        detail = leaf.status_detail()
        assert detail.extra["config_version"] == v2
        assert detail.rejects[PRIVACY_CHANGE] == 1


@pytest.mark.mqtt
async def test_an_admitted_device_finds_its_place_from_its_entry(mosquitto, tmp_path) -> None:
    settings = settings_for(mosquitto)
    with pytest.raises(CliError, match=r"no topology deployed on fpca/config within 0\.5 s"):
        await read_deployed(settings, "fpca", "pi-09", 0.5)
    await deploy(mosquitto, tmp_path / "tree.toml", tree())
    with pytest.raises(CliError, match="'pi-09' is not in the deployed topology"):
        await read_deployed(settings, "fpca", "pi-09", 2.0)
    async with aiomqtt.Client(mosquitto.host, mosquitto.port) as client:
        entry = NodeEntry("site-a", "sensors/room-9").encode()
        await client.publish(config_node_topic("fpca", "pi-09"), entry, qos=1, retain=True)
    topology, _ = await read_deployed(settings, "fpca", "pi-09", 2.0)
    assert topology.path("pi-09") == "root/site-a/pi-09"
    assert topology.nodes["pi-09"].sensor_topic == "sensors/room-9"
    assert topology.nodes["pi-09"].rank == 2


def _n(payload: bytes) -> int:
    return decode_subspace(payload).n_samples


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "edge_runtime.cli", *args]


@pytest.mark.mqtt
async def test_a_leaf_started_with_only_the_broker_and_its_node_id_runs_from_the_deployed_topology(
    mosquitto, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    url = mosquitto.url
    missing = subprocess.run(
        _cli("agent", "--node", "pi-01", "--broker", url, "--startup-timeout", "1"),
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert missing.returncode == 1
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and "no topology deployed on fpca/config" in lines[0]
    version = await deploy(mosquitto, tmp_path / "tree.toml", tree())
    proc = subprocess.Popen(
        _cli("agent", "--node", "pi-01", "--broker", url, "--n-features", "3"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        async with aiomqtt.Client(mosquitto.host, mosquitto.port) as client:
            await client.subscribe("fpca/root/site-a/pi-01/status", qos=1)
            await client.subscribe("fpca/root/site-a/pi-01/subspace", qos=1)
            async with asyncio.timeout(30):
                async for message in client.messages:
                    if str(message.topic).endswith("/status") and message.payload == b"online":
                        break
            for i in range(10):
                row = encode_readings(np.arange(3.0) * (i + 1), source="s", seq=i)
                await client.publish("sensors/pi-01", row, qos=1)
            async with asyncio.timeout(30):
                async for message in client.messages:
                    payload = message.payload
                    if not str(message.topic).endswith("/subspace"):
                        continue
                    if isinstance(payload, bytes) and payload and _n(payload) == 10:
                        break
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr
    detail = await collect_retained(
        mosquitto.host, mosquitto.port, "fpca/root/site-a/pi-01/status/detail"
    )
    doc = json.loads(detail)  # the final status document, published on the way out
    assert doc["extra"]["config_version"] == version and doc["n_samples"] == 10


async def _cli_as(broker, user: str, password: str, *args: str) -> tuple[int, str, str]:
    """``edge-runtime ARGS --broker URL`` logged in as ``user`` (environment), bounded."""
    env = {**os.environ, "EDGE_MQTT_USERNAME": user, "EDGE_MQTT_PASSWORD": password}
    proc = await asyncio.create_subprocess_exec(
        *_cli(*args, "--broker", broker.url),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(60):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.mqtt
async def test_an_enrolled_device_reads_the_deployed_topology_but_cannot_write_it(
    make_mosquitto, tmp_path: Path
) -> None:
    broker = make_mosquitto(dynsec=True)
    broker.start()
    admin = (str(broker.admin_username), str(broker.admin_password))
    path = tmp_path / "tree.toml"
    path.write_text(tree(), encoding="utf-8")
    code, _, err = await _cli_as(broker, *admin, "deploy", str(path))
    assert code == 0, err
    code, out, err = await _cli_as(
        broker, *admin, "enroll", "pi-09", "--parent", "site-a", "--topology", str(path)
    )
    assert code == 0, err
    password = dict(line.split("=", 1) for line in out.splitlines())["EDGE_MQTT_PASSWORD"]
    device = AgentSettings(
        host=broker.host, port=broker.port, username="pi-09", password=password, timeout_s=5.0
    )
    topology, version = await read_deployed(device, "fpca", "pi-09", 5.0)
    assert version == config_version(path.read_bytes())
    assert topology.path("pi-09") == "root/site-a/pi-09"
    # The device may not deploy: its publish on fpca/config is dropped (the admin's copy stays).
    other = tmp_path / "other.toml"
    other.write_text(tree(low=0.9), encoding="utf-8")
    code, _, err = await _cli_as(broker, "pi-09", password, "deploy", str(other), "--timeout", "1")
    assert code == 1 and "did not deliver the published configuration back" in err
    assert (await read_deployed(device, "fpca", "pi-09", 5.0))[1] == version
    code, out, err = await _cli_as(broker, *admin, "retire", "pi-09", "--topology", str(path))
    assert code == 0 and "cleared fpca/config/nodes/pi-09" in out, err
