"""Aggregator agent: children's latest snapshots in, their merge out (the root: the model)."""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import replace

import aiomqtt

from edge_runtime.agents.base import Agent
from edge_runtime.agents.settings import AgentSettings
from edge_runtime.fpca import Subspace
from edge_runtime.fpca.tree import MergeTree
from edge_runtime.topology import Topology
from edge_runtime.wire import (
    PrivacyParams,
    PrivacyStatus,
    StatusDetail,
    SubspaceMessage,
    WireError,
    decode_subspace,
    encode_subspace,
)

__all__ = ["AggregatorAgent", "is_newer", "weakest_privacy"]


def is_newer(new: SubspaceMessage, current: SubspaceMessage) -> bool:
    """Whether snapshot ``new`` supersedes ``current`` from the same child.

    Within one epoch (one lineage of the child's state) the larger ``seq`` wins, so
    duplicates and late arrivals change nothing. A different epoch means the child's
    state was started afresh; the later ``timestamp`` wins.
    """
    if new.epoch == current.epoch:
        return new.seq > current.seq
    return new.timestamp > current.timestamp


def weakest_privacy(snapshots: Iterable[SubspaceMessage]) -> PrivacyParams | None:
    """The guarantee of a merge of ``snapshots``: the weakest of theirs.

    None (no guarantee) if any snapshot has none, or if there are none; else
    ``PrivacyParams(max epsilon, max delta, max clip_norm)``. Why this bounds every
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
    params = [snapshot.privacy for snapshot in snapshots]
    if not params or any(p is None for p in params):
        return None
    return PrivacyParams(
        max(p.epsilon for p in params if p is not None),
        max(p.delta for p in params if p is not None),
        max(p.clip_norm for p in params if p is not None),
    )


class AggregatorAgent(Agent):
    """Keeps each child's latest snapshot and publishes their merge on every arrival.

    Subscribes to ``<prefix>/<path>/+/subspace`` (QoS 1; retained snapshots rebuild the
    state at once after a restart). A snapshot replaces the child's previous one only
    if `is_newer`; its estimate is the merge (Alg. 2 of Grammenos et al. 2020) of the
    children's latest snapshots in a balanced `MergeTree` over the children in topology
    order, so arrival order does not matter (Lemma 10), nothing is counted twice, and
    one child's update costs O(log k) merges for k children, not O(k). Merges keep as
    many directions as the children track (their ``rank + oversample``), so accuracy is
    not lost on the way up. Merges never wait for stragglers: an arrival marks the state
    dirty and the ``work`` task merges as soon as the previous merge is done, so a burst
    of arrivals is applied together. A failed child's last snapshot stays in the merge.
    The root (no parent) also publishes its estimate truncated to its ``rank`` on
    ``<prefix>/<root>/model``, for consumers.

    Provenance of the published snapshot maps each leaf below to the samples of that
    leaf it covers; its ``privacy`` is the weakest guarantee of the children it covers
    (`weakest_privacy`): None as soon as one covered child publishes without noise. An
    aggregator adds no noise and needs no trust: it only post-processes what its
    children published. Provenance and privacy describe exactly the snapshots in the
    merge (taken at the instant the merge's inputs are taken).

    Parameters
    ----------
    topology : Topology
    node_id : str
        A node with children.
    settings : AgentSettings, optional

    Raises
    ------
    ValueError
        If ``node_id`` is a leaf.
    """

    role = "aggregator"

    def __init__(
        self, topology: Topology, node_id: str, settings: AgentSettings | None = None
    ) -> None:
        super().__init__(topology, node_id, settings or AgentSettings())
        if topology.is_leaf(node_id):
            raise ValueError(f"node {node_id!r} is a leaf, not an aggregator")
        self.is_root = topology.nodes[node_id].parent is None
        if self.is_root:
            self.role = "root"
            self.log = self.log.bind(role="root")
        self.child_ids = topology.children(node_id)
        self.children: dict[str, SubspaceMessage] = {}
        self.epoch = secrets.token_hex(8)
        self.seq = 0
        self.snapshot: SubspaceMessage | None = None
        self.merges = 0
        self.tree = MergeTree(self.child_ids)
        self._tree_lock = threading.Lock()  # the tree may be updated in a worker thread
        self._pending: dict[str, Subspace | None] = {}
        self._arrived: dict[str, float] = {}
        self._stale: set[str] = set()
        self._dirty = asyncio.Event()
        self._prefix_depth = len(topology.subspace_topic(node_id).split("/")) - 1

    def subscriptions(self) -> list[str]:
        return [self.topology.children_filter(self.node_id)]

    # ------------------------------------------------------------------ inbound
    async def handle(self, message: aiomqtt.Message) -> None:
        topic = str(message.topic)
        payload = message.payload
        if not payload:
            return  # a cleared retained message: nothing to merge
        levels = topic.split("/")
        child = levels[self._prefix_depth] if len(levels) > self._prefix_depth else ""
        if child not in self.child_ids:
            self.reject("unknown_child", topic, f"{child!r} is not a child of {self.node_id!r}")
            return
        if not isinstance(payload, bytes | bytearray):
            self.reject("payload_type", topic, f"payload of type {type(payload).__name__}")
            return
        try:
            msg = decode_subspace(bytes(payload), max_bytes=self.settings.max_payload_bytes)
        except WireError as exc:
            self.reject(exc.reason, topic, str(exc))
            return
        if msg.node_id != child:
            self.reject("node_mismatch", topic, f"snapshot of {msg.node_id!r} on {child!r}'s topic")
            return
        others = [m.n_features for c, m in self.children.items() if c != child]
        if others and msg.n_features != others[0]:
            self.reject(
                "n_features", topic, f"{msg.n_features} features, siblings have {others[0]}"
            )
            return
        current = self.children.get(child)
        if current is not None and not is_newer(msg, current):
            self.stats.duplicates += 1
            return
        self.children[child] = msg
        self._pending[child] = msg.subspace
        self._arrived[child] = time.monotonic()
        self._stale.discard(child)
        self._dirty.set()

    # ----------------------------------------------------------------- outbound
    def _apply(self, pending: dict[str, Subspace | None]) -> tuple[Subspace | None, int]:
        """Put pending snapshots into the merge tree (None removes a child).

        Returns the merged result and the number of merges made.
        """
        merges = 0
        with self._tree_lock:
            for child in self.child_ids:
                if child in pending:
                    sub = pending[child]
                    if sub is None:
                        self.tree.remove(child)
                    else:
                        self.tree.update(child, sub)
                    merges += self.tree.merges_last_update
            return self.tree.result, merges

    def _check_staleness(self) -> None:
        """Apply the staleness policy to children silent for ``stale_after_s`` seconds."""
        cfg = self.config
        if cfg.stale_policy == "keep":
            return
        now = time.monotonic()
        for child, arrived in self._arrived.items():
            if child in self._stale or now - arrived < cfg.stale_after_s:
                continue
            self._stale.add(child)
            sub = self.children[child].subspace
            if cfg.stale_policy == "drop":
                self._pending[child] = None
            else:
                self._pending[child] = Subspace(
                    sub.basis, sub.singular_values * cfg.stale_weight, sub.n_samples, sub.mean
                )
            self.log.warning("child_stale", child=child, policy=cfg.stale_policy)
            self._dirty.set()

    async def work(self, client: aiomqtt.Client) -> None:
        tick = min(self.settings.status_interval_s, self.config.stale_after_s / 2)
        while not self._stop.is_set():  # also when a cancellation is lost (see base)
            try:
                async with asyncio.timeout(tick):
                    await self._dirty.wait()
            except TimeoutError:
                pass
            self._check_staleness()
            if self._dirty.is_set():
                await self._merge_and_publish(client)
            await self.publish_status(client)

    async def _merge_and_publish(self, client: aiomqtt.Client) -> None:
        """Merge the snapshots that arrived since the last merge and publish the result."""
        self._dirty.clear()
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        # What the merge covers, fixed now: snapshots arriving during an offloaded merge
        # are merged (and described) next time.
        dropped = self.config.stale_policy == "drop"
        covered = [
            self.children[child]
            for child in self.child_ids
            if child in self.children and not (dropped and child in self._stale)
        ]
        cells = sum(s.n_features * s.rank for s in pending.values() if s is not None) * len(
            self.child_ids
        )
        if cells >= self.settings.offload_min_cells:
            merged, merges = await asyncio.to_thread(self._apply, pending)
        else:
            merged, merges = self._apply(pending)
        if merged is None:
            return
        self.merges += merges
        provenance: dict[str, int] = {}
        for snapshot in covered:
            provenance.update(snapshot.provenance)
        self.seq += 1
        self.snapshot = SubspaceMessage(
            node_id=self.node_id,
            epoch=self.epoch,
            seq=self.seq,
            subspace=merged,
            timestamp=time.time(),
            privacy=weakest_privacy(covered),
            provenance=provenance,
        )
        await self._publish_snapshot(client)

    async def _publish_snapshot(self, client: aiomqtt.Client) -> None:
        assert self.snapshot is not None
        snapshot = self.snapshot
        await self.publish_snapshot(client, encode_subspace(snapshot), snapshot.epoch, snapshot.seq)
        if self.is_root:
            await self.publish(client, self.topology.model_topic(), encode_subspace(self.model()))

    def model(self) -> SubspaceMessage:
        """The latest snapshot truncated to this node's ``rank``: the global estimate."""
        assert self.snapshot is not None
        snap = self.snapshot
        return replace(snap, subspace=snap.subspace.truncate(self.config.rank))

    async def on_connected(self, client: aiomqtt.Client) -> None:
        if self.snapshot is not None:
            await self._publish_snapshot(client)
        await self.publish_status(client, force=True)

    async def on_shutdown(self, client: aiomqtt.Client) -> None:
        await self._merge_and_publish(client)

    def coverage(self) -> dict[str, int]:
        """Samples covered per leaf in the latest published snapshot."""
        return {} if self.snapshot is None else dict(self.snapshot.provenance)

    def status_detail(self) -> StatusDetail:
        snap = self.snapshot
        privacy = None if snap is None else snap.privacy
        return StatusDetail(
            node_id=self.node_id,
            role=self.role,
            online=not self._stop.is_set(),
            rank=0 if snap is None else snap.rank,
            n_samples=0 if snap is None else snap.n_samples,
            seq=self.seq,
            epoch=self.epoch,
            rejects=dict(self.rejects),
            uptime_s=round(self.uptime_s(), 3),
            extra={
                "children": {
                    c: {
                        "seq": m.seq,
                        "n_samples": m.n_samples,
                        "epsilon": None if m.privacy is None else m.privacy.epsilon,
                    }
                    for c, m in self.children.items()
                },
                "coverage": self.coverage(),
                "merges": self.merges,
                "stale_children": sorted(self._stale),
                "last_update_age_s": round(
                    time.monotonic() - max(self._arrived.values(), default=self._started), 3
                ),
                "duplicates": self.stats.duplicates,
                "reconnects": self.stats.reconnects,
                "undelivered": self.undelivered,
            },
            privacy=None
            if privacy is None
            else PrivacyStatus(privacy.epsilon, privacy.delta, privacy.clip_norm),
        )
