"""One run of the churn benchmark (`benchmarks.fleet.churn`) on a fresh plain `LocalMosquitto`:
the declared leaves replayed, and with churn, in waves at shares of a run without churn's wall
time, undeclared leaves joining the open aggregators and declared leaves retired with
forgetting (topics cleared as ``retire --forget`` does). Agents are hosted as ``edge-runtime
run`` hosts them (`WorkerPool`); every wait is bounded, every process stopped by pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiomqtt
import numpy as np

from benchmarks.fleet.inputs import fleet_topology_text
from benchmarks.processes import sample_process
from benchmarks.synth import low_rank
from edge_runtime.broker import LocalMosquitto
from edge_runtime.cli.fleet import clear_device_topics, device_topics
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.fpca import error_ratio
from edge_runtime.limits import ensure_descriptors, run_descriptors_needed
from edge_runtime.monitor import ModelWatcher
from edge_runtime.replay import Replayer
from edge_runtime.runner import screen_data, shared_loop_settings
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import NodeConfig, Topology, parse_topology
from edge_runtime.wire import SubspaceMessage
from edge_runtime.workers import AgentHost, WorkerPool, WorkerReport, assign_nodes, cpu_time_s

__all__ = [
    "ChurnPlan", "Fleet", "RunResult", "StepError", "build_fleet", "open_fleet_text", "run_once",
]  # fmt: skip


class StepError(RuntimeError):
    """A step that did not happen within its bound; the message says which."""


@dataclass(frozen=True)
class ChurnPlan:
    """Sizes, schedule and bounds (seconds) of the churn benchmark.

    ``leaves`` declared, ``join`` undeclared joining, ``retire`` declared retiring, in
    ``waves`` waves each; ``readings_per_leaf`` rows of ``n_features`` each; ``workers``
    agent host processes (1: this one). The first and last wave start at ``*_from`` /
    ``*_to`` shares of the reference time (not of the readings sent: the replay is done
    long before the root's coverage, which grows in jumps). Open aggregators admit
    ``valid_range = +-admit_range`` and ``max_reading_rate = admit_rate``. ``keepalive_s``:
    MQTT keepalive and operation bound of every client; ~500 agents share a worker's loop
    on 2 loaded cores, and at the runtime's 6 s the broker dropped a whole worker's
    clients in 3 of 6 runs (it measured the host, not the churn).
    """

    leaves: int = 1024
    join: int = 100
    retire: int = 50
    readings_per_leaf: int = 200
    n_features: int = 48
    workers: int = 2
    waves: int = 5
    join_from: float = 0.2
    join_to: float = 0.6
    retire_from: float = 0.3
    retire_to: float = 0.7
    admit_range: float = 100.0
    admit_rate: float = 100.0
    keepalive_s: int = 30
    settle_timeout_s: float = 120.0
    run_timeout_s: float = 600.0
    seed: int = 0

    def at(self, first: float, last: float) -> list[float]:
        """The shares at which the ``waves`` waves start, evenly from ``first`` to ``last``."""
        n = max(1, self.waves)
        return [first + (last - first) * i / max(1, n - 1) for i in range(n)]


def open_fleet_text(k: int, *, admit_range: float = 100.0, admit_rate: float = 100.0) -> str:
    """TOML of `fleet_topology_text` (fan-out ``ceil(sqrt(k))``) with every aggregator but
    the root ``open = true``, admitting ``valid_range = [-admit_range, admit_range]`` and
    ``max_reading_rate = admit_rate`` (readings/s)."""
    admit = (
        f"open = true\n[nodes.admit]\nvalid_range = [{-admit_range:g}, {admit_range:g}]\n"
        f"max_reading_rate = {admit_rate:g}\n"
    )
    text = fleet_topology_text(k, fan_out=math.isqrt(k - 1) + 1 if k > 1 else 1)
    return text.replace('parent = "root"\n', 'parent = "root"\n' + admit)


@dataclass(frozen=True)
class Fleet:
    """The inputs of both runs: the open tree, each leaf's rows ``(readings_per_leaf,
    n_features)``, the declared leaves kept, those retiring per wave, and the joining
    leaves per wave as their open parent admits them."""

    topology: Topology
    rows: dict[str, np.ndarray]
    kept: list[str]
    retire_waves: list[list[str]]
    join_waves: list[dict[str, NodeConfig]]

    @property
    def retiring(self) -> list[str]:
        """Every declared leaf that retires."""
        return [leaf for wave in self.retire_waves for leaf in wave]


def _chunks(items: list, n: int) -> list[list]:
    return [list(c) for c in np.array_split(np.asarray(items, dtype=object), n) if len(c)]


def build_fleet(plan: ChurnPlan) -> Fleet:
    """Every ``leaves // retire``-th declared leaf retires; ``join-000``... are dealt
    round-robin over the aggregators; both cut into ``waves`` contiguous waves. Raises
    ValueError unless ``join >= 0`` and ``0 <= retire < leaves``."""
    if plan.join < 0 or not 0 <= plan.retire < plan.leaves:
        raise ValueError(f"need join >= 0 and 0 <= retire < leaves, got {plan}")
    text = open_fleet_text(plan.leaves, admit_range=plan.admit_range, admit_rate=plan.admit_rate)
    topology = parse_topology(text)
    declared = topology.leaves()
    retiring = declared[:: max(1, plan.leaves // max(1, plan.retire))][: plan.retire]
    sites = topology.children(topology.root)
    names = [f"join-{j:0{len(str(max(plan.join - 1, 0)))}d}" for j in range(plan.join)]
    joining = {n: topology.admitted_leaf(sites[j % len(sites)], n) for j, n in enumerate(names)}
    n, ids = plan.readings_per_leaf, [*declared, *joining]
    data = low_rank(len(ids) * n, plan.n_features, min(10, plan.n_features), seed=plan.seed)
    waves = max(1, plan.waves)
    return Fleet(
        topology,
        {leaf: data[i * n : (i + 1) * n] for i, leaf in enumerate(ids)},
        [leaf for leaf in declared if leaf not in set(retiring)],
        _chunks(retiring, waves),
        [{leaf: joining[leaf] for leaf in w} for w in _chunks(list(joining), waves)],
    )


def _feed(fleet: Fleet, leaves: Mapping[str, NodeConfig]) -> tuple[Topology, np.ndarray]:
    """The topology's aggregators with exactly ``leaves``, and their rows in its order."""
    topology = fleet.topology
    nodes = {**{n: topology.nodes[n] for n in topology.aggregators()}, **leaves}
    view = dataclasses.replace(topology, nodes=nodes)
    return view, np.concatenate([fleet.rows[leaf] for leaf in view.leaves()])


