"""FedPower on the runtime, the async shells: the root (server), leaves and aggregators.

Topics (``<path>`` as for FPCA, `edge_runtime.topology`):

- ``<prefix>/<root>/round`` (retained, QoS 1): the root's `RoundMessage`; every leaf
  subscribes, a (re)started leaf finds the open round at once, a restarted root continues
  after it (round number and basis).
- ``<prefix>/<path>/reply`` (not retained, QoS 1): a leaf's `ReplyMessage`; the root
  subscribes to every leaf's reply topic (the broker routes them: aggregators forward by
  doing nothing, there is no pre-aggregation).
- ``<prefix>/<root>/model`` (retained): the global basis of the last closed round as a
  `SubspaceMessage` (``seq`` = round), so ``watch`` and ``run`` read it as FPCA's.
- ``<prefix>/<path>/subspace`` of a leaf: its restore point (`GramEstimator`), under the
  leaf's usual publish policy; ``status`` / ``status/detail`` / ``confirm`` as for FPCA.
  A private leaf publishes nothing there (its Gram is raw second-moment data): it restarts
  from its checkpoint (``--state-dir``), or empty, and says so in a log line.

A private leaf's status document carries its ledger as FPCA's (`PrivacyStatus`: mechanism
``fedpower-gaussian-rdp``, budget, replace-one neighbours, clip norm, ``noise_std`` sigma in
unit-ball ``S Q`` units, ``releases`` = local iterations run, ``clipped``), and its
``extra.fedpower`` the budget's iterations ``T``, those run, and whether it is exhausted.

Aggregators of a FedPower tree keep their liveness (Last Will, status) and nothing else:
the OPT reference at every level is the previous global basis, which only the root holds,
so pre-aggregating below it would only save bytes on the last hop at the cost of a second
alignment step (not done).
"""

from __future__ import annotations

import random
import time
from typing import Any

import aiomqtt

from edge_runtime.agents.common.core.actions import Publish
from edge_runtime.agents.common.core.node import NodeCore
from edge_runtime.agents.common.core.policy import AGGREGATOR_PUBLISH
from edge_runtime.agents.common.shell.agent import Agent
from edge_runtime.agents.common.shell.core_shell import (
    decode_or_reject,
    status_policy_of,
)
from edge_runtime.agents.fedpower.core.leaf import FedPowerLeafCore
from edge_runtime.agents.fedpower.core.root import FedPowerRootCore
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology
from edge_runtime.wire import PrivacyStatus, StatusDetail, WireError, encode_subspace
from edge_runtime.wire.fedpower import decode_reply, decode_round, encode_reply, encode_round

__all__ = ["FedPowerAggregatorAgent", "FedPowerLeafAgent", "FedPowerRootAgent"]


