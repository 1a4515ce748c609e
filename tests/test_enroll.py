"""Enrolment and retirement through Mosquitto's dynamic security plugin, against the real broker.

Every broker test starts its own ``LocalMosquitto(dynsec=True)`` (``broker_config/dynsec.conf``,
a free loopback port, an admin whose password is drawn for the run; stopped by pid at
teardown, ``conftest.make_mosquitto``) and runs ``edge-runtime enroll`` / ``retire`` as a user
does: a subprocess, the operator's credentials in the environment.

A denied publish is dropped silently by Mosquitto (MQTT 3.1.1), so each denial stands beside
its positive control: the same watcher receives the same topic from a sender allowed to write
it, and after the denied publish the device publishes an allowed marker; the denied message is
absent once the marker has arrived and one more second has passed. ``broker_config/dynsec.conf``
replaces client ids by user names, so the admin holds one connection at a time (the watcher
also publishes the admin's messages).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiomqtt
import pytest

from edge_runtime.broker import (
    Acl,
    DynsecClient,
    DynsecError,
    LocalMosquitto,
    derive_config,
    dynsec_admin_config,
    find_dynsec_plugin,
)
from edge_runtime.broker.config import DYNSEC_CONFIG_NAME
from edge_runtime.cli.fleet import device_topics, refusing_parent
from edge_runtime.monitor import login_refused
from edge_runtime.topology import load_topology, parse_topology

ROOT = Path(__file__).resolve().parents[1]
MOTES = ROOT / "topologies" / "motes-light.toml"
DYNSEC_CONF = ROOT / "broker_config" / "dynsec.conf"
WAIT_S = 10.0
"""Bound of every wait for something that must happen (a connection, a delivery)."""
DENIED_WAIT_S = 1.0
"""How long a denied message must stay away after the marker that follows it arrived."""
TEST_S = 90.0
"""Bound of each broker test as a whole."""

OWN = "fpca/root/site-a/pi-09"
SUBSPACE = f"{OWN}/subspace"
STATUS = f"{OWN}/status"
DETAIL = f"{OWN}/status/detail"
CONFIRM = f"{OWN}/confirm"
SIBLING = "fpca/root/site-a/pi-01/subspace"
OTHER_SITE = "fpca/root/site-b/pi-09/subspace"
MODEL = "fpca/root/model"


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


@pytest.fixture
def dynsec_broker(make_mosquitto: Callable[..., LocalMosquitto]) -> LocalMosquitto:
    """A started ``LocalMosquitto(dynsec=True)`` for this test (stopped by pid at teardown)."""
    broker = make_mosquitto(dynsec=True)
    broker.start()
    return broker


async def cli(
    broker: LocalMosquitto, *args: str, login: tuple[str, str] | None = None
) -> tuple[int, str, str]:
    """``edge-runtime ARGS --broker URL`` as the admin, or as ``login`` (user, password),
    the credentials in the environment."""
    user, password = login or (str(broker.admin_username), str(broker.admin_password))
    env = {**os.environ, "EDGE_MQTT_USERNAME": user, "EDGE_MQTT_PASSWORD": password}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "edge_runtime.cli",
        *args,
        "--broker",
        broker.url,
        cwd=ROOT,
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


async def enroll(broker: LocalMosquitto, node: str = "pi-09", parent: str = "site-a") -> str:
    """Enrol ``node`` under ``parent`` of motes-light; the password it printed."""
    code, out, err = await cli(broker, "enroll", node, "--parent", parent, "--topology", str(MOTES))
    assert code == 0, err
    # motes-light's aggregators are not open: enroll says that site-a refuses pi-09's snapshots.
    assert f"warning: {parent!r} is not open" in err
    env = dict(line.split("=", 1) for line in out.splitlines())
    assert env["EDGE_MQTT_USERNAME"] == node
    return env["EDGE_MQTT_PASSWORD"]


@contextlib.asynccontextmanager
async def connect(
    broker: LocalMosquitto, user: str, password: str, will: aiomqtt.Will | None = None
) -> AsyncIterator[aiomqtt.Client]:
    """A connected client; errors while leaving (after being kicked) are not raised."""
    client = aiomqtt.Client(
        broker.host, broker.port, username=user, password=password, will=will, timeout=WAIT_S
    )
    await client.__aenter__()
    try:
        yield client
    finally:
        with contextlib.suppress(aiomqtt.MqttError):
            await client.__aexit__(None, None, None)


def admin(broker: LocalMosquitto) -> contextlib.AbstractAsyncContextManager[aiomqtt.Client]:
    return connect(broker, str(broker.admin_username), str(broker.admin_password))


async def until(
    client: aiomqtt.Client, topic: str, payload: bytes, got: list[tuple[str, bytes]]
) -> None:
    """Collect messages into ``got`` until ``payload`` arrives on ``topic`` (at most WAIT_S),
    then DENIED_WAIT_S more."""
    async with asyncio.timeout(WAIT_S):
        async for message in client.messages:
            got.append((str(message.topic), bytes(message.payload)))  # type: ignore[arg-type]
            if got[-1] == (topic, payload):
                break
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DENIED_WAIT_S):
            async for message in client.messages:
                got.append((str(message.topic), bytes(message.payload)))  # type: ignore[arg-type]


async def retained(broker: LocalMosquitto, topics: list[str]) -> dict[str, bytes]:
    """The retained messages of ``topics`` a fresh admin subscription gets within
    DENIED_WAIT_S of its last SUBACK."""
    found: dict[str, bytes] = {}
    async with admin(broker) as client:
        for topic in topics:
            await client.subscribe(topic, qos=1)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DENIED_WAIT_S):
                async for message in client.messages:
                    if message.retain:
                        found[str(message.topic)] = bytes(message.payload)  # type: ignore[arg-type]
    return found


# ---------------------------------------------------------------------------
# the broker configuration and the plugin's client
# ---------------------------------------------------------------------------


def test_find_dynsec_plugin_finds_debians_multiarch_file() -> None:
    path = Path(find_dynsec_plugin("/usr/sbin/mosquitto"))
    assert path.name == "mosquitto_dynamic_security.so"
    assert path.is_file()


def test_derived_dynsec_config_loads_the_plugin_refuses_anonymous_and_keeps_listener_options(
    tmp_path: Path,
) -> None:
    derived = derive_config(
        DYNSEC_CONF.read_text(), port=23456, data_dir=tmp_path, dynsec_plugin="/x/dynsec.so"
    )
    active = [line for line in derived.splitlines() if line and not line.startswith("#")]
    plugin_file = f"plugin_opt_config_file {tmp_path / DYNSEC_CONFIG_NAME}"
    assert [line for line in active if line.startswith("plugin")] == [
        "plugin /x/dynsec.so",
        plugin_file,
    ]
    # use_username_as_clientid belongs to the listener: it must follow the appended one.
    assert active[-3:] == [
        "listener 23456 127.0.0.1",
        "use_username_as_clientid true",
        "allow_anonymous false",
    ]
    assert active.index(plugin_file) < active.index("listener 23456 127.0.0.1")


def test_dynsec_admin_config_hashes_the_password_as_mosquitto_ctrl_does() -> None:
    import base64
    import hashlib

    document = json.loads(dynsec_admin_config("admin", "secret", salt=b"0123456789ab"))
    (client,) = document["clients"]
    digest = hashlib.pbkdf2_hmac("sha512", b"secret", b"0123456789ab", client["iterations"])
    assert client["password"] == base64.b64encode(digest).decode()
    assert base64.b64decode(client["salt"]) == b"0123456789ab"
    (role,) = document["roles"]
    assert {"acltype": "publishClientSend", "topic": "#", "allow": True} in role["acls"]


@pytest.mark.mqtt
async def test_local_mosquitto_with_dynsec_refuses_anonymous_clients_and_admits_its_admin(
    dynsec_broker: LocalMosquitto,
) -> None:
    assert dynsec_broker.dynsec_config_path is not None
    assert dynsec_broker.dynsec_config_path.stat().st_mode & 0o777 == 0o600
    async with asyncio.timeout(TEST_S):
        with pytest.raises(aiomqtt.MqttError) as refused:
            async with aiomqtt.Client(dynsec_broker.host, dynsec_broker.port, timeout=WAIT_S):
                pass
        assert login_refused(refused.value)
        async with admin(dynsec_broker) as client:
            await client.subscribe(MODEL, qos=1)
            await client.publish(MODEL, b"m", qos=1)
            got: list[tuple[str, bytes]] = []
            await until(client, MODEL, b"m", got)


@pytest.mark.mqtt
async def test_dynsec_client_names_the_command_and_the_plugins_error(
    dynsec_broker: LocalMosquitto,
) -> None:
    broker = dynsec_broker
    async with (
        asyncio.timeout(TEST_S),
        DynsecClient(
            broker.host, broker.port, username=broker.admin_username, password=broker.admin_password
        ) as dynsec,
    ):
        await dynsec.create_role("r", [Acl("publishClientSend", "a/b")])
        await dynsec.create_client("u", password="p", roles=["r"])
        with pytest.raises(DynsecError, match="createClient: Client already exists") as exists:
            await dynsec.create_client("u", password="q")
        assert exists.value.command == "createClient" and exists.value.exists
        with pytest.raises(DynsecError, match="getRole: Role not found") as missing:
            await dynsec.get_role("nope")
        assert missing.value.not_found
        assert await dynsec.role_acls("r") == [Acl("publishClientSend", "a/b")]
        assert "u" in await dynsec.list_clients()
    # A client without the admin role may not subscribe to the plugin's answers.
    with pytest.raises(DynsecError, match="refused the subscription"):
        async with DynsecClient(broker.host, broker.port, username="u", password="p"):
            pass


# ---------------------------------------------------------------------------
# enroll: what the device may and may not do
# ---------------------------------------------------------------------------


@pytest.mark.mqtt
async def test_enrolled_device_publishes_its_own_snapshot_but_not_under_site_b_or_as_a_sibling(
    dynsec_broker: LocalMosquitto,
) -> None:
    broker = dynsec_broker
    async with asyncio.timeout(TEST_S):
        password = await enroll(broker)
        async with admin(broker) as watcher, connect(broker, "pi-09", password) as device:
            await watcher.subscribe("fpca/#", qos=1)

            # Positive control: pi-09's own snapshot under site-a reaches the watcher.
            got: list[tuple[str, bytes]] = []
            await device.publish(SUBSPACE, b"own", qos=1)
            await until(watcher, SUBSPACE, b"own", got)
            assert (SUBSPACE, b"own") in got

            for forged in (OTHER_SITE, SIBLING):
                # Positive control: the watcher receives this very topic from the admin ...
                got = []
                await watcher.publish(forged, b"by-admin", qos=1)
                await until(watcher, forged, b"by-admin", got)
                # ... but not from pi-09: its publish is dropped; the marker after it arrives.
                got = []
                await device.publish(forged, b"forged", qos=1)
                await device.publish(STATUS, b"marker", qos=1)
                await until(watcher, STATUS, b"marker", got)
                assert (forged, b"forged") not in got, forged
                assert (STATUS, b"marker") in got


@pytest.mark.mqtt
async def test_enrolled_device_reads_its_sensor_topic_and_the_model_but_not_another_leafs(
    dynsec_broker: LocalMosquitto,
) -> None:
    broker = dynsec_broker
    async with asyncio.timeout(TEST_S):
        password = await enroll(broker)
        async with admin(broker) as sender, connect(broker, "pi-09", password) as device:
            await sender.subscribe("sensors/pi-01", qos=1)
            for topic in ("sensors/pi-09", MODEL):
                (code,) = await device.subscribe(topic, qos=1)
                assert int(getattr(code, "value", code)) < 0x80, topic
            for topic in ("sensors/pi-01", "sensors/#", "#"):
                (code,) = await device.subscribe(topic, qos=1)
                assert int(getattr(code, "value", code)) >= 0x80, topic  # refused

            # Positive controls: its own sensor topic and the model reach pi-09.
            got: list[tuple[str, bytes]] = []
            await sender.publish(MODEL, b"model", qos=1)
            await until(device, MODEL, b"model", got)
            got = []
            await sender.publish("sensors/pi-09", b"[1, 2]", qos=1)
            await until(device, "sensors/pi-09", b"[1, 2]", got)

            # pi-01's readings are published (the admin's own subscription gets them) ...
            seen: list[tuple[str, bytes]] = []
            await sender.publish("sensors/pi-01", b"[3, 4]", qos=1)
            await until(sender, "sensors/pi-01", b"[3, 4]", seen)
            # ... but do not reach pi-09, while the marker published after them does.
            got = []
            await sender.publish("sensors/pi-09", b"marker", qos=1)
            await until(device, "sensors/pi-09", b"marker", got)
            assert ("sensors/pi-01", b"[3, 4]") not in got
            assert [topic for topic, _ in got] == ["sensors/pi-09"]


# ---------------------------------------------------------------------------
# retire
# ---------------------------------------------------------------------------


async def _online_device(broker: LocalMosquitto, password: str, client: aiomqtt.Client) -> None:
    """pi-09 publishes what an agent leaves retained; the admin sees all of it."""
    for topic, payload in (
        (SUBSPACE, b"snapshot"),
        (STATUS, b"online"),
        (DETAIL, b"{}"),
        (CONFIRM, b"{}"),
    ):
        await client.publish(topic, payload, qos=1, retain=True)
    assert await retained(broker, [f"{OWN}/#"]) == {
        SUBSPACE: b"snapshot",
        STATUS: b"online",
        DETAIL: b"{}",
        CONFIRM: b"{}",
    }


@pytest.mark.mqtt
async def test_retire_disables_the_device_and_clears_its_status_but_keeps_its_snapshot(
    dynsec_broker: LocalMosquitto,
) -> None:
    broker = dynsec_broker
    async with asyncio.timeout(TEST_S):
        password = await enroll(broker)
        will = aiomqtt.Will(STATUS, b"offline", qos=1, retain=True)
        async with connect(broker, "pi-09", password, will=will) as device:
            await _online_device(broker, password, device)
            code, out, err = await cli(broker, "retire", "pi-09", "--topology", str(MOTES))
            assert code == 0, err
            assert f"cleared {STATUS}" in out and f"kept {SUBSPACE}" in out
            # The plugin closed pi-09's connection: a publish fails within WAIT_S.
            with pytest.raises(aiomqtt.MqttError):
                for _ in range(int(WAIT_S / 0.1)):
                    await device.publish(STATUS, b"still here", qos=1, timeout=1.0)
                    await asyncio.sleep(0.1)
        with pytest.raises(aiomqtt.MqttError) as refused:
            async with connect(broker, "pi-09", password):
                pass
        assert login_refused(refused.value)
        # Its snapshot is still retained (positive control of the same subscription); its
        # status (no Last Will either), status document and confirmations are gone.
        assert await retained(broker, [f"{OWN}/#"]) == {SUBSPACE: b"snapshot"}


@pytest.mark.mqtt
async def test_retire_forget_clears_the_snapshot_too_and_nothing_of_a_sibling(
    dynsec_broker: LocalMosquitto,
) -> None:
    broker = dynsec_broker
    async with asyncio.timeout(TEST_S):
        password = await enroll(broker)
        async with connect(broker, "pi-09", password) as device:
            await _online_device(broker, password, device)
        async with admin(broker) as client:
            await client.publish(SIBLING, b"pi-01's", qos=1, retain=True)
        code, out, err = await cli(broker, "retire", "pi-09", "--forget", "--topology", str(MOTES))
        assert code == 0, err
        assert f"cleared {SUBSPACE}" in out
        assert await retained(broker, [f"{OWN}/#", SIBLING]) == {SIBLING: b"pi-01's"}
        # Retiring again is harmless (the client stays disabled).
        code, _, err = await cli(broker, "retire", "pi-09", "--topology", str(MOTES))
        assert code == 0, err


@pytest.mark.mqtt
async def test_retire_by_an_operator_who_may_not_write_the_topics_fails_in_one_line(
    dynsec_broker: LocalMosquitto,
) -> None:
    """The empty retained messages are checked end to end: a denied one is not "cleared"."""
    broker = dynsec_broker
    control = "$CONTROL/dynamic-security/#"
    async with asyncio.timeout(TEST_S):
        await enroll(broker)
        async with DynsecClient(
            broker.host, broker.port, username=broker.admin_username, password=broker.admin_password
        ) as dynsec:  # what `mosquitto_ctrl dynsec init` gives: administer, read, not write
            acls = [Acl("publishClientSend", control), Acl("publishClientReceive", control)]
            acls += [Acl("subscribePattern", control), Acl("subscribePattern", "#")]
            await dynsec.create_role("operator", acls)
            await dynsec.create_client("op", password="op-pw", roles=["operator"])
        code, _, err = await cli(
            broker, "retire", "pi-09", "--topology", str(MOTES), login=("op", "op-pw")
        )
        assert code == 1
        (line,) = err.strip().splitlines()
        assert line.startswith("edge-runtime: error: not cleared within")
        assert STATUS in line and "addRoleACL admin publishClientSend 'fpca/#' allow" in line


@pytest.mark.mqtt
async def test_enroll_writes_a_private_credentials_file_and_refuses_a_second_client(
    dynsec_broker: LocalMosquitto, tmp_path: Path
) -> None:
    broker = dynsec_broker
    path = tmp_path / "pi-09.password"
    async with asyncio.timeout(TEST_S):
        code, out, err = await cli(
            broker, "enroll", "pi-09", "--parent", "site-a", "--topology", str(MOTES),
            "--credentials-file", str(path),
        )  # fmt: skip
        assert code == 0, err
        assert "PASSWORD=" not in out and f"EDGE_MQTT_PASSWORD_FILE={path}" in out
        assert path.stat().st_mode & 0o777 == 0o600
        password = path.read_text().splitlines()[0]
        async with connect(broker, "pi-09", password) as device:
            await device.publish(SUBSPACE, b"x", qos=1)
        code, _, err = await cli(
            broker, "enroll", "pi-09", "--parent", "site-a", "--topology", str(MOTES)
        )
        assert code == 2
        assert err.strip().splitlines() == [err.strip()]
        assert "is a client of the broker already" in err


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------


async def test_enroll_under_an_unknown_parent_is_one_line_and_exit_2() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edge_runtime.cli", "enroll", "pi-09", "--parent", "site-z",
        "--topology", str(MOTES), "--broker", "mqtt://127.0.0.1:1",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    lines = [line for line in err.decode().splitlines() if line.strip()]
    assert proc.returncode == 2
    assert out == b""
    assert len(lines) == 1 and "Traceback" not in err.decode()
    assert lines[0].startswith("edge-runtime: error: --parent 'site-z' is not a node")
    assert "aggregators: root, site-a, site-b" in lines[0]


def test_device_topics_refuse_what_would_grant_another_devices_topics() -> None:
    from edge_runtime.cli import CliError
    from edge_runtime.topology import TopologyError

    topology = load_topology(MOTES)
    topics = device_topics(topology, "pi-09", "site-a")
    assert topics.path == "root/site-a/pi-09" and topics.sensor == "sensors/pi-09"
    sends = {acl.topic for acl in topics.acls() if acl.acltype == "publishClientSend"}
    assert sends == {"sensors/pi-09", SUBSPACE, STATUS, DETAIL, CONFIRM, f"{OWN}/scores"}
    for parent, sensor, error, match in [
        ("site-a", "sensors/pi-01", CliError, "overlaps"),
        ("site-a", "sensors/#", CliError, "overlaps"),
        ("site-a", "fpca/root/site-b/pi-05/subspace", CliError, "prefix"),
        ("site-a", "$CONTROL/dynamic-security/v1", CliError, r"\$"),
        ("pi-01", None, CliError, "is a leaf"),
        ("root", None, CliError, None),
    ]:
        if match is None:
            assert device_topics(topology, "pi-09", parent, sensor).path == "root/pi-09"
            continue
        with pytest.raises(error, match=match):
            device_topics(topology, "pi-09", parent, sensor)
    with pytest.raises(TopologyError, match="contains '/'"):
        device_topics(topology, "pi/09", "site-a")
    with pytest.raises(CliError, match="under 'site-a', not 'site-b'"):
        device_topics(topology, "pi-01", "site-b")


def test_a_new_device_is_refused_by_a_closed_parent_and_admitted_by_an_open_one() -> None:
    motes = load_topology(MOTES)
    assert refusing_parent(motes, device_topics(motes, "pi-09", "site-a")) == "site-a"
    assert refusing_parent(motes, device_topics(motes, "pi-01")) is None  # named in the file
    text = MOTES.read_text().replace('id = "site-a"\n', 'id = "site-a"\nopen = true\n', 1)
    open_site = parse_topology(text)
    assert open_site.is_open("site-a")
    assert refusing_parent(open_site, device_topics(open_site, "pi-09", "site-a")) is None
