"""Site brokers bridged to a central Mosquitto: the generated bridge, its CLI, three brokers.

The unit tests read the generated configuration as text: which ``topic`` lines it has (the
tree decides what crosses the site boundary), its connection options, its errors, the shipped
example ``broker_config/bridge.conf`` and the ACL that matches it. The integration test runs
three Mosquitto processes on loopback ports (a central one with the root, one per site with
the site aggregator and its leaves, each site bridged with the generated section), replays
through the central broker, and gets the root estimate of a single-broker run of the same
topology and data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path

import aiomqtt
import numpy as np
import pytest
from helpers import collect_failed_tls_sockets, low_rank_data, tree_topology

from edge_runtime.acl import bridge_user, generate_acl
from edge_runtime.agents import create_agent
from edge_runtime.bridge import (
    BridgeError,
    bridge_topics,
    generate_bridge,
    notification_topic,
)
from edge_runtime.broker import LOCAL_HOST, LocalMosquitto
from edge_runtime.cli import main
from edge_runtime.fpca import principal_angles
from edge_runtime.monitor import ModelWatcher, covers
from edge_runtime.replay import Replayer
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology, load_topology, parse_topology
from edge_runtime.wire import SubspaceMessage

REPO = Path(__file__).resolve().parent.parent
MOTES_LIGHT = REPO / "topologies" / "motes-light.toml"
BRIDGE_EXAMPLE = REPO / "broker_config" / "bridge.conf"
TEMPLATE = REPO / "broker_config" / "mosquitto.conf"

CONNECT_TIMEOUT_S = 10.0
"""Bound on an agent connecting, and on every bridge coming up and carrying its topics."""
SETTLE_TIMEOUT_S = 60.0
"""Bound on the root covering every leaf after the replay."""
PROBE_INTERVAL_S = 0.1
"""How long a bridge probe waits for its messages before publishing the missing ones again."""
MAX_ANGLE = 1e-9
"""Largest principal angle (radians) allowed between the bridged and single-broker estimates."""


def topic_lines(text: str) -> set[tuple[str, str, str]]:
    """``{(pattern, direction, qos)}`` of the ``topic`` lines of a Mosquitto bridge section."""
    lines = [line.split() for line in text.splitlines() if line.startswith("topic ")]
    assert all(len(words) == 4 for words in lines), lines
    return {(words[1], words[2], words[3]) for words in lines}


def options(text: str) -> dict[str, str]:
    """Every option other than ``topic``, as ``{name: value}`` (each must occur once)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and not line.startswith("topic "):
            key, _, value = line.partition(" ")
            assert key not in found, f"{key} set twice"
            found[key] = value
    return found


# ---------------------------------------------------------------------------
# The generated text
# ---------------------------------------------------------------------------


def test_a_sites_snapshot_status_and_confirmations_go_up_and_model_and_sensors_come_down():
    topology = load_topology(MOTES_LIGHT)
    text = generate_bridge(topology, "site-a", central_host="central.example.org")
    leaves = ["pi-01", "pi-02", "pi-03", "pi-04"]
    expected = {("fpca/root/site-a/subspace", "out", "1")}
    for path in ["root/site-a", *(f"root/site-a/{leaf}" for leaf in leaves)]:
        expected |= {
            (f"fpca/{path}/status", "out", "1"),
            (f"fpca/{path}/status/detail", "out", "1"),
        }
    expected |= {(f"fpca/root/site-a/{leaf}/confirm", "out", "1") for leaf in leaves}
    expected |= {("fpca/root/model", "in", "1")}
    expected |= {(f"sensors/{leaf}", "in", "1") for leaf in leaves}
    assert topic_lines(text) == expected


def test_the_leaves_snapshots_and_everything_outside_the_site_stay_off_the_bridge():
    topology = load_topology(MOTES_LIGHT)
    patterns = {p for p, _, _ in topic_lines(generate_bridge(topology, "site-a", central_host="c"))}
    for leaf in ("pi-01", "pi-04"):
        assert topology.subspace_topic(leaf) not in patterns
    root = topology.root
    assert not {topology.subspace_topic(root), topology.status_topic(root)} & patterns
    for node in ("site-b", "pi-05"):
        assert not any(p.startswith(f"fpca/{topology.path(node)}/") for p in patterns), node
    assert "sensors/pi-05" not in patterns
    assert not any("#" in p or "+" in p for p in patterns)  # exact topics, no wildcards


