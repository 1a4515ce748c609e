"""A deterministic in-memory simulation of a whole federation of agent cores (no I/O).

`Simulation` wires one `LeafCore` per leaf and one `AggregatorCore` per aggregator of a
`Topology` together with a discrete-event loop (a heap of ``(time, seq, event)`` over virtual
seconds) and one seeded `numpy.random.Generator`, and drives every core exactly as its async
shell does (`edge_runtime.agents.leaf.shell.agent.LeafAgent`,
`edge_runtime.agents.aggregator.shell.agent.AggregatorAgent`): on every input, then at the
core's ``next_wakeup``. Nothing sleeps and no broker runs, so thousands of nodes with faults run in
seconds, and the same seed gives the same result bit for bit.

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
- **Leaves with a state directory** (``restore = "checkpoint"``, the default: the deployment
  as documented runs every agent with ``--state-dir``): each `LeafCore` checkpoints with the
  agent's defaults (``checkpoint_interval_s`` 60 s, by time only) and confirms readings
  durable once a checkpoint covers them, exactly as `LeafAgent` does.
- **The shell's work loop**: a core is stepped on every input and otherwise only at its own
  ``next_wakeup`` (the shell also wakes at least every ``MAX_SLEEP_S``; the simulation does
  not, on purpose): a deadline a core holds work for but does not report is never met
  here, and shows as readings left unconfirmed (``unconfirmed``) and as
  ``checkpoint_pending`` leaves. A leaf's step is its core's tick (`LeafCore.step`, in the
  order `edge_runtime.agents.leaf.core.tick.TICKS` writes once), whose actions are carried
  out here as `LeafAgent.carry_out` carries them out against MQTT and the disk.
- **Crashes**: a crashed aggregator loses its state and rebuilds from retained snapshots under
  a new epoch; a crashed leaf restarts as ``LeafAgent`` does: from its last checkpoint
  (`LeafCore.checkpoint_state`), then continuing its ``seq`` after its own retained
  snapshot; without a checkpoint (none written yet, or no state directory) from that
  retained snapshot (`FPCAEdge.from_subspace`). Readings sent while it is down wait in its
  persistent session.
- **Stragglers**: a fraction of the leaves gets its readings ``straggler_slowdown`` times
  slower, over links that many times slower.

Every agent publish is counted by kind (leaf and aggregator snapshots, the root's model,
confirmations, status documents, ``online`` presence), so `SimulationResult` reports agent
messages per reading. The run ends once every reading was sent, the broker holds nothing in
flight and every core is settled (nothing unpublished, unconfirmed, uncheckpointed or awaited:
only its status heartbeat ahead), or once the replay gave up waiting for confirmations (as
``edge-runtime replay`` exits 1 then); then the root's model is compared with the offline SVD
(`edge_runtime.fpca.error_ratio`) and its provenance with every leaf's row count.

A `Simulation` holds three parts, each owning its state behind a small interface and
none reading another's attributes: an `EventQueue` (`edge_runtime.simulation.events`: the
heap of virtual time, its clock and the broker's links), a `ReplayModel`
(`edge_runtime.simulation.replay_model`: the replay's streams, re-sends and probe) and an
`Outcome` (`edge_runtime.simulation.outcome`: the run's tallies and its result). All three
draw from the run's one `Draws`, in the order the events happen; this module drives the
cores and passes each part what it needs. Every action a core decides is carried out by the
simulation's executor (`edge_runtime.simulation.executor.carry_out`), against this
module's virtual broker and state directories (`Simulation.publish`, `Simulation.write`).

Example::

    python -m edge_runtime.simulation --leaves 10000 --fanout 100 --root-crash
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import numpy as np

from edge_runtime.agents.aggregator.core.aggregator import AggregatorCore
from edge_runtime.agents.common.core.actions import Action, Publish, Wake, WriteCheckpoint
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import ConfirmPolicy, StatusPolicy
from edge_runtime.agents.leaf.core.durability import CheckpointImage
from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.agents.leaf.core.tick import MAX_TICK_CALLS
from edge_runtime.fpca import FPCAEdge
from edge_runtime.simulation.config import Link, SimulationConfig, SimulationResult
from edge_runtime.simulation.events import (
    CONF,
    CRASH,
    ECHO,
    FEED,
    PROBE,
    READ,
    RECONNECT,
    RESTART,
    SNAP,
    WAKE,
    Draws,
    EventQueue,
    SimNode,
)
from edge_runtime.simulation.executor import carry_out
from edge_runtime.simulation.outcome import Outcome
from edge_runtime.simulation.replay_model import ReplayModel
from edge_runtime.topology import Topology
from edge_runtime.wire import SensorReadings, SubspaceMessage, decode_subspace, encode_subspace

__all__ = ["Simulation"]

MIN_STEP_S = 0.002
"""Least time between two steps of one core, seconds (the shell's ``MIN_SLEEP_S``)."""

DEADLINE_SLACK_S = 0.01
"""A checkpoint found due more than this long after its deadline (before any new input)
was not woken for: counted in ``checkpoint_late``."""

WALL_CLOCK_ORIGIN = 1.7e9
"""Unix time of virtual time 0: snapshot timestamps are ``WALL_CLOCK_ORIGIN + now``."""


# --------------------------------------------------------------------- simulation
class Simulation:
    """A federation of cores over a simulated broker, in virtual time.

    Parameters
    ----------
    topology : Topology
        One `LeafCore` per leaf and one `AggregatorCore` per other node, with each
        node's FPCA settings.
    data : ndarray of shape (n_samples, n_features), float64
        Dealt to the leaves by `Topology.split_rows` (converted to float64).
    config : SimulationConfig, optional
        Links, feed, faults, seed and limits; default ``SimulationConfig()``.
    record : bool, default False
        Keep per leaf what reached its core (``trace``: ``(time, "readings", readings)``,
        ``(time, "tick", name)``) and its actions (``recorded``); memory grows with the run.

    Raises
    ------
    ValueError
        If ``data`` is not 2-D with at least one row.

    Notes
    -----
    One instance runs once (`run`). Every core call is the real one, numerics included:
    10,000 leaves of 200 readings (d = 16) take about 30 s on one core, most of it in the
    aggregators' merges. Its parts (an `EventQueue`, a `ReplayModel`, an `Outcome`) are
    made here and called through their interfaces only.
    """

    def __init__(
        self,
        topology: Topology,
        data: np.ndarray,
        config: SimulationConfig | None = None,
        *,
        record: bool = False,
    ) -> None:
        data = np.asarray(data, dtype=np.float64)
        if data.ndim != 2 or data.shape[0] == 0:
            raise ValueError(f"data must be 2-D (n_samples, n_features), got shape {data.shape}")
        self.topology = topology
        self.data = data
        self.config = config or SimulationConfig()
        cfg = self.config
        self.draws = Draws(np.random.default_rng(cfg.seed))
        self.ids = random.Random(cfg.seed)  # the cores' epochs and sessions, replayable
        s = cfg.settings
        self._status_policy = StatusPolicy(s.status_heartbeat_s, s.status_min_interval_s)
        self._confirm_policy = ConfirmPolicy(s.confirm_interval_s)
        self._policies = {
            node_id: publish_policy_for(node, leaf=topology.is_leaf(node_id))
            for node_id, node in topology.nodes.items()
        }
        self.nodes: list[SimNode] = []
        index: dict[str, int] = {}
        for node_id in topology.nodes:
            index[node_id] = len(self.nodes)
            self.nodes.append(SimNode(node_id, len(self.nodes), topology.is_leaf(node_id)))
        for node in self.nodes:
            parent = topology.nodes[node.id].parent
            node.parent = None if parent is None else index[parent]
            node.children = [index[c] for c in topology.children(node.id)]
        self.root = index[topology.root]
        self.leaves = [n.index for n in self.nodes if n.is_leaf]
        self.expected = {
            leaf: len(rows) for leaf, rows in topology.split_rows(data.shape[0]).items()
        }
        self._unsettled: set[int] | None = None  # while nothing is in flight: busy nodes
        self._queue = EventQueue(self.draws, on_in_flight=self._in_flight, on_lost=self._lost)
        self._replay = ReplayModel(data, topology, cfg, self.draws, self._queue)
        self._outcome = Outcome()
        self.retained: dict[int, SubspaceMessage] = {}
        self.state_dirs: dict[int, dict[str, object]] = {}  # node index: {file: state}
        self.converged_at: float | None = None
        self.recorded: dict[str, list[Action]] | None = {} if record else None
        self.trace: dict[str, list[tuple[float, str, object]]] | None = {} if record else None
        link = cfg.snapshots
        self._echo_link = Link(link.latency_s, link.jitter, link.max_factor, ordered=True)
        self._retained_link = Link(link.latency_s, link.jitter, link.max_factor)
        self._ran = False

    @property
    def now(self) -> float:
        """Virtual time, seconds (that of the event being handled)."""
        return self._queue.now

    def _in_flight(self) -> None:
        """Something is in flight again: the busy nodes are found anew once it lands."""
        self._unsettled = None

    def _lost(self, index: int) -> None:
        """A delivery to node ``index`` was lost: its connection broke, it reconnects."""
        node = self.nodes[index]
        if not node.reconnecting:
            node.reconnecting = True
            t = self.now + self.draws.between(self.config.faults.reconnect_s)
            self._queue.push(t, RECONNECT, index)

    # ------------------------------------------------------------------- cores
    def _new_core(self, node: SimNode) -> LeafCore | AggregatorCore:
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
                rng=self.ids,
                n_features=self.data.shape[1],
                checkpointing=self.config.restore == "checkpoint",
                checkpoint_every=self.config.checkpoint_every,
                checkpoint_interval_s=self.config.checkpoint_interval_s,
                echo_timeout_s=s.echo_timeout_s,
                root_id=self.topology.root,
            )
        else:
            core = AggregatorCore(
                config,
                self.topology.children(node.id),
                policy=self._policies[node.id],
                status_policy=self._status_policy,
                now=self.now,
                echo_timeout_s=s.echo_timeout_s,
                rng=self.ids,
            )
        if not node.is_leaf:  # a leaf's epoch comes from the run's seeded ids, as a device's
            # (set after it, a fresh leaf's first connection would look like news to confirm)
            core.epoch = f"sim-{node.index:x}-{node.incarnation}"  # reproducible, unique per life
        return core

    def _restore_leaf(self, node: SimNode, core: LeafCore) -> None:
        """What ``LeafAgent`` does before connecting (`Recovery`): its checkpoint
        (`LeafCore.restore_checkpoint`, then `LeafCore.continue_after` its retained
        snapshot), else -- no state directory, or no checkpoint written yet -- its retained
        snapshot (`LeafCore.restore_snapshot`). Of the privacy
        handling only the re-keying of `FPCAEdge.from_state` is modelled (a ``"gaussian"``
        leaf's open segment is closed and re-keyed from a generator seeded by the run's seed,
        the node and its incarnation, so runs stay reproducible); no privacy-mismatch
        check, no restart count.
        """
        retained = self.retained.get(node.index)
        image = self.state_dirs.get(node.index, {}).get("checkpoint")  # what it last wrote
        if core.checkpointing and isinstance(image, CheckpointImage):
            state = image.state
            keys = np.random.SeedSequence([self.config.seed, node.index, node.incarnation])
            estimator = FPCAEdge.from_state(state, random_state=np.random.default_rng(keys))
            core.restore_checkpoint(state, estimator, self.now)
            self._outcome.count("restored_from_checkpoint")
            if retained is not None:
                core.continue_after(retained)
            return
        if retained is not None and core.restore_snapshot(retained, self.now) is None:
            self._outcome.count("restored_from_snapshot")

    def _busy(self, node: SimNode) -> bool:
        """Anything unpublished, unconfirmed, held, awaited or a status change pending."""
        core = node.core
        if core is None:
            return False
        if node.is_leaf:
            if not math.isinf(core.unpublished_since) or core.sequencer.held_rows:
                return True
            if core.confirm_pending or core.checkpoint_news():
                return True
        elif core.unpublished:
            return True
        if core.echo is not None and core.echo.awaiting:
            return True
        return core.status_changed

    def _settled(self) -> bool:
        """Nothing in flight (checked by the caller), no core busy, the replay not probing;
        or the replay gave up (``edge-runtime replay`` exits then, whatever the cores owe).

        Only a delivery (an event in flight) can make a settled core busy, so the busy
        nodes are found once when the broker empties and then followed as they step.
        """
        if self._replay.gave_up:
            return True
        if self._unsettled is None:
            self._unsettled = {n.index for n in self.nodes if self._busy(n)}
        return not self._unsettled and not self._replay.probing()

    def _schedule(self, node: SimNode) -> None:
        """Sleep until the core's next decision time (at least ``MIN_STEP_S``), as the shell."""
        core = node.core
        t = core.next_wakeup(self.now)
        if t < self.now + MIN_STEP_S:
            t = self.now + MIN_STEP_S
            self._outcome.count("spins")
        if self._unsettled is not None:  # nothing in flight: track who is still busy
            if self._busy(node):
                self._unsettled.add(node.index)
            else:
                self._unsettled.discard(node.index)
        if t != node.wake_time and math.isfinite(t):
            node.wake_gen += 1
            node.wake_time = t
            self._queue.push(t, WAKE, node.index, node.wake_gen)

    # --------------------------------------------------------------- publishing
    def _wire(self, msg: SubspaceMessage) -> SubspaceMessage:
        """A sample of snapshots goes through the wire format (what the broker stores)."""
        if self.config.wire_sample and self.draws.uniform() < self.config.wire_sample:
            payload = encode_subspace(msg, dtype=self.config.settings.wire_dtype)
            self._outcome.count("wire_messages")
            self._outcome.count("wire_bytes", len(payload))
            return decode_subspace(payload)
        return msg

    def _publish_snapshot(self, node: SimNode, msg: SubspaceMessage) -> None:
        """``Agent.publish_snapshot``: retained, to the parent, echoed back to the node."""
        core = node.core
        if core.echo is not None:  # the broker's PUBACK comes at once here
            core.echo.sent(msg.epoch, msg.seq, self.now)
            core.echo.acked(msg.epoch, msg.seq, self.now)
        self._outcome.message("leaf_snapshot" if node.is_leaf else "aggregator_snapshot")
        self.retained[node.index] = msg
        if node.parent is not None:
            self._queue.send(self.config.snapshots, node.slow, SNAP, node.parent, msg)
        else:
            self._outcome.message("model")
            if self.converged_at is None and msg.n_samples == self.data.shape[0]:
                self.converged_at = self.now
        if core.echo is not None:  # in order (one topic), never lost (that is only reported)
            t = self._queue.arrival(self._echo_link, node.slow, ECHO, node.index)
            self._queue.push(t, ECHO, node.index, (node.incarnation, msg.epoch, msg.seq))

    def _after_step(self, node: SimNode) -> None:
        """The rest of the shell's work loop: echo expiry, status document, sleep."""
        core = node.core
        if core.echo is not None:
            core.echo.expired(self.now)
        if core.status_due(self.now):
            core.status_sent(self.now)
            self._outcome.message("status")
        self._schedule(node)

    def _step(self, node: SimNode) -> None:
        if node.is_leaf:  # LeafAgent.step: the core's work tick, carried out
            self._carry_out(node, "work")
        else:  # AggregatorAgent.step: the core's step, carried out
            self._carry_out_aggregator(node)
        self._after_step(node)

    def _carry_out_aggregator(self, node: SimNode) -> None:
        """`AggregatorAgent.step` against the virtual broker: the aggregator core's actions
        at ``now`` (`AggregatorCore.step`), carried out by the simulation's executor
        (`edge_runtime.simulation.executor.carry_out`, against `publish` and `write`) and
        reported back. No secure aggregation runs in the simulation (its cores hold no
        site), though the executor carries out a site's actions as any others."""
        core: AggregatorCore = node.core
        actions = core.step(self.now, WALL_CLOCK_ORIGIN + self.now)
        core.take_events()  # the log lines of a device; nothing to log here
        done = carry_out(self, node, core, actions, self.now)
        if self.recorded is not None:
            self.recorded.setdefault(node.id, []).extend(done)

    def _carry_out(self, node: SimNode, tick: str) -> None:
        """`LeafAgent.carry_out` against the virtual broker: the leaf core's ``tick`` at
        ``now`` (`LeafCore.step`), each call's actions carried out by the simulation's
        executor (`edge_runtime.simulation.executor.carry_out`) and reported back, until the
        tick's `Wake`. A checkpoint write never fails here."""
        core: LeafCore = node.core
        now = self.now
        if self.trace is not None:
            self.trace.setdefault(node.id, []).append((now, "tick", tick))
        for _ in range(MAX_TICK_CALLS):
            actions = core.step(now, timestamp=WALL_CLOCK_ORIGIN + now, tick=tick)
            core.take_released()  # no scoring, no secure aggregation in the simulation
            done = carry_out(self, node, core, actions, now)
            if self.recorded is not None:
                self.recorded.setdefault(node.id, []).extend(done)
            if actions and isinstance(actions[-1], Wake):
                break

    # ------------------------------------------------- the virtual broker and disk
    def publish(self, node: SimNode, action: Publish) -> None:
        """The virtual broker takes ``node``'s ``action`` (`VirtualIO.publish`, for the
        executor): a ``subspace`` snapshot is retained, goes to the parent (the root's is
        also counted as its ``model``, which needs nothing more) and echoes back
        (`_publish_snapshot`; a sample through the wire format, but not a reconnection's
        re-publish); a ``confirm`` goes to the replay after the link's delay; every other
        kind (``status``, ``scores``, a site's ``secagg/...``) is counted by its kind."""
        kind, msg = action.kind, action.message
        if kind == "subspace":
            assert isinstance(msg, SubspaceMessage)
            self._publish_snapshot(node, msg if action.reason == "reconnect" else self._wire(msg))
        elif kind != "model":
            self._outcome.message(kind)
            if kind == "confirm":
                t = self._queue.arrival(self.config.confirms, node.slow, CONF, node.index)
                self._queue.push(t, CONF, node.index, msg)

    def write(self, node: SimNode, action: WriteCheckpoint) -> None:
        """``node``'s state file ``action.what`` is now ``action.state`` (`VirtualIO.write`,
        for the executor), counted in ``checkpoints``: a leaf's checkpoint (a
        `CheckpointImage`) is what it restores from after a crash (`_restore_leaf`)."""
        self.state_dirs.setdefault(node.index, {})[action.what] = action.state
        self._outcome.count("checkpoints")

    def _connect(self, node: SimNode) -> None:
        """A (re)connection: ``online``, subscriptions (retained snapshots), ``on_connected``."""
        core = node.core
        self._outcome.message("online")
        core.connected()
        if core.echo is not None:
            core.echo.connected(self.now)
        if node.is_leaf:  # LeafAgent.on_connected: the core's connect tick
            self._carry_out(node, "connect")
        else:
            if core.snapshot is not None:
                self._publish_snapshot(node, core.snapshot)
            for child in node.children:  # re-subscribing delivers the retained snapshots
                msg = self.retained.get(child)
                if msg is not None:
                    t = self.now + self._queue.delay(self._retained_link, 1.0)
                    self._queue.push(t, SNAP, node.index, msg)

    # ------------------------------------------------------------------- setup
    def _setup(self) -> None:
        slowdowns = self._replay.plan({i: self.nodes[i].id for i in self.leaves})
        for index, slow in slowdowns.items():
            self.nodes[index].slow = slow
        for node in self.nodes:  # every agent connects at 0, as in `run`
            node.core = self._new_core(node)
            self._connect(node)
            self._step(node)
        self._replay.start()
        self._schedule_crashes()

    def _schedule_crashes(self) -> None:
        faults = self.config.faults
        feed = self.config.feed
        rng = self.draws.rng
        n_crash = round(faults.leaf_crashes * len(self.leaves))
        streams = self._replay.streams
        for i in rng.permutation(len(self.leaves))[:n_crash]:
            index = self.leaves[i]
            stream = streams[index]
            batches = math.ceil(len(stream.rows) / feed.batch_size)
            t = stream.start + self.draws.uniform() * max(batches, 1) * stream.interval
            self._queue.push(t, CRASH, index)
        end = feed.start_spread_s + feed.interval_s * feed.straggler_slowdown * math.ceil(
            max((len(s.rows) for s in streams.values()), default=0) / feed.batch_size
        )
        middle = [n.index for n in self.nodes if not n.is_leaf and n.index != self.root]
        count = min(faults.aggregator_crashes, len(middle))
        chosen = [middle[i] for i in rng.permutation(len(middle))[:count]]
        if faults.root_crash:
            chosen.append(self.root)
        for index in chosen:
            self._queue.push(self.draws.uniform() * end, CRASH, index)

    # -------------------------------------------------------------------- run
    def run(self) -> SimulationResult:
        """Run until every reading is in and every core is settled.

        Returns
        -------
        SimulationResult
            ``finished`` False if ``config.max_events`` or ``config.max_virtual_s``
            (seconds of virtual time) was reached first.

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
        queue = self._queue
        replay = self._replay
        nodes = self.nodes
        # what arrives at a node (with its payload), and what happens to it
        deliveries: dict[int, Callable[[SimNode, Any], None]] = {
            READ: self._on_readings,
            SNAP: self._on_snapshot,
            CONF: lambda node, confirm: replay.on_confirm(node.index, confirm),
            ECHO: self._on_echo,
        }
        happenings: dict[int, Callable[[SimNode], None]] = {
            FEED: lambda node: replay.feed(node.index),
            CRASH: self._crash,
            RESTART: self._restart,
            RECONNECT: self._reconnect,
        }
        events = 0
        finished = True
        while queue:
            if queue.pending == 0 and self._settled():
                break
            if events >= cfg.max_events or queue.next_time() > cfg.max_virtual_s:
                finished = False
                break
            kind, index, payload = queue.pop()
            events += 1
            if kind == WAKE:
                node = nodes[index]
                if payload == node.wake_gen and node.core is not None:
                    node.wake_time = math.inf
                    self._audit_deadline(node)
                    self._step(node)
                continue
            if kind == PROBE:
                replay.probe()
                continue
            deliver = deliveries.get(kind)
            if deliver is not None:
                deliver(nodes[index], payload)
            else:
                happenings[kind](nodes[index])
        return self._outcome.result(
            finished=finished,
            events=events,
            virtual_s=self.now,
            converged_at=self.converged_at,
            data=self.data,
            cores=[node.core for node in nodes],
            leaves=len(self.leaves),
            root=nodes[self.root].core,
            expected=self.expected,
            replay=replay,
            broker_faults=queue.faults,
        )

    # ---------------------------------------------------------------- handlers
    def _audit_deadline(self, node: SimNode) -> None:
        """Before a step (and before new input changes the core): a checkpoint due since
        well before now means the core held it without reporting its deadline as a
        wake-up (`LeafCore.next_wakeup`); counted in ``checkpoint_late``."""
        core = node.core
        if not node.is_leaf or not core.checkpoint_due(self.now):
            return
        if self.now > core.checkpoint_deadline() + DEADLINE_SLACK_S:
            self._outcome.count("checkpoint_late")

    def _on_readings(self, node: SimNode, readings: SensorReadings) -> None:
        core = node.core
        if core is None:
            if self.config.persistent_session:
                node.queue.append(readings)
            else:
                self._outcome.fault("lost_to_crash")
            return
        self._audit_deadline(node)
        self._take(node, readings)
        self._step(node)

    def _take(self, node: SimNode, readings: SensorReadings) -> None:
        """``LeafAgent.handle``'s intake: sequenced, screened and applied at ``now``."""
        if self.trace is not None:
            self.trace.setdefault(node.id, []).append((self.now, "readings", readings))
        core: LeafCore = node.core
        core.ingest(core.accept_labelled(readings, self.now), self.now)

    def _on_snapshot(self, node: SimNode, msg: SubspaceMessage) -> None:
        core = node.core
        if core is None:
            self._outcome.fault("lost_to_crash")  # retained at the broker: rebuilt on restart
            return
        reason = core.receive(msg.node_id, msg, self.now)
        if reason == "duplicate":
            self._outcome.count("duplicate_snapshots")
            return  # the shell does not wake the work loop for a duplicate
        if reason is not None:
            self._outcome.count(f"rejected_{reason}")
            return
        self._step(node)

    def _on_echo(self, node: SimNode, payload: tuple[int, str, int]) -> None:
        incarnation, epoch, seq = payload
        core = node.core
        if core is None or incarnation != node.incarnation or core.echo is None:
            return
        core.echo.echoed(epoch, seq, self.now)
        self._schedule(node)

    def _crash(self, node: SimNode) -> None:
        if node.core is None:
            return
        self._outcome.absorb(node.core)
        self._outcome.fault("leaf_crashes" if node.is_leaf else "aggregator_crashes")
        node.core = None
        node.incarnation += 1
        node.wake_gen += 1
        node.wake_time = math.inf
        node.reconnecting = False
        if self._unsettled is not None:
            self._unsettled.discard(node.index)
        self._queue.push(
            self.now + self.draws.between(self.config.faults.downtime_s), RESTART, node.index
        )

    def _restart(self, node: SimNode) -> None:
        core = self._new_core(node)
        if node.is_leaf:
            self._restore_leaf(node, core)
        node.core = core
        self._connect(node)
        queued, node.queue = node.queue, []
        for readings in queued:  # the persistent session's queue, in order
            self._take(node, readings)
        self._step(node)

    def _reconnect(self, node: SimNode) -> None:
        node.reconnecting = False
        if node.core is None:
            return  # crashed meanwhile: the restart connects
        self._outcome.fault("reconnects")
        self._connect(node)
        self._step(node)
