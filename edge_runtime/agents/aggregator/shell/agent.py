"""Aggregator agent: children's latest snapshots in, their merge out (the root: the model)."""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import aiomqtt

from edge_runtime.agents.aggregator.core.aggregator import (
    AggregatorCore,
    ChildRecord,
    is_newer,
    weakest_privacy,
)
from edge_runtime.agents.aggregator.core.plausibility import (
    MAX_RESETS,
    PLAUSIBILITY_REASONS,
    RESET_WINDOW_S,
    admit_bounds,
    child_bounds,
    energy,
)
from edge_runtime.agents.aggregator.shell.release import DirectShell, ReleaseShell
from edge_runtime.agents.common.core.actions import Action, Publish, Wake, WriteCheckpoint
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.shell.agent import Agent
from edge_runtime.agents.common.shell.core_shell import (
    decode_or_reject,
    status_policy_of,
)
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology, TopologyError
from edge_runtime.topology.checks import check_node_id
from edge_runtime.topology.topics import child_level, topic_depth
from edge_runtime.wire import (
    PrivacyStatus,
    StatusDetail,
    SubspaceMessage,
    decode_subspace,
    encode_subspace,
)

if TYPE_CHECKING:
    from edge_runtime.agents.aggregator.shell.secagg import SecAggAggregator

__all__ = ["AggregatorAgent", "ChildRecord", "is_newer", "weakest_privacy"]


