"""Fleet benchmark, every node its own ``edge-runtime agent`` process against a private
`LocalMosquitto`, fed by ``edge-runtime replay --rate R`` once all are online. An observer
times each reading from its publish (arrival at the broker) and from its production (its slot
in the replay's fixed-rate schedule, ``t0 + j / rate`` per leaf, so queueing in the replay
counts) to the first root model whose provenance covers it; each agent's CPU and memory are
sampled from the first reading to full coverage.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import aiomqtt
import numpy as np

from benchmarks.fleet.inputs import write_fleet_inputs
from benchmarks.fleet.scaling import MOTES_TOPOLOGY, FleetSizes
from benchmarks.processes import (
    ProcessSample,
    edge_runtime_command,
    sample_process,
    stop_processes,
)
from edge_runtime.broker import LocalMosquitto
from edge_runtime.datasets import load_dataset
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology, load_topology
from edge_runtime.wire import WireError, decode_readings, decode_subspace

__all__ = [
    "AgentCostResult", "LatencyResult", "ProcessCost", "leaf_max_publish_interval",
    "measure_agent_cost", "measure_latency",
]  # fmt: skip

ONLINE_TIMEOUT_S = 60.0  #: seconds to wait for every agent to be online
SETTLE_TIMEOUT_S = 90.0  #: seconds after the last reading is due for the root to cover all


@dataclass
class ProcessCost:
    """What one agent process (``role`` leaf, aggregator or root) used in a window of
    ``window_s`` seconds: CPU seconds (user + system), ``VmRSS`` at its end and ``VmHWM``
    (bytes), for the ``readings`` it ingested (leaf) or covers (aggregator)."""

    node: str
    role: str
    readings: int
    window_s: float
    cpu_s: float
    rss_bytes: int
    peak_rss_bytes: int

    @property
    def cpu_per_reading_s(self) -> float | None:
        """CPU seconds per reading (None without readings)."""
        return self.cpu_s / self.readings if self.readings else None

    @property
    def cpu_share(self) -> float:
        """CPU seconds per second of the window: the share of one core."""
        return self.cpu_s / self.window_s if self.window_s > 0 else math.nan


def leaf_max_publish_interval(topology: Topology) -> tuple[float | None, str]:
    """The largest maximum publish interval of the leaves, seconds (their
    ``publish_max_interval_s``, else ``LEAF_PUBLISH.max_interval_s``), and where it came from."""
    from edge_runtime.agents.common.core.policy import LEAF_PUBLISH

    source, values = "LEAF_PUBLISH.max_interval_s", []
    for leaf in topology.leaves():
        own = topology.nodes[leaf].publish_max_interval_s
        values.append(float(LEAF_PUBLISH.max_interval_s if own is None else own))
        source = source if own is None else "publish_max_interval_s of the topology"
    return max(values), source


def _spawn(folder: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    """``edge-runtime ARGS`` in a session of its own, output to ``folder/NAME.log``."""
    with (folder / f"{name}.log").open("wb") as out:
        return subprocess.Popen(
            [*edge_runtime_command(), *args], stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def _loop_time(monotonic: float) -> float:
    """A `time.monotonic` instant on the running loop's clock."""
    return asyncio.get_running_loop().time() + (monotonic - time.monotonic())


@dataclass
class _Observation:
    """What the observer saw of one live fleet run (times from `time.monotonic`)."""

    sent: dict[str, dict[int, float]]  # leaf -> source seq -> first publish time
    covered_at: dict[str, list[float]]  # leaf -> time its j-th reading reached the root
    covered: bool = False
    replay_returncode: int | None = None
    start: dict[str, ProcessSample | None] = field(default_factory=dict)
    end: dict[str, ProcessSample | None] = field(default_factory=dict)
    window: tuple[float, float] = (math.nan, math.nan)
    wall_s: float = math.nan
    error: str = ""