def test_a_bridge_below_a_region_carries_the_whole_subtree_but_only_the_regions_snapshot():
    topology = parse_topology(
        'name = "regions"\n[defaults]\nrank = 2\n'
        '[[nodes]]\nid = "root"\n'
        '[[nodes]]\nid = "eu"\nparent = "root"\n'
        '[[nodes]]\nid = "paris"\nparent = "eu"\n'
        '[[nodes]]\nid = "pi-01"\nparent = "paris"\n'
        '[[nodes]]\nid = "pi-02"\nparent = "eu"\n'
        '[[nodes]]\nid = "pi-03"\nparent = "root"\n'
    )
    up = {t.pattern for t in bridge_topics(topology, "eu") if t.direction == "out"}
    down = {t.pattern for t in bridge_topics(topology, "eu") if t.direction == "in"}
    assert {t for t in up if t.endswith("/subspace")} == {"fpca/root/eu/subspace"}
    assert "fpca/root/eu/paris/pi-01/status/detail" in up
    assert "fpca/root/eu/paris/status" in up
    assert {t for t in up if t.endswith("/confirm")} == {
        "fpca/root/eu/paris/pi-01/confirm",
        "fpca/root/eu/pi-02/confirm",
    }
    assert down == {"fpca/root/model", "sensors/pi-01", "sensors/pi-02"}


def test_the_connection_is_a_persistent_private_mqtt311_bridge_with_state_notifications():
    topology = load_topology(MOTES_LIGHT)
    found = options(generate_bridge(topology, "site-b", central_host="hub", central_port=1884))
    assert found == {
        "connection": "site-b-to-central",
        "address": "hub:1884",
        "bridge_protocol_version": "mqttv311",
        "try_private": "true",
        "remote_clientid": "bridge-site-b",
        "cleansession": "false",
        "local_cleansession": "false",
        "notifications": "true",
        "notifications_local_only": "false",
        "notification_topic": "$SYS/broker/connection/bridge-site-b/state",
        "keepalive_interval": "30",
        "restart_timeout": "2 30",
        "start_type": "automatic",
    }  # no TLS and no credentials unless asked for


def test_tls_and_credentials_are_written_when_given():
    topology = load_topology(MOTES_LIGHT)
    text = generate_bridge(
        topology,
        "site-a",
        central_host="central.example.org",
        central_port=8883,
        name="lab",
        ca_file="/etc/mosquitto/certs/ca.crt",
        cert_file="/etc/mosquitto/certs/bridge.crt",
        key_file="/etc/mosquitto/certs/bridge.key",
        username="bridge-site-a",
        password="s3cret with spaces",
        keepalive_s=10,
        restart_timeout_s=(1, 5),
    )
    found = options(text)
    assert found["connection"] == "lab"
    assert found["bridge_cafile"] == "/etc/mosquitto/certs/ca.crt"
    assert found["bridge_certfile"] == "/etc/mosquitto/certs/bridge.crt"
    assert found["bridge_keyfile"] == "/etc/mosquitto/certs/bridge.key"
    assert found["bridge_insecure"] == "false"
    assert found["remote_username"] == "bridge-site-a"
    assert found["remote_password"] == "s3cret with spaces"
    assert (found["keepalive_interval"], found["restart_timeout"]) == ("10", "1 5")


@pytest.mark.parametrize(
    ("site", "needle"),
    [
        ("root", "'root' is the root"),
        ("pi-01", "'pi-01' is a leaf"),
        ("nowhere", "'nowhere' is not a node"),
    ],
)
def test_only_an_aggregator_below_the_root_can_be_a_site(site: str, needle: str):
    topology = load_topology(MOTES_LIGHT)
    with pytest.raises(BridgeError, match=needle) as raised:
        generate_bridge(topology, site, central_host="hub")
    assert isinstance(raised.value, ValueError)
    message = str(raised.value)
    assert "\n" not in message
    assert "aggregator" in message
    assert "site-a, site-b" in message  # the valid choices


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"central_host": "::1"}, "IPv6"),
        ({"central_host": "a b"}, "'a b'"),
        ({"central_port": 0}, "port 0"),
        ({"name": "site a"}, "'site a'"),
        ({"name": "-x"}, "'-x'"),
        ({"ca_file": "certs/ca.crt"}, "absolute path"),
        ({"ca_file": "/ca.crt\nallow_anonymous true"}, "line break"),
        ({"cert_file": "/c.crt", "key_file": "/c.key"}, "CA file"),
        ({"ca_file": "/ca.crt", "cert_file": "/c.crt"}, "both"),
        ({"password": "pw"}, "user name"),
        ({"username": "u", "password": "pw\nconnection evil"}, "line break"),
        ({"keepalive_s": 1}, "keepalive_s"),
        ({"restart_timeout_s": (30, 2)}, "restart_timeout_s"),
    ],
)
def test_values_that_cannot_go_into_a_mosquitto_config_are_refused(
    kwargs: dict[str, object], needle: str
):
    topology = load_topology(MOTES_LIGHT)
    arguments: dict[str, object] = {"central_host": "hub", **kwargs}
    with pytest.raises(BridgeError, match=needle):
        generate_bridge(topology, "site-a", **arguments)  # type: ignore[arg-type]


