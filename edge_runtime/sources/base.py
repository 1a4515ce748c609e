"""`Source`: the async shell every local source kind shares (lifecycle, queue, numbering).

A source runs one named producer task that reads bytes (a file, a command's stdout, a
serial port), cuts them into lines (`LineSplitter`), parses each (`LineParser`) and puts
numbered `SensorReadings` batches into a bounded queue; `Source.readings` hands them out.
Everything the consumer sees is in order and numbered consecutively from ``start_seq``;
rejected lines are counted, reported to ``on_reject`` and logged rate-limited, and never
stop the source.

Lifecycle (like httpx's ``ClientState``): ``UNOPENED`` until the first `Source.readings`
(or `Source.start`), ``OPEN`` while producing, ``CLOSED`` after `Source.aclose`, which
cancels the producer and waits for its clean-up (a command's process group is terminated,
files and ports closed). A closed source cannot be reopened: open a new one with the
consumer's next ``start_seq``.
"""

from __future__ import annotations

import asyncio
import enum
import random
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from typing import ClassVar, TypedDict

import numpy as np
import structlog

from edge_runtime.aio import cancel_and_wait
from edge_runtime.sources.errors import SourceError
from edge_runtime.sources.lines import LineParser
from edge_runtime.sources.ratelimit import LogRateLimiter
from edge_runtime.sources.spec import SourceSettings, SourceSpec
from edge_runtime.wire import SensorReadings

__all__ = ["RejectCallback", "Source", "SourceArgs", "SourceError", "SourceState"]

RejectCallback = Callable[[str, str], None]
"""``on_reject(source_id, reason)``: called once per rejected line, reason in
`REJECT_REASONS`. It must not block, and need not log (the source logs rate-limited)."""


class SourceState(enum.Enum):
    """Lifecycle of a `Source`: ``UNOPENED`` -> ``OPEN`` (producing) -> ``CLOSED``."""

    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


class SourceArgs(TypedDict):
    """The keyword arguments every kind's constructor takes after ``spec`` (their meaning:
    `open_source`). Kinds declare ``**common: Unpack[SourceArgs]`` and pass them on to
    `Source.__init__`, so the list lives here once."""

    source_id: str
    start_seq: int
    n_features: int | None
    on_reject: RejectCallback | None
    settings: SourceSettings
    rng: random.Random


class _Readings:
    """What `Source.readings` returns: an async iterator that only asks its source."""

    def __init__(self, source: Source) -> None:
        self._source = source

    def __aiter__(self) -> _Readings:
        return self

    async def __anext__(self) -> SensorReadings:
        return await self._source._next()


class _End:
    """Queue marker: the producer finished (a command that is not restarted, a file that
    is not followed)."""


_END = _End()