class FedPowerLeafAgent(LeafAgent):
    """A leaf of a FedPower tree: the FPCA leaf's data path with a `LocalGram`, answering
    the root's rounds (`FedPowerLeafCore`).

    Subscribes to ``<prefix>/<root>/round`` besides the sensor topic (QoS
    ``settings.qos``); for every round it has readings for, publishes one `ReplyMessage`
    on ``<prefix>/<path>/reply`` (not retained, QoS ``settings.qos``). A non-private leaf
    also publishes its restore snapshot on ``subspace`` as an FPCA leaf does (retained); a
    private one never does (module docstring). A refused round is a reject (reason
    ``foreign_deployment``, ``rank`` or ``round``); a private leaf whose budget is spent
    logs ``privacy_budget_exhausted`` once and stops replying.

    Parameters
    ----------
    topology : Topology
        A topology with ``algorithm = "fedpower"`` (its ``fedpower`` settings give ``T``).
    node_id : str
        A leaf of ``topology``.
    *args, **kwargs
        As `LeafAgent` (``settings``, ``n_features``, ``state_dir``, ``checkpoint_every``,
        ``checkpoint_interval_s``, ``restore_from_broker``).

    Raises
    ------
    ValueError
        As `LeafAgent`; also, for a private leaf, once the width of a reading is known, if
        the schedule is unbounded (`FedPowerLeafCore.new_estimator`).
    """

    core_class = FedPowerLeafCore

    def __init__(self, topology: Topology, node_id: str, *args: object, **kwargs: object) -> None:
        super().__init__(topology, node_id, *args, **kwargs)  # type: ignore[arg-type]
        self._budget_logged = False
        if self.core.private and self.checkpoint_path is None:
            self.log.warning(
                "private_leaf_without_state_dir",
                detail="a private FedPower leaf publishes no restore snapshot: "
                "a restart begins empty (give it --state-dir to keep its readings)",
            )

    def new_core(self, **kwargs: Any) -> FedPowerLeafCore:
        """The core, knowing ``T`` before `LeafAgent` restores a checkpoint or makes an
        estimator."""
        return FedPowerLeafCore(
            self.config, iterations=self.topology.fedpower.total_iterations, **kwargs
        )

    @property
    def core(self) -> FedPowerLeafCore:
        return self._core  # type: ignore[return-value]

    async def _publish_snapshot(self, client: aiomqtt.Client, reason: str) -> None:
        if not self.core.private:  # a private leaf never publishes its Gram
            await super()._publish_snapshot(client, reason)

    def privacy_status(self) -> PrivacyStatus | None:
        """The ledger (module docstring), or None without privacy."""
        privacy = self.privacy
        if privacy is None:
            return None
        est = self.core.estimator
        return PrivacyStatus(
            privacy.epsilon,
            privacy.delta,
            privacy.clip_norm,
            noise_std=None if est is None else est.last_noise_std_,
            mechanism=privacy.mechanism,
            neighbours=privacy.neighbours,
            releases=0 if est is None else est.n_releases_,
            clipped=0 if est is None else est.n_clipped_,
        )

    def subscriptions(self) -> list[str]:
        return [*super().subscriptions(), self.topology.round_topic()]

    async def handle(self, message: aiomqtt.Message) -> None:
        topic = str(message.topic)
        if topic != self.topology.round_topic():
            await super().handle(message)
            return
        if not message.payload:
            return  # a cleared retained round
        max_bytes = self.settings.max_payload_bytes
        msg = decode_or_reject(self, topic, message.payload, decode_round, max_bytes)
        if msg is None:
            return
        reason = self.core.on_round(msg, self.topology.name)
        if reason is not None:
            self.reject(reason, topic, f"round {msg.round} refused: {reason}")
        self.wake()

    async def step(self, client: aiomqtt.Client, now: float) -> None:
        await super().step(client, now)
        core = self.core
        if not core.reply_due():
            return
        try:
            reply = await self._numerics(lambda: core.make_reply(time.time(), self.topology.name))
        except ValueError as exc:
            self.reject("round", self.topology.round_topic(), str(exc))
            return
        if reply is None:
            if not self._budget_logged:
                self._budget_logged = True
                self.log.warning(
                    "privacy_budget_exhausted",
                    iterations=core.iterations,
                    round=None if core.round is None else core.round.round,
                    detail="no more replies: the budget covers no further local iterations",
                )
            return
        payload = encode_reply(reply, dtype=self.settings.wire_dtype)
        await self.publish(client, self.topology.reply_topic(self.node_id), payload, retain=False)
        self.log.debug("reply_published", round=reply.round, n_samples=reply.n_samples)


