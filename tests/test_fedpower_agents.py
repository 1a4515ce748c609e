"""FedPower on the runtime against a real Mosquitto: convergence, a SIGSTOPped leaf, `run`."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import aiomqtt
import numpy as np

from edge_runtime.agents import AgentSettings
from edge_runtime.agents.fedpower_core import largest_angle
from edge_runtime.fedpower_wire import decode_round
from edge_runtime.runner import run_topology
from edge_runtime.topology import load_topology
from edge_runtime.wire import decode_subspace, encode_readings
from tests.faults import Cluster, Monitor

LEAVES = ("leaf-0", "leaf-1", "leaf-2")
TIMEOUT_S = 1.0  # the round timeout of the fault test


def _topology(path: Path, prefix: str, **fedpower: object) -> Path:
    lines = [
        'name = "fp-test"',
        f'prefix = "{prefix}"',
        'algorithm = "fedpower"',
        *(f"fedpower_{k} = {v}" for k, v in fedpower.items()),
        "[defaults]",
        "rank = 3",
        "publish_max_interval_s = 1.0",
        "[[nodes]]",
        'id = "root"',
        "[[nodes]]",
        'id = "site"',
        'parent = "root"',
    ]
    for leaf in LEAVES:
        lines += ["[[nodes]]", f'id = "{leaf}"', 'parent = "site"']
        lines += [f'sensor_topic = "{prefix}-sensors/{leaf}"']
    path.write_text("\n".join(lines) + "\n")
    return path


def _data(seed: int = 0) -> dict[str, np.ndarray]:
    """Leaves 0 and 1 share one spectrum; leaf 2 another rotation, so the top-3 subspace
    of everything differs from that of leaves 0 and 1."""
    rng = np.random.default_rng(seed)
    d = 8
    scales = np.array([10.0, 8.0, 6.0, 1.0, 0.8, 0.6, 0.4, 0.2])
    r1, _ = np.linalg.qr(rng.standard_normal((d, d)))
    r2, _ = np.linalg.qr(rng.standard_normal((d, d)))
    out = {}
    for leaf, rot, n in (("leaf-0", r1, 300), ("leaf-1", r1, 300), ("leaf-2", r2, 300)):
        out[leaf] = (rng.standard_normal((n, d)) * scales) @ rot.T
    return out


def _top(x: np.ndarray, r: int = 3) -> np.ndarray:
    return np.linalg.svd(x, full_matrices=False)[2][:r].T


async def _send(host: str, port: int, prefix: str, data: dict[str, np.ndarray]) -> None:
    async with aiomqtt.Client(host, port) as client:
        for leaf, rows in data.items():
            for i in range(0, len(rows), 100):
                payload = encode_readings(rows[i : i + 100], source="t", seq=i)
                await client.publish(f"{prefix}-sensors/{leaf}", payload, qos=1)


def _models(monitor: Monitor, topic: str, since: float = 0.0):
    return [(r.t, decode_subspace(r.payload)) for r in monitor.on(topic, since) if r.payload]


async def test_sigstopped_leaf_rounds_keep_closing_and_it_rejoins(mosquitto, tmp_path):
    prefix = f"fp{time.time_ns() % 10**9}"
    path = _topology(
        tmp_path / "fp.toml",
        prefix,
        round_timeout_s=TIMEOUT_S,
        round_interval_s=0.05,
        idle_interval_s=0.2,
        tolerance_rad=0.0,
    )
    topology = load_topology(path)
    data = _data()
    everything = np.vstack(list(data.values()))
    others = np.vstack([data["leaf-0"], data["leaf-1"]])
    assert largest_angle(_top(everything), _top(others)) > 0.1  # the test means something
    model_topic = topology.model_topic()
    cluster = Cluster(tmp_path, path, topology, mosquitto.url)
    async with Monitor(mosquitto.host, mosquitto.port, topology) as monitor:
        try:
            cluster.start_all()
            online = [topology.status_topic(n) for n in topology.nodes]
            assert await monitor.wait_for(
                lambda: all(any(r.payload == b"online" for r in monitor.on(t)) for t in online), 20
            ), cluster.dead()
            await _send(mosquitto.host, mosquitto.port, prefix, data)

            def converged(target: np.ndarray, leaves: set[str], since: float = 0.0) -> bool:
                models = _models(monitor, model_topic, since)
                if not models:
                    return False
                m = models[-1][1]
                return set(m.provenance) == leaves and (
                    largest_angle(_top(target), m.subspace.basis) < 1e-2
                )

            assert await monitor.wait_for(lambda: converged(everything, set(LEAVES)), 20), (
                cluster.dead(),
                [(m.seq, dict(m.provenance)) for _, m in _models(monitor, model_topic)][-3:],
                monitor.details("root")[-1:],
                monitor.details("leaf-0")[-1:],
            )
            cluster.procs["leaf-2"].popen.send_signal(signal.SIGSTOP)
            stopped = time.time()
            assert await monitor.wait_for(
                lambda: converged(others, {"leaf-0", "leaf-1"}, stopped), 20
            )
            # rounds kept closing, each within the timeout (plus scheduling slack)
            assert await monitor.wait_for(
                lambda: len(_models(monitor, model_topic, stopped)) >= 4, 4 * TIMEOUT_S + 4
            )
            assert converged(others, {"leaf-0", "leaf-1"}, stopped)
            times = [t for t, _ in _models(monitor, model_topic, stopped)]
            gaps = np.diff(times)
            assert gaps.max() <= TIMEOUT_S + 0.6, gaps
            rounds = [
                decode_round(r.payload).round
                for r in monitor.on(topology.round_topic(), stopped)
                if r.payload
            ]
            assert rounds == sorted(rounds) and len(set(rounds)) >= 3
            cluster.procs["leaf-2"].popen.send_signal(signal.SIGCONT)
            resumed = time.time()
            assert await monitor.wait_for(
                lambda: converged(everything, set(LEAVES), resumed), 25
            ), cluster.procs["leaf-2"].tail()
            assert not cluster.dead()
        finally:
            await cluster.stop_all()


async def test_run_fedpower_topology_converges(mosquitto, tmp_path):
    prefix = f"fr{time.time_ns() % 10**9}"
    topology = load_topology(_topology(tmp_path / "run.toml", prefix, round_interval_s=0.02))
    data = np.vstack(list(_data(1).values()))
    settings = AgentSettings(host=mosquitto.host, port=mosquitto.port, timeout_s=5.0)
    summary = await run_topology(topology, data, settings, settle_timeout_s=30)
    assert summary.covered and summary.leaves_reporting == len(LEAVES)
    assert summary.algorithm == "fedpower" and summary.rounds is not None and summary.rounds >= 2
    assert summary.error_ratio <= 1.01
    assert summary.payload_bytes > 0 and summary.rejects == 0
