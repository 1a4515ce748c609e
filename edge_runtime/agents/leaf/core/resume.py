"""How a leaf continues after a restart: from its checkpoint or its retained snapshot.

`LeafRestore` is the part of `LeafCore` that takes an earlier incarnation's state: a
checkpoint (`restore_checkpoint`, then `continue_after` the retained snapshot so a ``seq`` is
never reused and ``n_samples`` never falls within an epoch) or, without one, the leaf's own
retained snapshot (`restore_snapshot`). No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from edge_runtime.agents.leaf.core.durability import Durability
from edge_runtime.agents.leaf.core.sequencing import SourceSequencer
from edge_runtime.fpca import FPCAEdge
from edge_runtime.wire import PrivacyParams, SubspaceMessage

__all__ = ["LeafRestore"]


class LeafRestore:
    """The restore part of `LeafCore` (a mixin: `LeafCore` holds the attributes below).

    Attributes
    ----------
    epoch : str
        The lineage's epoch (random hex id); a new one when samples were forgotten.
    seq : int
        Sequence number of the last snapshot of this lineage.
    restored_from : str or None
        ``"checkpoint"``, ``"retained snapshot"`` or None (a fresh start).
    """

    node_id: str
    epoch: str
    new_id: Callable[[], str]
    seq: int
    estimator: Any
    n_features: int | None
    sequencer: SourceSequencer
    durability: Durability
    snapshot: SubspaceMessage | None
    restored_from: str | None
    unpublished_since: float
    privacy: PrivacyParams | None

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
        blocks, n_samples = 0, -1
        if estimator is not None:
            self.n_features = estimator.n_features_
            blocks, n_samples = estimator.n_blocks_, estimator.n_samples_seen_
            if estimator.n_samples_seen_:
                self.unpublished_since = now
        self.epoch, self.seq = epoch, seq
        self.sequencer.restore(ingested)
        self.durability.restored(ingested, blocks=blocks, n_samples=n_samples)
        self.restored_from = "checkpoint"

    def continue_after(self, retained: SubspaceMessage) -> None:
        """After a checkpoint restore: never reuse a ``seq`` this lineage already
        published (the checkpoint may predate the last snapshot; a parent ignores a
        snapshot whose ``(epoch, seq)`` is not newer), and start a new epoch when that
        snapshot covers more samples than the checkpoint: within one epoch ``n_samples``
        never decreases, and parents quarantine a child whose does
        (`edge_runtime.agents.aggregator.core.plausibility.check_snapshot`)."""
        if retained.node_id == self.node_id and retained.epoch == self.epoch:
            self.seq = max(self.seq, retained.seq)
            if retained.n_samples > self.durability.checkpointed_n:
                self.epoch = self.new_id()  # a lineage that forgot some samples

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
        self._resume_from(msg, estimator)
        return None

    def _resume_from(self, msg: SubspaceMessage, estimator: Any) -> None:
        """Continue with ``estimator``, rebuilt from this leaf's own retained snapshot
        ``msg``: its epoch and ``seq``, each source after the last sequence ``msg`` covers,
        and those readings durable."""
        self.estimator = estimator
        self.n_features = msg.n_features
        self.epoch, self.seq, self.snapshot = msg.epoch, msg.seq, msg
        self.sequencer.restore(msg.sources)
        self.durability.restored(msg.sources)
        self.restored_from = "retained snapshot"