class AggregatorAgent(Agent):
    """Keeps each child's latest snapshot and publishes their merge on every arrival.

    Subscribes to ``<prefix>/<path>/+/subspace`` (QoS ``settings.qos``, default 1; retained
    snapshots rebuild the state at once after a restart). A snapshot replaces the child's
    previous one only if `is_newer`; its estimate is the merge (Alg. 2 of Grammenos et al.
    2020) of the children's latest snapshots in a balanced `MergeTree` over the children in
    topology order, so arrival order does not matter (Lemma 10), nothing is counted twice,
    and one child's update costs O(log k) merges for k children, not O(k). Merges keep as
    many directions as the children track (their ``rank + oversample``), so accuracy is not
    lost on the way up. Merges never wait for stragglers: arrivals are coalesced and the
    merge is published when the `AggregatorCore` decides (`PublishPolicy`: at most once per
    minimum interval, at least every maximum interval while a change is unpublished, the
    same deadband as a leaf, and a trailing publish once arrivals pause), so the last update
    always goes up. A failed child's last snapshot stays in the merge. The root (no parent)
    also publishes its estimate truncated to its ``rank`` on ``<prefix>/<root>/model``, for
    consumers.

    Topics published (``<prefix>/<path>/...``): ``subspace`` (the merge, `SubspaceMessage`,
    retained, QoS ``settings.qos``; again after every reconnect, and once more on shutdown
    if a change is unpublished), for the root also ``<prefix>/<root>/model`` (retained, QoS
    ``settings.qos``), and ``status`` / ``status/detail`` as every agent (`Agent`).

    Plausibility (`edge_runtime.agents.aggregator.core.plausibility`): a child's snapshot
    whose energy, sample count or growth the leaves' declared bounds rule out, or that
    resets too often, is quarantined (logged ``child_quarantined``, counted as a reject by reason)
    until it is plausible again (``child_released``); a snapshot of a node that is not a child, of
    another deployment or of another width is a reject.

    Membership: an open aggregator (``open = true`` in the topology) admits a
    child it does not declare when the child's first plausible snapshot arrives on a child
    topic under its path (logged ``child_admitted``; the broker's ACL decides who may
    publish there), held to the bounds of `Topology.admitted_leaf`; a closed one rejects it
    (``unknown_child``). A restarted open aggregator learns its children from their
    retained snapshots. A zero-length payload on a child's ``subspace`` topic (its retained
    snapshot deleted, e.g. by ``retire --forget``) makes any aggregator, open or closed,
    forget that child (`AggregatorCore.forget`, logged ``child_forgotten``): the merge of the
    others goes up as a normal publish, and a child that publishes again is merged again.

    Provenance of the published snapshot maps each leaf below to the samples of that
    leaf it covers; its ``privacy`` is the weakest guarantee of the children it covers
    (`weakest_privacy`): None as soon as one covered child publishes without noise. An
    aggregator adds no noise and needs no trust: it only post-processes what its
    children published. Provenance and privacy describe exactly the snapshots in the
    merge (taken at the instant the merge's inputs are taken).

    Release: how the children release what is merged is a strategy the core holds
    (`edge_runtime.agents.aggregator.core.release`) with its shell beside it
    (`edge_runtime.agents.aggregator.shell.release.ReleaseShell`, ``release_shell``).
    Children that publish their own snapshots need nothing (`DirectShell`). An aggregator
    whose children include leaves of mechanism ``"gaussian-secagg"`` runs their release
    slots (`edge_runtime.agents.aggregator.shell.secagg.SecAggAggregator`, also ``secagg``)
    and merges the site's estimate as the pseudo-child ``secagg`` in place of those leaves;
    its status document's ``extra.secagg`` reports the slots.

    One step: the core decides what happens at ``now`` and in which order
    (`AggregatorCore.step` returns actions); `step` runs it (in a worker thread when the
    merge is large) and `carry_out` carries the actions out against MQTT and the disk.

    Parameters
    ----------
    topology : Topology
        The deployment: this node's settings (`NodeConfig`), children and topics.
    node_id : str
        A node with children.
    settings : AgentSettings, optional
        Connection and timing settings; default ``AgentSettings()``.
    n_features : int or None, default None
        The width of a reading: a secure-aggregation site needs it (or its leaves'
        per-feature ``valid_range``) before its first slot; ignored otherwise.
    state_dir : Path or None, default None
        Where a secure-aggregation site keeps its running sum across restarts
        (``<node>.secagg``, `SecAggAggregator`); ignored otherwise (an aggregator's state
        lives in its children's retained snapshots).

    Raises
    ------
    ValueError
        If ``node_id`` is a leaf.
    """

    role = "aggregator"

    def __init__(
        self,
        topology: Topology,
        node_id: str,
        settings: AgentSettings | None = None,
        *,
        n_features: int | None = None,
        state_dir: Path | None = None,
    ) -> None:
        super().__init__(topology, node_id, settings or AgentSettings())
        if topology.is_leaf(node_id):
            raise ValueError(f"node {node_id!r} is a leaf, not an aggregator")
        self.is_root = topology.nodes[node_id].parent is None
        if self.is_root:
            self.role = "root"
            self.log = self.log.bind(role="root")
        self.secagg: SecAggAggregator | None = None
        self.release_shell: ReleaseShell = DirectShell()
        if topology.secagg_leaves(node_id):  # only a secure-aggregation site loads its part
            from edge_runtime.agents.aggregator.shell.secagg import SecAggAggregator

            self.secagg = SecAggAggregator(self, n_features, state_dir=state_dir)
            self.release_shell = self.secagg
        declared = topology.children(node_id)
        self._core = AggregatorCore(
            self.config,
            declared,
            policy=publish_policy_for(self.config, leaf=False),
            status_policy=status_policy_of(self.settings),
            now=time.monotonic(),
            echo_timeout_s=self.settings.echo_timeout_s,
            deployment=topology.name,
            bounds={c: child_bounds(topology, c) for c in declared},
            rng=random.Random(),  # ids from the OS's entropy
            admit=admit_bounds(topology, node_id),
            release=self.release_shell.release,  # its children: the strategy's
        )
        self._prefix_depth = topic_depth(topology.prefix, topology.path(node_id))

    @property
    def core(self) -> AggregatorCore:
        """The aggregator's synchronous core (`AggregatorCore`)."""
        return self._core

    # Read-only views of the core's state, for callers and tests.
    snapshot = property(lambda self: self._core.snapshot, doc="The last published snapshot.")
    seq = property(lambda self: self._core.seq, doc="Sequence number of the last snapshot.")
    epoch = property(lambda self: self._core.epoch, doc="The state's epoch (random id).")
    child_ids = property(lambda self: self._core.child_ids, doc="Children, topology order.")
    children = property(lambda self: self._core.children, doc="`ChildRecord` per child.")
    merges = property(lambda self: self._core.merges, doc="Pairwise merges made so far.")
    tree = property(lambda self: self._core.tree, doc="The merge tree over the children.")

    def subscriptions(self) -> list[str]:
        """The children's ``subspace`` topics (one filter, ``<prefix>/<path>/+/subspace``)."""
        return [self.topology.children_filter(self.node_id), *self.release_shell.subscriptions()]

    # ------------------------------------------------------------------ inbound
    async def handle(self, message: aiomqtt.Message) -> None:
        """A child's snapshot: offered to the core (`AggregatorCore.receive`); a refused or
        implausible one is a reject (quarantine logged), never an exception. A zero-length
        payload (the child's retained snapshot deleted) forgets the child."""
        topic = str(message.topic)
        payload = message.payload
        if self.release_shell.owns(topic):
            async with self._lock:  # the strategy is the core's: never while a step runs
                due = self.release_shell.handle(topic, payload)
            if due:
                self.wake()
            return
        child = child_level(topic, self._prefix_depth)
        if not payload:
            await self._forget(child)
            return
        if not self._core.knows(child):
            problem = self._unknown(child)
            if problem is not None:
                self.reject("unknown_child", topic, problem)
                return
        joins = self._core.joins
        max_bytes = self.settings.max_payload_bytes
        msg = decode_or_reject(self, topic, payload, decode_subspace, max_bytes)
        if msg is None:
            return
        was_quarantined = child in self._core.quarantined
        async with self._lock:  # never while a merge runs in a worker thread
            reason = self._core.receive(child, msg, time.monotonic())
        if was_quarantined and child not in self._core.quarantined:
            self.log.warning("child_released", child=child, seq=msg.seq, epoch=msg.epoch)
        if reason in PLAUSIBILITY_REASONS and not was_quarantined:
            self.log.warning(
                "child_quarantined",
                child=child,
                reason=reason,
                policy=self._core.quarantine_policy,
                n_samples=msg.n_samples,
            )
        if self._core.joins > joins:
            self.log.info("child_admitted", child=child, n_samples=msg.n_samples)
        if reason == "duplicate":
            self.stats.duplicates += 1
        elif reason is not None:
            detail = {
                "node_mismatch": f"snapshot of {msg.node_id!r} on {child!r}'s topic",
                "n_features": f"{msg.n_features} features differ from the siblings'",
                "foreign_deployment": f"snapshot from {child!r} of deployment "
                f"{msg.deployment!r}, not {self.topology.name!r}: two deployments share "
                f"the prefix {self.topology.prefix!r} on this broker; give each its own prefix",
                "energy_bound": f"snapshot energy {energy(msg):.6g} exceeds n_samples "
                f"{msg.n_samples} times the largest squared reading norm the leaves' "
                "valid_range allows: quarantined",
                "n_samples_decreased": f"n_samples fell to {msg.n_samples} within epoch "
                f"{msg.epoch}: quarantined",
                "n_samples_rate": f"n_samples {msg.n_samples} grew faster than the leaves' "
                "max_reading_rate allows: quarantined",
                "reset_rate": f"new epoch {msg.epoch}: more than {MAX_RESETS} resets in "
                f"{RESET_WINDOW_S:g} s: quarantined",
            }.get(reason, reason)
            self.reject(reason, topic, detail)
        else:
            self.wake()

    def _unknown(self, child: str) -> str | None:
        """Why a snapshot of ``child``, not (or no longer) a child, is refused; None when
        this open aggregator may admit it."""
        if not self._core.open:
            return (
                f"snapshot from {child!r} which is not a child of {self.node_id!r} in "
                f"topology {self.topology.name!r}: another deployment on this broker? "
                "give each deployment its own prefix"
            )
        if child in self.topology.nodes:
            parent = self.topology.nodes[child].parent
            return (
                f"snapshot from {child!r}, which topology {self.topology.name!r} declares "
                f"under {parent!r}, on a child topic of {self.node_id!r}"
            )
        try:
            check_node_id(child)
        except TopologyError as exc:
            return f"snapshot on a child topic of {self.node_id!r} whose level is no id: {exc}"
        return None

    async def _forget(self, child: str) -> None:
        """The child's retained snapshot was deleted: drop it from the merge (if held)."""
        async with self._lock:  # never while a merge runs in a worker thread
            dropped = self._core.forget(child, time.monotonic())
        if dropped is None:
            return  # nothing held of it: e.g. a cleared topic of a child never seen
        self.log.info("child_forgotten", child=child, n_samples=dropped)
        self.wake()

    # ----------------------------------------------------------------- outbound
    async def step(self, client: aiomqtt.Client, now: float) -> None:
        """One pass of the work loop at ``now`` (monotonic seconds): the core's step
        (`AggregatorCore.step`, in a worker thread when the merge is large), its log lines
        (``child_stale``, ``secagg_snapshot_refused``), then its actions (`carry_out`)."""
        core = self._core
        actions = await self._numerics(lambda: core.step(now, time.time()))
        self._log_events()
        await self.carry_out(client, actions)

    def _log_events(self) -> None:
        for event, fields in self._core.take_events():
            log = self.log.error if event == "secagg_snapshot_refused" else self.log.warning
            log(event, **fields)

    async def carry_out(
        self,
        client: aiomqtt.Client,
        actions: list[Action],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Carry out the core's ``actions`` in order and report each back to the core
        (`AggregatorCore.published` after the broker's acknowledgement,
        `AggregatorCore.checkpoint_written` / `checkpoint_failed`) at ``clock()``.

        ``subspace`` is the node's snapshot (retained, echo-checked: `publish_snapshot`),
        ``model`` the root's model topic (retained), ``status`` the status document as it is
        now (`publish_status`); any other kind, and every `WriteCheckpoint`, is the release
        strategy's (`ReleaseShell.publish`, `ReleaseShell.write`). A `Wake` needs nothing:
        the work loop sleeps until the core's `next_wakeup`.

        Raises
        ------
        aiomqtt.MqttError
            As `Agent.publish`: the actions not yet carried out are decided again at the
            next step after the reconnection.
        """
        core = self._core
        for action in actions:
            if isinstance(action, Wake):
                continue
            if isinstance(action, WriteCheckpoint):
                error = await self.release_shell.write(action)
                if error is None:
                    core.checkpoint_written(action, clock())
                    continue
                failures = core.checkpoint_failed(action, clock(), error)
                self.release_shell.write_failed(action, error, failures)
                continue
            publish = self._publishers().get(action.kind)
            if publish is None:
                await self.release_shell.publish(client, action)
            else:
                await publish(client, action)
            core.published(action, clock())

    def _publishers(
        self,
    ) -> dict[str, Callable[[aiomqtt.Client, Publish], Awaitable[None]]]:
        return {
            "subspace": self._publish_own,
            "model": self._publish_model,
            "status": self._publish_status,
        }

    async def _publish_own(self, client: aiomqtt.Client, action: Publish) -> None:
        snapshot = action.message
        assert isinstance(snapshot, SubspaceMessage)
        payload = encode_subspace(snapshot, dtype=self.settings.wire_dtype)
        await self.publish_snapshot(client, payload, snapshot.epoch, snapshot.seq)

    async def _publish_model(self, client: aiomqtt.Client, action: Publish) -> None:
        model = action.message
        assert isinstance(model, SubspaceMessage)
        payload = encode_subspace(model, dtype=self.settings.wire_dtype)
        await self.publish(client, self.topology.model_topic(), payload, retain=action.retain)

    async def _publish_status(self, client: aiomqtt.Client, action: Publish) -> None:
        await self.publish_status(client, force=True)

    async def _publish_snapshot(self, client: aiomqtt.Client, snapshot: SubspaceMessage) -> None:
        dtype = self.settings.wire_dtype
        payload = encode_subspace(snapshot, dtype=dtype)
        await self.publish_snapshot(client, payload, snapshot.epoch, snapshot.seq)
        if self.is_root:
            model = encode_subspace(self._core.model(snapshot), dtype=dtype)
            await self.publish(client, self.topology.model_topic(), model)

    def model(self) -> SubspaceMessage:
        """The latest snapshot truncated to this node's ``rank``: the global estimate.

        Only once a snapshot was published (`snapshot` is not None)."""
        return self._core.model()

    async def on_connected(self, client: aiomqtt.Client) -> None:
        """After every (re)connection: the latest merge again (and the root's model)."""
        if self._core.snapshot is not None:
            await self._publish_snapshot(client, self._core.snapshot)

    async def prepare(self) -> None:
        """What the release strategy resumes from (a secure-aggregation site: its retained
        outcome and state file, `SecAggAggregator.prepare`)."""
        await self.release_shell.prepare()

    async def on_shutdown(self, client: aiomqtt.Client) -> None:
        """Before disconnecting: the merge of every snapshot received, if unpublished
        (reason ``shutdown``, `AggregatorCore.final`)."""
        core = self._core
        actions = await self._numerics(lambda: core.final(time.time()))
        await self.carry_out(client, actions)

    def _status_extra(self) -> dict[str, object]:
        return self._core.status_extra(time.monotonic())

    def coverage(self) -> dict[str, int]:
        """Samples covered per leaf in the latest published snapshot."""
        return self._core.coverage()

    def status_detail(self) -> StatusDetail:
        """The status document: the last merge's rank, samples, ``seq`` and ``epoch``,
        rejects, the core's ``extra`` (`AggregatorCore.status_extra`) and the merge's
        guarantee (`PrivacyStatus`, None without one)."""
        snap = self._core.snapshot
        privacy = None if snap is None else snap.privacy
        return self.status_document(
            rank=0 if snap is None else snap.rank,
            n_samples=0 if snap is None else snap.n_samples,
            seq=self._core.seq,
            epoch=self._core.epoch,
            extra=self._status_extra(),
            privacy=None
            if privacy is None
            else PrivacyStatus(
                privacy.epsilon,
                privacy.delta,
                privacy.clip_norm,
                mechanism=privacy.mechanism,
                neighbours=privacy.neighbours,
            ),
        )
