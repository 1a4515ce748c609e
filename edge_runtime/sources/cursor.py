"""Resume cursors of a file source: where in which file the next reading starts.

A file source numbers the *accepted* readings of the file it follows 0, 1, 2, ... (across
truncations and rotations the count simply continues). To resume at reading ``start_seq``
after a restart without re-reading the whole file, it records now and then a `FileCursor`:
"in the file with device/inode ``(dev, ino)`` whose first ``head_len`` bytes hash to
``head_sha``, the first accepted reading at or after byte ``offset`` has number ``seq``"
(plus the reading width learnt so far). `CursorLog` keeps the newest few cursors plus the
*origin* (offset 0) of the current file, chooses the one to resume from, and reads and
writes them as a small JSON file (atomically: temporary file, ``fsync``, ``os.replace``).

The choice is pure logic (`CursorLog.choose`, with the file's head hashed by a callback);
only `load_cursor_log` and `save_cursor_log` touch the file system.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from edge_runtime.atomicfile import fsync_directory, replace_file, temp_name

__all__ = [
    "HEAD_BYTES",
    "CursorLog",
    "FileCursor",
    "head_digest",
    "load_cursor_log",
    "save_cursor_log",
    "write_cursor_file",
]

HEAD_BYTES = 4096
"""Bytes at the start of a file hashed to tell it from another file that reuses its inode."""

_FORMAT = "edge_runtime.file_source_cursors"
_VERSION = 1
_MAX_FILE_BYTES = 1 << 20


def head_digest(data: bytes) -> str:
    """SHA-256 (hex) of a file's first bytes, as stored in `FileCursor.head_sha`."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class FileCursor:
    """A resumable position: the first accepted reading at or after ``offset`` is ``seq``.

    Parameters
    ----------
    dev, ino : int
        ``st_dev`` and ``st_ino`` of the file.
    offset : int
        Byte offset of a line start, >= 0.
    seq : int
        Number of the first accepted reading at or after ``offset``, >= 0.
    width : int or None
        Values per reading learnt before ``offset`` (None if none accepted yet).
    head_len : int
        Bytes of the file's start hashed in ``head_sha`` (``min(HEAD_BYTES, size)`` when
        recorded), >= 0.
    head_sha : str
        `head_digest` of those bytes.
    """

    dev: int
    ino: int
    offset: int
    seq: int
    width: int | None
    head_len: int
    head_sha: str

    def same_file(self, dev: int, ino: int) -> bool:
        return self.dev == dev and self.ino == ino


class CursorLog:
    """The resume cursors of one file source: the origin of its current file and the
    newest ``history`` cursors. O(``history``) memory.

    Parameters
    ----------
    history : int
        Cursors kept besides the origin, >= 1.
    """

    def __init__(self, history: int) -> None:
        if isinstance(history, bool) or not isinstance(history, int) or history < 1:
            raise ValueError(f"history must be an int >= 1, got {history!r}")
        self.origin: FileCursor | None = None
        self.cursors: deque[FileCursor] = deque(maxlen=history)

    def record(self, cursor: FileCursor) -> None:
        """Add ``cursor`` (the oldest one is dropped when ``history`` are kept)."""
        if not self.cursors or self.cursors[-1] != cursor:
            self.cursors.append(cursor)

    def new_file(self, cursor: FileCursor) -> None:
        """The source starts reading a file from ``cursor`` (offset 0): a new file after a
        rotation, or the same inode after a truncation, whose older cursors then point
        into content that is gone and are dropped."""
        self.origin = cursor
        kept = [c for c in self.cursors if not c.same_file(cursor.dev, cursor.ino)]
        self.cursors.clear()
        self.cursors.extend(kept)

    def refresh_head(self, dev: int, ino: int, head_len: int, head_sha: str) -> None:
        """The file ``(dev, ino)`` grew: let its origin check more of its head (cursors
        recorded while it was shorter hash fewer bytes)."""
        origin = self.origin
        if origin is not None and origin.same_file(dev, ino) and origin.head_len < head_len:
            self.origin = replace(origin, head_len=head_len, head_sha=head_sha)

    def keep_until(self, seq: int) -> None:
        """Forget cursors past ``seq`` (after resuming there, later numbers are redone)."""
        kept = [c for c in self.cursors if c.seq <= seq]
        self.cursors.clear()
        self.cursors.extend(kept)
        if self.origin is not None and self.origin.seq > seq:
            self.origin = None

    def choose(
        self, start_seq: int, dev: int, ino: int, size: int, head: Callable[[int], str]
    ) -> FileCursor | None:
        """The cursor to resume reading ``start_seq`` from in the file ``(dev, ino)`` of
        ``size`` bytes whose first ``n`` bytes hash to ``head(n)``: the one with the
        largest ``seq <= start_seq`` (then the largest offset) in that same file, not
        beyond its end and with a matching head; None when there is none (the file was
        replaced or truncated while the source was not running, or the consumer's state
        predates this file)."""
        best: FileCursor | None = None
        hashes: dict[int, str] = {}
        candidates = [self.origin, *self.cursors] if self.origin else list(self.cursors)
        for c in candidates:
            if not c.same_file(dev, ino) or c.seq > start_seq or c.offset > size:
                continue
            if c.head_len > size:
                continue
            if c.head_len not in hashes:
                hashes[c.head_len] = head(c.head_len)
            if hashes[c.head_len] != c.head_sha:
                continue
            if best is None or (c.seq, c.offset) > (best.seq, best.offset):
                best = c
        return best

    def to_json(self, source: str) -> dict[str, object]:
        return {
            "format": _FORMAT,
            "version": _VERSION,
            "source": source,
            "origin": None if self.origin is None else asdict(self.origin),
            "cursors": [asdict(c) for c in self.cursors],
        }

    def encode(self, source: str) -> bytes:
        """The cursor file's bytes (compact JSON of `to_json`)."""
        return json.dumps(self.to_json(source), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, doc: object, source: str, history: int) -> CursorLog:
        """Rebuild from `to_json` output.

        Raises
        ------
        ValueError
            One line: a foreign document, another source's cursors, or a malformed cursor.
        """
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise ValueError("not a file source cursor file")
        if doc.get("version") != _VERSION:
            raise ValueError(f"cursor file version {doc.get('version')!r}, expected {_VERSION}")
        if doc.get("source") != source:
            raise ValueError(f"cursor file is for source {doc.get('source')!r}, not {source!r}")
        log = cls(history)
        origin = doc.get("origin")
        cursors = doc.get("cursors")
        if not isinstance(cursors, list):
            raise ValueError(f"cursor file 'cursors' is {type(cursors).__name__}, expected list")
        log.origin = None if origin is None else _cursor(origin)
        for item in cursors[-history:]:
            log.cursors.append(_cursor(item))
        return log


