"""The secured broker: passwords, the ACL generated from the topology, client ids, TLS, bridges.

Every broker test starts its own Mosquitto from ``broker_config/secured.conf`` itself (only the
listener port and the file paths are replaced, `secured_config`), with a throwaway CA and
certificates generated for the test (``tests/tls_material.py``; no private key is committed), a
password file hashed by ``mosquitto_passwd``, and the ACL that `edge_runtime.acl.generate_acl`
writes for ``topologies/motes-light.toml``. Brokers listen on a free loopback port above 20000
and are stopped by pid in a ``finally``. Every wait is bounded with ``asyncio.timeout``.

Measured with Mosquitto 2.0.11, aiomqtt 2.5.1 and paho-mqtt 2.2 (asserted below):

- A wrong password, an unknown user and a client without a user name are all refused with
  CONNACK "not authorised": ``aiomqtt.exceptions.MqttConnectError`` (an ``aiomqtt.MqttError``)
  whose ``rc`` reads "Not authorized".
- A publish the ACL denies is dropped by the broker; the publisher is not told. Mosquitto sends
  PUBACK reason code 135 to MQTT 5 clients, but aiomqtt's ``publish`` returns normally for both
  protocol versions (it discards the reason code); only a hook on the paho client's
  ``on_publish`` sees 135. Over MQTT 3.1.1 the PUBACK carries no code at all.
- ``acl_file`` does not check SUBSCRIBE: a leaf may subscribe to ``fpca/#`` and gets SUBACK
  "granted", but the broker delivers it only messages on topics it may read.
- A Last Will on a topic the client may not write is accepted at CONNECT but never delivered.
- With ``use_username_as_clientid true`` a client asking for another's client id gets its own
  user name instead, so it cannot take the other's session over; without it, it can.
- The agents detect a denied snapshot by its missing echo (``undelivered``).
- ``max_packet_size`` passes the largest payload the runtime allows (4 MiB) and disconnects a
  client sending a larger packet; the client's pending QoS 1 publish then times out.
- A client that does not trust the broker's CA fails with ``CERTIFICATE_VERIFY_FAILED``; with
  ``require_certificate true``, a client without a certificate only times out (TLS 1.3).
- The bridge example carries the site aggregator's topics up (retained) and the model down,
  and its user may write nothing outside its site on the central broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import aiomqtt
import paho.mqtt.client as paho
import pytest
from aiomqtt.exceptions import MqttConnectError
from helpers import low_rank_data
from tls_material import TlsMaterial, make_tls_material

from edge_runtime.acl import AclError, bridge_user, generate_acl
from edge_runtime.agents import AgentSettings, AggregatorAgent, LeafAgent
from edge_runtime.broker import LOCAL_HOST, find_mosquitto, free_port
from edge_runtime.topology import Topology, load_topology, parse_topology
from edge_runtime.wire import DEFAULT_MAX_PAYLOAD_BYTES, decode_subspace, encode_readings

REPO = Path(__file__).resolve().parent.parent
SECURED_CONF = REPO / "broker_config" / "secured.conf"
BRIDGE_CONF = REPO / "broker_config" / "bridge.conf"
MOTES_LIGHT = REPO / "topologies" / "motes-light.toml"

READER = "dashboard"
REPLAY = "replay"
BRIDGED_SITE = "site-a"
START_TIMEOUT_S = 5.0
PORT_ATTEMPTS = 3
ADDRESS_IN_USE = "Address already in use"
RUNNING = re.compile(r"mosquitto version \S+ running")
"""What Mosquitto logs once it listens."""
STOP_TIMEOUT_S = 5.0
CLIENT_TIMEOUT_S = 5.0
QUIET_S = 1.0
"""How long a test keeps listening after its barrier message for anything that must not come."""

REFUSED_TIMEOUT_S = 1.0
"""Client time-out where the broker's refusal shows only as a time-out (see the test)."""

ECHO_TIMEOUT_S = 0.5
"""How long an agent in these tests waits for the echo of its snapshot before reporting it."""

NOT_AUTHORISED = 135
"""MQTT 5 reason code "Not authorized" (paho maps the MQTT 3.1.1 CONNACK code 5 to it)."""


# ---------------------------------------------------------------------------
# A deployment: topology, credentials, certificates, ACL (one per module)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Deployment:
    """What an operator prepares once (SECURITY.md), written to a temporary directory."""

    directory: Path
    topology: Topology
    passwords: Mapping[str, str]
    tls: TlsMaterial
    password_file: Path
    acl_file: Path


