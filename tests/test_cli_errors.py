"""Every bad-input case of the command line ends in one line on stderr and the documented
exit code (2: bad input; 1: the goal was not reached), through the installed entry point."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path

import numpy as np
import pytest

ENTRY = str(Path(sys.executable).parent / "edge-runtime")
MINIMAL = str(Path(__file__).resolve().parents[1] / "topologies" / "minimal.toml")

pytestmark = pytest.mark.timeout(120)


def cli(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENTRY, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def closed_port() -> int:
    """A loopback port above 20000 nothing listens on (bound, then released)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port > 20000:
            return port
    raise RuntimeError("no free loopback port above 20000")


def small_topology(tmp_path: Path, *, rank: int) -> Path:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    lines = [
        'name = "narrow"',
        f'prefix = "{prefix}"',
        "[defaults]",
        f"rank = {rank}",
        f"block_size = {max(rank, 10)}",
        "idle_flush_s = 0.2",
        "[[nodes]]",
        'id = "root"',
    ]
    for leaf in ("leaf-1", "leaf-2"):
        lines += ["[[nodes]]", f'id = "{leaf}"', 'parent = "root"']
        lines += [f'sensor_topic = "{prefix}-sensors/{leaf}"']
    path = tmp_path / "narrow.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((), "the following arguments are required: COMMAND"),
        (("frobnicate",), "invalid choice: 'frobnicate'"),
        (("agent", "--topology", MINIMAL), "the following arguments are required: --node"),
        (("agent", "--topology", MINIMAL, "--node"), "argument --node: expected one argument"),
        (("run", MINIMAL, "--rate", "fast"), "argument --rate: expected a number, got 'fast'"),
        (("run", MINIMAL, "--workers", "0"), "argument --workers: expected a whole number >= 1"),
        (("run", MINIMAL, "--broker", ""), "argument --broker: expected mqtt://HOST[:PORT]"),
        (("run", MINIMAL, "--broker", "  "), "argument --broker: expected mqtt://HOST[:PORT]"),
        (("agent", "--topology", MINIMAL, "--node", "leaf-1", "--broker", ""), "--broker"),
        (("watch", "--topology", MINIMAL, "--broker", ""), "argument --broker"),
        (("watch", "--topology", MINIMAL, "--broker", "mqtt://x", "--timeout", "-1"), "-1"),
        (("run", MINIMAL, "--no-such-flag"), "unrecognized arguments: --no-such-flag"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args: tuple[str, ...], needle: str) -> None:
    result = cli(*args, timeout_s=30)
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert re.match(r"^edge-runtime( \w+)?: error: ", line), line
    assert needle in line
    assert line.endswith("--help)")
    assert result.stdout == ""


def test_help_and_version_still_exit_0() -> None:
    assert cli("--version", timeout_s=30).returncode == 0
    result = cli("run", "--help", timeout_s=30)
    assert result.returncode == 0 and "--timeout" in result.stdout


def test_an_agent_that_cannot_reach_its_broker_prints_at_most_a_line_per_attempt() -> None:
    port = closed_port()
    result = cli(
        "agent",
        "--topology",
        MINIMAL,
        "--node",
        "leaf-1",
        "--broker",
        f"mqtt://127.0.0.1:{port}",
        "--startup-timeout",
        "6",
        timeout_s=40,
    )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    error = lines[-1]
    match = re.fullmatch(
        rf"edge-runtime: error: cannot reach the broker at mqtt://127\.0\.0\.1:{port} within "
        r"6 s \((\d+) attempts?, last error: .*refused.*\)",
        error,
    )
    assert match, error
    attempts = int(match.group(1))
    assert attempts >= 4  # backoff from 0.2 s: several attempts in 6 s
    logged = lines[:-1]
    assert all("connection_lost" in line for line in logged), logged
    assert 1 <= len(logged) <= attempts
    # the first failure, then failures 2, 4, 8, ...: about log2(attempts) lines
    assert len(logged) <= attempts.bit_length() + 1


def test_watch_timeout_without_until_samples_exits_1_in_one_line(mosquitto) -> None:
    result = cli(
        "watch",
        "--topology",
        MINIMAL,
        "--broker",
        f"mqtt://{mosquitto.host}:{mosquitto.port}",
        "--timeout",
        "1.5",
        timeout_s=30,
    )
    assert result.returncode == 1, result.stderr
    line = one_line(result)
    assert line.startswith("edge-runtime: error: watch timed out after 1.5 s (--timeout)")


def test_watch_timeout_with_until_samples_names_the_coverage(mosquitto) -> None:
    result = cli(
        "watch",
        "--topology",
        MINIMAL,
        "--broker",
        f"mqtt://{mosquitto.host}:{mosquitto.port}",
        "--until-samples",
        "10",
        "--timeout",
        "1",
        timeout_s=30,
    )
    assert result.returncode == 1, result.stderr
    assert "the root covers 0 of 10 samples" in one_line(result)


