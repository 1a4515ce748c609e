"""What a leaf has made durable, and what it confirms to its publishers.

`Durability` is the part a `LeafCore` holds that decides when to checkpoint and keeps what
is durable, and when to confirm readings (`ConfirmMessage`: ingested, durable, gaps) to the
publishers that replay from it (`ConfirmPolicy`). Readings are durable once a checkpoint
covers them, or, without checkpoints, once a published snapshot does. No I/O, no clock:
the time and what the rest of the leaf knows (its input version, what it ingested, its
blocks, when its stream pauses) come in as arguments, and `Durability.deadline` tells the
leaf when to look again.

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

__all__ = [
    "CHECKPOINT_INTERVAL_S",
    "IDLE_CHECKPOINT_BURST",
    "IDLE_CHECKPOINT_GAP_S",
    "CheckpointImage",
    "Durability",
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
    """A leaf's checkpoint captured at one instant (`LeafCore.checkpoint_image`):
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


class Durability:
    """A leaf's checkpoints and confirmations: when each is due, and what is durable.

    State: O(sources) (``durable`` and the last confirmation's key).

    Parameters
    ----------
    checkpointing : bool
        Whether the leaf's shell writes checkpoints; then readings are durable once
        checkpointed, else once covered by a published snapshot.
    checkpoint_every : int or None
        Also checkpoint after this many completed blocks (None: by time only).
    checkpoint_interval_s : float
        Most seconds between checkpoints while there is news.
    confirm_policy : ConfirmPolicy
    now : float
        The current time, seconds.
    session : str
        This process (random hex id): a restart shows as a new session.

    Attributes
    ----------
    durable : dict of str to int
        Per source, the last sequence number a restart would not lose.
    last_checkpoint : float
        When the last checkpoint was written or failed (or the leaf was made), seconds.
    checkpoints, checkpoint_failures : int
        Checkpoints written; checkpoints that could not be written.
    checkpointed_blocks, checkpointed_n : int
        Blocks and samples the last checkpoint covers (``checkpointed_n = -1``: none).

    Raises
    ------
    ValueError
        If ``checkpoint_every < 1`` or ``checkpoint_interval_s`` is not > 0.
    """

    def __init__(
        self,
        *,
        checkpointing: bool,
        checkpoint_every: int | None,
        checkpoint_interval_s: float,
        confirm_policy: ConfirmPolicy,
        now: float,
        session: str,
    ) -> None:
        if checkpoint_every is not None and checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1 block, got {checkpoint_every}")
        if not checkpoint_interval_s > 0:
            raise ValueError(
                f"checkpoint_interval_s must be > 0 seconds, got {checkpoint_interval_s}"
            )
        self.checkpointing = checkpointing
        self.checkpoint_every = checkpoint_every
        self.checkpoint_interval_s = float(checkpoint_interval_s)
        self.confirm_policy = confirm_policy
        self.session = session
        self.durable: dict[str, int] = {}
        self.last_checkpoint = now
        self._idle_tokens, self._tokens_at = float(IDLE_CHECKPOINT_BURST), now
        self.checkpoints = 0
        self.checkpoint_failures = 0
        self.checkpointed_blocks = 0
        self.checkpointed_n = -1
        self._checkpointed_version = 0
        self._last_confirm = -math.inf
        self._confirm_sent: tuple[object, ...] = ()

    # ------------------------------------------------------------- checkpoints
    def state_changed(self, version: int) -> bool:
        """The estimator changed (input ``version``: rows applied, or masked by a flush)
        since the last checkpoint."""
        return version != self._checkpointed_version

    def news(self, version: int, ingested: Mapping[str, int]) -> bool:
        """Whether a checkpoint now would record anything the last one did not: the input
        ``version`` moved, or readings were ``ingested`` (and dropped) since."""
        return self.checkpointing and (self.state_changed(version) or ingested != self.durable)

    def deadline(
        self,
        *,
        version: int,
        ingested: Mapping[str, int],
        blocks: int,
        first_snapshot_out: bool,
        paused_at: float,
    ) -> float:
        """When the next checkpoint falls due without new input, seconds (``inf``: none is
        pending, ``-inf``: due now); see the module docstring for the rules.

        ``blocks``: completed blocks now; ``first_snapshot_out``: the leaf's first snapshot
        is published and it never restored nor checkpointed; ``paused_at``: when the stream
        counts as paused (its last input plus the leaf's ``idle_s``), seconds.
        """
        if not self.news(version, ingested):
            return math.inf
        every = self.checkpoint_every
        if every is not None and blocks - self.checkpointed_blocks >= every:
            return -math.inf
        if first_snapshot_out and self.checkpoints == 0:
            return -math.inf  # the first snapshot is out: the first checkpoint with it
        paused = max(
            paused_at,
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

    def blocks_due(self, blocks: int) -> bool:
        """``checkpoint_every`` blocks were completed since the last checkpoint (``blocks``
        completed now): the shell writes one before it acknowledges the message that
        completed them (a publish's PUBACK wait or the write itself would otherwise let
        later messages be acknowledged first, and a crash then lose more than the cadence)."""
        every = self.checkpoint_every
        return (
            self.checkpointing and every is not None and blocks - self.checkpointed_blocks >= every
        )

    def written(
        self, version: int, ingested: Mapping[str, int], n_samples: int, blocks: int, now: float
    ) -> None:
        """A checkpoint captured at input ``version``, covering ``ingested``, ``n_samples``
        samples and ``blocks`` blocks, was written at ``now`` (seconds); readings applied
        meanwhile are news for the next."""
        self.checkpoints += 1
        self._idle_tokens = max(0.0, self._tokens(now) - 1.0)  # every checkpoint spends one
        self._tokens_at = now
        self.last_checkpoint = now
        self._checkpointed_version = version
        self.checkpointed_blocks = blocks
        self.checkpointed_n = n_samples
        self.durable = dict(ingested)

    def failed(self, now: float) -> int:
        """Writing the checkpoint failed at ``now`` (seconds): the next try follows the
        same rules, counted from now (no busy retry). Returns the failures so far."""
        self.checkpoint_failures += 1
        self.last_checkpoint = now
        return self.checkpoint_failures

    def restored(
        self, durable: Mapping[str, int], *, blocks: int = 0, n_samples: int = -1
    ) -> None:
        """The leaf continues from earlier state covering ``durable`` (a checkpoint of
        ``blocks`` blocks and ``n_samples`` samples, or a retained snapshot: the defaults)."""
        self.durable = dict(durable)
        self.checkpointed_blocks = blocks
        self.checkpointed_n = n_samples

    def covered(self, ingested: Mapping[str, int]) -> None:
        """Without checkpoints: a published snapshot covers ``ingested``, now durable."""
        self.durable = dict(ingested)

    def mark(self, durable: Mapping[str, int]) -> None:
        """Readings made durable elsewhere (a published snapshot, a secure-aggregation slot
        revealed): per source, up to the sequence number ``durable`` names."""
        self.durable = {**self.durable, **durable}

    # ------------------------------------------------------------- confirmations
    def confirm_key(
        self, epoch: str, reconnects: int, gaps: Mapping[str, int]
    ) -> tuple[object, ...]:
        """What a confirmation says; a new one is due when it changes (the first connection
        of a fresh leaf is no change: nothing can have been lost before it)."""
        return (
            epoch,
            reconnects,
            tuple(sorted(self.durable.items())),
            tuple(sorted(gaps.items())),
        )

    def confirm_changed(self, key: tuple[object, ...]) -> bool:
        """Whether ``key`` (`confirm_key`) differs from the last confirmation's."""
        return key != self._confirm_sent

    def confirm_next(self, now: float, key: tuple[object, ...]) -> float:
        """When a changed confirmation may next go out (``inf``: nothing changed), seconds."""
        if not self.confirm_changed(key):
            return math.inf
        return self.confirm_policy.next_check(now, last_sent=self._last_confirm, changed=True)

    def confirm_due(self, now: float, key: tuple[object, ...], *, force: bool = False) -> bool:
        """Whether a confirmation goes out at ``now`` (`ConfirmPolicy`; ``force``: now, if it
        changed)."""
        changed = self.confirm_changed(key)
        if force and changed:
            return True
        return self.confirm_policy.decide(now, last_sent=self._last_confirm, changed=changed)

    def confirmed(self, now: float, key: tuple[object, ...]) -> None:
        """The confirmation saying ``key`` was published at ``now`` (seconds)."""
        self._last_confirm = now
        self._confirm_sent = key

    def nothing_to_confirm(self, key: tuple[object, ...]) -> None:
        """A fresh leaf: ``key`` is what it would confirm, and no news (no rate limit spent)."""
        self._confirm_sent = key
