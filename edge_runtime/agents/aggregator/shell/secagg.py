"""A secure-aggregation site on MQTT: `SecAggAggregator`, the release shell of an
`AggregatorAgent` whose children include leaves of mechanism ``"gaussian-secagg"``.

The decisions are the core's: the aggregator's release strategy,
`edge_runtime.agents.aggregator.core.secure_sum.SecureSumRelease`, holds the site
(`edge_runtime.agents.aggregator.core.secagg_site.SecAggSite`: release slots on a time grid,
one secure sum each, the running noisy Gram matrix) and says, in the aggregator core's
`step`, what to write and publish and in which order. This is the thin async part around
it: topics, decoding, publishing, the state file, rejects and log lines.

Topics (`edge_runtime.topology.topics`, ``<site>`` the aggregator's path): it subscribes to
``<site>/+/secagg/+`` (its secagg leaves' keys, shares, masked inputs and unmask responses)
and publishes ``<site>/secagg/roster`` (retained), ``<site>/secagg/delivery/<leaf>``,
``<site>/secagg/unmask`` and ``<site>/secagg/outcome`` (retained), all QoS 1.

Time: the site's deadlines are part of the aggregator core's `next_wakeup`, so the agent's
work loop steps when a phase closes or a slot is due, and after every message that gives
the site something to publish. A message that does not decode, comes from a node that is
not one of the site's secagg leaves, names another leaf than its topic, or that the core
refuses (`edge_runtime.secagg.errors.SecAggError`: late, another slot, a conflicting duplicate) is
counted as a reject (`Agent.reject`) and dropped: reason ``secagg_late`` for a message of a
slot that has ended, else ``secagg_refused``, the wire's reason, ``unknown_child`` or
``secagg_leaf_mismatch``. Not a reject: an unmask response of an ended slot, which every
slot with more than ``t`` survivors has (the site releases at the ``t``-th response); it is
dropped and counted in the status (``surplus_unmask_responses``), not logged.

The site's estimate goes up like any child's: after each released slot the strategy gives a
`SubspaceMessage` of the pseudo-child `CHILD` (``"secagg"``, a reserved id, so no node has
it) to the aggregator's merge, carrying the leaves' guarantee (``privacy`` with mechanism
``"gaussian-secagg"``). The secure sum does not reveal how many readings each leaf
contributed; its provenance takes them from the leaves' status documents
(``extra.secagg.readings_released``, retained, which the site reads here: as a private
leaf's snapshot publishes its ``n_samples``, the counts are not covered by the guarantee
under replace-one neighbours), and ``n_samples`` is their sum (`SecureSumRelease.count`).

Phase timeouts (`slot_timeouts`): `RoundTimeouts`' defaults (10, 10, 30 and 10 s) while the
slot is at least twice their sum (120 s), else scaled down to half the slot, so a slot always
ends before the next is due. The first slot after a restart follows the retained outcome's
(read once before connecting, `prepare`), so a slot number is never reused.

Restarts (with a state directory: ``edge-runtime agent --state-dir DIR``, the aggregator's
``state_dir``): the site's running sum and ledger and the leaves' revealed-reading counts
(`SecureSumRelease.state`) go to ``<state_dir>/<node>.secagg`` (msgpack, `STATE_FORMAT`)
whenever a slot starts or ends, before its outcome is published, written atomically
(`edge_runtime.atomicfile`: temporary file, fsync, rename, directory fsync) off the event
loop. `prepare` restores it (`SecureSumRelease.restore`) before the first slot, and the
first step then gives the restored estimate to the merge, so what the site released before
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

from edge_runtime.agents.aggregator.core.secure_sum import (
    CHILD,
    STATE_FORMAT,
    SecureSumRelease,
)
from edge_runtime.agents.common.core.actions import Publish, WriteCheckpoint
from edge_runtime.agents.common.shell.secagg_payload import decode_or_reject, payload_bytes
from edge_runtime.atomicfile import TEMP_SUFFIX, fsync_directory, replace_file, temp_name
from edge_runtime.fpca.privacy import NEIGHBOURS
from edge_runtime.secagg import require_extra
from edge_runtime.topology import Topology
from edge_runtime.topology import topics as kinds
from edge_runtime.topology.keys import SECAGG_MECHANISM as MECHANISM
from edge_runtime.topology.topics import child_level, topic_depth
from edge_runtime.wire import PrivacyParams, WireError

__all__ = ["CHILD", "STATE_FORMAT", "STATE_SUFFIX", "SecAggAggregator", "slot_timeouts"]

STATE_SUFFIX = ".secagg"
"""The site's state file in its state directory: ``<node><STATE_SUFFIX>``."""


def slot_timeouts(slot_s: float) -> Any:
    """The phase timeouts of a site with slots of ``slot_s`` seconds: `RoundTimeouts()`
    (60 s in all) when ``slot_s >= 120``, else each scaled by ``slot_s / 120``."""
    from edge_runtime.secagg.aggregator_round import RoundTimeouts

    default = RoundTimeouts()
    scale = min(1.0, slot_s / (2.0 * default.total))
    return RoundTimeouts(
        advertise=default.advertise * scale,
        share=default.share * scale,
        masked_input=default.masked_input * scale,
        unmask=default.unmask * scale,
    )


