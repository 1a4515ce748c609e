"""Tests of edge_runtime.broker against the real Mosquitto binary."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import aiomqtt
import pytest

from edge_runtime.broker import (
    MOSQUITTO_NOT_FOUND,
    BrokerAddress,
    BrokerError,
    LocalMosquitto,
    derive_config,
    find_mosquitto,
    free_port,
    parse_broker_url,
)
from edge_runtime.broker import mosquitto as broker_module

REPO = Path(__file__).resolve().parents[1]
SHIPPED_CONFIG = REPO / "broker_config" / "mosquitto.conf"
PACKAGED_CONFIG = REPO / "edge_runtime" / "resources" / "mosquitto.conf"
WAIT_S = 10.0


async def _publish(broker: LocalMosquitto, topic: str, payload: bytes, retain: bool) -> None:
    async with (
        asyncio.timeout(WAIT_S),
        aiomqtt.Client(broker.host, broker.port) as client,
    ):
        await client.publish(topic, payload, qos=1, retain=retain)


async def _first_message(broker: LocalMosquitto, topic: str) -> aiomqtt.Message:
    async with (
        asyncio.timeout(WAIT_S),
        aiomqtt.Client(broker.host, broker.port) as client,
    ):
        await client.subscribe(topic, qos=1)
        async for message in client.messages:
            return message
    raise AssertionError("unreachable: the message iterator ended without a message")


def _process_is_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# ---------------------------------------------------------------------------
# parse_broker_url
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mqtt://localhost", BrokerAddress("localhost", 1883, tls=False)),
        ("mqtt://127.0.0.1:1884", BrokerAddress("127.0.0.1", 1884, tls=False)),
        ("mqtt://pi-hub.local:1883/", BrokerAddress("pi-hub.local", 1883, tls=False)),
        ("mqtts://broker.example.org", BrokerAddress("broker.example.org", 8883, tls=True)),
        ("mqtts://broker.example.org:9000", BrokerAddress("broker.example.org", 9000, tls=True)),
        ("mqtt://[::1]:1883", BrokerAddress("::1", 1883, tls=False)),
        ("MQTT://Pi-Hub:65535", BrokerAddress("pi-hub", 65535, tls=False)),
    ],
)
def test_parse_broker_url_accepts_mqtt_and_mqtts_with_default_ports(
    url: str, expected: BrokerAddress
) -> None:
    assert parse_broker_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "",
        "localhost:1883",
        "localhost",
        "tcp://localhost:1883",
        "ws://localhost:9001",
        "http://localhost",
        "mqtt://",
        "mqtt://:1883",
        "mqtt://localhost:",
        "mqtt://localhost:0",
        "mqtt://localhost:65536",
        "mqtt://localhost:port",
        "mqtt://user:secret@localhost",
        "mqtt://localhost/fpca",
        "mqtt://localhost?x=1",
        "mqtt://localhost#frag",
        " mqtt://localhost",
        "mqtt://local host",
    ],
)
def test_parse_broker_url_rejects_other_forms_with_a_one_line_message_naming_the_url(
    url: str,
) -> None:
    with pytest.raises(BrokerError) as info:
        parse_broker_url(url)
    message = str(info.value)
    assert repr(url) in message
    assert "expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT]" in message
    assert "\n" not in message


def test_parse_broker_url_rejects_a_non_string() -> None:
    with pytest.raises(BrokerError, match="not a string but int"):
        parse_broker_url(1883)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "address",
    [
        BrokerAddress("localhost", 1883, tls=False),
        BrokerAddress("broker.example.org", 8883, tls=True),
        BrokerAddress("::1", 20001, tls=False),
    ],
)
def test_broker_address_url_parses_back_to_the_same_address(address: BrokerAddress) -> None:
    assert parse_broker_url(address.url) == address


# ---------------------------------------------------------------------------
# free_port
# ---------------------------------------------------------------------------


def test_free_port_is_above_20000_and_can_be_bound() -> None:
    port = free_port()
    assert 20000 <= port < 60000
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()


def test_free_port_gives_up_when_every_port_in_the_range_is_taken() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        with pytest.raises(BrokerError, match=rf"no free TCP port .*\[{taken}, {taken + 1}\)"):
            free_port(low=taken, high=taken + 1)


@pytest.mark.parametrize(("low", "high"), [(20000, 20000), (0, 100), (60000, 70000)])
def test_free_port_rejects_an_empty_or_invalid_range(low: int, high: int) -> None:
    with pytest.raises(ValueError, match=rf"port range \[{low}, {high}\)"):
        free_port(low=low, high=high)


# ---------------------------------------------------------------------------
# find_mosquitto
# ---------------------------------------------------------------------------


def test_find_mosquitto_finds_the_real_broker_binary() -> None:
    path = find_mosquitto()
    assert os.path.basename(path) == "mosquitto"
    assert os.access(path, os.X_OK)
    result = subprocess.run([path, "-h"], capture_output=True, text=True, timeout=WAIT_S)
    assert "mosquitto version" in result.stdout + result.stderr


def test_find_mosquitto_falls_back_to_sbin_when_it_is_not_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = find_mosquitto()
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(broker_module, "MOSQUITTO_FALLBACK_PATHS", ("/nonexistent/mosquitto", real))
    assert find_mosquitto() == real


def test_find_mosquitto_explains_how_to_install_it_when_it_is_nowhere(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(broker_module, "MOSQUITTO_FALLBACK_PATHS", ())
    with pytest.raises(BrokerError) as info:
        find_mosquitto()
    assert str(info.value) == MOSQUITTO_NOT_FOUND
    assert str(info.value).startswith(
        "mosquitto not found: install it with `sudo apt-get install mosquitto` "
        "(Debian/Raspberry Pi OS)"
    )


# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------


def test_packaged_config_is_a_relative_symlink_to_the_shipped_config() -> None:
    assert PACKAGED_CONFIG.is_symlink()
    assert os.readlink(PACKAGED_CONFIG) == "../../broker_config/mosquitto.conf"
    assert PACKAGED_CONFIG.resolve() == SHIPPED_CONFIG.resolve()


def test_shipped_config_sizes_queues_and_persists_and_listens_on_loopback_only() -> None:
    settings = [
        line.strip()
        for line in SHIPPED_CONFIG.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for expected in [
        "per_listener_settings false",
        "max_queued_messages 10000",
        "max_inflight_messages 100",
        "message_size_limit 0",
        "max_packet_size 8388608",
        "persistence true",
        "autosave_interval 60",
        "listener 1883 127.0.0.1",
        "allow_anonymous true",
    ]:
        assert expected in settings
    assert [s for s in settings if s.split()[0] == "listener"] == ["listener 1883 127.0.0.1"]
    assert not [s for s in settings if s.split()[0] in ("persistence_location", "pid_file")]


def test_derived_config_replaces_listener_persistence_and_log_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    template = "\n".join(
        [
            "max_queued_messages 10000",
            "listener 1883 0.0.0.0",
            "port 1884",
            "bind_address 0.0.0.0",
            "persistence_location /var/lib/mosquitto/",
            "log_dest file /var/log/mosquitto/mosquitto.log",
            "pid_file /run/mosquitto/mosquitto.pid",
            "user mosquitto",
            "allow_anonymous false",
            "# listener 1 comment stays",
        ]
    )
    derived = derive_config(template, port=23456, data_dir=tmp_path)
    lines = derived.splitlines()
    assert "max_queued_messages 10000" in lines
    assert "# listener 1 comment stays" in lines
    assert "# replaced by edge_runtime.broker: listener 1883 0.0.0.0" in lines
    active = [line for line in lines if line and not line.startswith("#")]
    expected_tail = [
        f"persistence_location {tmp_path}/",
        f"log_dest file {tmp_path}/mosquitto.log",
        "log_type error",
        "log_type warning",
        "log_type notice",
        "log_type information",
        *(["user root"] if os.geteuid() == 0 else []),
        "listener 23456 127.0.0.1",
        "allow_anonymous true",
    ]
    assert active == ["max_queued_messages 10000", *expected_tail]


def test_derived_config_refuses_a_directory_with_a_line_break() -> None:
    with pytest.raises(BrokerError, match="line break"):
        derive_config("", port=23456, data_dir="/tmp/a\nlistener 1883")


# ---------------------------------------------------------------------------
# LocalMosquitto
# ---------------------------------------------------------------------------


@pytest.mark.mqtt
async def test_local_mosquitto_round_trips_a_retained_qos1_message_from_an_anonymous_client(
    mosquitto: LocalMosquitto, unique_topic: str
) -> None:
    assert mosquitto.url == f"mqtt://127.0.0.1:{mosquitto.port}"
    assert mosquitto.port is not None and mosquitto.port >= 20000
    topic = f"{unique_topic}/retained"
    await _publish(mosquitto, topic, b"hello", retain=True)
    message = await _first_message(mosquitto, topic)
    assert message.topic.value == topic
    assert message.payload == b"hello"
    assert message.qos == 1
    assert message.retain


@pytest.mark.mqtt
async def test_local_mosquitto_delivers_a_live_qos1_message_to_a_subscriber(
    mosquitto_session: LocalMosquitto, unique_topic: str
) -> None:
    broker = mosquitto_session
    async with (
        asyncio.timeout(WAIT_S),
        aiomqtt.Client(broker.host, broker.port) as client,
    ):
        await client.subscribe(f"{unique_topic}/#", qos=1)
        await client.publish(f"{unique_topic}/live", b"\x00\x01", qos=1)
        async for message in client.messages:
            assert message.topic.value == f"{unique_topic}/live"
            assert message.payload == b"\x00\x01"
            assert not message.retain
            break


@pytest.mark.mqtt
async def test_local_mosquitto_queues_more_than_1000_messages_for_an_offline_subscriber(
    mosquitto: LocalMosquitto, unique_topic: str
) -> None:
    # Mosquitto's default max_queued_messages (1000) would drop the rest silently; the
    # shipped config raises it to 10000.
    n_messages = 2500
    topic = f"{unique_topic}/queued"
    identifier = unique_topic.replace("/", "-")
    async with asyncio.timeout(WAIT_S):
        async with aiomqtt.Client(
            mosquitto.host, mosquitto.port, identifier=identifier, clean_session=False
        ) as subscriber:
            await subscriber.subscribe(topic, qos=1)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port) as publisher:
            for i in range(n_messages):
                await publisher.publish(topic, i.to_bytes(4, "big"), qos=1)
        received = []
        async with aiomqtt.Client(
            mosquitto.host, mosquitto.port, identifier=identifier, clean_session=False
        ) as subscriber:
            async for message in subscriber.messages:
                assert isinstance(message.payload, bytes)
                received.append(int.from_bytes(message.payload, "big"))
                if len(received) == n_messages:
                    break
    assert sorted(received) == list(range(n_messages))


@pytest.mark.mqtt
def test_stop_leaves_no_process_and_removes_the_directory_and_can_be_repeated(
    make_mosquitto: Callable[..., LocalMosquitto],
) -> None:
    broker = make_mosquitto()
    broker.start()
    pid = broker.pid
    data_dir = broker.data_dir
    assert pid is not None and data_dir is not None and broker.running
    assert not _process_is_gone(pid)
    broker.stop()
    assert _process_is_gone(pid)
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    assert not data_dir.exists()
    assert broker.pid is None and not broker.running and broker.data_dir is None
    broker.stop()


@pytest.mark.mqtt
def test_local_mosquitto_works_as_a_context_manager() -> None:
    with LocalMosquitto() as broker:
        pid = broker.pid
        assert pid is not None and broker.running
    assert _process_is_gone(pid)


@pytest.mark.mqtt
def test_start_fails_with_the_log_line_when_mosquitto_rejects_the_config(
    make_mosquitto: Callable[..., LocalMosquitto], tmp_path: Path
) -> None:
    template = tmp_path / "bad.conf"
    template.write_text("max_queued_messages 10000\nno_such_option 1\n", encoding="utf-8")
    broker = make_mosquitto(template)
    with pytest.raises(BrokerError) as info:
        broker.start()
    message = str(info.value)
    assert 'Error: Unknown configuration variable "no_such_option".' in message
    assert "Mosquitto exited with code" in message
    assert broker.pid is None and broker.data_dir is None


@pytest.mark.mqtt
def test_start_succeeds_with_a_template_that_logs_errors_only(
    make_mosquitto: Callable[..., LocalMosquitto], tmp_path: Path
) -> None:
    template = tmp_path / "quiet.conf"
    template.write_text(
        SHIPPED_CONFIG.read_text(encoding="utf-8") + "\nlog_type error\n", encoding="utf-8"
    )
    broker = make_mosquitto(template)
    broker.start()
    assert broker.running


@pytest.mark.mqtt
def test_start_fails_with_address_in_use_when_a_fixed_port_is_taken(
    make_mosquitto: Callable[..., LocalMosquitto],
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        broker = make_mosquitto(port=taken)
        with pytest.raises(BrokerError, match="Address already in use"):
            broker.start()
    assert broker.pid is None


@pytest.mark.mqtt
def test_start_retries_on_a_fresh_port_when_the_chosen_one_is_taken_meanwhile(
    make_mosquitto: Callable[..., LocalMosquitto], monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        # The race, forced: the first "free" port is taken by the time Mosquitto binds it.
        ports = iter([taken])
        monkeypatch.setattr(
            broker_module, "free_port", lambda host: next(ports, None) or free_port(host)
        )
        broker = make_mosquitto()
        broker.start()
        assert broker.running
        assert broker.port is not None and broker.port != taken


@pytest.mark.mqtt
def test_start_fails_clearly_when_the_executable_cannot_run(
    make_mosquitto: Callable[..., LocalMosquitto], tmp_path: Path
) -> None:
    broker = make_mosquitto(executable=str(tmp_path / "mosquitto"))
    with pytest.raises(BrokerError, match="cannot run Mosquitto"):
        broker.start()


@pytest.mark.mqtt
def test_lifecycle_misuse_raises_broker_error(
    make_mosquitto: Callable[..., LocalMosquitto],
) -> None:
    broker = make_mosquitto()
    with pytest.raises(BrokerError, match="no port yet"):
        _ = broker.url
    with pytest.raises(BrokerError, match="not running"):
        broker.signal(signal.SIGUSR1)
    broker.start()
    with pytest.raises(BrokerError, match="already running"):
        broker.start()


@pytest.mark.mqtt
async def test_restart_with_keep_dir_reuses_port_and_directory_and_keeps_retained_messages(
    make_mosquitto: Callable[..., LocalMosquitto], unique_topic: str
) -> None:
    broker = make_mosquitto(keep_dir=True)
    broker.start()
    port, data_dir, first_pid = broker.port, broker.data_dir, broker.pid
    topic = f"{unique_topic}/model"
    await _publish(broker, topic, b"kept", retain=True)
    broker.stop()
    assert data_dir is not None and (data_dir / "mosquitto.db").is_file()
    broker.start()
    assert (broker.port, broker.data_dir) == (port, data_dir)
    assert broker.pid != first_pid
    message = await _first_message(broker, topic)
    assert message.payload == b"kept"
    assert message.retain


@pytest.mark.mqtt
def test_stop_terminates_a_sigstopped_broker_gracefully(
    make_mosquitto: Callable[..., LocalMosquitto],
) -> None:
    broker = make_mosquitto(keep_dir=True)
    broker.start()
    log_path = broker.log_path
    assert log_path is not None
    broker.signal(signal.SIGSTOP)
    assert broker.running
    broker.stop(timeout_s=WAIT_S)
    assert not broker.running
    # Graceful: Mosquitto handled SIGTERM (it logs that it terminates), no SIGKILL needed.
    assert "terminating" in log_path.read_text(encoding="utf-8")


@pytest.mark.mqtt
async def test_a_sigkilled_broker_restarts_on_the_same_port(
    make_mosquitto: Callable[..., LocalMosquitto], unique_topic: str
) -> None:
    broker = make_mosquitto(keep_dir=True)
    broker.start()
    port, pid = broker.port, broker.pid
    assert pid is not None
    broker.signal(signal.SIGKILL)
    async with asyncio.timeout(WAIT_S):
        while broker.running:
            await asyncio.sleep(0.02)
    broker.start()
    assert broker.port == port and broker.pid != pid
    topic = f"{unique_topic}/after-kill"
    await _publish(broker, topic, b"back", retain=True)
    message = await _first_message(broker, topic)
    assert message.payload == b"back"