def _mosquitto_passwd() -> str:
    found = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"
    if not os.access(found, os.X_OK):
        pytest.fail(
            "mosquitto_passwd not found: install it with `sudo apt-get install mosquitto`",
            pytrace=False,
        )
    return found


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    directory = tmp_path_factory.mktemp("secured")
    topology = load_topology(MOTES_LIGHT)
    users = [*topology.nodes, REPLAY, READER, bridge_user(BRIDGED_SITE)]
    passwords = {user: secrets.token_urlsafe(12) for user in users}
    password_file = directory / "passwd"
    password_file.touch(mode=0o600)
    password_file.write_text("".join(f"{u}:{p}\n" for u, p in passwords.items()))
    # -U hashes a file of "user:plaintext" lines in place, as SECURITY.md describes.
    subprocess.run([_mosquitto_passwd(), "-U", str(password_file)], check=True, timeout=30)
    assert all(p not in password_file.read_text() for p in passwords.values())
    acl_file = directory / "acl"
    acl_file.write_text(
        generate_acl(topology, readers=[READER], replay=REPLAY, bridges=[BRIDGED_SITE])
    )
    tls = make_tls_material(directory / "certs", clients=("pi-01",))
    return Deployment(directory, topology, passwords, tls, password_file, acl_file)


# ---------------------------------------------------------------------------
# A secured Mosquitto started from broker_config/secured.conf
# ---------------------------------------------------------------------------


def _replace_options(template: str, values: Mapping[str, str]) -> str:
    """``template`` with the value of each option in ``values`` replaced.

    Options the template does not set are appended, after its last line: Mosquitto takes
    global options anywhere, and listener options apply to the last listener.
    """
    lines, seen = [], set()
    for line in template.splitlines():
        words = line.split(None, 1)
        if words and words[0] in values:
            line = f"{words[0]} {values[words[0]]}"
            seen.add(words[0])
        lines.append(line)
    lines += [f"{key} {value}" for key, value in values.items() if key not in seen]
    return "\n".join(lines) + "\n"


def secured_config(
    deployment: Deployment,
    *,
    port: int,
    data_dir: Path,
    overrides: Mapping[str, str] | None = None,
    extra: str = "",
) -> str:
    """``broker_config/secured.conf`` with the test's port, files and data directory."""
    template = SECURED_CONF.read_text(encoding="utf-8")
    values = {
        "listener": f"{port} {LOCAL_HOST}",
        "cafile": str(deployment.tls.ca_file),
        "certfile": str(deployment.tls.server_cert),
        "keyfile": str(deployment.tls.server_key),
        "password_file": str(deployment.password_file),
        "acl_file": str(deployment.acl_file),
    }
    for key in values:  # the shipped file must still have every option the test replaces
        assert f"\n{key} " in template, f"secured.conf has no {key} line"
    text = _replace_options(template, {**values, **(overrides or {})})
    tail = [
        f"persistence_location {data_dir}/",
        f"log_dest file {data_dir / 'mosquitto.log'}",
        # debug: the "Denied PUBLISH" lines the tests count
        *(f"log_type {kind}" for kind in ("error", "warning", "notice", "information", "debug")),
    ]
    if os.geteuid() == 0:  # as root Mosquitto would drop to user mosquitto: keep it ours
        tail.append("user root")
    return text + "\n".join(tail) + "\n" + extra


class BrokerStartError(RuntimeError):
    """The test's Mosquitto did not start."""


class PortTakenError(BrokerStartError):
    """Another process took the free port before Mosquitto bound it: try another."""


@dataclass
class SecuredBroker:
    port: int
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def log(self) -> str:
        path = self.directory / "mosquitto.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)