class SecAggAggregator:
    """The release shell of a secure-aggregation site (module docstring).

    Parameters
    ----------
    agent : AggregatorAgent
        Its ``topology``, ``node_id``, ``settings``, ``log``, ``reject``, ``publish`` and
        ``read_retained`` are used.
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
    release : SecureSumRelease
        The strategy the agent's core holds (the site's decisions).
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
        leaves = tuple(topology.secagg_leaves(node_id))
        assert leaves, f"{node_id!r} has no secagg leaves"
        config = topology.nodes[node_id]
        assert config.secagg_threshold is not None and config.secagg_slot_s is not None
        slot_s = config.secagg_slot_s
        leaf = topology.nodes[leaves[0]]  # the site's leaves share one calibration
        assert leaf.epsilon is not None and leaf.delta is not None and leaf.clip_norm is not None
        if n_features is None:
            widths = {topology.nodes[c].valid_range_width for c in leaves}
            n_features = widths.pop() if len(widths) == 1 else None
        self.deployment = topology.name
        self.state_path = (
            None if state_dir is None else Path(state_dir) / f"{node_id}{STATE_SUFFIX}"
        )
        self.release = SecureSumRelease(
            node_id,
            self.deployment,
            leaves,
            threshold=config.secagg_threshold,
            slot_s=slot_s,
            timeouts=timeouts if timeouts is not None else slot_timeouts(slot_s),
            privacy=PrivacyParams(
                leaf.epsilon,
                leaf.delta,
                leaf.clip_norm,
                mechanism=MECHANISM,
                neighbours=NEIGHBOURS,
            ),
            horizon=leaf.release_horizon or 1,
            n_features=n_features,
            rank=config.rank,
            epoch=os.urandom(8).hex(),  # the pseudo-child's lineage: one per start
            durable=self.state_path is not None,
        )
        self.first_slot = 0
        self._depth = topic_depth(topology.prefix, topology.path(node_id))
        self.filter = topology.secagg_children_filter(node_id)
        self.outcome_topic = topology.secagg_topic(node_id, kinds.SECAGG_OUTCOME)
        self._status_topics = {topology.status_detail_topic(c): c for c in leaves}

    # the strategy's state, as the site's tests and status read it
    leaves = property(lambda self: self.release.leaves, doc="The site's secagg leaves.")
    site = property(lambda self: self.release.site, doc="The site's core, once prepared.")
    counts = property(lambda self: self.release.counts, doc="Readings each leaf revealed.")
    state_counts = property(lambda self: self.release.state_counts, doc="The state file's.")
    surplus_unmask_responses = property(
        lambda self: self.release.surplus_unmask_responses,
        doc="Unmask responses of ended slots (not rejects).",
    )

    # -- lifecycle ------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Before the first connection: resume after the retained outcome's slot, then build
        the site (its first slot is due one ``secagg_slot_s`` from now) and restore its state
        file."""
        from edge_runtime.wire.secagg import decode_secagg

        payload = await self.agent.read_retained(self.outcome_topic)
        if payload is not None:
            try:
                outcome = decode_secagg(payload, deployment=self.deployment)
                self.first_slot = outcome.slot + 1
            except WireError as exc:
                self.agent.reject(exc.reason, self.outcome_topic, str(exc))
        site = self.release.start(time.monotonic(), self.first_slot)
        if site is None:
            self.agent.log.error(
                "secagg_width_unknown",
                detail="give the aggregator n_features (--n-features): no slot runs without it",
            )
            return
        self._restore()
        self.agent.log.info(
            "secagg_site",
            leaves=len(self.release.leaves),
            threshold=self.release.threshold,
            slot_s=self.release.slot_s,
            first_slot=site.status()["next_slot"],
        )

    # -- the state file -------------------------------------------------------------------

    def _read_state(self, path: Path) -> dict[str, Any] | None:
        """The file's map (None: no file); ValueError (one line) if it cannot be read."""
        try:
            size = path.stat().st_size
            width = self.release.n_features or 1
            limit = (self.release.horizon + 3) * 8 * width**2 + (1 << 20)
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
        release = self.release
        if path is None:
            return
        for stray in path.parent.glob(f".{path.name}.*{TEMP_SUFFIX}"):  # a crash mid-write
            with contextlib.suppress(OSError):
                stray.unlink()
        try:
            doc = self._read_state(path)
        except ValueError as exc:
            release.state_counts["unreadable"] += 1
            self.agent.log.warning(
                "secagg_state_unreadable",
                path=str(path),
                error=" ".join(str(exc).split()),
                action="starting afresh",
            )
            return
        if doc is None:
            return
        try:
            unrecorded = release.restore(doc)
        except ValueError as exc:
            release.state_counts["refused"] += 1
            self.agent.log.warning(
                "secagg_state_refused",
                path=str(path),
                error=" ".join(str(exc).split()),
                action="starting afresh",
            )
            return
        status = release.status()
        self.agent.log.info(
            "secagg_state_restored",
            path=str(path),
            slots_released=status["slots_released"],
            slots_skipped=status["slots_skipped"],
            slots_unrecorded=unrecorded,
            next_slot=status["next_slot"],
            readings=sum(release.counts.values()),
        )

    async def write(self, action: WriteCheckpoint) -> str | None:
        """Write the site's state (``action.state``, captured when the core decided) to the
        state file, off the event loop; the error (one line) if it failed (the previous
        file stays; logged for failures 1, 2, 4, ... by the agent)."""
        path = self.state_path
        assert path is not None
        payload = msgpack.packb(action.state, use_bin_type=True)
        try:
            await asyncio.to_thread(self._write, path, payload)
        except OSError as exc:
            return str(exc)
        return None

    def write_failed(self, action: WriteCheckpoint, error: str, failures: int) -> None:
        """Log a failed write of the state file for failures 1, 2, 4, 8, ... (bounded
        lines); the previous file stays."""
        if failures & (failures - 1) == 0:
            self.agent.log.error(
                "secagg_state_unwritable",
                path=str(self.state_path),
                error=error,
                failures=failures,
            )

    @staticmethod
    def _write(path: Path, payload: bytes) -> None:
        replace_file(path, payload, temp=path.parent / temp_name(path))
        fsync_directory(path.parent)

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

    def handle(self, topic: str, payload: object) -> bool:
        """A leaf's message: decoded, checked against its topic, given to the site; whether
        the site has something to publish now (the agent then steps). Never raises for the
        message. The caller holds the core's lock."""
        from edge_runtime.secagg import messages

        data = payload_bytes(self.agent, topic, payload)
        if not data:  # rejected, or a cleared retained advertisement
            return False
        if topic in self._status_topics:
            return self._count(self._status_topics[topic], topic, data)
        child = child_level(topic, self._depth)
        kind = topic.split("/", self._depth + 1)[-1]
        expect = {
            kinds.SECAGG_KEYS: messages.KeyAdvertisement,
            kinds.SECAGG_SHARES: messages.ShareUpload,
            kinds.SECAGG_MASKED: messages.MaskedInput,
            kinds.SECAGG_UNMASKED: messages.UnmaskResponse,
        }.get(kind)
        if child not in self.release.leaves or expect is None:
            self.agent.reject(
                "unknown_child", topic, f"{kind!r} of {child!r}, not a secagg leaf of the site"
            )
            return False
        message = decode_or_reject(
            self.agent, topic, data, expect=expect, deployment=self.deployment
        )
        if message is None:
            return False
        sender = message.sender if isinstance(message, messages.ShareUpload) else message.leaf_id
        if sender != child:
            self.agent.reject(
                "secagg_leaf_mismatch", topic, f"a message of {sender!r} on {child!r}'s topic"
            )
            return False
        refused = self.release.receive(message, time.monotonic())
        if refused is not None:
            self.agent.reject(refused[0], topic, refused[1])
            return False
        return self.release.pending

    def _count(self, leaf: str, topic: str, payload: bytes) -> bool:
        """A secagg leaf's status document: its count of revealed readings, if it grew."""
        from edge_runtime.wire import decode_status

        try:
            detail = decode_status(payload, max_bytes=self.agent.settings.max_payload_bytes)
        except WireError as exc:
            self.agent.reject(exc.reason, topic, str(exc))
            return False
        if detail.node_id != leaf:
            self.agent.reject(
                "secagg_leaf_mismatch", topic, f"a status of {detail.node_id!r} on {leaf!r}'s"
            )
            return False
        ledger = detail.extra.get("secagg")
        count = ledger.get("readings_released") if isinstance(ledger, dict) else None
        if not isinstance(count, int) or isinstance(count, bool):
            return False
        return self.release.count(leaf, count)

    # -- carrying out the core's actions --------------------------------------------------

    async def publish(self, client: Any, action: Publish) -> None:
        """Publish one of the site's messages (``action.kind`` under the site's path, QoS
        1); a slot's outcome is logged (``secagg_released`` or ``secagg_skipped``)."""
        from edge_runtime.secagg.messages import SlotOutcome
        from edge_runtime.wire.secagg import encode_secagg

        message = action.message
        if isinstance(message, SlotOutcome):
            self._log_outcome(message)
        payload = encode_secagg(
            message,  # type: ignore[arg-type]
            deployment=self.deployment,
            max_bytes=self.agent.settings.max_payload_bytes,
        )
        topic = self.agent.topology.secagg_topic(self.agent.node_id, action.kind)
        await self.agent.publish(client, topic, payload, retain=action.retain, qos=1)

    def _log_outcome(self, outcome: Any) -> None:
        if outcome.released:
            self.agent.log.info(
                "secagg_released", slot=outcome.slot, survivors=len(outcome.survivors)
            )
        else:
            self.agent.log.warning("secagg_skipped", slot=outcome.slot, reason=outcome.reason)

    def status(self) -> dict[str, object]:
        """`SecureSumRelease.status`, for the status document's ``extra.secagg``."""
        return self.release.status()
