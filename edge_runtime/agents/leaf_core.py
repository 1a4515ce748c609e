"""The leaf core: readings in -> snapshots, confirmations and status out. No I/O, no clock.

`LeafCore` holds everything a leaf knows (its FPCA-Edge estimator, the per-source
sequencer, the last published snapshot, what is durable) and makes every decision of a leaf:
when to publish a snapshot (`PublishPolicy`), when to mask pending readings of a private leaf,
when to checkpoint, when to confirm readings (`ConfirmPolicy`) and when to publish its status
(`StatusPolicy`). Time comes in as an argument; the async shell (`LeafAgent`) does the I/O.
"""

from __future__ import annotations

import math
import secrets
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from edge_runtime.agents.core import NodeCore
from edge_runtime.agents.policy import ConfirmPolicy, PublishPolicy, StatusPolicy
from edge_runtime.agents.scoring_core import ScoringCore
from edge_runtime.agents.sequencing import SourceSequencer
from edge_runtime.fpca import FPCAEdge, Subspace
from edge_runtime.fpca.privacy import NEIGHBOURS, noise_std
from edge_runtime.topology import NodeConfig
from edge_runtime.wire import ConfirmMessage, PrivacyParams, SensorReadings, SubspaceMessage

__all__ = [
    "GAP_WEIGHT",
    "IDLE_GAPS",
    "LeafCore",
    "RangeHook",
    "configured_privacy",
    "snapshot_privacy",
]

GAP_WEIGHT = 0.2
"""Weight of the newest gap in the average gap between a leaf's readings."""

IDLE_GAPS = 2.0
"""A leaf is idle after this many usual gaps without readings (and ``idle_s`` at least)."""

Labelled = tuple[np.ndarray, str | None, int | None]
"""A block of rows, its source and the sequence number of its first row (or None)."""

RangeHook = Callable[[str, str, str], None]
"""``hook(reason, source, detail)``: a block had readings outside ``valid_range`` (reason
``"out_of_range"``, rejected, or ``"clipped"``) or of another width than its per-feature
bounds (``"valid_range_width"``, rejected); called once per block, after counting."""


def snapshot_privacy(est: FPCAEdge) -> PrivacyParams | None:
    """The guarantee of ``est``'s snapshots: its own privacy settings (budget, clip norm,
    mechanism; replace-one neighbours, `edge_runtime.fpca.privacy.NEIGHBOURS`), or None."""
    if est.privacy is None or est.clip_norm is None or est.mechanism is None:
        return None
    epsilon, delta = est.privacy
    return PrivacyParams(
        epsilon, delta, est.clip_norm, mechanism=est.mechanism, neighbours=NEIGHBOURS
    )


