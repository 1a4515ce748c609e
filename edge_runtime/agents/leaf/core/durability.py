"""What a leaf has made durable, and what it confirms to its publishers.

`LeafDurability` is the part of `LeafCore` that decides when to checkpoint, what a
checkpoint holds, and the confirmations (`ConfirmMessage`: ingested, durable, gaps)
publishers replay from (`ConfirmPolicy`). Readings are durable once a checkpoint covers
them, or, without checkpoints, once a published snapshot does. No I/O, no clock: the time
comes in as an argument, and `checkpoint_deadline` tells the shell when to look again.

When a checkpointing leaf writes one (`checkpoint_due`), whenever something is new since
the last one (readings applied, a private leaf's rows masked, or readings ingested and
dropped):

- **by time**: ``checkpoint_interval_s`` (default `CHECKPOINT_INTERVAL_S`, 120 s) after
  the last checkpoint, so a stream that never pauses is durable at least that often;
- **when the stream pauses**: once no reading came for the leaf's ``idle_s`` (the same
  pause that triggers its trailing publish), but no sooner than `IDLE_CHECKPOINT_GAP_S`
  after the last checkpoint, so readings at the end of a stream become durable within
  ``max(idle_s, IDLE_CHECKPOINT_GAP_S)`` seconds. A stream that pauses often (a message
  every 5 to 30 s) cannot wear out an SD card: such checkpoints spend a token of a bucket of
  `IDLE_CHECKPOINT_BURST`, refilled by one every ``checkpoint_interval_s``, and wait for
  one when it is empty;
- **with the first snapshot**: a leaf that has no checkpoint yet writes one right after
  its first published snapshot (in the same step), so a leaf killed early restarts from
  an exact checkpoint, not from its retained float32 snapshot without its pending rows
  (which moved the model by up to 6e-3 rad in the acceptance benchmark);
- **by blocks** (opt-in): after ``checkpoint_every`` completed blocks, before the message
  that completed them is acknowledged (`blocks_due`), so a crash loses at most
  ``checkpoint_every`` blocks of acknowledged readings;
- **on exit** (``force``).

The trade-off: a publisher (``replay``) keeps every reading until it is durable, so the
interval bounds how long readings wait in its window while a stream runs (at 100
readings/s and 120 s: 12,000 readings), and what a power cut can make it re-send; the SD
card sees about one checkpoint (two ``fsync``) per interval: 720 checkpoints, 1,440
``fsync`` and 28 MB written a day at 120 s for a Motes leaf at 100 readings/s, measured in
``benchmarks/longevity/`` (at 60 s: 2,880 ``fsync``, 40-56 MB: too close to a budget of
3,000 and 50 MB).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from edge_runtime.agents.common.core.policy import ConfirmPolicy
from edge_runtime.agents.leaf.core.sequencing import SourceSequencer
from edge_runtime.wire import ConfirmMessage, SubspaceMessage

__all__ = [
    "CHECKPOINT_INTERVAL_S",
    "IDLE_CHECKPOINT_BURST",
    "IDLE_CHECKPOINT_GAP_S",
    "CheckpointImage",
    "LeafDurability",
]

CHECKPOINT_INTERVAL_S = 120.0
"""Default ``checkpoint_interval_s``: most seconds between checkpoints while new readings
arrive (``benchmarks/longevity/``: 720 checkpoints and 1,440 ``fsync`` a device-day)."""

IDLE_CHECKPOINT_BURST = 10
"""Checkpoints after pauses the leaf may write in a row; one more every interval."""

IDLE_CHECKPOINT_GAP_S = 10.0
"""Least seconds between the last checkpoint and one written because the stream paused."""


@dataclass(frozen=True, slots=True)
class CheckpointImage:
    """A leaf's checkpoint captured at one instant (`LeafDurability.checkpoint_image`):
    what a `WriteCheckpoint` action carries.

    Attributes
    ----------
    state : dict
        What the file holds (`edge_runtime.checkpoint.save_checkpoint` writes it).
    ingested : dict of str to int
        Per source, the last sequence number it covers.
    n_samples, blocks : int
        Samples and completed blocks it covers.
    version : int
        The core's input version at the capture (what the next checkpoint compares).
    """

    state: dict[str, object]
    ingested: dict[str, int]
    n_samples: int
    blocks: int
    version: int


class LeafDurability:
    """The durability part of `LeafCore` (a mixin: `LeafCore` holds the attributes below).

    Attributes
    ----------
    durable : dict of str to int
        Per source, the last sequence number a restart would not lose.
    checkpointing : bool
        Whether the shell writes checkpoints.
    checkpoint_every : int or None
        Also checkpoint after this many completed blocks (None: by time only).
    checkpoint_interval_s : float
        Most seconds between checkpoints while there is news.
    last_checkpoint : float
        When the last checkpoint was written (or the core was made), seconds.
    checkpoints : int
        Checkpoints written.
    checkpoint_failures : int
        Checkpoints that could not be written.
    checkpointed_blocks, checkpointed_n : int
        Blocks and samples the last checkpoint covers (``checkpointed_n = -1``: none).
    confirm_policy : ConfirmPolicy
    session : str
        This process (random hex id): a restart shows as a new session.
    """

    node_id: str
    epoch: str
    connections: int
    sequencer: SourceSequencer
    snapshot: SubspaceMessage | None
    restored_from: str | None
    durable: dict[str, int]
    checkpointing: bool
    checkpoint_every: int | None
    checkpoint_interval_s: float
    last_checkpoint: float
    checkpoints: int
    checkpoint_failures: int
    checkpointed_blocks: int
    checkpointed_n: int
    confirm_policy: ConfirmPolicy
    session: str
    unpublished_since: float
    last_input: float
    _input_version: int
    _checkpointed_version: int
    _captured_version: int
    _idle_tokens: float
    _tokens_at: float
    _last_confirm: float
    _confirm_sent: tuple[object, ...]

    def _drops_uncovered(self) -> bool:
        """Readings were ingested without changing the estimator (dropped by `screen`, or
        refused by it) since the state a restart resumes from, and nothing else: its
        snapshot (or checkpoint) taken again would make them durable."""
        if self.checkpointing:
            return not self._state_changed() and self.ingested != self.durable
        snap = self.snapshot
        return snap is not None and self.ingested != dict(snap.sources)

    def _state_changed(self) -> bool:
        """The estimator changed (rows applied, or masked by a flush) since the last
        checkpoint."""
        return self._input_version != self._checkpointed_version

    def checkpoint_news(self) -> bool:
        """Whether a checkpoint now would record anything the last one did not."""
        return self.checkpointing and (self._state_changed() or self.ingested != self.durable)

    def checkpoint_deadline(self) -> float:
        """When the next checkpoint falls due without new input, seconds (``inf``: none is
        pending, ``-inf``: due now); see the module docstring for the rules."""
        if not self.checkpoint_news():
            return math.inf
        blocks = 0 if self.estimator is None else self.estimator.n_blocks_
        every = self.checkpoint_every
        if every is not None and blocks - self.checkpointed_blocks >= every:
            return -math.inf
        if self.snapshot is not None and self.checkpoints == 0 and self.restored_from is None:
            return -math.inf  # the first snapshot is out: the first checkpoint with it
        paused = max(
            self.last_input + self.idle_s,
            self.last_checkpoint + IDLE_CHECKPOINT_GAP_S,
            self._token_time(),
        )
        return min(paused, self.last_checkpoint + self.checkpoint_interval_s)

    def _tokens(self, now: float) -> float:
        """Tokens of the pause bucket at ``now``."""
        refill = (now - self._tokens_at) / self.checkpoint_interval_s
        return min(float(IDLE_CHECKPOINT_BURST), self._idle_tokens + max(0.0, refill))

    def _token_time(self) -> float:
        """When the pause bucket holds a whole token, seconds."""
        if self._idle_tokens >= 1.0:
            return -math.inf
        return self._tokens_at + (1.0 - self._idle_tokens) * self.checkpoint_interval_s

    def checkpoint_due(self, now: float, *, force: bool = False) -> bool:
        """Whether to write a checkpoint at ``now`` (seconds): there is news, and the
        deadline (`checkpoint_deadline`) has come, or ``force`` (on exit)."""
        if not self.checkpoint_news():
            return False
        return force or now >= self.checkpoint_deadline()

    def blocks_due(self) -> bool:
        """``checkpoint_every`` blocks were completed since the last checkpoint: the shell
        writes one before it acknowledges the message that completed them (a publish's
        PUBACK wait or the write itself would otherwise let later messages be acknowledged
        first, and a crash then lose more than the cadence)."""
        every, est = self.checkpoint_every, self.estimator
        return (
            self.checkpointing
            and every is not None
            and est is not None
            and est.n_blocks_ - self.checkpointed_blocks >= every
        )

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
        self._captured_version = self._input_version
        return state, ingested, self.n_samples, blocks

    def checkpoint_image(self) -> CheckpointImage:
        """`checkpoint_state` as one object (numerics), for a `WriteCheckpoint` action."""
        state, ingested, n_samples, blocks = self.checkpoint_state()
        return CheckpointImage(state, ingested, n_samples, blocks, self._input_version)

    def checkpoint_written(self, image: CheckpointImage, now: float) -> None:
        """``image`` (from `checkpoint_image`) was written at ``now`` (seconds): as
        `checkpointed`, with the input version of that capture."""
        self._captured_version = image.version
        self.checkpointed(image.ingested, image.n_samples, image.blocks, now=now)

    def checkpointed(
        self,
        ingested: Mapping[str, int],
        n_samples: int,
        blocks: int,
        *,
        now: float,
    ) -> None:
        """The checkpoint `checkpoint_state` captured last (covering ``ingested``) was
        written at ``now`` (seconds); readings applied meanwhile are news for the next."""
        self.checkpoints += 1
        self._idle_tokens = max(0.0, self._tokens(now) - 1.0)  # every checkpoint spends one
        self._tokens_at = now
        self.last_checkpoint = now
        self._checkpointed_version = self._captured_version
        self.checkpointed_blocks = blocks
        self.checkpointed_n = n_samples
        self.durable = dict(ingested)
        est = self.estimator
        masked = est is None or est.privacy is None or est.n_pending_ == 0
        if self.snapshot_n() == self.published_n and masked:
            self.unpublished_since = math.inf  # (dropped readings were all that was new)

    def checkpoint_failed(self, now: float) -> int:
        """Writing the checkpoint failed at ``now`` (seconds): the next try follows the
        same rules, counted from now (no busy retry). Returns the failures so far."""
        self.checkpoint_failures += 1
        self.last_checkpoint = now
        return self.checkpoint_failures

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
