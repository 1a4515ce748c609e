"""How a leaf shell recovers an earlier incarnation's state, and keeps its noise fresh.

`Recovery` reads the leaf's checkpoint (``<state_dir>/<node>.ckpt``) at construction and
its own retained snapshot before it connects, hands them to the core (`LeafCore`'s
``restore_checkpoint`` / ``continue_after`` / ``restore_snapshot``), writes checkpoints off
the event loop, and chooses the noise generator a private leaf restarts with.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from edge_runtime.agents.common.core.actions import WriteCheckpoint
from edge_runtime.agents.leaf.core.durability import CheckpointImage
from edge_runtime.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from edge_runtime.wire import WireError, decode_subspace

__all__ = ["Recovery"]


class Recovery:
    """How a leaf shell recovers an earlier incarnation's state and writes its checkpoints
    (a part `LeafAgent` holds).

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

    Parameters
    ----------
    core : LeafCore
        The leaf's core: what is restored into, what a checkpoint captures.
    path : Path or None
        The checkpoint file ``<state_dir>/<node>.ckpt`` (None: no checkpoints).
    noise_seed : int or None
        The node's ``noise_seed``.
    own_topic : str
        The leaf's own subspace topic (its retained snapshot).
    max_payload_bytes : int
        Largest retained snapshot accepted, bytes.
    restore_from_broker : bool
        Whether, without a checkpoint, the leaf resumes from its retained snapshot.
    log : structlog logger
    numerics : callable
        ``await numerics(fn)``: ``fn`` under the core's lock (`run_numerics`).
    read_retained : callable
        ``await read_retained(topic)``: the retained payload or None (`Agent.read_retained`).
    reject : callable
        ``reject(reason, topic, detail)``: counts and logs a refusal.
    clock : callable
        Monotonic seconds.
    connected, offline : asyncio.Event
        The agent's connection state (`checkpoint_while_offline` runs while offline).
    """

    def __init__(
        self,
        core: Any,
        *,
        path: Path | None,
        noise_seed: int | None,
        own_topic: str,
        max_payload_bytes: int,
        restore_from_broker: bool,
        log: Any,
        numerics: Callable[[Callable[[], Any]], Awaitable[Any]],
        read_retained: Callable[[str], Awaitable[bytes | None]],
        reject: Callable[[str, str, str], None],
        clock: Callable[[], float],
        connected: asyncio.Event,
        offline: asyncio.Event,
    ) -> None:
        self._core = core
        self.path = path
        self._noise_seed = noise_seed
        self._own_topic = own_topic
        self._max_bytes = max_payload_bytes
        self._from_broker = restore_from_broker
        self._log = log
        self._numerics = numerics
        self._read_retained = read_retained
        self._reject = reject
        self._clock = clock
        self._connected = connected
        self._offline = offline
        self._lock = asyncio.Lock()  # the work loop's and the offline task's writes, in turn

    def restore_checkpoint(self) -> bool:
        """Resume from the local checkpoint, if there is a readable one."""
        if self.path is None:
            return False
        try:
            state = load_checkpoint(self.path)
        except CheckpointError as exc:
            self._log.error("checkpoint_unreadable", error=str(exc))
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
                else self._core.estimator_from_state(state, random_state=noise)
            )
        except (ValueError, TypeError) as exc:
            self._log.error("checkpoint_invalid", error=str(exc))
            self._forget_seed()
            return False
        mismatch = None if estimator is None else self._core.privacy_mismatch(estimator)
        if mismatch is not None:
            self._core.rejects["privacy_mismatch"] += 1
            self._log.error(
                "checkpoint_privacy_mismatch",
                checkpoint=mismatch,
                configured=str(self._core.privacy),
                action="starting afresh",
            )
            self._forget_seed()
            return False
        if self._core.privacy is not None and self._noise_seed is not None:
            # Record the restart before any reading is masked, so that a crash before the
            # next checkpoint does not make the next restart replay this noise stream.
            state["noise_restarts"] = restarts
            try:
                save_checkpoint(self.path, state)
            except (OSError, ValueError, TypeError) as exc:
                self._log.error("checkpoint_unwritable", error=str(exc), noise="OS entropy")
                noise = None
                if estimator is not None:
                    estimator = self._core.estimator_from_state(state)
        core = self._core
        core.noise_restarts = restarts
        core.noise = noise
        try:
            core.restore_checkpoint(state, estimator, time.monotonic())
        except (KeyError, ValueError, TypeError) as exc:
            self._log.error("checkpoint_invalid", error=str(exc))
            self._forget_seed()
            return False
        self._log.info(
            "restored", source="checkpoint", n_samples=self._core.n_samples, seq=self._core.seq
        )
        return True

    async def restore_retained(self) -> None:
        """Read this leaf's own retained snapshot: resume from it without a checkpoint;
        after a checkpoint restore, continue its ``seq`` after the last one published."""
        if not self._from_broker:
            return
        payload = await self._read_retained(self._own_topic)
        if payload is not None:
            self._take_retained(payload)

    def _forget_seed(self) -> None:
        """Stop using ``noise_seed``'s own stream: an earlier incarnation of this leaf may
        have masked other readings with it, and reused noise cancels in a difference.

        Later estimators draw from the operating system's entropy; an estimator already
        made from the seed that has not masked anything yet is made afresh.
        """
        core = self._core
        if self._noise_seed is None or core.noise is None:
            return
        core.noise = None
        est = core.estimator
        if est is not None and est.privacy is not None and est.n_samples_seen_ == 0:
            core.estimator = core.new_estimator(est.n_features_)

    def _take_retained(self, payload: bytes) -> None:
        try:
            msg = decode_subspace(payload, max_bytes=self._max_bytes)
        except WireError as exc:
            self._log.warning("retained_snapshot_rejected", reason=exc.reason, detail=str(exc))
            if self._core.restored_from is None:
                self._forget_seed()
            return
        if self._core.restored_from == "checkpoint":
            self._core.continue_after(msg)
            return
        # An earlier incarnation published here: fresh noise from the OS, never the seed's
        # (there is no local record of how often this leaf restarted).
        self._forget_seed()
        problem = self._core.restore_snapshot(msg, time.monotonic())
        if problem == "privacy_mismatch":
            self._reject(
                "privacy_mismatch",
                self._own_topic,
                f"retained snapshot has privacy {msg.privacy}, configured {self._core.privacy}; "
                "starting afresh",
            )
        elif problem is not None and problem != "empty":
            self._log.warning("retained_snapshot_unusable", error=problem)
        elif problem is None:
            self._log.info("restored", source="retained snapshot", n_samples=msg.n_samples)

    def _restart_noise(self, restarts: int) -> np.random.Generator | None:
        """The noise generator after the ``restarts``-th restore from a checkpoint.

        ``SeedSequence([noise_seed, restarts])``: reproducible, and a stream no earlier
        incarnation of this leaf drew from; None (OS entropy) without a seed.
        """
        seed = self._noise_seed
        if seed is None:
            return None
        return np.random.default_rng(np.random.SeedSequence([seed, restarts]))

    async def checkpoint(self) -> bool:
        """Capture the state (`LeafCore.checkpoint_image`) and write it as `write_checkpoint`
        does; False if the write failed."""
        if self.path is None:
            return False
        async with self._lock:  # the work loop's and the offline task's, one at a time
            # captured at one instant: readings may be applied while the file is written
            image = await self._numerics(self._core.checkpoint_image)
            return await self._save(WriteCheckpoint("checkpoint", image, "requested"))

    async def write_checkpoint(self, action: WriteCheckpoint) -> bool:
        """Carry out a `WriteCheckpoint` of the core's step: its `CheckpointImage` written
        atomically (temp file, fsync, rename), off the event loop, and the outcome reported
        to the core (`LeafCore.checkpoint_written`, `LeafCore.checkpoint_failed`). False if
        the write failed (disk full, permissions: the previous checkpoint stays, the core
        retries by its rules; logged on failures 1, 2, 4, 8, ...)."""
        if self.path is None:  # (the core checkpoints only with a path)
            return False
        async with self._lock:
            return await self._save(action)

    async def _save(self, action: WriteCheckpoint) -> bool:
        path, image = self.path, action.state
        assert path is not None and isinstance(image, CheckpointImage)
        try:
            await asyncio.to_thread(save_checkpoint, path, image.state)
        except (OSError, CheckpointError) as exc:
            failures = self._core.checkpoint_failed(self._clock())
            if failures & (failures - 1) == 0:  # 1, 2, 4, 8, ...: bounded log lines
                self._log.error(
                    "checkpoint_failed",
                    path=str(path),
                    error=str(exc),
                    failures=failures,
                )
            return False
        self._core.checkpoint_written(action, self._clock())
        return True

    async def checkpoint_while_offline(self) -> None:
        """While the agent is not connected (the work loop, which checkpoints otherwise,
        does not run), checkpoint whenever the core says so (`LeafCore.checkpoint_due`,
        woken at its `checkpoint_deadline`, at least every second): a leaf reading a local
        source through a broker outage, or one whose last readings arrived just before it,
        loses nothing to a power cut. While connected it waits for `offline` (waking
        at every deadline that readings keep moving cost a leaf CPU for nothing).
        Runs until cancelled."""
        core = self._core
        while True:
            if self._connected.is_set():
                await self._offline.wait()
            now = time.monotonic()
            if not self._connected.is_set() and core.checkpoint_due(now):
                await self.checkpoint()
            delay = core.checkpoint_deadline() - time.monotonic()
            await asyncio.sleep(min(max(delay, 0.05), 1.0))
