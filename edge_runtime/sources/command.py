"""`CommandSource`: readings from a command's stdout, one per line; restarted with backoff.

Any vendor sensor script works through it: ``command = ["python3", "read_bme280.py"]``
prints ``21.5,40.2,1013.25`` lines (CSV or JSON, see `edge_runtime.sources.lines`), and
the raw readings never leave the device.

Process handling
----------------
- The command runs without a shell, stdin from ``/dev/null``, in a new session (its own
  process group), so closing the source stops the script *and* what it started: SIGTERM
  to the group, SIGKILL after ``settings.kill_timeout_s``.
- stdout is read as it comes; the batches are exactly the lines each read delivers (up to
  ``settings.max_batch_rows``), so a script printing one line a second gives one reading a
  second and ``cat big.csv`` gives full batches. When the consumer is slow the source stops
  reading and the script blocks on its stdout (back-pressure, nothing lost).
- stderr lines are logged as warnings (``command_stderr``), rate-limited: the first
  ``settings.stderr_lines_per_interval`` per ``settings.log_interval_s``, then one count.
- When the command exits it is started again according to ``spec.restart`` (``always``,
  ``on-failure``: non-zero exit or killed by a signal, ``never``: the source ends), after a
  `Backoff` delay: ``restart_initial_s`` doubling to ``restart_max_s``, with jitter; a run
  that delivered a reading or lived ``restart_reset_s`` resets it. A script that prints one
  reading and exits is therefore polled about every ``restart_initial_s``.

Numbering: readings are numbered consecutively from ``start_seq`` across restarts (the
readings of a restarted command are new readings). Nothing is persisted: readings the
consumer had not made durable before an agent crash are gone, as with any live sensor.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
from collections import deque
from collections.abc import Callable
from typing import Unpack

from edge_runtime.sources.base import Source, SourceArgs, SourceError
from edge_runtime.sources.lines import LineSplitter
from edge_runtime.sources.ratelimit import LogRateLimiter
from edge_runtime.sources.restart import restart_backoff
from edge_runtime.sources.spec import SourceSpec

__all__ = ["CommandProtocol", "CommandSource", "pipes_closed"]

_STDERR_EXCERPT = 500
_STDERR_GRACE_S = 1.0


class CommandProtocol(asyncio.SubprocessProtocol):
    """Collects a process's stdout (bounded, pausing the pipe when the consumer is slow),
    hands stderr lines to a callback, and resolves ``exited`` with the return code."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        high_water: int,
        on_stderr_line: Callable[[bytes], None],
    ) -> None:
        self.loop = loop
        self.high_water = high_water
        self.on_stderr_line = on_stderr_line
        self.transport: asyncio.SubprocessTransport | None = None
        self.exited: asyncio.Future[int] = loop.create_future()
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self.stdout_eof = False
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._stderr = LineSplitter(_STDERR_EXCERPT)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self.transport = transport

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        data = data.encode() if isinstance(data, str) else data
        if fd == 1:
            self._chunks.append(data)
            self._buffered += len(data)
            if self._buffered >= self.high_water and not self._paused:
                pipe = self.transport.get_pipe_transport(1) if self.transport else None
                if isinstance(pipe, asyncio.ReadTransport):
                    pipe.pause_reading()
                    self._paused = True
            self._wake()
        elif fd == 2:
            for line, _ in self._stderr.feed(data):
                self.on_stderr_line(line)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self.stdout_eof = True
            self._wake()
        elif fd == 2:
            for line, _ in self._stderr.flush():
                self.on_stderr_line(line)

    def process_exited(self) -> None:
        if not self.exited.done() and self.transport is not None:
            code = self.transport.get_returncode()
            self.exited.set_result(-1 if code is None else code)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def read(self) -> bytes:
        """The stdout bytes received so far (waiting for some); b"" at end of stdout."""
        while not self._chunks and not self.stdout_eof:
            self._waiter = self.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        if self._paused:
            pipe = self.transport.get_pipe_transport(1) if self.transport else None
            if isinstance(pipe, asyncio.ReadTransport) and not pipe.is_closing():
                pipe.resume_reading()
            self._paused = False
        return data