def _launch(config: str, directory: Path, port: int) -> SecuredBroker:
    directory.mkdir(parents=True, exist_ok=True)
    conf = directory / "mosquitto.conf"
    conf.write_text(config)
    with (directory / "stdout.log").open("wb") as out:
        process = subprocess.Popen(
            [find_mosquitto(), "-c", str(conf)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    broker = SecuredBroker(port, directory, process)
    deadline = time.monotonic() + START_TIMEOUT_S
    # Its own log says when it listens: a TCP connect could reach whoever took the port.
    while time.monotonic() < deadline and process.poll() is None:
        if RUNNING.search(broker.log):
            return broker
        time.sleep(0.02)
    broker.stop()
    stdout = (directory / "stdout.log").read_text(errors="replace")
    if ADDRESS_IN_USE in broker.log + stdout:
        raise PortTakenError(f"port {port} was taken")
    raise BrokerStartError(f"secured Mosquitto did not start: {broker.log[-800:]} {stdout[-400:]}")


@pytest.fixture
def start_broker(deployment: Deployment, tmp_path: Path) -> Iterator[Callable[..., SecuredBroker]]:
    """Factory: ``start_broker(overrides={...}, extra="...")`` -> a started `SecuredBroker`."""
    brokers: list[SecuredBroker] = []

    def start(overrides: Mapping[str, str] | None = None, extra: str = "") -> SecuredBroker:
        for attempt in range(PORT_ATTEMPTS):
            directory = tmp_path / f"broker-{len(brokers)}-{attempt}"
            port = free_port()
            config = secured_config(
                deployment, port=port, data_dir=directory, overrides=overrides, extra=extra
            )
            try:
                broker = _launch(config, directory, port)
            except PortTakenError:
                continue
            except BrokerStartError as exc:
                pytest.fail(str(exc), pytrace=False)
            brokers.append(broker)
            return broker
        pytest.fail(f"no free port for Mosquitto after {PORT_ATTEMPTS} attempts", pytrace=False)

    try:
        yield start
    finally:
        for broker in brokers:
            broker.stop()


# ---------------------------------------------------------------------------
# Clients
# ---------------------------------------------------------------------------


def client(
    deployment: Deployment,
    broker: SecuredBroker,
    user: str | None,
    *,
    password: str | None = None,
    ca_file: Path | None = None,
    **kwargs: object,
) -> aiomqtt.Client:
    """An MQTT client over TLS (trusting the test CA unless told otherwise) as ``user``."""
    if user is not None and password is None:
        password = deployment.passwords[user]
    context = ssl.create_default_context(cafile=str(ca_file or deployment.tls.ca_file))
    return aiomqtt.Client(
        LOCAL_HOST,
        broker.port,
        username=user,
        password=password,
        tls_context=context,
        timeout=CLIENT_TIMEOUT_S,
        **kwargs,  # type: ignore[arg-type]
    )


async def connect_error(mqtt_client: aiomqtt.Client) -> BaseException | None:
    """The exception connecting ``mqtt_client`` raises (None if it connects).

    paho-mqtt 2.2 leaves the socket of a failed TLS handshake to the garbage collector, whose
    ``ResourceWarning`` the strict warning filter would turn into an error in a later test;
    it is collected here, with that one warning ignored.
    """
    error = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            async with asyncio.timeout(3 * CLIENT_TIMEOUT_S), mqtt_client:
                pass
        except aiomqtt.MqttError as exc:
            error = exc
        del mqtt_client
        gc.collect()
    return error


def settings_for(deployment: Deployment, broker: SecuredBroker, user: str) -> AgentSettings:
    """What an agent on a device is given: user, password, the CA (``--ca-file``)."""
    return AgentSettings(
        host=LOCAL_HOST,
        port=broker.port,
        timeout_s=CLIENT_TIMEOUT_S,
        username=user,
        password=deployment.passwords[user],
        ca_file=deployment.tls.ca_file,
    )


async def messages_until(
    subscriber: aiomqtt.Client,
    barrier: str,
    *,
    timeout_s: float = CLIENT_TIMEOUT_S,
    quiet_s: float = 0.0,
) -> list[aiomqtt.Message]:
    """Messages received up to and including the first on topic ``barrier``, then ``quiet_s``.

    MQTT keeps the order of one publisher's messages to one subscriber, so a message that
    was published before the barrier and is delivered at all arrives before it; the quiet
    period catches anything later.
    """
    got: list[aiomqtt.Message] = []
    async with asyncio.timeout(timeout_s):
        async for message in subscriber.messages:
            got.append(message)
            if str(message.topic) == barrier:
                break
    if quiet_s > 0:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(quiet_s):
                async for message in subscriber.messages:
                    got.append(message)
    return got


def topics(messages: list[aiomqtt.Message]) -> list[str]:
    return [str(m.topic) for m in messages]


# ---------------------------------------------------------------------------
# The generated ACL (no broker)
# ---------------------------------------------------------------------------


def parse_acl(text: str) -> dict[str, list[tuple[str, str]]]:
    """``{user: [(access, topic), ...]}`` from an ACL; fails on any other kind of line."""
    grants: dict[str, list[tuple[str, str]]] = {}
    user = None
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        if keyword == "user":
            user = rest
            assert user not in grants, f"two sections for {user}"
            grants[user] = []
            continue
        access, _, topic = rest.partition(" ")
        assert keyword == "topic", line
        assert access in ("read", "write", "readwrite"), line
        assert user is not None, f"{line!r} would apply to anonymous clients"
        grants[user].append((access, topic))
    return grants


def may(grants: list[tuple[str, str]], access: str, topic: str) -> bool:
    """Whether ``grants`` allow ``access`` ("read" or "write") on ``topic``."""
    return any(
        access in granted.replace("readwrite", "read write").split()
        and paho.topic_matches_sub(pattern, topic)
        for granted, pattern in grants
    )


def test_generated_acl_for_motes_light_has_one_section_per_node_with_its_own_topics() -> None:
    topology = load_topology(MOTES_LIGHT)
    text = generate_acl(topology, readers=[READER])
    assert text.startswith(
        "# Mosquitto acl_file generated by `edge-runtime acl` from topology 'motes-light'"
    )
    grants = parse_acl(text)
    assert list(grants) == [*topology.nodes, REPLAY, READER]
    assert grants["pi-01"] == [
        ("readwrite", "sensors/pi-01"),
        ("readwrite", "fpca/root/site-a/pi-01/subspace"),
        ("write", "fpca/root/site-a/pi-01/status"),
        ("write", "fpca/root/site-a/pi-01/status/detail"),
        ("read", "fpca/root/model"),
    ]
    assert grants["site-a"] == [
        ("read", "fpca/root/site-a/+/subspace"),
        ("read", "fpca/root/site-a/+/status"),
        ("read", "fpca/root/site-a/+/status/detail"),
        ("readwrite", "fpca/root/site-a/subspace"),
        ("write", "fpca/root/site-a/status"),
        ("write", "fpca/root/site-a/status/detail"),
        ("read", "fpca/root/model"),
    ]
    assert grants["root"] == [
        ("read", "fpca/root/+/subspace"),
        ("read", "fpca/root/+/status"),
        ("read", "fpca/root/+/status/detail"),
        ("readwrite", "fpca/root/subspace"),
        ("write", "fpca/root/status"),
        ("write", "fpca/root/status/detail"),
        ("readwrite", "fpca/root/model"),
    ]
    assert grants[REPLAY][:3] == [
        ("write", "sensors/pi-01"),
        ("read", "fpca/root/site-a/pi-01/status"),
        ("read", "fpca/root/site-a/pi-01/status/detail"),
    ]
    assert len(grants[REPLAY]) == 3 * len(topology.leaves())
    assert grants[READER] == [("read", "fpca/#")]
    # Every "topic" line is preceded by a comment saying why.
    lines = text.splitlines()
    assert all(lines[i - 1].startswith("# ") for i, ln in enumerate(lines) if ln.startswith("t"))


def test_generated_acl_lets_no_node_write_or_read_what_is_not_its_own() -> None:
    topology = load_topology(MOTES_LIGHT)
    grants = parse_acl(generate_acl(topology, readers=[READER], bridges=[BRIDGED_SITE]))
    model = topology.model_topic()

    def topics_of(node: str) -> dict[str, str | None]:
        return {
            "subspace": topology.subspace_topic(node),
            "status": topology.status_topic(node),
            "detail": topology.status_detail_topic(node),
            "sensor": topology.nodes[node].sensor_topic,  # None for an aggregator
        }

    for node in topology.nodes:
        for other in topology.nodes:
            for kind, topic in topics_of(other).items():
                if topic is None:
                    continue
                writable = other == node  # all of its own topics, nobody else's
                if other == node:  # its own snapshot and readings, not its status
                    readable = kind in ("subspace", "sensor")
                else:  # its children's snapshots and status, never anyone's readings
                    readable = topology.nodes[other].parent == node and kind != "sensor"
                assert may(grants[node], "write", topic) == writable, (node, topic)
                assert may(grants[node], "read", topic) == readable, (node, topic)
        assert may(grants[node], "read", model)
        assert may(grants[node], "write", model) == (node == topology.root)
    for user in (READER, REPLAY):
        assert not may(grants[user], "write", model)
        assert not any(
            may(grants[user], "write", topology.subspace_topic(n)) for n in topology.nodes
        )
    bridge = grants[bridge_user(BRIDGED_SITE)]
    assert may(bridge, "write", "fpca/root/site-a/subspace")
    assert may(bridge, "write", "fpca/root/site-a/pi-03/status")
    assert not may(bridge, "write", "fpca/root/site-a/pi-03/subspace")
    assert not may(bridge, "write", "fpca/root/site-b/subspace")
    assert not may(bridge, "write", model)
    assert may(bridge, "read", model)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"readers": ["pi-01"]}, "used twice"),
        ({"readers": [REPLAY]}, "used twice"),
        ({"readers": ["dash board"]}, "whitespace"),
        ({"replay": "re:play"}, "':'"),
        ({"bridges": ["root"]}, "root"),
        ({"bridges": ["nowhere"]}, "unknown node"),
    ],
)
def test_generate_acl_refuses_users_mosquitto_cannot_tell_apart_or_store(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(AclError, match=message):
        generate_acl(load_topology(MOTES_LIGHT), **kwargs)  # type: ignore[arg-type]


def test_secured_conf_refuses_anonymous_clients_and_fits_the_largest_legal_snapshot() -> None:
    options = {}
    for line in SECURED_CONF.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            options[key] = value
    assert options["allow_anonymous"] == "false"
    assert options["use_username_as_clientid"] == "true"
    assert options["persistence"] == "true"
    assert options["listener"] == "8883"
    assert options["cafile"].startswith("/etc/mosquitto/certs/")
    # 4 MiB payload (the runtime's limit) + the longest topic + MQTT header fit.
    assert int(options["max_packet_size"]) >= AgentSettings().max_payload_bytes + 65537 + 16


# ---------------------------------------------------------------------------
# Authentication
# ---------------------------------------------------------------------------


@pytest.mark.mqtt
async def test_wrong_password_unknown_user_and_anonymous_clients_are_refused(
    deployment: Deployment, start_broker: Callable[..., SecuredBroker]
) -> None:
    broker = start_broker()
    refused = {
        "wrong password": client(deployment, broker, "pi-01", password="not-the-password"),
        "unknown user": client(deployment, broker, "mallory", password="x"),
        "another node's password": client(
            deployment, broker, "pi-01", password=deployment.passwords["pi-02"]
        ),
        "anonymous": client(deployment, broker, None),
    }
    for case, refused_client in refused.items():
        with pytest.raises(MqttConnectError) as info:
            async with asyncio.timeout(CLIENT_TIMEOUT_S), refused_client:
                pass
        rc = info.value.rc
        assert isinstance(rc, paho.ReasonCode), case
        assert (rc.value, str(rc)) == (NOT_AUTHORISED, "Not authorized"), case
    async with asyncio.timeout(CLIENT_TIMEOUT_S), client(deployment, broker, "pi-01"):
        pass  # the right password is accepted
    assert broker.log.count("disconnected, not authorised") == len(refused)


# ---------------------------------------------------------------------------
# Authorisation: the ACL generated from the topology
# ---------------------------------------------------------------------------


@pytest.mark.mqtt
async def test_a_leaf_publishing_on_other_nodes_topics_reaches_no_subscriber(
    deployment: Deployment, start_broker: Callable[..., SecuredBroker]
) -> None:
    topology = deployment.topology
    broker = start_broker()
    own = topology.subspace_topic("pi-01")
    forged = [
        topology.subspace_topic("pi-02"),  # a sibling's snapshot
        topology.status_topic("pi-02"),  # a sibling's liveness
        topology.subspace_topic("site-a"),  # its parent's snapshot
        topology.model_topic(),  # the global estimate
        topology.nodes["pi-02"].sensor_topic,  # a sibling's readings
        topology.subspace_topic("pi-05"),  # a leaf of the other site
    ]
    async with (
        client(deployment, broker, "site-a") as parent,
        client(deployment, broker, READER) as dashboard,
        client(deployment, broker, "pi-01") as leaf,
    ):
        await parent.subscribe(topology.children_filter("site-a"), qos=1)
        await dashboard.subscribe("fpca/#", qos=1)
        await dashboard.subscribe("sensors/#", qos=1)  # granted, yet it may read none of it
        # acl_file does not check SUBSCRIBE: the leaf may subscribe to everything...
        granted = await leaf.subscribe("fpca/#", qos=1)
        assert [code.value for code in granted] == [1]
        for topic in forged:
            # ...and the broker drops each forged publish without telling it (MQTT 3.1.1):
            assert await leaf.publish(topic, b"forged", qos=1, retain=True) is None
        await leaf.publish(own, b"mine", qos=1, retain=True)
        to_parent, to_dashboard, to_leaf = await asyncio.gather(
            messages_until(parent, own, quiet_s=QUIET_S),
            messages_until(dashboard, own, quiet_s=QUIET_S),
            messages_until(leaf, own, quiet_s=QUIET_S),
        )
    assert topics(to_parent) == [own]
    assert topics(to_dashboard) == [own]
    # ...and delivers to the leaf only what it may read: its own snapshot.
    assert topics(to_leaf) == [own]
    assert [m.payload for m in to_parent] == [b"mine"]
    # Nothing forged was retained either: a new subscriber finds only the leaf's own snapshot.
    async with client(deployment, broker, READER) as late:
        for topic in [*forged, own]:
            await late.subscribe(topic, qos=1)
        retained = await messages_until(late, own)
    assert topics(retained) == [own]
    assert broker.log.count("Denied PUBLISH from pi-01") == len(forged)


@pytest.mark.mqtt
async def test_a_denied_publish_is_visible_only_as_an_mqtt5_puback_code_in_a_paho_hook(
    deployment: Deployment, start_broker: Callable[..., SecuredBroker]
) -> None:
    """What a runtime can use to detect a denied publish: aiomqtt itself reports nothing."""
    topology = deployment.topology
    broker = start_broker()
    results = {}
    for protocol in (aiomqtt.ProtocolVersion.V5, aiomqtt.ProtocolVersion.V311):
        codes: list[tuple[int, str]] = []
        async with client(deployment, broker, "pi-01", protocol=protocol) as leaf:
            paho_client = leaf._client  # aiomqtt 2.5 has no public hook for PUBACK codes
            aiomqtt_on_publish = paho_client.on_publish

            def on_publish(c, userdata, mid, rc, props, _next=aiomqtt_on_publish, _codes=codes):
                _codes.append((rc.value, str(rc)))
                _next(c, userdata, mid, rc, props)

            paho_client.on_publish = on_publish
            denied = await leaf.publish(topology.subspace_topic("pi-02"), b"x", qos=1)
            allowed = await leaf.publish(topology.subspace_topic("pi-01"), b"x", qos=1)
        assert denied is None and allowed is None  # both "succeed" as far as aiomqtt says
        results[protocol] = codes
    assert results[aiomqtt.ProtocolVersion.V5] == [
        (NOT_AUTHORISED, "Not authorized"),
        (16, "No matching subscribers"),
    ]
    assert results[aiomqtt.ProtocolVersion.V311] == [(0, "Success"), (0, "Success")]


_FORGED_WILL_CHILD = r"""
import os, signal, ssl, sys, time
import paho.mqtt.client as mqtt
port, ca, user, password, will_topic = sys.argv[1:]
c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=user)
c.username_pw_set(user, password)
c.tls_set_context(ssl.create_default_context(cafile=ca))
c.will_set(will_topic, b"will of " + user.encode(), qos=1)
connected = []
c.on_connect = lambda *args: connected.append(args[3])
c.connect("127.0.0.1", int(port), keepalive=60)
c.loop_start()
deadline = time.monotonic() + 5
while not connected and time.monotonic() < deadline:
    time.sleep(0.01)
print(connected, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no DISCONNECT: the broker sends the Will
"""


@pytest.mark.mqtt
async def test_a_last_will_on_another_nodes_status_topic_is_never_delivered(
    deployment: Deployment, start_broker: Callable[..., SecuredBroker]
) -> None:
    topology = deployment.topology
    broker = start_broker()

    async def die_with_will(user: str, will_topic: str) -> None:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _FORGED_WILL_CHILD,
            str(broker.port),
            str(deployment.tls.ca_file),
            user,
            deployment.passwords[user],
            will_topic,
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await child.communicate()
        assert child.returncode == -signal.SIGKILL
        assert b"Success" in out, out

    async with client(deployment, broker, "site-a") as parent:
        await parent.subscribe(f"fpca/{topology.path('site-a')}/+/status", qos=1)
        async with asyncio.timeout(3 * CLIENT_TIMEOUT_S):
            await die_with_will("pi-01", topology.status_topic("pi-02"))  # forged
            await die_with_will("pi-03", topology.status_topic("pi-03"))  # its own
            got = await messages_until(parent, topology.status_topic("pi-03"), quiet_s=QUIET_S)
    assert [(str(m.topic), m.payload) for m in got] == [
        (topology.status_topic("pi-03"), b"will of pi-03")
    ]


@pytest.mark.mqtt
async def test_the_largest_legal_snapshot_passes_and_a_larger_packet_is_refused(
    deployment: Deployment, start_broker: Callable[..., SecuredBroker]
) -> None:
    topology = deployment.topology
    broker = start_broker()
    own = topology.subspace_topic("pi-01")
    largest = DEFAULT_MAX_PAYLOAD_BYTES  # what the runtime's encoder and decoders allow
    async with (
        client(deployment, broker, "site-a") as parent,
        client(deployment, broker, "pi-01") as leaf,
    ):
        await parent.subscribe(topology.children_filter("site-a"), qos=1)
        await leaf.publish(own, os.urandom(largest), qos=1)
        got = await messages_until(parent, own)
        assert [len(m.payload) for m in got] == [largest]  # type: ignore[arg-type]
        # 300 KiB more than the largest legal payload: the broker disconnects the sender
        # (and the publish, waiting for a PUBACK that never comes, times out).
        with pytest.raises(aiomqtt.MqttError):
            await leaf.publish(own, os.urandom(largest + 300 * 1024), qos=1, timeout=1.0)
    assert broker.log.count("Client pi-01 disconnected due to oversize packet.") == 1


# ---------------------------------------------------------------------------
# Client ids: use_username_as_clientid
# ---------------------------------------------------------------------------


async def _is_connected(deployment: Deployment, broker: SecuredBroker, victim: aiomqtt.Client):
    """Whether ``victim`` (pi-01) still publishes, and receives what the root publishes."""
    topology = deployment.topology
    try:
        async with client(deployment, broker, "site-a") as parent:
            await parent.subscribe(topology.children_filter("site-a"), qos=1)
            await victim.publish(topology.subspace_topic("pi-01"), b"still here", qos=1)
            assert topics(await messages_until(parent, topology.subspace_topic("pi-01")))
        async with client(deployment, broker, "root") as root:
            await root.publish(topology.model_topic(), b"model", qos=1)
        got = await messages_until(victim, topology.model_topic())
        return topics(got) == [topology.model_topic()]
    except aiomqtt.MqttError:
        return False


@pytest.mark.mqtt
async def test_a_node_cannot_take_over_another_nodes_client_id(
    deployment: Deployment, start_broker: Callable[..., SecuredBroker]
) -> None:
    broker = start_broker()
    topology = deployment.topology
    agent_id = "edge-fpca-pi-01"  # what LeafAgent asks for
    async with client(deployment, broker, "pi-01", identifier=agent_id) as victim:
        await victim.subscribe(topology.model_topic(), qos=1)
        for wanted in (agent_id, "pi-01"):  # the id it asked for, and the one it really has
            async with client(deployment, broker, "pi-02", identifier=wanted):
                pass
            # CONNACK to the intruder came after the broker dealt with any old session.
            assert await _is_connected(deployment, broker, victim)
    log = broker.log
    assert log.count("as pi-02 (") == 2  # the intruder's client id was its user name
    assert "already connected, closing old connection" not in log


@pytest.mark.mqtt
async def test_without_use_username_as_clientid_a_node_can_take_over_another(
    deployment: Deployment, start_broker: Callable[..., SecuredBroker]
) -> None:
    """The contrast: the setting, not the ACL, is what stops the takeover above."""
    broker = start_broker(overrides={"use_username_as_clientid": "false"})
    topology = deployment.topology
    async with client(deployment, broker, "pi-01", identifier="edge-fpca-pi-01") as victim:
        await victim.subscribe(topology.model_topic(), qos=1)
        async with client(deployment, broker, "pi-02", identifier="edge-fpca-pi-01"):
            pass
        assert not await _is_connected(deployment, broker, victim)
    assert "Client edge-fpca-pi-01 already connected, closing old connection" in broker.log


# ---------------------------------------------------------------------------
# TLS
# ---------------------------------------------------------------------------


@pytest.mark.mqtt
async def test_tls_connects_when_the_client_trusts_the_test_ca_and_fails_clearly_otherwise(
    deployment: Deployment, start_broker: Callable[..., SecuredBroker]
) -> None:
    broker = start_broker()
    settings = settings_for(deployment, broker, "pi-01")
    # The agents' own code path (AgentSettings.tls_context), by IP and by host name: the
    # certificate names both, and the host name is verified.
    for host in (LOCAL_HOST, "localhost"):
        kwargs = {**settings.client_kwargs(), "hostname": host}
        async with asyncio.timeout(CLIENT_TIMEOUT_S), aiomqtt.Client(**kwargs):
            pass
    untrusted = {
        "an unrelated CA": ssl.create_default_context(cafile=str(deployment.tls.other_ca_file)),
        "the system's CAs": ssl.create_default_context(),
    }
    for case, context in untrusted.items():
        kwargs = {**settings.client_kwargs(), "tls_context": context}
        error = await connect_error(aiomqtt.Client(**kwargs))
        assert isinstance(error, aiomqtt.MqttError), case
        assert "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed" in str(error), case
    assert broker.log.count("tlsv1 alert unknown ca") == len(untrusted)


@pytest.mark.mqtt
async def test_require_certificate_refuses_devices_without_a_client_certificate(
    deployment: Deployment, start_broker: Callable[..., SecuredBroker]
) -> None:
    broker = start_broker(overrides={"require_certificate": "true"})
    settings = settings_for(deployment, broker, "pi-01")
    device = deployment.tls.clients["pi-01"]
    with_cert = replace(settings, cert_file=device.cert_file, key_file=device.key_file)
    async with asyncio.timeout(CLIENT_TIMEOUT_S), aiomqtt.Client(**with_cert.client_kwargs()):
        pass
    # With TLS 1.3 the client finishes its handshake before the broker checks for a
    # certificate; the broker then closes the connection and aiomqtt 2.5, which ignores a
    # disconnect before CONNACK, reports only a time-out.
    without_cert = replace(settings, timeout_s=REFUSED_TIMEOUT_S)
    error = await connect_error(aiomqtt.Client(**without_cert.client_kwargs()))
    assert isinstance(error, aiomqtt.MqttError)
    assert str(error) == "Operation timed out"
    assert "peer did not return a certificate" in broker.log


# ---------------------------------------------------------------------------
# Agents end to end on the secured broker
# ---------------------------------------------------------------------------


@pytest.mark.mqtt
async def test_agents_with_their_own_credentials_run_end_to_end_over_tls(
    deployment: Deployment, start_broker: Callable[..., SecuredBroker]
) -> None:
    topology = deployment.topology
    broker = start_broker()
    data = low_rank_data(60, 48, 5, seed=7)  # one block of 50, then 10 flushed when idle
    leaf = LeafAgent(topology, "pi-01", settings_for(deployment, broker, "pi-01"))
    site = AggregatorAgent(topology, "site-a", settings_for(deployment, broker, "site-a"))
    root = AggregatorAgent(topology, "root", settings_for(deployment, broker, "root"))
    async with (
        client(deployment, broker, READER) as dashboard,
        leaf,
        site,
        root,
    ):
        await dashboard.subscribe(topology.model_topic(), qos=1)
        await dashboard.subscribe(topology.status_topic("pi-01"), qos=1)
        for agent in (leaf, site, root):
            await agent.wait_connected(CLIENT_TIMEOUT_S)
        async with client(deployment, broker, REPLAY) as replay:
            for seq, row in enumerate(data):
                payload = encode_readings(row, source="replay:pi-01", seq=seq)
                await replay.publish(topology.nodes["pi-01"].sensor_topic, payload, qos=1)
        model = None
        statuses = []
        async with asyncio.timeout(15):
            async for message in dashboard.messages:
                if str(message.topic) == topology.status_topic("pi-01"):
                    statuses.append(message.payload)
                    continue
                model = decode_subspace(bytes(message.payload))  # type: ignore[arg-type]
                if model.n_samples == len(data):
                    break
    assert model is not None
    assert model.provenance == {"pi-01": len(data)}
    assert model.node_id == "root"
    assert leaf.n_samples == len(data)
    assert leaf.ingested == {"replay:pi-01": len(data) - 1}
    assert b"online" in statuses
    for agent in (leaf, site, root):
        assert dict(agent.rejects) == {}, agent.node_id
        assert agent.stats.reconnects == 0, agent.node_id
        assert agent.undelivered == 0, agent.node_id  # every snapshot came back (echo)
    assert "Denied PUBLISH" not in broker.log


@pytest.mark.mqtt
async def test_a_leaf_whose_snapshots_the_acl_denies_reports_them_undelivered(
    deployment: Deployment, start_broker: Callable[..., SecuredBroker]
) -> None:
    """The ACL was generated before pi-01 moved from site-a to site-b and not regenerated."""
    text = MOTES_LIGHT.read_text(encoding="utf-8")
    moved_text = text.replace('id = "pi-01"\nparent = "site-a"', 'id = "pi-01"\nparent = "site-b"')
    assert moved_text != text
    moved = parse_topology(moved_text, source_path=MOTES_LIGHT)
    denied_topic = moved.subspace_topic("pi-01")
    assert denied_topic == "fpca/root/site-b/pi-01/subspace"
    broker = start_broker()
    settings = replace(
        settings_for(deployment, broker, "pi-01"), timeout_s=1.0, echo_timeout_s=ECHO_TIMEOUT_S
    )
    data = low_rank_data(50, 48, 5, seed=8)  # one block: one snapshot
    async with (
        client(deployment, broker, "site-b") as parent,
        LeafAgent(moved, "pi-01", settings) as leaf,
    ):
        await parent.subscribe(moved.children_filter("site-b"), qos=1)
        await leaf.wait_connected(CLIENT_TIMEOUT_S)
        async with client(deployment, broker, REPLAY) as replay:
            for seq, row in enumerate(data):
                payload = encode_readings(row, source="replay:pi-01", seq=seq)
                await replay.publish(moved.nodes["pi-01"].sensor_topic, payload, qos=1)
        async with asyncio.timeout(4 * CLIENT_TIMEOUT_S):
            while leaf.undelivered < 1:
                await asyncio.sleep(0.05)
        assert leaf.n_samples == len(data)  # it reads its readings: sensors/pi-01 is its own
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.1):
                async for message in parent.messages:
                    pytest.fail(f"the parent received {message.topic}")
    assert "Denied PUBLISH from pi-01 (d0, q1, r1, m" in broker.log
    assert f"'{denied_topic}'" in broker.log


