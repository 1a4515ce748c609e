"""The leaf core: readings in -> snapshots, confirmations and status out. No I/O, no clock.

`LeafCore` holds everything a leaf knows (its FPCA-Edge estimator, the per-source
sequencer, the last published snapshot, what is durable) and makes every decision of a leaf:
when to publish a snapshot (`PublishPolicy`), when to mask pending readings of a private leaf,
when to checkpoint, when to confirm readings (`ConfirmPolicy`) and when to publish its status
(`StatusPolicy`). Time comes in as an argument; the async shell (`LeafAgent`) does the I/O.

The concepts are one module each, parts the core holds: `edge_runtime.agents.leaf.core.estimator`
(`LeafEstimator`: the estimator and its privacy), `edge_runtime.agents.leaf.core.intake`
(`LeafIntake`: sequencing, range screening, rejects), `edge_runtime.agents.leaf.core.resume`
(`LeafRestore`: checkpoint and retained-snapshot restore),
`edge_runtime.agents.leaf.core.durability` (`Durability`: checkpoints and confirmations),
`edge_runtime.agents.leaf.core.tick` (`LeafTick`: the order of a tick, `TICKS`),
`edge_runtime.agents.leaf.core.outbox` (`ScoreOutbox`) and the scoring core
(`edge_runtime.agents.leaf.core.scorer`); this module holds the snapshot decisions (when to
release a private leaf's pending rows, when to publish) and the status document.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter, deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from edge_runtime.agents.common.core.actions import Action, Publish, WriteCheckpoint
from edge_runtime.agents.common.core.node import NodeCore
from edge_runtime.agents.common.core.policy import ConfirmPolicy, PublishPolicy, StatusPolicy
from edge_runtime.agents.common.core.reconfigure import LIVE_KEYS
from edge_runtime.agents.leaf.core.durability import (
    CHECKPOINT_INTERVAL_S,
    CheckpointImage,
    Durability,
)
from edge_runtime.agents.leaf.core.estimator import LeafEstimator, snapshot_privacy
from edge_runtime.agents.leaf.core.intake import (
    GAP_WEIGHT,
    Applied,
    Labelled,
    LeafIntake,
    RangeEvent,
)
from edge_runtime.agents.leaf.core.outbox import ScoreOutbox
from edge_runtime.agents.leaf.core.resume import LeafRestore, Resumed
from edge_runtime.agents.leaf.core.scorer import scoring_core
from edge_runtime.agents.leaf.core.sequencing import SourceSequencer
from edge_runtime.agents.leaf.core.tick import TICKS, LeafTick
from edge_runtime.fpca import FPCAEdge, Subspace
from edge_runtime.topology import NodeConfig
from edge_runtime.wire import ConfirmMessage, PrivacyParams, SensorReadings, SubspaceMessage

__all__ = [
    "GAP_WEIGHT",
    "IDLE_GAPS",
    "TICKS",
    "LeafCore",
    "RangeEvent",
    "snapshot_privacy",
]


IDLE_GAPS = 2.0
"""A leaf is idle after this many usual gaps without readings (and ``idle_s`` at least)."""


class LeafCore(NodeCore):
    """Synchronous state and decisions of one leaf.

    Parameters
    ----------
    config : NodeConfig
        The leaf's settings (rank, block size, privacy, ...).
    policy : PublishPolicy
    status_policy : StatusPolicy
    confirm_policy : ConfirmPolicy
    now : float
        Current time, seconds.
    n_features : int, optional
        Width of a reading; else fixed by the first valid reading.
    checkpointing : bool, default False
        Whether the shell writes checkpoints; then readings are durable once checkpointed,
        else once covered by a published snapshot.
    checkpoint_every : int, optional
        Also checkpoint after this many completed blocks; default None: by time only.
    checkpoint_interval_s : float, default `CHECKPOINT_INTERVAL_S` (120)
        Most seconds between checkpoints while readings arrive; a checkpoint also follows a
        pause of the stream and exit (`Durability`, attribute ``durability``).
    echo_timeout_s : float, default 5
        Least bound of the echo check, seconds.
    gap_timeout_s : float, default 10
        Seconds a sequence gap may stay open (`SourceSequencer`).
    rng : random.Random
        Source of the leaf's ids (epoch, session; `NodeCore.new_id`).
    local_only : bool, default False
        The estimate never leaves the device: no snapshot is ever published (a
        secure-aggregation leaf, whose readings its site's slots release). The leaf's
        release strategy decides it (``not publishes_snapshots`` of
        `edge_runtime.agents.leaf.shell.release.ReleaseShell`).
    root_id : str, optional
        The topology's root, whose models a scoring leaf (``config.score`` not ``"off"``)
        with ``score_detector = "static"`` accepts (`ScoringCore`, attribute ``scoring``);
        without it such a leaf does not score. The ``"faults"`` detector needs no model
        (`FaultScoringCore`).

    Attributes
    ----------
    clipped : int
        Readings clipped into ``config.valid_range`` (``out_of_range = "clip"``).
    range_events : deque of RangeEvent
        Blocks with readings outside ``config.valid_range``, for the shell to log
        (`take_range_events`).

    Notes
    -----
    Snapshot contents: everything ingested, pending rows folded in (all ``rank + oversample``
    tracked directions, so merges upstream keep their accuracy); a private leaf publishes
    masked blocks only and masks its pending rows when idle (`FPCAEdge.flush`).

    Declared sensor range: see `LeafIntake.screen`. A reading it drops stays ingested in its
    source's sequence and becomes durable with the next snapshot or checkpoint; when nothing
    else changed since the last one, the leaf publishes its snapshot again (or checkpoints)
    once idle, so a stream that ends on rejected readings is confirmed too.
    """

    def __init__(
        self,
        config: NodeConfig,
        *,
        policy: PublishPolicy,
        status_policy: StatusPolicy,
        confirm_policy: ConfirmPolicy,
        now: float,
        n_features: int | None = None,
        checkpointing: bool = False,
        checkpoint_every: int | None = None,
        checkpoint_interval_s: float = CHECKPOINT_INTERVAL_S,
        echo_timeout_s: float = 5.0,
        gap_timeout_s: float = 10.0,
        root_id: str | None = None,
        local_only: bool = False,
        rng: random.Random,
    ) -> None:
        super().__init__(config.id, policy, status_policy, echo_timeout_s, now, rng=rng)
        if n_features is not None and n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        self.config = config
        self.n_features = n_features
        self.epoch = self.new_id()
        self.seq = 0
        self.estimator: FPCAEdge | None = None
        self.intake = LeafIntake(gap_timeout_s=gap_timeout_s)  # sequencing, range screening
        self.snapshot: SubspaceMessage | None = None
        self.restore = LeafRestore(self.node_id, self.new_id)  # checkpoint, retained snapshot
        # makes and checks the estimator, holds the guarantee and the noise source
        self.estimators = LeafEstimator(config.privacy, config.noise_seed)
        self._candidate_version: tuple[object, int, int] = (None, -2, -2)
        self._candidate_moved = False
        self._decided_at = -math.inf  # when `snapshot_due` last let a publish through
        self._tracked_cache: tuple[tuple[object, ...], Subspace] | None = None
        self._input_version = 0  # bumped whenever the estimator changes
        self._captured_version = 0  # at the last `checkpoint_state`
        self.durability = Durability(
            checkpointing=checkpointing,
            checkpoint_every=checkpoint_every,
            checkpoint_interval_s=checkpoint_interval_s,
            confirm_policy=confirm_policy,
            now=now,
            session=self.new_id(),  # this process: a restart shows as a new session
        )
        self.local_only = local_only
        self.score_outbox = ScoreOutbox()
        self.withheld = 0  # snapshots not made: the estimator's privacy is not the configured
        self.ticker = LeafTick()  # where this leaf is in its tick (`step`)
        self.scoring = scoring_core(config, root_id, now)  # None unless it scores
        if n_features is not None:
            self.estimator = self.new_estimator(n_features)
        self.settle_status()
        # a fresh leaf has nothing to confirm: its first confirmation follows a change
        self.durability.nothing_to_confirm(self._confirm_key())

    is_leaf = True

    # --------------------------------------------------------------- estimator
    @property
    def privacy(self) -> PrivacyParams | None:
        """The configured guarantee (`NodeConfig.privacy`; `LeafEstimator`)."""
        return self.estimators.privacy

    @property
    def noise(self) -> int | np.random.Generator | None:
        """What a new private estimator draws its noise from (a seed, a generator, or None:
        the operating system's entropy; `LeafEstimator`)."""
        return self.estimators.noise

    @noise.setter
    def noise(self, noise: int | np.random.Generator | None) -> None:
        self.estimators.noise = noise

    @property
    def noise_restarts(self) -> int:
        """Restores counted, for the noise seed of a restored estimator (`LeafEstimator`)."""
        return self.estimators.noise_restarts

    @noise_restarts.setter
    def noise_restarts(self, restarts: int) -> None:
        self.estimators.noise_restarts = restarts

    @property
    def horizon(self) -> int:
        """The continual-release horizon this leaf's estimator runs with (1 unless the
        mechanism is "gaussian", `NodeConfig.release_horizon`)."""
        return self.estimators.horizon(self.config)

    def estimator_options(self, n_features: int) -> dict[str, Any]:
        """FPCAEdge settings of this leaf for readings of ``n_features`` values
        (`LeafEstimator.options`; ValueError for a private "gaussian" leaf's default block
        too large)."""
        return self.estimators.options(self.config, n_features)

    @staticmethod
    def estimator_from_state(state: Mapping[str, Any], random_state: Any = None) -> FPCAEdge:
        """The estimator of a checkpoint's ``state`` (`FPCAEdge.from_state`)."""
        return LeafEstimator.from_state(state, random_state=random_state)

    def new_estimator(self, n_features: int) -> FPCAEdge:
        """A fresh estimator; raises ValueError for settings the mechanism rejects (eq. (8)'s
        delta bound, a default block too large), here rather than at the first block."""
        return self.estimators.new(self.config, n_features)

    def privacy_mismatch(self, est: FPCAEdge) -> str | None:
        """Why a restored estimator ``est`` may not continue under this leaf's configuration,
        or None (`LeafEstimator.mismatch`)."""
        return self.estimators.mismatch(self.config, est)

    @property
    def n_samples(self) -> int:
        """Samples ingested so far."""
        return 0 if self.estimator is None else self.estimator.n_samples_seen_

    def cells(self) -> int:
        """Matrix cells a block update touches (the shell offloads large ones to a thread)."""
        est = self.estimator
        return 0 if est is None else est.n_features_ * (est.rank_ + est.block_size)

    def snapshot_n(self) -> int:
        """Samples a snapshot taken now would summarise (a private leaf's pending rows are
        not in it until they are flushed)."""
        est = self.estimator
        if est is None:
            return 0
        if est.privacy is None:
            return est.n_samples_seen_
        return est.n_samples_seen_ - est.n_pending_

    # ------------------------------------------------------------------ intake
    @property
    def sequencer(self) -> SourceSequencer:
        """Per-source sequence numbers: what was ingested, what is held behind a gap
        (`LeafIntake`)."""
        return self.intake.sequencer

    @property
    def rejected_by_source(self) -> Counter[str]:
        """Rejected readings (or messages) by the source they came from (`LeafIntake`)."""
        return self.intake.rejected_by_source

    @property
    def clipped(self) -> int:
        """Readings clipped into ``config.valid_range`` (``out_of_range = "clip"``)."""
        return self.intake.clipped

    @property
    def range_events(self) -> deque[RangeEvent]:
        """Blocks with readings outside ``config.valid_range``, for the shell to log
        (`take_range_events`; `LeafIntake`)."""
        return self.intake.range_events

    @property
    def ingested(self) -> dict[str, int]:
        """Last sequence number applied per source."""
        return self.intake.ingested

    def take_range_events(self) -> list[RangeEvent]:
        """The range events since the last call, oldest first (the shell logs them)."""
        return self.intake.take_range_events()

    def count_reject(self, reason: str, source: str, n: int = 1) -> None:
        """Count ``n`` rejected readings (or one message) by ``reason`` (``rejects``) and by
        the ``source`` they came from (``rejected_by_source``: a local source's id, the
        ``src`` of an MQTT payload, else the sensor topic)."""
        self.rejects[reason] += n
        self.intake.count_reject(source, n)

    def accept(self, readings: SensorReadings, now: float) -> list[np.ndarray]:
        """Sequence and `screen` ``readings``: the row blocks ready to apply, in order
        (`apply` them)."""
        return [block for block, _, _ in self.accept_labelled(readings, now)]

    def accept_labelled(
        self, readings: SensorReadings, now: float, origin: str | None = None
    ) -> list[Labelled]:
        """`accept`, each block with its source and the sequence number of its first row
        (the blocks of one offer are in sequence order and end at the source's last applied
        sequence, `SourceSequencer`; a reading `screen` drops splits a block);
        ``(block, None, None)`` for readings without one. ``origin``: what a rejected
        reading without a source is counted under (the message's topic; default the
        sensor topic)."""
        labelled = self.intake.accept_labelled(readings, now)
        if not labelled:
            return []
        source = readings.source
        return self.screen(labelled, source or origin or self.config.sensor_topic or "?", now)

    def expire_labelled(self, now: float) -> list[Labelled]:
        """`expire`, labelled as `accept_labelled` when the released rows are of one
        source (the usual case), else ``(block, None, None)``."""
        labelled, source = self.intake.expire_labelled(now)
        if not labelled:
            return []
        return self.screen(labelled, source or self.config.sensor_topic or "?", now)

    def expire(self, now: float) -> list[np.ndarray]:
        """Row blocks released because a gap timed out (counted in ``gap_rows``),
        `screen`-ed."""
        return [block for block, _, _ in self.expire_labelled(now)]

    def screen(self, labelled: list[Labelled], source: str, now: float) -> list[Labelled]:
        """Check released blocks against ``config.valid_range`` (`LeafIntake.screen`);
        readings dropped are counted in ``rejects`` under their reason, are input at ``now``
        and are due to become durable (a snapshot or checkpoint will cover them)."""
        kept, drops = self.intake.screen(labelled, source, self.config)
        for reason, _, n in drops:
            self.rejects[reason] += n
            self._note_input(now)
            if math.isinf(self.unpublished_since):
                self.unpublished_since = now
        return kept

    def _note_input(self, now: float) -> None:
        """Input arrived at ``now``: the usual gap between readings and ``last_input``."""
        self.intake.note_gap(now - self.last_input, self.policy.max_interval_s)
        self.last_input = now

    def apply(self, values: np.ndarray, now: float) -> None:
        """Feed rows ``(n, n_features)`` to the estimator (numerics; thread-safe under the
        shell's lock). The first valid rows fix ``n_features``.

        Raises
        ------
        ValueError
            From the estimator's input checks (the shell counts it as a rejection).
        """
        if self.estimator is None:  # the first rows fix the width
            self.estimator = self.new_estimator(values.shape[1])
            self.n_features = values.shape[1]
        self.estimator.partial_fit(values)
        self._note_input(now)
        self._input_version += 1
        if math.isinf(self.unpublished_since):
            self.unpublished_since = now
        if math.isinf(self.last_publish):
            self.last_publish = now  # the rate limit counts from the first reading

    def ingest(self, labelled: list[Labelled], now: float) -> list[Applied]:
        """`apply` each block of ``labelled`` at ``now`` (seconds), in order; each comes back
        with the estimator's refusal (a ValueError, e.g. the first reading's width refused
        by eq. (8)) or None. Never raises for a refused block."""
        out: list[Applied] = []
        for block, src, seq in labelled:
            try:
                self.apply(block, now)
            except ValueError as exc:
                out.append((block, src, seq, exc))
            else:
                out.append((block, src, seq, None))
        return out

    # ----------------------------------------------------------------- restore
    @property
    def restored_from(self) -> str | None:
        """``"checkpoint"``, ``"retained snapshot"`` or None: a fresh start (`LeafRestore`)."""
        return self.restore.restored_from

    def restore_checkpoint(
        self, state: Mapping[str, Any], estimator: FPCAEdge | None, now: float
    ) -> None:
        """Continue from a checkpoint at ``now`` (seconds): ``state`` as written from
        `checkpoint_state`, ``estimator`` rebuilt from it (`FPCAEdge.from_state`, by the
        caller, who owns the noise generator; `LeafRestore.from_checkpoint`). Readings the
        checkpoint covers are durable; whatever no snapshot published yet is published when
        the policy allows.

        Raises
        ------
        KeyError, ValueError, TypeError
            If ``state`` lacks the leaf's keys or holds values of the wrong type.
        """
        self._resume(self.restore.from_checkpoint(state, estimator))
        if estimator is not None and estimator.n_samples_seen_:
            self.unpublished_since = now

    def continue_after(self, retained: SubspaceMessage) -> None:
        """After a checkpoint restore: the epoch and ``seq`` continue after this lineage's
        ``retained`` snapshot (`LeafRestore.continued`)."""
        self.epoch, self.seq = self.restore.continued(
            self.epoch, self.seq, self.durability.checkpointed_n, retained
        )

    def restore_snapshot(self, msg: SubspaceMessage, now: float) -> str | None:
        """Continue from this leaf's own retained snapshot ``msg`` (no checkpoint;
        `LeafRestore.from_snapshot`). Returns why it was not used (``"empty"``,
        ``"privacy_mismatch"``, ``"unusable: ..."``), or None once restored."""
        resumed = self.restore.from_snapshot(msg, self.privacy, self.estimator_options)
        if isinstance(resumed, str):
            return resumed
        self._resume(resumed)
        return None

    def _resume_from(self, msg: SubspaceMessage, estimator: Any) -> None:
        """Continue with ``estimator``, rebuilt from this leaf's own retained snapshot
        ``msg`` (`LeafRestore.resumed`; a FedPower leaf rebuilds its own estimator)."""
        self._resume(self.restore.resumed(msg, estimator))

    def _resume(self, resumed: Resumed) -> None:
        """Take over the state of an earlier incarnation: its estimator, lineage, what
        each source's sequence continues after, and what is durable."""
        self.estimator = resumed.estimator
        if resumed.n_features is not None:
            self.n_features = resumed.n_features
        self.epoch, self.seq = resumed.epoch, resumed.seq
        if resumed.snapshot is not None:
            self.snapshot = resumed.snapshot
        self.sequencer.restore(resumed.ingested)
        self.durability.restored(
            resumed.ingested, blocks=resumed.blocks, n_samples=resumed.n_samples
        )

    def _adopt(self, new: NodeConfig) -> None:
        """Keep an applied configuration's live keys (the only ones it may change,
        `classify_config`); its sensor range applies to the next block. The rest stays the
        core's own: a secure-aggregation leaf's core runs without privacy (its estimate never
        leaves the device), which ``new``'s privacy keys would undo."""
        self.config = dataclasses.replace(self.config, **{k: getattr(new, k) for k in LIVE_KEYS})
        self.intake.forget_bounds()

    @property
    def idle_s(self) -> float:
        """The policy's ``idle_s``, stretched to twice the usual gap between this leaf's
        readings (an exponential average), so a stream that arrives in bursts is not
        "idle" between two bursts: the trailing publish waits for a real pause."""
        return max(self.policy.idle_s, IDLE_GAPS * self.intake.gap_s)

    @property
    def published_n(self) -> int:
        return 0 if self.snapshot is None else self.snapshot.n_samples

    # ----------------------------------------------------------------- snapshot
    def _candidate(self) -> Subspace | None:
        est = self.estimator
        if est is None or self.snapshot_n() == 0:
            return None
        return self._tracked()

    def _tracked(self) -> Subspace:
        """The estimator's `tracked_subspace`, computed once per input version: the
        deadband's candidate is what `make_snapshot` publishes right after it."""
        est = self.estimator
        assert est is not None
        key = (est, self._input_version, est.n_samples_seen_, est.n_pending_)
        cached = self._tracked_cache
        if cached is None or cached[0] != key:
            cached = self._tracked_cache = (key, est.tracked_subspace)
        return cached[1]

    def _deadband_key(self) -> tuple[object, int, int]:
        """What the deadband's verdict depends on: the estimator and its completed blocks
        (full or flushed). Rows of a partial block do not re-open the question -- the
        candidate is evaluated once per block, not per reading (one SVD per message
        was most of a leaf's CPU) -- and reach the parent with the next block, the
        idle publish or ``max_interval_s``, whichever comes first."""
        est = self.estimator
        if est is None:
            return (None, -1, -1)
        return (est, est.n_blocks_, est.n_samples_seen_ - est.n_pending_)

    def idle(self, now: float) -> bool:
        """No reading for the policy's ``idle_s`` while something is unpublished."""
        return not math.isinf(self.unpublished_since) and now >= self.last_input + self.idle_s

    def flush_due(self, now: float) -> bool:
        """A private leaf with pending rows is idle: mask them as one block (`flush`)."""
        est = self.estimator
        return (
            est is not None
            and est.privacy is not None
            and est.n_pending_ > 0
            and self.idle(now)
            and self.policy.may_publish(now, self.last_publish)
        )

    def flush(self) -> int:
        """Mask the pending rows of a private leaf (numerics); returns how many."""
        est = self.estimator
        if est is None or est.privacy is None or est.n_pending_ == 0:
            return 0
        pending = est.n_pending_
        est.flush()
        self._input_version += 1  # masked rows: news for the snapshot and the checkpoint
        return pending

    def snapshot_due(self, now: float) -> str | None:
        """The reason to publish a snapshot now (`PublishPolicy.decide`), or None.

        Computes the candidate (numerics) only when the rate limit allows a publish and
        there was new input since the last evaluation.
        """
        if math.isinf(self.unpublished_since):
            return None
        held = self._held_back()
        if held is not None:
            if held == "nothing":
                self.unpublished_since = math.inf  # nothing left to publish
            return None
        if not self.policy.may_publish(now, self.last_publish):
            return None
        self._decided_at = now
        if self.snapshot is None:
            self._candidate_moved = False
        elif self._candidate_version != self._deadband_key():
            candidate = self._candidate()
            previous = None if self.snapshot is None else self.snapshot.subspace
            self._candidate_moved = candidate is not None and self.policy.moved(
                previous, candidate, self.config.rank
            )
            self._candidate_version = self._deadband_key()
        return self._decide(now, moved=self._candidate_moved, first=self._first_due())

    def _held_back(self) -> str | None:
        """Why no snapshot may go out now whatever the time, or None (the policy decides).

        With nothing new since the last snapshot but readings dropped (`screen`) or refused
        since the state a restart resumes from, the snapshot is published again so they
        become durable (None) -- unless a checkpoint covers them, or a private leaf's
        pending rows must wait for their masked block. Otherwise: ``"nothing"`` (nothing is
        left to publish), ``"flush"`` (a private leaf's pending rows wait for `flush`) or
        ``"covered"`` (a checkpoint, or new input, is what acts next).
        """
        if self.snapshot_n() != self.published_n:
            return None
        est = self.estimator
        pending = est is not None and est.n_pending_ > 0
        private = est is not None and est.privacy is not None
        dropped = self._drops_uncovered()
        if dropped and not self.checkpointing and not (pending and private):
            return None  # republish
        if not pending and not dropped:
            return "nothing"
        return "flush" if pending and private else "covered"

    def _publish_next(self, now: float) -> float:
        """As `NodeCore._publish_next`, but never a deadline at which `snapshot_due` would
        decline without acting: a snapshot held back waits for the flush of a private
        leaf's pending rows (`flush_due`) or, covered by a checkpoint, for nothing (the
        checkpoint's own deadline, or new input, wakes the leaf). Else a leaf whose
        readings are all rejected would be told "the maximum interval is due" at every
        pass until its next checkpoint, and spin."""
        if math.isinf(self.unpublished_since):
            return math.inf
        held = self._held_back()
        if held == "covered":
            return math.inf
        if held == "flush":
            earliest = self.last_publish + self.policy.min_interval_s
            return max(earliest, self.last_input + self.idle_s, now)
        return super()._publish_next(now)

    def input_decisive(self) -> bool:
        """Whether readings just taken may change a decision at once in a way `next_wakeup`
        does not foresee: a block completed since the deadband's last verdict (its candidate
        is evaluated in `snapshot_due`, once per block), or readings are held behind a
        sequence gap (released by `expire_labelled`). Every other effect of a reading on the
        decisions (the idle, maximum-interval, checkpoint, confirmation and status deadlines)
        is in `next_wakeup`. Before the first snapshot there is no verdict to change: the
        readings are decisive once a full block makes it due (`_first_due`), not before (a
        fresh leaf whose readings are all rejected would otherwise be woken by each)."""
        if self.sequencer.held_rows > 0:
            return True
        if self.snapshot is None:
            return self._first_due()
        return self._candidate_version != self._deadband_key()

    def _first_due(self) -> bool:
        """Nothing published yet and a full block seen: the first snapshot waits for one
        (or for the idle / maximum interval), since a few readings say little about the
        subspace and cost a message."""
        est = self.estimator
        return self.snapshot is None and est is not None and est.n_blocks_ >= 1

    def make_snapshot(self, timestamp: float, reason: str) -> SubspaceMessage | None:
        """The snapshot to publish now (numerics), with the next ``seq``; None if the
        estimator's privacy differs from the configuration (never published then).

        ``timestamp``: wall-clock seconds since the epoch, for the message.
        """
        est = self.estimator
        if est is None:
            return None
        privacy = snapshot_privacy(est)
        if privacy != self.privacy:  # unreachable by construction; never publish then
            self.withheld += 1
            return None
        subspace = self._tracked()
        self.seq += 1
        self.decisions[reason] += 1
        self._snapshot_ingested = self.ingested
        self._snapshot_pending = est.n_pending_
        return SubspaceMessage(
            node_id=self.node_id,
            epoch=self.epoch,
            seq=self.seq,
            subspace=subspace,
            timestamp=timestamp,
            privacy=privacy,
            provenance={self.node_id: subspace.n_samples},
            sources=self._snapshot_ingested,
        )

    def snapshot_published(self, msg: SubspaceMessage, now: float) -> None:
        """``msg`` (from `make_snapshot`) was handed to the broker at ``now``."""
        self.snapshot = msg
        self.last_publish = now
        self._candidate_version = self._deadband_key()
        self._candidate_moved = False
        est = self.estimator
        pending = 0 if est is None or est.privacy is None else est.n_pending_
        if self.snapshot_n() == msg.n_samples and pending == 0:
            self.unpublished_since = math.inf  # (a private leaf's pending rows wait for a flush)
        else:
            # Readings that arrived while it was made and handed over are unpublished since
            # then, not since the change this snapshot published: else, once the stream had
            # run for ``max_interval_s``, every rate-limit slot published ("max_interval").
            self.unpublished_since = max(self.unpublished_since, self._decided_at)
        # Without a checkpoint the snapshot is what a restart restores; a private snapshot
        # covers the ingested readings only once no rows are pending (after a flush).
        if not self.checkpointing and (msg.privacy is None or self._snapshot_pending == 0):
            self.durability.covered(self._snapshot_ingested)

    def _publish_pending(self) -> tuple[bool, bool]:
        return self._candidate_moved, self._first_due()

    def _other_wakeups(self, now: float) -> list[float]:
        times = [self.durability.confirm_next(now, self._confirm_key())]
        if self.sequencer.held_rows:
            times.append(now + min(1.0, self.sequencer.gap_timeout_s))
        if self.scoring is not None:
            times.append(self.scoring.next_wakeup(now))
        times.append(self.checkpoint_deadline())
        return times

    # -------------------------------------------------------------- durability
    @property
    def durable(self) -> dict[str, int]:
        """Per source, the last sequence number a restart would not lose (`Durability`)."""
        return self.durability.durable

    @durable.setter
    def durable(self, durable: dict[str, int]) -> None:
        self.durability.covered(durable)

    @property
    def checkpointing(self) -> bool:
        """Whether the shell writes checkpoints (`Durability`)."""
        return self.durability.checkpointing

    def _blocks(self) -> int:
        return 0 if self.estimator is None else self.estimator.n_blocks_

    def _drops_uncovered(self) -> bool:
        """Readings were ingested without changing the estimator (dropped by `screen`, or
        refused by it) since the state a restart resumes from, and nothing else: its
        snapshot (or checkpoint) taken again would make them durable."""
        if self.checkpointing:
            return not self.durability.state_changed(self._input_version) and (
                self.ingested != self.durable
            )
        snap = self.snapshot
        return snap is not None and self.ingested != dict(snap.sources)

    def checkpoint_news(self) -> bool:
        """Whether a checkpoint now would record anything the last one did not."""
        return self.durability.news(self._input_version, self.ingested)

    def checkpoint_deadline(self) -> float:
        """When the next checkpoint falls due without new input, seconds (``inf``: none,
        ``-inf``: due now; `Durability.deadline`)."""
        return self.durability.deadline(
            version=self._input_version,
            ingested=self.ingested,
            blocks=self._blocks(),
            first_snapshot_out=self.snapshot is not None and self.restored_from is None,
            paused_at=self.last_input + self.idle_s,
        )

    def checkpoint_due(self, now: float, *, force: bool = False) -> bool:
        """Whether to write a checkpoint at ``now`` (seconds): there is news, and its
        deadline has come, or ``force`` (on exit)."""
        if not self.checkpoint_news():
            return False
        return force or now >= self.checkpoint_deadline()

    def blocks_due(self) -> bool:
        """``checkpoint_every`` blocks completed since the last checkpoint: the shell writes
        one before it acknowledges the message that completed them (`Durability`)."""
        return self.estimator is not None and self.durability.blocks_due(self._blocks())

    def checkpoint_state(self) -> tuple[dict[str, object], dict[str, int], int, int]:
        """Everything a checkpoint holds, captured at one instant (numerics), and the
        ``(ingested, n_samples, blocks)`` it covers (`checkpointed` takes them back)."""
        est = self.estimator
        state: dict[str, object] = {} if est is None else est.get_state()
        state["n_features"] = self.n_features
        state["noise_restarts"] = self.noise_restarts
        ingested = self.ingested
        state.update(leaf_epoch=self.epoch, leaf_seq=self.seq, ingested=ingested)
        self._captured_version = self._input_version
        return state, ingested, self.n_samples, self._blocks()

    def checkpoint_image(self) -> CheckpointImage:
        """`checkpoint_state` as one object (numerics), for a `WriteCheckpoint` action."""
        state, ingested, n_samples, blocks = self.checkpoint_state()
        return CheckpointImage(state, ingested, n_samples, blocks, self._input_version)

    def checkpointed(
        self, ingested: dict[str, int], n_samples: int, blocks: int, *, now: float
    ) -> None:
        """The checkpoint `checkpoint_state` captured last was written at ``now``."""
        self.durability.written(self._captured_version, ingested, n_samples, blocks, now)
        self._after_checkpoint()

    def checkpoint_written(self, action: WriteCheckpoint, now: float) -> None:
        """The caller wrote ``action``'s checkpoint (a `CheckpointImage`, from `step`) at
        ``now`` (seconds)."""
        image = action.state
        assert isinstance(image, CheckpointImage)
        self.durability.written(image.version, image.ingested, image.n_samples, image.blocks, now)
        self._after_checkpoint()

    def _after_checkpoint(self) -> None:
        est = self.estimator
        masked = est is None or est.privacy is None or est.n_pending_ == 0
        if self.snapshot_n() == self.published_n and masked:
            self.unpublished_since = math.inf  # (dropped readings were all that was new)

    def checkpoint_failed(self, now: float) -> int:
        """Writing a checkpoint failed at ``now`` (seconds); the failures so far."""
        return self.durability.failed(now)

    def gaps(self) -> dict[str, int]:
        """First missing sequence number of each source with readings held behind a gap."""
        return {source: self.sequencer.last[source] + 1 for source in self.sequencer.held_sources()}

    def _confirm_key(self) -> tuple[object, ...]:
        return self.durability.confirm_key(self.epoch, max(0, self.connections - 1), self.gaps())

    @property
    def confirm_pending(self) -> bool:
        """Whether a confirmation is due once the rate limit allows."""
        return self.durability.confirm_changed(self._confirm_key())

    def confirm_due(self, now: float, *, force: bool = False) -> ConfirmMessage | None:
        """The confirmation to publish now (`ConfirmPolicy`; ``force``: if it changed), or
        None."""
        if not self.durability.confirm_due(now, self._confirm_key(), force=force):
            return None
        return ConfirmMessage(
            node_id=self.node_id,
            epoch=self.epoch,
            session=self.durability.session,
            connection=self.connections,
            ingested=self.ingested,
            durable=dict(self.durable),
            gaps=self.gaps(),
        )

    def confirm_sent(self, now: float) -> None:
        """The confirmation from `confirm_due` was published at ``now`` (seconds)."""
        self.durability.confirmed(now, self._confirm_key())

    # --------------------------------------------------------------------- step
    def step(self, now: float, *, timestamp: float, tick: str = "work") -> list[Action]:
        """The next actions of ``tick`` at ``now`` (monotonic seconds; ``timestamp``:
        wall-clock seconds for the messages made now), in the order `TICKS` says; see
        `LeafTick.step`, which this leaf holds."""
        return self.ticker.step(self, now, timestamp=timestamp, tick=tick)

    def take_released(self) -> list[Applied]:
        """The blocks the tick's ``expire`` released, with any refusal (`LeafTick`)."""
        return self.ticker.take_released()

    def snapshot_now(
        self, now: float, timestamp: float, *, final: bool = False
    ) -> tuple[SubspaceMessage, str] | None:
        """The snapshot to publish at ``now`` and why (`snapshot_due`; ``final``: anything
        unpublished, reason ``"shutdown"``), or None. A local-only leaf publishes none."""
        if self.local_only:
            self.unpublished_since = math.inf  # its site's slots release its readings
            return None
        if final:
            reason = "shutdown" if self.snapshot_n() != self.published_n else None
        else:
            reason = self.snapshot_due(now)
        if reason is None:
            return None
        msg = self.make_snapshot(timestamp, reason)
        return None if msg is None else (msg, reason)

    def published(self, action: Publish, now: float) -> None:
        """The caller handed ``action`` (from `step`) to the broker at ``now`` (seconds)."""
        kind = action.kind
        if kind == "subspace" and action.reason != "reconnect":
            assert isinstance(action.message, SubspaceMessage)
            self.snapshot_published(action.message, now)
        elif kind == "confirm":
            self.confirm_sent(now)
        elif kind == "scores":
            assert isinstance(action.message, bytes)
            self.score_outbox.sent(action.message)
        elif kind == "status":
            self.status_sent(now)

    def mark_durable(self, durable: dict[str, int]) -> None:
        """Readings released elsewhere (a secure-aggregation leaf's revealed slots) are
        durable: per source, up to the sequence number ``durable`` names."""
        self.durability.mark(durable)

    # ------------------------------------------------------------------ status
    def health(self) -> tuple[object, ...]:
        """As `NodeCore.health`, plus what is durable: a status document follows each
        checkpoint (or, without checkpoints, each snapshot; at most every
        ``status_min_interval_s``), so it never says ``n_samples 0`` after a stream until
        the heartbeat."""
        return (
            *super().health(),
            tuple(sorted(self.durable.items())),
            self.sequencer.gap_rows,
            self.restored_from,
            self.clipped,
            *(() if self.scoring is None else self.scoring.health()),
        )

    def _range_extra(self) -> dict[str, object]:
        """Readings rejected by and clipped into ``valid_range`` (only with one)."""
        if self.config.valid_range is None:
            return {}
        return {
            "out_of_range": self.rejects["out_of_range"],
            "valid_range_width": self.rejects["valid_range_width"],
            "clipped": self.clipped,
        }

    def status_extra(self, now: float) -> dict[str, object]:
        """The leaf part of the JSON status document."""
        snap = self.snapshot
        return {
            "ingested": self.ingested,
            "durable": dict(self.durable),
            "published_n_samples": 0 if snap is None else snap.n_samples,
            "duplicates": self.sequencer.duplicates,
            "held_rows": self.sequencer.held_rows,
            "gap_rows": self.sequencer.gap_rows,
            "reconnects": max(0, self.connections - 1),
            "undelivered": self.undelivered,
            "checkpoints": self.durability.checkpoints,
            "checkpoint_failures": self.durability.checkpoint_failures,
            "restored_from": self.restored_from,
            "last_update_age_s": None
            if math.isinf(self.last_input)
            else round(now - self.last_input, 3),
            "pending_rows": 0 if self.estimator is None else self.estimator.n_pending_,
            "publish": dict(self.decisions),
            "rejected_by_source": dict(self.rejected_by_source),
            **self._range_extra(),
            **({} if self.scoring is None else self.scoring.status_extra()),
            **({} if self.scoring is None else {"scores_dropped": self.score_outbox.dropped}),
        }