class CommandSource(Source):
    """Readings from the stdout of ``spec.command`` (see the module docstring).

    Parameters
    ----------
    spec : SourceSpec
        Kind ``command``: ``command``, ``restart``, ``format``.
    source_id, start_seq, n_features, on_reject, settings, rng
        As for `open_source` (``rng`` draws the restart jitter).

    Attributes
    ----------
    starts : int
        Times the command was started.
    last_returncode : int or None
        Exit status of the last run (negative: killed by that signal number).

    Raises
    ------
    SourceError
        If the program (``command[0]``) is not found on ``PATH`` or is not executable.
    """

    kind = "command"

    def __init__(self, spec: SourceSpec, **common: Unpack[SourceArgs]) -> None:
        super().__init__(spec, **common)
        program = spec.command[0]
        found = shutil.which(program)
        if found is None:
            raise SourceError(
                f"command {program!r} is not found or not executable (PATH is "
                f"{os.environ.get('PATH', '')!r}); expected a program such as 'python3'"
            )
        self.command = spec.command
        self.starts = 0
        self.last_returncode: int | None = None
        settings = self.settings
        self.backoff = restart_backoff(settings, self.rng)
        self._stderr_limit = LogRateLimiter(
            settings.stderr_lines_per_interval, settings.log_interval_s
        )
        self._transport: asyncio.SubprocessTransport | None = None

    def _status_extra(self) -> dict[str, object]:
        return {"starts": self.starts, "returncode": self.last_returncode}

    # ------------------------------------------------------------------ stderr
    def _stderr_line(self, line: bytes) -> None:
        log_it, suppressed = self._stderr_limit.allow(asyncio.get_running_loop().time())
        if log_it:
            text = line.decode("utf-8", "replace")[:_STDERR_EXCERPT]
            extra = {"suppressed": suppressed} if suppressed else {}
            self.log.warning("command_stderr", line=text, **extra)

    def _flush_stderr_summary(self) -> None:
        suppressed = self._stderr_limit.flush()
        if suppressed:
            self.log.warning("command_stderr_suppressed", suppressed=suppressed)

    # ------------------------------------------------------------------ loop
    async def _produce(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            rows_before = self.rows
            returncode = await self._run_once(loop)
            self.last_returncode = returncode
            policy = self.spec.restart
            if policy == "never" or (policy == "on-failure" and returncode == 0):
                self.log.info("command_finished", returncode=returncode)
                return
            if self.rows > rows_before or loop.time() - started >= self.settings.restart_reset_s:
                self.backoff.reset()
            delay = self.backoff.next_delay()
            log = self.log.info if returncode == 0 else self.log.warning
            log(
                "command_exited",
                returncode=returncode,
                ran_s=round(loop.time() - started, 3),
                restart_in_s=round(delay, 3),
                failures=self.backoff.failures,
            )
            await asyncio.sleep(delay)

    async def _run_once(self, loop: asyncio.AbstractEventLoop) -> int | None:
        """Run the command once; its exit status (None if it could not start)."""
        protocol = CommandProtocol(loop, self.settings.read_chunk_bytes, self._stderr_line)
        try:
            transport, _ = await loop.subprocess_exec(
                lambda: protocol,
                *self.command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            if self.spec.restart == "never":
                raise SourceError(
                    f"cannot start command {list(self.command)!r}: {exc.strerror or exc}"
                ) from None
            self.log.warning("command_start_failed", error=exc.strerror or str(exc))
            return None
        self._transport = transport
        self.starts += 1
        self.log.info("command_started", pid=transport.get_pid(), command=list(self.command))
        splitter = LineSplitter(self.settings.max_line_bytes)
        rows: list[list[float]] = []
        try:
            while data := await protocol.read():
                await self._take_lines(splitter.feed(data), rows)
                await self._emit(rows)
            for line, _ in splitter.flush():
                self._take(line, rows)
            await self._emit(rows)
            return await protocol.exited
        finally:
            await self._stop(transport, protocol)
            self._transport = None
            self._flush_stderr_summary()

    async def _stop(
        self, transport: asyncio.SubprocessTransport, protocol: CommandProtocol
    ) -> None:
        """Terminate the process group if the command (or a child of it holding its stdout)
        still runs, SIGKILL it after ``kill_timeout_s``; close the transport.

        This runs when `Source.aclose` cancels the producer, so its waits never cancel the
        task themselves (`asyncio.wait` with a timeout, a polling deadline): on Python 3.11,
        ``asyncio.wait_for`` returns normally when the task is cancelled in the moment its
        awaitable completes (CPython gh-86296, fixed in 3.12), and a source closed as a run
        ended then restarted its command and blocked for ever on its full queue, with
        ``aclose`` waiting for it; ``asyncio.timeout`` before 3.11.3 (Debian bookworm's
        3.11.2) raises its expiry as `asyncio.CancelledError` in a task already being
        cancelled, which would skip the SIGKILL."""
        try:
            pid = transport.get_pid()
            if not protocol.stdout_eof or not protocol.exited.done():
                # Linux never reuses a pid while it is still a process group id, so this
                # reaches the command's group even after the command itself was reaped.
                self._signal_group(pid, signal.SIGTERM)
            if not protocol.exited.done():
                await asyncio.wait([protocol.exited], timeout=self.settings.kill_timeout_s)
                if not protocol.exited.done():
                    self.log.warning(
                        "command_killed", pid=pid, after_s=self.settings.kill_timeout_s
                    )
                    self._signal_group(pid, signal.SIGKILL)
                    await asyncio.wait([protocol.exited], timeout=5.0)
            await pipes_closed(transport, _STDERR_GRACE_S)  # the stderr of a short-lived writer
        finally:
            transport.close()

    @staticmethod
    def _signal_group(pid: int | None, sig: signal.Signals) -> None:
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)

    def _close_sync(self) -> None:
        transport, self._transport = self._transport, None
        if transport is not None:  # the producer could not clean up (e.g. loop closing)
            self._signal_group(transport.get_pid(), signal.SIGKILL)
            transport.close()


async def pipes_closed(transport: asyncio.SubprocessTransport, timeout_s: float) -> bool:
    """Wait until the stdout and stderr pipes are closed (EOF from the process), at most
    ``timeout_s`` seconds; whether they are."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:  # bounded by the deadline
        pipes = [transport.get_pipe_transport(fd) for fd in (1, 2)]
        if all(p is None or p.is_closing() for p in pipes):
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.01)