@dataclass
class RunResult:
    """One run (``churn`` or not), seconds and counts.

    ``wall_s``: first reading sent -> first exact root model (None: never); ``total_s``
    also starting and stopping; ``cpu_s``: this process, the workers and the broker.
    ``readings`` sent; ``messages`` / ``payload_bytes`` every agent published
    (``leaf_messages`` the leaves'); ``expected``: each kept leaf's accepted readings;
    ``provenance`` and ``n_samples`` the final root model's, ``error_ratio`` against the
    offline SVD of the kept rows; ``retired_seen``: retired leaves some model named;
    ``events``: the churn steps.
    """

    churn: bool
    wall_s: float | None = None
    total_s: float = 0.0
    cpu_s: float = 0.0
    readings: int = 0
    messages: int = 0
    leaf_messages: int = 0
    payload_bytes: int = 0
    expected: dict[str, int] = field(default_factory=dict)
    provenance: dict[str, int] = field(default_factory=dict)
    n_samples: int = 0
    error_ratio: float = math.nan
    retired: list[str] = field(default_factory=list)
    retired_seen: set[str] = field(default_factory=set)
    joined: list[str] = field(default_factory=list)
    rejects: int = 0
    undelivered: int = 0
    events: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def exact(self) -> bool:
        """The root's provenance is exactly the kept leaves' accepted readings."""
        return bool(self.expected) and self.provenance == self.expected

    @property
    def retired_present(self) -> list[str]:
        """Retired leaves the final root model still names (churn runs)."""
        return [leaf for leaf in self.retired if leaf in self.provenance] if self.churn else []

    @property
    def messages_per_reading(self) -> float:
        """Agent messages per reading sent."""
        return self.messages / self.readings if self.readings else math.nan


def _sent(replayer: Replayer, leaves: list[str] | None = None) -> int:
    """Readings ``replayer`` sent (to ``leaves`` only, if given)."""
    sent = replayer.first_sent
    return sum(int(np.isfinite(sent[lf]).sum()) for lf in sent if leaves is None or lf in leaves)


