"""What a leaf has made durable, and what it confirms to its publishers.

`LeafDurability` is the part of `LeafCore` that decides when to checkpoint
(``checkpoint_every`` blocks, when idle with news, on exit), what a checkpoint holds, and
the confirmations (`ConfirmMessage`: ingested, durable, gaps) publishers replay from
(`ConfirmPolicy`). Readings are durable once a checkpoint covers them, or, without
checkpoints, once a published snapshot does. No I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from edge_runtime.agents.policy import ConfirmPolicy
from edge_runtime.agents.sequencing import SourceSequencer
from edge_runtime.wire import ConfirmMessage, SubspaceMessage

__all__ = ["LeafDurability"]


class LeafDurability:
    """The durability part of `LeafCore` (a mixin: `LeafCore` holds the attributes below).

    Attributes
    ----------
    durable : dict of str to int
        Per source, the last sequence number a restart would not lose.
    checkpointing : bool
        Whether the shell writes checkpoints.
    checkpoint_every : int
        Checkpoint after this many completed blocks.
    checkpoints : int
        Checkpoints written.
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
    durable: dict[str, int]
    checkpointing: bool
    checkpoint_every: int
    checkpoints: int
    checkpointed_blocks: int
    checkpointed_n: int
    confirm_policy: ConfirmPolicy
    session: str
    unpublished_since: float
    _last_confirm: float
    _confirm_sent: tuple[object, ...]

    def _drops_uncovered(self) -> bool:
        """Readings were ingested without changing the estimator (dropped by `screen`, or
        refused by it) since the state a restart resumes from, and nothing else: its
        snapshot (or checkpoint) taken again would make them durable."""
        if self.checkpointing:
            return self.n_samples == self.checkpointed_n and self.ingested != self.durable
        snap = self.snapshot
        return snap is not None and self.ingested != dict(snap.sources)

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
