"""A secure-aggregation site on MQTT (issue 26): `SecAggAggregator`, the part of an
`AggregatorAgent` whose children include leaves of mechanism ``"gaussian-secagg"``.

It drives the site's core, `edge_runtime.agents.aggregator.core.secagg_site.SecAggSite`
(release slots on a time grid, one secure sum each, the running noisy Gram matrix), and is
the thin async part around it: topics, decoding, publishing, the slot timer, rejects.

Topics (`edge_runtime.topology.topics`, ``<site>`` the aggregator's path): it subscribes to
``<site>/+/secagg/+`` (its secagg leaves' keys, shares, masked inputs and unmask responses)
and publishes ``<site>/secagg/roster`` (retained), ``<site>/secagg/delivery/<leaf>``,
``<site>/secagg/unmask`` and ``<site>/secagg/outcome`` (retained), all QoS 1.

Time: the site's `SecAggSite.tick` runs in the agent's work loop (`step`), which this
component wakes at `SecAggSite.next_wakeup` (an event-loop timer calling the agent's
``wake``) and after every message. A message that does not decode, comes from a node that is
not one of the site's secagg leaves, names another leaf than its topic, or that the core
refuses (`edge_runtime.secagg.SecAggError`: late, another slot, a conflicting duplicate) is
counted as a reject (`Agent.reject`) and dropped: reason ``secagg_late`` for a message of a
slot that has ended, else ``secagg_refused``, the wire's reason, ``unknown_child`` or
``secagg_leaf_mismatch``. Not a reject: an unmask response of an ended slot, which every
slot with more than ``t`` survivors has (the site releases at the ``t``-th response); it is
dropped and counted in the status (``surplus_unmask_responses``), not logged.

The site's estimate goes up like any child's: after each released slot, `step` returns a
`SubspaceMessage` of `SecAggSite.subspace` from the pseudo-child `CHILD` (``"secagg"``, a
reserved id, so no node has it), carrying the leaves' guarantee (``privacy`` with mechanism
``"gaussian-secagg"``); the agent gives it to its `AggregatorCore`, which merges it with its
other children and publishes as it always does. The secure sum does not reveal how many
readings each leaf contributed; its provenance takes them from the leaves' status documents
(``extra.secagg.readings_released``, retained, which the site may read: as a private leaf's
snapshot publishes its ``n_samples``, the counts are not covered by the guarantee under
replace-one neighbours), and ``n_samples`` is their sum. A count reported while a slot runs
(a leaf publishes it after its unmask response, which may arrive before the slot's outcome)
is held until that slot ends, so a snapshot never counts readings its noisy Gram does not
hold yet; a count that grows after a release sends the snapshot again with the new
provenance. (A leaf's count includes readings revealed in a slot skipped after its unmask
request: spent, and not in the sum.)

Phase timeouts (`slot_timeouts`): `RoundTimeouts`' defaults (10, 10, 30 and 10 s) while the
slot is at least twice their sum (120 s), else scaled down to half the slot, so a slot always
ends before the next is due. The first slot after a restart follows the retained outcome's
(read once before connecting, `prepare`), so a slot number is never reused.

Restarts (with a state directory: ``edge-runtime agent --state-dir DIR``, the aggregator's
``state_dir``): the site's running sum and ledger (`SecAggSite.export_state`) and the leaves'
revealed-reading counts go to ``<state_dir>/<node>.secagg`` (msgpack, `STATE_FORMAT`)
whenever a slot starts or ends, before its outcome is published, written atomically
(`edge_runtime.atomicfile`: temporary file, fsync, rename, directory fsync) off the event
loop. `prepare` restores it (`SecAggSite.restore_state`) before the first slot, and the
first `step` then gives the restored estimate to the merge, so what the site released before
stays in the root's estimate. The file holds only what released (noisy) sums computed:
post-processing under the leaves' guarantee, no keys or masked inputs. A file that cannot be
read (``secagg_state_unreadable``) or is refused (``secagg_state_refused``: another node,
deployment, leaves, threshold, calibration, horizon, ... or inconsistent) is logged in one
line, counted in the status (``state``) and ignored: the site starts afresh, never crashes.
A failed write is logged (failures 1, 2, 4, ...) and counted; the previous file stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Any

import msgpack

from edge_runtime.agents.common.shell.secagg_payload import decode_or_reject, payload_bytes
from edge_runtime.atomicfile import TEMP_SUFFIX, fsync_directory, replace_file, temp_name
from edge_runtime.fpca import Subspace
from edge_runtime.fpca.privacy import NEIGHBOURS
from edge_runtime.secagg import require_extra
from edge_runtime.topology import Topology
from edge_runtime.topology import topics as kinds
from edge_runtime.topology.keys import SECAGG_MECHANISM as MECHANISM
from edge_runtime.topology.topics import child_level, topic_depth
from edge_runtime.wire import PrivacyParams, SubspaceMessage, WireError

__all__ = ["CHILD", "STATE_FORMAT", "STATE_SUFFIX", "SecAggAggregator", "slot_timeouts"]

CHILD = kinds.SECAGG
"""The pseudo-child whose snapshots carry the site's estimate into the aggregator's merge."""

STATE_SUFFIX = ".secagg"
"""The site's state file in its state directory: ``<node><STATE_SUFFIX>``."""

