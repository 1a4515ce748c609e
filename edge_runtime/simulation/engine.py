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

import heapq
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from edge_runtime.agents.aggregator_core import AggregatorCore
from edge_runtime.agents.core import publish_policy_for
from edge_runtime.agents.leaf_core import LeafCore
from edge_runtime.agents.policy import ConfirmPolicy, StatusPolicy
from edge_runtime.delivery import LeafDelivery
from edge_runtime.fpca import FPCAEdge, error_ratio
from edge_runtime.simulation.config import Link, SimulationConfig, SimulationResult
from edge_runtime.topology import Topology
from edge_runtime.wire import (
    ConfirmMessage,
    SensorReadings,
    SubspaceMessage,
    decode_subspace,
    encode_subspace,
)

__all__ = ["Simulation"]

MIN_STEP_S = 0.002
"""Least time between two steps of one core, seconds (the shell's ``MIN_SLEEP_S``)."""

WALL_CLOCK_ORIGIN = 1.7e9
"""Unix time of virtual time 0: snapshot timestamps are ``WALL_CLOCK_ORIGIN + now``."""

# event kinds (ints: cheap to compare in the loop)
_FEED, _READ, _SNAP, _ECHO, _CONF, _WAKE, _CRASH, _RESTART, _RECONNECT, _PROBE = range(10)


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


@dataclass(kw_only=True)
class _Stream(LeafDelivery):
    """The replay's view of one leaf (as ``edge_runtime.replay._Stream``)."""

    rows: np.ndarray
    start: float
    interval: float


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
        """What ``LeafAgent`` does before connecting: its checkpoint
        (`LeafCore.restore_checkpoint`, then `LeafCore.continue_after` its retained
        snapshot), else its retained snapshot (`LeafCore.restore_snapshot`). Of the privacy
        handling only the re-keying of `FPCAEdge.from_state` is modelled (a ``"gaussian"``
        leaf's open segment is closed and re-keyed from a generator seeded by the run's seed,
        the node and its incarnation, so runs stay reproducible); no privacy-mismatch
        check, no restart count.
        """
        retained = self.retained.get(node.index)
        if self.config.restore == "checkpoint":
            state = self.checkpoints.get(node.index)
            if state is None:
                return
            keys = np.random.SeedSequence([self.config.seed, node.index, node.incarnation])
            estimator = FPCAEdge.from_state(state, random_state=np.random.default_rng(keys))
            core.restore_checkpoint(state, estimator, self.now)
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
        todo = stream.take_resend()
        if todo is not None:
            first, end = todo
            self.resent += end - first
            self._put(leaf, first, end)

    def _on_confirm(self, leaf: _Node, confirm: ConfirmMessage) -> None:
        """``Replayer._on_confirm``: drop durable readings, notice what was lost."""
        stream = self._streams[leaf.index]
        stream.on_confirm(confirm, self._source(leaf))
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
        return sum(max(0, s.unconfirmed()) for s in self._streams.values())

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
            if stream.unconfirmed() > 0:
                stream.want_resend(stream.ingested + 1)
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
            self._streams[index] = _Stream(
                rows=split[node.id], start=start, interval=feed.interval_s * node.slow
            )
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
