"""How a leaf continues after a restart: from its checkpoint or its retained snapshot.

`LeafRestore` is the part `LeafCore` holds (attribute ``restore``) that reads an earlier
incarnation's state: a checkpoint (`LeafRestore.from_checkpoint`, then
`LeafRestore.continued` with the retained snapshot so a ``seq`` is never reused and
``n_samples`` never falls within an epoch) or, without one, the leaf's own retained snapshot
(`LeafRestore.from_snapshot`). Each returns a `Resumed`, which the core takes over; the part
keeps only where the state came from (``restored_from``). No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from edge_runtime.fpca import FPCAEdge
from edge_runtime.wire import PrivacyParams, SubspaceMessage

__all__ = ["LeafRestore", "Resumed"]


@dataclass(frozen=True)
class Resumed:
    """The state a leaf continues with after a restart.

    Attributes
    ----------
    estimator : FPCAEdge, GramEstimator or None
        The rebuilt estimator (None: a checkpoint taken before the first reading).
    n_features : int or None
        Width of a reading (None with no estimator).
    epoch : str
        The lineage's epoch (hex id).
    seq : int
        Sequence number of the lineage's last snapshot.
    ingested : dict of str to int
        Per source, the last sequence number the state covers (durable from now on).
    blocks, n_samples : int
        Blocks and samples a checkpoint covers (``0`` and ``-1`` for a retained snapshot:
        `Durability.restored`'s defaults).
    snapshot : SubspaceMessage or None
        The retained snapshot resumed from (None after a checkpoint).
    """

    estimator: Any
    n_features: int | None
    epoch: str
    seq: int
    ingested: dict[str, int]
    blocks: int = 0
    n_samples: int = -1
    snapshot: SubspaceMessage | None = None


class LeafRestore:
    """The restore part of a leaf core: reads checkpoints and retained snapshots.

    Parameters
    ----------
    node_id : str
        The leaf's id (a retained snapshot of another node is not its own).
    new_id : callable returning str
        Source of a new epoch (`NodeCore.new_id`).

    Attributes
    ----------
    restored_from : str or None
        ``"checkpoint"``, ``"retained snapshot"`` or None (a fresh start).
    """

    def __init__(self, node_id: str, new_id: Callable[[], str]) -> None:
        self.node_id = node_id
        self._new_id = new_id
        self.restored_from: str | None = None

    def from_checkpoint(self, state: Mapping[str, Any], estimator: FPCAEdge | None) -> Resumed:
        """The state of a checkpoint: ``state`` as written from `LeafCore.checkpoint_state`,
        ``estimator`` rebuilt from it (`FPCAEdge.from_state`, by the caller, who owns the
        noise generator). Readings the checkpoint covers are durable.

        Raises
        ------
        KeyError, ValueError, TypeError
            If ``state`` lacks the leaf's keys or holds values of the wrong type.
        """
        epoch, seq = str(state["leaf_epoch"]), int(state["leaf_seq"])
        ingested = {str(k): int(v) for k, v in dict(state["ingested"]).items()}
        n_features, blocks, n_samples = None, 0, -1
        if estimator is not None:
            n_features = estimator.n_features_
            blocks, n_samples = estimator.n_blocks_, estimator.n_samples_seen_
        self.restored_from = "checkpoint"
        return Resumed(estimator, n_features, epoch, seq, ingested, blocks, n_samples)

    def continued(
        self, epoch: str, seq: int, checkpointed_n: int, retained: SubspaceMessage
    ) -> tuple[str, int]:
        """After a checkpoint restore at ``(epoch, seq)`` covering ``checkpointed_n``
        samples, the ``(epoch, seq)`` to continue with given this lineage's ``retained``
        snapshot: never reuse a ``seq`` already published (the checkpoint may predate the
        last snapshot; a parent ignores a snapshot whose ``(epoch, seq)`` is not newer), and
        a new epoch when that snapshot covers more samples than the checkpoint: within one
        epoch ``n_samples`` never decreases, and parents quarantine a child whose does
        (`edge_runtime.agents.aggregator.core.plausibility.check_snapshot`)."""
        if retained.node_id == self.node_id and retained.epoch == epoch:
            seq = max(seq, retained.seq)
            if retained.n_samples > checkpointed_n:
                epoch = self._new_id()  # a lineage that forgot some samples
        return epoch, seq

    def usable(self, msg: SubspaceMessage, privacy: PrivacyParams | None) -> str | None:
        """Why this leaf's retained snapshot ``msg`` may not be resumed from under the
        configured ``privacy``, or None: ``"empty"`` (another node's, or of no samples),
        ``"privacy_mismatch"`` (its `PrivacyParams`, mechanism included, differ)."""
        if msg.node_id != self.node_id or msg.n_samples == 0:
            return "empty"
        if msg.privacy != privacy:  # budget, clip norm, mechanism, neighbours
            return "privacy_mismatch"
        return None

    def from_snapshot(
        self,
        msg: SubspaceMessage,
        privacy: PrivacyParams | None,
        options: Callable[[int], dict[str, Any]],
    ) -> Resumed | str:
        """The state of this leaf's own retained snapshot ``msg`` (no checkpoint), for a
        leaf configured with ``privacy`` whose estimator settings for a width are
        ``options`` (`LeafCore.estimator_options`).

        The estimator resumes from the snapshot (`FPCAEdge.from_subspace`, its float32
        basis re-orthonormalised first), each source continues after the last sequence the
        snapshot covers (`SubspaceMessage.sources`), and those readings are durable.

        Returns
        -------
        Resumed or str
            The state, or why the snapshot was not used (`usable`; ``"unusable: ..."``).
            A snapshot carries no release horizon and needs none: a ``"gaussian"``
            estimator restored from it starts a new segment of releases
            (`FPCAEdge.from_subspace`), and the snapshot itself is post-processing.
        """
        problem = self.usable(msg, privacy)
        if problem is not None:
            return problem
        try:
            estimator = FPCAEdge.from_subspace(
                msg.subspace.reorthonormalised(), **options(msg.n_features)
            )
        except (ValueError, TypeError) as exc:
            return f"unusable: {exc}"
        return self.resumed(msg, estimator)

    def resumed(self, msg: SubspaceMessage, estimator: Any) -> Resumed:
        """The state of ``estimator``, rebuilt from this leaf's own retained snapshot
        ``msg``: its epoch and ``seq``, each source after the last sequence ``msg`` covers,
        and those readings durable."""
        self.restored_from = "retained snapshot"
        return Resumed(
            estimator, msg.n_features, msg.epoch, msg.seq, dict(msg.sources), snapshot=msg
        )
