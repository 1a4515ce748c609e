"""The aggregator core: child snapshots in -> merged snapshot out. No I/O, no clock.

`AggregatorCore` keeps one `ChildRecord` per child (its latest snapshot, when it arrived,
whether it is stale, whether the merge has it yet), merges them in a balanced `MergeTree`
(Alg. 2 of Grammenos et al. 2020, O(log k) merges per child update) and decides when to
publish with the same `PublishPolicy` deadband as a leaf: arrivals are coalesced, the merge is
published at most once per ``min_interval_s``, at least every ``max_interval_s`` while a
change is unpublished, and once arrivals pause (the trailing publish).

The core holds its parts, each owning its state: `Membership` (an *open* aggregator, with
``admit`` bounds, admits a child the topology does not declare on its first plausible
snapshot, a `MergeTree.insert` counted in ``joins``; a closed one refuses it,
``unknown_child``; `AggregatorCore.forget` drops a child's snapshot from the merge when its
retained snapshot is deleted, and the next publish carries the merge of the others),
`Plausibility` (checks, quarantines, influence factors) and the release strategy
(`release.AggregatorRelease`: a secure-aggregation site's slots, or nothing).

One step: `AggregatorCore.step` returns what happens at ``now``, in order, as actions
(`edge_runtime.agents.common.core.actions`); the shell and the simulation carry them out and
report back (`published`, `checkpoint_written`, `checkpoint_failed`).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import replace

from edge_runtime.agents.aggregator.core.child_record import (
    MAX_RETIRED_EPOCHS,
    ChildRecord,
    empty_like,
    is_newer,
)
from edge_runtime.agents.aggregator.core.guarantee import (
    combined_name,
    weakest_guarantee,
    weakest_privacy,
)
from edge_runtime.agents.aggregator.core.membership import MAX_FORGOTTEN_SHOWN, Membership
from edge_runtime.agents.aggregator.core.plausibility import (
    DEFAULT_INFLUENCE_CAP,
    QUARANTINE_POLICIES,
    ChildBounds,
    Plausibility,
)
from edge_runtime.agents.aggregator.core.release import AggregatorRelease, DirectRelease
from edge_runtime.agents.common.core.actions import Action, Publish, Wake, WriteCheckpoint
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
    release : AggregatorRelease or None, default None
        How the children release what is merged (`release.AggregatorRelease`): None is
        `DirectRelease` (each child publishes its own snapshot); a secure-aggregation site
        holds a `SecureSumRelease`, whose estimate is merged as its pseudo-child. The
        strategy's children (`AggregatorRelease.children`) are the ones the core merges.

    Attributes
    ----------
    membership : Membership
        Who the children are: declared, admitted, forgotten (`child_ids`, `joins`,
        `forgets`, `forgotten` read it).
    plausibility : Plausibility
        The children's checks, quarantines and influence factors (`quarantined`,
        `releases` read it).
    release : AggregatorRelease
        How the children release what is merged.

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
        release: AggregatorRelease | None = None,
    ) -> None:
        self.release: AggregatorRelease = DirectRelease() if release is None else release
        children = self.release.children(list(children))
        super().__init__(config.id, policy, status_policy, echo_timeout_s, now, rng=rng)
        self.plausibility = Plausibility(bounds or {}, influence_cap, quarantine_policy)
        self.membership = Membership(children, admit)
        self._retired: dict[str, deque[str]] = {}  # epochs a newer one replaced, per child
        self._scales: dict[str, float] = {}  # influence factor each child was merged with
        self.config = config
        self.deployment = deployment  # topology name: stamped out, checked in
        self.children: dict[str, ChildRecord] = {}
        self.n_features: int | None = None  # the children's reading width, once known
        self._stale: set[str] = set()
        self.epoch = self.new_id()
        self.seq = 0
        self.snapshot: SubspaceMessage | None = None
        self.merges = 0
        self.duplicates = 0
        self.tree = MergeTree(self.membership.child_ids)
        self._dirty: set[str] = set()
        self._merged_at = -math.inf  # when `snapshot_due` last merged
        self._merged_version = 0
        self._checked_version = -1
        self._moved = False
        self._merged: Subspace | None = None
        self._events: list[tuple[str, dict[str, object]]] = []
        self.settle_status()

    # -------------------------------------------------------------------- step
    def step(self, now: float, wall: float) -> list[Action]:
        """What this aggregator does at ``now``, in order; the caller carries it out.

        1. the release strategy's step (`AggregatorRelease.step`: a secure-aggregation
           site writes its running sum, publishes its slot's roster, deliveries, unmask
           request and outcome, and gives its estimate to the merge as its pseudo-child);
           a slot's end publishes the status document at once (``reason="slot"``);
        2. the staleness policy (`check_staleness`);
        3. the merge, when the publish policy says so (`snapshot_due`): ``subspace``
           (retained), and at the root also ``model`` (the merge truncated to ``rank``);
        4. the status document, when the status policy says so (``reason="due"``);
        5. `Wake` at `next_wakeup`.

        A ``status`` `Publish` carries no message: the executor publishes the node's status
        document as it is when the action is carried out. The caller reports what it
        carried out: `published` (after the broker's acknowledgement),
        `checkpoint_written` or `checkpoint_failed`. What the log should say about the step
        (stale children, a refused site snapshot) is in `take_events`.

        Parameters
        ----------
        now : float
            Seconds, the caller's monotonic clock.
        wall : float
            Seconds since the Unix epoch, stamped on the snapshots made now.

        Returns
        -------
        list of Action
        """
        actions: list[Action] = []
        release = self.release.step(now, wall)
        actions += release.actions
        if release.snapshot is not None:  # the site's estimate, merged as a child's
            site = release.snapshot
            refused = self.receive(site.node_id, site, now)
            if refused is not None:
                self._events.append(
                    ("secagg_snapshot_refused", {"reason": refused, "seq": site.seq})
                )
        if release.ended:  # the slot's outcome goes into the status document at once
            actions.append(Publish("status", None, reason="slot"))
        policy = self.config.stale_policy
        for child in self.check_staleness(now):
            self._events.append(("child_stale", {"child": child, "policy": policy}))
        reason = self.snapshot_due(now)
        if reason is not None:
            actions += self._snapshot_actions(wall, reason)
        if not release.ended and self.status_due(now):
            actions.append(Publish("status", None, reason="due"))
        actions.append(Wake(self.next_wakeup(now)))
        return actions

    def final(self, wall: float) -> list[Action]:
        """What this aggregator publishes before it disconnects: the merge of every snapshot
        received, if a change is unpublished (``subspace``, and at the root ``model``,
        reason ``shutdown``), stamped ``wall`` (seconds since the Unix epoch)."""
        merged, _ = self.merge()
        if merged is None or not self.unpublished:
            return []
        return self._snapshot_actions(wall, "shutdown")

    def _snapshot_actions(self, wall: float, reason: str) -> list[Action]:
        """The merged snapshot's publishes (`make_snapshot`): ``subspace``, and at the root
        also ``model`` (the merge truncated to ``rank``, for consumers)."""
        msg = self.make_snapshot(wall, reason)
        if msg is None:
            return []
        actions: list[Action] = [Publish("subspace", msg, retain=True, reason=reason)]
        if self.config.parent is None:
            actions.append(Publish("model", self.model(msg), retain=True, reason=reason))
        return actions

    def published(self, action: Publish, now: float) -> None:
        """The caller carried out ``action`` at ``now`` (the broker acknowledged it)."""
        if action.kind == "subspace":
            assert isinstance(action.message, SubspaceMessage)
            self.snapshot_published(action.message, now)
        elif action.kind == "status":
            self.status_sent(now)
        elif action.kind != "model":
            self.release.published(action, now)

    def checkpoint_written(self, action: WriteCheckpoint, now: float) -> None:
        """The caller wrote ``action``'s state at ``now``."""
        self.release.checkpoint_written(action, now)

    def checkpoint_failed(self, action: WriteCheckpoint, now: float, error: str) -> int:
        """Writing ``action``'s state failed at ``now`` (``error``, one line); returns the
        failures of that state so far (the caller logs 1, 2, 4, ...)."""
        return self.release.checkpoint_failed(action, now, error)

    def take_events(self) -> list[tuple[str, dict[str, object]]]:
        """What the last steps saw that the log should say, oldest first: ``child_stale``
        (``child``, ``policy``) and ``secagg_snapshot_refused`` (``reason``, ``seq``)."""
        events, self._events = self._events, []
        return events

    # ------------------------------------------------------------------ inbound
    child_ids = property(lambda self: self.membership.child_ids, doc="`Membership.child_ids`.")
    declared = property(lambda self: self.membership.declared, doc="The declared children.")
    admit = property(lambda self: self.membership.admit, doc="An admitted child's bounds.")
    joins = property(lambda self: self.membership.joins, doc="Children admitted.")
    forgets = property(lambda self: self.membership.forgets, doc="Children forgotten.")
    forgotten = property(lambda self: self.membership.forgotten, doc="The last forgotten.")
    quarantined = property(
        lambda self: self.plausibility.quarantined, doc="The children quarantined now."
    )
    releases = property(lambda self: self.plausibility.releases, doc="Quarantines ended.")
    quarantine_policy = property(
        lambda self: self.plausibility.quarantine_policy, doc="``keep`` or ``drop``."
    )

    @property
    def open(self) -> bool:
        """Whether this aggregator admits children the topology does not declare."""
        return self.membership.open

    def knows(self, child: str) -> bool:
        """Whether ``child`` is in `child_ids` (declared, or admitted and not forgotten)."""
        return self.membership.knows(child)

    def admits(self, child: str) -> bool:
        """Whether a snapshot of ``child`` may be offered to `receive` (a known child, or
        any child of an open aggregator)."""
        return self.membership.admits(child)

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
        membership, plausibility = self.membership, self.plausibility
        last, arrived = (None, now) if record is None else (record.snapshot, record.arrived)
        was_quarantined = child in plausibility.quarantined
        undeclared = None if child in membership.declared else membership.admit
        failed = plausibility.check(child, msg, last, arrived, now, undeclared=undeclared)
        if failed is not None:
            if not was_quarantined and plausibility.excludes(child) and record is not None:
                self._dirty.add(child)  # its last good snapshot leaves the merge
                if math.isinf(self.unpublished_since):
                    self.unpublished_since = now
            return failed
        if record is not None and record.snapshot.epoch != msg.epoch:
            retired.append(record.snapshot.epoch)  # that lineage never comes back
        membership.join(child)  # an open aggregator admits it
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
        quarantined = self.plausibility.forget(child)
        if record is None and not quarantined:
            return None
        self._retired.pop(child, None)
        self._stale.discard(child)
        n_samples = 0 if record is None else record.snapshot.n_samples
        self.membership.forget(child, n_samples, now)
        if not self.children:
            self.n_features = None
        if record is not None:
            self._dirty.add(child)
            self.last_input = now
            if math.isinf(self.unpublished_since):
                self.unpublished_since = now
        return n_samples

    def _excluded(self, child: str) -> bool:
        """Whether the merge leaves ``child`` out (stale and dropped, or quarantined and
        dropped)."""
        record = self.children[child]
        if record.stale and self.config.stale_policy == "drop":
            return True
        return self.plausibility.excludes(child)

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
        scales = self.plausibility.scales(included)
        rescaled = {c for c, f in scales.items() if f != self._scales.get(c, 1.0)}
        return included, scales, rescaled

    def merge(self) -> tuple[Subspace | None, list[SubspaceMessage]]:
        """Put the changed children into the merge tree (numerics).

        Not thread-safe, like every core: the shell serialises all calls on one core
        (`Agent._numerics`), so no `receive` runs while a merge does.
        Returns the merged subspace and the snapshots it covers.
        """
        included, scales, rescaled = self._plan()
        dirty, self._dirty = self._dirty | rescaled, set()
        gone = self.membership.take_gone()
        for child in gone:  # forgotten admitted children give their slot back
            if not self.membership.knows(child):
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
                self._merged = empty_like(self.snapshot.subspace)
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
        release = self.release.next_wakeup(now)
        if cfg.stale_policy == "keep":
            return [release]
        waiting = [r.arrived for r in self.children.values() if not r.stale]
        return [release, min(waiting) + cfg.stale_after_s] if waiting else [release]

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
            **self.membership.status(now),
            "merges": self.merges,
            "stale_children": sorted(self._stale),
            **self.plausibility.status(now),
            "influence_capped": {
                c: round(f, 6) for c, f in sorted(self._scales.items()) if f < 1.0
            },
            "last_update_age_s": round(now - max(arrived, default=self.started), 3),
            "duplicates": self.duplicates,
            "reconnects": max(0, self.connections - 1),
            "undelivered": self.undelivered,
            "publish": dict(self.decisions),
            **self.release.status_extra(),
        }

