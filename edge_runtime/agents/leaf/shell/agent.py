"""Leaf agent: sensor readings in, FPCA-Edge, cumulative subspace snapshots out.

The leaf's concepts are one module each, joined here: `edge_runtime.agents.leaf.shell.source` (a
local sensor source), `edge_runtime.agents.leaf.shell.state_files` (checkpoint and retained-snapshot
restore, noise), `edge_runtime.agents.leaf.shell.scores` (anomaly scores) and
`edge_runtime.agents.leaf.shell.rejections` (reject counting and logging),
`edge_runtime.agents.leaf.shell.release` (how the leaf releases its readings, by mechanism);
the decisions are the core's (`edge_runtime.agents.leaf.core.leaf`), the shell helpers every
agent shares are in `edge_runtime.agents.common.shell.core_shell`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiomqtt

from edge_runtime.agents.common.core.actions import Action, Publish, Wake, WriteCheckpoint
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import ConfirmPolicy
from edge_runtime.agents.common.shell.agent import Agent
from edge_runtime.agents.common.shell.core_shell import (
    status_document,
    status_policy_of,
)
from edge_runtime.agents.leaf.core.durability import CHECKPOINT_INTERVAL_S
from edge_runtime.agents.leaf.core.estimator import privacy_status
from edge_runtime.agents.leaf.core.intake import Applied, Labelled, RangeEvent
from edge_runtime.agents.leaf.core.leaf import LeafCore, snapshot_privacy
from edge_runtime.agents.leaf.core.tick import MAX_TICK_CALLS
from edge_runtime.agents.leaf.shell.rejections import (
    REJECT_LOG_BURST,
    REJECT_LOG_INTERVAL_S,
    Rejections,
    peek_source,
)
from edge_runtime.agents.leaf.shell.release import ReleaseShell, release_shell_for
from edge_runtime.agents.leaf.shell.scores import Scores
from edge_runtime.agents.leaf.shell.source import LocalSource
from edge_runtime.agents.leaf.shell.state_files import Recovery
from edge_runtime.aio import cancel_and_wait
from edge_runtime.fpca import FPCAEdge
from edge_runtime.settings import AgentSettings
from edge_runtime.sources import SourceError
from edge_runtime.topology import Topology
from edge_runtime.wire import (
    ConfirmMessage,
    PrivacyParams,
    PrivacyStatus,
    StatusDetail,
    SubspaceMessage,
    WireError,
    decode_readings,
    encode_confirm,
    encode_status,
    encode_subspace,
)

if TYPE_CHECKING:
    from edge_runtime.sources import Source

__all__ = ["REJECT_LOG_BURST", "REJECT_LOG_INTERVAL_S", "LeafAgent"]



class LeafAgent(Agent):
    """Runs FPCA-Edge on one device's sensor stream and publishes its subspace.

    Subscribes to the leaf's sensor topic (the node's ``sensor_topic``, QoS
    ``settings.qos``); each payload is one reading ``(n_features,)`` or a batch
    ``(n_samples, n_features)`` of floats (JSON or msgpack, see
    `edge_runtime.wire.decode_readings`; at most ``settings.max_payload_bytes`` bytes).
    Readings feed `FPCAEdge.partial_fit` (eq. (3) of Grammenos et al. 2020). When its
    `LeafCore` decides (`PublishPolicy`: the subspace moved out of the deadband, the maximum
    interval passed, or the stream went idle for ``idle_flush_s`` seconds — never more
    often than the minimum interval), the leaf publishes its cumulative snapshot —
    everything it has seen, pending samples included, with all ``rank + oversample``
    tracked directions so that merges upstream keep their accuracy — retained, QoS
    ``settings.qos``, on ``<prefix>/<path>/subspace``; it re-publishes the latest snapshot
    after every reconnect and publishes a final one on shutdown.

    Topics published (``<prefix>/<path>/...``, `edge_runtime.topology`):

    - ``subspace``: the snapshot (`SubspaceMessage`), retained, QoS ``settings.qos``;
    - ``confirm``: the readings ingested and durable per source and the open gaps
      (`ConfirmMessage`, for publishers that replay), retained, QoS ``settings.qos``,
      after a change (`ConfirmPolicy`), on every (re)connection and on shutdown;
    - ``scores``: anomaly-score documents (`Scores`), not retained, QoS
      ``settings.scores_qos``, only with ``score`` not ``"off"``;
    - ``status`` / ``status/detail`` as every agent (`Agent`).

    Local sensor source (the node's ``source``): read in its own task instead of the
    sensor topic, see `LocalSource` (attribute ``local_source``). Rejections are counted by
    reason and source and logged rate-limited, see `Rejections` (attribute ``rejections``,
    `REJECT_LOG_BURST`, `REJECT_LOG_INTERVAL_S`).
    Restarts (checkpoint, retained snapshot, the noise generator a restarted private leaf
    draws from, a stored guarantee that differs from the configured one): see
    `Recovery` (attribute ``recovery``). Anomaly scores against the root's model: see `Scores`.

    Declared sensor range (the node's ``valid_range`` and ``out_of_range``): the core checks
    every sequenced block before the estimator and the scoring see it (`LeafCore.screen`:
    rejected, reason ``out_of_range`` or ``valid_range_width``, or clipped, logged as
    ``readings_clipped``); the status document's ``extra`` then carries their counts.

    Readings in the map form carry a source id and a per-source sequence number; one already
    ingested is dropped as a duplicate (``sequencer.duplicates``), the last ingested per
    source is in the status document. Bare arrays carry none and are taken as they come.

    Differential privacy (the node's ``epsilon``, ``delta``, ``clip_norm`` and
    ``mechanism``): the estimator releases every block through the private mechanism
    (`FPCAEdge` with ``privacy``, ``mechanism`` and, for ``"gaussian"``, ``horizon =
    release_horizon``: the Gaussian mechanism on the block's Gram matrix with continual
    release; ``"fpca-eq8"``: streaming MOD-SuLQ, eq. (5)-(8) of Grammenos et al. 2020), and
    nothing raw leaves the device. A snapshot is then built from released blocks only —
    pending rows are *not* folded in — so every published subspace is post-processing of
    private releases, and its message carries ``privacy = PrivacyParams(epsilon, delta,
    clip_norm, mechanism, neighbours="replace-one")``. When idle the leaf calls
    `FPCAEdge.flush`, which releases the pending rows as one short block, then checkpoints
    and publishes; it does the same on shutdown. Each flush costs as much noise as a full
    block (and one release of the horizon), so keep ``idle_flush_s`` above the usual gap
    between readings. A snapshot is published only if the estimator's own privacy
    settings are the configured ones (it is never published otherwise, see
    `snapshot_privacy`). The status document reports the guarantee and its ledger
    (`PrivacyStatus`: mechanism, budget, neighbours, noise scale, releases, clipped
    readings).

    Release (``mechanism``): the leaf holds one release strategy, chosen from the mechanism
    (`release_shell_for`, attribute ``release_shell``, interface `ReleaseShell`): for
    ``none``, ``gaussian`` and ``fpca-eq8`` the core's snapshots are the release and the
    strategy adds nothing; under secure aggregation the leaf publishes no snapshot (its
    core is ``local_only``) and the strategy takes every reading the core applies into its
    site's release slots, publishes its slot messages before each tick, says which readings
    are durable (revealed in a slot) and adds its ledger to the status document's ``extra``
    (`edge_runtime.agents.leaf.shell.release`).

    Parameters
    ----------
    topology : Topology
        The deployment: this node's settings (`NodeConfig`), topics and root.
    node_id : str
        A leaf of ``topology``.
    settings : AgentSettings, optional
        Connection and timing settings; default ``AgentSettings()``.
    n_features : int, optional
        Width of a reading. When omitted (default None), the first valid reading fixes it;
        later readings of another width are rejected (reason ``width``).
    state_dir : Path, optional
        Folder of the leaf's checkpoint ``<node>.ckpt`` (or what its release strategy keeps
        instead, `ReleaseShell.checkpoint_path`) and of a file source's resume cursors;
        default None: no checkpoint.
    checkpoint_every : int, optional
        Also checkpoint after this many completed blocks; default None: by time only.
    checkpoint_interval_s : float, default 120
        Most seconds between checkpoints while readings arrive; a checkpoint also follows
        a pause of the stream (within ``max(idle_s, 10 s)``) and exit
        (`edge_runtime.agents.leaf.core.durability`).
    restore_from_broker : bool, default True
        Without a checkpoint, resume from this leaf's own retained snapshot (read within
        ``settings.restore_wait_s`` seconds before connecting).
    clock : callable, default time.monotonic
        The monotonic clock (seconds) the core's times and the outcomes of its actions are
        read from (a test drives the leaf on a virtual one).

    Raises
    ------
    ValueError
        If ``node_id`` is not a leaf, or ``n_features < 1``.
    """

    role = "leaf"
    reject_log_burst = REJECT_LOG_BURST
    core_class: type[LeafCore] = LeafCore
    """The core's class (a FedPower leaf swaps in `FedPowerLeafCore`)."""

    def __init__(
        self,
        topology: Topology,
        node_id: str,
        settings: AgentSettings | None = None,
        *,
        n_features: int | None = None,
        state_dir: Path | None = None,
        checkpoint_every: int | None = None,
        checkpoint_interval_s: float = CHECKPOINT_INTERVAL_S,
        restore_from_broker: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(topology, node_id, settings or AgentSettings())
        self.clock = clock
        if not topology.is_leaf(node_id):
            raise ValueError(f"node {node_id!r} is not a leaf of topology {topology.name!r}")
        if n_features is not None and n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        s = self.settings
        self._state_dir = None if state_dir is None else Path(state_dir)
        # how the leaf releases its readings, by mechanism (restores its own state now)
        self.release_shell: ReleaseShell = release_shell_for(self, n_features, state_dir)
        self.checkpoint_path = self.release_shell.checkpoint_path(self._state_dir, node_id)
        self._core = self.new_core(
            policy=publish_policy_for(self.config, leaf=True),
            status_policy=status_policy_of(s),
            confirm_policy=ConfirmPolicy(s.confirm_interval_s),
            now=clock(),
            n_features=None,
            checkpointing=self.checkpoint_path is not None,
            checkpoint_every=checkpoint_every,
            checkpoint_interval_s=checkpoint_interval_s,
            echo_timeout_s=s.echo_timeout_s,
            root_id=topology.root,
            local_only=not self.release_shell.publishes_snapshots,
            rng=random.Random(),  # ids from the OS's entropy
        )
        self.release_shell.resume(self._core)  # what it restored: ingested and durable
        self.local_source = LocalSource(
            self.config.source,
            node_id=node_id,
            state_dir=self._state_dir,
            core=self._core,
            log=self.log,
            ingest=self._ingest,
            wake=self.wake,
            stop=self.stop,
            stopping=self._stop.is_set,
        )
        local = self.config.source is not None
        self.rejections = Rejections(
            self._core, self._reject_log, self.log, "" if local else self.config.sensor_topic or ""
        )
        self.scores = Scores(
            self._core,
            max_payload_bytes=s.max_payload_bytes,
            log=self.log,
            reject=self.reject,
            wake=self.wake,
        )
        self._scoring_lock = asyncio.Lock()  # `_ingest`'s scoring, in order
        self._model_topic = topology.model_topic()
        self._withheld = 0  # snapshots the core withheld, logged
        self.privacy = self._core.privacy
        self.recovery = Recovery(
            self._core,
            path=self.checkpoint_path,
            noise_seed=self.config.noise_seed,
            own_topic=topology.subspace_topic(node_id),
            max_payload_bytes=s.max_payload_bytes,
            restore_from_broker=restore_from_broker,
            log=self.log,
            numerics=self._numerics,
            read_retained=self.read_retained,
            reject=self.reject,
            clock=self.clock,
            connected=self.connected,
            offline=self.offline,
        )
        if not self.recovery.restore_checkpoint() and n_features is not None:
            self._core.n_features = n_features
            self._core.estimator = self._core.new_estimator(n_features)

    def new_core(self, **kwargs: Any) -> LeafCore:
        """The leaf's core for ``self.config`` as its release strategy shapes it
        (`ReleaseShell.core_config`) with `LeafCore`'s keyword arguments (a FedPower leaf
        adds its budget)."""
        return self.core_class(self.release_shell.core_config(self.config), **kwargs)

    @property
    def core(self) -> LeafCore:
        """The leaf's synchronous core (`LeafCore`)."""
        return self._core

    def reject(self, reason: str, topic: str, detail: str, *, source: str | None = None) -> None:
        """Count and log one rejected reading or message (`Rejections.reject`: by reason and
        by ``source``, else ``topic``)."""
        self.rejections.reject(reason, topic, detail, source=source)

    # Read-only views of the core's state, for callers and tests.
    snapshot = property(lambda self: self._core.snapshot, doc="The last published snapshot.")
    seq = property(lambda self: self._core.seq, doc="Sequence number of the last snapshot.")
    epoch = property(lambda self: self._core.epoch, doc="The state's epoch (random id).")
    estimator = property(lambda self: self._core.estimator, doc="The FPCA-Edge estimator.")
    durable = property(lambda self: self._core.durable, doc="Durable sequence per source.")
    sequencer = property(lambda self: self._core.sequencer, doc="The per-source sequencer.")
    checkpoints = property(
        lambda self: self._core.durability.checkpoints, doc="Checkpoints written."
    )
    restored_from = property(lambda self: self._core.restored_from, doc="Where state came from.")
    noise_restarts = property(lambda self: self._core.noise_restarts, doc="Restores counted.")
    n_features = property(lambda self: self._core.n_features, doc="Width of a reading.")
    n_samples = property(lambda self: self._core.n_samples, doc="Samples ingested so far.")
    ingested = property(lambda self: self._core.ingested, doc="Last sequence per source.")

    @staticmethod
    def snapshot_privacy(est: FPCAEdge) -> PrivacyParams | None:
        """The guarantee of ``est``'s snapshots: its own privacy settings, or None."""
        return snapshot_privacy(est)

    @property
    def source(self) -> Source | None:
        """The local sensor source once opened (None for an MQTT leaf or before `run`)."""
        return self.local_source.source

    @property
    def source_error(self) -> SourceError | None:
        """Why the local source could not run (it stopped the agent), or None."""
        return self.local_source.error

    async def run(self) -> None:
        """`Agent.run`, with checkpoints while disconnected
        (`Recovery.checkpoint_while_offline`) when the leaf has a state directory; then
        the local source is closed, and a `SourceError` that ended the agent re-raised."""
        offline = None
        if self.checkpoint_path is not None:
            offline = asyncio.create_task(
                self.recovery.checkpoint_while_offline(), name=f"{self.node_id}:offline-checkpoints"
            )
        try:
            try:
                await super().run()
            finally:
                await self.local_source.close()
            if self.source_error is not None:
                raise self.source_error
        finally:
            if offline is not None:
                await cancel_and_wait(offline)

    async def aclose(self) -> None:
        """`Agent.aclose`; then raise the `SourceError` that stopped the agent, if one did
        (also when the agent's task had already ended with it).

        Raises
        ------
        SourceError
            If the local source could not run.
        """
        with contextlib.suppress(SourceError):  # raised below, once the agent is closed
            await super().aclose()
        task = self._task
        if task is not None and task.done() and not task.cancelled():
            task.exception()  # retrieved: reported here, not as "never retrieved"
        if self.source_error is not None:
            raise self.source_error

    async def prepare(self) -> None:
        """Restore from the retained snapshot (`Recovery.restore_retained`), then open and start
        the local source, if any: after every restore, so it continues after the last
        reading ingested.

        Raises
        ------
        SourceError
            If the local source cannot run (logged as ``source_failed``).
        """
        await self.recovery.restore_retained()
        self.local_source.open()

    def subscriptions(self) -> list[str]:
        """The sensor topic (none with a local source), when scoring against the root's
        model (``score_detector = "static"``) the model topic, and the release strategy's
        topics (`ReleaseShell.subscriptions`); subscribed with QoS ``settings.qos``."""
        scoring = self._core.scoring
        model = [self.topology.model_topic()] if scoring is not None and scoring.needs_model else []
        model += self.release_shell.subscriptions()
        if self.config.source is not None:
            return model  # a local source: no sensor topic
        assert self.config.sensor_topic is not None
        return [self.config.sensor_topic, *model]

    # ------------------------------------------------------------------ inbound
    async def handle(self, message: aiomqtt.Message) -> None:
        """One inbound message: the release strategy's (`ReleaseShell.owns`), the root's
        model (scoring), else a readings payload,
        sequenced, screened and applied (`LeafCore.accept_labelled`, `LeafCore.apply`);
        an undecodable payload is a reject (`reject`), never an exception."""
        topic = str(message.topic)
        payload = message.payload
        if not isinstance(payload, bytes | bytearray):
            self.reject("payload_type", topic, f"payload of type {type(payload).__name__}")
            return
        if self.release_shell.owns(topic):
            self.release_shell.handle(topic, payload)
            return
        if topic == self._model_topic:
            # (without scoring: a persistent session's subscription from an earlier run)
            if self._core.scoring is not None and self._core.scoring.needs_model:
                self.scores.on_model(topic, bytes(payload))
            return
        try:
            readings = decode_readings(
                bytes(payload),
                n_features=self._core.n_features,
                max_bytes=self.settings.max_payload_bytes,
            )
        except WireError as exc:
            source = None
            if len(payload) <= self.settings.max_payload_bytes:
                source = peek_source(bytes(payload))
            self.reject(exc.reason, topic, str(exc), source=source)
            return
        await self._ingest(
            lambda now: self._core.accept_labelled(readings, now, origin=topic), readings.source
        )
        if self._core.blocks_due():  # durable before this message is acknowledged
            await self.recovery.checkpoint()
        self.wake_on_input()

    def _input_decisive(self) -> bool:
        """`LeafCore.input_decisive`, or scores documents wait for the work loop."""
        return bool(self._core.score_outbox) or self._core.input_decisive()

    async def _ingest(
        self, release: Callable[[float], list[Labelled]], source: str | None = None
    ) -> None:
        """Sequence, screen and apply readings in one step under the core lock (`_numerics`),
        so no checkpoint or snapshot taken meanwhile (possibly in a worker thread) sees a
        source's sequence ahead of the estimator; then score the applied blocks and count
        the ones the estimator refused (reason ``estimator``)."""
        core = self._core

        def ingest_now() -> tuple[list[Applied], list[RangeEvent]]:
            now = self.clock()
            return core.ingest(release(now), now), core.take_range_events()

        results, events = await self._numerics(ingest_now)
        await self._after_ingest(results, events, source)

    async def _after_ingest(
        self, results: list[Applied], events: list[RangeEvent], source: str | None = None
    ) -> None:
        """Log the range events, give the applied blocks to the release strategy
        (`ReleaseShell.readings_applied`) and score them, in the order applied, and count
        the ones the estimator refused (reason ``estimator``)."""
        for reason, range_source, detail in events:
            self.rejections.log_range(reason, range_source, detail)
        async with self._scoring_lock:  # scored in the order applied (`_score` may await)
            for block, src, seq, error in results:
                if error is None:
                    self.release_shell.readings_applied(block, src, seq)  # on the event loop
                    await self.scores.score(block, src, seq)
                    continue
                topic = self.config.sensor_topic or ""
                if self.local_source.is_from(source):
                    topic = ""
                self.reject("estimator", topic, str(error), source=source)

    # ----------------------------------------------------------------- outbound
    async def step(self, client: aiomqtt.Client, now: float) -> None:
        """One pass of the work loop at ``now`` (monotonic seconds): the release strategy's
        messages first (`ReleaseShell.flush`: the readings it released are durable, and the
        status goes out at once when it asks), then the core's ``work`` tick
        (`LeafCore.step`, in the order of `TICKS`), carried out (`carry_out`)."""
        self.rejections.log_suppressed(self._reject_log.due(now))
        flushed = await self.release_shell.flush(client)
        if flushed.durable is not None:
            self._core.mark_durable(flushed.durable)
        if flushed.status_due:  # e.g. a secure-aggregation site reads readings_released
            await self.publish_status(client, force=True)
        await self.carry_out(client, now)

    async def carry_out(
        self, client: aiomqtt.Client, now: float, tick: str = "work"
    ) -> list[Action]:
        """Run the core's ``tick`` at ``now`` (`LeafCore.step`, numerics under the core's
        lock, in a worker thread when large) and carry out each action in order against
        MQTT and the disk, reporting every outcome back to the core, until the tick's
        `Wake`. Returns the actions carried out (the last a `Wake`).

        Raises
        ------
        aiomqtt.MqttError
            When a publish fails (the connection is lost); the tick is abandoned and the
            next one starts afresh.
        """
        core = self._core
        done: list[Action] = []
        for _ in range(MAX_TICK_CALLS):  # each call ends at an outcome; a tick has few
            actions = await self._numerics(
                lambda: core.step(now, timestamp=time.time(), tick=tick)
            )
            released = core.take_released()
            if released:
                await self._after_ingest(released, core.take_range_events())
            for action in actions:
                await self._carry_out(client, action)
            done += actions
            if actions and isinstance(actions[-1], Wake):
                break
        if core.withheld > self._withheld:
            self._withheld = core.withheld
            est = core.estimator
            self.log.error(
                "snapshot_withheld",
                estimator=str(None if est is None else snapshot_privacy(est)),
                configured=str(self.privacy),
            )
        return done

    async def _carry_out(self, client: aiomqtt.Client, action: Action) -> None:
        """One action of the core's step, against MQTT or the disk; its outcome to the core."""
        core = self._core
        if isinstance(action, WriteCheckpoint):
            await self.recovery.write_checkpoint(action)
            return
        if not isinstance(action, Publish):
            return  # a `Wake`: the work loop sleeps until `next_wakeup`
        kind, msg = action.kind, action.message
        if kind == "subspace":
            assert isinstance(msg, SubspaceMessage)
            payload = encode_subspace(msg, dtype=self.settings.wire_dtype)
            await self.publish_snapshot(client, payload, msg.epoch, msg.seq)
            if action.reason != "reconnect":
                self.log.debug(
                    "snapshot_published", seq=msg.seq, n_samples=msg.n_samples, reason=action.reason
                )
        elif kind == "confirm":
            assert isinstance(msg, ConfirmMessage)
            topic = self.topology.confirm_topic(self.node_id)
            await self.publish(client, topic, encode_confirm(msg))
        elif kind == "scores":
            assert isinstance(msg, bytes)
            topic = self.topology.scores_topic(self.node_id)
            await self.publish(client, topic, msg, retain=False, qos=self.settings.scores_qos)
        elif kind == "status":
            topic = self.topology.status_detail_topic(self.node_id)
            await self.publish(client, topic, encode_status(self.status_detail()))
        else:
            raise ValueError(f"a leaf publishes no {kind!r}")
        core.published(action, self.clock())

    async def on_connected(self, client: aiomqtt.Client) -> None:
        """After every (re)connection: the release strategy's (`ReleaseShell.on_connected`,
        e.g. a secure-aggregation leaf's current advertisement), then the core's ``connect``
        tick: the latest snapshot again (``subspace``, retained) and the confirmation, so
        publishers re-send what this leaf has not ingested."""
        await self.release_shell.on_connected(client)
        await self.carry_out(client, self.clock(), "connect")

    async def on_shutdown(self, client: aiomqtt.Client) -> None:
        """Before disconnecting: close the local source, then the core's ``final`` tick:
        a private leaf's pending rows released, the queued scores, a checkpoint, a final
        snapshot if anything is unpublished (reason ``shutdown``) and the final
        confirmation."""
        await self.local_source.close()  # no reading after the final checkpoint
        self.rejections.log_suppressed(self._reject_log.flush())
        await self.carry_out(client, self.clock(), "final")

    def privacy_status(self) -> PrivacyStatus | None:
        """This leaf's privacy ledger for the status document, or None without privacy
        (`edge_runtime.agents.leaf.core.estimator.privacy_status`)."""
        core = self._core
        return privacy_status(self.privacy, core.estimator, self.config, core.horizon)

    def status_detail(self) -> StatusDetail:
        """The status document (``status/detail``): rank, samples, last snapshot's
        ``seq`` and ``epoch``, rejects, the core's ``extra`` (`LeafCore.status_extra`, plus
        ``scores_dropped``, ``source_state`` and ``source`` where they apply) and the
        privacy ledger (`privacy_status`)."""
        core = self._core
        return status_document(
            core,
            node_id=self.node_id,
            role=self.role,
            online=not self._stop.is_set(),
            uptime_s=self.uptime_s(),
            rank=0 if core.estimator is None else core.estimator.rank_,
            n_samples=core.n_samples,
            seq=core.seq,
            epoch=core.epoch,
            extra=self._status_extra(),
            privacy=self.privacy_status(),
        )

    def _status_extra(self) -> dict[str, object]:
        extra = self._core.status_extra(self.clock())
        extra.update(self.release_shell.status_extra())
        extra.update(self.local_source.status())
        return extra
