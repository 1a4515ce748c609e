"""Secure aggregation as the aggregator's release strategy: `SecureSumRelease`. No I/O, no clock.

An aggregator whose children include leaves of mechanism ``"gaussian-secagg"`` holds one
`SecureSumRelease` (behind `edge_runtime.agents.aggregator.core.release.AggregatorRelease`).
It holds the site's core, `edge_runtime.agents.aggregator.core.secagg_site.SecAggSite`
(release slots on a time grid, one secure sum each, the running noisy Gram matrix), and
decides at each step of its aggregator, in this order:

1. a slot that started or ended is written to the state directory first
   (`WriteCheckpoint` ``"secagg-site"``, when the site keeps its state), so what a slot
   released is on disk before its outcome is out;
2. the slot's messages, in the order the site made them (`Publish` of a `KeyRoster` on
   ``secagg/roster``, retained; a `ShareDelivery` on ``secagg/delivery/<leaf>``; an
   `UnmaskRequest` on ``secagg/unmask``; the `SlotOutcome` on ``secagg/outcome``,
   retained); a message stays pending until the executor reports it published
   (`published`), so one lost with the connection goes out at the next step;
3. after a released slot (or a count that grew since), the site's estimate as a snapshot
   of the pseudo-child `CHILD` (``"secagg"``, a reserved id), which the aggregator merges
   with its other children.

The snapshot's provenance takes the leaves' reading counts from their status documents
(``extra.secagg.readings_released``, `count`): as a private leaf's snapshot publishes its
``n_samples``, the counts are not covered by the guarantee under replace-one neighbours. A
count reported while a slot runs is held until that slot ends, so a snapshot never counts
readings its noisy Gram does not hold yet.

The state written (`state`, format `STATE_FORMAT`, version 1) is ``site`` (the site's
`SecAggSite.export_state`) and ``counts`` (leaf -> readings revealed); `restore` takes it
back before the first slot. It holds only what released (noisy) sums computed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from edge_runtime.agents.aggregator.core.release import ReleaseStep
from edge_runtime.agents.aggregator.core.secagg_site import SecAggSite
from edge_runtime.agents.common.core.actions import Publish, WriteCheckpoint
from edge_runtime.secagg.aggregator_round import RoundTimeouts
from edge_runtime.secagg.errors import SecAggError
from edge_runtime.secagg.messages import (
    KeyRoster,
    LeafMessage,
    ShareDelivery,
    SlotOutcome,
    UnmaskRequest,
    UnmaskResponse,
)
from edge_runtime.topology import topics as kinds
from edge_runtime.wire import PrivacyParams, SubspaceMessage

__all__ = ["CHILD", "STATE_FORMAT", "STATE_KIND", "SecureSumRelease"]

CHILD = kinds.SECAGG
"""The pseudo-child whose snapshots carry the site's estimate into the aggregator's merge."""

STATE_FORMAT = "edge_runtime.secagg_site_file"
"""``"format"`` of the state's map (version 1): ``site`` (`SecAggSite.export_state`) and
``counts`` (leaf -> readings revealed, from their status)."""

STATE_KIND = "secagg-site"
"""``what`` of the `WriteCheckpoint` of the site's state."""

STATE_COUNTS = ("restored", "unrecorded", "unreadable", "refused", "written", "write_failures")
"""The state file's counters reported in the status (``state``)."""


