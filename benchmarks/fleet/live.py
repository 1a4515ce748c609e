"""Fleet benchmark, every node its own process: latency to the root and the cost of an agent.

Both parts start a private Mosquitto on a free loopback port (`LocalMosquitto`), one
``edge-runtime agent --topology T --node N --broker URL`` process per node, wait until
every node's retained status says ``online``, then start ``edge-runtime replay --topology T
--data F --broker URL --rate R``. An observer (an MQTT client in this process) subscribes to
the leaves' sensor topics and to the root's model topic:

- a reading's **publish time** is when its message reaches the observer (the broker
  delivers it to the leaf at the same time); readings are told apart by their source
  sequence numbers (a batch of m rows with first number s carries s .. s + m - 1);
- a reading's **production time** is its place in the replay's fixed-rate schedule: leaf
  l's reading j is due at ``t0_l + j / rate_l`` (``rate_l`` the leaf's share of the rate),
  ``t0_l`` being the earliest start consistent with no reading arriving before it is due,
  i.e. ``min_j (publish_j - j / rate_l)``; so batching or queueing inside the replay counts
  as latency;
- a reading is **at the root** when the first model arrives whose provenance covers it
  (``provenance[l] > j``, provenance counting the leaf's readings in sequence order).

`measure_latency` reports p50 / p95 of both latencies and compares p95 with the leaves'
maximum publish interval + 1 s; `measure_agent_cost` feeds ``n`` leaves under one
aggregator at a fixed rate each and reads every agent's CPU seconds and memory
(`benchmarks.processes`) between the first reading and the moment the root covers all of them.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
    "AgentCostResult",
    "LatencyResult",
    "ProcessCost",
    "leaf_max_publish_interval",
    "measure_agent_cost",
    "measure_latency",
]

#: Seconds to wait for every agent to be online.
ONLINE_TIMEOUT_S = 60.0
#: Seconds, after the last reading is due, to wait for the root to cover everything.
SETTLE_TIMEOUT_S = 90.0


@dataclass
class ProcessCost:
    """What one agent process used between the first reading and full coverage.

    Attributes
    ----------
    node, role : str
        Node id; ``"leaf"``, ``"aggregator"`` or ``"root"``.
    readings : int
        Readings the node ingested (leaf) or covers (aggregator).
    window_s : float
        Length of the measured window, seconds.
    cpu_s : float
        User + system CPU seconds in the window (psutil; ``/proc/PID/stat`` on Linux).
    rss_bytes, peak_rss_bytes : int
        Resident set at the end (``VmRSS``) and the largest since start (``VmHWM``).
    """

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
    """The largest maximum publish interval of the topology's leaves, seconds.

    Read from the node settings (``publish_max_interval_s``) and, where a node leaves it
    unset, the leaf policy's default (``edge_runtime.agents.common.core.policy.LEAF_PUBLISH``).

    Returns
    -------
    (float or None, str)
        The interval (None when this version of the runtime has no such setting) and
        where it came from.
    """
    try:
        from edge_runtime.agents.common.core.policy import LEAF_PUBLISH
    except ImportError:
        default, source = None, ""
    else:
        default = getattr(LEAF_PUBLISH, "max_interval_s", None)
        source = "LEAF_PUBLISH.max_interval_s"
    values: list[float] = []
    for leaf in topology.leaves():
        own = getattr(topology.nodes[leaf], "publish_max_interval_s", None)
        if own is not None:
            values.append(float(own))
            source = "publish_max_interval_s of the topology"
        elif default is not None:
            values.append(float(default))
        else:
            return None, "no maximum publish interval in this runtime"
    return max(values), source


@dataclass
class _Observation:
    """What the observer saw of one live fleet run."""

    covered: bool = False
    replay_returncode: int | None = None
    sent: dict[str, dict[int, float]] = field(default_factory=dict)
    covered_at: dict[str, list[float]] = field(default_factory=dict)
    start: dict[str, ProcessSample | None] = field(default_factory=dict)
    end: dict[str, ProcessSample | None] = field(default_factory=dict)
    window: tuple[float, float] = (math.nan, math.nan)
    wall_s: float = math.nan
    error: str = ""


class _LiveFleet:
    """Broker, one agent process per node, a replay process and the observer."""

    def __init__(self, topology_path: Path, data_path: Path, n_rows: int, rate: float) -> None:
        self.topology_path = topology_path
        self.topology = load_topology(topology_path)
        self.data_path = data_path
        self.rate = rate
        self.expected = {leaf: len(rows) for leaf, rows in self.topology.split_rows(n_rows).items()}
        self.n_rows = n_rows

    def run(self, folder: Path) -> _Observation:
        procs: dict[str, subprocess.Popen[bytes]] = {}
        spawned: list[subprocess.Popen[bytes]] = []
        with LocalMosquitto() as broker:
            try:
                for node in self.topology.nodes:
                    with (folder / f"{node}.log").open("wb") as out:
                        procs[node] = subprocess.Popen(
                            [
                                *edge_runtime_command(),
                                "agent",
                                "--topology",
                                str(self.topology_path),
                                "--node",
                                node,
                                "--broker",
                                broker.url,
                            ],
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,
                        )
                    spawned.append(procs[node])
                settings = AgentSettings(host=broker.host, port=broker.port)
                obs = asyncio.run(self._observe(settings, broker.url, procs, spawned, folder))
            finally:
                stop_processes(spawned)
        if not obs.covered and not obs.error:
            obs.error = "the root did not cover every reading"
        for node, proc in procs.items():
            if proc.returncode not in (0, None, -15):
                tail = (folder / f"{node}.log").read_text(errors="replace").strip()
                obs.error += f"; agent {node} exited {proc.returncode}: {tail[-200:]}"
        return obs

    async def _observe(
        self,
        settings: AgentSettings,
        url: str,
        procs: Mapping[str, subprocess.Popen[bytes]],
        spawned: list[subprocess.Popen[bytes]],
        folder: Path,
    ) -> _Observation:
        topo = self.topology
        obs = _Observation(
            sent={leaf: {} for leaf in self.expected},
            covered_at={leaf: [] for leaf in self.expected},
        )
        sensors = {topo.nodes[leaf].sensor_topic: leaf for leaf in self.expected}
        statuses = {topo.status_topic(node): node for node in topo.nodes}
        model_topic = topo.model_topic()
        online: set[str] = set()
        counters = dict.fromkeys(self.expected, 0)
        replay: subprocess.Popen[bytes] | None = None
        started = time.monotonic()
        deadline = started + ONLINE_TIMEOUT_S
        try:
            async with aiomqtt.Client(**settings.client_kwargs()) as client:
                for topic in [*statuses, *sensors, model_topic]:
                    await client.subscribe(topic, qos=1)
                async with asyncio.timeout_at(_loop_time(deadline)) as limit:
                    async for message in client.messages:
                        now = time.monotonic()
                        topic = str(message.topic)
                        payload = message.payload
                        if not isinstance(payload, bytes | bytearray):
                            continue
                        if topic in statuses:
                            node = statuses[topic]
                            (online.add if payload == b"online" else online.discard)(node)
                            if replay is None and len(online) == len(topo.nodes):
                                replay = self._start_replay(url, folder)
                                spawned.append(replay)
                                due = self.n_rows / self.rate
                                limit.reschedule(_loop_time(now + due + SETTLE_TIMEOUT_S))
                        elif topic in sensors:
                            if not obs.start:
                                obs.start = {n: sample_process(p.pid) for n, p in procs.items()}
                                obs.window = (now, math.nan)
                            self._on_readings(obs, sensors[topic], bytes(payload), now, counters)
                        elif topic == model_topic and self._on_model(obs, bytes(payload), now):
                            obs.end = {n: sample_process(p.pid) for n, p in procs.items()}
                            obs.window = (obs.window[0], now)
                            obs.covered = True
                            break
        except TimeoutError:
            phase = "online" if replay is None else "covered"
            obs.error = f"timed out waiting for the fleet to be {phase}"
            if replay is None:
                obs.error += f" ({len(online)} of {len(topo.nodes)} nodes online)"
        obs.wall_s = time.monotonic() - started
        if replay is not None:
            try:
                obs.replay_returncode = await asyncio.to_thread(replay.wait, 60)
            except subprocess.TimeoutExpired:
                obs.error += "; the replay did not exit within 60 s of full coverage"
        return obs

    def _start_replay(self, url: str, folder: Path) -> subprocess.Popen[bytes]:
        with (folder / "replay.log").open("wb") as out:
            return subprocess.Popen(
                [
                    *edge_runtime_command(),
                    "replay",
                    "--topology",
                    str(self.topology_path),
                    "--data",
                    str(self.data_path),
                    "--broker",
                    url,
                    "--rate",
                    f"{self.rate:g}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @staticmethod
    def _on_readings(
        obs: _Observation, leaf: str, payload: bytes, now: float, counters: dict[str, int]
    ) -> None:
        try:
            readings = decode_readings(payload)
        except WireError:
            return
        first = counters[leaf] if readings.seq is None else readings.seq
        rows = readings.values.shape[0]
        counters[leaf] = first + rows
        sent = obs.sent[leaf]
        for seq in range(first, first + rows):
            sent.setdefault(seq, now)  # a re-sent reading keeps its first publish time

    def _on_model(self, obs: _Observation, payload: bytes, now: float) -> bool:
        """Record newly covered readings; True once every reading is covered."""
        try:
            model = decode_subspace(payload)
        except WireError:
            return False
        for leaf, at in obs.covered_at.items():
            covered = min(int(model.provenance.get(leaf, 0)), self.expected[leaf])
            if covered > len(at):
                at.extend([now] * (covered - len(at)))
        return all(len(obs.covered_at[leaf]) == n for leaf, n in self.expected.items())

    def latencies(self, obs: _Observation) -> tuple[np.ndarray, np.ndarray]:
        """(from publish, from production) latency of every covered reading, seconds."""
        from_publish: list[float] = []
        from_schedule: list[float] = []
        for leaf, covered in obs.covered_at.items():
            sent = obs.sent[leaf]
            if not sent:
                continue
            leaf_rate = self.rate * self.expected[leaf] / self.n_rows
            t0 = min(t - j / leaf_rate for j, t in sent.items())
            for j, at in enumerate(covered):
                if j in sent:
                    from_publish.append(at - sent[j])
                from_schedule.append(at - (t0 + j / leaf_rate))
        return np.asarray(from_publish), np.asarray(from_schedule)

    def costs(self, obs: _Observation) -> list[ProcessCost]:
        """Each agent's `ProcessCost` over the observation window (empty if incomplete)."""
        window = obs.window[1] - obs.window[0]
        out: list[ProcessCost] = []
        for node in self.topology.nodes:
            a, b = obs.start.get(node), obs.end.get(node)
            if a is None or b is None:
                continue
            if self.topology.is_leaf(node):
                role, readings = "leaf", self.expected[node]
            else:
                role = "root" if node == self.topology.root else "aggregator"
                readings = sum(self.expected[leaf] for leaf in self.topology.leaves_under(node))
            out.append(
                ProcessCost(
                    node=node,
                    role=role,
                    readings=readings,
                    window_s=window,
                    cpu_s=b.cpu_s - a.cpu_s,
                    rss_bytes=b.rss_bytes,
                    peak_rss_bytes=b.peak_rss_bytes,
                )
            )
        return out


