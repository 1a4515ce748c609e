"""A deterministic in-memory simulation of a whole federation of agent cores (no I/O).

`Simulation` wires one `LeafCore` per leaf and one `AggregatorCore` per aggregator of a
`Topology` together with a discrete-event loop (a heap of ``(time, seq, event)`` over virtual
seconds) and one seeded `numpy.random.Generator`, and drives every core exactly as its async
shell does (`edge_runtime.agents.leaf.LeafAgent`, `edge_runtime.agents.aggregator
.AggregatorAgent`): on every input, then at the core's ``next_wakeup``. Nothing sleeps and no
broker runs, so thousands of nodes with faults run in seconds, and the same seed gives the same
result bit for bit.

What is modelled (each choice is the MQTT behaviour the shells rely on):

- **Readings** come from a model of `edge_runtime.replay.Replayer`: each leaf gets its rows of
  ``data`` (`Topology.split_rows`) as sequenced batches ``SensorReadings(values,
  "replay:<leaf>", seq)``, ``Feed.batch_size`` rows every ``Feed.interval_s`` from a random
  start; the replay keeps every reading until the leaf confirms it durable and re-sends by the
  replay's rules only (above ``ingested`` after a leaf's new ``(epoch, connection)``, from a
  reported gap, the unconfirmed tail once after a quiet ``probe_s``).
- **The broker** delivers each message after a random delay (log-normal, capped; independent
  delays reorder snapshots, while readings, confirmations and echoes keep MQTT's order of one
  publisher's topic unless `Link.ordered` is off), duplicates some, and loses some. A
  delivery to a connected QoS 1 subscriber is only lost when its connection breaks, so a
  lost delivery makes the receiver reconnect after a back-off: it re-subscribes (an
  aggregator then gets every child's retained snapshot again), counts the connection
  (`NodeCore.connected`) and re-publishes what the shell's ``on_connected`` re-publishes (a
  leaf: its snapshot and a forced confirmation). Snapshots are retained: a restarted
  aggregator rebuilds from its children's retained snapshots.
- **Crashes**: a crashed aggregator loses its state and rebuilds from retained snapshots under
  a new epoch; a crashed leaf restarts from its own retained snapshot (as
  ``LeafAgent._restore_snapshot``, `FPCAEdge.from_subspace`) or, with ``restore =
  "checkpoint"``, from its last checkpoint (`LeafCore.checkpoint_state`); readings sent while
  it is down wait in its persistent session.
- **Stragglers**: a fraction of the leaves gets its readings ``straggler_slowdown`` times
  slower, over links that many times slower.

Every agent publish is counted by kind (leaf and aggregator snapshots, the root's model,
confirmations, status documents, ``online`` presence), so `SimulationResult` reports agent
messages per reading. The run ends once every reading was sent, the broker holds nothing in
flight and every core is settled (nothing unpublished, unconfirmed or awaited: only its status
heartbeat ahead); then the root's model is compared with the offline SVD
(`edge_runtime.fpca.error_ratio`) and its provenance with every leaf's row count.

Example::

    python -m edge_runtime.simulation --leaves 10000 --fanout 100 --root-crash
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from edge_runtime.agents.aggregator_core import AggregatorCore
from edge_runtime.agents.core import publish_policy_for
from edge_runtime.agents.leaf_core import LeafCore
from edge_runtime.agents.policy import ConfirmPolicy, StatusPolicy
from edge_runtime.agents.settings import AgentSettings
from edge_runtime.fpca import FPCAEdge, error_ratio
from edge_runtime.topology import NodeConfig, Topology
from edge_runtime.wire import (
    ConfirmMessage,
    SensorReadings,
    SubspaceMessage,
    decode_subspace,
    encode_subspace,
)

__all__ = [
    "Faults",
    "Feed",
    "Link",
    "Simulation",
    "SimulationConfig",
    "SimulationResult",
    "balanced_topology",
    "low_rank_data",
    "main",
]

MIN_STEP_S = 0.002
"""Least time between two steps of one core, seconds (the shell's ``MIN_SLEEP_S``)."""

WALL_CLOCK_ORIGIN = 1.7e9
"""Unix time of virtual time 0: snapshot timestamps are ``WALL_CLOCK_ORIGIN + now``."""

# event kinds (ints: cheap to compare in the loop)
_FEED, _READ, _SNAP, _ECHO, _CONF, _WAKE, _CRASH, _RESTART, _RECONNECT, _PROBE = range(10)


# ----------------------------------------------------------------------------- models
@dataclass(frozen=True)
class Link:
    """How the broker delivers one kind of message to its subscriber.

    Parameters
    ----------
    latency_s : float
        Median delivery delay, seconds (> 0).
    jitter : float
        Sigma of the log-normal delay (0: constant); messages sent closer together than
        the spread of delays arrive reordered.
    max_factor : float
        Delays are capped at ``max_factor * latency_s`` (>= 1).
    drop : float
        Probability, in [0, 1), that a delivery is lost; the receiver's connection broke,
        and it reconnects after `Faults.reconnect_s`.
    duplicate : float
        Probability, in [0, 1), that a delivery arrives twice (independent delays).
    ordered : bool
        Deliver to each receiver in the order sent (MQTT's order of one publisher's
        messages on one topic); False lets the delays reorder them.
    """

    latency_s: float = 0.02
    jitter: float = 1.0
    max_factor: float = 10.0
    drop: float = 0.0
    duplicate: float = 0.0
    ordered: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.latency_s) and self.latency_s > 0):
            raise ValueError(f"latency_s must be a finite number > 0, got {self.latency_s!r}")
        if not (math.isfinite(self.jitter) and self.jitter >= 0):
            raise ValueError(f"jitter must be a finite number >= 0, got {self.jitter!r}")
        if not self.max_factor >= 1:
            raise ValueError(f"max_factor must be >= 1, got {self.max_factor!r}")
        for name in ("drop", "duplicate"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ValueError(f"{name} must be in [0, 1), got {value!r}")


@dataclass(frozen=True)
class Feed:
    """How the replay feeds the leaves.

    Parameters
    ----------
    batch_size : int
        Readings per message (>= 1).
    interval_s : float
        Seconds between two batches to one leaf (> 0).
    start_spread_s : float
        Each leaf starts at a uniform random time in ``[0, start_spread_s]`` seconds.
    stragglers : float
        Fraction of the leaves, in [0, 1], that are slow.
    straggler_slowdown : float
        A straggler's batches come this many times less often, over links this many times
        slower (>= 1).
    window : int
        Most readings per leaf awaiting confirmation (the replay's ``window``).
    probe_s : float
        Seconds without any confirmation after which the replay re-sends every unconfirmed
        tail once (half its ``confirm_timeout_s``); it gives up after twice as long.
    """

    batch_size: int = 50
    interval_s: float = 0.05
    start_spread_s: float = 5.0
    stragglers: float = 0.1
    straggler_slowdown: float = 10.0
    window: int = 100_000
    probe_s: float = 30.0

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.window < 1:
            raise ValueError(
                f"batch_size and window must be >= 1, got {self.batch_size} and {self.window}"
            )
        for name in ("interval_s", "probe_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")
        if not self.start_spread_s >= 0:
            raise ValueError(f"start_spread_s must be >= 0, got {self.start_spread_s!r}")
        if not 0 <= self.stragglers <= 1:
            raise ValueError(f"stragglers must be in [0, 1], got {self.stragglers!r}")
        if not self.straggler_slowdown >= 1:
            raise ValueError(f"straggler_slowdown must be >= 1, got {self.straggler_slowdown!r}")


@dataclass(frozen=True)
class Faults:
    """Crashes and reconnections.

    Parameters
    ----------
    leaf_crashes : float
        Fraction of the leaves, in [0, 1], that crash once while their readings arrive.
    aggregator_crashes : int
        Aggregators below the root that crash once while readings arrive (at most all).
    root_crash : bool
        Whether the root crashes once too.
    downtime_s : (float, float)
        A crashed node restarts after a uniform random time in this range, seconds.
    reconnect_s : (float, float)
        A node whose delivery was lost reconnects after a uniform random time in this range.
    """

    leaf_crashes: float = 0.0
    aggregator_crashes: int = 0
    root_crash: bool = False
    downtime_s: tuple[float, float] = (0.5, 3.0)
    reconnect_s: tuple[float, float] = (0.2, 1.0)

    def __post_init__(self) -> None:
        if not 0 <= self.leaf_crashes <= 1:
            raise ValueError(f"leaf_crashes must be in [0, 1], got {self.leaf_crashes!r}")
        if self.aggregator_crashes < 0:
            raise ValueError(f"aggregator_crashes must be >= 0, got {self.aggregator_crashes}")
        for name in ("downtime_s", "reconnect_s"):
            low, high = getattr(self, name)
            if not 0 <= low <= high:
                raise ValueError(f"{name} must be (low, high) with 0 <= low <= high")


@dataclass(frozen=True)
class SimulationConfig:
    """Everything a simulation run depends on (with the topology and the data).

    Parameters
    ----------
    seed : int
        Seed of the one random generator (delays, faults, stragglers, start times).
    feed : Feed
    snapshots : Link
        Child snapshots to the parent (and every node's echo of its own snapshot).
    readings : Link
        Sensor batches from the replay to a leaf (ordered by default, as MQTT delivers one
        publisher's messages on a topic).
    confirms : Link
        A leaf's confirmations to the replay (ordered by default; ``drop`` and
        ``duplicate`` are not used: a replay reconnect is not modelled).
    faults : Faults
    settings : AgentSettings
        Status heartbeat, confirmation interval and echo timeout of every core.
    restore : {"snapshot", "checkpoint"}
        What a crashed leaf restarts from: its retained snapshot (a leaf without a state
        folder) or its last checkpoint (written as `LeafCore.checkpoint_due` says).
    persistent_session : bool
        Readings sent to a crashed leaf wait at the broker (True, the agents' default) or
        are lost.
    wire_sample : float
        Fraction, in [0, 1], of the snapshots that pass through `encode_subspace` /
        `decode_subspace` (with ``settings.wire_dtype``) before they are delivered and
        retained; the others are passed as objects.
    max_virtual_s : float
        Give up (``SimulationResult.finished`` False) past this virtual time, seconds.
    max_events : int
        Give up after this many events.
    """

    seed: int = 0
    feed: Feed = field(default_factory=Feed)
    snapshots: Link = field(default_factory=Link)
    readings: Link = field(default_factory=lambda: Link(ordered=True))
    confirms: Link = field(default_factory=lambda: Link(ordered=True))
    faults: Faults = field(default_factory=Faults)
    settings: AgentSettings = field(default_factory=AgentSettings)
    restore: Literal["snapshot", "checkpoint"] = "snapshot"
    persistent_session: bool = True
    wire_sample: float = 0.0
    max_virtual_s: float = 3600.0
    max_events: int = 50_000_000

    def __post_init__(self) -> None:
        if self.restore not in ("snapshot", "checkpoint"):
            raise ValueError(f"restore must be 'snapshot' or 'checkpoint', got {self.restore!r}")
        if not 0 <= self.wire_sample <= 1:
            raise ValueError(f"wire_sample must be in [0, 1], got {self.wire_sample!r}")


@dataclass(frozen=True)
class SimulationResult:
    """What a run did and how close the root got to the offline answer.

    Attributes
    ----------
    finished : bool
        The run settled (False: it hit ``max_virtual_s`` or ``max_events``).
    readings : int
        Rows of data fed to the leaves (each counted once).
    messages : Mapping[str, int]
        Agent publishes by kind: ``leaf_snapshot``, ``aggregator_snapshot``, ``model``,
        ``confirm``, ``status``, ``online``.
    agent_messages, messages_per_reading : int, float
        Their sum, and the sum per reading.
    sensor_messages, resent_readings : int
        Reading batches the replay published (re-sends included), readings re-sent.
    error_ratio : float
        `error_ratio` of the root's model (truncated to the root's rank) on ``data``;
        1.0 is the offline rank-r SVD.
    coverage_exact : bool
        The root's provenance maps every leaf to exactly its row count.
    coverage_missing : int
        Sum over leaves of ``|expected - covered|``.
    root_n_samples : int
    model_basis : ndarray of shape (n_features, rank)
    virtual_s : float
        Virtual time at the end, seconds.
    converged_at_s : float or None
        Virtual time at which the root first published a snapshot of every reading.
    events : int
    faults : Mapping[str, int]
        ``leaf_crashes``, ``aggregator_crashes``, ``reconnects``, ``dropped``,
        ``duplicated`` (deliveries), ``lost_to_crash`` (deliveries to a node that was down).
    counters : Mapping[str, int]
        ``duplicate_snapshots`` (ignored by aggregators), ``duplicate_readings``,
        ``gap_rows`` (readings given up by leaves), ``undelivered`` and ``late``
        (echo check), ``unconfirmed`` (readings never confirmed durable), ``spins`` (steps
        scheduled less than ``MIN_STEP_S`` after the previous), ``merges``,
        ``wire_messages`` and ``wire_bytes`` (the sample through the wire).
    decisions : Mapping[str, int]
        Publish decisions of all cores by reason (and ``suppressed``).
    """

    finished: bool
    leaves: int
    aggregators: int
    readings: int
    messages: Mapping[str, int]
    agent_messages: int
    messages_per_reading: float
    sensor_messages: int
    resent_readings: int
    error_ratio: float
    coverage_exact: bool
    coverage_missing: int
    root_n_samples: int
    model_basis: np.ndarray = field(repr=False)
    virtual_s: float
    converged_at_s: float | None
    events: int
    faults: Mapping[str, int]
    counters: Mapping[str, int]
    decisions: Mapping[str, int]

    def summary(self) -> dict[str, Any]:
        """The result as JSON-ready data (without the model basis)."""
        out = asdict(self)
        del out["model_basis"]
        for key in ("messages", "faults", "counters", "decisions"):
            out[key] = dict(getattr(self, key))
        return out


# ------------------------------------------------------------------------ helpers
def balanced_topology(
    k: int,
    fanout: int,
    *,
    rank: int,
    block_size: int = 50,
    name: str = "simulation",
    **node_options: Any,
) -> Topology:
    """A tree of ``k`` leaves, all at the same depth, under aggregators of <= ``fanout`` children.

    Aggregator levels are added until one node (``root``) remains; children are dealt to
    their parents in order, as evenly as possible. ``k = 10_000, fanout = 100`` gives a root
    over 100 aggregators of 100 leaves; ``fanout = 22`` gives three aggregator levels.

    Parameters
    ----------
    k : int
        Number of leaves (``leaf-00000`` ...), >= 1.
    fanout : int
        Most children per aggregator, >= 2.
    rank, block_size : int
        Every node's ``rank`` and ``block_size``.
    name : str
    **node_options
        Further `NodeConfig` fields for every node (e.g. ``publish_max_interval_s``).

    Returns
    -------
    Topology
        Leaves read ``sensors/<id>``; aggregators are ``agg-<level>-<i>`` (level 1 above the
        leaves).

    Raises
    ------
    ValueError
        If ``k < 1`` or ``fanout < 2`` (and `TopologyError` for invalid node options).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1 leaf, got {k}")
    if fanout < 2:
        raise ValueError(f"fanout must be >= 2, got {fanout}")
    width = len(str(k - 1))
    level_ids = [f"leaf-{i:0{width}d}" for i in range(k)]
    parent_of: dict[str, str] = {}
    upper: list[list[str]] = []
    level = 1
    while True:
        groups = math.ceil(len(level_ids) / fanout)
        ids = ["root"] if groups == 1 else [f"agg-{level}-{i}" for i in range(groups)]
        for group, members in enumerate(np.array_split(np.arange(len(level_ids)), groups)):
            for member in members:
                parent_of[level_ids[member]] = ids[group]
        upper.append(ids)
        if groups == 1:
            break
        level_ids, level = ids, level + 1
    nodes: dict[str, NodeConfig] = {}
    leaves = [f"leaf-{i:0{width}d}" for i in range(k)]
    for ids in reversed(upper):  # root first, then each level down
        for node_id in ids:
            nodes[node_id] = NodeConfig(
                node_id, parent_of.get(node_id), rank, block_size, **node_options
            )
    for leaf in leaves:
        nodes[leaf] = NodeConfig(
            leaf, parent_of[leaf], rank, block_size, sensor_topic=f"sensors/{leaf}", **node_options
        )
    return Topology(name=name, prefix="fpca", nodes=nodes, root="root")


def low_rank_data(
    n_samples: int,
    n_features: int,
    rank: int,
    *,
    noise: float = 0.1,
    seed: int = 0,
) -> np.ndarray:
    """Rank-``rank`` Gaussian signal plus isotropic Gaussian noise, rows as samples.

    ``X = (G * s) @ W^T + noise * E`` with ``W`` a random orthonormal ``(n_features, rank)``
    basis, ``s`` linearly spaced from 5 down to 2, ``G`` and ``E`` standard normal.

    Returns
    -------
    ndarray of shape (n_samples, n_features), float64
    """
    if not 1 <= rank <= n_features:
        raise ValueError(f"rank must be in [1, n_features={n_features}], got {rank}")
    rng = np.random.default_rng(seed)
    w, _ = np.linalg.qr(rng.standard_normal((n_features, rank)))
    scales = np.linspace(5.0, 2.0, rank)
    x = (rng.standard_normal((n_samples, rank)) * scales) @ w.T
    x += noise * rng.standard_normal((n_samples, n_features))
    return x


class _Draws:
    """Uniform and standard normal draws from one generator, in blocks (fast, reproducible)."""

    def __init__(self, rng: np.random.Generator, block: int = 8192) -> None:
        self.rng = rng
        self.block = block
        self._u = rng.random(block)
        self._n = rng.standard_normal(block)
        self._iu = 0
        self._in = 0

    def uniform(self) -> float:
        if self._iu == self.block:
            self._u, self._iu = self.rng.random(self.block), 0
        self._iu += 1
        return float(self._u[self._iu - 1])

    def normal(self) -> float:
        if self._in == self.block:
            self._n, self._in = self.rng.standard_normal(self.block), 0
        self._in += 1
        return float(self._n[self._in - 1])

    def between(self, bounds: tuple[float, float]) -> float:
        low, high = bounds
        return low + (high - low) * self.uniform()


class _Node:
    """One node of the simulation: its current core and incarnation."""

    __slots__ = (
        "children",
        "connections",
        "core",
        "id",
        "incarnation",
        "index",
        "is_leaf",
        "parent",
        "queue",
        "reconnecting",
        "slow",
        "wake_gen",
        "wake_time",
    )

    def __init__(self, node_id: str, index: int, is_leaf: bool) -> None:
        self.id = node_id
        self.index = index
        self.is_leaf = is_leaf
        self.parent: int | None = None
        self.children: list[int] = []
        self.core: Any = None  # LeafCore | AggregatorCore | None (down)
        self.incarnation = 0
        self.wake_gen = 0
        self.wake_time = math.inf
        self.slow = 1.0
        self.queue: list[SensorReadings] = []
        self.reconnecting = False


@dataclass
class _Stream:
    """The replay's view of one leaf (as ``edge_runtime.replay._Stream``)."""

    rows: np.ndarray
    start: float
    interval: float
    sent: int = 0
    ingested: int = -1
    durable: int = -1
    session: tuple[str, str, int] | None = None
    gap: int | None = None
    resend_from: int | None = None


# --------------------------------------------------------------------- simulation
class Simulation:
    """A federation of cores over a simulated broker, in virtual time.

    Parameters
    ----------
    topology : Topology
    data : ndarray of shape (n_samples, n_features), float64
        Dealt to the leaves by `Topology.split_rows`.
    config : SimulationConfig, optional

    Raises
    ------
    ValueError
        If ``data`` is not 2-D with at least one row.

    Notes
    -----
    One instance runs once (`run`). Every core call is the real one, numerics included:
    10,000 leaves of 200 readings (d = 16) take about 30 s on one core, most of it in the
    aggregators' merges.
    """

    def __init__(
        self, topology: Topology, data: np.ndarray, config: SimulationConfig | None = None
    ) -> None:
        data = np.asarray(data, dtype=np.float64)
        if data.ndim != 2 or data.shape[0] == 0:
            raise ValueError(f"data must be 2-D (n_samples, n_features), got shape {data.shape}")
        self.topology = topology
        self.data = data
        self.config = config or SimulationConfig()
        cfg = self.config
        self.draws = _Draws(np.random.default_rng(cfg.seed))
        s = cfg.settings
        self._status_policy = StatusPolicy(s.status_heartbeat_s, s.status_min_interval_s)
        self._confirm_policy = ConfirmPolicy(s.confirm_interval_s)
        self._policies = {
            node_id: publish_policy_for(node, leaf=topology.is_leaf(node_id))
            for node_id, node in topology.nodes.items()
        }
        self.nodes: list[_Node] = []
        index: dict[str, int] = {}
        for node_id in topology.nodes:
            index[node_id] = len(self.nodes)
            self.nodes.append(_Node(node_id, len(self.nodes), topology.is_leaf(node_id)))
        for node in self.nodes:
            parent = topology.nodes[node.id].parent
            node.parent = None if parent is None else index[parent]
            node.children = [index[c] for c in topology.children(node.id)]
        self.root = index[topology.root]
        self.leaves = [n.index for n in self.nodes if n.is_leaf]
        self.expected = {
            leaf: len(rows) for leaf, rows in topology.split_rows(data.shape[0]).items()
        }
        self._heap: list[tuple[float, int, int, int, Any]] = []
        self._seq = 0
        self._pending = 0  # events in the heap other than core wake-ups
        self._unsettled: set[int] | None = None  # while nothing is in flight: busy nodes
        self.now = 0.0
        self.retained: dict[int, SubspaceMessage] = {}
        self.checkpoints: dict[int, dict[str, object]] = {}
        self.messages: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.counters: Counter[str] = Counter()
        self.decisions: Counter[str] = Counter()
        self.sensor_messages = 0
        self.resent = 0
        self.converged_at: float | None = None
        self._last_arrival: dict[tuple[int, int], float] = {}
        link = cfg.snapshots
        self._echo_link = Link(link.latency_s, link.jitter, link.max_factor, ordered=True)
        self._retained_link = Link(link.latency_s, link.jitter, link.max_factor)
        self._last_progress = 0.0
        self._probed = False
        self._probe_scheduled = False
        self._streams: dict[int, _Stream] = {}
        self._feeding = 0  # streams not sent completely yet
        self._ran = False

    # ------------------------------------------------------------------ events
    def _push(self, t: float, kind: int, index: int, payload: Any = None) -> None:
        self._seq += 1
        if kind != _WAKE and kind != _PROBE:
            self._pending += 1
            self._unsettled = None
        heapq.heappush(self._heap, (t, self._seq, kind, index, payload))

    def _delay(self, link: Link, slow: float) -> float:
        base = link.latency_s * slow
        if link.jitter == 0:
            return base
        return min(base * math.exp(link.jitter * self.draws.normal()), base * link.max_factor)

    def _arrival(self, link: Link, slow: float, kind: int, index: int) -> float:
        t = self.now + self._delay(link, slow)
        if link.ordered:  # not before what was sent earlier on this link to this receiver
            t = max(t, self._last_arrival.get((kind, index), 0.0))
            self._last_arrival[(kind, index)] = t
        return t

    def _send(self, link: Link, slow: float, kind: int, index: int, payload: Any) -> None:
        """Deliver through the broker: delay, maybe lose (the receiver reconnects), maybe twice."""
        if link.drop and self.draws.uniform() < link.drop:
            self.faults["dropped"] += 1
            node = self.nodes[index]
            if not node.reconnecting:
                node.reconnecting = True
                t = self.now + self.draws.between(self.config.faults.reconnect_s)
                self._push(t, _RECONNECT, index)
        else:
            self._push(self._arrival(link, slow, kind, index), kind, index, payload)
        if link.duplicate and self.draws.uniform() < link.duplicate:
            self.faults["duplicated"] += 1
            self._push(self._arrival(link, slow, kind, index), kind, index, payload)

    # ------------------------------------------------------------------- cores
    def _new_core(self, node: _Node) -> LeafCore | AggregatorCore:
        config = self.topology.nodes[node.id]
        s = self.config.settings
        core: LeafCore | AggregatorCore
        if node.is_leaf:
            core = LeafCore(
                config,
                policy=self._policies[node.id],
                status_policy=self._status_policy,
                confirm_policy=self._confirm_policy,
                now=self.now,
                n_features=self.data.shape[1],
                checkpointing=self.config.restore == "checkpoint",
                echo_timeout_s=s.echo_timeout_s,
            )
        else:
            core = AggregatorCore(
                config,
                self.topology.children(node.id),
                policy=self._policies[node.id],
                status_policy=self._status_policy,
                now=self.now,
                echo_timeout_s=s.echo_timeout_s,
            )
        core.epoch = f"sim-{node.index:x}-{node.incarnation}"  # reproducible, unique per life
        return core

    def _source(self, node: _Node) -> str:
        return f"replay:{node.id}"

    def _restore_leaf(self, node: _Node, core: LeafCore) -> None:
        """What ``LeafAgent`` does before connecting (without privacy): its checkpoint
        (`LeafCore.restore_checkpoint`, then `LeafCore.continue_after` its retained
        snapshot), else its retained snapshot (`LeafCore.restore_snapshot`)."""
        retained = self.retained.get(node.index)
        if self.config.restore == "checkpoint":
            state = self.checkpoints.get(node.index)
            if state is None:
                return
            core.restore_checkpoint(state, FPCAEdge.from_state(state), self.now)
            if retained is not None:
                core.continue_after(retained)
            return
        if retained is not None and core.restore_snapshot(retained, self.now) is None:
            self.counters["restored_from_snapshot"] += 1

    def _busy(self, node: _Node) -> bool:
        """Anything unpublished, unconfirmed, held, awaited or a status change pending."""
        core = node.core
        if core is None:
            return False
        if node.is_leaf:
            if not math.isinf(core.unpublished_since) or core.sequencer.held_rows:
                return True
            if core.confirm_pending:
                return True
        elif core.unpublished:
            return True
        if core.echo is not None and core.echo.awaiting:
            return True
        return core.status_changed

    def _settled(self) -> bool:
        """Nothing in flight (checked by the caller), no core busy, the replay not probing.

        Only a delivery (an event in flight) can make a settled core busy, so the busy
        nodes are found once when the broker empties and then followed as they step.
        """
        if self._unsettled is None:
            self._unsettled = {n.index for n in self.nodes if self._busy(n)}
        return not self._unsettled and not (self._probe_scheduled and self._unconfirmed())

    def _schedule(self, node: _Node) -> None:
        """Sleep until the core's next decision time (at least ``MIN_STEP_S``), as the shell."""
        core = node.core
        t = core.next_wakeup(self.now)
        if t < self.now + MIN_STEP_S:
            t = self.now + MIN_STEP_S
            self.counters["spins"] += 1
        if self._unsettled is not None:  # nothing in flight: track who is still busy
            if self._busy(node):
                self._unsettled.add(node.index)
            else:
                self._unsettled.discard(node.index)
        if t != node.wake_time and math.isfinite(t):
            node.wake_gen += 1
            node.wake_time = t
            self._push(t, _WAKE, node.index, node.wake_gen)

    # --------------------------------------------------------------- publishing
    def _wire(self, msg: SubspaceMessage) -> SubspaceMessage:
        """A sample of snapshots goes through the wire format (what the broker stores)."""
        if self.config.wire_sample and self.draws.uniform() < self.config.wire_sample:
            payload = encode_subspace(msg, dtype=self.config.settings.wire_dtype)
            self.counters["wire_messages"] += 1
            self.counters["wire_bytes"] += len(payload)
            return decode_subspace(payload)
        return msg

    def _publish_snapshot(self, node: _Node, msg: SubspaceMessage) -> None:
        """``Agent.publish_snapshot``: retained, to the parent, echoed back to the node."""
        core = node.core
        if core.echo is not None:
            core.echo.sent(msg.epoch, msg.seq, self.now)
        self.messages["leaf_snapshot" if node.is_leaf else "aggregator_snapshot"] += 1
        self.retained[node.index] = msg
        if node.parent is not None:
            self._send(self.config.snapshots, node.slow, _SNAP, node.parent, msg)
        else:
            self.messages["model"] += 1
            if self.converged_at is None and msg.n_samples == self.data.shape[0]:
                self.converged_at = self.now
        if core.echo is not None:  # in order (one topic), never lost (that is only reported)
            t = self._arrival(self._echo_link, node.slow, _ECHO, node.index)
            self._push(t, _ECHO, node.index, (node.incarnation, msg.epoch, msg.seq))

    def _publish_confirm(self, node: _Node, *, force: bool = False) -> None:
        core: LeafCore = node.core
        confirm = core.confirm_due(self.now, force=force)
        if confirm is None:
            return
        self.messages["confirm"] += 1
        link = self.config.confirms
        self._push(self._arrival(link, node.slow, _CONF, node.index), _CONF, node.index, confirm)
        core.confirm_sent(self.now)

    def _after_step(self, node: _Node) -> None:
        """The rest of the shell's work loop: echo expiry, status document, sleep."""
        core = node.core
        if core.echo is not None:
            core.echo.expired(self.now)
        if core.status_due(self.now):
            core.status_sent(self.now)
            self.messages["status"] += 1
        self._schedule(node)

    def _step(self, node: _Node) -> None:
        core = node.core
        now = self.now
        if node.is_leaf:  # LeafAgent.step
            for block in core.expire(now):
                core.apply(block, now)
            if core.flush_due(now):
                core.flush()
            reason = core.snapshot_due(now)
            if reason is not None:
                msg = core.make_snapshot(WALL_CLOCK_ORIGIN + now, reason)
                if msg is not None:
                    self._publish_snapshot(node, self._wire(msg))
                    core.snapshot_published(msg, now)
            if core.checkpoint_due(now):
                state, ingested, n_samples, blocks = core.checkpoint_state()
                self.checkpoints[node.index] = state
                core.checkpointed(ingested, n_samples, blocks)
            self._publish_confirm(node)
        else:  # AggregatorAgent.step
            core.check_staleness(now)
            reason = core.snapshot_due(now)
            if reason is not None:
                msg = core.make_snapshot(WALL_CLOCK_ORIGIN + now, reason)
                if msg is not None:
                    self._publish_snapshot(node, self._wire(msg))
                    core.snapshot_published(msg, now)
        self._after_step(node)

    def _connect(self, node: _Node) -> None:
        """A (re)connection: ``online``, subscriptions (retained snapshots), ``on_connected``."""
        core = node.core
        self.messages["online"] += 1
        core.connected()
        if core.snapshot is not None:
            self._publish_snapshot(node, core.snapshot)
        if node.is_leaf:
            # LeafAgent.on_connected: after a reconnection or a restore, confirm at once
            self._publish_confirm(node, force=True)
        else:
            for child in node.children:  # re-subscribing delivers the retained snapshots
                msg = self.retained.get(child)
                if msg is not None:
                    t = self.now + self._delay(self._retained_link, 1.0)
                    self._push(t, _SNAP, node.index, msg)

    # ----------------------------------------------------------------- replay
    def _put(self, leaf: _Node, first: int, end: int) -> None:
        stream = self._streams[leaf.index]
        batch = self.config.feed.batch_size
        for lo in range(first, end, batch):
            hi = min(end, lo + batch)
            readings = SensorReadings(self.data[stream.rows[lo:hi]], self._source(leaf), lo)
            self.sensor_messages += 1
            self._send(self.config.readings, leaf.slow, _READ, leaf.index, readings)

    def _resend_due(self, leaf: _Node, stream: _Stream) -> None:
        if stream.resend_from is None:
            return
        first, stream.resend_from = stream.resend_from, None
        if first < stream.sent:
            self.resent += stream.sent - first
            self._put(leaf, first, stream.sent)

    def _want_resend(self, stream: _Stream, start: int) -> None:
        start = max(start, stream.durable + 1, 0)
        if start < stream.sent:
            stream.resend_from = (
                start if stream.resend_from is None else min(stream.resend_from, start)
            )

    def _on_confirm(self, leaf: _Node, confirm: ConfirmMessage) -> None:
        """``Replayer._on_confirm``: drop durable readings, notice what was lost."""
        stream = self._streams[leaf.index]
        src = self._source(leaf)
        session = (confirm.epoch, confirm.session, confirm.connection)
        ingested = int(confirm.ingested.get(src, -1))
        if stream.session is not None and session != stream.session:
            self._want_resend(stream, ingested + 1)  # the leaf reconnected or restarted
        stream.session = session
        gap = confirm.gaps.get(src)
        if gap is not None and gap != stream.gap:
            stream.gap = gap
            self._want_resend(stream, gap)
        stream.ingested = ingested
        durable = int(confirm.durable.get(src, -1))
        if durable > stream.durable or ingested < stream.durable:
            stream.durable = min(durable, stream.sent - 1) if stream.sent else durable
        self._last_progress = self.now
        self._resend_due(leaf, stream)

    def _feed(self, leaf: _Node) -> None:
        stream = self._streams[leaf.index]
        n = len(stream.rows)
        due = min(n, stream.sent + self.config.feed.batch_size)
        due = min(due, stream.durable + 1 + self.config.feed.window)
        if due > stream.sent:
            first, stream.sent = stream.sent, due
            self._put(leaf, first, due)
        if stream.sent < n:
            self._push(self.now + stream.interval, _FEED, leaf.index)
            return
        self._feeding -= 1
        if not self._feeding:  # everything sent: the replay waits for confirmations
            self._schedule_probe()

    def _unconfirmed(self) -> int:
        return sum(s.sent - 1 - s.durable for s in self._streams.values() if s.sent - 1 > s.durable)

    def _schedule_probe(self) -> None:
        if not self._probe_scheduled:
            self._probe_scheduled = True
            self._push(self._last_progress + self.config.feed.probe_s, _PROBE, -1)

    def _probe(self) -> None:
        """``Replayer._confirm``: once quiet for ``probe_s``, re-send unconfirmed tails once;
        give up after twice as long."""
        self._probe_scheduled = False
        if not self._unconfirmed():
            return
        probe_s = self.config.feed.probe_s
        quiet = self.now - self._last_progress
        if quiet < probe_s:
            self._schedule_probe()
            return
        if self._probed:
            if quiet < 2 * probe_s:
                self._probe_scheduled = True
                self._push(self._last_progress + 2 * probe_s, _PROBE, -1)
            return  # gave up
        self._probed = True
        for index, stream in self._streams.items():
            if stream.sent - 1 > stream.durable:
                self._want_resend(stream, stream.ingested + 1)
                self._resend_due(self.nodes[index], stream)
        self._schedule_probe()

    # ------------------------------------------------------------------- setup
    def _setup(self) -> None:
        cfg = self.config
        feed = cfg.feed
        draws = self.draws
        n_leaves = len(self.leaves)
        order = self.draws.rng.permutation(n_leaves)
        stragglers = {self.leaves[i] for i in order[: round(feed.stragglers * n_leaves)]}
        split = self.topology.split_rows(self.data.shape[0])
        for index in self.leaves:
            node = self.nodes[index]
            node.slow = feed.straggler_slowdown if index in stragglers else 1.0
            start = draws.uniform() * feed.start_spread_s
            self._streams[index] = _Stream(split[node.id], start, feed.interval_s * node.slow)
        for node in self.nodes:  # every agent connects at 0, as in `run`
            node.core = self._new_core(node)
            self._connect(node)
            self._step(node)
        for index, stream in self._streams.items():
            if len(stream.rows):
                self._feeding += 1
                self._push(stream.start, _FEED, index)
        self._schedule_crashes()

    def _schedule_crashes(self) -> None:
        faults = self.config.faults
        feed = self.config.feed
        rng = self.draws.rng
        n_crash = round(faults.leaf_crashes * len(self.leaves))
        for i in rng.permutation(len(self.leaves))[:n_crash]:
            index = self.leaves[i]
            stream = self._streams[index]
            batches = math.ceil(len(stream.rows) / feed.batch_size)
            t = stream.start + self.draws.uniform() * max(batches, 1) * stream.interval
            self._push(t, _CRASH, index)
        end = feed.start_spread_s + feed.interval_s * feed.straggler_slowdown * math.ceil(
            max((len(s.rows) for s in self._streams.values()), default=0) / feed.batch_size
        )
        middle = [n.index for n in self.nodes if not n.is_leaf and n.index != self.root]
        count = min(faults.aggregator_crashes, len(middle))
        chosen = [middle[i] for i in rng.permutation(len(middle))[:count]]
        if faults.root_crash:
            chosen.append(self.root)
        for index in chosen:
            self._push(self.draws.uniform() * end, _CRASH, index)

    # -------------------------------------------------------------------- run
    def run(self) -> SimulationResult:
        """Run until every reading is in and every core is settled.

        Raises
        ------
        RuntimeError
            If called twice.
        """
        if self._ran:
            raise RuntimeError("a Simulation runs once; make a new one")
        self._ran = True
        cfg = self.config
        self._setup()
        heap = self._heap
        nodes = self.nodes
        events = 0
        finished = True
        while heap:
            if self._pending == 0 and self._settled():
                break
            if events >= cfg.max_events or heap[0][0] > cfg.max_virtual_s:
                finished = False
                break
            t, _, kind, index, payload = heapq.heappop(heap)
            events += 1
            self.now = t
            if kind == _WAKE:
                node = nodes[index]
                if payload == node.wake_gen and node.core is not None:
                    node.wake_time = math.inf
                    self._step(node)
                continue
            if kind == _PROBE:
                self._probe()
                continue
            self._pending -= 1
            if kind == _READ:
                self._on_readings(nodes[index], payload)
            elif kind == _SNAP:
                self._on_snapshot(nodes[index], payload)
            elif kind == _FEED:
                self._feed(nodes[index])
            elif kind == _CONF:
                self._on_confirm(nodes[index], payload)
            elif kind == _ECHO:
                self._on_echo(nodes[index], payload)
            elif kind == _CRASH:
                self._crash(nodes[index])
            elif kind == _RESTART:
                self._restart(nodes[index])
            elif kind == _RECONNECT:
                self._reconnect(nodes[index])
        return self._result(finished, events)

    # ---------------------------------------------------------------- handlers
    def _on_readings(self, node: _Node, readings: SensorReadings) -> None:
        core = node.core
        if core is None:
            if self.config.persistent_session:
                node.queue.append(readings)
            else:
                self.faults["lost_to_crash"] += 1
            return
        for block in core.accept(readings, self.now):
            core.apply(block, self.now)
        self._step(node)

    def _on_snapshot(self, node: _Node, msg: SubspaceMessage) -> None:
        core = node.core
        if core is None:
            self.faults["lost_to_crash"] += 1  # retained at the broker: rebuilt on restart
            return
        reason = core.receive(msg.node_id, msg, self.now)
        if reason == "duplicate":
            self.counters["duplicate_snapshots"] += 1
            return  # the shell does not wake the work loop for a duplicate
        if reason is not None:
            self.counters[f"rejected_{reason}"] += 1
            return
        self._step(node)

    def _on_echo(self, node: _Node, payload: tuple[int, str, int]) -> None:
        incarnation, epoch, seq = payload
        core = node.core
        if core is None or incarnation != node.incarnation or core.echo is None:
            return
        core.echo.echoed(epoch, seq, self.now)
        self._schedule(node)

    def _crash(self, node: _Node) -> None:
        if node.core is None:
            return
        self._absorb(node.core)
        self.faults["leaf_crashes" if node.is_leaf else "aggregator_crashes"] += 1
        node.core = None
        node.incarnation += 1
        node.wake_gen += 1
        node.wake_time = math.inf
        node.reconnecting = False
        if self._unsettled is not None:
            self._unsettled.discard(node.index)
        self._push(
            self.now + self.draws.between(self.config.faults.downtime_s), _RESTART, node.index
        )

    def _restart(self, node: _Node) -> None:
        core = self._new_core(node)
        if node.is_leaf:
            self._restore_leaf(node, core)
        node.core = core
        self._connect(node)
        queued, node.queue = node.queue, []
        for readings in queued:  # the persistent session's queue, in order
            for block in core.accept(readings, self.now):
                core.apply(block, self.now)
        self._step(node)

    def _reconnect(self, node: _Node) -> None:
        node.reconnecting = False
        if node.core is None:
            return  # crashed meanwhile: the restart connects
        self.faults["reconnects"] += 1
        self._connect(node)
        self._step(node)

    # ------------------------------------------------------------------ result
    def _absorb(self, core: LeafCore | AggregatorCore) -> None:
        """Add a core's counters to the run's (at a crash and at the end)."""
        self.decisions.update(core.decisions)
        if core.echo is not None:
            self.counters["undelivered"] += core.echo.undelivered
            self.counters["late"] += core.echo.late
        if isinstance(core, LeafCore):
            self.counters["duplicate_readings"] += core.sequencer.duplicates
            self.counters["gap_rows"] += core.sequencer.gap_rows
        else:
            self.counters["merges"] += core.merges

    def _gram_factor(self) -> np.ndarray:
        """``data``, or for many rows its triangular factor ``R`` (``R^T R = X^T X``): the
        same projection errors and offline subspace, so the same `error_ratio`, in a
        fraction of the time (one QR instead of an SVD and two projections of every row)."""
        n, d = self.data.shape
        if n <= 64 * d:
            return self.data
        return np.linalg.qr(self.data, mode="r")

    def _result(self, finished: bool, events: int) -> SimulationResult:
        for node in self.nodes:
            if node.core is not None:
                self._absorb(node.core)
        self.counters["unconfirmed"] = self._unconfirmed()
        root: AggregatorCore | None = self.nodes[self.root].core
        readings = int(self.data.shape[0])
        if root is None or root.snapshot is None:
            basis = np.zeros((self.data.shape[1], 0))
            coverage: dict[str, int] = {}
            ratio = math.inf
            root_n = 0
        else:
            model = root.model()
            basis = np.array(model.subspace.basis)
            coverage = dict(root.snapshot.provenance)
            ratio = error_ratio(self._gram_factor(), basis)
            root_n = root.snapshot.n_samples
        missing = sum(abs(n - coverage.get(leaf, 0)) for leaf, n in self.expected.items())
        missing += sum(n for leaf, n in coverage.items() if leaf not in self.expected)
        agent_messages = sum(self.messages.values())
        return SimulationResult(
            finished=finished,
            leaves=len(self.leaves),
            aggregators=len(self.nodes) - len(self.leaves),
            readings=readings,
            messages=dict(sorted(self.messages.items())),
            agent_messages=agent_messages,
            messages_per_reading=agent_messages / readings,
            sensor_messages=self.sensor_messages,
            resent_readings=self.resent,
            error_ratio=ratio,
            coverage_exact=missing == 0,
            coverage_missing=missing,
            root_n_samples=root_n,
            model_basis=basis,
            virtual_s=self.now,
            converged_at_s=self.converged_at,
            events=events,
            faults=dict(sorted(self.faults.items())),
            counters=dict(sorted(self.counters.items())),
            decisions=dict(sorted(self.decisions.items())),
        )


# ---------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m edge_runtime.simulation``: one run, a JSON summary on stdout.

    Returns the exit status: 0 if the run settled with exact coverage, 1 if not, 2 for a
    bad argument.
    """
    parser = argparse.ArgumentParser(
        prog="python -m edge_runtime.simulation",
        description=(
            "Simulate a federation of agent cores with drops, duplicates, reordering, crashes "
            "and stragglers; print the result as JSON."
        ),
    )
    parser.add_argument("--leaves", type=int, default=10_000)
    parser.add_argument("--fanout", type=int, default=100)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--block-size", type=int, default=50)
    parser.add_argument("--readings-per-leaf", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between batches")
    parser.add_argument("--stragglers", type=float, default=0.1)
    parser.add_argument("--drop", type=float, default=0.01)
    parser.add_argument("--duplicate", type=float, default=0.02)
    parser.add_argument("--leaf-crashes", type=float, default=0.01)
    parser.add_argument("--aggregator-crashes", type=int, default=3)
    parser.add_argument("--root-crash", action="store_true")
    parser.add_argument("--restore", choices=("snapshot", "checkpoint"), default="snapshot")
    parser.add_argument(
        "--unordered-readings",
        action="store_true",
        help="let the delays reorder the readings to a leaf (MQTT keeps them in order)",
    )
    parser.add_argument("--wire-sample", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        topology = balanced_topology(
            args.leaves, args.fanout, rank=args.rank, block_size=args.block_size
        )
        data = low_rank_data(
            args.leaves * args.readings_per_leaf, args.features, args.rank, seed=args.seed
        )
        link = Link(drop=args.drop, duplicate=args.duplicate)
        readings = Link(
            drop=args.drop, duplicate=args.duplicate, ordered=not args.unordered_readings
        )
        config = SimulationConfig(
            seed=args.seed,
            feed=Feed(
                batch_size=args.batch_size, interval_s=args.interval, stragglers=args.stragglers
            ),
            snapshots=link,
            readings=readings,
            faults=Faults(
                leaf_crashes=args.leaf_crashes,
                aggregator_crashes=args.aggregator_crashes,
                root_crash=args.root_crash,
            ),
            restore=args.restore,
            wire_sample=args.wire_sample,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    result = Simulation(topology, data, config).run()
    summary = {"wall_s": round(time.perf_counter() - start, 2), **result.summary()}
    print(json.dumps(summary, indent=2))
    return 0 if result.finished and result.coverage_exact else 1


if __name__ == "__main__":
    sys.exit(main())
