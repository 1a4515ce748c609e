"""What a simulation runs: the network links, the readings feed, the faults, and its result."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from edge_runtime.agents.leaf.core.durability import CHECKPOINT_INTERVAL_S
from edge_runtime.settings import AgentSettings

__all__ = ["Faults", "Feed", "Link", "SimulationConfig", "SimulationResult"]


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
    restore : {"checkpoint", "snapshot"}
        Whether every leaf has a state directory, as deployed (``"checkpoint"``, the
        default: the systemd unit runs ``edge-runtime agent --state-dir``): it writes
        checkpoints as `LeafCore.checkpoint_due` says, confirms readings durable once a
        checkpoint covers them, and a crashed leaf restarts from its last checkpoint (else
        from its retained snapshot); or not (``"snapshot"``: readings are durable once a
        published snapshot covers them, and a crashed leaf restarts from that snapshot).
    checkpoint_every : int, optional
        With a state directory: also checkpoint after this many completed blocks (the
        agent's ``--checkpoint-every``); default None: by time only, as the agent.
    checkpoint_interval_s : float
        With a state directory: most seconds between checkpoints while readings arrive (the
        agent's ``--checkpoint-interval``); default `CHECKPOINT_INTERVAL_S` (60), as the agent.
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
    restore: Literal["snapshot", "checkpoint"] = "checkpoint"
    checkpoint_every: int | None = None
    checkpoint_interval_s: float = CHECKPOINT_INTERVAL_S
    persistent_session: bool = True
    wire_sample: float = 0.0
    max_virtual_s: float = 3600.0
    max_events: int = 50_000_000

    def __post_init__(self) -> None:
        if self.restore not in ("snapshot", "checkpoint"):
            raise ValueError(f"restore must be 'snapshot' or 'checkpoint', got {self.restore!r}")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1 block, got {self.checkpoint_every}")
        if not (math.isfinite(self.checkpoint_interval_s) and self.checkpoint_interval_s > 0):
            raise ValueError(
                f"checkpoint_interval_s must be a finite number > 0, got "
                f"{self.checkpoint_interval_s!r}"
            )
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
        (echo check), ``unconfirmed`` (readings never confirmed durable; the replay
        would exit 1) and ``unconfirmed_leaves``, ``checkpoints`` (written by all leaves),
        ``checkpoint_pending`` (leaves that end with readings no checkpoint covers),
        ``checkpoint_late`` (steps that found a checkpoint due since before their time:
        a deadline the core did not report as a wake-up), ``spins`` (steps
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
