"""How a leaf shell recovers an earlier incarnation's state, and keeps its noise fresh.

`LeafRecovery` reads the leaf's checkpoint (``<state_dir>/<node>.ckpt``) at construction and
its own retained snapshot before it connects, hands them to the core (`LeafCore`'s
``restore_checkpoint`` / ``continue_after`` / ``restore_snapshot``), writes checkpoints off
the event loop, and chooses the noise generator a private leaf restarts with.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np

from edge_runtime.agents.common.core.actions import WriteCheckpoint
from edge_runtime.agents.leaf.core.durability import CheckpointImage
from edge_runtime.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from edge_runtime.topology import NodeConfig, Topology
from edge_runtime.wire import PrivacyParams, WireError, decode_subspace

__all__ = ["LeafRecovery"]


class LeafRecovery:
    """The recovery part of `LeafAgent` (a mixin over `Agent`).

    Noise generator: the node's ``noise_seed`` seeds a fresh start (reproducible runs;
    the same seed and readings give the same snapshots as ``FPCAEdge(...,
    random_state=noise_seed)``); without one, the operating system's entropy. A restored
    leaf never replays a stream it may already have used: after a restore from its
    checkpoint it draws from ``SeedSequence([noise_seed, restarts])``, where ``restarts``
    counts the restores and is written back to the checkpoint before any reading is
    masked; a ``"gaussian"`` leaf also closes the checkpoint's open segment of the
    continual release and starts the next with a fresh key (`FPCAEdge.from_state`), since the
    segment's noise is regenerated from a key stored in the checkpoint. A leaf that finds
    any other trace of an earlier incarnation -- its own retained snapshot (restored or
    not: there is no local record of earlier restarts), an unreadable or refused
    checkpoint -- draws from the operating system's entropy.

    A checkpoint or retained snapshot whose privacy settings (``epsilon``, ``delta``,
    ``clip_norm``, ``mechanism``; for a checkpoint also the release horizon; or their
    absence) differ from the configured ones is not restored: it is logged and counted in
    ``rejects["privacy_mismatch"]``, and the leaf starts afresh, so a summary is never
    published under a guarantee it was not computed with.

    The agent provides ``_core``, ``core_class``, ``checkpoint_path``, ``privacy``,
    ``config``, ``settings``, ``topology``, ``node_id``, ``log``, ``_restore_from_broker``,
    ``_numerics``, ``read_retained`` and ``reject``.
    """

    _core: Any
    core_class: Any
    checkpoint_path: Path | None
    privacy: PrivacyParams | None
    config: NodeConfig
    settings: Any
    topology: Topology
    node_id: str
    log: Any
    _restore_from_broker: bool
    _checkpoint_lock: asyncio.Lock
    clock: Any
    connected: asyncio.Event
    offline: asyncio.Event

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
                else self.core_class.estimator_from_state(state, random_state=noise)
            )
        except (ValueError, TypeError) as exc:
            self.log.error("checkpoint_invalid", error=str(exc))
            self._forget_seed()
            return False
        mismatch = None if estimator is None else self._core.privacy_mismatch(estimator)
        if mismatch is not None:
            self._core.rejects["privacy_mismatch"] += 1
            self.log.error(
                "checkpoint_privacy_mismatch",
                checkpoint=mismatch,
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
                    estimator = self.core_class.estimator_from_state(state)
        core = self._core
        core.noise_restarts = restarts
        core.noise = noise
        try:
            core.restore_checkpoint(state, estimator, time.monotonic())
        except (KeyError, ValueError, TypeError) as exc:
            self.log.error("checkpoint_invalid", error=str(exc))
            self._forget_seed()
            return False
        self.log.info("restored", source="checkpoint", n_samples=self.n_samples, seq=self.seq)
        return True

    async def _restore_retained(self) -> None:
        """Read this leaf's own retained snapshot: resume from it without a checkpoint;
        after a checkpoint restore, continue its ``seq`` after the last one published."""
        if not self._restore_from_broker:
            return
        payload = await self.read_retained(self.topology.subspace_topic(self.node_id))
        if payload is not None:
            self._take_retained(payload)

    def _forget_seed(self) -> None:
        """Stop using ``noise_seed``'s own stream: an earlier incarnation of this leaf may
        have masked other readings with it, and reused noise cancels in a difference.

        Later estimators draw from the operating system's entropy; an estimator already
        made from the seed that has not masked anything yet is made afresh.
        """
        core = self._core
        if self.config.noise_seed is None or core.noise is None:
            return
        core.noise = None
        est = core.estimator
        if est is not None and est.privacy is not None and est.n_samples_seen_ == 0:
            core.estimator = core.new_estimator(est.n_features_)

    def _take_retained(self, payload: bytes) -> None:
        try:
            msg = decode_subspace(payload, max_bytes=self.settings.max_payload_bytes)
        except WireError as exc:
            self.log.warning("retained_snapshot_rejected", reason=exc.reason, detail=str(exc))
            if self.restored_from is None:
                self._forget_seed()
            return
        if self.restored_from == "checkpoint":
            self._core.continue_after(msg)
            return
        # An earlier incarnation published here: fresh noise from the OS, never the seed's
        # (there is no local record of how often this leaf restarted).
        self._forget_seed()
        problem = self._core.restore_snapshot(msg, time.monotonic())
        if problem == "privacy_mismatch":
            self.reject(
                "privacy_mismatch",
                self.topology.subspace_topic(self.node_id),
                f"retained snapshot has privacy {msg.privacy}, configured {self.privacy}; "
                "starting afresh",
            )
        elif problem is not None and problem != "empty":
            self.log.warning("retained_snapshot_unusable", error=problem)
        elif problem is None:
            self.log.info("restored", source="retained snapshot", n_samples=msg.n_samples)

    def _restart_noise(self, restarts: int) -> np.random.Generator | None:
        """The noise generator after the ``restarts``-th restore from a checkpoint.

        ``SeedSequence([noise_seed, restarts])``: reproducible, and a stream no earlier
        incarnation of this leaf drew from; None (OS entropy) without a seed.
        """
        seed = self.config.noise_seed
        if seed is None:
            return None
        return np.random.default_rng(np.random.SeedSequence([seed, restarts]))

    async def checkpoint(self) -> bool:
        """Capture the state (`LeafCore.checkpoint_image`) and write it as `write_checkpoint`
        does; False if the write failed."""
        if self.checkpoint_path is None:
            return False
        async with self._checkpoint_lock:  # the work loop's and the offline task's, one at a time
            # captured at one instant: readings may be applied while the file is written
            image = await self._numerics(self._core.checkpoint_image)
            return await self._save(WriteCheckpoint("checkpoint", image, "requested"))

    async def write_checkpoint(self, action: WriteCheckpoint) -> bool:
        """Carry out a `WriteCheckpoint` of the core's step: its `CheckpointImage` written
        atomically (temp file, fsync, rename), off the event loop, and the outcome reported
        to the core (`LeafCore.checkpoint_written`, `LeafCore.checkpoint_failed`). False if
        the write failed (disk full, permissions: the previous checkpoint stays, the core
        retries by its rules; logged on failures 1, 2, 4, 8, ...)."""
        if self.checkpoint_path is None:  # (the core checkpoints only with a path)
            return False
        async with self._checkpoint_lock:
            return await self._save(action)

    async def _save(self, action: WriteCheckpoint) -> bool:
        path, image = self.checkpoint_path, action.state
        assert path is not None and isinstance(image, CheckpointImage)
        try:
            await asyncio.to_thread(save_checkpoint, path, image.state)
        except (OSError, CheckpointError) as exc:
            failures = self._core.checkpoint_failed(self.clock())
            if failures & (failures - 1) == 0:  # 1, 2, 4, 8, ...: bounded log lines
                self.log.error(
                    "checkpoint_failed",
                    path=str(path),
                    error=str(exc),
                    failures=failures,
                )
            return False
        self._core.checkpoint_written(action, self.clock())
        return True

    async def checkpoint_while_offline(self) -> None:
        """While the agent is not connected (the work loop, which checkpoints otherwise,
        does not run), checkpoint whenever the core says so (`LeafCore.checkpoint_due`,
        woken at its `checkpoint_deadline`, at least every second): a leaf reading a local
        source through a broker outage, or one whose last readings arrived just before it,
        loses nothing to a power cut. While connected it waits for `offline` (issue 24:
        waking at every deadline that readings keep moving cost a leaf CPU for nothing).
        Runs until cancelled."""
        core = self._core
        while True:
            if self.connected.is_set():
                await self.offline.wait()
            now = time.monotonic()
            if not self.connected.is_set() and core.checkpoint_due(now):
                await self.checkpoint()
            delay = core.checkpoint_deadline() - time.monotonic()
            await asyncio.sleep(min(max(delay, 0.05), 1.0))