def _cursor(item: object) -> FileCursor:
    if not isinstance(item, dict):
        raise ValueError(f"cursor is {type(item).__name__}, expected an object")
    try:
        cursor = FileCursor(**item)
    except TypeError:
        raise ValueError(f"cursor has keys {sorted(item)}, expected those of FileCursor") from None
    ints = (cursor.dev, cursor.ino, cursor.offset, cursor.seq, cursor.head_len)
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in ints):
        raise ValueError(f"cursor {item!r} has a negative or non-int position")
    if cursor.width is not None and (
        isinstance(cursor.width, bool) or not isinstance(cursor.width, int) or cursor.width < 1
    ):
        raise ValueError(f"cursor width {cursor.width!r} is not None or an int >= 1")
    if not isinstance(cursor.head_sha, str):
        raise ValueError(f"cursor head_sha {cursor.head_sha!r} is not a str")
    return cursor


def load_cursor_log(path: Path, source: str, history: int) -> CursorLog | None:
    """The cursors saved at ``path``, or None if there is no such file.

    Raises
    ------
    ValueError
        One line naming ``path``: unreadable, not JSON, or not this source's cursors.
    """
    try:
        with open(path, "rb") as file:
            data = file.read(_MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"cannot read cursor file {str(path)!r}: {exc.strerror}") from None
    if len(data) > _MAX_FILE_BYTES:
        raise ValueError(f"cursor file {str(path)!r} is larger than {_MAX_FILE_BYTES} bytes")
    try:
        doc = json.loads(data)
        return CursorLog.from_json(doc, source, history)
    except ValueError as exc:
        raise ValueError(f"cursor file {str(path)!r}: {exc}") from None


def save_cursor_log(path: Path, log: CursorLog, source: str) -> None:
    """Write ``log`` to ``path`` atomically and durably (`write_cursor_file`).

    Raises
    ------
    OSError
        If the directory is missing or not writable, or the disk is full.
    """
    write_cursor_file(path, log.encode(source))


def write_cursor_file(path: Path, payload: bytes) -> None:
    """Replace ``path`` by ``payload`` atomically and durably: a temporary file in the same
    directory, ``fsync``, ``os.replace``, directory ``fsync``; after a crash at any point
    ``path`` holds the old or the new bytes. Milliseconds on an SD card: call it from a
    worker thread.

    Raises
    ------
    OSError
        If the directory is missing or not writable, or the disk is full (the temporary
        file is removed then).
    """
    replace_file(path, payload, temp=path.parent / temp_name(path, 12), mode=0o644)
    with contextlib.suppress(OSError):  # some file systems cannot fsync a directory
        fsync_directory(path.parent)
