"""Home Assistant discovery published by the agents (issue 13, item 3), against a real
Mosquitto: the retained configs after connecting, again on Home Assistant's birth message,
their removal, and the CLI flags."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import aiomqtt
import pytest
from helpers import tree_topology

from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.cli import main
from edge_runtime.homeassistant import ENTITY_KEYS, discovery_messages
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import load_topology

pytestmark = pytest.mark.mqtt

HA = "homeassistant"


async def _collect(client: aiomqtt.Client, n: int, timeout_s: float = 10.0) -> list:
    got = []
    async with asyncio.timeout(timeout_s):
        async for message in client.messages:
            got.append(message)
            if len(got) == n:
                return got
    return got


async def _quiet(client: aiomqtt.Client, wait_s: float = 0.5) -> list:
    """Messages that arrive within ``wait_s`` seconds (expected: none)."""
    got = []
    try:
        async with asyncio.timeout(wait_s):
            async for message in client.messages:
                got.append(message)
    except TimeoutError:
        pass
    return got


async def test_an_agent_publishes_its_discovery_configs_retained_and_again_when_ha_comes_online(
    mosquitto,
) -> None:
    topology = tree_topology(sites=1, leaves_per_site=1)
    leaf = topology.leaves()[0]
    settings = AgentSettings(host=mosquitto.host, port=mosquitto.port, discovery_prefix=HA)
    expected = dict(discovery_messages(topology, discovery_prefix=HA, node_ids=[leaf]))
    assert len(expected) == len(ENTITY_KEYS) == 8
    async with LeafAgent(topology, leaf, settings) as agent:
        await agent.wait_connected(5)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            await client.subscribe(f"{HA}/#", qos=1)
            retained = await _collect(client, len(ENTITY_KEYS))
            assert {str(m.topic): bytes(m.payload) for m in retained} == expected
            assert all(m.retain for m in retained)
            assert await _quiet(client) == []  # nothing else under the prefix
            # Home Assistant's birth message: every config again
            await client.publish(f"{HA}/status", b"online", qos=1)
            again = await _collect(client, 1 + len(ENTITY_KEYS))  # birth message, configs
            configs = {str(m.topic): bytes(m.payload) for m in again if str(m.topic) in expected}
            assert configs == expected
            await client.publish(f"{HA}/status", b"offline", qos=1)
            assert [str(m.topic) for m in await _quiet(client)] == [f"{HA}/status"]
        assert agent.discovery_published == 2
    # the entities' payloads name this node's topics
    config = json.loads(expected[next(t for t in expected if t.endswith("_samples/config"))])
    assert config["state_topic"] == topology.status_detail_topic(leaf)


async def test_an_aggregator_publishes_only_its_own_configs_and_none_without_the_setting(
    mosquitto,
) -> None:
    topology = tree_topology(sites=1, leaves_per_site=1)
    with_ha = AgentSettings(host=mosquitto.host, port=mosquitto.port, discovery_prefix=HA)
    async with (
        AggregatorAgent(topology, "site-0", with_ha) as site,
        LeafAgent(topology, topology.leaves()[0], replace(with_ha, discovery_prefix=None)) as a,
    ):
        await site.wait_connected(5)
        await a.wait_connected(5)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            await client.subscribe(f"{HA}/#", qos=1)
            got = await _collect(client, len(ENTITY_KEYS))
            assert await _quiet(client) == []
    topics = {str(m.topic) for m in got}
    assert topics == {t for t, _ in discovery_messages(topology, node_ids=["site-0"])}


def _write_topology(tmp_path: Path, prefix: str) -> Path:
    path = tmp_path / "ha.toml"
    path.write_text(
        f'name = "ha"\nprefix = "{prefix}"\n[defaults]\nrank = 2\n'
        '[[nodes]]\nid = "root"\n[[nodes]]\nid = "pi-01"\nparent = "root"\n'
        f'sensor_topic = "{prefix}-sensors/pi-01"\n'
    )
    return path


async def test_cli_agent_homeassistant_publishes_and_homeassistant_remove_clears(
    mosquitto, tmp_path: Path
) -> None:
    path = _write_topology(tmp_path, "haprefix")
    topology = load_topology(path)
    url = f"mqtt://{mosquitto.host}:{mosquitto.port}"
    expected = dict(discovery_messages(topology, discovery_prefix="ha2", node_ids=["pi-01"]))
    args = ["agent", "--topology", str(path), "--node", "pi-01", "--broker", url]
    code = "import sys; from edge_runtime.cli import main; sys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args, "--homeassistant", "--discovery-prefix", "ha2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            await client.subscribe("ha2/#", qos=1)
            got = await _collect(client, len(ENTITY_KEYS), timeout_s=20)
        assert {str(m.topic): bytes(m.payload) for m in got} == expected
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(proc.wait, 20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    assert proc.returncode == 0
    # --homeassistant-remove: empty retained payloads, then exit without running the agent
    code = await asyncio.to_thread(
        main, [*args, "--homeassistant-remove", "--discovery-prefix", "ha2"]
    )
    assert code == 0
    async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
        await client.subscribe("ha2/#", qos=1)
        assert await _quiet(client, 1.0) == []  # the retained configs are gone


async def test_homeassistant_remove_publishes_empty_retained_payloads(
    mosquitto, tmp_path: Path
) -> None:
    path = _write_topology(tmp_path, "haprefix2")
    topology = load_topology(path)
    url = f"mqtt://{mosquitto.host}:{mosquitto.port}"
    expected = {t for t, _ in discovery_messages(topology, node_ids=["pi-01"])}
    async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
        await client.subscribe(f"{HA}/#", qos=1)
        code = await asyncio.to_thread(
            main,
            ["agent", "--topology", str(path), "--node", "pi-01", "--broker", url,
             "--homeassistant-remove"],
        )  # fmt: skip
        assert code == 0
        got = await _collect(client, len(ENTITY_KEYS))
    assert {str(m.topic) for m in got} == expected
    assert all(bytes(m.payload) == b"" for m in got)


def test_cli_refuses_a_bad_discovery_prefix(tmp_path: Path, capsys) -> None:
    path = _write_topology(tmp_path, "p")
    code = main(
        ["agent", "--topology", str(path), "--node", "pi-01", "--homeassistant",
         "--discovery-prefix", "ha/#", "--homeassistant-remove"],
    )  # fmt: skip
    assert code != 0
    err = capsys.readouterr().err.strip()
    assert "--discovery-prefix" in err and "\n" not in err