# ---------------------------------------------------------------------------
# The bridge example
# ---------------------------------------------------------------------------


@pytest.mark.mqtt
async def test_bridge_example_carries_the_sites_topics_up_and_the_model_down(
    deployment: Deployment, start_broker: Callable[..., SecuredBroker]
) -> None:
    topology = deployment.topology
    central = start_broker()
    bridge = _replace_options(
        BRIDGE_CONF.read_text(encoding="utf-8"),
        {
            "address": f"{LOCAL_HOST}:{central.port}",
            "remote_password": deployment.passwords[bridge_user(BRIDGED_SITE)],
            "bridge_cafile": str(deployment.tls.ca_file),
        },
    )
    assert "remote_username bridge-site-a\n" in bridge
    site = start_broker(extra=bridge)
    leaf_status = topology.status_topic("pi-01")
    async with (
        client(deployment, central, "root") as root,
        client(deployment, central, READER) as dashboard,
    ):
        await root.subscribe(topology.children_filter("root"), qos=1)
        await dashboard.subscribe("fpca/#", qos=1)
        async with (
            client(deployment, site, "site-a") as site_a,
            client(deployment, site, "pi-01") as leaf,
        ):
            await leaf.subscribe(topology.model_topic(), qos=1)
            await leaf.publish(topology.subspace_topic("pi-01"), b"leaf", qos=1, retain=True)
            await leaf.publish(leaf_status, b"online", qos=1, retain=True)
            await site_a.publish(topology.subspace_topic("site-a"), b"site", qos=1, retain=True)
            up = await messages_until(root, topology.subspace_topic("site-a"), timeout_s=10)
            await root.publish(topology.model_topic(), b"model", qos=1, retain=True)
            down = await messages_until(leaf, topology.model_topic())
        seen_centrally = await messages_until(dashboard, topology.model_topic())
        # The bridge's user cannot write outside its site on the central broker.
        async with client(deployment, central, bridge_user(BRIDGED_SITE)) as intruder:
            await intruder.publish(topology.subspace_topic("site-b"), b"forged", qos=1)
            await intruder.publish(topology.subspace_topic("site-a"), b"site 2", qos=1)
        after = await messages_until(root, topology.subspace_topic("site-a"))
        # Retained flags cross the bridge: the central broker keeps the site's snapshot.
        async with client(deployment, central, "root") as restarted_root:
            await restarted_root.subscribe(topology.children_filter("root"), qos=1)
            retained = await messages_until(restarted_root, topology.subspace_topic("site-a"))
    assert [(str(m.topic), m.payload) for m in up] == [(topology.subspace_topic("site-a"), b"site")]
    assert [(m.payload, m.retain) for m in retained] == [(b"site", True)]
    assert topics(down) == [topology.model_topic()]
    assert set(topics(seen_centrally)) == {
        leaf_status,
        topology.subspace_topic("site-a"),
        topology.model_topic(),
    }  # the leaf's snapshot stayed on site
    assert [m.payload for m in after] == [b"site 2"]
