"""A whole topology on one machine: every agent, a replay, and the root's final estimate.

The agents run in this process (``workers=1``) or spread over worker processes
(`edge_runtime.workers`); the replay and the model watcher always run here.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

import aiomqtt
import numpy as np
import structlog

from edge_runtime.agents.common.core.policy import largest_angle
from edge_runtime.fpca import error_ratio
from edge_runtime.monitor import ModelWatcher, covers, leaves_reporting, privacy_of
from edge_runtime.replay import Replayer, ReplayStats
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology
from edge_runtime.wire import PrivacyParams, SubspaceMessage
from edge_runtime.workers import (
    AgentHost,
    WorkerPool,
    WorkerReport,
    assign_nodes,
    cpu_time_s,
    peak_rss_bytes,
)

if TYPE_CHECKING:
    from edge_runtime.plots import RunRecorder

__all__ = [
    "Arrivals",
    "Progress",
    "RunSummary",
    "Screening",
    "clear_retained",
    "fedpower_settled",
    "run_topology",
    "screen_data",
    "shared_loop_settings",
]

log = structlog.get_logger("edge_runtime.runner")

AGENTS_PER_KEEPALIVE_S = 100
"""Agents sharing one event loop per second of MQTT keepalive (`shared_loop_settings`).

Measured with the fleet benchmark's large run (10,240 leaves, 2 worker processes of 5,120+
agents each, 2 cores): keepalive 5 s gave 23,149 ``connection_lost`` lines and 7 of 10,240
leaves covered (the loops lag past 1.5 x keepalive, so the broker drops the clients); 60 s
gave none and every leaf covered. At 2,048 leaves (1,024+ per loop) 5 s lost none."""


def shared_loop_settings(settings: AgentSettings, agents: int) -> AgentSettings:
    """``settings`` for ``agents`` agents sharing one process's event loop (`run_topology`).

    A device runs one agent, whose loop answers the broker's keepalive at once. Thousands of
    agents in one loop answer late under load, and the broker then drops them for a missed
    keepalive. So the keepalive is at least one second per `AGENTS_PER_KEEPALIVE_S` agents,
    and ``timeout_s`` (an MQTT operation's bound) at least the keepalive. With the default
    keepalive of 5 s, up to 500 agents per loop keep ``settings`` unchanged.

    Parameters
    ----------
    settings : AgentSettings
        The configured settings.
    agents : int
        Agents in the most crowded process.

    Returns
    -------
    AgentSettings
    """
    keepalive = max(settings.keepalive_s, math.ceil(agents / AGENTS_PER_KEEPALIVE_S))
    if keepalive == settings.keepalive_s:
        return settings
    return replace(settings, keepalive_s=keepalive, timeout_s=max(settings.timeout_s, keepalive))


@dataclass(frozen=True)
class Screening:
    """What the leaves will do with a dataset, by their declared ``valid_range``.

    Attributes
    ----------
    accepted, rejected : dict of leaf id to int
        Readings each leaf keeps and drops (``out_of_range = "reject"``; a leaf with
        ``"clip"`` keeps every reading, clipped).
    reference : ndarray of shape (sum(accepted), n_features), float64
        The readings the leaves learn from (kept rows, clipped where a leaf clips): what
        the root's model is compared with.
    kept : dict of leaf id to ndarray of shape (accepted[leaf],), int
        Positions of the kept readings in each leaf's share (its replay order).
    """

    accepted: dict[str, int]
    rejected: dict[str, int]
    reference: np.ndarray
    kept: dict[str, np.ndarray]

    @property
    def n_rejected(self) -> int:
        """Readings dropped over all leaves."""
        return sum(self.rejected.values())


def screen_data(topology: Topology, data: np.ndarray) -> Screening:
    """Split ``data`` over the leaves (`Topology.split_rows`) and screen each share as the
    leaf will (`NodeConfig.rejects`; per-feature bounds of another width than the data
    reject a leaf's whole share, as the leaf does).

    Parameters
    ----------
    topology : Topology
        The leaves, their shares (``[data] split``) and their ``valid_range``.
    data : ndarray of shape (n_samples, n_features), float64
        The readings, in the sensors' units.

    Returns
    -------
    Screening
        Kept and rejected counts per leaf, the kept rows (clipped where a leaf clips) and
        their positions in each leaf's share.

    Raises
    ------
    ValueError
        If every reading is outside the leaves' ranges: one line naming the count, the
        ranges and what to check.
    """
    accepted: dict[str, int] = {}
    rejected: dict[str, int] = {}
    kept_at: dict[str, np.ndarray] = {}
    parts = []
    for leaf, rows in topology.split_rows(data.shape[0]).items():
        config = topology.nodes[leaf]
        share = data[rows]
        try:
            dropped = config.rejects(share)
        except ValueError:
            dropped = np.ones(len(share), dtype=bool)
        kept = share[~dropped]
        bounds = None if config.out_of_range != "clip" else config.range_bounds(data.shape[1])
        if bounds is not None:
            kept = np.clip(kept, *bounds)
        parts.append(kept)
        accepted[leaf], rejected[leaf] = len(kept), int(dropped.sum())
        kept_at[leaf] = np.flatnonzero(~dropped)
    if data.shape[0] and not any(accepted.values()):
        ranges = sorted({str(topology.nodes[leaf].valid_range) for leaf in accepted})
        raise ValueError(
            f"every one of the {data.shape[0]} readings is outside the leaves' valid_range "
            f"({', '.join(ranges)}): nothing to learn; check the data's units or the "
            "topology's valid_range"
        )
    reference = np.concatenate(parts) if parts else data[:0]
    return Screening(accepted, rejected, reference, kept_at)


@dataclass(frozen=True)
class Progress:
    """A progress report: rows replayed, leaves the root covers, the root's rank."""

    samples_replayed: int
    samples_total: int
    leaves_reporting: int
    leaves_total: int
    root_rank: int
    root_n_samples: int
    elapsed_s: float


@dataclass(frozen=True)
class RunSummary:
    """The outcome of `run_topology` (the keys of ``edge-runtime run --json``).

    ``messages`` / ``payload_bytes`` count what the agents published (subspace, model
    and status messages); ``raw_bytes`` is what shipping the readings themselves as
    float64 would take (``samples * n_features * 8``); ``sensor_*`` count the replay.
    ``error_ratio`` compares the root's basis with the offline rank-r SVD of the rows the
    leaves accepted (all replayed rows unless a leaf's ``valid_range`` rejects some; those
    are counted in ``out_of_range``), r being the root's rank (1.0 is optimal).
    ``privacy`` is the root model's differential-privacy guarantee, a `PrivacyParams`
    (the weakest over the leaves, `privacy_of`; in `as_dict` its map ``{"epsilon",
    "delta", "clip_norm", "mechanism", "neighbours"}``, `PrivacyParams.to_json`), or None
    when some leaf publishes without noise.

    Throughput and latency are measured here, on one clock (``time.monotonic``), as the
    model watcher receives the root's models: ``readings_per_s`` is ``samples`` over the
    time from the first reading sent to the first model covering every reading (None
    when none did); a reading's latency is the time from its first send to the first
    model whose ``provenance[leaf]`` exceeds the reading's index in its leaf's share,
    and ``latency_p50_s`` / ``latency_p95_s`` are percentiles over the readings some
    model covered (None when none was). ``resent`` counts the readings the replay sent
    again; ``undelivered`` the snapshots whose echo never came back, over all agents.
    ``peak_rss_bytes`` is the sum of the peak resident set sizes of this process and of
    every worker process (an upper bound of the run's simultaneous peak; the broker is
    not counted). ``workers`` is the number of processes that hosted the agents (1:
    this one). ``algorithm`` is the topology's; for ``"fedpower"`` ``rounds`` is the round
    of the final model (its ``seq``), None for FPCA.

    When a FedPower run stops (`fedpower_settled`): after the replay (every reading
    durable, or its timeout), at the first model that covers every reading and whose basis
    is within ``fedpower_tolerance_rad`` (largest principal angle) of the previous model
    that also covered every reading; or at the first covering model of round
    ``fedpower_rounds`` when that is set; else after ``settle_timeout_s``.
    """

    samples: int
    n_features: int
    leaves_reporting: int
    leaves_total: int
    rank: int
    root_n_samples: int
    error_ratio: float
    messages: int
    payload_bytes: int
    raw_bytes: int
    sensor_messages: int
    sensor_bytes: int
    merges: int
    rejects: int
    wall_s: float
    covered: bool
    privacy: PrivacyParams | None = None
    readings_per_s: float | None = None
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    resent: int = 0
    undelivered: int = 0
    peak_rss_bytes: int = 0
    workers: int = 1
    algorithm: str = "fpca"
    rounds: int | None = None
    out_of_range: int = 0

    def as_dict(self) -> dict[str, object]:
        """The summary as a JSON-ready mapping (``privacy`` as `PrivacyParams.to_json`)."""
        out = asdict(self)
        out["privacy"] = None if self.privacy is None else self.privacy.to_json()
        return out


async def clear_retained(topology: Topology, settings: AgentSettings) -> None:
    """Delete the retained subspace, status and model messages of every node.

    A zero-length retained publish removes the retained message (MQTT 3.1.1 §3.3.1.3),
    so a new run never merges a previous run's snapshots.
    """
    topics = [topology.model_topic(), topology.round_topic()]
    for node in topology.nodes:
        topics += [
            topology.subspace_topic(node),
            topology.status_topic(node),
            topology.status_detail_topic(node),
        ]
    topics += [topology.confirm_topic(leaf) for leaf in topology.leaves()]
    async with aiomqtt.Client(**settings.client_kwargs()) as client:
        for topic in topics:
            await client.publish(topic, b"", qos=1, retain=True)


class Arrivals:
    """When the root's models first covered each reading (``time.monotonic`` seconds).

    A model covers reading ``i`` of ``leaf`` (its index in the leaf's share, i.e. its
    sequence number) when ``provenance[leaf] > i``: a leaf ingests its readings in order.

    Parameters
    ----------
    expected : mapping of leaf id -> int
        Readings each leaf receives.

    Attributes
    ----------
    at : dict of leaf id -> ndarray of shape (expected[leaf],), float64
        First time a model covered each reading; NaN until one does.
    all_covered_at : float or None
        First time a model covered every reading.
    """

    def __init__(self, expected: Mapping[str, int]) -> None:
        self.expected = dict(expected)
        self.at = {leaf: np.full(n, np.nan) for leaf, n in self.expected.items()}
        self._high = dict.fromkeys(self.expected, 0)
        self.all_covered_at: float | None = None

    def update(self, model: SubspaceMessage, now: float) -> None:
        """Record the readings ``model`` covers for the first time, at ``now``."""
        for leaf, n in model.provenance.items():
            high = self._high.get(leaf)
            if high is not None and n > high:
                n = min(n, self.expected[leaf])
                self.at[leaf][high:n] = now
                self._high[leaf] = n
        if self.all_covered_at is None and self._high == self.expected:
            self.all_covered_at = now

    def latencies(self, first_sent: Mapping[str, np.ndarray]) -> np.ndarray:
        """Seconds from each reading's first send to its first coverage, covered ones only.

        Parameters
        ----------
        first_sent : mapping of leaf id -> ndarray of shape (expected[leaf],)
            ``time.monotonic`` of each reading's first send (NaN: never sent).

        Returns
        -------
        ndarray of shape (n_covered,), float64
        """
        parts = [self.at[leaf] - np.asarray(first_sent[leaf]) for leaf in self.at]
        flat = np.concatenate(parts) if parts else np.empty(0)
        return flat[np.isfinite(flat)]


def fedpower_settled(
    topology: Topology, expected: Mapping[str, int]
) -> Callable[[SubspaceMessage | None], bool]:
    """The stop rule of a FedPower run (see `RunSummary`), as a predicate over the models
    in arrival order (a model seen twice gives the same answer)."""
    config = topology.fedpower
    state: dict[str, object] = {"previous": None, "last": None, "answer": False}

    def settled(model: SubspaceMessage | None) -> bool:
        if model is None or not covers(model, expected):
            return False
        if model is state["last"]:
            return bool(state["answer"])
        previous = state["previous"]
        answer = config.rounds > 0 and model.seq >= config.rounds
        if isinstance(previous, SubspaceMessage) and previous.seq < model.seq:
            angle = largest_angle(previous.subspace.basis, model.subspace.basis)
            answer = answer or angle <= config.tolerance_rad
        state.update(previous=model, last=model, answer=answer)
        return answer

    return settled


def _percentile(values: np.ndarray, q: float) -> float | None:
    return None if values.size == 0 else round(float(np.percentile(values, q)), 6)


async def run_topology(
    topology: Topology,
    data: np.ndarray,
    settings: AgentSettings,
    *,
    rate: float | None = None,
    settle_timeout_s: float = 60.0,
    progress: Callable[[Progress], None] | None = None,
    workers: int = 1,
    log_level: str = "warning",
    startup_timeout_s: float = 120.0,
    recorder: RunRecorder | None = None,
) -> RunSummary:
    """Run all agents of ``topology``, replay ``data`` and summarise.

    Each agent has its own MQTT connection to the broker in ``settings``. Returns once
    the root's model covers every leaf's final snapshot, or ``settle_timeout_s``
    seconds after the replay ended (then ``covered`` is False).

    Before the agents start, the retained messages of the tree's topics are cleared
    (`clear_retained`), so a run starts from a clean broker.

    Parameters
    ----------
    topology : Topology
        The aggregation tree; every node gets an agent, and the leaves get the readings.
    data : ndarray of shape (n_samples, n_features), float64
        The readings, split over the leaves by `Topology.split_rows` and replayed by a
        `Replayer` (QoS 1, re-sent until durable).
    settings : AgentSettings
        Broker address, credentials, timeouts (seconds) and bounds of every client of the
        run (agents, replay, model watcher).
    rate : float, optional
        Readings per second of the replay over all leaves; None (the default) sends as
        fast as the broker accepts.
    settle_timeout_s : float, default 60
        Seconds to wait after the replay for the root to cover every reading.
    progress : callable, optional
        Called with a `Progress` as readings go out and models come in.
    workers : int, default 1
        Processes hosting the agents: 1 runs them in this process's event loop; more
        spreads them over that many worker processes (`edge_runtime.workers.assign_nodes`,
        never more processes than nodes).
    log_level : str, default "warning"
        Log level of the worker processes.
    startup_timeout_s : float, default 120
        Seconds for the worker processes to start and connect their agents.
    recorder : edge_runtime.plots.RunRecorder, optional
        Gets every root model as it arrives (``on_model``, seconds since the start), the
        leaves' status documents while the agents run (``listen``) and the final model
        (``finish``), for ``--plot``.

    Returns
    -------
    RunSummary
        Wall time, readings and messages, the final model and its error against the
        centralised PCA of ``data``, whether it covered every leaf, and per-process
        resources.

    Raises
    ------
    ValueError
        If ``workers`` is below 1, or ``data`` or ``rate`` is unfit for a `Replayer`
        (not 2-D, a rate that is not positive, a leaf that reads a local source), or every
        reading is outside the leaves' ``valid_range`` (`screen_data`).
    aiomqtt.MqttError
        If the broker cannot be reached.
    edge_runtime.workers.WorkerError
        If agents do not connect, or a worker process fails to start or dies.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    start = time.monotonic()
    n_samples, n_features = data.shape
    screening = screen_data(topology, data)  # what the leaves keep, before anything starts
    await clear_retained(topology, settings)
    replayer = Replayer(topology, data, settings, rate=rate)
    expected = screening.accepted  # what the root must cover: the readings leaves keep
    arrivals = Arrivals(expected)
    sent = 0
    latest: SubspaceMessage | None = None

    def report() -> None:
        if progress is None:
            return
        progress(
            Progress(
                samples_replayed=sent,
                samples_total=n_samples,
                leaves_reporting=leaves_reporting(latest, expected),
                leaves_total=len(expected),
                root_rank=0 if latest is None else latest.rank,
                root_n_samples=0 if latest is None else latest.n_samples,
                elapsed_s=time.monotonic() - start,
            )
        )

    def on_model(model: SubspaceMessage) -> None:
        nonlocal latest
        now = time.monotonic()
        arrivals.update(model, now)
        latest = model
        if recorder is not None:
            recorder.on_model(model, now - start)
        report()

    def on_sent(rows: int) -> None:
        nonlocal sent
        sent = rows
        report()

    async def replay_and_settle() -> tuple[ReplayStats, SubspaceMessage | None]:
        log.info("agents_connected", elapsed_s=round(time.monotonic() - start, 3))
        async with ModelWatcher(topology, settings, on_model) as watcher:
            stats = await replayer.run(on_sent)
            log.info("replay_done", elapsed_s=round(time.monotonic() - start, 3))
            try:
                done: Callable[[SubspaceMessage | None], bool] = (
                    fedpower_settled(topology, expected)
                    if topology.algorithm == "fedpower"
                    else (lambda m: covers(m, expected))
                )
                model = await watcher.wait_until(done, settle_timeout_s)
            except TimeoutError:
                model = watcher.model
            log.info("settled", elapsed_s=round(time.monotonic() - start, 3))
        return stats, model

    groups = assign_nodes(topology, workers)
    per_loop = max(len(g) for g in groups)
    host_settings = shared_loop_settings(settings, per_loop)
    if host_settings is not settings:
        log.info("keepalive_raised", keepalive_s=host_settings.keepalive_s, agents=per_loop)
    host: AgentHost | WorkerPool
    if len(groups) == 1:
        settings = host_settings  # the watcher shares the agents' loop
        host = AgentHost(topology, groups[0], settings, n_features)
    else:
        host = WorkerPool(
            topology,
            groups,
            host_settings,
            n_features,
            startup_timeout_s=startup_timeout_s,
            log_level=log_level,
        )
    listen = (
        contextlib.nullcontext() if recorder is None else recorder.listen(topology, settings, start)
    )
    async with listen, host:
        replay, model = await host.guard(replay_and_settle())
        reports = await host.close()  # every agent publishes its final snapshot
    if recorder is not None:
        recorder.finish(model, time.monotonic() - start)
    report()
    _log_hosts(reports, time.monotonic() - start)

    agents = [a for r in reports for a in r.agents]
    rss = {os.getpid(): peak_rss_bytes()} | {r.pid: r.peak_rss_bytes for r in reports}
    first_sent = min(
        (float(np.nanmin(t)) for t in replayer.first_sent.values() if np.isfinite(t).any()),
        default=None,
    )
    readings_per_s = None
    if arrivals.all_covered_at is not None and first_sent is not None:
        elapsed = arrivals.all_covered_at - first_sent
        readings_per_s = round(replay.rows / elapsed, 1) if elapsed > 0 else None
    sent_kept = {
        leaf: np.asarray(t)[screening.kept[leaf]] for leaf, t in replayer.first_sent.items()
    }
    latencies = arrivals.latencies(sent_kept)
    ratio = float("nan")
    if model is not None and model.rank > 0:
        ratio = error_ratio(screening.reference, model.subspace.basis)
    return RunSummary(
        samples=replay.rows,
        n_features=n_features,
        leaves_reporting=leaves_reporting(model, expected),
        leaves_total=len(expected),
        rank=0 if model is None else model.rank,
        root_n_samples=0 if model is None else model.n_samples,
        error_ratio=ratio,
        messages=sum(a.messages_published for a in agents),
        payload_bytes=sum(a.bytes_published for a in agents),
        raw_bytes=n_samples * n_features * 8,
        sensor_messages=replay.messages,
        sensor_bytes=replay.payload_bytes,
        merges=sum(a.merges for a in agents),
        rejects=sum(a.rejects for a in agents),
        wall_s=round(time.monotonic() - start, 3),
        covered=covers(model, expected),
        privacy=privacy_of(model),
        readings_per_s=readings_per_s,
        latency_p50_s=_percentile(latencies, 50),
        latency_p95_s=_percentile(latencies, 95),
        resent=replay.resent,
        undelivered=sum(a.undelivered for a in agents),
        peak_rss_bytes=sum(rss.values()),
        workers=host.workers,
        algorithm=topology.algorithm,
        rounds=None if topology.algorithm != "fedpower" or model is None else model.seq,
        out_of_range=screening.n_rejected,
    )


def _log_hosts(reports: list[WorkerReport], elapsed_s: float) -> None:
    log.info("agents_stopped", elapsed_s=round(elapsed_s, 3), main_cpu_s=round(cpu_time_s(), 2))
    for r in reports:
        log.info(
            "agent_host_stopped",
            pid=r.pid,
            agents=len(r.agents),
            cpu_s=round(r.cpu_s, 2),
            peak_rss_mb=round(r.peak_rss_bytes / 2**20, 1),
        )
