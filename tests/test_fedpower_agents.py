"""FedPower on the runtime against a real Mosquitto: convergence, a SIGSTOPped leaf, `run`."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from pathlib import Path

import aiomqtt
import numpy as np
import pytest

from acceptance.faults import Cluster, Monitor
from edge_runtime.agents.common.core.policy import largest_angle
from edge_runtime.agents.fedpower.shell.agents import (
    FedPowerAggregatorAgent,
    FedPowerLeafAgent,
    FedPowerRootAgent,
)
from edge_runtime.fedpower.accounting import MECHANISM, fedpower_noise_std, power_step_sensitivity
from edge_runtime.runner import run_topology
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import load_topology
from edge_runtime.wire import PrivacyParams, decode_subspace, encode_readings
from edge_runtime.wire.fedpower import decode_round

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


# ------------------------------------------------------------- in-process agents
def _settings(mosquitto) -> AgentSettings:
    return AgentSettings(
        host=mosquitto.host,
        port=mosquitto.port,
        timeout_s=5.0,
        status_heartbeat_s=0.5,
        status_min_interval_s=0.1,
        restore_wait_s=0.5,
    )


async def _wait(predicate, timeout_s: float) -> bool:
    """Poll ``predicate`` every 20 ms for at most ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


def _private_data(seed: int = 3, n: int = 16000) -> dict[str, np.ndarray]:
    """As `_data` (one shared spectrum), more rows: the noise of (1, 1e-5)-DP needs them."""
    rng = np.random.default_rng(seed)
    scales = np.array([10.0, 8.0, 6.0, 1.0, 0.8, 0.6, 0.4, 0.2])
    rot, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    return {leaf: (rng.standard_normal((n, 8)) * scales) @ rot.T for leaf in LEAVES}


async def test_private_fedpower_tree_reports_its_ledger_and_guarantee(mosquitto, tmp_path):
    prefix = f"fpp{time.time_ns() % 10**9}"
    path = _topology(
        tmp_path / "private.toml",
        prefix,
        rounds=2,
        local_steps=1,
        decay='"none"',
        round_interval_s=0.05,
        round_timeout_s=3.0,
    )
    text = path.read_text().replace(
        "[defaults]\n", "[defaults]\nepsilon = 1.0\ndelta = 1e-5\nclip_norm = 15.0\n"
    )
    path.write_text(text)
    topology = load_topology(path)
    settings = _settings(mosquitto)
    data = _private_data()
    n = len(data["leaf-0"])
    everything = np.vstack(list(data.values()))
    params = PrivacyParams(1.0, 1e-5, 15.0, mechanism=MECHANISM, neighbours="replace-one")
    async with (
        Monitor(mosquitto.host, mosquitto.port, topology) as monitor,
        contextlib.AsyncExitStack() as stack,
    ):
        leaves = {leaf: FedPowerLeafAgent(topology, leaf, settings) for leaf in LEAVES}
        for agent in leaves.values():
            await stack.enter_async_context(agent)
        await stack.enter_async_context(FedPowerAggregatorAgent(topology, "site", settings))
        online = [topology.status_topic(leaf) for leaf in LEAVES]
        assert await monitor.wait_for(
            lambda: all(any(r.payload == b"online" for r in monitor.on(t)) for t in online), 10
        )
        await _send(mosquitto.host, mosquitto.port, prefix, data)
        assert await _wait(lambda: all(a.core.n_samples == n for a in leaves.values()), 10)
        root = FedPowerRootAgent(topology, "root", settings)
        await stack.enter_async_context(root)
        assert await _wait(lambda: root.core.done, 15), root.core.status_extra(0.0)
        model = root.model
        assert model is not None and model.seq == 2 and model.n_samples == 3 * n
        assert model.privacy == params
        published = monitor.models()
        assert published and published[-1][1].privacy == params  # on the wire too
        angle = largest_angle(_top(everything), model.subspace.basis)
        random_angle = largest_angle(
            _top(everything), np.linalg.qr(np.random.default_rng(0).normal(size=(8, 3)))[0]
        )
        assert angle < 0.3 < random_angle, (angle, random_angle)
        # no leaf published its Gram: nothing on any leaf's subspace topic
        for leaf in LEAVES:
            assert not [r for r in monitor.on(topology.subspace_topic(leaf)) if r.payload]
        sigma = fedpower_noise_std(1.0, 1e-5, 2, power_step_sensitivity(3))

        def ledger_done() -> bool:
            docs = monitor.details("leaf-0")
            p = docs[-1][1].get("privacy") if docs else None
            return p is not None and p["releases"] == 2

        assert await monitor.wait_for(ledger_done, 5), monitor.details("leaf-0")[-1:]
        doc = monitor.details("leaf-0")[-1][1]
        ledger = doc["privacy"]
        assert ledger["mechanism"] == MECHANISM and ledger["neighbours"] == "replace-one"
        assert (ledger["epsilon"], ledger["delta"], ledger["clip_norm"]) == (1.0, 1e-5, 15.0)
        assert ledger["noise_std"] == pytest.approx(sigma)
        assert ledger["clipped"] > 0
        assert doc["extra"]["fedpower"]["budget_iterations"] == 2
        assert doc["extra"]["fedpower"]["budget_exhausted"] is True
        assert sum(root.rejects.values()) == 0


async def test_a_restarted_root_continues_its_rounds(mosquitto, tmp_path):
    prefix = f"fpr{time.time_ns() % 10**9}"
    path = _topology(
        tmp_path / "restart.toml",
        prefix,
        round_interval_s=0.05,
        idle_interval_s=0.1,
        tolerance_rad=0.0,
        round_timeout_s=2.0,
    )
    topology = load_topology(path)
    settings = _settings(mosquitto)
    data = _data(4)
    everything = np.vstack(list(data.values()))
    async with contextlib.AsyncExitStack() as stack:
        leaves = {leaf: FedPowerLeafAgent(topology, leaf, settings) for leaf in LEAVES}
        for agent in leaves.values():
            await stack.enter_async_context(agent)
        await _wait(lambda: all(a.core.connections > 0 for a in leaves.values()), 10)
        await _send(mosquitto.host, mosquitto.port, prefix, data)
        assert await _wait(lambda: all(a.core.n_samples == 300 for a in leaves.values()), 10)
        first = FedPowerRootAgent(topology, "root", settings)
        await first.__aenter__()
        assert await _wait(lambda: first.rounds >= 4, 15)
        await first.aclose()
        last_round, epoch = first.core.round, first.core.epoch
        halfway = largest_angle(_top(everything), first.model.subspace.basis)
        second = FedPowerRootAgent(topology, "root", settings)
        await stack.enter_async_context(second)
        assert await _wait(lambda: second.rounds >= 4, 15), second.core.status_extra(0.0)
        core = second.core
        assert core.restored_from == "retained round" and core.epoch == epoch
        assert core.round >= last_round + 4 and core.model.seq > last_round
        # Once converged, more rounds move the angle by rounding only (1e-16 rad): allow
        # far less than the angle itself, so a machine's BLAS cannot make this fail.
        assert largest_angle(_top(everything), core.model.subspace.basis) <= max(
            halfway, 1e-6
        ) + 1e-10

        def angle() -> float:
            return largest_angle(_top(everything), core.model.subspace.basis)

        assert await _wait(lambda: angle() < 1e-4, 20), (halfway, angle(), core.round)


@pytest.fixture
def mosquitto(shared_mosquitto):
    """This worker's broker (conftest): the tests here are isolated by their topic prefix."""
    return shared_mosquitto