STATE_FORMAT = "edge_runtime.secagg_site_file"
"""``"format"`` of the state file's msgpack map (version 1): ``site`` (the core's
`SecAggSite.export_state`) and ``counts`` (leaf -> readings revealed, from their status)."""


def slot_timeouts(slot_s: float) -> Any:
    """The phase timeouts of a site with slots of ``slot_s`` seconds: `RoundTimeouts()`
    (60 s in all) when ``slot_s >= 120``, else each scaled by ``slot_s / 120``."""
    from edge_runtime.secagg.aggregator_round import RoundTimeouts

    default = RoundTimeouts()
    total = default.advertise + default.share + default.masked_input + default.unmask
    scale = min(1.0, slot_s / (2.0 * total))
    return RoundTimeouts(
        advertise=default.advertise * scale,
        share=default.share * scale,
        masked_input=default.masked_input * scale,
        unmask=default.unmask * scale,
    )


class SecAggAggregator:
    """The secure-aggregation site of an `AggregatorAgent`.

    Parameters
    ----------
    agent : AggregatorAgent
        Its ``topology``, ``node_id``, ``config``, ``settings``, ``log``, ``reject``,
        ``publish``, ``read_retained`` and ``wake`` are used.
    n_features : int or None
        The width of the leaves' readings; None: the per-feature ``valid_range`` of the
        leaves, if they declare one. Without it no slot runs (logged
        ``secagg_width_unknown``, reported in the status).
    timeouts : RoundTimeouts or None
        None: `slot_timeouts` of the site's ``secagg_slot_s``.
    state_dir : path or None
        Where the site keeps its running sum across restarts (``<node>.secagg``; module
        docstring); None: in memory only.

    Attributes
    ----------
    site : SecAggSite or None
        The core, once `prepare` built it.
    state_path : Path or None
        The state file.
    """

    def __init__(
        self,
        agent: Any,
        n_features: int | None = None,
        timeouts: Any = None,
        state_dir: Path | str | None = None,
    ) -> None:
        require_extra(agent.node_id)  # at start, not at the first slot
        self.agent = agent
        topology: Topology = agent.topology
        node_id: str = agent.node_id
        self.leaves = tuple(topology.secagg_leaves(node_id))
        assert self.leaves, f"{node_id!r} has no secagg leaves"
        config = topology.nodes[node_id]
        assert config.secagg_threshold is not None and config.secagg_slot_s is not None
        self.threshold = config.secagg_threshold
        self.slot_s = config.secagg_slot_s
        self.timeouts = timeouts if timeouts is not None else slot_timeouts(self.slot_s)
        leaf = topology.nodes[self.leaves[0]]  # the site's leaves share one calibration
        assert leaf.epsilon is not None and leaf.delta is not None and leaf.clip_norm is not None
        self.epsilon, self.delta, self.clip_norm = leaf.epsilon, leaf.delta, leaf.clip_norm
        self.horizon = leaf.release_horizon or 1
        if n_features is None:
            widths = {topology.nodes[c].valid_range_width for c in self.leaves}
            n_features = widths.pop() if len(widths) == 1 else None
        self.n_features = n_features
        self.rank = config.rank
        self.deployment = topology.name
        self.privacy = PrivacyParams(
            self.epsilon, self.delta, self.clip_norm, mechanism=MECHANISM, neighbours=NEIGHBOURS
        )
        self.site: Any = None
        self.first_slot = 0
        self._depth = topic_depth(topology.prefix, topology.path(node_id))
        self.filter = topology.secagg_children_filter(node_id)
        self.roster_topic = topology.secagg_topic(node_id, kinds.SECAGG_ROSTER)
        self.unmask_topic = topology.secagg_topic(node_id, kinds.SECAGG_UNMASK)
        self.outcome_topic = topology.secagg_topic(node_id, kinds.SECAGG_OUTCOME)
        self._status_topics = {topology.status_detail_topic(c): c for c in self.leaves}
        self.counts = dict.fromkeys(self.leaves, 0)  # readings each leaf revealed (its status)
        self._held: dict[str, int] = {}  # counts reported while a slot runs, until it ends
        self.surplus_unmask_responses = 0  # of ended slots: after the t-th, not rejected
        self._recount = False
        self._released_any = False
        self._delivery = {
            c: topology.secagg_topic(node_id, kinds.secagg_delivery_kind(c)) for c in self.leaves
        }
        self._outbox: list[Any] = []
        self._timer: asyncio.TimerHandle | None = None
        self._epoch = os.urandom(8).hex()  # the pseudo-child's lineage: one per start
        self._seq = 0
        self.published = 0
        self._status_due = False
        self.state_path: Path | None = None
        self.state_counts = dict.fromkeys(
            ("restored", "unrecorded", "unreadable", "refused", "written", "write_failures"), 0
        )
        self._saved: tuple[int, int | None] | None = None  # (next_slot, running) last written
        self.use_state_dir(state_dir)

    def use_state_dir(self, state_dir: Path | str | None) -> None:
        """Keep the site's state in ``<state_dir>/<node>.secagg`` (None: nowhere). Before
        `prepare`."""
        self.state_path = (
            None if state_dir is None else Path(state_dir) / f"{self.agent.node_id}{STATE_SUFFIX}"
        )

    # -- lifecycle ------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Before the first connection: resume after the retained outcome's slot, then build
        the site (its first slot is due one ``secagg_slot_s`` from now)."""
        from edge_runtime.wire.secagg import decode_secagg

        payload = await self.agent.read_retained(self.outcome_topic)
        if payload is not None:
            try:
                outcome = decode_secagg(payload, deployment=self.deployment)
                self.first_slot = outcome.slot + 1
            except WireError as exc:
                self.agent.reject(exc.reason, self.outcome_topic, str(exc))
        self._build()

    def _build(self) -> None:
        from edge_runtime.agents.aggregator.core.secagg_site import SecAggSite

        if self.n_features is None:
            self.agent.log.error(
                "secagg_width_unknown",
                detail="give the aggregator n_features (--n-features): no slot runs without it",
            )
            return
        self.site = SecAggSite(
            self.leaves,
            self.threshold,
            self.n_features,
            epsilon=self.epsilon,
            delta=self.delta,
            clip_norm=self.clip_norm,
            slot_period_s=self.slot_s,
            now=time.monotonic(),
            horizon=self.horizon,
            first_slot=self.first_slot,
            timeouts=self.timeouts,
        )
        self._restore()
        self.agent.log.info(
            "secagg_site",
            leaves=len(self.leaves),
            threshold=self.threshold,
            slot_s=self.slot_s,
            first_slot=self.site.status()["next_slot"],
        )

    # -- the state file -------------------------------------------------------------------

    def _identity(self) -> dict[str, str]:
        return {"node": self.agent.node_id, "deployment": self.deployment}

    def _read_state(self, path: Path) -> dict[str, Any] | None:
        """The file's map (None: no file); ValueError (one line) if it cannot be read."""
        try:
            size = path.stat().st_size
            limit = (self.horizon + 3) * 8 * (self.n_features or 1) ** 2 + (1 << 20)
            if size > limit:
                raise ValueError(f"{size} bytes, more than a state can have ({limit})")
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ValueError(f"cannot read it: {exc.strerror or exc}") from None
        try:
            doc = msgpack.unpackb(data, raw=False, strict_map_key=True)
        except Exception as exc:  # msgpack raises several kinds for corrupt bytes
            raise ValueError(f"not msgpack: {type(exc).__name__}: {exc}") from None
        if (
            not isinstance(doc, dict)
            or doc.get("format") != STATE_FORMAT
            or doc.get("version") != 1
        ):
            raise ValueError(f"not a site state file (format {STATE_FORMAT!r} version 1)")
        if not isinstance(doc.get("site"), dict) or not isinstance(doc.get("counts"), dict):
            raise ValueError("no site state or counts")
        return doc

    def _restore(self) -> None:
        """Continue from the state file, if there is one this site can take (module
        docstring); else start afresh. Never raises."""
        path = self.state_path
        if path is None or self.site is None:
            return
        for stray in path.parent.glob(f".{path.name}.*{TEMP_SUFFIX}"):  # a crash mid-write
            with contextlib.suppress(OSError):
                stray.unlink()
        try:
            doc = self._read_state(path)
        except ValueError as exc:
            self.state_counts["unreadable"] += 1
            self.agent.log.warning(
                "secagg_state_unreadable",
                path=str(path),
                error=" ".join(str(exc).split()),
                action="starting afresh",
            )
            return
        if doc is None:
            return
        counts = doc["counts"]
        try:
            if set(counts) != set(self.leaves) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()
            ):
                raise ValueError(f"counts must map the leaves {list(self.leaves)} to ints >= 0")
            unrecorded = self.site.restore_state(doc["site"], self._identity())
        except ValueError as exc:
            self.state_counts["refused"] += 1
            self.agent.log.warning(
                "secagg_state_refused",
                path=str(path),
                error=" ".join(str(exc).split()),
                action="starting afresh",
            )
            return
        for leaf, count in counts.items():
            self.counts[leaf] = max(self.counts[leaf], count)
        status = self.site.status()
        self.state_counts["restored"] += 1
        self.state_counts["unrecorded"] += unrecorded
        if status["slots_released"]:  # the first step gives the restored estimate to the merge
            self._released_any = self._recount = True
        self.agent.log.info(
            "secagg_state_restored",
            path=str(path),
            slots_released=status["slots_released"],
            slots_skipped=status["slots_skipped"],
            slots_unrecorded=unrecorded,
            next_slot=status["next_slot"],
            readings=sum(self.counts.values()),
        )

    async def _save(self) -> None:
        """Write the site's state now (off the event loop); a failure is logged, counted and
        leaves the previous file."""
        path = self.state_path
        if path is None or self.site is None:
            return
        doc = {
            "format": STATE_FORMAT,
            "version": 1,
            "site": self.site.export_state(self._identity()),  # captured at this instant
            "counts": dict(self.counts),
        }
        payload = msgpack.packb(doc, use_bin_type=True)
        try:
            await asyncio.to_thread(self._write, path, payload)
        except OSError as exc:
            failures = self.state_counts["write_failures"] = self.state_counts["write_failures"] + 1
            if failures & (failures - 1) == 0:  # 1, 2, 4, 8, ...: bounded log lines
                self.agent.log.error(
                    "secagg_state_unwritable", path=str(path), error=str(exc), failures=failures
                )
            return
        self.state_counts["written"] += 1

    @staticmethod
    def _write(path: Path, payload: bytes) -> None:
        replace_file(path, payload, temp=path.parent / temp_name(path))
        fsync_directory(path.parent)

    def close(self) -> None:
        """Cancel the slot timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- messages -------------------------------------------------------------------------

    def subscriptions(self) -> list[str]:
        """``<site>/+/secagg/+``: what its secagg leaves publish; and their status documents."""
        return [self.filter, *self._status_topics]

    def owns(self, topic: str) -> bool:
        """Whether ``topic`` matches `subscriptions` (a child's secagg kind)."""
        if topic in self._status_topics:
            return True
        levels = topic.split("/")
        return len(levels) == self._depth + 3 and levels[self._depth + 1] == kinds.SECAGG

    def handle(self, topic: str, payload: object) -> None:
        """A leaf's message: decoded, checked against its topic, given to the site; what
        the site answers waits for `step`. Never raises for the message."""
        from edge_runtime.secagg import messages
        from edge_runtime.secagg.errors import SecAggError

        data = payload_bytes(self.agent, topic, payload)
        if not data:  # rejected, or a cleared retained advertisement
            return
        if topic in self._status_topics:
            self._count(self._status_topics[topic], topic, data)
            return
        child = child_level(topic, self._depth)
        kind = topic.split("/", self._depth + 1)[-1]
        expect = {
            kinds.SECAGG_KEYS: messages.KeyAdvertisement,
            kinds.SECAGG_SHARES: messages.ShareUpload,
            kinds.SECAGG_MASKED: messages.MaskedInput,
            kinds.SECAGG_UNMASKED: messages.UnmaskResponse,
        }.get(kind)
        if child not in self.leaves or expect is None:
            self.agent.reject(
                "unknown_child", topic, f"{kind!r} of {child!r}, not a secagg leaf of the site"
            )
            return
        message = decode_or_reject(
            self.agent, topic, data, expect=expect, deployment=self.deployment
        )
        if message is None:
            return
        sender = message.sender if isinstance(message, messages.ShareUpload) else message.leaf_id
        if sender != child:
            self.agent.reject(
                "secagg_leaf_mismatch", topic, f"a message of {sender!r} on {child!r}'s topic"
            )
            return
        if self.site is None:
            self.agent.reject("secagg_no_site", topic, "the site is not running (width unknown)")
            return
        try:
            self._outbox += self.site.receive(message, time.monotonic())
        except SecAggError as exc:
            late = message.slot != self.site.slot and message.slot < self.site.status()["next_slot"]
            if late and isinstance(message, messages.UnmaskResponse):
                self.surplus_unmask_responses += 1  # the protocol's, not bad input
                return
            self.agent.reject("secagg_late" if late else "secagg_refused", topic, str(exc))
            return
        if self._outbox:
            self.agent.wake()

    def _count(self, leaf: str, topic: str, payload: bytes) -> None:
        """A secagg leaf's status document: its count of revealed readings, if it grew."""
        from edge_runtime.wire import decode_status

        try:
            detail = decode_status(payload, max_bytes=self.agent.settings.max_payload_bytes)
        except WireError as exc:
            self.agent.reject(exc.reason, topic, str(exc))
            return
        if detail.node_id != leaf:
            self.agent.reject(
                "secagg_leaf_mismatch", topic, f"a status of {detail.node_id!r} on {leaf!r}'s"
            )
            return
        ledger = detail.extra.get("secagg")
        count = ledger.get("readings_released") if isinstance(ledger, dict) else None
        if not isinstance(count, int) or isinstance(count, bool):
            return
        if self.site is not None and self.site.slot is not None:
            # revealed in the running slot, whose sum is not out yet: held until it ends, so
            # a snapshot never counts readings its noisy Gram does not hold yet
            self._held[leaf] = max(count, self._held.get(leaf, 0))
            return
        self._raise_count(leaf, count)

    def _raise_count(self, leaf: str, count: int) -> None:
        if count > self.counts[leaf]:
            self.counts[leaf] = count  # only up: a restarted leaf's ledger starts at 0 again
            if self._released_any:
                self._recount = True
                self.agent.wake()

    # -- the work loop --------------------------------------------------------------------

    async def step(self, client: Any, now: float) -> SubspaceMessage | None:
        """Tick the site, publish what it sends, re-arm the timer; returns the site's new
        snapshot (the pseudo-child `CHILD`'s) after a released slot, else None."""
        from edge_runtime.secagg.messages import (
            KeyRoster,
            ShareDelivery,
            SlotOutcome,
            UnmaskRequest,
        )
        from edge_runtime.wire.secagg import encode_secagg

        site = self.site
        if site is None:
            return None
        self._outbox += site.tick(now)
        if self.state_path is not None:  # a slot started or ended: on disk before it is out
            mark = (site.status()["next_slot"], site.slot)
            if mark != self._saved or any(isinstance(m, SlotOutcome) for m in self._outbox):
                self._saved = mark
                await self._save()
        released = ended = False
        while self._outbox:
            message = self._outbox[0]
            if isinstance(message, KeyRoster):
                topic, retain = self.roster_topic, True
            elif isinstance(message, ShareDelivery):
                topic, retain = self._delivery[message.recipient], False
            elif isinstance(message, UnmaskRequest):
                topic, retain = self.unmask_topic, False
            else:
                assert isinstance(message, SlotOutcome)
                topic, retain = self.outcome_topic, True
                released = released or message.released
                ended = True
                self._log_outcome(message)
            payload = encode_secagg(
                message,
                deployment=self.deployment,
                max_bytes=self.agent.settings.max_payload_bytes,
            )
            await self.agent.publish(client, topic, payload, retain=retain, qos=1)
            self._outbox.pop(0)
            self.published += 1
        self._arm(site.next_wakeup(time.monotonic()))
        self._released_any = self._released_any or released
        if self._held and site.slot is None:  # the slot they were revealed in has ended
            held, self._held = self._held, {}
            for leaf, count in held.items():
                self._raise_count(leaf, count)
        snapshot = self.snapshot() if released or self._recount else None
        self._recount = False
        if ended:  # the slot's outcome goes into the status document at once
            self._status_due = True
        return snapshot

    def take_status_due(self) -> bool:
        """Whether a slot ended since the last call: the agent publishes its status document
        then (released or skipped, with the reason, in ``extra.secagg``)."""
        due, self._status_due = self._status_due, False
        return due

    def _log_outcome(self, outcome: Any) -> None:
        if outcome.released:
            self.agent.log.info(
                "secagg_released", slot=outcome.slot, survivors=len(outcome.survivors)
            )
        else:
            self.agent.log.warning("secagg_skipped", slot=outcome.slot, reason=outcome.reason)

    def _arm(self, when: float) -> None:
        """Wake the agent's work loop at ``when`` (monotonic seconds)."""
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        delay = max(0.0, when - time.monotonic())
        self._timer = loop.call_at(loop.time() + delay, self.agent.wake)

    def snapshot(self) -> SubspaceMessage:
        """The site's estimate as the pseudo-child's snapshot (`CHILD`; module docstring)."""
        assert self.site is not None
        self._seq += 1
        counts = dict(self.counts)
        n = sum(counts.values())
        sub: Subspace = self.site.subspace(min(self.rank, self.site.n_features), n)
        return SubspaceMessage(
            node_id=CHILD,
            epoch=self._epoch,
            seq=self._seq,
            subspace=sub,
            timestamp=time.time(),
            privacy=self.privacy,
            provenance=counts,
            deployment=self.deployment,
        )

    def status(self) -> dict[str, object]:
        """`SecAggSite.status` (or why no site runs) for the status document's ``extra``."""
        if self.site is None:
            return {"mechanism": MECHANISM, "state": "width unknown", "leaves": len(self.leaves)}
        state = {} if self.state_path is None else {"state": dict(self.state_counts)}
        return {
            **self.site.status(),
            "slot_s": self.slot_s,
            "published": self.published,
            "surplus_unmask_responses": self.surplus_unmask_responses,
            **state,
        }