class _Run:
    """One run in progress (see `run_once`): kept leaves (a), retiring waves (b), joining
    waves (c), each fed by its own `Replayer`."""

    def __init__(
        self, plan: ChurnPlan, fleet: Fleet, churn: bool, settings: AgentSettings, ref_s: float
    ) -> None:
        self.plan, self.fleet, self.churn, self.settings = plan, fleet, churn, settings
        self.result = RunResult(churn=churn, retired=fleet.retiring if churn else [])
        nodes = fleet.topology.nodes
        a = _feed(fleet, {lf: nodes[lf] for lf in fleet.kept})
        b = [_feed(fleet, {lf: nodes[lf] for lf in wave}) for wave in fleet.retire_waves]
        self.c_views = [_feed(fleet, wave) for wave in fleet.join_waves]
        screenings = [screen_data(*feed) for feed in [a, *(self.c_views if churn else b)]]
        for screening in screenings:
            self.result.expected.update(screening.accepted)
        self.reference = [screening.reference for screening in screenings]
        self.a_expected = screenings[0].accepted
        self.a, self.b, self.c = (Replayer(*a, settings), [Replayer(*f, settings) for f in b],
                                  [Replayer(*f, settings) for f in self.c_views])  # fmt: skip
        self.covered_a, self.covered_at, self.t0, self.reference_s = 0, None, 0.0, ref_s
        self.host: AgentHost | WorkerPool | None = None  # every agent, set by `run_once`
        self.b_tasks: list[asyncio.Task] = []

    def on_model(self, model: SubspaceMessage) -> None:
        prov = model.provenance
        self.result.retired_seen.update(leaf for leaf in self.result.retired if leaf in prov)
        if self.covered_at is None and dict(prov) == self.result.expected:
            self.covered_at = time.monotonic()
        self.covered_a = sum(min(prov.get(leaf, 0), n) for leaf, n in self.a_expected.items())

    async def when(self, share: float) -> None:
        """Return ``share * reference_s`` seconds after the first reading was sent."""
        await asyncio.sleep(max(0.0, self.t0 + share * self.reference_s - time.monotonic()))

    def note(self, text: str) -> None:
        total = max(1, sum(self.a_expected.values()))
        sent, covered = _sent(self.a) / total, self.covered_a / total
        self.result.events.append(
            f"t = {time.monotonic() - self.t0:6.2f} s, kept leaves' readings sent {sent:4.0%}, "
            f"in the root model {covered:4.0%}: {text}"
        )

    @property
    def replayers(self) -> list[Replayer]:
        """Every replay of the run (the join waves' only in a churn run)."""
        return [self.a, *self.b, *(self.c if self.churn else [])]

    @staticmethod
    async def replay(replayer: Replayer) -> None:
        stats = await replayer.run()
        if stats.error or stats.unconfirmed:
            raise StepError(
                f"replay into {len(replayer.topology.leaves())} leaves: "
                f"{stats.error or f'{sum(stats.unconfirmed.values())} readings unconfirmed'}"
            )

    async def join(self, wave: int, share: float) -> None:
        await self.when(share)
        view, _ = self.c_views[wave]
        assert self.host is not None
        await self.host.add_agents(view, view.leaves())  # a pool: the least crowded worker
        self.note(f"join wave {wave + 1}: {len(view.leaves())} undeclared leaves connected")
        await self.replay(self.c[wave])
        self.note(f"join wave {wave + 1}: its readings confirmed")

    async def retire(self, wave: int, share: float) -> None:
        await self.when(share)
        leaves, task = self.fleet.retire_waves[wave], self.b_tasks[wave]
        fed = _sent(self.b[wave], leaves)
        task.cancel()  # their sensors stop (a no-op when their replay is over)
        await asyncio.wait([task])
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
        assert self.host is not None
        await self.host.remove_agents(leaves)  # their final snapshots go out
        topology = self.fleet.topology
        await asyncio.gather(  # one `retire --forget` per device, the wave's side by side
            *(
                clear_device_topics(
                    self.settings, device_topics(topology, leaf).to_clear(True), topology.prefix
                )
                for leaf in leaves
            )
        )
        self.note(
            f"retire wave {wave + 1}: {len(leaves)} leaves stopped and forgotten "
            f"({fed} of their {len(leaves) * self.plan.readings_per_leaf} readings sent)"
        )

    async def phase(self) -> SubspaceMessage | None:
        """Replays, churn, then the wait for the exact model; the final model."""
        plan = self.plan
        async with ModelWatcher(self.fleet.topology, self.settings, self.on_model) as watcher:
            self.t0 = time.monotonic()
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(self.replay(self.a))
                    # awaited by `retire`, or here without churn
                    self.b_tasks = [asyncio.create_task(self.replay(r)) for r in self.b]
                    if self.churn:
                        joins = plan.at(plan.join_from, plan.join_to)[: len(self.c)]
                        retires = plan.at(plan.retire_from, plan.retire_to)[: len(self.b)]
                        for i, share in enumerate(joins):
                            group.create_task(self.join(i, share))
                        for i, share in enumerate(retires):
                            group.create_task(self.retire(i, share))
                    else:
                        for task in self.b_tasks:
                            group.create_task(asyncio.wait_for(task, None))
            finally:
                for task in self.b_tasks:
                    task.cancel()
            self.note("every reading sent and confirmed")
            with contextlib.suppress(TimeoutError):
                await watcher.wait_until(
                    lambda m: m is not None and dict(m.provenance) == self.result.expected,
                    plan.settle_timeout_s,
                )
            return watcher.model


