"""What a leaf reads from: `SourceSpec` (from the topology's TOML), `SourceSettings` (every
bound and cadence of the source shells, named) and the stable source ids (no I/O).

In a topology a leaf names its source as an inline table, for example::

    source = { kind = "mqtt" }                                   # the default
    source = { kind = "mqtt", topic = "sensors/bench-3" }
    source = { kind = "command", command = ["python3", "read_bme280.py"], format = "csv" }
    source = { kind = "command", command = ["sh", "-c", "cat motes.csv"], restart = "never" }
    source = { kind = "file", path = "/var/lib/sensors/pi-07.csv" }
    source = { kind = "file", path = "/run/sensors.fifo", format = "json" }
    source = { kind = "serial", port = "/dev/ttyUSB0", baudrate = 115200 }

Keys per kind (anything else is refused, naming the key):

=========  ================================================================================
kind       keys
=========  ================================================================================
mqtt       ``topic`` (str, default None: the leaf's default sensor topic)
command    ``command`` (list of str, required: argv, no shell; use ``["sh", "-c", "..."]``
           for a shell line), ``restart`` (``"always"`` default, ``"on-failure"``,
           ``"never"``), ``format``
file       ``path`` (str, required: a regular file or a named pipe), ``follow`` (bool,
           default true: keep reading as the file grows; false: stop at its end),
           ``format``
serial     ``port`` (str, required, e.g. ``/dev/ttyUSB0``; prefer a stable
           ``/dev/serial/by-id/...`` name), ``baudrate`` (int, default 9600), ``format``
=========  ================================================================================

``format`` is ``"auto"`` (default), ``"csv"`` or ``"json"`` (see `edge_runtime.sources.lines`).
Every kind also accepts ``kind``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from edge_runtime.sources.lines import DEFAULT_MAX_LINE_BYTES, FORMATS, Format

__all__ = [
    "KINDS",
    "MAX_SOURCE_ID_CHARS",
    "RESTART_POLICIES",
    "SourceSettings",
    "SourceSpec",
    "source_id",
]

KINDS: tuple[str, ...] = ("mqtt", "command", "file", "serial")
"""Every source kind."""

RESTART_POLICIES: tuple[str, ...] = ("always", "on-failure", "never")
"""When a command source starts its command again after it exits (like systemd's
``Restart=``): after any exit, after a non-zero exit or a signal, or never."""

MAX_SOURCE_ID_CHARS = 128
"""Longest source id (the wire limit of `SensorReadings.source`)."""

Kind = Literal["mqtt", "command", "file", "serial"]
Restart = Literal["always", "on-failure", "never"]

_KEYS: dict[str, tuple[str, ...]] = {
    "mqtt": ("kind", "topic"),
    "command": ("kind", "command", "restart", "format"),
    "file": ("kind", "path", "follow", "format"),
    "serial": ("kind", "port", "baudrate", "format"),
}
_DEFAULT_BAUDRATE = 9600


def _choices(values: tuple[str, ...]) -> str:
    return ", ".join(repr(v) for v in values)


@dataclass(frozen=True)
class SourceSpec:
    """Where a leaf's readings come from (one of `KINDS`) and how lines are read.

    Parameters
    ----------
    kind : {"mqtt", "command", "file", "serial"}, default "mqtt"
    topic : str or None
        ``mqtt``: the sensor topic; None means the leaf's default (``sensors/<node id>``).
    command : tuple of str
        ``command``: the argv run without a shell (non-empty; every item a non-empty str).
    restart : {"always", "on-failure", "never"}, default "always"
        ``command``: whether to start the command again when it exits (`RESTART_POLICIES`).
    path : Path or None
        ``file``: a regular file or a named pipe. Resolved to an absolute path by
        `from_mapping` (against ``base_dir``) and by the file source when opened.
    follow : bool, default True
        ``file``: keep reading as the file grows (like ``tail -F``); False stops at the end
        of a regular file (a named pipe is always followed).
    port : str or None
        ``serial``: the serial device, e.g. ``/dev/ttyUSB0``.
    baudrate : int, default 9600
        ``serial``: line speed in bit/s (pyserial's default), >= 1.
    format : {"auto", "csv", "json"}, default "auto"
        Line format of ``command``, ``file`` and ``serial`` sources.

    Raises
    ------
    ValueError
        One line naming the field and the value: a required field missing, a field of
        another kind set, or a value of the wrong type or out of range.
    """

    kind: Kind = "mqtt"
    topic: str | None = None
    command: tuple[str, ...] = ()
    restart: Restart = "always"
    path: Path | None = None
    follow: bool = True
    port: str | None = None
    baudrate: int = _DEFAULT_BAUDRATE
    format: Format = "auto"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"source kind {self.kind!r} is unknown; expected {_choices(KINDS)}")
        allowed = _KEYS[self.kind]
        for f in fields(self):
            if f.name not in allowed and getattr(self, f.name) != f.default:
                raise ValueError(
                    f"source field {f.name!r} does not apply to kind {self.kind!r} "
                    f"(got {getattr(self, f.name)!r}); it takes {_choices(allowed)}"
                )
        if self.topic is not None and (
            not isinstance(self.topic, str) or not self.topic or "\0" in self.topic
        ):
            raise ValueError(f"source topic must be a non-empty str, got {self.topic!r}")
        if not isinstance(self.command, tuple) or not all(
            isinstance(a, str) and a and "\0" not in a for a in self.command
        ):
            raise ValueError(
                f"source command must be a tuple of non-empty str, got {self.command!r}"
            )
        if self.kind == "command" and not self.command:
            raise ValueError("source of kind 'command' needs 'command', e.g. ['python3', 'x.py']")
        if self.restart not in RESTART_POLICIES:
            raise ValueError(
                f"source restart {self.restart!r} is unknown; expected {_choices(RESTART_POLICIES)}"
            )
        if self.path is not None and (not isinstance(self.path, Path) or not str(self.path)):
            raise ValueError(f"source path must be a pathlib.Path, got {self.path!r}")
        if self.kind == "file" and self.path is None:
            raise ValueError("source of kind 'file' needs 'path'")
        if not isinstance(self.follow, bool):
            raise ValueError(f"source follow must be true or false, got {self.follow!r}")
        if self.port is not None and (not isinstance(self.port, str) or not self.port):
            raise ValueError(f"source port must be a non-empty str, got {self.port!r}")
        if self.kind == "serial" and self.port is None:
            raise ValueError("source of kind 'serial' needs 'port', e.g. '/dev/ttyUSB0'")
        if isinstance(self.baudrate, bool) or not isinstance(self.baudrate, int):
            raise ValueError(f"source baudrate must be an int >= 1, got {self.baudrate!r}")
        if self.baudrate < 1:
            raise ValueError(f"source baudrate must be an int >= 1, got {self.baudrate!r}")
        if self.format not in FORMATS:
            raise ValueError(
                f"source format {self.format!r} is unknown; expected {_choices(FORMATS)}"
            )

    @property
    def is_local(self) -> bool:
        """True for the kinds this package reads (everything but ``mqtt``)."""
        return self.kind != "mqtt"

    @classmethod
    def from_mapping(
        cls, mapping: object, where: str, *, base_dir: Path | None = None
    ) -> SourceSpec:
        """Validate a TOML inline table such as ``{ kind = "file", path = "x.csv" }``.

        Parameters
        ----------
        mapping : Mapping
            The parsed table (str keys). ``kind`` defaults to ``"mqtt"``.
        where : str
            Where the table is, for error messages, e.g. ``"node 'pi-07'"``.
        base_dir : Path or None
            Directory a relative ``path`` is resolved against (the topology file's); None
            keeps it relative (the file source resolves it against the working directory).

        Raises
        ------
        ValueError
            One line starting with ``where``, naming the key and its value: not a table, an
            unknown kind, an unknown key for the kind, a missing required key, or a value
            of the wrong type.
        """
        if not isinstance(mapping, Mapping):
            raise ValueError(
                f"{where}: source must be a table such as "
                f'{{ kind = "file", path = "readings.csv" }}, got {mapping!r}'
            )
        for key in mapping:
            if not isinstance(key, str):
                raise ValueError(f"{where}: source key {key!r} is not a str")
        kind = mapping.get("kind", "mqtt")
        if kind not in KINDS:
            raise ValueError(
                f"{where}: source key 'kind' is {kind!r}; expected one of {_choices(KINDS)}"
            )
        allowed = _KEYS[kind]
        for key in mapping:
            if key not in allowed:
                raise ValueError(
                    f"{where}: unknown source key {key!r} for kind {kind!r}; "
                    f"expected keys among {_choices(allowed)}"
                )
        values: dict[str, object] = {"kind": kind}
        for key in ("topic", "port"):
            if key in mapping:
                values[key] = _str(mapping[key], key, where)
        if "command" in mapping:
            command = mapping["command"]
            if isinstance(command, str):
                raise ValueError(
                    f"{where}: source key 'command' is the str {command!r}; expected a list "
                    f'of str such as ["python3", "read.py"] (or ["sh", "-c", "..."] for a '
                    "shell line)"
                )
            if not isinstance(command, list | tuple) or not command:
                raise ValueError(
                    f"{where}: source key 'command' is {command!r}; expected a non-empty "
                    'list of str such as ["python3", "read.py"]'
                )
            values["command"] = tuple(_str(a, "command", where) for a in command)
        elif kind == "command":
            raise ValueError(
                f"{where}: source of kind \"command\" needs key 'command', e.g. "
                'command = ["python3", "read.py"]'
            )
        if "path" in mapping:
            path = Path(_str(mapping["path"], "path", where)).expanduser()
            if base_dir is not None and not path.is_absolute():
                path = Path(base_dir) / path
            values["path"] = path
        elif kind == "file":
            raise ValueError(f"{where}: source of kind \"file\" needs key 'path'")
        if kind == "serial" and "port" not in mapping:
            raise ValueError(f"{where}: source of kind \"serial\" needs key 'port'")
        for key, choices in (("restart", RESTART_POLICIES), ("format", FORMATS)):
            if key in mapping:
                value = mapping[key]
                if value not in choices:
                    raise ValueError(
                        f"{where}: source key {key!r} is {value!r}; expected one of "
                        f"{_choices(choices)}"
                    )
                values[key] = value
        if "follow" in mapping:
            if not isinstance(mapping["follow"], bool):
                raise ValueError(
                    f"{where}: source key 'follow' is {mapping['follow']!r}; expected true or false"
                )
            values["follow"] = mapping["follow"]
        if "baudrate" in mapping:
            baud = mapping["baudrate"]
            if isinstance(baud, bool) or not isinstance(baud, int) or baud < 1:
                raise ValueError(
                    f"{where}: source key 'baudrate' is {baud!r}; expected an int >= 1 "
                    "such as 9600 or 115200"
                )
            values["baudrate"] = baud
        return cls(**values)  # type: ignore[arg-type]


def _str(value: object, key: str, where: str) -> str:
    if not isinstance(value, str) or not value or "\0" in value:
        raise ValueError(f"{where}: source key {key!r} is {value!r}; expected a non-empty str")
    return value


def _bounded(prefix: str, text: str) -> str:
    """``prefix + text``, shortened to `MAX_SOURCE_ID_CHARS` by keeping the end of ``text``
    and a hash of all of it (deterministic, so the id is stable across restarts)."""
    full = prefix + text
    if len(full) <= MAX_SOURCE_ID_CHARS:
        return full
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    keep = MAX_SOURCE_ID_CHARS - len(prefix) - len(digest) - 2
    return f"{prefix}{digest}~{text[-keep:]}" if keep > 0 else f"{prefix}{digest}"[:128]


def source_id(spec: SourceSpec, node_id: str) -> str:
    """The stable id under which a local source numbers its readings.

    ``command:<node id>``, ``file:<absolute path>`` (the path made absolute against the
    working directory, not resolving symbolic links: a rotated symlink target is the same
    source), ``serial:<port>``; at most `MAX_SOURCE_ID_CHARS` characters (a longer one keeps
    its end and a hash of the whole). A leaf keeps ``ingested[source id]``, so the id must
    not change across restarts for the same configuration.

    Raises
    ------
    ValueError
        For kind ``mqtt`` (readings on a topic carry their own source ids) or an empty
        ``node_id``.
    """
    if not isinstance(node_id, str) or not node_id:
        raise ValueError(f"node_id must be a non-empty str, got {node_id!r}")
    if spec.kind == "command":
        return _bounded("command:", node_id)
    if spec.kind == "file":
        assert spec.path is not None
        return _bounded("file:", os.path.abspath(spec.path))
    if spec.kind == "serial":
        assert spec.port is not None
        return _bounded("serial:", spec.port)
    raise ValueError("an mqtt source has no source id of its own: its readings carry theirs")


@dataclass(frozen=True)
class SourceSettings:
    """Every bound, timeout and cadence of the local source shells (seconds, rows, bytes).

    Parameters
    ----------
    max_batch_rows : int, default 64
        Most readings in one `SensorReadings` batch. A source batches the lines available
        without waiting, so a fast file is not one message per row, while a slow sensor's
        reading is passed on at once.
    queue_batches : int, default 4
        Batches a source holds for a slow consumer. When full, the source stops reading:
        a file simply waits, a command blocks writing its stdout (back-pressure), a serial
        port's OS buffer fills and then drops bytes (the device does not wait).
    max_line_bytes : int, default 64 KiB
        Longer lines are rejected as ``too_long``; bounds a source's memory.
    read_chunk_bytes : int, default 64 KiB
        Bytes read at once from a file, pipe or command.
    poll_interval_s : float, default 0.25
        How often a followed regular file is checked for growth, truncation and
        replacement, and a missing path for its creation (regular files cannot be
        watched with epoll; inotify is not portable). Latency of a file source.
    restart_initial_s, restart_max_s : float, defaults 1.0 and 60.0
        Command and serial restart backoff: the k-th consecutive failed attempt waits
        ``min(restart_max_s, restart_initial_s * 2**k)`` times a jitter factor drawn
        uniformly from [0.5, 1) (per-source `random.Random`). 1 s keeps a crashing Python
        script (0.3-1 s to start on a Pi) from using a core; 60 s picks up a sensor that
        comes back within a minute.
    restart_reset_s : float, default 30.0
        A run that delivered a reading, or lived at least this long, resets the backoff:
        a script that prints one reading and exits is then simply run again after
        ~``restart_initial_s`` (polling), while a crash loop backs off.
    kill_timeout_s : float, default 5.0
        On close, a command's process group gets SIGTERM, then SIGKILL after this long.
    stderr_lines_per_interval, log_interval_s : int, float, defaults 5 and 60.0
        Rate limit of the warning lines a source logs for a command's stderr and for
        rejected lines (each its own limit): the first few per interval, then one summary
        with the count of suppressed lines.
    cursor_interval_s : float, default 10.0
        A file source with a ``state_dir`` saves its resume cursors at most this often
        (and when closed): at most one small write per interval, kind to SD cards.
    cursor_every_readings : int, default 1024
        A file source also remembers a resume cursor every this many readings (so a fast
        catch-up read, many readings per interval, still resumes close to its consumer).
    cursor_history : int, default 64
        Resume cursors a file source keeps (besides the start of its current file), so a
        consumer's checkpoint that lags by up to ``cursor_history`` cursors (~65,000
        readings, or ~10 min of a slow sensor) still resumes from a nearby byte offset;
        beyond that it resumes from the start of the file.
    serial_timeout_s : float, default 0.2
        Read timeout of a serial port; also the longest a close waits for the read thread.
    serial_discard_first_line : bool, default True
        Drop the first line after opening a serial port: it is usually the tail of a line
        the device was already sending, and a numeric tail could pass as a reading.

    Raises
    ------
    ValueError
        If a count is not a positive int or a duration not a positive finite float.
    """

    max_batch_rows: int = 64
    queue_batches: int = 4
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    read_chunk_bytes: int = 64 * 1024
    poll_interval_s: float = 0.25
    restart_initial_s: float = 1.0
    restart_max_s: float = 60.0
    restart_reset_s: float = 30.0
    kill_timeout_s: float = 5.0
    stderr_lines_per_interval: int = 5
    log_interval_s: float = 60.0
    cursor_interval_s: float = 10.0
    cursor_every_readings: int = 1024
    cursor_history: int = 64
    serial_timeout_s: float = 0.2
    serial_discard_first_line: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "serial_discard_first_line":
                if not isinstance(value, bool):
                    raise ValueError(f"{f.name} must be a bool, got {value!r}")
            elif f.name.endswith("_s"):
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not 0 < value < float("inf")
                ):
                    raise ValueError(
                        f"{f.name} must be a finite number > 0 (seconds), got {value!r}"
                    )
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{f.name} must be an int >= 1, got {value!r}")
        if self.restart_max_s < self.restart_initial_s:
            raise ValueError(
                f"restart_max_s ({self.restart_max_s}) must be >= restart_initial_s "
                f"({self.restart_initial_s})"
            )