def test_the_shipped_example_is_the_generated_bridge_of_motes_light_site_a():
    """Regenerate it with the command in broker_config/README.md ("Bridges")."""
    topology = load_topology(MOTES_LIGHT)
    expected = generate_bridge(
        topology,
        "site-a",
        central_host="central.example.org",
        central_port=8883,
        ca_file="/etc/mosquitto/certs/central-ca.crt",
        username="bridge-site-a",
        password="change-me",
    )
    assert BRIDGE_EXAMPLE.read_text(encoding="utf-8") == expected


def test_the_central_acl_grants_the_bridge_user_exactly_its_out_and_in_topics():
    topology = load_topology(MOTES_LIGHT)
    acl = generate_acl(topology, replay=None, bridges=["site-b"])
    section = acl.split(f"user {bridge_user('site-b')}\n", 1)[1].split("\n\n", 1)[0]
    grants = {tuple(line.split()[1:]) for line in section.splitlines() if line.startswith("topic")}
    bridged = topic_lines(generate_bridge(topology, "site-b", central_host="hub"))
    access = {"out": "write", "in": "read"}
    assert grants == {(access[d], p) for p, d, _ in bridged} | {
        ("write", notification_topic("site-b"))
    }


# ---------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------


def test_the_bridge_command_prints_the_generated_section(capsys: pytest.CaptureFixture[str]):
    code = main(["bridge", str(MOTES_LIGHT), "--site", "site-a", "--central", "mqtt://hub:1884"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out == generate_bridge(
        load_topology(MOTES_LIGHT), "site-a", central_host="hub", central_port=1884
    )


def test_the_bridge_command_reads_tls_files_and_the_password_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
):
    password_file = tmp_path / "password"
    password_file.write_text("s3cret\n")
    code = main(
        [
            "bridge", str(MOTES_LIGHT), "--site", "site-a", "--central", "mqtts://hub",
            "--ca-file", "/etc/ca.crt", "--username", "bridge-site-a",
            "--password-file", str(password_file), "--name", "lab",
        ]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    found = options(out)
    assert found["address"] == "hub:8883"
    assert (found["bridge_cafile"], found["remote_password"]) == ("/etc/ca.crt", "s3cret")
    assert found["connection"] == "lab"


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        (["--site", "root", "--central", "mqtt://hub"], "'root'"),
        (["--site", "pi-01", "--central", "mqtt://hub"], "'pi-01'"),
        (["--site", "site-x", "--central", "mqtt://hub"], "'site-x'"),
        (["--site", "site-a", "--central", "http://hub"], "'http://hub'"),
        (["--site", "site-a", "--central", "mqtts://hub"], "--ca-file"),
        (["--site", "site-a", "--central", "mqtt://hub", "--ca-file", "/ca.crt"], "mqtts://"),
        (
            ["--site", "site-a", "--central", "mqtt://hub", "--password-file", "/nonexistent"],
            "'/nonexistent'",
        ),
    ],
)
def test_bad_bridge_input_ends_in_one_line_on_stderr_and_exit_2(
    capsys: pytest.CaptureFixture[str], arguments: list[str], needle: str
):
    code = main(["bridge", str(MOTES_LIGHT), *arguments])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.startswith("edge-runtime: error: ")
    assert err.count("\n") == 1
    assert needle in err


def test_a_missing_topology_file_ends_in_exit_2(capsys: pytest.CaptureFixture[str]):
    code = main(["bridge", "/nonexistent.toml", "--site", "a", "--central", "mqtt://hub"])
    assert code == 2
    assert "'/nonexistent.toml'" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# Three brokers
# ---------------------------------------------------------------------------


def settings_for(broker: LocalMosquitto) -> AgentSettings:
    return AgentSettings(host=broker.host, port=broker.port, timeout_s=5.0)


async def wait_until_bridged(
    topology: Topology, central: LocalMosquitto, sites: Mapping[str, LocalMosquitto]
) -> None:
    """Wait (bounded) until every bridge is up and carries each of its ``in`` topics.

    Up: its connection state, retained on the central broker, is ``1``. Carrying: a probe
    published centrally on each ``in`` topic arrives at the site broker (the bridge's
    subscriptions on the central broker are in place). Probes are not retained and are sent
    before any agent subscribes, so they reach nobody else.
    """
    async with asyncio.timeout(CONNECT_TIMEOUT_S):
        states = {notification_topic(site): site for site in sites}
        async with aiomqtt.Client(central.host, central.port) as client:
            for topic in states:
                await client.subscribe(topic, qos=1)
            up: set[str] = set()
            async for message in client.messages:
                if message.payload == b"1":
                    up.add(states[str(message.topic)])
                if up == set(sites):
                    break
        for site, broker in sites.items():
            wanted = {t.pattern for t in bridge_topics(topology, site) if t.direction == "in"}
            async with (
                aiomqtt.Client(broker.host, broker.port) as receiver,
                aiomqtt.Client(central.host, central.port) as sender,
            ):
                for topic in sorted(wanted):
                    await receiver.subscribe(topic, qos=1)
                seen: set[str] = set()
                while seen != wanted:
                    for topic in sorted(wanted - seen):
                        await sender.publish(topic, b"probe", qos=1)
                    try:
                        async with asyncio.timeout(PROBE_INTERVAL_S):
                            async for message in receiver.messages:
                                seen.add(str(message.topic))
                                if seen == wanted:
                                    break
                    except TimeoutError:
                        continue