def _loop_time(monotonic: float) -> float:
    """A `time.monotonic` instant on the running loop's clock."""
    loop = asyncio.get_running_loop()
    return loop.time() + (monotonic - time.monotonic())


def _percentile(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


@dataclass
class LatencyResult:
    """Latency from a reading to the root, every node a process (`measure_latency`).

    ``p50_s`` / ``p95_s`` / ``max_s`` count from the reading's production (its place in
    the fixed-rate schedule); the ``*_from_publish_s`` from its arrival at the broker.
    ``bound_s`` is the leaves' maximum publish interval + 1 s (None when the runtime has
    none).
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


def measure_latency(
    sizes: FleetSizes,
    log: Callable[[str], None] = print,
    *,
    topology_path: Path = MOTES_TOPOLOGY,
) -> LatencyResult:
    """Motes light through ``topologies/motes-light.toml`` (or ``topology_path``), every
    node a process, replayed at ``sizes.latency_rate`` readings/s: p50 / p95 latency from
    a reading to the root.

    The data is the first ``sizes.latency_readings`` rows of Motes light (rounded down to
    a multiple of the leaf count, so every leaf gets the same share and rate).
    """
    topology = load_topology(topology_path)
    n_leaves = len(topology.leaves())
    n = max(n_leaves, sizes.latency_readings // n_leaves * n_leaves)
    with tempfile.TemporaryDirectory(prefix="fleet-latency-") as tmp:
        data_path = Path(tmp) / f"motes-{n}.txt"
        np.savetxt(data_path, load_dataset("motes-light")[:n], fmt="%.17g")
        fleet = _LiveFleet(topology_path, data_path, n, sizes.latency_rate)
        obs = fleet.run(Path(tmp))
    from_publish, from_schedule = fleet.latencies(obs)
    interval, source = leaf_max_publish_interval(topology)
    result = LatencyResult(
        topology=topology_path.name,
        n_leaves=n_leaves,
        n_processes=len(topology.nodes),
        readings=n,
        rate=sizes.latency_rate,
        covered=obs.covered,
        readings_at_root=sum(len(c) for c in obs.covered_at.values()),
        p50_s=_percentile(from_schedule, 50),
        p95_s=_percentile(from_schedule, 95),
        max_s=_percentile(from_schedule, 100),
        p50_from_publish_s=_percentile(from_publish, 50),
        p95_from_publish_s=_percentile(from_publish, 95),
        max_publish_interval_s=interval,
        interval_source=source,
        wall_s=obs.wall_s,
        replay_returncode=obs.replay_returncode,
        costs=fleet.costs(obs),
        error=obs.error,
    )
    log(
        f"  latency ({n} readings at {sizes.latency_rate:g}/s, {len(topology.nodes)} agent "
        f"processes): p50 {_fmt_s(result.p50_s)}, p95 {_fmt_s(result.p95_s)} from production "
        f"(from publish: p50 {_fmt_s(result.p50_from_publish_s)}, p95 "
        f"{_fmt_s(result.p95_from_publish_s)}); bound {_fmt_s(result.bound_s)}"
        + (f" -- {result.error}" if result.error else "")
    )
    return result


def _fmt_s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


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
        topology_path, data_path = write_fleet_inputs(
            k, Path(tmp) / "inputs", readings_per_leaf=per_leaf, fan_out=k
        )
        fleet = _LiveFleet(topology_path, data_path, k * per_leaf, sizes.agent_rate * k)
        obs = fleet.run(Path(tmp))
    result = AgentCostResult(
        n_leaves=k,
        rate_per_leaf=sizes.agent_rate,
        seconds=per_leaf / sizes.agent_rate,
        covered=obs.covered,
        costs=fleet.costs(obs),
        error=obs.error,
    )
    for role in ("leaf", "aggregator"):
        rows = result.by_role(role)
        if rows:
            log(f"  {role}: {_cost_text(rows)}")
    if result.error:
        log(f"  agent cost: {result.error}")
    return result


def _cost_text(rows: Sequence[ProcessCost]) -> str:
    cpu = float(np.median([c.cpu_per_reading_s or math.nan for c in rows]))
    rss = float(np.median([c.rss_bytes for c in rows])) / 2**20
    hwm = float(np.median([c.peak_rss_bytes for c in rows])) / 2**20
    share = float(np.median([c.cpu_share for c in rows]))
    return (
        f"{cpu * 1e3:.3f} ms CPU per reading, {share:.1%} of a core, RSS {rss:.1f} MiB "
        f"(peak {hwm:.1f} MiB), median of {len(rows)}"
    )