class _LiveFleet:
    """Broker, one agent process per node, a replay process and the observer."""

    def __init__(self, topology_path: Path, data_path: Path, n_rows: int, rate: float) -> None:
        self.topology_path, self.data_path, self.n_rows, self.rate = (
            topology_path, data_path, n_rows, rate,
        )  # fmt: skip
        self.topology = load_topology(topology_path)
        self.expected = {leaf: len(rows) for leaf, rows in self.topology.split_rows(n_rows).items()}
        self.obs = _Observation({lf: {} for lf in self.expected}, {lf: [] for lf in self.expected})

    def run(self, folder: Path) -> _Observation:
        obs, topo = self.obs, str(self.topology_path)
        procs: dict[str, subprocess.Popen[bytes]] = {}
        with LocalMosquitto() as broker:
            try:
                url = ["--topology", topo, "--broker", broker.url]
                for node in self.topology.nodes:
                    procs[node] = _spawn(folder, node, "agent", "--node", node, *url)
                replay = ["replay", "replay", *url, "--data", str(self.data_path)]
                replay += ["--rate", f"{self.rate:g}"]
                settings = AgentSettings(host=broker.host, port=broker.port)
                asyncio.run(self._observe(settings, procs, partial(_spawn, folder, *replay)))
            finally:
                stop_processes(list(procs.values()))
        if not obs.covered and not obs.error:
            obs.error = "the root did not cover every reading"
        for node, proc in procs.items():
            if node != "replay" and proc.returncode not in (0, None, -15):
                tail = (folder / f"{node}.log").read_text(errors="replace").strip()
                obs.error += f"; agent {node} exited {proc.returncode}: {tail[-200:]}"
        return obs

    async def _observe(
        self,
        settings: AgentSettings,
        procs: dict[str, subprocess.Popen[bytes]],
        start_replay: Callable[[], subprocess.Popen[bytes]],
    ) -> None:
        topo, obs = self.topology, self.obs
        agents = dict(procs)
        sensors = {topo.nodes[leaf].sensor_topic: leaf for leaf in self.expected}
        statuses = {topo.status_topic(node): node for node in topo.nodes}
        online: set[str] = set()
        counters = dict.fromkeys(self.expected, 0)
        started = time.monotonic()
        try:
            async with aiomqtt.Client(**settings.client_kwargs()) as client:
                for topic in [*statuses, *sensors, topo.model_topic()]:
                    await client.subscribe(topic, qos=1)
                async with asyncio.timeout_at(_loop_time(started + ONLINE_TIMEOUT_S)) as limit:
                    async for message in client.messages:
                        now, topic, payload = time.monotonic(), str(message.topic), message.payload
                        if not isinstance(payload, bytes | bytearray):
                            continue
                        if topic in statuses:
                            node = statuses[topic]
                            (online.add if payload == b"online" else online.discard)(node)
                            if "replay" not in procs and len(online) == len(topo.nodes):
                                procs["replay"] = start_replay()
                                due = now + self.n_rows / self.rate + SETTLE_TIMEOUT_S
                                limit.reschedule(_loop_time(due))
                        elif topic in sensors:
                            if not obs.start:
                                obs.start = {n: sample_process(p.pid) for n, p in agents.items()}
                                obs.window = (now, math.nan)
                            self._on_readings(sensors[topic], bytes(payload), now, counters)
                        elif self._on_model(bytes(payload), now):
                            obs.end = {n: sample_process(p.pid) for n, p in agents.items()}
                            obs.window, obs.covered = (obs.window[0], now), True
                            break
        except TimeoutError:
            if "replay" in procs:
                obs.error = "timed out waiting for the fleet to be covered"
            else:
                obs.error = "timed out waiting for the fleet to be online "
                obs.error += f"({len(online)} of {len(topo.nodes)} nodes online)"
        obs.wall_s = time.monotonic() - started
        if (replay := procs.get("replay")) is not None:
            try:
                obs.replay_returncode = await asyncio.to_thread(replay.wait, 60)
            except subprocess.TimeoutExpired:
                obs.error += "; the replay did not exit within 60 s of full coverage"

    def _on_readings(self, leaf: str, payload: bytes, now: float, counters: dict[str, int]) -> None:
        try:
            readings = decode_readings(payload)
        except WireError:
            return
        first = counters[leaf] if readings.seq is None else readings.seq
        counters[leaf] = first + readings.values.shape[0]
        for seq in range(first, counters[leaf]):
            self.obs.sent[leaf].setdefault(seq, now)  # a re-sent reading keeps its first time

    def _on_model(self, payload: bytes, now: float) -> bool:
        """Record newly covered readings; True once every reading is covered."""
        try:
            model = decode_subspace(payload)
        except WireError:
            return False
        for leaf, at in self.obs.covered_at.items():
            covered = min(int(model.provenance.get(leaf, 0)), self.expected[leaf])
            at.extend([now] * (covered - len(at)))
        return all(len(self.obs.covered_at[leaf]) == n for leaf, n in self.expected.items())

    def latencies(self) -> tuple[np.ndarray, np.ndarray]:
        """(from publish, from production) latency of every covered reading, seconds."""
        from_publish: list[float] = []
        from_schedule: list[float] = []
        for leaf, covered in self.obs.covered_at.items():
            if not (sent := self.obs.sent[leaf]):
                continue
            leaf_rate = self.rate * self.expected[leaf] / self.n_rows
            t0 = min(t - j / leaf_rate for j, t in sent.items())
            from_publish += [at - sent[j] for j, at in enumerate(covered) if j in sent]
            from_schedule += [at - (t0 + j / leaf_rate) for j, at in enumerate(covered)]
        return np.asarray(from_publish), np.asarray(from_schedule)

    def costs(self) -> list[ProcessCost]:
        """Each agent's `ProcessCost` over the observation window (empty if incomplete)."""
        topo, obs, out = self.topology, self.obs, []
        for node in topo.nodes:
            a, b = obs.start.get(node), obs.end.get(node)
            if a is None or b is None:
                continue
            leaves = [node] if topo.is_leaf(node) else topo.leaves_under(node)
            role = "leaf" if topo.is_leaf(node) else "root" if node == topo.root else "aggregator"
            out.append(ProcessCost(
                node, role, sum(self.expected[leaf] for leaf in leaves),
                obs.window[1] - obs.window[0], b.cpu_s - a.cpu_s, b.rss_bytes, b.peak_rss_bytes,
            ))  # fmt: skip
        return out


