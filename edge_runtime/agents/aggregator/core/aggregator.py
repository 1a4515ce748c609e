"""The aggregator core: child snapshots in -> merged snapshot out. No I/O, no clock.

`AggregatorCore` keeps one `ChildRecord` per child (its latest snapshot, when it arrived,
whether it is stale, whether the merge has it yet), merges them in a balanced `MergeTree`
(Alg. 2 of Grammenos et al. 2020, O(log k) merges per child update) and decides when to
publish with the same `PublishPolicy` deadband as a leaf: arrivals are coalesced, the merge is
published at most once per ``min_interval_s``, at least every ``max_interval_s`` while a
change is unpublished, and once arrivals pause (the trailing publish).

Membership (issue 23): an *open* aggregator (``admit`` bounds given) admits a child the
topology does not declare on its first plausible snapshot (a `MergeTree.insert`, counted in
``joins``); a closed one refuses it (``unknown_child``). `AggregatorCore.forget` drops a
child's snapshot from the merge (declared or admitted; the shell calls it when the child's
retained snapshot is deleted), and the next publish carries the merge of the others.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Container
from dataclasses import dataclass, replace

import numpy as np

from edge_runtime.agents.aggregator.core.guarantee import (
    combined_name,
    weakest_guarantee,
    weakest_privacy,
)
from edge_runtime.agents.aggregator.core.plausibility import (
    DEFAULT_INFLUENCE_CAP,
    DEFAULT_MAX_READING_RATE,
    ChildBounds,
    Quarantine,
    ResetLimiter,
    check_snapshot,
    influence_scales,
)
from edge_runtime.agents.common.core.node import NodeCore
from edge_runtime.agents.common.core.policy import PublishPolicy, StatusPolicy
from edge_runtime.fpca import Subspace
from edge_runtime.fpca.merge_tree import MergeTree
from edge_runtime.topology import NodeConfig
from edge_runtime.wire import SubspaceMessage

__all__ = [
    "MAX_FORGOTTEN_SHOWN",
    "MAX_RETIRED_EPOCHS",
    "QUARANTINE_POLICIES",
    "AggregatorCore",
    "ChildRecord",
    "combined_name",
    "is_newer",
    "weakest_guarantee",
    "weakest_privacy",
]

#: What happens to a quarantined child's last good snapshot: kept in the merge, or dropped.
QUARANTINE_POLICIES: tuple[str, ...] = ("keep", "drop")


MAX_RETIRED_EPOCHS = 16
"""Epochs remembered per child after a newer one replaced them (memory O(16) per child)."""

MAX_FORGOTTEN_SHOWN = 32
"""Most recent forgotten children listed in the status document (``extra.forgotten``)."""


def is_newer(new: SubspaceMessage, current: SubspaceMessage, retired: Container[str] = ()) -> bool:
    """Whether snapshot ``new`` supersedes ``current`` from the same child.

    Within one epoch (one lineage of the child's state) the larger ``seq`` wins, so
    duplicates and late arrivals change nothing. A different epoch means the child's
    state was started afresh: it wins, unless it is one of the child's ``retired`` epochs
    (one a later epoch already replaced, e.g. the old incarnation's last snapshot still in
    flight). No wall clock is compared: a Pi without a real-time clock may restart at
    1970 or an hour behind, and its new epoch must still be taken.
    """
    if new.epoch == current.epoch:
        return new.seq > current.seq
    return new.epoch not in retired


@dataclass
class ChildRecord:
    """What an aggregator knows of one child.

    Attributes
    ----------
    snapshot : SubspaceMessage
        The child's latest snapshot (by `is_newer`).
    arrived : float
        When it arrived, seconds.
    stale : bool
        The staleness policy has been applied to it.
    merged : bool
        The merge tree holds its current contribution.
    """

    snapshot: SubspaceMessage
    arrived: float
    stale: bool = False
    merged: bool = False


class AggregatorCore(NodeCore):
    """Synchronous state and decisions of one aggregator (or the root).

    Parameters
    ----------
    config : NodeConfig
        This node's settings (``rank``, staleness policy).
    children : list of str
        Child ids in topology order (the merge tree's leaf order, so results do not depend
        on arrival order, Lemma 10).
    policy, status_policy : PublishPolicy, StatusPolicy
    now : float
        Current time, seconds.
    echo_timeout_s : float, default 5
    deployment : str or None, default None
        The topology's name: stamped on this node's snapshots; a child's snapshot naming
        another deployment is refused (``foreign_deployment``). None checks nothing.
    bounds : mapping of str to ChildBounds, optional
        What the topology declares below each child (`plausibility.ChildBounds`); a child
        missing here gets no energy bound and `DEFAULT_MAX_READING_RATE`.
    influence_cap : float or None, default `DEFAULT_INFLUENCE_CAP`
        Bounded influence (`plausibility.influence_scales`); None merges children as they
        are.
    quarantine_policy : {"keep", "drop"}, default "keep"
        A quarantined child's last good snapshot stays in the merge (nothing is lost), or
        leaves it until the child sends a plausible snapshot again.
    admit : ChildBounds or None, default None
        None: a closed aggregator, only ``children`` are merged. Otherwise an open one: a
        child not in ``children`` is admitted on its first snapshot that passes the checks
        of `receive`, held to these bounds (the topology's `Topology.admitted_leaf`
        settings), and joins the merge tree after the declared children.

    Attributes
    ----------
    child_ids : list of str
        The declared children in topology order, then the admitted ones in order of
        admission (a forgotten admitted child leaves the list).
    joins, forgets : int
        Children admitted (an admitted child forgotten and admitted again counts twice),
        and children forgotten (`forget`).
    forgotten : deque of (str, int, float)
        The last `MAX_FORGOTTEN_SHOWN` forgotten children: id, the samples their last
        snapshot held, when.

    Notes
    -----
    Provenance of a published snapshot maps each leaf below to the samples of that leaf it
    covers; its ``privacy`` is `weakest_privacy` of the children it covers. A failed child's
    last snapshot stays in the merge (``stale_policy = "keep"``) until it is forgotten.
    """

    def __init__(
        self,
        config: NodeConfig,
        children: list[str],
        *,
        policy: PublishPolicy,
        status_policy: StatusPolicy,
        now: float,
        echo_timeout_s: float = 5.0,
        deployment: str | None = None,
        bounds: dict[str, ChildBounds] | None = None,
        influence_cap: float | None = DEFAULT_INFLUENCE_CAP,
        quarantine_policy: str = "keep",
        rng: random.Random,
        admit: ChildBounds | None = None,
    ) -> None:
        super().__init__(config.id, policy, status_policy, echo_timeout_s, now, rng=rng)
        if quarantine_policy not in QUARANTINE_POLICIES:
            raise ValueError(
                f"quarantine_policy must be one of {QUARANTINE_POLICIES}, got {quarantine_policy!r}"
            )
        self.bounds = dict(bounds or {})
        self.influence_cap = influence_cap
        self.quarantine_policy = quarantine_policy
        self.quarantined: dict[str, Quarantine] = {}
        self.releases = 0
        self._resets: dict[str, ResetLimiter] = {}
        self._retired: dict[str, deque[str]] = {}  # epochs a newer one replaced, per child
        self._scales: dict[str, float] = {}  # influence factor each child was merged with
        self.config = config
        self.deployment = deployment  # topology name: stamped out, checked in
        self.child_ids = list(children)
        self.declared = frozenset(children)
        self.admit = admit
        self.joins = 0
        self.forgets = 0
        self.forgotten: deque[tuple[str, int, float]] = deque(maxlen=MAX_FORGOTTEN_SHOWN)
        self._members = set(children)  # child_ids as a set
        self._gone: list[str] = []  # forgotten admitted children still in the tree
        self.children: dict[str, ChildRecord] = {}
        self.n_features: int | None = None  # the children's reading width, once known
        self._stale: set[str] = set()
        self.epoch = self.new_id()
        self.seq = 0
        self.snapshot: SubspaceMessage | None = None
        self.merges = 0
        self.duplicates = 0
        self.tree = MergeTree(self.child_ids)
        self._dirty: set[str] = set()
        self._merged_at = -math.inf  # when `snapshot_due` last merged
        self._merged_version = 0
        self._checked_version = -1
        self._moved = False
        self._merged: Subspace | None = None
        self.settle_status()

    # ------------------------------------------------------------------ inbound
    @property
    def open(self) -> bool:
        """Whether this aggregator admits children the topology does not declare."""
        return self.admit is not None

    def knows(self, child: str) -> bool:
        """Whether ``child`` is in `child_ids` (declared, or admitted and not forgotten)."""
        return child in self._members

    def admits(self, child: str) -> bool:
        """Whether a snapshot of ``child`` may be offered to `receive` (a known child, or
        any child of an open aggregator)."""
        return self.admit is not None or child in self._members

    def receive(self, child: str, msg: SubspaceMessage, now: float) -> str | None:
        """Take a child's snapshot; returns a rejection reason, ``"duplicate"`` or None.

        Reasons: ``unknown_child`` (a closed aggregator's child that is not declared),
        ``foreign_deployment`` (the snapshot names another deployment than
        ``deployment``; a snapshot naming none is accepted), ``node_mismatch``,
        ``n_features`` (differs from the siblings'); ``duplicate`` for a snapshot that is
        not newer (`is_newer`); the plausibility reasons of `plausibility.check_snapshot`,
        which also quarantine the child (see `quarantined`) until one of its snapshots
        passes. An open aggregator admits an undeclared child with its first accepted
        snapshot (``joins``; `child_ids`), checked against the ``admit`` bounds.
        """
        if not self.admits(child):
            return "unknown_child"
        if (
            self.deployment is not None
            and msg.deployment is not None
            and msg.deployment != self.deployment
        ):
            return "foreign_deployment"
        if msg.node_id != child:
            return "node_mismatch"
        width = self.n_features
        if width is not None and msg.n_features != width and set(self.children) != {child}:
            return "n_features"
        record = self.children.get(child)
        retired = self._retired.setdefault(child, deque(maxlen=MAX_RETIRED_EPOCHS))
        if record is not None and not is_newer(msg, record.snapshot, retired):
            self.duplicates += 1
            return "duplicate"
        bounds = self.bounds.get(child)
        if bounds is None:
            bounds = ChildBounds((), DEFAULT_MAX_READING_RATE)
            if child not in self.declared and self.admit is not None:
                bounds = self.admit
        resets = self._resets.setdefault(child, ResetLimiter())
        last, arrived = (None, now) if record is None else (record.snapshot, record.arrived)
        failed = check_snapshot(msg, last, arrived, bounds, resets, now)
        if failed is not None:
            self._quarantine(child, failed, now)
            return failed
        if self.quarantined.pop(child, None) is not None:
            self.releases += 1
        if record is not None and record.snapshot.epoch != msg.epoch:
            retired.append(record.snapshot.epoch)  # that lineage never comes back
        if child not in self._members:  # an open aggregator admits it
            self._members.add(child)
            self.child_ids.append(child)
            self.joins += 1
        self.children[child] = ChildRecord(msg, now)
        self.n_features = msg.n_features
        self._stale.discard(child)
        self._dirty.add(child)
        self.last_input = now
        if math.isinf(self.unpublished_since):
            self.unpublished_since = now
        return None

    def forget(self, child: str, now: float) -> int | None:
        """Drop ``child``'s snapshot from the merge (its retained snapshot was deleted).

        Everything the aggregator holds of the child goes: its record, quarantine, epochs
        and reset window; an admitted child also leaves `child_ids` and its tree slot is
        freed, a declared one keeps its (now empty) slot. The next publish, decided as any
        change (`snapshot_due`), carries the merge of the other children, whose
        ``n_samples`` is smaller by exactly the forgotten snapshot's. A later snapshot of
        the child is taken as a first one (admitted again by an open aggregator).

        Returns
        -------
        int or None
            The samples the forgotten snapshot held (0 for a child only quarantined), or
            None when nothing of ``child`` was held (nothing changes).
        """
        record = self.children.pop(child, None)
        quarantine = self.quarantined.pop(child, None)
        if record is None and quarantine is None:
            return None
        self._retired.pop(child, None)
        self._resets.pop(child, None)
        self._stale.discard(child)
        if child not in self.declared and child in self._members:
            self._members.discard(child)
            self.child_ids.remove(child)
            self._gone.append(child)
        n_samples = 0 if record is None else record.snapshot.n_samples
        self.forgets += 1
        self.forgotten.append((child, n_samples, now))
        if not self.children:
            self.n_features = None
        if record is not None:
            self._dirty.add(child)
            self.last_input = now
            if math.isinf(self.unpublished_since):
                self.unpublished_since = now
        return n_samples

    def _quarantine(self, child: str, reason: str, now: float) -> None:
        entry = self.quarantined.get(child)
        if entry is not None:
            entry.failures += 1
            entry.reason = reason
            return
        self.quarantined[child] = Quarantine(reason, now)
        if self.quarantine_policy == "drop" and child in self.children:
            self._dirty.add(child)
            if math.isinf(self.unpublished_since):
                self.unpublished_since = now

    def _excluded(self, child: str) -> bool:
        """Whether the merge leaves ``child`` out (stale and dropped, or quarantined and
        dropped)."""
        record = self.children[child]
        if record.stale and self.config.stale_policy == "drop":
            return True
        return self.quarantine_policy == "drop" and child in self.quarantined

    def check_staleness(self, now: float) -> list[str]:
        """Apply the staleness policy to children silent for ``stale_after_s``; returns
        the children that just became stale."""
        cfg = self.config
        if cfg.stale_policy == "keep":
            return []
        newly = []
        for child, record in self.children.items():
            if record.stale or now - record.arrived < cfg.stale_after_s:
                continue
            record.stale = True
            self._stale.add(child)
            self._dirty.add(child)
            newly.append(child)
        if newly and math.isinf(self.unpublished_since):
            self.unpublished_since = now
        return newly

    # ------------------------------------------------------------------- merge
    def pending_cells(self) -> int:
        """Matrix cells the pending merge touches (the shell offloads large ones): the
        changed children's and, with an influence cap, the siblings whose factor changes
        with them (`merge` updates those too)."""
        if not self._dirty:
            return 0  # nothing changed: no factor changes either
        _, _, rescaled = self._plan()
        pending = (self._dirty | rescaled) & self.children.keys()
        cells = sum(self.children[c].snapshot.subspace.basis.size for c in pending)
        return cells * max(1, self.tree.depth + 1)

    def cells(self) -> int:
        """Matrix cells the next merge touches (`pending_cells`): the shell runs a merge
        this large in a worker thread, under its core lock."""
        return self.pending_cells()

    def _plan(self) -> tuple[dict[str, SubspaceMessage], dict[str, float], set[str]]:
        """The snapshots the merge includes (not `_excluded`), their influence factors
        (`influence_scales`, all 1 without a cap), and the children whose factor differs
        from the one they were merged with."""
        included = {c: r.snapshot for c, r in self.children.items() if not self._excluded(c)}
        scales = (
            dict.fromkeys(included, 1.0)
            if self.influence_cap is None
            else influence_scales(included, self.influence_cap)
        )
        rescaled = {c for c, f in scales.items() if f != self._scales.get(c, 1.0)}
        return included, scales, rescaled

    def merge(self) -> tuple[Subspace | None, list[SubspaceMessage]]:
        """Put the changed children into the merge tree (numerics).

        Not thread-safe, like every core: the shell serialises all calls on one core
        (`CoreShell._numerics`), so no `receive` runs while a merge does.
        Returns the merged subspace and the snapshots it covers.
        """
        included, scales, rescaled = self._plan()
        dirty, self._dirty = self._dirty | rescaled, set()
        gone, self._gone = self._gone, []
        for child in gone:  # forgotten admitted children give their slot back
            if child not in self._members:
                self.tree.discard(child)
                self._scales.pop(child, None)
                self.merges += self.tree.merges_last_update
        for child in self.child_ids:
            if child not in dirty:
                continue
            record = self.children.get(child)
            if record is None or child not in included:  # forgotten, or excluded
                if child in self.tree:
                    self.tree.remove(child)
                    self.merges += self.tree.merges_last_update
                self._scales.pop(child, None)
            else:
                sub = record.snapshot.subspace
                weight = scales[child] * (self.config.stale_weight if record.stale else 1.0)
                if weight != 1.0:  # downweight: stale and/or over its influence cap
                    sub = Subspace(sub.basis, sub.singular_values * weight, sub.n_samples, sub.mean)
                if child not in self.tree:  # admitted (again): the leftmost free slot
                    self.tree.insert(child)
                self.tree.update(child, sub)
                self.merges += self.tree.merges_last_update
                self._scales[child] = scales[child]
            if record is not None:
                record.merged = True
        covered = [included[c] for c in self.child_ids if c in included]
        if dirty or gone:
            self._merged_version += 1
            self._merged = self.tree.result
            if self._merged is None and self.snapshot is not None:  # every child forgotten
                self._merged = _empty_like(self.snapshot.subspace)
            self._covered = covered
        return self._merged, covered

    # ----------------------------------------------------------------- publish
    def snapshot_due(self, now: float) -> str | None:
        """Merge what arrived (if the rate limit allows a publish) and decide."""
        if math.isinf(self.unpublished_since) or not self.policy.may_publish(
            now, self.last_publish
        ):
            return None
        merged, _ = self.merge()
        self._merged_at = now
        if merged is None:
            self.unpublished_since = math.inf
            return None
        first = self.snapshot is None
        if not first and self._checked_version != self._merged_version:
            previous = None if self.snapshot is None else self.snapshot.subspace
            self._moved = self.policy.moved(previous, merged, self.config.rank)
            self._checked_version = self._merged_version
        return self._decide(now, moved=self._moved, first=first)

    def make_snapshot(self, timestamp: float, reason: str) -> SubspaceMessage | None:
        """The merged snapshot with the next ``seq`` (after `snapshot_due`)."""
        if self._merged is None:
            return None
        covered = self._covered
        provenance: dict[str, int] = {}
        for snapshot in covered:
            provenance.update(snapshot.provenance)
        self.seq += 1
        self.decisions[reason] += 1
        return SubspaceMessage(
            node_id=self.node_id,
            epoch=self.epoch,
            seq=self.seq,
            subspace=self._merged,
            timestamp=timestamp,
            privacy=weakest_privacy(covered),
            provenance=provenance,
            deployment=self.deployment,
        )

    def snapshot_published(self, msg: SubspaceMessage, now: float) -> None:
        """``msg`` was handed to the broker at ``now``."""
        self.snapshot = msg
        self.last_publish = now
        self._moved = False
        self._checked_version = self._merged_version
        if not self._dirty:
            self.unpublished_since = math.inf
        else:  # arrivals since the merge are unpublished since then (see LeafCore)
            self.unpublished_since = max(self.unpublished_since, self._merged_at)

    @property
    def unpublished(self) -> bool:
        """Whether a change (an arrival, a stale child) is not yet published."""
        return not math.isinf(self.unpublished_since)

    def model(self, snapshot: SubspaceMessage | None = None) -> SubspaceMessage:
        """``snapshot`` (default: the latest published) truncated to this node's ``rank``:
        the global estimate."""
        snap = self.snapshot if snapshot is None else snapshot
        assert snap is not None
        return replace(snap, subspace=snap.subspace.truncate(self.config.rank))

    def _publish_pending(self) -> tuple[bool, bool]:
        return self._moved or bool(self._dirty), self.snapshot is None

    def _other_wakeups(self, now: float) -> list[float]:
        cfg = self.config
        if cfg.stale_policy == "keep":
            return []
        waiting = [r.arrived for r in self.children.values() if not r.stale]
        return [min(waiting) + cfg.stale_after_s] if waiting else []

    # ------------------------------------------------------------------ status
    def health(self) -> tuple[object, ...]:
        return (
            *super().health(),
            frozenset(self._stale),
            frozenset(self.quarantined),
            self.joins,
            self.forgets,
        )

    def coverage(self) -> dict[str, int]:
        """Samples covered per leaf in the latest published snapshot."""
        return {} if self.snapshot is None else dict(self.snapshot.provenance)

    def status_extra(self, now: float) -> dict[str, object]:
        """The aggregator part of the JSON status document."""
        arrived = [r.arrived for r in self.children.values()]
        return {
            "children": {
                c: {
                    "seq": r.snapshot.seq,
                    "n_samples": r.snapshot.n_samples,
                    "epsilon": None if r.snapshot.privacy is None else r.snapshot.privacy.epsilon,
                    "mechanism": None
                    if r.snapshot.privacy is None
                    else r.snapshot.privacy.mechanism,
                }
                for c, r in self.children.items()
            },
            "coverage": self.coverage(),
            "open": self.open,
            "joins": self.joins,
            "joined": [c for c in self.child_ids if c not in self.declared],
            "forgets": self.forgets,
            "forgotten": {
                c: {"n_samples": n, "since_s": round(now - t, 3)} for c, n, t in self.forgotten
            },
            "merges": self.merges,
            "stale_children": sorted(self._stale),
            "quarantined": {
                c: {"reason": q.reason, "since_s": round(now - q.since, 3), "failures": q.failures}
                for c, q in sorted(self.quarantined.items())
            },
            "released": self.releases,
            "influence_capped": {
                c: round(f, 6) for c, f in sorted(self._scales.items()) if f < 1.0
            },
            "last_update_age_s": round(now - max(arrived, default=self.started), 3),
            "duplicates": self.duplicates,
            "reconnects": max(0, self.connections - 1),
            "undelivered": self.undelivered,
            "publish": dict(self.decisions),
        }


def _empty_like(subspace: Subspace) -> Subspace:
    """The summary of no data of ``subspace``'s width: rank 0, ``n_samples`` 0 (centred
    with a zero mean if it is), published once every child is forgotten so the forget
    reaches the levels above."""
    d = subspace.n_features
    mean = None if subspace.mean is None else np.zeros(d)
    return Subspace(np.zeros((d, 0)), np.zeros(0), 0, mean)
