"""`SerialSource`: readings from a serial port (pyserial, the optional ``serial`` extra).

A microcontroller (Arduino, ESP32, a USB sensor) printing one reading per line over a
serial port: ``source = { kind = "serial", port = "/dev/ttyUSB0", baudrate = 115200 }``.

- pyserial is imported when a serial source is opened, so devices without serial sensors
  need not install it; without it `open_source` raises a one-line `SourceError` naming the
  extra (``pip install './edge_runtime-<version>-py3-none-any.whl[serial]'`` with the wheel
  file, or ``pip install '.[serial]'`` in a clone).
- The port is opened with ``timeout = settings.serial_timeout_s`` and read in one worker
  thread of the source's own (blocking reads never block the event loop; each returns
  within the timeout, so closing waits at most that long). Each read returns every byte
  waiting, and the lines they complete form one batch.
- The first line after each open is dropped (``settings.serial_discard_first_line``): it is
  usually the tail of a line the device was sending, and a numeric tail would pass as a
  reading with wrong values. The input buffer is flushed on open for the same reason.
- A port that is missing, vanishes (USB unplugged) or fails is reopened with the same
  capped, jittered backoff as a command (``restart_initial_s`` .. ``restart_max_s``); each
  failure is one warning line.
- The device does not wait for a slow consumer: when the source's queue is full, the OS
  buffer fills and then drops bytes (a broken line is then rejected, never misread as a
  shorter reading unless it happens to have the right width; a fixed ``n_features``
  narrows that further).

Numbering: consecutive from ``start_seq`` across reopenings; nothing is persisted.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
from types import ModuleType
from typing import Any, Unpack

from edge_runtime import __version__
from edge_runtime.sources.base import Source, SourceArgs, SourceError
from edge_runtime.sources.lines import LineSplitter
from edge_runtime.sources.restart import restart_backoff
from edge_runtime.sources.spec import SourceSpec

__all__ = ["SerialSource", "import_pyserial"]

EXTRA_HINT = (
    "install the serial extra into this environment from the edge-runtime wheel file: "
    f"{sys.executable} -m pip install '/path/to/edge_runtime-{__version__}-py3-none-any.whl"
    "[serial]' (in a clone of the repository: pip install '.[serial]'; or just pip install "
    "'pyserial>=3.5'; edge-runtime is not on PyPI)"
)


def import_pyserial() -> ModuleType:
    """The ``serial`` module of pyserial.

    Raises
    ------
    SourceError
        One line naming the extra to install, if pyserial is missing.
    """
    try:
        import serial
    except ImportError:
        raise SourceError(
            f"a serial source needs pyserial, which is not installed: {EXTRA_HINT}"
        ) from None
    if not hasattr(serial, "Serial"):  # another module called "serial" shadows pyserial
        raise SourceError(
            f"the module 'serial' at {getattr(serial, '__file__', '?')!r} is not pyserial: "
            f"{EXTRA_HINT}"
        )
    return serial


class SerialSource(Source):
    """Readings from a serial port (module docstring).

    Parameters
    ----------
    spec : SourceSpec
        Kind ``serial``: ``port``, ``baudrate``, ``format``.
    source_id, start_seq, n_features, on_reject, settings, rng
        As for `open_source` (``rng`` draws the reopen jitter).

    Attributes
    ----------
    opens : int
        Times the port was opened.

    Raises
    ------
    SourceError
        If pyserial is not installed (the message names the extra); from `readings`, if
        pyserial refuses the settings (e.g. an unsupported baud rate).
    """

    kind = "serial"

    def __init__(self, spec: SourceSpec, **common: Unpack[SourceArgs]) -> None:
        self.serial = import_pyserial()
        super().__init__(spec, **common)
        assert spec.port is not None
        self.port = spec.port
        self.baudrate = spec.baudrate
        self.opens = 0
        self.backoff = restart_backoff(self.settings, self.rng)
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def _status_extra(self) -> dict[str, object]:
        return {"opens": self.opens}

    # ------------------------------------------------------------------ worker thread
    def _open(self) -> Any:
        port = self.serial.Serial(
            port=self.port, baudrate=self.baudrate, timeout=self.settings.serial_timeout_s
        )
        try:
            port.reset_input_buffer()
        except BaseException:
            port.close()
            raise
        return port

    def _read_available(self, port: Any) -> bytes:
        """Up to one chunk: blocks at most ``serial_timeout_s`` for the first byte."""
        data = bytes(port.read(1))
        if data:
            waiting = port.in_waiting
            if waiting:
                data += bytes(port.read(min(waiting, self.settings.read_chunk_bytes)))
        return data

    # ------------------------------------------------------------------ loop
    async def _produce(self) -> None:
        loop = asyncio.get_running_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"serial {self.port}"
        )
        errors = (self.serial.SerialException, OSError)
        try:
            while True:
                port = await self._open_port(loop, errors)
                self.opens += 1
                self.log.info("serial_opened", port=self.port, baudrate=self.baudrate)
                lost: BaseException | None = None
                try:
                    await self._read_port(loop, port)
                except errors as exc:
                    lost = exc
                finally:
                    # Runs after any read still in flight (one worker thread).
                    await loop.run_in_executor(self._executor, port.close)
                delay = self.backoff.next_delay()
                self.log.warning(
                    "serial_port_lost", port=self.port, error=str(lost), retry_in_s=round(delay, 3)
                )
                await asyncio.sleep(delay)
        finally:
            executor, self._executor = self._executor, None
            if executor is not None:
                executor.shutdown(wait=False)

    async def _open_port(
        self, loop: asyncio.AbstractEventLoop, errors: tuple[type[BaseException], ...]
    ) -> Any:
        """Open the port in the worker thread, retrying ``errors`` after a `Backoff` delay."""
        while True:
            try:
                return await loop.run_in_executor(self._executor, self._open)
            except errors as exc:
                delay = self.backoff.next_delay()
                self.log.warning(
                    "serial_open_failed",
                    port=self.port,
                    error=str(exc),
                    retry_in_s=round(delay, 3),
                )
                await asyncio.sleep(delay)
            except ValueError as exc:  # pyserial's word for bad settings
                raise SourceError(
                    f"serial port {self.port!r} refuses baudrate {self.baudrate}: {exc}"
                ) from None

    async def _read_port(self, loop: asyncio.AbstractEventLoop, port: Any) -> None:
        """Read lines until the port fails (never returns normally)."""
        splitter = LineSplitter(self.settings.max_line_bytes)
        rows: list[list[float]] = []
        discard = self.settings.serial_discard_first_line
        while True:
            data = await loop.run_in_executor(self._executor, self._read_available, port)
            if not data:
                continue
            self.backoff.reset()  # the port works
            for line, _ in splitter.feed(data):
                if discard:
                    discard = False
                    self.log.debug("serial_first_line_dropped", line=line[:80].decode("latin-1"))
                    continue
                self._take(line, rows)
                if len(rows) >= self.settings.max_batch_rows:
                    await self._emit(rows)
            await self._emit(rows)

    def _close_sync(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
