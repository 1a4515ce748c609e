"""Leaf agent: sensor readings in, FPCA-Edge, cumulative subspace snapshots out."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import aiomqtt
import numpy as np

from edge_runtime.agents.base import Agent
from edge_runtime.agents.sequencing import SourceSequencer
from edge_runtime.agents.settings import AgentSettings
from edge_runtime.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from edge_runtime.fpca import FPCAEdge
from edge_runtime.fpca.privacy import noise_std
from edge_runtime.topology import Topology
from edge_runtime.wire import (
    PrivacyParams,
    PrivacyStatus,
    StatusDetail,
    SubspaceMessage,
    WireError,
    decode_readings,
    decode_subspace,
    encode_subspace,
)

__all__ = ["LeafAgent"]

T = TypeVar("T")


class LeafAgent(Agent):
    """Runs FPCA-Edge on one device's sensor stream and publishes its subspace.

    Subscribes to the leaf's sensor topic (QoS 1); each payload is one reading
    ``(n_features,)`` or a batch ``(n_samples, n_features)`` (JSON or msgpack, see
    `edge_runtime.wire.decode_readings`). Readings feed `FPCAEdge.partial_fit`
    (eq. (3) of Grammenos et al. 2020). After every ``publish_every`` completed blocks,
    and after ``idle_flush_s`` seconds without readings while samples are pending, the
    leaf publishes its cumulative snapshot — everything it has seen, pending samples
    included, with all ``rank + oversample`` tracked directions so that merges upstream
    keep their accuracy — retained, QoS 1, on ``<prefix>/<path>/subspace``; it re-publishes the
    latest snapshot after every reconnect and publishes a final one on shutdown.

    Readings in the map form carry a source id and a per-source sequence number; a
    reading whose sequence was already ingested is dropped as a duplicate (counted in
    ``sequencer.duplicates``), and the last sequence ingested per source is reported in the
    status document. Bare arrays carry no sequence and are taken as they come.

    Differential privacy (the node's ``epsilon``, ``delta``, ``clip_norm``; streaming
    MOD-SuLQ, eq. (5)-(8) of Grammenos et al. 2020): the estimator masks every block
    (`FPCAEdge` with ``privacy``), and nothing raw leaves the device. A snapshot is then
    built from masked block summaries only — pending rows are *not* folded in — so every
    published subspace is post-processing of private blocks, and its message carries
    ``privacy = PrivacyParams(epsilon, delta, clip_norm)``. When idle the leaf calls
    `FPCAEdge.flush`, which masks the pending rows as one short block (noise calibrated to
    their count), then checkpoints and publishes; it does the same on shutdown. Each flush
    costs as much noise as a full block, so keep ``idle_flush_s`` above the usual gap
    between readings. A snapshot is published only if the estimator's own privacy
    settings are the configured ones (it is never published otherwise, see
    `snapshot_privacy`). The status document reports the guarantee (`PrivacyStatus`).

    Noise generator: the node's ``noise_seed`` seeds a fresh start (reproducible runs;
    the same seed and readings give the same snapshots as ``FPCAEdge(...,
    random_state=noise_seed)``); without one, the operating system's entropy. A restored
    leaf never replays a stream it may already have used: after a restore from its
    checkpoint it draws from ``SeedSequence([noise_seed, restarts])``, where ``restarts``
    counts the restores and is written back to the checkpoint before any reading is
    masked. A leaf that finds any other trace of an earlier incarnation — its own retained
    snapshot (restored or not: there is no local record of earlier restarts), an
    unreadable or refused checkpoint — draws from the operating system's entropy. A
    checkpoint or retained snapshot whose privacy settings (``epsilon``, ``delta``,
    ``clip_norm``; or their absence) differ from the configured ones is not restored: it
    is logged and counted in ``rejects["privacy_mismatch"]``, and the leaf starts afresh,
    so a summary is never published under a guarantee it was not computed with.

    Parameters
    ----------
    topology : Topology
    node_id : str
        A leaf of ``topology``.
    settings : AgentSettings, optional
    n_features : int, optional
        Width of a reading. When omitted, the first valid reading fixes it; later
        readings of another width are rejected (reason ``width``).
    publish_every : int, default 1
        Publish after this many completed blocks.

    Raises
    ------
    ValueError
        If ``node_id`` is not a leaf, or ``n_features < 1``.
    """

    role = "leaf"

    def __init__(
        self,
        topology: Topology,
        node_id: str,
        settings: AgentSettings | None = None,
        *,
        n_features: int | None = None,
        publish_every: int = 1,
        state_dir: Path | None = None,
        checkpoint_every: int = 1,
        restore_from_broker: bool = True,
    ) -> None:
        super().__init__(topology, node_id, settings or AgentSettings())
        if not topology.is_leaf(node_id):
            raise ValueError(f"node {node_id!r} is not a leaf of topology {topology.name!r}")
        if n_features is not None and n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        if publish_every < 1:
            raise ValueError(f"publish_every must be >= 1, got {publish_every}")
        if checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1 block, got {checkpoint_every}")
        self.n_features = n_features
        self.publish_every = publish_every
        self.epoch = secrets.token_hex(8)
        self.seq = 0
        self.estimator: FPCAEdge | None = None
        self.sequencer = SourceSequencer()
        self.durable: dict[str, int] = {}
        self.snapshot: SubspaceMessage | None = None
        self._lock = asyncio.Lock()
        self._block_done = asyncio.Event()
        self._last_reading = time.monotonic()
        self.checkpoint_path = None if state_dir is None else Path(state_dir) / f"{node_id}.ckpt"
        self.checkpoint_every = checkpoint_every
        self.checkpoints = 0
        self._checkpointed_blocks = 0
        self._checkpointed_n = -1
        self.restored_from: str | None = None
        self._restore_from_broker = restore_from_broker
        cfg = self.config
        self.privacy: PrivacyParams | None = (
            None
            if cfg.epsilon is None or cfg.delta is None or cfg.clip_norm is None
            else PrivacyParams(cfg.epsilon, cfg.delta, cfg.clip_norm)
        )
        self.noise_restarts = 0
        self._noise: int | np.random.Generator | None = cfg.noise_seed
        if not self._restore_checkpoint() and n_features is not None:
            self.estimator = self._new_estimator(n_features)

    # ------------------------------------------------------------------ recovery
    def _restore_checkpoint(self) -> bool:
        """Resume from the local checkpoint, if there is a readable one."""
        if self.checkpoint_path is None:
            return False
        try:
            state = load_checkpoint(self.checkpoint_path)
        except CheckpointError as exc:
            self.log.error("checkpoint_unreadable", error=str(exc))
            self._forget_seed()
            return False
        if state is None:
            return False
        try:
            restarts = int(state.get("noise_restarts", 0)) + 1  # type: ignore[call-overload]
            noise = self._restart_noise(restarts)
            estimator = (
                None
                if state.get("n_features") is None
                else FPCAEdge.from_state(state, random_state=noise)
            )
        except (ValueError, TypeError) as exc:
            self.log.error("checkpoint_invalid", error=str(exc))
            self._forget_seed()
            return False
        if estimator is not None and self.snapshot_privacy(estimator) != self.privacy:
            self.rejects["privacy_mismatch"] += 1
            self.log.error(
                "checkpoint_privacy_mismatch",
                checkpoint=str(self.snapshot_privacy(estimator)),
                configured=str(self.privacy),
                action="starting afresh",
            )
            self._forget_seed()
            return False
        if self.privacy is not None and self.config.noise_seed is not None:
            # Record the restart before any reading is masked, so that a crash before the
            # next checkpoint does not make the next restart replay this noise stream.
            state["noise_restarts"] = restarts
            try:
                save_checkpoint(self.checkpoint_path, state)
            except (OSError, ValueError, TypeError) as exc:
                self.log.error("checkpoint_unwritable", error=str(exc), noise="OS entropy")
                noise = None
                if estimator is not None:
                    estimator = FPCAEdge.from_state(state, random_state=None)
        self.noise_restarts = restarts
        self._noise = noise
        self.estimator = estimator
        if estimator is not None:
            self.n_features = estimator.n_features_
            self._checkpointed_blocks = estimator.n_blocks_
            self._checkpointed_n = estimator.n_samples_seen_
        self.epoch = str(state["leaf_epoch"])
        self.seq = int(state["leaf_seq"])
        ingested = {str(k): int(v) for k, v in dict(state["ingested"]).items()}
        self.sequencer.restore(ingested)
        self.durable = dict(ingested)
        self.restored_from = "checkpoint"
        self.log.info("restored", source="checkpoint", n_samples=self.n_samples, seq=self.seq)
        return True

    async def prepare(self) -> None:
        """With no checkpoint, resume from this leaf's own retained snapshot, if any."""
        if self.restored_from is not None or not self._restore_from_broker:
            return
        topic = self.topology.subspace_topic(self.node_id)
        try:
            async with aiomqtt.Client(**self.settings.client_kwargs()) as client:
                await client.subscribe(topic, qos=1)
                async with asyncio.timeout(self.settings.restore_wait_s):
                    async for message in client.messages:
                        payload = message.payload
                        if isinstance(payload, bytes | bytearray) and payload:
                            self._restore_snapshot(bytes(payload))
                        break
        except (TimeoutError, aiomqtt.MqttError):
            return

    def _forget_seed(self) -> None:
        """Stop using ``noise_seed``'s own stream: an earlier incarnation of this leaf may
        have masked other readings with it, and reused noise cancels in a difference.

        Later estimators draw from the operating system's entropy; an estimator already
        made from the seed that has not masked anything yet is made afresh.
        """
        if self.config.noise_seed is None or self._noise is None:
            return
        self._noise = None
        est = self.estimator
        if est is not None and est.privacy is not None and est.n_samples_seen_ == 0:
            self.estimator = self._new_estimator(est.n_features_)

    def _restore_snapshot(self, payload: bytes) -> None:
        # An earlier incarnation published here: fresh noise from the OS, never the seed's
        # (there is no local record of how often this leaf restarted).
        self._forget_seed()
        try:
            msg = decode_subspace(payload, max_bytes=self.settings.max_payload_bytes)
        except WireError as exc:
            self.log.warning("retained_snapshot_rejected", reason=exc.reason, detail=str(exc))
            return
        if msg.node_id != self.node_id or msg.n_samples == 0:
            return
        if msg.privacy != self.privacy:
            self.reject(
                "privacy_mismatch",
                self.topology.subspace_topic(self.node_id),
                f"retained snapshot has privacy {msg.privacy}, configured {self.privacy}; "
                "starting afresh",
            )
            return
        d = msg.n_features
        try:
            self.estimator = FPCAEdge.from_subspace(msg.subspace, **self._estimator_options(d))
        except (ValueError, TypeError) as exc:
            self.log.warning("retained_snapshot_unusable", error=str(exc))
            return
        self.n_features = d
        self.epoch, self.seq, self.snapshot = msg.epoch, msg.seq, msg
        self.restored_from = "retained snapshot"
        self.log.info("restored", source="retained snapshot", n_samples=msg.n_samples)

    async def checkpoint(self) -> None:
        """Write the state atomically (temp file, fsync, rename), off the event loop."""
        if self.checkpoint_path is None:
            return
        est = self.estimator

        def capture() -> dict[str, object]:
            state: dict[str, object] = {} if est is None else est.get_state()
            state["n_features"] = self.n_features
            state["noise_restarts"] = self.noise_restarts
            return state

        # capture everything at one instant: readings may be applied while the file is written
        state = await self._numerics(capture)
        ingested = self.ingested
        n_samples = self.n_samples
        blocks = 0 if est is None else est.n_blocks_
        state.update(leaf_epoch=self.epoch, leaf_seq=self.seq, ingested=ingested)
        await asyncio.to_thread(save_checkpoint, self.checkpoint_path, state)
        self.checkpoints += 1
        self._checkpointed_blocks = blocks
        self._checkpointed_n = n_samples
        self.durable = ingested

    @property
    def n_samples(self) -> int:
        """Samples ingested so far."""
        return 0 if self.estimator is None else self.estimator.n_samples_seen_

    def subscriptions(self) -> list[str]:
        assert self.config.sensor_topic is not None
        return [self.config.sensor_topic]

    def _restart_noise(self, restarts: int) -> np.random.Generator | None:
        """The noise generator after the ``restarts``-th restore from a checkpoint.

        ``SeedSequence([noise_seed, restarts])``: reproducible, and a stream no earlier
        incarnation of this leaf drew from; None (OS entropy) without a seed.
        """
        seed = self.config.noise_seed
        if seed is None:
            return None
        return np.random.default_rng(np.random.SeedSequence([seed, restarts]))

    @staticmethod
    def snapshot_privacy(est: FPCAEdge) -> PrivacyParams | None:
        """The guarantee of ``est``'s snapshots: its own privacy settings, or None."""
        if est.privacy is None or est.clip_norm is None:
            return None
        return PrivacyParams(est.privacy[0], est.privacy[1], est.clip_norm)

    def _snapshot_n(self) -> int:
        """Samples a snapshot taken now would summarise (pending rows of a private leaf
        are not in it until they are flushed)."""
        est = self.estimator
        if est is None:
            return 0
        if est.privacy is None:
            return est.n_samples_seen_
        return est.n_samples_seen_ - est.n_pending_

    def _published_n(self) -> int:
        return 0 if self.snapshot is None else self.snapshot.n_samples

    def _estimator_options(self, n_features: int) -> dict[str, Any]:
        """FPCAEdge settings of this leaf for readings of ``n_features`` values."""
        cfg = self.config
        rank = min(cfg.rank, n_features)
        privacy: dict[str, Any] = {}
        if self.privacy is not None:
            privacy = {
                "privacy": (self.privacy.epsilon, self.privacy.delta),
                "clip_norm": self.privacy.clip_norm,
                "chunk_size": cfg.chunk_size,
                "random_state": self._noise,
            }
        return {
            "rank": rank,
            "block_size": max(cfg.block_size, rank),
            "oversample": None
            if cfg.oversample is None
            else min(cfg.oversample, n_features - rank),
            "adaptive": cfg.adaptive,
            "rank_bounds": cfg.rank_bounds,
            "holdoff": cfg.holdoff,
            "forget": cfg.forget,
            "center": cfg.center,
            **privacy,
        }

    def _new_estimator(self, n_features: int) -> FPCAEdge:
        """A fresh estimator; with privacy, raises ValueError for settings eq. (8) rejects."""
        options = self._estimator_options(n_features)
        if self.privacy is not None:  # fail now, not at the first block
            noise_std(self.privacy.epsilon, self.privacy.delta, n_features, 1)
        return FPCAEdge(n_features, **options)

    def _cells(self) -> int:
        est = self.estimator
        return 0 if est is None else est.n_features_ * (est.rank_ + est.block_size)

    async def _numerics(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` under the estimator lock, in a thread when the problem is large."""
        async with self._lock:
            if self._cells() >= self.settings.offload_min_cells:
                return await asyncio.to_thread(fn)
            return fn()

    # ------------------------------------------------------------------ inbound
    async def handle(self, message: aiomqtt.Message) -> None:
        topic = str(message.topic)
        payload = message.payload
        if not isinstance(payload, bytes | bytearray):
            self.reject("payload_type", topic, f"payload of type {type(payload).__name__}")
            return
        try:
            readings = decode_readings(
                bytes(payload),
                n_features=self.n_features,
                max_bytes=self.settings.max_payload_bytes,
            )
        except WireError as exc:
            self.reject(exc.reason, topic, str(exc))
            return
        if readings.source is None or readings.seq is None:
            await self._apply(readings.values)
        else:
            for block in self.sequencer.offer(readings.source, readings.seq, readings.values):
                await self._apply(block)

    async def _apply(self, values: np.ndarray) -> None:
        """Feed rows ``(n, n_features)`` to the estimator; flag completed blocks."""
        if self.estimator is None:
            self.n_features = values.shape[1]
            self.estimator = self._new_estimator(self.n_features)
        est = self.estimator
        blocks_before = est.n_blocks_
        await self._numerics(lambda: est.partial_fit(values))
        self._last_reading = time.monotonic()
        if est.n_blocks_ // self.publish_every > blocks_before // self.publish_every:
            self._block_done.set()

    @property
    def ingested(self) -> dict[str, int]:
        """Last sequence number applied per source."""
        return dict(self.sequencer.last)

    # ----------------------------------------------------------------- outbound
    async def work(self, client: aiomqtt.Client) -> None:
        idle = self.config.idle_flush_s
        while not self._stop.is_set():  # also when a cancellation is lost (see base)
            try:
                async with asyncio.timeout(idle):
                    await self._block_done.wait()
                block_done = True
            except TimeoutError:
                block_done = False
            for block in self.sequencer.expire():
                await self._apply(block)
            is_idle = time.monotonic() - self._last_reading >= idle
            if block_done or is_idle:
                self._block_done.clear()
                if is_idle:
                    await self._flush_private()
                if self._snapshot_n() != self._published_n():
                    await self._publish_snapshot(client)
                await self._maybe_checkpoint(force=is_idle)
            await self.publish_status(client)

    async def _flush_private(self) -> None:
        """With privacy, mask the pending rows as a short block (`FPCAEdge.flush`).

        Without privacy nothing is done: a snapshot folds the pending rows in anyway, and
        they stay in the block being filled.
        """
        est = self.estimator
        if est is None or est.privacy is None or est.n_pending_ == 0:
            return
        pending = est.n_pending_
        await self._numerics(est.flush)
        self.log.debug("pending_flushed", rows=pending, noise_std=est.last_noise_std_)

    async def _maybe_checkpoint(self, *, force: bool) -> None:
        """Checkpoint every ``checkpoint_every`` blocks, and when idle with news."""
        if self.checkpoint_path is None or self.n_samples == self._checkpointed_n:
            return
        blocks = 0 if self.estimator is None else self.estimator.n_blocks_
        if force or blocks - self._checkpointed_blocks >= self.checkpoint_every:
            await self.checkpoint()

    async def _publish_snapshot(self, client: aiomqtt.Client) -> None:
        est = self.estimator
        if est is None:
            return
        privacy = self.snapshot_privacy(est)
        if privacy != self.privacy:  # unreachable by construction; never publish then
            self.log.error(
                "snapshot_withheld", estimator=str(privacy), configured=str(self.privacy)
            )
            return

        def capture() -> tuple[Any, int, dict[str, int]]:
            return est.tracked_subspace, est.n_pending_, self.ingested

        subspace, pending, ingested = await self._numerics(capture)
        self.seq += 1
        self.snapshot = SubspaceMessage(
            node_id=self.node_id,
            epoch=self.epoch,
            seq=self.seq,
            subspace=subspace,
            timestamp=time.time(),
            privacy=privacy,
            provenance={self.node_id: subspace.n_samples},
        )
        await self.publish_snapshot(
            client, encode_subspace(self.snapshot), self.snapshot.epoch, self.snapshot.seq
        )
        # Without a checkpoint the snapshot is what a restart restores; a private snapshot
        # covers the ingested readings only once no rows are pending (after a flush).
        if self.checkpoint_path is None and (privacy is None or pending == 0):
            self.durable = ingested
        self.log.debug("snapshot_published", seq=self.seq, n_samples=subspace.n_samples)

    async def on_connected(self, client: aiomqtt.Client) -> None:
        if self.snapshot is not None:
            snap = self.snapshot
            await self.publish_snapshot(client, encode_subspace(snap), snap.epoch, snap.seq)
        await self.publish_status(client, force=True)

    async def on_shutdown(self, client: aiomqtt.Client) -> None:
        await self._flush_private()  # a private leaf's final snapshot covers every reading
        await self._maybe_checkpoint(force=True)  # local and durable first
        if self._snapshot_n() != self._published_n():
            await self._publish_snapshot(client)

    def privacy_status(self) -> PrivacyStatus | None:
        """This leaf's guarantee for the status document, or None without privacy.

        ``noise_std`` is omega of eq. (8) for one full block of ``block_size`` readings
        (None before the width of a reading is known).
        """
        if self.privacy is None:
            return None
        est = self.estimator
        block_size = max(self.config.block_size, self.config.rank)
        chunk_size = self.config.chunk_size
        omega = None
        if est is not None:
            block_size, chunk_size = est.block_size, est.chunk_size
            try:
                omega = noise_std(
                    self.privacy.epsilon, self.privacy.delta, est.n_features_, block_size
                )
            except ValueError:
                omega = None
        return PrivacyStatus(
            self.privacy.epsilon,
            self.privacy.delta,
            self.privacy.clip_norm,
            noise_std=omega,
            block_size=block_size,
            chunk_size=chunk_size,
        )

    def status_detail(self) -> StatusDetail:
        snap = self.snapshot
        return StatusDetail(
            node_id=self.node_id,
            role=self.role,
            online=not self._stop.is_set(),
            rank=0 if self.estimator is None else self.estimator.rank_,
            n_samples=self.n_samples,
            seq=self.seq,
            epoch=self.epoch,
            rejects=dict(self.rejects),
            uptime_s=round(self.uptime_s(), 3),
            extra={
                "ingested": self.ingested,
                "durable": dict(self.durable),
                "published_n_samples": 0 if snap is None else snap.n_samples,
                "duplicates": self.sequencer.duplicates,
                "held_rows": self.sequencer.held_rows,
                "gap_rows": self.sequencer.gap_rows,
                "reconnects": self.stats.reconnects,
                "undelivered": self.undelivered,
                "checkpoints": self.checkpoints,
                "restored_from": self.restored_from,
                "last_update_age_s": round(time.monotonic() - self._last_reading, 3),
                "pending_rows": 0 if self.estimator is None else self.estimator.n_pending_,
            },
            privacy=self.privacy_status(),
        )