class FedPowerRootAgent(Agent):
    """The root of a FedPower tree: the server (`FedPowerRootCore`) over MQTT.

    Publishes each round retained on ``<prefix>/<root>/round`` (QoS ``settings.qos``; again
    after a reconnect while the round is open), takes the leaves' replies on their
    ``reply`` topics (subscribed with QoS ``settings.qos``), closes rounds when the core
    says (``K`` replies or the round timeout, ``fedpower_round_timeout_s`` seconds) and
    publishes the new global basis on ``<prefix>/<root>/model`` (retained, QoS
    ``settings.qos``). Late, duplicate and unasked replies are dropped and counted (status
    ``extra``); malformed ones are rejects. On start it continues after its own retained
    round message; on shutdown it publishes nothing (the retained round and model are the
    state a restart continues from).

    Parameters
    ----------
    topology : Topology
        A topology with ``algorithm = "fedpower"``.
    node_id : str
        Its root.
    settings : AgentSettings, optional
        Connection and timing settings; default ``AgentSettings()``.
    """

    role = "root"

    def __init__(
        self, topology: Topology, node_id: str, settings: AgentSettings | None = None
    ) -> None:
        super().__init__(topology, node_id, settings or AgentSettings())
        self._core = FedPowerRootCore(
            node_id,
            topology.leaves(),
            self.config.rank,
            topology.fedpower,
            status_policy=status_policy_of(self.settings),
            now=time.monotonic(),
            deployment=topology.name,
            rng=random.Random(),  # ids from the OS's entropy
        )
        self._reply_topics = {topology.reply_topic(leaf): leaf for leaf in topology.leaves()}

    @property
    def core(self) -> FedPowerRootCore:
        return self._core

    model = property(lambda self: self._core.model, doc="The last published model.")
    rounds = property(lambda self: self._core.rounds_closed, doc="Rounds closed.")

    def subscriptions(self) -> list[str]:
        return list(self._reply_topics)

    async def prepare(self) -> None:
        """Continue after this root's retained round message, if there is one."""
        payload = await self.read_retained(self.topology.round_topic())
        if payload is None:
            return
        try:
            msg = decode_round(payload)
        except WireError as exc:
            self.log.warning("retained_round_rejected", reason=exc.reason)
            return
        if self._core.restore(msg):
            self.log.info("restored", source="retained round", round=msg.round)

    async def handle(self, message: aiomqtt.Message) -> None:
        topic = str(message.topic)
        leaf = self._reply_topics.get(topic)
        if leaf is None or not message.payload:
            return
        max_bytes = self.settings.max_payload_bytes
        reply = decode_or_reject(self, topic, message.payload, decode_reply, max_bytes)
        if reply is None:
            return
        if reply.node_id != leaf:
            self.reject("node_mismatch", topic, f"reply of {reply.node_id!r} on {leaf!r}'s topic")
            return
        async with self._lock:  # not while a close runs in a worker thread
            reason = self._core.offer(reply, time.monotonic())
        if reason in ("late", "duplicate", "unasked"):
            self.log.debug("reply_dropped", leaf=leaf, round=reply.round, reason=reason)
        elif reason is not None:
            self.reject(reason, topic, f"reply of {leaf!r} to round {reply.round}: {reason}")
        self.wake()

    async def step(self, client: aiomqtt.Client, now: float) -> None:
        """One pass of the work loop: the core's step (`FedPowerRootCore.step`: a round
        closed and its model, the next round, the status document), carried out in order."""
        core = self._core
        closed = core.rounds_closed
        actions = await self._numerics(lambda: core.step(now, time.time()))
        if core.rounds_closed > closed:
            self.log.debug("round_closed", round=core.round, participants=core.last_participants)
        topics = {"model": self.topology.model_topic(), "round": self.topology.round_topic()}
        encoders: dict[str, Any] = {"model": encode_subspace, "round": encode_round}
        dtype = self.settings.wire_dtype
        for action in actions:
            if not isinstance(action, Publish):
                continue  # a Wake: the work loop sleeps until the core's next_wakeup
            if action.kind == "status":
                await self.publish_status(client, force=True)
            else:
                payload = encoders[action.kind](action.message, dtype=dtype)
                await self.publish(client, topics[action.kind], payload)
            core.published(action, time.monotonic())

    async def on_connected(self, client: aiomqtt.Client) -> None:
        msg = self._core.round_message
        if msg is not None and self._core.open:  # retained, but a reconnect may follow a purge
            await self.publish(
                client,
                self.topology.round_topic(),
                encode_round(msg, dtype=self.settings.wire_dtype),
            )

    async def on_shutdown(self, client: aiomqtt.Client) -> None:
        return None  # the retained round and model are the state a restart continues from

    def status_detail(self) -> StatusDetail:
        core = self._core
        model = core.model
        return self.status_document(
            rank=0 if model is None else model.rank,
            n_samples=0 if model is None else model.n_samples,
            seq=core.round,
            epoch=core.epoch,
            extra=core.status_extra(time.monotonic()),
        )


class FedPowerAggregatorAgent(Agent):
    """An aggregator of a FedPower tree: liveness (Last Will) and a status document only;
    its leaves' replies reach the root directly through the broker (module docstring).

    Subscribes to nothing and publishes only ``status`` / ``status/detail`` (`Agent`).

    Parameters
    ----------
    topology : Topology
        A topology with ``algorithm = "fedpower"``.
    node_id : str
        A node with children, not the root.
    settings : AgentSettings, optional
        Connection and timing settings; default ``AgentSettings()``.
    """

    role = "aggregator"

    def __init__(
        self, topology: Topology, node_id: str, settings: AgentSettings | None = None
    ) -> None:
        super().__init__(topology, node_id, settings or AgentSettings())
        self._core = NodeCore(
            node_id,
            AGGREGATOR_PUBLISH,
            status_policy_of(self.settings),
            0.0,
            time.monotonic(),
            rng=random.Random(),  # ids from the OS's entropy
        )
        self._core.settle_status()

    @property
    def core(self) -> NodeCore:
        return self._core

    def subscriptions(self) -> list[str]:
        return []

    async def handle(self, message: aiomqtt.Message) -> None:
        return None

    async def step(self, client: aiomqtt.Client, now: float) -> None:
        return None

    async def on_connected(self, client: aiomqtt.Client) -> None:
        return None

    async def on_shutdown(self, client: aiomqtt.Client) -> None:
        return None

    def status_detail(self) -> StatusDetail:
        return self.status_document(
            rank=0,
            n_samples=0,
            seq=0,
            epoch="fedpower",
            extra={"algorithm": "fedpower", "children": self.topology.children(self.node_id)},
        )
