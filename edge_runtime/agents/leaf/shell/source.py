"""A leaf's local sensor source: opened after the restore, read in its own task.

A leaf configured with a ``command``, ``file`` or ``serial`` source (the node's ``source``,
`edge_runtime.sources`) does not subscribe to its sensor topic; `LocalSource` opens the
source once the leaf's state is restored (checkpoint or retained snapshot), so it continues
after the last reading ingested (``start_seq = ingested[source id] + 1``: a file source
skips what a checkpoint already covers), and reads it in the task ``<node>:source`` --
independent of the MQTT connection -- feeding each batch through the same sequencer and
estimator path as an MQTT reading (exactly once, in order, confirmed and checkpointed
alike).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_runtime.aio import cancel_and_wait
from edge_runtime.sources import SourceError

if TYPE_CHECKING:
    from edge_runtime.sources import Source

__all__ = ["LocalSource"]


class LocalSource:
    """A leaf's local sensor source: opened after the restore, read in its own task (a part
    `LeafAgent` holds; its state is ``"none"`` for a leaf that reads MQTT).

    When the source ends (``restart = "never"``, ``follow = false``) the leaf keeps running
    and publishes through its idle policy. A source that cannot run (`SourceError`: command
    not found, path a directory, pyserial missing) is logged as one ``source_failed`` line
    and stops the agent (`error`, re-raised by the agent's ``run`` and ``aclose``). The
    status document's ``extra`` holds ``source`` (`Source.status`) and ``source_state``
    (``"running"``, ``"finished"``, ``"failed"``, ``"closed"``). A local source logs its bad
    lines itself, rate-limited; the leaf only counts them.

    Parameters
    ----------
    spec : SourceSpec or None
        The node's ``source`` (None: the leaf reads its sensor topic).
    node_id : str
    state_dir : Path or None
        Where a file source keeps its resume cursors.
    core : LeafCore
        Where a source continues (``ingested``), its width (``n_features``), and what counts
        the lines a source refuses (``count_reject``, ``rejects``).
    log : structlog logger
    ingest : callable
        ``await ingest(release, source_id)``: the agent's path of a reading (sequenced,
        screened, applied, scored: `LeafAgent._ingest`).
    wake, stop : callable
        Let the agent's work loop run; stop the agent.
    stopping : callable
        Whether the agent is stopping (a source ended then is ``"closed"``).

    Attributes
    ----------
    state : str
        ``"none"``, ``"unopened"``, ``"running"``, ``"finished"``, ``"failed"``, ``"closed"``.
    source : Source or None
        The source once opened.
    error : SourceError or None
        Why the source could not run, if it could not.
    """

    def __init__(
        self,
        spec: Any,
        *,
        node_id: str,
        state_dir: Path | None,
        core: Any,
        log: Any,
        ingest: Callable[[Callable[[float], Any], str], Awaitable[None]],
        wake: Callable[[], None],
        stop: Callable[[], None],
        stopping: Callable[[], bool],
    ) -> None:
        self.spec = spec
        self._node_id = node_id
        self._state_dir = state_dir
        self._core = core
        self._log = log
        self._ingest = ingest
        self._wake = wake
        self._stop = stop
        self._stopping = stopping
        self.source: Source | None = None
        self.state = "none" if spec is None else "unopened"
        self.error: SourceError | None = None
        self._task: asyncio.Task[None] | None = None

    def open(self) -> None:
        """Open the source and start reading it in the task ``<node>:source`` (a no-op
        without one).

        Raises
        ------
        SourceError
            If the source cannot run (logged as ``source_failed``; the agent stops).
        """
        spec = self.spec
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
            from edge_runtime.sources import open_source  # a local source only

            self.source = open_source(
                spec,
                node_id=self._node_id,
                start_seq=lambda sid: core.ingested.get(sid, -1) + 1,
                n_features=core.n_features,
                on_reject=self._on_reject,
                state_dir=self._state_dir,
            )
        except SourceError as exc:
            self._failed(exc)
            raise
        self.state = "running"
        self._task = asyncio.create_task(self._read(self.source), name=f"{self._node_id}:source")
        self._log.info("source_opened", source=self.source.source_id, kind=spec.kind)

    def _failed(self, exc: SourceError) -> None:
        self.state = "failed"
        self.error = exc
        self._log.error("source_failed", error=str(exc), action="stopping the agent")
        self._stop()

    async def _read(self, source: Source) -> None:
        """Feed the source's readings through the same path as an MQTT reading."""
        core = self._core
        try:
            async for readings in source.readings():
                await self._ingest(
                    lambda now, batch=readings: core.accept_labelled(batch, now),
                    source.source_id,
                )
                self._wake()
        except SourceError as exc:
            self._failed(exc)
            return
        except Exception as exc:  # a bug or an unexpected OS error: keep the agent running
            self.state = "failed"
            core.rejects["internal_error"] += 1
            self._log.error("source_failed", error=f"{type(exc).__name__}: {exc}")
            return
        if self.state == "running":
            self.state = "closed" if self._stopping() else "finished"
            self._log.info("source_finished", source=source.source_id, readings=source.rows)
        self._wake()

    def _on_reject(self, source_id: str, reason: str) -> None:
        # the source logs its bad lines itself (rate-limited): only count here
        self._core.count_reject(reason, source_id)

    def is_from(self, source_id: str | None) -> bool:
        """Whether ``source_id`` is this local source's."""
        return self.source is not None and source_id == self.source.source_id

    def status(self) -> dict[str, object]:
        """``source_state`` and ``source`` for the status document (empty without one)."""
        if self.spec is None:
            return {}
        return {
            "source_state": self.state,
            "source": None if self.source is None else self.source.status(),
        }

    async def close(self) -> None:
        """Stop reading the local source (idempotent); queued readings are dropped and read
        again (file) or lost (command, serial) by the next incarnation."""
        source, task = self.source, self._task
        if source is None:
            return
        if self.state == "running":
            self.state = "closed"
        await source.aclose()
        if task is not None:
            await cancel_and_wait(task)
