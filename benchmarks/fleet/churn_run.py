"""The harness of the churn benchmark (`benchmarks.fleet.churn`, issue 23 Done-when 3).

`build_fleet` makes the inputs: the depth-2 tree of `open_fleet_text` (every aggregator
``open = true`` with ``[nodes.admit]`` bounds), each leaf's synthetic readings, and who
retires and who joins, in waves. `run_once` runs them on a fresh plain `LocalMosquitto`,
with churn or without:

- **no churn**: the ``k`` declared leaves, ``readings_per_leaf`` rows of
  `benchmarks.synth.low_rank` data each (d = 48, rank 10);
- **churn**: the same, and while the replay is going, in ``waves`` waves at shares of
  ``reference_s`` (the wall time of a run without churn: the waves fall at the same phases
  of the run): ``join`` undeclared leaves start under the open aggregators (dealt
  round-robin over them; each joined leaf's agent runs on the topology with itself added as
  `Topology.admitted_leaf` of its parent, the aggregators on the file's, so they admit it on
  its first snapshot) and get ``readings_per_leaf`` rows of their own; ``retire`` declared
  leaves (spread over the aggregators) are retired with forgetting: their sensor feed stops,
  their agents stop (final snapshot), then their retained subspace, status, status/detail,
  confirm, scores and entry topics are cleared as ``edge-runtime retire --forget`` clears
  them (`edge_runtime.cli.fleet.device_topics` and its ``clear_device_topics``, which checks
  that each empty message came back), the wave's devices side by side (one clear, about
  14 round trips to the broker, took up to a second on the loaded machine).

The broker has no dynamic security plugin: Done-when 1 (`benchmarks.fleet.membership`)
measures the ACL side; here `retire`'s disabling of the client is replaced by stopping the
device's agent.

Both runs host the agents as ``edge-runtime run`` does: spread over ``workers`` processes
(`edge_runtime.workers.WorkerPool`, the groups of `assign_nodes`; with ``workers = 1`` an
`AgentHost` in this process). A joining wave's agents start in the running worker with the
fewest agents (`WorkerPool.add_agents`, on the topology with the wave's leaves added); a
retiring wave's stop in theirs (`WorkerPool.remove_agents`). This process runs the replays
(one `Replayer` for the kept leaves and one per retire wave in both runs, one per join wave
in the churn run), the model watcher and the operator's clearing. Measured before the
pool could start agents while it runs: with the 100 joining agents in this process, its
loop, shared with the replays, delayed the whole fleet's readings (a churn run's CPU time
1.6-1.7 x the run without churn, wall time 1.5-2.9 x, in three pairs on the loaded
machine); with a worker process per join wave, each cost an interpreter start (0.85-1.1 s
of CPU on 2 cores the devices would not share). Every wait is bounded
(``run_timeout_s`` over the whole run, the replays' own confirmation timeouts,
``settle_timeout_s`` for the root); the workers and the broker are stopped by their pids
(`WorkerPool.close` / its exit, `LocalMosquitto.stop`), also on error.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable, Mapping
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
    "ChurnPlan",
    "Fleet",
    "RunResult",
    "StepError",
    "build_fleet",
    "open_fleet_text",
    "run_once",
]


class StepError(RuntimeError):
    """A step that did not happen within its bound; the message says which."""


@dataclass(frozen=True)
class ChurnPlan:
    """Sizes, schedule and bounds of one churn benchmark.

    Attributes
    ----------
    leaves, join, retire : int
        Declared leaves ``k``; undeclared leaves that join; declared leaves that retire.
    readings_per_leaf, n_features : int
        Rows each leaf (declared or joined) gets, and their width ``d``.
    workers : int
        Processes hosting the tree's other agents (1: all in this process).
    waves : int
        Join waves and retire waves (each of about ``join / waves``, ``retire / waves``).
    join_from, join_to, retire_from, retire_to : float
        Shares of the reference time (`run_once`) at which the first and the last wave
        start, counted from the first reading sent. Not shares of the readings sent: the
        replay sends every reading long before the leaves have learnt them (at 1024 leaves
        in about a quarter of the run), and the root's coverage grows in jumps (a leaf
        publishes when its sample count doubles, and when idle).
    admit_range : float
        The open aggregators admit leaves of ``valid_range = [-admit_range, admit_range]``.
    admit_rate : float
        ... and of ``max_reading_rate`` (readings/s) this.
    keepalive_s : int
        MQTT keepalive of every client, seconds (at least `shared_loop_settings`'). The
        benchmark hosts about 500 agents per process on 2 cores shared with other work; at
        the runtime's 6 s the broker dropped every client of one worker at once in 3 of 6
        runs (a loop late by 1.5 keepalives; 144 to 433 ``connection_lost`` lines, in runs
        with churn and without), which measures the host, not the churn: a device runs one
        agent per loop. An MQTT operation's bound (``timeout_s``) is at least this too, as
        `shared_loop_settings` makes it (a PUBACK 10 s late ended the root's connection once
        a minute under that load). for the root to reach exact coverage.
    run_timeout_s : float
        Bound of one whole run (start, replay, settle, stop), seconds.
    seed : int
        Seed of the synthetic data.
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
    """TOML of `fleet_topology_text` (``k`` leaves, fan-out ``ceil(sqrt(k))``) with every
    aggregator but the root ``open = true`` and a ``[nodes.admit]`` table: ``valid_range =
    [-admit_range, admit_range]`` (reading units) and ``max_reading_rate = admit_rate``
    (readings/s)."""
    fan = math.isqrt(k - 1) + 1 if k > 1 else 1
    admit = (
        f"open = true\n[nodes.admit]\nvalid_range = [{-admit_range:g}, {admit_range:g}]\n"
        f"max_reading_rate = {admit_rate:g}\n"
    )
    return fleet_topology_text(k, fan_out=fan).replace(
        'parent = "root"\n', 'parent = "root"\n' + admit
    )


@dataclass(frozen=True)
class Fleet:
    """The inputs of both runs.

    Attributes
    ----------
    topology : Topology
        The open tree of `open_fleet_text` (what the aggregators and declared leaves run).
    rows : dict of leaf id to ndarray of shape (readings_per_leaf, n_features), float64
        Each leaf's readings, declared and joining.
    kept : list of str
        Declared leaves that never retire.
    retire_waves : list of list of str
        Declared leaves retiring, per wave.
    join_waves : list of dict of leaf id to NodeConfig
        Joining leaves per wave, each as its open parent admits it.
    """

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
    """The topology, the data and who joins and retires (see `Fleet`).

    Retiring leaves are every ``leaves // retire``-th declared leaf (so they are spread
    over the aggregators); joining leaves are ``join-000``... dealt round-robin over the
    aggregators; both are cut into ``waves`` contiguous waves.

    Raises
    ------
    ValueError
        If ``retire`` is not below ``leaves``, or a count is negative.
    """
    if plan.join < 0 or not 0 <= plan.retire < plan.leaves:
        raise ValueError(f"need join >= 0 and 0 <= retire < leaves, got {plan}")
    text = open_fleet_text(plan.leaves, admit_range=plan.admit_range, admit_rate=plan.admit_rate)
    topology = parse_topology(text)
    declared = topology.leaves()
    retiring = declared[:: max(1, plan.leaves // max(1, plan.retire))][: plan.retire]
    sites = topology.children(topology.root)
    width = len(str(max(plan.join - 1, 0)))
    joining = {
        f"join-{j:0{width}d}": topology.admitted_leaf(sites[j % len(sites)], f"join-{j:0{width}d}")
        for j in range(plan.join)
    }
    n = plan.readings_per_leaf
    ids = [*declared, *joining]
    data = low_rank(len(ids) * n, plan.n_features, min(10, plan.n_features), seed=plan.seed)
    waves = max(1, plan.waves)
    return Fleet(
        topology=topology,
        rows={leaf: data[i * n : (i + 1) * n] for i, leaf in enumerate(ids)},
        kept=[leaf for leaf in declared if leaf not in set(retiring)],
        retire_waves=_chunks(retiring, waves),
        join_waves=[{leaf: joining[leaf] for leaf in w} for w in _chunks(list(joining), waves)],
    )


def _view(topology: Topology, leaves: Mapping[str, NodeConfig]) -> Topology:
    """``topology``'s aggregators with exactly ``leaves`` (what a replay, or a joined leaf's
    own agent, is given: the open aggregators stay aggregators without their leaves)."""
    aggregators = {n: topology.nodes[n] for n in topology.aggregators()}
    return dataclasses.replace(topology, nodes={**aggregators, **leaves})


def _feed(fleet: Fleet, leaves: Mapping[str, NodeConfig]) -> tuple[Topology, np.ndarray]:
    """A view of ``leaves`` and its data, ordered so that its contiguous split gives each
    leaf its own rows."""
    view = _view(fleet.topology, leaves)
    return view, np.concatenate([fleet.rows[leaf] for leaf in view.leaves()])


@dataclass
class RunResult:
    """One run (``churn`` or not): times in seconds, counts of readings and messages.

    ``wall_s`` is from the first reading sent to the first exact root model (None: never
    exact within ``settle_timeout_s``); ``total_s`` also counts starting and stopping the
    agents; ``cpu_s`` is the CPU time (user + system) of this process, the workers and the
    broker over the run (less sensitive than wall time to other loads on the machine).
    ``readings`` are the readings sent (a retired leaf's up to its retirement);
    ``messages`` / ``payload_bytes`` what every agent published (``leaf_messages``: the
    leaves' share; the rest is the aggregators'). ``expected`` maps each
    kept leaf to its accepted readings; ``provenance`` is the final root model's.
    ``error_ratio`` compares that model with the offline SVD of the kept leaves' accepted
    rows. ``retired_seen`` holds the retired leaves some root model named (before they were
    forgotten). ``events`` lists the churn steps as they happened.
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


class _Run:
    """The state of one run in progress (see `run_once`)."""

    def __init__(
        self,
        plan: ChurnPlan,
        fleet: Fleet,
        churn: bool,
        settings: AgentSettings,
        reference_s: float,
    ) -> None:
        self.plan, self.fleet, self.churn, self.settings = plan, fleet, churn, settings
        self.result = RunResult(churn=churn, retired=fleet.retiring if churn else [])
        self.a_view, self.a_data = _feed(fleet, {lf: fleet.topology.nodes[lf] for lf in fleet.kept})
        self.b_feeds = [
            _feed(fleet, {lf: fleet.topology.nodes[lf] for lf in wave})
            for wave in fleet.retire_waves
        ]
        self.c_feeds = [_feed(fleet, wave) for wave in fleet.join_waves]
        counted = [(self.a_view, self.a_data)] + (self.c_feeds if churn else self.b_feeds)
        self.reference: list[np.ndarray] = []
        for view, data in counted:
            screening = screen_data(view, data)
            self.result.expected.update(screening.accepted)
            self.reference.append(screening.reference)
        self.a_replayer = Replayer(self.a_view, self.a_data, settings)
        self.b_replayers = [Replayer(view, data, settings) for view, data in self.b_feeds]
        self.c_replayers = [Replayer(view, data, settings) for view, data in self.c_feeds]
        self.a_expected = screen_data(self.a_view, self.a_data).accepted
        self.a_total = max(1, sum(self.a_expected.values()))
        self.covered_a = 0
        self.reference_s = reference_s
        self.covered_at: float | None = None
        self.t0 = 0.0
        self.host: AgentHost | WorkerPool | None = None  # every agent, set by `run_once`
        self.b_tasks: list[asyncio.Task] = []
        self.stack = contextlib.AsyncExitStack()

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
        sent = sum(int(np.isfinite(t).sum()) for t in self.a_replayer.first_sent.values())
        sent /= self.a_total
        covered = self.covered_a / self.a_total
        self.result.events.append(
            f"t = {time.monotonic() - self.t0:6.2f} s, kept leaves' readings sent {sent:4.0%}, "
            f"in the root model {covered:4.0%}: {text}"
        )

    @property
    def replayers(self) -> list[Replayer]:
        """Every replay of the run (the join waves' only in a churn run)."""
        return [self.a_replayer, *self.b_replayers, *(self.c_replayers if self.churn else [])]

    @staticmethod
    async def replay(replayer: Replayer, progress: Callable[[int], None] | None = None) -> None:
        stats = await replayer.run(progress)
        if stats.error or stats.unconfirmed:
            raise StepError(
                f"replay into {len(replayer.topology.leaves())} leaves: "
                f"{stats.error or f'{sum(stats.unconfirmed.values())} readings unconfirmed'}"
            )

    async def join(self, wave: int, share: float) -> None:
        await self.when(share)
        view, _ = self.c_feeds[wave]
        assert self.host is not None
        await self.host.add_agents(view, view.leaves())  # a pool: the least crowded worker
        self.note(f"join wave {wave + 1}: {len(view.leaves())} undeclared leaves connected")
        await self.replay(self.c_replayers[wave])
        self.note(f"join wave {wave + 1}: its readings confirmed")

    async def retire(self, wave: int, share: float) -> None:
        await self.when(share)
        leaves = self.fleet.retire_waves[wave]
        task = self.b_tasks[wave]
        sent = self.b_replayers[wave].first_sent
        fed = sum(int(np.isfinite(sent[leaf]).sum()) for leaf in leaves)
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
                    group.create_task(self.replay(self.a_replayer))
                    for replayer in self.b_replayers:  # awaited below, or by `retire`
                        self.b_tasks.append(asyncio.create_task(self.replay(replayer)))
                    if self.churn:
                        for i, share in enumerate(
                            plan.at(plan.join_from, plan.join_to)[: len(self.c_feeds)]
                        ):
                            group.create_task(self.join(i, share))
                        for i, share in enumerate(
                            plan.at(plan.retire_from, plan.retire_to)[: len(self.b_feeds)]
                        ):
                            group.create_task(self.retire(i, share))
                    else:
                        for task in self.b_tasks:
                            group.create_task(_await(task))
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


async def _await(task: asyncio.Task) -> None:
    await task


async def run_once(
    plan: ChurnPlan, fleet: Fleet, *, churn: bool, reference_s: float = 0.0
) -> RunResult:
    """One run of ``fleet`` on a fresh plain `LocalMosquitto`: with churn or without.

    Parameters
    ----------
    plan : ChurnPlan
    fleet : Fleet
        From `build_fleet` of ``plan``.
    churn : bool
        Join and retire leaves during the run, or not.
    reference_s : float, default 0
        Seconds: the waves start at ``plan.join_from * reference_s`` ... after the first
        reading was sent (`ChurnPlan`); the wall time of a run without churn
        (`RunResult.wall_s`) puts them at the same phases of the run. Not used without churn.

    Returns
    -------
    RunResult
        With ``error`` set (one line) when a step failed or was not done in time.
    """
    start, cpu_start = time.monotonic(), cpu_time_s()
    topology = fleet.topology
    groups = assign_nodes(topology, plan.workers)
    per_loop = max(map(len, groups)) + (math.ceil(plan.join / len(groups)) if churn else 0)
    replayers = 2 + 2 * plan.waves
    ensure_descriptors(
        run_descriptors_needed(
            len(topology.nodes) + plan.join + replayers, plan.workers, local_broker=True
        )
    )
    with LocalMosquitto() as broker:
        base = AgentSettings(
            host=broker.host,
            port=broker.port,
            keepalive_s=plan.keepalive_s,
            timeout_s=max(AgentSettings.timeout_s, plan.keepalive_s),
        )
        settings = shared_loop_settings(base, per_loop)
        run = _Run(plan, fleet, churn, settings, reference_s)
        result = run.result
        try:
            async with asyncio.timeout(plan.run_timeout_s), run.stack:
                host: AgentHost | WorkerPool
                if len(groups) == 1:
                    host = AgentHost(topology, groups[0], settings, plan.n_features)
                else:
                    host = WorkerPool(topology, groups, settings, plan.n_features)
                run.host = await run.stack.enter_async_context(host)
                model = await host.guard(run.phase())
                reports: list[WorkerReport] = await host.close()  # the removed agents too
            broker_cpu = sample_process(broker.pid) if broker.pid is not None else None
            run.result.cpu_s = (
                cpu_time_s()
                - cpu_start
                + sum(r.cpu_s for r in reports if r.pid != os.getpid())  # whole worker lives
                + (0.0 if broker_cpu is None else broker_cpu.cpu_s)
            )
        except (TimeoutError, StepError, EdgeRuntimeError, aiomqtt.MqttError, OSError) as exc:
            result.error = _one_line(exc)
            model, reports = None, []
        except ExceptionGroup as group:  # a task of the run's TaskGroup failed
            result.error = _one_line(group)
            model, reports = None, []
    _summarise(run, model, reports, start)
    return result


def _one_line(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:400]


def _summarise(
    run: _Run, model: SubspaceMessage | None, reports: list[WorkerReport], start: float
) -> None:
    result = run.result
    result.total_s = time.monotonic() - start
    if run.covered_at is not None:
        result.wall_s = run.covered_at - run.t0
    result.readings = sum(
        int(np.isfinite(t).sum()) for r in run.replayers for t in r.first_sent.values()
    )
    agents = [a for r in reports for a in r.agents]
    result.messages = sum(a.messages_published for a in agents)
    aggregators = set(run.fleet.topology.aggregators())
    result.leaf_messages = sum(a.messages_published for a in agents if a.node not in aggregators)
    result.payload_bytes = sum(a.bytes_published for a in agents)
    result.rejects = sum(a.rejects for a in agents)
    result.undelivered = sum(a.undelivered for a in agents)
    result.joined = [lf for wave in run.fleet.join_waves for lf in wave] if run.churn else []
    if model is not None:
        result.provenance = dict(model.provenance)
        result.n_samples = model.n_samples
        if model.rank > 0:
            result.error_ratio = error_ratio(np.concatenate(run.reference), model.subspace.basis)
