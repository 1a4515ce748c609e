"""A leaf's local sensor source: opened after the restore, read in its own task.

A leaf configured with a ``command``, ``file`` or ``serial`` source (the node's ``source``,
`edge_runtime.sources`) does not subscribe to its sensor topic; `LeafSource` opens the
source once the leaf's state is restored (checkpoint or retained snapshot), so it continues
after the last reading ingested (``start_seq = ingested[source id] + 1``: a file source
skips what a checkpoint already covers), and reads it in the task ``<node>:source`` --
independent of the MQTT connection -- feeding each batch through the same sequencer and
estimator path as an MQTT reading (exactly once, in order, confirmed and checkpointed
alike).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_runtime.aio import cancel_and_wait
from edge_runtime.sources import SourceError

if TYPE_CHECKING:
    from edge_runtime.sources import Source

__all__ = ["LeafSource"]


class LeafSource:
    """The local-source part of `LeafAgent` (a mixin over `Agent`).

    When the source ends (``restart = "never"``, ``follow = false``) the leaf keeps running
    and publishes through its idle policy. A source that cannot run (`SourceError`: command
    not found, path a directory, pyserial missing) is logged as one ``source_failed`` line
    and stops the agent: its task ends with the `SourceError`, re-raised by `aclose`. The
    status document's ``extra`` holds ``source`` (`Source.status`) and ``source_state``
    (``"running"``, ``"finished"``, ``"failed"``, ``"closed"``). A local source logs its
    bad lines itself, rate-limited; the leaf only counts them.

    The agent provides ``_core``, ``_source_spec`` (the node's `SourceSpec` or None),
    ``_source``, ``_source_task``, ``_source_state``, ``source_error``, ``_state_dir``,
    ``_ingest``, ``wake``, ``stop``, ``_stop``, ``_task``, ``log`` and
    ``node_id``.
    """

    _core: Any
    _source_spec: Any
    _source: Source | None
    _source_task: asyncio.Task[None] | None
    _source_state: str
    _state_dir: Path | None
    _stop: asyncio.Event
    _task: asyncio.Task[None] | None
    source_error: SourceError | None
    node_id: str
    log: Any

    @property
    def source(self) -> Source | None:
        """The local sensor source once opened (None for an MQTT leaf or before `run`)."""
        return self._source

    async def run(self) -> None:
        """`Agent.run`, then close the local source; re-raise a `SourceError` that ended
        the agent."""
        try:
            await super().run()
        finally:
            await self._close_source()
        if self.source_error is not None:
            raise self.source_error

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

    # ------------------------------------------------------------- local source
    def _open_source(self) -> None:
        spec = self._source_spec
        if spec is None:
            return
        core = self._core
        try:
            if self._state_dir is not None and spec.kind == "file":
                try:  # the file source keeps its resume cursors there
                    self._state_dir.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise SourceError(
                        f"cannot create state_dir {str(self._state_dir)!r}: {exc.strerror}"
                    ) from None
            from edge_runtime.sources import open_source  # a local source only (issue 24)

            self._source = open_source(
                spec,
                node_id=self.node_id,
                start_seq=lambda sid: core.ingested.get(sid, -1) + 1,
                n_features=core.n_features,
                on_reject=self._on_source_reject,
                state_dir=self._state_dir,
            )
        except SourceError as exc:
            self._source_failed(exc)
            raise
        self._source_state = "running"
        self._source_task = asyncio.create_task(
            self._read_source(self._source), name=f"{self.node_id}:source"
        )
        self.log.info("source_opened", source=self._source.source_id, kind=spec.kind)

    def _source_failed(self, exc: SourceError) -> None:
        self._source_state = "failed"
        self.source_error = exc
        self.log.error("source_failed", error=str(exc), action="stopping the agent")
        self.stop()

    async def _read_source(self, source: Source) -> None:
        """Feed the source's readings through the same path as an MQTT reading."""
        core = self._core
        try:
            async for readings in source.readings():
                await self._ingest(
                    lambda now, batch=readings: core.accept_labelled(batch, now),
                    source.source_id,
                )
                self.wake()
        except SourceError as exc:
            self._source_failed(exc)
            return
        except Exception as exc:  # a bug or an unexpected OS error: keep the agent running
            self._source_state = "failed"
            core.rejects["internal_error"] += 1
            self.log.error("source_failed", error=f"{type(exc).__name__}: {exc}")
            return
        if self._source_state == "running":
            self._source_state = "closed" if self._stop.is_set() else "finished"
            self.log.info("source_finished", source=source.source_id, readings=source.rows)
        self.wake()

    def _on_source_reject(self, source_id: str, reason: str) -> None:
        # the source logs its bad lines itself (rate-limited): only count here
        self._core.count_reject(reason, source_id)

    async def _close_source(self) -> None:
        """Stop reading the local source (idempotent); queued readings are dropped and read
        again (file) or lost (command, serial) by the next incarnation."""
        source, task = self._source, self._source_task
        if source is None:
            return
        if self._source_state == "running":
            self._source_state = "closed"
        await source.aclose()
        if task is not None:
            await cancel_and_wait(task)