def test_run_warns_once_when_the_data_is_narrower_than_the_rank(tmp_path, mosquitto) -> None:
    topology = small_topology(tmp_path, rank=10)
    rng = np.random.default_rng(0)
    data = tmp_path / "narrow.csv"
    np.savetxt(data, rng.standard_normal((200, 3)), delimiter=",")
    result = cli(
        "run",
        str(topology),
        "--data",
        str(data),
        "--broker",
        f"mqtt://{mosquitto.host}:{mosquitto.port}",
        "--workers",
        "1",
        "--timeout",
        "20",
        "--json",
        timeout_s=90,
    )
    assert result.returncode == 0, result.stderr
    line = one_line(result)
    assert line == (
        "edge-runtime: warning: the data has 3 columns, fewer than the rank 10 of topology "
        "'narrow': the model will have rank at most 3"
    )


def test_run_within_the_rank_prints_nothing_on_stderr(tmp_path, mosquitto) -> None:
    topology = small_topology(tmp_path, rank=2)
    rng = np.random.default_rng(1)
    data = tmp_path / "wide.csv"
    np.savetxt(data, rng.standard_normal((200, 4)), delimiter=",")
    result = cli(
        "run",
        str(topology),
        "--data",
        str(data),
        "--broker",
        f"mqtt://{mosquitto.host}:{mosquitto.port}",
        "--workers",
        "1",
        "--json",
        timeout_s=90,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_a_topology_or_data_path_that_is_a_folder_is_one_line_and_exit_2(tmp_path) -> None:
    result = cli("run", str(tmp_path), timeout_s=30)
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert line.startswith("edge-runtime: error: ") and repr(str(tmp_path)) in line
    assert "directory" in line
    broker = f"mqtt://127.0.0.1:{closed_port()}"
    result = cli("run", MINIMAL, "--data", str(tmp_path), "--broker", broker, timeout_s=30)
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert line.startswith("edge-runtime: error: ") and repr(str(tmp_path)) in line
    assert "directory" in line


def test_a_replay_to_an_unreachable_broker_is_one_line_and_exit_1(tmp_path) -> None:
    data = tmp_path / "readings.csv"
    np.savetxt(data, np.random.default_rng(2).standard_normal((20, 4)), delimiter=",")
    broker = f"mqtt://127.0.0.1:{closed_port()}"
    result = cli(
        "replay", "--topology", MINIMAL, "--data", str(data), "--broker", broker,
        "--wait-online", "0", timeout_s=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert one_line(result).startswith(
        f"edge-runtime: error: cannot talk to the MQTT broker {broker}: "
    )
    assert result.stdout == ""


def test_a_certificate_that_cannot_be_loaded_is_one_tls_line_and_exit_2(tmp_path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate\n", encoding="utf-8")
    broker = f"mqtts://127.0.0.1:{closed_port()}"
    result = cli("watch", "--topology", MINIMAL, "--broker", broker, "--ca-file", str(ca))
    assert result.returncode == 2, result.stderr
    assert one_line(result).startswith("edge-runtime: error: TLS: ")


@pytest.mark.xfail(
    strict=False,
    reason="known bug, open: under load `watch` sometimes ignores the first Ctrl-C after it"
    " connected (seen in 4 of 5 full runs on the shared 2-core machine, never alone; py-spy:"
    " the loop idle in the main run)",
)
def test_ctrl_c_ends_a_command_with_status_130_and_nothing_on_stderr(mosquitto) -> None:
    proc = subprocess.Popen(
        [ENTRY, "watch", "--topology", MINIMAL, "--broker",
         f"mqtt://{mosquitto.host}:{mosquitto.port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # loaded and connected, also on a loaded 2-core machine (Ctrl-C while loading: the
        # test below; an interrupt during the first connection is not what this test covers)
        time.sleep(6.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()  # closes the pipes: no ResourceWarning in a later test
    assert proc.returncode == 130, err
    assert err == "" and out == ""


def test_ctrl_c_while_the_runtime_loads_is_status_130_too(monkeypatch) -> None:
    from edge_runtime.cli import main

    class Interrupted(types.ModuleType):
        def __getattr__(self, name: str) -> object:
            raise KeyboardInterrupt

    name = "edge_runtime.cli.dispatch"
    monkeypatch.setitem(sys.modules, name, Interrupted(name))
    assert main(["acl", MINIMAL]) == 130


def test_the_entry_point_module_loads_nothing_heavy_so_ctrl_c_is_caught_early() -> None:
    code = (
        "import sys, edge_runtime.cli; "
        "print(','.join(m for m in ('numpy', 'aiomqtt', 'edge_runtime.cli.dispatch') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == ""


# --- issue 21: what a new user meets on the documented (password) broker ------------------


@pytest.fixture
def password_broker(tmp_path: Path):
    """A Mosquitto with passwords (``leaf-1``, ``replay``, ``watch``: all "right"), no
    anonymous clients and use_username_as_clientid, like broker_config/network.conf, on a
    free loopback port; stopped by pid."""
    passwd = tmp_path / "passwd"
    passwd.write_text("leaf-1:right\nreplay:right\nwatch:right\n", encoding="utf-8")
    subprocess.run(["mosquitto_passwd", "-U", str(passwd)], check=True, timeout=30)
    port = closed_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        f"user root\nper_listener_settings false\nallow_anonymous false\npassword_file {passwd}\n"
        f"listener {port} 127.0.0.1\nuse_username_as_clientid true\n",
        encoding="utf-8",
    )
    proc = subprocess.Popen(
        ["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"mqtt://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_an_agent_with_a_wrong_password_names_the_user_and_file_not_reachability(
    tmp_path, password_broker
) -> None:
    secret = tmp_path / "leaf-1.password"
    secret.write_text("wrong\n", encoding="utf-8")
    result = cli(
        "agent", "--topology", MINIMAL, "--node", "leaf-1", "--broker", password_broker,
        "--username", "leaf-1", "--password-file", str(secret), "--startup-timeout", "2",
        timeout_s=40,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    error = result.stderr.splitlines()[-1]
    assert "cannot reach" not in error
    assert f"the broker at {password_broker} refused user 'leaf-1'" in error
    assert f"--password-file {str(secret)!r}" in error and "password_file" in error


def test_the_password_file_of_the_environment_is_named_too(tmp_path, password_broker) -> None:
    secret = tmp_path / "credential"
    secret.write_text("wrong\n", encoding="utf-8")
    env = {**os.environ, "EDGE_MQTT_USERNAME": "leaf-1", "EDGE_MQTT_PASSWORD_FILE": str(secret)}
    env.pop("EDGE_MQTT_PASSWORD", None)
    result = subprocess.run(
        [ENTRY, "watch", "--topology", MINIMAL, "--broker", password_broker, "--timeout", "5"],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    line = one_line(result)
    assert "refused user 'leaf-1'" in line and f"{str(secret)!r} ($EDGE_MQTT_PASSWORD_FILE)" in line


def test_a_replay_without_credentials_on_a_password_broker_hints_at_username(
    tmp_path, password_broker
) -> None:
    data = tmp_path / "readings.csv"
    np.savetxt(data, np.random.default_rng(2).standard_normal((20, 4)), delimiter=",")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGE_MQTT_")}
    result = subprocess.run(
        [ENTRY, "replay", "--topology", MINIMAL, "--data", str(data), "--broker",
         password_broker],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    line = one_line(result)
    assert "cannot talk to" not in line
    assert "without a user name" in line
    assert "--username replay --password-file replay.password" in line


def test_the_extra_hints_install_from_the_wheel_file_never_from_pypi(monkeypatch) -> None:
    import asyncio

    from edge_runtime.cli import CliError
    from edge_runtime.cli.parser import build_parser
    from edge_runtime.cli.watch import cmd_dashboard

    monkeypatch.setitem(sys.modules, "edge_runtime.dashboard.server", None)
    args = build_parser().parse_args(
        ["dashboard", "--topology", MINIMAL, "--broker", "mqtt://127.0.0.1:1"]
    )
    with pytest.raises(CliError) as info:
        asyncio.run(cmd_dashboard(args))
    hint = str(info.value)
    assert "-py3-none-any.whl[dashboard]'" in hint and "pip install '.[dashboard]'" in hint
    assert "'edge-runtime[" not in hint and sys.executable in hint


def test_watch_survives_another_client_logging_in_as_its_user(tmp_path, password_broker) -> None:
    """use_username_as_clientid: a second login as 'watch' kicks watch off. It says why in
    one line, reconnects, and goes on (here until its --timeout), never a traceback."""
    import asyncio

    import aiomqtt

    secret = tmp_path / "watch.password"
    secret.write_text("right\n", encoding="utf-8")
    proc = subprocess.Popen(
        [ENTRY, "watch", "--topology", MINIMAL, "--broker", password_broker,
         "--username", "watch", "--password-file", str(secret), "--timeout", "10"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(2.0)  # loading

        async def intruder() -> None:
            port = int(password_broker.rsplit(":", 1)[1])
            for _ in range(4):  # one of these finds watch connected, whatever its load time
                async with aiomqtt.Client(
                    "127.0.0.1", port, username="watch", password="right", identifier="other"
                ):
                    await asyncio.sleep(0.3)
                await asyncio.sleep(1.0)

        asyncio.run(intruder())
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = err.splitlines()
    assert proc.returncode == 1, err
    assert "Traceback" not in err and '"event"' not in err  # lines for people, no log records
    lost = [line for line in lines if "lost the connection" in line]
    assert lost and "another client logs in as 'watch'" in lost[0], err
    assert any("reconnected" in line for line in lines), err
    assert lines[-1].startswith("edge-runtime: error: watch timed out after 10 s"), err
