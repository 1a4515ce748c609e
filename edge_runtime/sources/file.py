"""`FileSource`: readings from a file followed as it grows (``tail -F``), or a named pipe.

Regular files
-------------
The file is read from its start and then followed: every ``settings.poll_interval_s`` it
is checked for new data, for *truncation* (its size dropped below the read position, as
with logrotate's ``copytruncate``: read again from offset 0) and for *replacement* (the path
now names another inode, as after a rename-and-create rotation: the old file is read to its
end, then the new one from its start). A missing path is waited for. With
``follow = false`` the source ends at the end of the file.

Numbering (exactly-once across restarts): the *accepted* readings are numbered 0, 1, 2, ...
in file order, and the count simply continues across truncations and rotations; rejected
lines take no number, so the consumer's sequencer never waits for a gap. Why not the line
number: a rejected line would leave a hole that the leaf's `SourceSequencer` holds readings
behind for ``gap_timeout_s`` and then counts as lost. Why not a byte offset: the rows of a
`SensorReadings` batch must have consecutive numbers.

Resuming at ``start_seq`` (the consumer's next reading, e.g. a leaf's
``ingested[source] + 1`` from its checkpoint) skips the readings numbered below it:

- With a ``state_dir``, the source keeps resume cursors (`edge_runtime.sources.cursor`:
  device, inode, a hash of the file's first 4 KiB, byte offset, reading number, width), one
  every ``settings.cursor_every_readings`` readings or ``settings.cursor_interval_s``
  seconds, the newest ``settings.cursor_history`` of them plus the start of the current
  file, and saves them in ``state_dir`` at most every ``cursor_interval_s``, when it starts
  reading a new file, and when it stops. A restart seeks to the newest saved cursor at or
  before ``start_seq`` in the same file and re-reads only from there: cost O(readings
  since that cursor), at most ~1024 readings or ~10 s of data after a clean stop. If the
  file at the path is not one the cursors know (replaced or truncated while the agent was
  down), its readings are all new: it is read from offset 0, numbered from ``start_seq``
  (what the old file still held after the consumer's checkpoint is lost, and logged).
- Without a ``state_dir`` nothing is saved: a restart re-reads the file from its start and
  skips ``start_seq`` accepted readings. Correct as long as the file was not truncated or
  rotated since it was first read; costs one pass over the file: measured 0.35-0.5 s per
  100,000 lines of 8 values and 1.5 s per 100,000 lines of 48 values on a 2-core x86
  development machine (a Raspberry Pi is several times slower), against 0.04 s when
  resuming from a cursor (``tests/test_sources.py``).

Lines re-read before ``start_seq`` are not reported as rejects again.

Named pipes (FIFOs)
-------------------
A named pipe is opened read-write and non-blocking, so it never reports end-of-file when a
writer closes it and the source waits for data without polling; writers may come and go
(opening it read-only and reopening on EOF, the classic way, could lose what a new writer
wrote between the EOF and the reopen). If the pipe is not writable by the agent it is
opened read-only and polled after an EOF. Readings from a pipe are gone once read, so
they are numbered from ``start_seq`` like a command's, and nothing is saved.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Unpack

from edge_runtime.sources.base import Source, SourceArgs, SourceError
from edge_runtime.sources.cursor import (
    HEAD_BYTES,
    CursorLog,
    FileCursor,
    head_digest,
    load_cursor_log,
    write_cursor_file,
)
from edge_runtime.sources.lines import LineSplitter
from edge_runtime.sources.ratelimit import LogRateLimiter
from edge_runtime.sources.spec import SourceSpec

__all__ = ["FileSource", "cursor_file_name"]


def cursor_file_name(source_id: str) -> str:
    """Name of a file source's cursor file in the state directory, e.g.
    ``source-pi-07.csv-3fa2c1d0.cursors.json`` (readable, and unique per source id)."""
    digest = hashlib.sha256(source_id.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    base = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(source_id))[-40:] or "file"
    return f"source-{base}-{digest}.cursors.json"


class FileSource(Source):
    """Readings from a regular file (followed) or a named pipe (module docstring).

    Parameters
    ----------
    spec : SourceSpec
        Kind ``file``: ``path``, ``follow``, ``format``.
    source_id, start_seq, n_features, on_reject, settings, rng
        As for `open_source`.
    state_dir : Path or None
        Where resume cursors are kept (an existing directory); None keeps none.

    Attributes
    ----------
    path : Path
        The absolute path followed.
    rotations, truncations : int
        Times the file was replaced / truncated while followed.
    resumed_at : tuple of (int, int) or None
        ``(byte offset, reading number)`` the source resumed from (None before).

    Raises
    ------
    SourceError
        If ``path`` is a directory or ``state_dir`` is not a directory.
    """

    kind = "file"

    def __init__(
        self,
        spec: SourceSpec,
        *,
        state_dir: Path | None = None,
        **common: Unpack[SourceArgs],
    ) -> None:
        super().__init__(spec, **common)
        assert spec.path is not None
        self.path = Path(os.path.abspath(spec.path))
        if self.path.is_dir():
            raise SourceError(
                f"file source path {str(self.path)!r} is a directory; expected a file"
            )
        if state_dir is not None and not Path(state_dir).is_dir():
            raise SourceError(
                f"state_dir {str(state_dir)!r} is not a directory; expected an existing one"
            )
        self.cursor_path = (
            None if state_dir is None else Path(state_dir) / cursor_file_name(self.source_id)
        )
        self.cursors = CursorLog(self.settings.cursor_history)
        self.rotations = 0
        self.truncations = 0
        self.resumed_at: tuple[int, int] | None = None
        self._count = self.start_seq  # number of the next accepted reading of the file
        self._boundary = 0  # offset just past the last line processed
        self._identity: tuple[int, int] | None = None
        self._fd: int | None = None
        self._saved_at = -math.inf
        self._recorded_count = self.start_seq
        self._save_errors = LogRateLimiter(1, self.settings.log_interval_s)

    def _status_extra(self) -> dict[str, object]:
        return {"rotations": self.rotations, "truncations": self.truncations}

    # ------------------------------------------------------------------ start
    async def _produce(self) -> None:
        st = await self._wait_for_path()
        if stat.S_ISFIFO(st.st_mode):
            await self._follow_pipe()
        elif stat.S_ISREG(st.st_mode):
            await self._follow_file()
        else:
            raise SourceError(
                f"file source path {str(self.path)!r} is neither a regular file nor a named pipe"
            )

    async def _wait_for_path(self) -> os.stat_result:
        waiting = False
        while True:
            try:
                return os.stat(self.path)
            except FileNotFoundError:
                if not self.spec.follow:
                    raise SourceError(f"file {str(self.path)!r} does not exist") from None
                if not waiting:
                    self.log.info("waiting_for_file", path=str(self.path))
                    waiting = True
            except OSError as exc:
                raise SourceError(f"cannot stat {str(self.path)!r}: {exc.strerror}") from None
            await asyncio.sleep(self.settings.poll_interval_s)

    def _open_regular(self) -> tuple[int, os.stat_result] | None:
        """Open the path if it is a regular file now; None if it is missing or not one."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SourceError(f"cannot open {str(self.path)!r}: {exc.strerror}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return None
        return fd, st

    # ------------------------------------------------------------------ regular files
    async def _follow_file(self) -> None:
        saved = await self._load_cursors()
        opened = self._open_regular()
        if opened is None:
            raise SourceError(f"file {str(self.path)!r} vanished or is not a regular file")
        fd, st = opened
        self._fd = fd
        self._identity = (st.st_dev, st.st_ino)
        try:
            offset = self._resume(fd, st, saved)
            await self._save_cursors()
            await self._read_file(offset)
        finally:
            self._save_cursors_now()
            fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)

    async def _load_cursors(self) -> CursorLog | None:
        """The saved cursors (read in a worker thread); None without any usable ones."""
        if self.cursor_path is None:
            return None
        try:
            return await asyncio.to_thread(
                load_cursor_log, self.cursor_path, self.source_id, self.settings.cursor_history
            )
        except ValueError as exc:
            self.log.warning("cursor_file_unusable", error=str(exc))
            return None

    def _resume(self, fd: int, st: os.stat_result, log: CursorLog | None) -> int:
        """Choose where to start reading, from the saved cursors ``log``; set the reading
        count and width. The offset."""
        history = self.settings.cursor_history

        def head(n: int) -> str:
            return head_digest(os.pread(fd, n, 0))

        width: int | None = None
        if log is None:  # never read before (or no state_dir): number from the file's start
            self.cursors = CursorLog(history)
            offset, count = 0, 0
            self.cursors.new_file(self._cursor(fd, 0, 0, None))
        else:
            chosen = log.choose(self.start_seq, st.st_dev, st.st_ino, st.st_size, head)
            if chosen is None:
                self.log.warning(
                    "file_replaced_while_stopped",
                    path=str(self.path),
                    detail="no resume cursor matches this file: reading it from its start "
                    "as new readings; what an earlier file held after the last checkpoint "
                    "is lost",
                    seq=self.start_seq,
                )
                log = CursorLog(history)
                offset, count = 0, self.start_seq
                log.new_file(self._cursor(fd, 0, count, None))
            else:
                log.keep_until(self.start_seq)
                offset, count, width = chosen.offset, chosen.seq, chosen.width
            self.cursors = log
        if self.parser.n_features is None and width is not None:
            self.parser.width = width
        self._count = count
        self._boundary = offset
        self.resumed_at = (offset, count)
        self.log.info(
            "file_opened",
            path=str(self.path),
            offset=offset,
            seq=count,
            skip=max(0, self.start_seq - count),
        )
        return offset

    def _line(self, line: bytes, end: int, rows: list[list[float]]) -> None:
        """Number ``line`` if accepted; keep it only from ``start_seq`` on."""
        silent = self._count < self.start_seq  # re-read: reported in an earlier run
        result = self.parser.parse_values(line, count=not silent)
        if isinstance(result, str):
            if not silent:
                self._reject(result, line)
        else:
            if not silent:
                rows.append(result)
            self._count += 1
        if end >= 0:
            self._boundary = end
            if (
                self.cursor_path is not None
                and self._count - self._recorded_count >= self.settings.cursor_every_readings
            ):
                self._record_cursor()  # fine-grained positions, also while skipping

    async def _take_numbered(
        self, lines: Iterable[tuple[bytes, int]], rows: list[list[float]]
    ) -> None:
        """`_line` each ``(line, end offset)`` pair, queueing full batches."""
        for line, end in lines:
            self._line(line, end, rows)
            if len(rows) >= self.settings.max_batch_rows:
                await self._emit(rows)

    async def _read_file(self, offset: int) -> None:
        loop = asyncio.get_running_loop()
        settings = self.settings
        assert self._fd is not None
        os.lseek(self._fd, offset, os.SEEK_SET)
        splitter = LineSplitter(settings.max_line_bytes, offset)
        rows: list[list[float]] = []
        warned_short = False
        while True:
            data = os.read(self._fd, settings.read_chunk_bytes)
            if data:
                await self._take_numbered(splitter.feed(data), rows)
                if loop.time() - self._saved_at >= settings.cursor_interval_s:
                    await self._save_cursors()
                await asyncio.sleep(0)  # a long catch-up read must not starve the loop
                continue
            await self._emit(rows)
            if not self.spec.follow:
                for line, end in splitter.flush():
                    self._line(line, end, rows)
                await self._emit(rows)
                return
            if self._count < self.start_seq and not warned_short:
                warned_short = True
                self.log.warning(
                    "file_shorter_than_resume_point",
                    path=str(self.path),
                    readings=self._count,
                    start_seq=self.start_seq,
                    detail="waiting for the file to reach the checkpoint's reading; was it "
                    "truncated or replaced while stopped? (a state_dir detects that)",
                )
            if loop.time() - self._saved_at >= settings.cursor_interval_s:
                await self._save_cursors()
            splitter = await self._check_file(splitter, rows)
            await asyncio.sleep(settings.poll_interval_s)

    async def _check_file(self, splitter: LineSplitter, rows: list[list[float]]) -> LineSplitter:
        """At the end of the data: handle truncation or replacement; the splitter to use."""
        assert self._fd is not None and self._identity is not None
        settings = self.settings
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None  # renamed away and not recreated yet: keep reading the old one
        if st is not None and (st.st_dev, st.st_ino) != self._identity:
            opened = self._open_regular()
            if opened is None:
                return splitter
            new_fd, new_st = opened
            # Read what was written to the old file since the last read, then switch.
            while data := os.read(self._fd, settings.read_chunk_bytes):
                await self._take_numbered(splitter.feed(data), rows)
                await asyncio.sleep(0)  # a long tail must not starve the loop
            for line, end in splitter.flush():
                self._line(line, end, rows)
            await self._emit(rows)
            old_fd, self._fd = self._fd, new_fd
            os.close(old_fd)
            self._identity = (new_st.st_dev, new_st.st_ino)
            self.rotations += 1
            self.log.info("file_rotated", path=str(self.path), seq=self._count)
            return await self._restart_at_zero()
        if os.fstat(self._fd).st_size < splitter.position:
            self.truncations += 1
            self.log.warning("file_truncated", path=str(self.path), seq=self._count)
            os.lseek(self._fd, 0, os.SEEK_SET)
            return await self._restart_at_zero()
        return splitter

    async def _restart_at_zero(self) -> LineSplitter:
        assert self._fd is not None
        self._boundary = 0
        self.cursors.new_file(self._cursor(self._fd, 0, self._count, self.parser.width))
        await self._save_cursors()
        return LineSplitter(self.settings.max_line_bytes, 0)

    # ------------------------------------------------------------------ cursors
    def _cursor(self, fd: int, offset: int, seq: int, width: int | None) -> FileCursor:
        assert self._identity is not None
        head_len = min(HEAD_BYTES, os.fstat(fd).st_size)
        head = head_digest(os.pread(fd, head_len, 0))
        return FileCursor(*self._identity, offset, seq, width, head_len, head)

    def _record_cursor(self) -> None:
        """Remember the current position (in memory)."""
        if self.cursor_path is None or self._fd is None or self._identity is None:
            return
        cursor = self._cursor(self._fd, self._boundary, self._count, self.parser.width)
        self.cursors.refresh_head(*self._identity, cursor.head_len, cursor.head_sha)
        self.cursors.record(cursor)
        self._recorded_count = self._count

    def _cursor_payload(self) -> bytes | None:
        """Record the current position and encode the cursors (None: nothing to save)."""
        if self.cursor_path is None or self._fd is None or self._identity is None:
            return None
        self._record_cursor()
        return self.cursors.encode(self.source_id)

    async def _save_cursors(self) -> None:
        self._saved_at = asyncio.get_running_loop().time()
        payload = self._cursor_payload()
        if payload is None or self.cursor_path is None:
            return
        try:
            await asyncio.to_thread(write_cursor_file, self.cursor_path, payload)
        except OSError as exc:
            self._save_failed(exc)

    def _save_cursors_now(self) -> None:
        """Final save when stopping (synchronous: may run while being cancelled)."""
        try:
            payload = self._cursor_payload()
            if payload is not None and self.cursor_path is not None:
                write_cursor_file(self.cursor_path, payload)
        except OSError as exc:
            self._save_failed(exc)

    def _save_failed(self, exc: OSError) -> None:
        log_it, suppressed = self._save_errors.allow(asyncio.get_running_loop().time())
        if log_it:
            self.log.warning(
                "cursor_save_failed",
                path=str(self.cursor_path),
                error=exc.strerror or str(exc),
                suppressed=suppressed,
            )

    # ------------------------------------------------------------------ named pipes
    def _open_pipe(self) -> tuple[int, bool]:
        """Open the pipe non-blocking: read-write if allowed, else read-only. ``(fd,
        read-write?)``; `SourceError` if it cannot be opened at all."""
        try:
            try:
                return os.open(self.path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC), True
            except PermissionError:
                return os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), False
        except OSError as exc:
            raise SourceError(f"cannot open pipe {str(self.path)!r}: {exc.strerror}") from None

    async def _follow_pipe(self) -> None:
        fd, writable = self._open_pipe()
        self._fd = fd
        self.log.info("pipe_opened", path=str(self.path), seq=self._next_seq, rdwr=writable)
        settings = self.settings
        splitter = LineSplitter(settings.max_line_bytes)
        rows: list[list[float]] = []
        try:
            while True:
                try:
                    data = os.read(fd, settings.read_chunk_bytes)
                except BlockingIOError:  # a writer is connected, nothing to read now
                    await self._emit(rows)
                    await _readable(fd)
                    continue
                if not data:  # read-only fallback: no writer at the moment
                    await self._emit(rows)
                    await asyncio.sleep(settings.poll_interval_s)
                    continue
                await self._take_lines(splitter.feed(data), rows)
        finally:
            fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)

    def _close_sync(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


async def _readable(fd: int) -> None:
    """Wait until ``fd`` is readable (epoll; for pipes, not for regular files)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