async def run_once(
    plan: ChurnPlan, fleet: Fleet, *, churn: bool, reference_s: float = 0.0
) -> RunResult:
    """One run of ``fleet`` (from `build_fleet` of ``plan``) on a fresh plain
    `LocalMosquitto`, with churn or without; with churn its waves start at shares of
    ``reference_s`` seconds after the first reading was sent (`ChurnPlan`). A step that
    failed or was late sets ``error`` (one line) of the result."""
    start, cpu_start = time.monotonic(), cpu_time_s()
    topology = fleet.topology
    groups = assign_nodes(topology, plan.workers)
    per_loop = max(map(len, groups)) + (math.ceil(plan.join / len(groups)) if churn else 0)
    agents = len(topology.nodes) + plan.join + 2 + 2 * plan.waves  # and the replays
    ensure_descriptors(run_descriptors_needed(agents, plan.workers, local_broker=True))
    with LocalMosquitto() as broker:
        base = AgentSettings(
            host=broker.host, port=broker.port, keepalive_s=plan.keepalive_s,
            timeout_s=max(AgentSettings.timeout_s, plan.keepalive_s),
        )  # fmt: skip
        run = _Run(plan, fleet, churn, shared_loop_settings(base, per_loop), reference_s)
        model, reports = None, []
        try:
            async with asyncio.timeout(plan.run_timeout_s):
                if len(groups) == 1:
                    host = AgentHost(topology, groups[0], run.settings, plan.n_features)
                else:
                    host = WorkerPool(topology, groups, run.settings, plan.n_features)
                async with host:
                    run.host = host
                    model = await host.guard(run.phase())
                    reports = await host.close()  # the removed agents too
            broker_cpu = sample_process(broker.pid) if broker.pid is not None else None
            run.result.cpu_s = (
                cpu_time_s() - cpu_start
                + sum(r.cpu_s for r in reports if r.pid != os.getpid())  # whole worker lives
                + (0.0 if broker_cpu is None else broker_cpu.cpu_s)
            )  # fmt: skip
        except (TimeoutError, StepError, EdgeRuntimeError, aiomqtt.MqttError, OSError) as exc:
            run.result.error, model, reports = _one_line(exc), None, []
        except ExceptionGroup as group:  # a task of the run's TaskGroup failed
            run.result.error, model, reports = _one_line(group), None, []
    _summarise(run, model, reports, start)
    return run.result


def _one_line(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:400]


def _summarise(
    run: _Run, model: SubspaceMessage | None, reports: list[WorkerReport], start: float
) -> None:
    result, agents = run.result, [a for r in reports for a in r.agents]
    result.total_s = time.monotonic() - start
    if run.covered_at is not None:
        result.wall_s = run.covered_at - run.t0
    result.readings = sum(_sent(r) for r in run.replayers)
    aggregators = set(run.fleet.topology.aggregators())
    result.messages = sum(a.messages_published for a in agents)
    result.leaf_messages = sum(a.messages_published for a in agents if a.node not in aggregators)
    result.payload_bytes = sum(a.bytes_published for a in agents)
    result.rejects = sum(a.rejects for a in agents)
    result.undelivered = sum(a.undelivered for a in agents)
    result.joined = [lf for wave in run.fleet.join_waves for lf in wave] if run.churn else []
    if model is not None:
        result.provenance, result.n_samples = dict(model.provenance), model.n_samples
        if model.rank > 0:
            result.error_ratio = error_ratio(np.concatenate(run.reference), model.subspace.basis)
