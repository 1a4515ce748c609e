"""The ``edge-runtime`` command line, run as a user runs it: a subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import low_rank_data

from edge_runtime.broker import free_port
from edge_runtime.topology import load_topology

ROOT = Path(__file__).resolve().parent.parent
MOTES = ROOT / "topologies" / "motes-light.toml"
MINIMAL = ROOT / "topologies" / "minimal.toml"


def cli(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edge_runtime.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("edge-runtime: error:")
    for needle in needles:
        assert needle in lines[0]


@pytest.mark.mqtt
def test_run_motes_light_covers_every_leaf_within_five_percent_of_offline_svd():
    proc = cli("run", str(MOTES), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    for key in (
        "samples", "leaves_reporting", "leaves_total", "rank", "error_ratio",
        "messages", "payload_bytes", "raw_bytes", "wall_s",
    ):  # fmt: skip
        assert key in summary
    assert summary["samples"] == 7712
    assert summary["leaves_reporting"] == summary["leaves_total"] == 8
    assert summary["root_n_samples"] == 7712
    assert summary["error_ratio"] <= 1.05
    assert summary["raw_bytes"] == 7712 * 48 * 8
    assert summary["payload_bytes"] < summary["raw_bytes"]


@pytest.mark.mqtt
def test_run_with_other_data_follows_its_number_of_features(tmp_path):
    data = low_rank_data(1200, 17, 5, seed=11)
    path = tmp_path / "field.csv"
    np.savetxt(path, data, delimiter=",", header=",".join(f"s{i}" for i in range(17)), comments="")
    # the Motes tree without its light sensors' valid_range (lux): these are other sensors
    topology = tmp_path / "motes-light.toml"
    topology.write_text(re.sub(r"^valid_range = .*\n", "", MOTES.read_text(), flags=re.M))
    assert load_topology(topology).nodes["pi-01"].valid_range is None
    proc = cli("run", str(topology), "--data", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["samples"] == 1200
    assert summary["n_features"] == 17
    assert summary["leaves_reporting"] == 8
    assert summary["error_ratio"] <= 1.05


@pytest.mark.mqtt
def test_run_on_two_workers_reports_throughput_latency_resends_and_memory():
    proc = cli("run", str(MOTES), "--workers", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["workers"] == 2
    assert summary["leaves_reporting"] == summary["leaves_total"] == 8
    assert summary["readings_per_s"] > 0
    assert 0 < summary["latency_p50_s"] <= summary["latency_p95_s"]
    assert summary["resent"] == 0
    assert summary["undelivered"] == 0
    assert summary["peak_rss_bytes"] > 0


@pytest.mark.mqtt
def test_run_prints_readings_per_second_in_its_summary():
    proc = cli("run", str(MINIMAL), "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^throughput\s+\d+ readings/s", proc.stdout, re.MULTILINE), proc.stdout
    assert re.search(r"^latency to root\s+p50 [\d.]+ s, p95 [\d.]+ s", proc.stdout, re.MULTILINE)


@pytest.mark.mqtt
def test_run_of_a_private_topology_prints_the_guarantee_with_mechanism_and_neighbours():
    proc = cli("run", str(ROOT / "topologies" / "motes-light-dpdispca.toml"))
    assert proc.returncode == 0, proc.stderr
    line = (
        r"^privacy\s+\(1, 1e-05\)-DP per reading, replace-one neighbours, "
        r"mechanism gaussian, clip norm 8230$"
    )
    assert re.search(line, proc.stdout, re.MULTILINE), proc.stdout
    ratio = re.search(r"^error ratio\s+([\d.]+)", proc.stdout, re.MULTILINE)
    assert ratio is not None and 1.0 <= float(ratio.group(1)) <= 6.0  # DPdisPCA: about 3


def test_run_needs_at_least_one_worker():
    proc = cli("run", str(MINIMAL), "--workers", "0")
    assert proc.returncode == 2
    assert "--workers" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_topology_file_is_one_line_and_exit_2(tmp_path):
    proc = cli("run", str(tmp_path / "nope.toml"))
    assert proc.returncode == 2
    assert_one_line_error(proc, "nope.toml")


def test_malformed_topology_names_the_offending_node(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[nodes]]\nid = "root"\n[[nodes]]\nid = "a"\nparent = "ghost"\n')
    proc = cli("run", str(bad))
    assert proc.returncode == 2
    assert_one_line_error(proc, "ghost")


def test_missing_data_file_is_one_line_and_exit_2(tmp_path):
    proc = cli("run", str(MINIMAL), "--data", str(tmp_path / "none.csv"))
    assert proc.returncode == 2
    assert_one_line_error(proc, "none.csv")


def test_ragged_data_names_the_line(tmp_path):
    path = tmp_path / "ragged.csv"
    path.write_text("1,2,3\n4,5,6\n7,8\n")
    proc = cli("run", str(MINIMAL), "--data", str(path))
    assert proc.returncode == 2
    assert_one_line_error(proc, "3")


def test_bad_broker_url_is_one_line(tmp_path):
    proc = cli("watch", "--topology", str(MINIMAL), "--broker", "http://example")
    assert proc.returncode == 2
    assert_one_line_error(proc, "http://example")


def test_unreachable_broker_is_one_line_and_non_zero():
    port = free_port()  # nothing listens there
    proc = cli("watch", "--topology", str(MINIMAL), "--broker", f"mqtt://127.0.0.1:{port}")
    assert proc.returncode == 1
    assert_one_line_error(proc, "broker")


def test_agent_with_unknown_node_lists_the_nodes():
    proc = cli("agent", "--topology", str(MINIMAL), "--node", "pi-99")
    assert proc.returncode == 2
    assert_one_line_error(proc, "pi-99")


def test_agent_gives_up_on_an_unreachable_broker_after_its_startup_timeout():
    port = free_port()
    proc = cli(
        "agent", "--topology", str(MINIMAL), "--node", "root",
        "--broker", f"mqtt://127.0.0.1:{port}", "--startup-timeout", "1", "--log-level", "error",
    )  # fmt: skip
    assert proc.returncode == 1
    assert_one_line_error(proc, "cannot reach the broker")


@pytest.mark.mqtt
def test_per_node_commands_work_as_separate_processes_against_one_broker(mosquitto, tmp_path):
    url = mosquitto.url
    data = low_rank_data(900, 9, 3, seed=12)
    path = tmp_path / "data.txt"
    np.savetxt(path, data)
    topology = tmp_path / "tree.toml"
    topology.write_text(
        MINIMAL.read_text().replace('name = "minimal"', 'name = "minimal"\nprefix = "proc"')
    )
    topo = load_topology(topology)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    agents = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "edge_runtime.cli",
                "agent",
                "--log-level",
                "warning",
                "--topology",
                str(topology),
                "--node",
                node,
                "--broker",
                url,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in topo.nodes
    ]
    try:
        replay = cli("replay", "--topology", str(topology), "--data", str(path), "--broker", url)
        if replay.returncode != 0:
            for proc in agents:
                proc.terminate()
            logs = [proc.communicate(timeout=10)[1][-2000:] for proc in agents]
            pytest.fail(f"replay failed: {replay.stderr}; agents said: {logs}")
        assert json.loads(replay.stdout)["samples"] == 900
        watch = cli(
            "watch", "--topology", str(topology), "--broker", url, "--json",
            "--until-samples", "900", "--timeout", "30",
        )  # fmt: skip
        assert watch.returncode == 0, watch.stderr
        updates = [json.loads(line) for line in watch.stdout.splitlines()]
        assert updates[-1]["n_samples"] == 900
        assert sorted(updates[-1]["leaves_covered"]) == sorted(topo.leaves())
        assert updates[-1]["nodes"] == dict.fromkeys(topo.nodes, "online")
        # The model is truncated to the configured rank; the root's snapshot (and its status
        # document) carries rank + oversample directions: watch names both (issue 21).
        assert updates[-1]["rank"] == topo.nodes[topo.root].rank == 5
        assert updates[-1]["tracked"] in (None, 6, 7, 8, 9), updates  # None: no document yet
    finally:
        for proc in agents:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in agents:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            proc.stdout.close()
            proc.stderr.close()
    assert all(proc.returncode == 0 for proc in agents), [p.returncode for p in agents]


def test_acl_prints_one_section_per_node_and_the_replay_user():
    proc = cli("acl", str(MOTES), "--reader", "dashboard")
    assert proc.returncode == 0, proc.stderr
    users = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("user ")]
    topo = load_topology(MOTES)
    assert users == [*topo.nodes, "replay", "dashboard"]
    assert "topic write fpca/root/site-a/pi-01/subspace" not in proc.stdout  # readwrite only
    assert "topic readwrite fpca/root/site-a/pi-01/subspace" in proc.stdout


# ------------------------------------------- issue 21: two deployments' ACLs on one broker
def _deployment(tmp_path: Path, name: str, prefix: str, root: str, leaf: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'name = "{name}"\nprefix = "{prefix}"\n[defaults]\nrank = 2\nblock_size = 4\n'
        f'[[nodes]]\nid = "{root}"\n[[nodes]]\nid = "{leaf}"\nparent = "{root}"\n'
    )
    return path


def test_acl_of_two_deployments_refuses_a_node_id_they_share(tmp_path):
    a = _deployment(tmp_path, "dep-a", "a", "root-a", "la")
    b = _deployment(tmp_path, "dep-b", "b", "root-b", "la")
    proc = cli("acl", str(a), str(b))
    assert proc.returncode == 2
    assert_one_line_error(proc, "node id 'la' is in topology 'dep-a' and in 'dep-b'")
    c = _deployment(tmp_path, "dep-c", "a", "root-a2", "lc")  # same prefix, another root: ok
    assert cli("acl", str(a), str(c)).returncode == 0


@pytest.mark.mqtt
def test_two_deployments_acls_concatenated_share_one_broker(tmp_path):
    """`edge-runtime acl A B` (or `cat` of two outputs) on Mosquitto: the replay user and
    the reader, whose sections appear once per deployment, get the topics of both (the
    broker merges a user's sections); a node of A still cannot write B's topics."""
    import asyncio
    import socket

    import aiomqtt

    a = _deployment(tmp_path, "dep-a", "a", "root-a", "la")
    b = _deployment(tmp_path, "dep-b", "b", "root-b", "lb")
    acl = cli("acl", str(a), str(b), "--reader", "dashboard")
    assert acl.returncode == 0, acl.stderr
    assert acl.stdout.count("\nuser replay\n") == 2 and acl.stdout.count("\nuser dashboard\n") == 2
    (tmp_path / "acl").write_text(acl.stdout)
    users = ["root-a", "la", "root-b", "lb", "replay", "dashboard"]
    passwd = tmp_path / "passwd"
    passwd.write_text("".join(f"{user}:pw\n" for user in users))
    subprocess.run(["mosquitto_passwd", "-U", str(passwd)], check=True, timeout=30)
    port = free_port("127.0.0.1", 20001, 65000)
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        f"user root\nallow_anonymous false\npassword_file {passwd}\nacl_file {tmp_path / 'acl'}\n"
        f"listener {port} 127.0.0.1\nuse_username_as_clientid true\n"
    )
    broker = subprocess.Popen(
        ["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )

    def client(user: str) -> aiomqtt.Client:
        return aiomqtt.Client("127.0.0.1", port, username=user, password="pw")

    async def received(user: str, filters: list[str], sends: list[tuple[str, str]]) -> set[str]:
        got: set[str] = set()
        async with client(user) as sub:
            for topic in filters:
                await sub.subscribe(topic, qos=1)
            for sender, topic in sends:
                async with client(sender) as pub:
                    await pub.publish(topic, b"x", qos=1)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.5):
                    async for message in sub.messages:
                        got.add(str(message.topic))
        return got

    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        # the replay user writes both deployments' sensor topics (each leaf reads its own)
        assert asyncio.run(received("la", ["sensors/la"], [("replay", "sensors/la")])) == {
            "sensors/la"
        }
        assert asyncio.run(received("lb", ["sensors/lb"], [("replay", "sensors/lb")])) == {
            "sensors/lb"
        }
        # the reader reads both prefixes; la's write into deployment b is dropped
        sends = [
            ("root-a", "a/root-a/subspace"),
            ("root-b", "b/root-b/subspace"),
            ("la", "b/root-b/lb/subspace"),
        ]
        got = asyncio.run(received("dashboard", ["a/#", "b/#"], sends))
        assert got == {"a/root-a/subspace", "b/root-b/subspace"}
    finally:
        broker.terminate()
        broker.wait(timeout=10)