def configured_privacy(config: NodeConfig) -> PrivacyParams | None:
    """The guarantee a leaf configured with ``config`` publishes under, or None."""
    if config.epsilon is None or config.delta is None or config.clip_norm is None:
        return None
    assert config.mechanism is not None  # NodeConfig sets it with privacy
    return PrivacyParams(
        config.epsilon,
        config.delta,
        config.clip_norm,
        mechanism=config.mechanism,
        neighbours=NEIGHBOURS,
    )


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
    checkpoint_every : int, default 1
        Checkpoint after this many completed blocks (and when idle, and on exit).
    echo_timeout_s : float, default 5
        Least bound of the echo check, seconds.
    gap_timeout_s : float, default 10
        Seconds a sequence gap may stay open (`SourceSequencer`).
    root_id : str, optional
        The topology's root, whose models a scoring leaf (``config.score`` not ``"off"``)
        accepts (`ScoringCore`, attribute ``scoring``); without it the leaf does not score.

    Attributes
    ----------
    clipped : int
        Readings clipped into ``config.valid_range`` (``out_of_range = "clip"``).
    on_range : RangeHook or None
        Told of every block with readings outside ``config.valid_range`` (the shell logs
        them, rate-limited); None: counted only.

    Notes
    -----
    Snapshot contents: everything ingested, pending rows folded in (all ``rank + oversample``
    tracked directions, so merges upstream keep their accuracy); a private leaf publishes
    masked blocks only and masks its pending rows when idle (`FPCAEdge.flush`).

    Declared sensor range (``config.valid_range``, `screen`): every block the sequencer
    releases is checked before it reaches the estimator or the scoring. With
    ``out_of_range = "reject"`` a reading with any value outside the range is dropped and
    counted (``rejects["out_of_range"]``, ``rejected_by_source``); with ``"clip"`` each value
    is clipped into the range (``clipped``). A dropped reading stays ingested in its
    source's sequence (confirmed like any other, never waited for as a gap nor re-sent
    after a reconnect), and becomes durable with the next snapshot or checkpoint; when
    nothing else changed since the last one, the leaf publishes its snapshot again (or
    checkpoints) once idle, so a stream that ends on rejected readings is confirmed too.
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
        checkpoint_every: int = 1,
        echo_timeout_s: float = 5.0,
        gap_timeout_s: float = 10.0,
        root_id: str | None = None,
    ) -> None:
        super().__init__(config.id, policy, status_policy, echo_timeout_s, now)
        if n_features is not None and n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        if checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1 block, got {checkpoint_every}")
        self.config = config
        self.confirm_policy = confirm_policy
        self.n_features = n_features
        self.epoch = secrets.token_hex(8)
        self.seq = 0
        self.estimator: FPCAEdge | None = None
        self.sequencer = SourceSequencer(gap_timeout_s=gap_timeout_s, clock=lambda: self._now)
        self.durable: dict[str, int] = {}
        self.snapshot: SubspaceMessage | None = None
        self.checkpointing = checkpointing
        self.checkpoint_every = checkpoint_every
        self.checkpoints = 0
        self.checkpointed_blocks = 0
        self.checkpointed_n = -1
        self.restored_from: str | None = None
        self.privacy: PrivacyParams | None = configured_privacy(config)
        self.noise: int | np.random.Generator | None = config.noise_seed
        self.noise_restarts = 0
        self._now = now
        self._candidate_version = -1
        self._candidate_moved = False
        self._input_version = 0
        self._gap_s = 0.0  # usual gap between readings, seconds (exponential average)
        self.session = secrets.token_hex(8)  # this process: a restart shows as a new session
        self._last_confirm = -math.inf
        self.rejected_by_source: Counter[str] = Counter()
        self.clipped = 0
        self.on_range: RangeHook | None = None
        self._bounds: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.scoring: ScoringCore | None = None
        if config.score != "off" and root_id is not None:
            self.scoring = ScoringCore(
                config.id,
                root_id,
                mode=config.score,
                alpha=config.score_alpha,
                interval_s=config.score_interval_s,
                now=now,
            )
        if n_features is not None:
            self.estimator = self.new_estimator(n_features)
        self.settle_status()
        # a fresh leaf has nothing to confirm: its first confirmation follows a change
        self._confirm_sent: tuple[object, ...] = self._confirm_key()

    # ------------------------------------------------------------------ estimator
    @property
    def horizon(self) -> int:
        """The continual-release horizon this leaf's estimator runs with (1 unless the
        mechanism is "gaussian", `NodeConfig.release_horizon`)."""
        horizon = self.config.release_horizon
        return 1 if self.privacy is None or horizon is None else horizon

    def estimator_options(self, n_features: int) -> dict[str, Any]:
        """FPCAEdge settings of this leaf for readings of ``n_features`` values.

        Raises
        ------
        ValueError
            If the default block of a private "gaussian" leaf is too large
            (`NodeConfig.block_size_for`).
        """
        cfg = self.config
        rank = min(cfg.rank, n_features)
        privacy: dict[str, Any] = {}
        if self.privacy is not None:
            privacy = {
                "privacy": (self.privacy.epsilon, self.privacy.delta),
                "clip_norm": self.privacy.clip_norm,
                "mechanism": self.privacy.mechanism,
                "horizon": self.horizon,
                "chunk_size": cfg.chunk_size,
                "random_state": self.noise,
            }
        return {
            "rank": rank,
            "block_size": cfg.block_size_for(n_features),
            "oversample": None
            if cfg.oversample is None
            else min(cfg.oversample, n_features - rank),
            "adaptive": cfg.adaptive,
            "rank_bounds": cfg.rank_bounds,
            "holdoff": cfg.holdoff,
            "forget": cfg.forget,
            "center": cfg.center,
            **privacy,
        }

    @staticmethod
    def estimator_from_state(state: Mapping[str, Any], random_state: Any = None) -> FPCAEdge:
        """The estimator of a checkpoint's ``state`` (`FPCAEdge.from_state`)."""
        return FPCAEdge.from_state(state, random_state=random_state)

    def new_estimator(self, n_features: int) -> FPCAEdge:
        """A fresh estimator; raises ValueError for settings the mechanism rejects (eq. (8)'s
        delta bound, a default block too large), here rather than at the first block."""
        options = self.estimator_options(n_features)
        if self.privacy is not None and self.privacy.mechanism == "fpca-eq8":
            noise_std(self.privacy.epsilon, self.privacy.delta, n_features, 1)
        return FPCAEdge(n_features, **options)

    def privacy_mismatch(self, est: FPCAEdge) -> str | None:
        """Why a restored estimator ``est`` may not continue under this leaf's configuration,
        or None: another guarantee (`snapshot_privacy`: budget, clip norm, mechanism, or
        privacy at all) or another continual-release horizon."""
        privacy = snapshot_privacy(est)
        if privacy != self.privacy:
            return f"privacy {privacy}, configured {self.privacy}"
        if self.privacy is not None and est.horizon != self.horizon:
            return f"release horizon {est.horizon}, configured {self.horizon}"
        return None

    @property
    def idle_s(self) -> float:
        """The policy's ``idle_s``, stretched to twice the usual gap between this leaf's
        readings (an exponential average), so a stream that arrives in bursts is not
        "idle" between two bursts: the trailing publish waits for a real pause."""
        return max(self.policy.idle_s, IDLE_GAPS * self._gap_s)

    @property
    def n_samples(self) -> int:
        """Samples ingested so far."""
        return 0 if self.estimator is None else self.estimator.n_samples_seen_

    @property
    def ingested(self) -> dict[str, int]:
        """Last sequence number applied per source."""
        return dict(self.sequencer.last)

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

    @property
    def published_n(self) -> int:
        return 0 if self.snapshot is None else self.snapshot.n_samples

    # ------------------------------------------------------------------ restore
    def restore_checkpoint(
        self, state: Mapping[str, Any], estimator: FPCAEdge | None, now: float
    ) -> None:
        """Continue from a checkpoint: ``state`` as written from `checkpoint_state`,
        ``estimator`` rebuilt from it (`FPCAEdge.from_state`, by the caller, who owns the
        noise generator). Readings the checkpoint covers are durable; whatever no snapshot
        published yet is published when the policy allows.

        Raises
        ------
        KeyError, ValueError, TypeError
            If ``state`` lacks the leaf's keys or holds values of the wrong type.
        """
        epoch, seq = str(state["leaf_epoch"]), int(state["leaf_seq"])
        ingested = {str(k): int(v) for k, v in dict(state["ingested"]).items()}
        self.estimator = estimator
        if estimator is not None:
            self.n_features = estimator.n_features_
            self.checkpointed_blocks = estimator.n_blocks_
            self.checkpointed_n = estimator.n_samples_seen_
            if estimator.n_samples_seen_:
                self.unpublished_since = now
        self.epoch, self.seq = epoch, seq
        self.sequencer.restore(ingested)
        self.durable = dict(ingested)
        self.restored_from = "checkpoint"

    def continue_after(self, retained: SubspaceMessage) -> None:
        """After a checkpoint restore: never reuse a ``seq`` this lineage already
        published (the checkpoint may predate the last snapshot; a parent ignores a
        snapshot whose ``(epoch, seq)`` is not newer), and start a new epoch when that
        snapshot covers more samples than the checkpoint: within one epoch ``n_samples``
        never decreases, and parents quarantine a child whose does
        (`edge_runtime.agents.plausibility.check_snapshot`)."""
        if retained.node_id == self.node_id and retained.epoch == self.epoch:
            self.seq = max(self.seq, retained.seq)
            if retained.n_samples > self.checkpointed_n:
                self.epoch = secrets.token_hex(8)  # a lineage that forgot some samples

    def restore_snapshot(self, msg: SubspaceMessage, now: float) -> str | None:
        """Continue from this leaf's own retained snapshot (no checkpoint).

        The estimator resumes from the snapshot (`FPCAEdge.from_subspace`, its float32
        basis re-orthonormalised first), each source continues after the last sequence the
        snapshot covers (`SubspaceMessage.sources`), and those readings are durable.

        Returns
        -------
        str or None
            Why the snapshot was not used (``"privacy_mismatch"``: its `PrivacyParams`,
            mechanism included, differ from the configured ones; ``"unusable: ..."``), or
            None once restored. A snapshot of another node or of no samples is ignored
            (``"empty"``). A snapshot carries no release horizon and needs none: a
            ``"gaussian"`` estimator restored from it starts a new segment of releases
            (`FPCAEdge.from_subspace`), and the snapshot itself is post-processing.
        """
        if msg.node_id != self.node_id or msg.n_samples == 0:
            return "empty"
        if msg.privacy != self.privacy:  # budget, clip norm, mechanism, neighbours
            return "privacy_mismatch"
        d = msg.n_features
        try:
            estimator = FPCAEdge.from_subspace(
                msg.subspace.reorthonormalised(), **self.estimator_options(d)
            )
        except (ValueError, TypeError) as exc:
            return f"unusable: {exc}"
        self.estimator = estimator
        self.n_features = d
        self.epoch, self.seq, self.snapshot = msg.epoch, msg.seq, msg
        self.sequencer.restore(msg.sources)
        self.durable = dict(msg.sources)
        self.restored_from = "retained snapshot"
        return None

    # ------------------------------------------------------------------ inbound
    def count_reject(self, reason: str, source: str, n: int = 1) -> None:
        """Count ``n`` rejected readings (or one message) by ``reason`` (``rejects``) and by
        the ``source`` they came from (``rejected_by_source``: a local source's id, the
        ``src`` of an MQTT payload, else the sensor topic)."""
        self.rejects[reason] += n
        self.rejected_by_source[source] += n

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
        self._now = now
        source = readings.source
        if source is None or readings.seq is None:
            labelled: list[Labelled] = [(readings.values, None, None)]
        else:
            blocks = self.sequencer.offer(source, readings.seq, readings.values)
            if not blocks:
                return []
            labelled = _label(blocks, source, self.sequencer.last[source])
        return self.screen(labelled, source or origin or self.config.sensor_topic or "?", now)

    def expire_labelled(self, now: float) -> list[Labelled]:
        """`expire`, labelled as `accept_labelled` when the released rows are of one
        source (the usual case), else ``(block, None, None)``."""
        self._now = now
        before = dict(self.sequencer.last)
        blocks = self.sequencer.expire()
        if not blocks:
            return []
        changed = [s for s, last in self.sequencer.last.items() if before.get(s) != last]
        if len(changed) != 1:
            unlabelled: list[Labelled] = [(block, None, None) for block in blocks]
            return self.screen(unlabelled, self.config.sensor_topic or "?", now)
        labelled = _label(blocks, changed[0], self.sequencer.last[changed[0]])
        return self.screen(labelled, changed[0], now)

    def expire(self, now: float) -> list[np.ndarray]:
        """Row blocks released because a gap timed out (counted in ``gap_rows``),
        `screen`-ed."""
        return [block for block, _, _ in self.expire_labelled(now)]

    def screen(self, labelled: list[Labelled], source: str, now: float) -> list[Labelled]:
        """Check released blocks against ``config.valid_range`` (unchanged without one).

        A reading with a value outside the range is dropped (``out_of_range = "reject"``,
        counted in ``rejects["out_of_range"]``; the kept rows of a block are returned as
        runs of consecutive readings, each labelled with its first sequence number) or has
        its values clipped into the range (``"clip"``, counted in ``clipped``). A block of
        another width than per-feature bounds is dropped whole
        (``rejects["valid_range_width"]``). Dropped readings are counted under ``source``
        and stay ingested in their source's sequence. O(rows x features).
        """
        if self.config.valid_range is None:
            return labelled
        out: list[Labelled] = []
        for block, src, seq in labelled:
            out += self._screen_block(block, src, seq, source, now)
        return out

    def _range(self, n_features: int) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)`` for readings of ``n_features`` values (ValueError: another width)."""
        bounds = self._bounds.get(n_features)
        if bounds is None:
            found = self.config.range_bounds(n_features)
            assert found is not None  # screen runs only with a valid_range
            bounds = self._bounds[n_features] = found
        return bounds

    def _screen_block(
        self, block: np.ndarray, src: str | None, seq: int | None, source: str, now: float
    ) -> list[Labelled]:
        n, d = block.shape
        try:
            lo, hi = self._range(d)
        except ValueError as exc:
            self._dropped("valid_range_width", source, n, now, f"{exc}: {n} readings rejected")
            return []
        outside = (block < lo) | (block > hi)
        bad = outside.any(axis=1)
        n_bad = int(np.count_nonzero(bad))
        if n_bad == 0:
            return [(block, src, seq)]
        i = int(np.argmax(bad))
        j = int(np.argmax(outside[i]))
        where = f"reading {i}" if seq is None else f"reading seq {seq + i}"
        detail = (
            f"{where} column {j} is {float(block[i, j])!r}, outside valid_range "
            f"[{lo[j]}, {hi[j]}] ({n_bad} of {n} readings in this batch)"
        )
        if self.config.out_of_range == "clip":
            self.clipped += n_bad
            if self.on_range is not None:
                self.on_range("clipped", source, detail)
            return [(np.clip(block, lo, hi), src, seq)]
        self._dropped("out_of_range", source, n_bad, now, detail)
        kept = np.flatnonzero(~bad)
        runs = np.split(kept, np.flatnonzero(np.diff(kept) != 1) + 1) if kept.size else []
        return [
            (block[run[0] : run[-1] + 1], src, None if seq is None else seq + int(run[0]))
            for run in runs
        ]

    def _dropped(self, reason: str, source: str, n: int, now: float, detail: str) -> None:
        """``n`` readings arrived and were dropped: counted, and due to become durable."""
        self.count_reject(reason, source, n)
        self._note_input(now)
        if math.isinf(self.unpublished_since):
            self.unpublished_since = now  # a snapshot (or checkpoint) will cover them
        if self.on_range is not None:
            self.on_range(reason, source, detail)

    def _drops_uncovered(self) -> bool:
        """Readings were ingested without changing the estimator (dropped by `screen`, or
        refused by it) since the state a restart resumes from, and nothing else: its
        snapshot (or checkpoint) taken again would make them durable."""
        if self.checkpointing:
            return self.n_samples == self.checkpointed_n and self.ingested != self.durable
        snap = self.snapshot
        return snap is not None and self.ingested != dict(snap.sources)

    def _note_input(self, now: float) -> None:
        """Input arrived at ``now``: the usual gap between readings and ``last_input``."""
        gap = now - self.last_input
        if 0 < gap < self.policy.max_interval_s:  # a longer pause is no "usual gap"
            weight = GAP_WEIGHT if self._gap_s else 1.0  # the first gap starts the average
            self._gap_s += weight * (gap - self._gap_s)
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

    # ----------------------------------------------------------------- snapshot
    def _candidate(self) -> Subspace | None:
        est = self.estimator
        if est is None or self.snapshot_n() == 0:
            return None
        return est.tracked_subspace

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
        return pending

    def snapshot_due(self, now: float) -> str | None:
        """The reason to publish a snapshot now (`PublishPolicy.decide`), or None.

        Computes the candidate (numerics) only when the rate limit allows a publish and
        there was new input since the last evaluation.
        """
        if math.isinf(self.unpublished_since):
            return None
        if self.snapshot_n() == self.published_n:
            est = self.estimator
            nothing_pending = est is None or est.n_pending_ == 0
            dropped = self._drops_uncovered()
            # Only dropped readings since the last snapshot: publish it again so they become
            # durable -- unless a checkpoint covers them (`checkpoint_due`) or a private
            # leaf's pending rows must wait for their masked block.
            republish = (
                dropped and not self.checkpointing and (nothing_pending or est.privacy is None)
            )
            if not republish:
                if nothing_pending and not dropped:
                    self.unpublished_since = math.inf  # nothing left to publish
                return None
        if not self.policy.may_publish(now, self.last_publish):
            return None
        if self.snapshot is None:
            self._candidate_moved = False
        elif self._candidate_version != self._input_version:
            candidate = self._candidate()
            previous = None if self.snapshot is None else self.snapshot.subspace
            self._candidate_moved = candidate is not None and self.policy.moved(
                previous, candidate, self.config.rank
            )
            self._candidate_version = self._input_version
        return self._decide(now, moved=self._candidate_moved, first=self._first_due())

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
            return None
        subspace = est.tracked_subspace
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
        self._candidate_version = self._input_version
        self._candidate_moved = False
        est = self.estimator
        pending = 0 if est is None or est.privacy is None else est.n_pending_
        if self.snapshot_n() == msg.n_samples and pending == 0:
            self.unpublished_since = math.inf  # (a private leaf's pending rows wait for a flush)
        # Without a checkpoint the snapshot is what a restart restores; a private snapshot
        # covers the ingested readings only once no rows are pending (after a flush).
        if not self.checkpointing and (msg.privacy is None or self._snapshot_pending == 0):
            self.durable = dict(self._snapshot_ingested)

    def _publish_pending(self) -> tuple[bool, bool]:
        return self._candidate_moved, self._first_due()

    def _other_wakeups(self, now: float) -> list[float]:
        times = []
        if self._confirm_changed():
            times.append(
                self.confirm_policy.next_check(now, last_sent=self._last_confirm, changed=True)
            )
        if self.sequencer.held_rows:
            times.append(now + min(1.0, self.sequencer.gap_timeout_s))
        if self.scoring is not None:
            times.append(self.scoring.next_wakeup(now))
        return times

    # --------------------------------------------------------------- checkpoint
    def checkpoint_due(self, now: float, *, force: bool = False) -> bool:
        """Checkpoint every ``checkpoint_every`` blocks, when idle with news, and on exit;
        readings dropped since the last checkpoint (and nothing else) count as news too,
        checkpointed when idle or after the maximum publish interval."""
        if not self.checkpointing or (
            self.n_samples == self.checkpointed_n and self.ingested == self.durable
        ):
            return False
        blocks = 0 if self.estimator is None else self.estimator.n_blocks_
        if force or (self.idle(now) and self.snapshot_n() == self.published_n):
            return True
        if self._drops_uncovered() and now >= self.unpublished_since + self.policy.max_interval_s:
            return True  # dropped readings that never pause: durable every maximum interval
        return blocks - self.checkpointed_blocks >= self.checkpoint_every

    def checkpoint_state(self) -> tuple[dict[str, object], dict[str, int], int, int]:
        """Everything a checkpoint holds, captured at one instant (numerics), and the
        ``(ingested, n_samples, blocks)`` it covers."""
        est = self.estimator
        state: dict[str, object] = {} if est is None else est.get_state()
        state["n_features"] = self.n_features
        state["noise_restarts"] = self.noise_restarts
        ingested = self.ingested
        state.update(leaf_epoch=self.epoch, leaf_seq=self.seq, ingested=ingested)
        blocks = 0 if est is None else est.n_blocks_
        return state, ingested, self.n_samples, blocks

    def checkpointed(self, ingested: Mapping[str, int], n_samples: int, blocks: int) -> None:
        """A checkpoint covering ``ingested`` was written."""
        self.checkpoints += 1
        self.checkpointed_blocks = blocks
        self.checkpointed_n = n_samples
        self.durable = dict(ingested)
        est = self.estimator
        masked = est is None or est.privacy is None or est.n_pending_ == 0
        if self.snapshot_n() == self.published_n and masked:
            self.unpublished_since = math.inf  # (dropped readings were all that was new)

    # ------------------------------------------------------------ confirmations
    def _confirm_key(self) -> tuple[object, ...]:
        """What a confirmation says; a new one is due when it changes (the first
        connection of a fresh leaf is no change: nothing can have been lost before it)."""
        return (
            self.epoch,
            max(0, self.connections - 1),
            tuple(sorted(self.durable.items())),
            tuple(sorted(self.gaps().items())),
        )

    def _confirm_changed(self) -> bool:
        return self._confirm_key() != self._confirm_sent

    @property
    def confirm_pending(self) -> bool:
        """Whether a confirmation is due once the rate limit allows."""
        return self._confirm_changed()

    def gaps(self) -> dict[str, int]:
        """First missing sequence number of each source with readings held behind a gap."""
        return {source: self.sequencer.last[source] + 1 for source in self.sequencer.held_sources()}

    def confirm_due(self, now: float, *, force: bool = False) -> ConfirmMessage | None:
        """The confirmation to publish now (`ConfirmPolicy`), or None."""
        changed = self._confirm_changed()
        if not (force and changed) and not self.confirm_policy.decide(
            now, last_sent=self._last_confirm, changed=changed
        ):
            return None
        return ConfirmMessage(
            node_id=self.node_id,
            epoch=self.epoch,
            session=self.session,
            connection=self.connections,
            ingested=self.ingested,
            durable=dict(self.durable),
            gaps=self.gaps(),
        )

    def confirm_sent(self, now: float) -> None:
        self._last_confirm = now
        self._confirm_sent = self._confirm_key()

    # ------------------------------------------------------------------ status
    def health(self) -> tuple[object, ...]:
        return (
            *super().health(),
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
            "checkpoints": self.checkpoints,
            "restored_from": self.restored_from,
            "last_update_age_s": None
            if math.isinf(self.last_input)
            else round(now - self.last_input, 3),
            "pending_rows": 0 if self.estimator is None else self.estimator.n_pending_,
            "publish": dict(self.decisions),
            "rejected_by_source": dict(self.rejected_by_source),
            **self._range_extra(),
            **({} if self.scoring is None else self.scoring.status_extra()),
        }


def _label(blocks: list[np.ndarray], source: str, last: int) -> list[Labelled]:
    """Consecutive ``blocks`` of ``source`` ending at sequence ``last``, with the sequence
    number of each block's first row."""
    seq = last - sum(len(block) for block in blocks) + 1
    out: list[Labelled] = []
    for block in blocks:
        out.append((block, source, seq))
        seq += len(block)
    return out