def _percentile(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


@dataclass
class LatencyResult:
    """Latency from a reading to the root, every node a process (`measure_latency`).

    ``p50_s`` / ``p95_s`` / ``max_s`` count from the reading's production, the
    ``*_from_publish_s`` from its arrival at the broker; ``bound_s`` is the leaves' maximum
    publish interval + 1 s (None when the runtime has none).
    """

    topology: str
    n_leaves: int
    n_processes: int
    readings: int
    rate: float
    covered: bool
    readings_at_root: int
    p50_s: float | None
    p95_s: float | None
    max_s: float | None
    p50_from_publish_s: float | None
    p95_from_publish_s: float | None
    max_publish_interval_s: float | None
    interval_source: str
    wall_s: float
    replay_returncode: int | None
    costs: list[ProcessCost] = field(default_factory=list)
    error: str = ""

    @property
    def bound_s(self) -> float | None:
        """The Done-when bound: maximum publish interval + 1 s."""
        m = self.max_publish_interval_s
        return None if m is None else m + 1.0


def _fmt_s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def measure_latency(
    sizes: FleetSizes, log: Callable[[str], None] = print, *, topology_path: Path = MOTES_TOPOLOGY
) -> LatencyResult:
    """The first ``sizes.latency_readings`` rows of Motes light (down to a multiple of the
    leaf count) through ``topology_path``, every node a process, replayed at
    ``sizes.latency_rate`` readings/s: p50 / p95 latency from a reading to the root."""
    topology = load_topology(topology_path)
    n_leaves = len(topology.leaves())
    n = max(n_leaves, sizes.latency_readings // n_leaves * n_leaves)
    with tempfile.TemporaryDirectory(prefix="fleet-latency-") as tmp:
        data_path = Path(tmp) / f"motes-{n}.txt"
        np.savetxt(data_path, load_dataset("motes-light")[:n], fmt="%.17g")
        fleet = _LiveFleet(topology_path, data_path, n, sizes.latency_rate)
        obs = fleet.run(Path(tmp))
    publish, schedule = fleet.latencies()
    interval, source = leaf_max_publish_interval(topology)
    r = LatencyResult(
        topology_path.name, n_leaves, len(topology.nodes), n, sizes.latency_rate, obs.covered,
        sum(len(c) for c in obs.covered_at.values()), _percentile(schedule, 50),
        _percentile(schedule, 95), _percentile(schedule, 100), _percentile(publish, 50),
        _percentile(publish, 95), interval, source, obs.wall_s, obs.replay_returncode,
        fleet.costs(), obs.error,
    )  # fmt: skip
    log(
        f"  latency ({n} readings at {sizes.latency_rate:g}/s, {len(topology.nodes)} agent "
        f"processes): p50 {_fmt_s(r.p50_s)}, p95 {_fmt_s(r.p95_s)} from production (from "
        f"publish: p50 {_fmt_s(r.p50_from_publish_s)}, p95 {_fmt_s(r.p95_from_publish_s)}); "
        f"bound {_fmt_s(r.bound_s)}" + (r.error and f" -- {r.error}")
    )
    return r


@dataclass
class AgentCostResult:
    """Cost of agent processes at a fixed reading rate (`measure_agent_cost`)."""

    n_leaves: int
    rate_per_leaf: float
    seconds: float
    covered: bool
    costs: list[ProcessCost] = field(default_factory=list)
    error: str = ""

    def by_role(self, role: str) -> list[ProcessCost]:
        """The costs of the nodes with ``role``."""
        return [c for c in self.costs if c.role == role]


def measure_agent_cost(sizes: FleetSizes, log: Callable[[str], None] = print) -> AgentCostResult:
    """``sizes.agent_leaves`` leaf processes under one aggregator (under the root), each
    fed ``sizes.agent_rate`` synthetic d = 48 readings/s for ``sizes.agent_seconds``: CPU
    seconds per reading and memory of every agent (`ProcessCost`)."""
    k = sizes.agent_leaves
    per_leaf = max(1, round(sizes.agent_rate * sizes.agent_seconds))
    with tempfile.TemporaryDirectory(prefix="fleet-agent-") as tmp:
        topology_path, data_path = write_fleet_inputs(k, Path(tmp) / "inputs", per_leaf, k)
        fleet = _LiveFleet(topology_path, data_path, k * per_leaf, sizes.agent_rate * k)
        obs = fleet.run(Path(tmp))
    seconds = per_leaf / sizes.agent_rate
    result = AgentCostResult(k, sizes.agent_rate, seconds, obs.covered, fleet.costs(), obs.error)
    for role in ("leaf", "aggregator"):
        if rows := result.by_role(role):
            cpu = float(np.median([c.cpu_per_reading_s or math.nan for c in rows]))
            rss = float(np.median([c.rss_bytes for c in rows])) / 2**20
            hwm = float(np.median([c.peak_rss_bytes for c in rows])) / 2**20
            share = float(np.median([c.cpu_share for c in rows]))
            log(
                f"  {role}: {cpu * 1e3:.3f} ms CPU per reading, {share:.1%} of a core, RSS "
                f"{rss:.1f} MiB (peak {hwm:.1f} MiB), median of {len(rows)}"
            )
    if result.error:
        log(f"  agent cost: {result.error}")
    return result