class Source(ABC):
    """A stream of numbered sensor readings from a local source.

    Use as an async context manager, or call `aclose` when done::

        async with open_source(spec, node_id="pi-07", start_seq=next_seq) as source:
            async for readings in source.readings():
                ...  # readings.values (n, d) float64, readings.source, readings.seq

    Memory: at most ``settings.queue_batches`` batches of ``settings.max_batch_rows`` rows,
    plus one line of ``settings.max_line_bytes`` and one read chunk.

    Attributes
    ----------
    source_id : str
        Stable id of this source (`edge_runtime.sources.source_id`).
    spec : SourceSpec
    settings : SourceSettings
    parser : LineParser
        Its ``rejects`` Counter counts rejected lines per reason.
    state : SourceState
    rng : random.Random
        The jitter generator the kind's restart `Backoff` draws from.
    """

    kind: ClassVar[str]

    def __init__(
        self,
        spec: SourceSpec,
        *,
        source_id: str,
        start_seq: int,
        n_features: int | None,
        on_reject: RejectCallback | None,
        settings: SourceSettings,
        rng: random.Random,
    ) -> None:
        self.spec = spec
        self.source_id = source_id
        self.settings = settings
        self.rng = rng
        self.parser = LineParser(spec.format, n_features, settings.max_line_bytes)
        self.on_reject = on_reject
        self.start_seq = start_seq
        self.state = SourceState.UNOPENED
        self._next_seq = start_seq
        self._queue: asyncio.Queue[SensorReadings | _End | BaseException] = asyncio.Queue(
            settings.queue_batches
        )
        self._task: asyncio.Task[None] | None = None
        self._waiting = False
        self._finished = False
        self._reject_limit = LogRateLimiter(
            settings.stderr_lines_per_interval, settings.log_interval_s
        )
        self.log = structlog.get_logger("edge_runtime.source").bind(
            source=source_id, kind=self.kind
        )

    # ------------------------------------------------------------------ public
    @property
    def rejects(self) -> Counter[str]:
        """Rejected lines per reason (`REJECT_REASONS`)."""
        return self.parser.rejects

    @property
    def next_seq(self) -> int:
        """Sequence number the next queued reading gets."""
        return self._next_seq

    @property
    def rows(self) -> int:
        """Readings queued for the consumer so far (this run): ``next_seq - start_seq``."""
        return self._next_seq - self.start_seq

    def status(self) -> dict[str, object]:
        """JSON-able counters for a status document.

        Returns
        -------
        dict of str to JSON data
            ``source`` (str), ``kind`` (str), ``next_seq`` (int), ``readings`` (int, queued
            this run), ``rejects`` (dict of reason to int) and the kind's own counters
            (``starts`` and ``returncode``; ``rotations`` and ``truncations``; ``opens``).
        """
        return {
            "source": self.source_id,
            "kind": self.kind,
            "next_seq": self._next_seq,
            "readings": self.rows,
            "rejects": dict(self.parser.rejects),
            **self._status_extra(),
        }

    def start(self) -> None:
        """Start the producer task (done by the first `readings`); needs a running loop.

        Raises
        ------
        RuntimeError
            If the source is closed.
        """
        if self.state is SourceState.CLOSED:
            raise RuntimeError(f"source {self.source_id!r} is closed; open a new one")
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"source {self.source_id}"
            )
            self.state = SourceState.OPEN

    def readings(self) -> AsyncIterator[SensorReadings]:
        """The readings, in batches of 1 to ``settings.max_batch_rows`` rows, consecutively
        numbered from ``start_seq``; the iteration ends when the source finishes (a command
        that is not restarted, a file that is not followed) or is closed. Starts the source.

        The iterator holds no state: breaking out of an ``async for`` and iterating
        ``readings()`` again continues with the next batch, and cancelling a consumer
        while it waits loses nothing (a batch not taken stays queued). One waiting
        consumer at a time.

        Returns
        -------
        async iterator of SensorReadings
            Each with ``values`` of shape ``(n, width)`` float64, ``source`` =
            `source_id` and ``seq`` = the number of its first row.

        Raises
        ------
        SourceError
            From the iteration, if the source cannot run (see the kind's docstring).
        RuntimeError
            If the source is closed (from this call), or another consumer is waiting (from
            the iteration).
        """
        self.start()
        return _Readings(self)

    async def _next(self) -> SensorReadings:
        if self._finished:
            raise StopAsyncIteration
        if self._waiting:
            raise RuntimeError(f"source {self.source_id!r} already has a consumer waiting")
        self._waiting = True
        try:
            item = await self._queue.get()
        finally:
            self._waiting = False
        if isinstance(item, _End):
            self._finished = True
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._finished = True
            raise item
        return item

    async def aclose(self) -> None:
        """Stop producing and release everything (idempotent); a consumer waiting for
        readings sees the end of the iteration. Queued batches are dropped: the consumer's
        next ``start_seq`` says where a new source continues.

        Waits for the producer's clean-up (a command's process group gets up to
        ``settings.kill_timeout_s`` seconds after SIGTERM, then SIGKILL; a serial read in
        flight up to ``settings.serial_timeout_s``). Raises nothing of its own; re-raises
        `asyncio.CancelledError` if the caller itself is cancelled while waiting.
        """
        if self.state is SourceState.CLOSED:
            return
        self.state = SourceState.CLOSED
        task, self._task = self._task, None
        try:
            if task is not None and not task.done():
                await cancel_and_wait(task)
        finally:
            self._close_sync()
            while not self._queue.empty():
                self._queue.get_nowait()
            self._queue.put_nowait(_END)

    async def __aenter__(self) -> Source:
        if self.state is SourceState.CLOSED:
            raise RuntimeError(f"source {self.source_id!r} is closed; open a new one")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.source_id!r} {self.state.value}>"

    # ------------------------------------------------------------------ for the kinds
    @abstractmethod
    async def _produce(self) -> None:
        """Read, parse and `_emit` until done (return) or cancelled."""

    def _status_extra(self) -> dict[str, object]:
        return {}

    def _close_sync(self) -> None:
        """Release what the producer's clean-up could not (called by `aclose`)."""
        return None

    def _take(self, line: bytes, rows: list[list[float]]) -> bool:
        """Parse ``line``: append an accepted reading to ``rows`` (True), or count, report
        and log a rejected one (False)."""
        result = self.parser.parse_values(line)
        if isinstance(result, str):
            self._reject(result, line)
            return False
        rows.append(result)
        return True

    async def _take_lines(
        self, lines: Iterable[tuple[bytes, int]], rows: list[list[float]]
    ) -> None:
        """`_take` each line of ``(line, end offset)`` pairs (a `LineSplitter`'s output),
        queueing ``rows`` whenever it reaches ``settings.max_batch_rows``."""
        for line, _ in lines:
            self._take(line, rows)
            if len(rows) >= self.settings.max_batch_rows:
                await self._emit(rows)

    def _reject(self, reason: str, line: bytes) -> None:
        if self.on_reject is not None:
            self.on_reject(self.source_id, reason)
        log_it, suppressed = self._reject_limit.allow(asyncio.get_running_loop().time())
        if log_it:
            extra = {"suppressed": suppressed} if suppressed else {}
            self.log.warning(
                "reading_rejected",
                reason=reason,
                detail=self.parser.describe(reason, line),
                **extra,
            )

    async def _emit(self, rows: list[list[float]]) -> None:
        """Queue ``rows`` (readings of one width) as one batch and clear the list."""
        if not rows:
            return
        values = np.array(rows, dtype=np.float64)
        readings = SensorReadings(values, source=self.source_id, seq=self._next_seq)
        self._next_seq += len(rows)
        rows.clear()
        await self._queue.put(readings)

    async def _run(self) -> None:
        try:
            await self._produce()
        except asyncio.CancelledError:
            raise
        except SourceError as exc:
            self.log.error("source_failed", error=str(exc))
            await self._queue.put(exc)
        except Exception as exc:  # a bug or an unexpected OS error: hand it to the consumer
            self.log.error("source_failed", error=f"{type(exc).__name__}: {exc}")
            await self._queue.put(exc)
        else:
            await self._queue.put(_END)
        finally:
            suppressed = self._reject_limit.flush()
            if suppressed:
                self.log.warning("reading_rejected_suppressed", suppressed=suppressed)