class SecureSumRelease:
    """The secure sum of an aggregator's ``gaussian-secagg`` leaves, as its release strategy.

    Parameters
    ----------
    node_id : str
        The aggregator's id (the state's identity).
    deployment : str or None
        The topology's name (the state's identity; stamped on the site's snapshots).
    leaves : iterable of str
        The site's private leaves.
    threshold : int
        ``t`` of the site (`SecAggSite`).
    slot_s : float
        Seconds between slot starts.
    timeouts : RoundTimeouts
        The slot phases' deadlines.
    privacy : PrivacyParams
        The leaves' guarantee (``epsilon``, ``delta``, ``clip_norm``), carried by the
        site's snapshots.
    horizon : int
        ``H`` of the leaves' continual release.
    n_features : int or None
        ``d``; None: unknown, no slot runs (`status` says so).
    rank : int
        The aggregator's rank: the site's snapshot keeps ``min(rank, d)`` directions.
    epoch : str
        The pseudo-child's lineage (a fresh random id per start, from the caller).
    durable : bool, default False
        Whether the site keeps its state (a `WriteCheckpoint` when a slot starts or ends).

    Attributes
    ----------
    site : SecAggSite or None
        The site's core, once `start` built it.
    counts : dict of str to int
        Readings each leaf revealed (their status documents).
    surplus_unmask_responses : int
        Unmask responses of ended slots (after the ``t``-th): not rejects.
    messages_published : int
        The site's messages published.
    state_counts : dict of str to int
        The state's counters (`STATE_COUNTS`).
    """

    def __init__(
        self,
        node_id: str,
        deployment: str | None,
        leaves: Iterable[str],
        *,
        threshold: int,
        slot_s: float,
        timeouts: RoundTimeouts,
        privacy: PrivacyParams,
        horizon: int,
        n_features: int | None,
        rank: int,
        epoch: str,
        durable: bool = False,
    ) -> None:
        self.node_id = node_id
        self.deployment = deployment
        self.leaves = tuple(leaves)
        self.threshold = threshold
        self.slot_s = slot_s
        self.timeouts = timeouts
        self.privacy = privacy
        self.horizon = horizon
        self.n_features = n_features
        self.rank = rank
        self.durable = durable
        self.site: SecAggSite | None = None
        self.counts = dict.fromkeys(self.leaves, 0)
        self.surplus_unmask_responses = 0
        self.messages_published = 0
        self.state_counts = dict.fromkeys(STATE_COUNTS, 0)
        self._held: dict[str, int] = {}  # counts reported while a slot runs, until it ends
        self._recount = False
        self._released_any = False
        self._outbox: list[Any] = []  # the site's messages not yet published
        self._epoch = epoch
        self._seq = 0
        self._saved: tuple[int, int | None] | None = None  # (next_slot, running) last written

    # -- lifecycle ----------------------------------------------------------------------------

    def children(self, declared: list[str]) -> list[str]:
        """``declared`` without the site's leaves, then `CHILD` (their sum)."""
        return [c for c in declared if c not in self.leaves] + [CHILD]

    def start(self, now: float, first_slot: int = 0) -> SecAggSite | None:
        """Build the site (its first slot due one ``slot_s`` after ``now``, numbered
        ``first_slot``); None when the width is unknown (no slot runs)."""
        if self.n_features is None:
            return None
        self.site = SecAggSite(
            self.leaves,
            self.threshold,
            self.n_features,
            epsilon=self.privacy.epsilon,
            delta=self.privacy.delta,
            clip_norm=self.privacy.clip_norm,
            slot_period_s=self.slot_s,
            now=now,
            horizon=self.horizon,
            first_slot=first_slot,
            timeouts=self.timeouts,
        )
        return self.site

    def identity(self) -> dict[str, Any]:
        """Who the site is beyond its settings (the state's ``identity``): the node and the
        deployment."""
        return {"node": self.node_id, "deployment": self.deployment}

    def state(self) -> dict[str, Any]:
        """The site's state as written (module docstring), captured now."""
        assert self.site is not None
        return {
            "format": STATE_FORMAT,
            "version": 1,
            "site": self.site.export_state(self.identity()),
            "counts": dict(self.counts),
        }

    def restore(self, doc: Mapping[str, Any]) -> int:
        """Continue from a `state` of an earlier incarnation (before the first slot).

        Returns
        -------
        int
            Slots the state does not record (`SecAggSite.restore_state`).

        Raises
        ------
        ValueError
            A state this site cannot take (one line); nothing changes.
        """
        assert self.site is not None
        counts = doc.get("counts")
        if (
            not isinstance(counts, Mapping)
            or set(counts) != set(self.leaves)
            or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()
            )
        ):
            raise ValueError(f"counts must map the leaves {list(self.leaves)} to ints >= 0")
        unrecorded = self.site.restore_state(doc["site"], self.identity())
        for leaf, count in counts.items():
            self.counts[leaf] = max(self.counts[leaf], count)
        self.state_counts["restored"] += 1
        self.state_counts["unrecorded"] += unrecorded
        if self.site.status()["slots_released"]:  # the first step merges the restored sum
            self._released_any = self._recount = True
        return unrecorded

    # -- inbound ------------------------------------------------------------------------------

    def receive(self, message: LeafMessage, now: float) -> tuple[str, str] | None:
        """A leaf's message (its sender checked against its topic by the caller).

        Returns
        -------
        tuple of (str, str) or None
            None when taken (or an unmask response of an ended slot, counted in
            `surplus_unmask_responses`), else a reject reason and one line of detail:
            ``secagg_no_site`` (no site runs), ``secagg_late`` (a slot that has ended),
            ``secagg_refused`` (the site refuses it, `SecAggSite.receive`).
        """
        site = self.site
        if site is None:
            return "secagg_no_site", "the site is not running (width unknown)"
        try:
            self._outbox += site.receive(message, now)
        except SecAggError as exc:
            late = message.slot != site.slot and message.slot < site.status()["next_slot"]
            if late and isinstance(message, UnmaskResponse):
                self.surplus_unmask_responses += 1  # the protocol's, not bad input
                return None
            return ("secagg_late" if late else "secagg_refused"), str(exc)
        return None

    @property
    def pending(self) -> bool:
        """Whether messages wait to be published (the next step carries them out)."""
        return bool(self._outbox)

    def count(self, leaf: str, count: int) -> bool:
        """A leaf's count of revealed readings (its status document); whether a new snapshot
        of the site is due for it (the caller then steps soon)."""
        if self.site is not None and self.site.slot is not None:
            # revealed in the running slot, whose sum is not out yet: held until it ends
            self._held[leaf] = max(count, self._held.get(leaf, 0))
            return False
        return self._raise_count(leaf, count)

    def _raise_count(self, leaf: str, count: int) -> bool:
        if count > self.counts[leaf]:
            self.counts[leaf] = count  # only up: a restarted leaf's ledger starts at 0 again
            if self._released_any:
                self._recount = True
                return True
        return False

    # -- the step -----------------------------------------------------------------------------

    def step(self, now: float, wall: float) -> ReleaseStep:
        """Tick the site at ``now``; what to write and publish, and the site's snapshot
        after a released slot (module docstring)."""
        site = self.site
        if site is None:
            return ReleaseStep()
        self._outbox += site.tick(now)
        actions: list[Any] = []
        if self.durable:  # a slot started or ended: on disk before it is out
            mark = (site.status()["next_slot"], site.slot)
            if mark != self._saved or any(isinstance(m, SlotOutcome) for m in self._outbox):
                self._saved = mark
                actions.append(WriteCheckpoint(STATE_KIND, self.state(), reason="slot"))
        released = ended = False
        for message in self._outbox:
            kind, retain = self._kind(message)
            if isinstance(message, SlotOutcome):
                released = released or message.released
                ended = True
            actions.append(Publish(kind, message, retain=retain, reason="slot"))
        self._released_any = self._released_any or released
        if self._held and site.slot is None:  # the slot they were revealed in has ended
            held, self._held = self._held, {}
            for leaf, count in held.items():
                self._raise_count(leaf, count)
        snapshot = self.snapshot(wall) if released or self._recount else None
        self._recount = False
        return ReleaseStep(actions, snapshot, ended)

    @staticmethod
    def _kind(message: Any) -> tuple[str, bool]:
        """The topic kind of a site's message and whether it is retained."""
        if isinstance(message, KeyRoster):
            return kinds.SECAGG_ROSTER, True
        if isinstance(message, ShareDelivery):
            return kinds.secagg_delivery_kind(message.recipient), False
        if isinstance(message, UnmaskRequest):
            return kinds.SECAGG_UNMASK, False
        assert isinstance(message, SlotOutcome)
        return kinds.SECAGG_OUTCOME, True

    def next_wakeup(self, now: float) -> float:
        """The site's next deadline or slot start; ``now`` while messages are pending."""
        if self.site is None:
            return math.inf
        return now if self._outbox else self.site.next_wakeup(now)

    def published(self, action: Publish, now: float) -> None:
        """One of the site's messages is out: no longer pending."""
        for i, message in enumerate(self._outbox):
            if message is action.message:
                del self._outbox[i]
                self.messages_published += 1
                return

    def checkpoint_written(self, action: WriteCheckpoint, now: float) -> None:
        """The state is on disk."""
        self.state_counts["written"] += 1

    def checkpoint_failed(self, action: WriteCheckpoint, now: float, error: str) -> int:
        """Writing the state failed (the previous file stays); the failures so far."""
        self.state_counts["write_failures"] += 1
        return self.state_counts["write_failures"]

    # -- the estimate -------------------------------------------------------------------------

    def snapshot(self, wall: float) -> SubspaceMessage:
        """The site's estimate as the pseudo-child's snapshot (`CHILD`), stamped ``wall``
        (seconds since the Unix epoch): ``n_samples`` and provenance from `counts`."""
        assert self.site is not None
        self._seq += 1
        counts = dict(self.counts)
        n = sum(counts.values())
        sub = self.site.subspace(min(self.rank, self.site.n_features), n)
        return SubspaceMessage(
            node_id=CHILD,
            epoch=self._epoch,
            seq=self._seq,
            subspace=sub,
            timestamp=wall,
            privacy=self.privacy,
            provenance=counts,
            deployment=self.deployment,
        )

    def status_extra(self) -> dict[str, object]:
        """``{"secagg": status()}``: the strategy's part of the status document's ``extra``."""
        return {"secagg": self.status()}

    def status(self) -> dict[str, object]:
        """`SecAggSite.status` (or why no site runs) for the status document's ``extra``."""
        if self.site is None:
            return {
                "mechanism": self.privacy.mechanism,
                "state": "width unknown",
                "leaves": len(self.leaves),
            }
        state = {"state": dict(self.state_counts)} if self.durable else {}
        return {
            **self.site.status(),
            "slot_s": self.slot_s,
            "published": self.messages_published,
            "surplus_unmask_responses": self.surplus_unmask_responses,
            **state,
        }