async def run_federation(
    topology: Topology,
    data: np.ndarray,
    placement: Mapping[str, LocalMosquitto],
    central: LocalMosquitto,
) -> SubspaceMessage:
    """Every agent on its broker, a replay and a watcher on ``central``; the covering model."""
    expected = {leaf: len(rows) for leaf, rows in topology.split_rows(len(data)).items()}
    async with AsyncExitStack() as stack:
        agents = [
            create_agent(topology, node, settings_for(placement[node]), n_features=data.shape[1])
            for node in topology.nodes
        ]
        for agent in agents:
            await stack.enter_async_context(agent)
        for agent in agents:
            await agent.wait_connected(CONNECT_TIMEOUT_S)
        watcher = await stack.enter_async_context(ModelWatcher(topology, settings_for(central)))
        stats = await Replayer(topology, data, settings_for(central)).run()
        assert stats.rows == len(data)
        assert dict(stats.unconfirmed) == {}  # every confirmation crossed back
        try:
            model = await watcher.wait_until(lambda m: covers(m, expected), SETTLE_TIMEOUT_S)
        except TimeoutError:
            have = None if watcher.model is None else dict(watcher.model.provenance)
            pytest.fail(f"the root covers {have}, expected {expected}", pytrace=False)
    assert model is not None
    return model


async def retained_leaf_snapshots(topology: Topology, broker: LocalMosquitto) -> list[str]:
    """Topics of the leaves' retained snapshots on ``broker`` (barrier: a site's snapshot)."""
    leaves = {topology.subspace_topic(leaf) for leaf in topology.leaves()}
    barrier = topology.subspace_topic(topology.children(topology.root)[-1])
    found = []
    async with aiomqtt.Client(broker.host, broker.port) as client, asyncio.timeout(5.0):
        for topic in sorted(leaves):
            await client.subscribe(topic, qos=1)
        await client.subscribe(barrier, qos=1)  # retained ones arrive in subscription order
        async for message in client.messages:
            if str(message.topic) == barrier:
                break
            found.append(str(message.topic))
    return found


@pytest.mark.mqtt
async def test_three_bridged_brokers_give_the_root_estimate_of_a_single_broker(
    make_mosquitto: Callable[..., LocalMosquitto], tmp_path: Path
):
    topology = tree_topology(sites=2, leaves_per_site=2, rank=3, block_size=10)
    data = low_rank_data(400, 10, 3, seed=11)
    sites = topology.children(topology.root)

    single = make_mosquitto()
    single.start()
    reference = await run_federation(topology, data, dict.fromkeys(topology.nodes, single), single)

    central = make_mosquitto()
    central.start()
    site_brokers: dict[str, LocalMosquitto] = {}
    for site in sites:
        config = tmp_path / f"{site}.conf"
        bridge = generate_bridge(
            topology,
            site,
            central_host=LOCAL_HOST,
            central_port=central.port,
            restart_timeout_s=(1, 2),
        )
        config.write_text(TEMPLATE.read_text(encoding="utf-8") + "\n" + bridge)
        site_brokers[site] = make_mosquitto(config)
        site_brokers[site].start()
    await wait_until_bridged(topology, central, site_brokers)
    placement = {topology.root: central}
    for site in sites:
        placement |= dict.fromkeys([site, *topology.children(site)], site_brokers[site])
    bridged = await run_federation(topology, data, placement, central)

    assert bridged.n_samples == reference.n_samples == len(data)
    assert dict(bridged.provenance) == dict(reference.provenance)
    angles = principal_angles(reference.subspace.basis, bridged.subspace.basis)
    assert angles.max() <= MAX_ANGLE
    # The leaves' snapshots stayed on their sites; the central broker has only the sites'.
    assert await retained_leaf_snapshots(topology, central) == []
    assert len(await retained_leaf_snapshots(topology, site_brokers[sites[-1]])) == 2


# After each test here: the sockets of failed TLS connections, collected quietly.
_collect_failed_tls_sockets = pytest.fixture(autouse=True)(collect_failed_tls_sockets)
