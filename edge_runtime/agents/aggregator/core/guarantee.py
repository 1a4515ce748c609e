"""The privacy guarantee of a merge: the weakest of the children it covers. No I/O."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from edge_runtime.wire import MAX_PRIVACY_NAME_CHARS, PrivacyParams, SubspaceMessage

__all__ = ["combined_name", "weakest_guarantee", "weakest_privacy"]


def combined_name(names: Iterable[str]) -> str:
    """One mechanism (or neighbours) name for several: the name if they all share it, else
    the sorted distinct names joined by ``+`` (a name that is already a join is split
    first, so ``"gaussian"`` and ``"fpca-eq8+gaussian"`` give ``"fpca-eq8+gaussian"``).
    ``"mixed"`` if the join would exceed `edge_runtime.wire.MAX_PRIVACY_NAME_CHARS`.
    """
    parts = sorted({part for name in names for part in name.split("+") if part})
    joined = "+".join(parts)
    return joined if len(joined) <= MAX_PRIVACY_NAME_CHARS else "mixed"


def weakest_privacy(snapshots: Iterable[SubspaceMessage]) -> PrivacyParams | None:
    """The guarantee of a merge of ``snapshots``: the weakest of theirs.

    None (no guarantee) if any snapshot has none, or if there are none; else
    ``PrivacyParams(max epsilon, max delta, max clip_norm, mechanism, neighbours)``, where
    ``mechanism`` and ``neighbours`` are the snapshots' shared name, or their distinct
    names sorted and joined by ``+`` (`combined_name`: ``"fpca-eq8+gaussian"``) when they
    differ. Why this bounds every
    reading: each reading is in exactly one leaf's data, and that leaf's snapshots are
    post-processing of its masked blocks, so by parallel composition over the disjoint
    leaves (and post-processing for the merges above them) a reading of leaf ``i`` enjoys
    ``(epsilon_i, delta_i)``-DP with respect to everything published, and
    ``(max epsilon, max delta)`` is weaker than each leaf's. ``clip_norm`` is reported for
    information: every reading is clipped to its leaf's norm before it enters a block, so
    the guarantee holds whatever the reading's size; the largest is the leaf with the
    widest range. The argument assumes each reading reaches one leaf: a reading fed to
    several leaves (e.g. through overlapping sensor topics) spends each one's budget, and
    its guarantee is their sum (sequential composition), which no snapshot can report.
    """
    return weakest_guarantee([snapshot.privacy for snapshot in snapshots])


def weakest_guarantee(params: Sequence[PrivacyParams | None]) -> PrivacyParams | None:
    """The weakest of ``params`` (max epsilon, delta, clip norm; names joined by
    `combined_name`), or None if any is None or there are none (`weakest_privacy` of
    snapshots; FedPower's root over the guarantees of its leaves' replies)."""
    if not params or any(p is None for p in params):
        return None
    known = [p for p in params if p is not None]
    return PrivacyParams(
        max(p.epsilon for p in known),
        max(p.delta for p in known),
        max(p.clip_norm for p in known),
        mechanism=combined_name(p.mechanism for p in known),
        neighbours=combined_name(p.neighbours for p in known),
    )
