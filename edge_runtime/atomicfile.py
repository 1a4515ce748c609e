"""Replace a file atomically and durably: write a temporary file, ``fsync``, rename.

After a crash or a power loss at any point, the file holds either its old or its new
complete bytes: the new bytes go to a temporary file in the same directory (so the rename
stays on one file system), which is flushed and synced, then renamed onto the target by
`os.replace`; `fsync_directory` then makes the rename itself durable. Used by the
checkpoints (`edge_runtime.checkpoint`) and the file sources' cursors
(`edge_runtime.sources.cursor`). Stdlib only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from pathlib import Path

__all__ = ["TEMP_SUFFIX", "fsync_directory", "replace_file", "temp_name"]

TEMP_SUFFIX = ".tmp"
"""Suffix of the temporary files (``.<name>.<hex digits>.tmp``)."""


def temp_name(path: Path, hex_digits: int = 16) -> str:
    """A fresh temporary file name for ``path``: ``.<name>.<hex_digits random hex>.tmp``
    (hidden, and recognisable for clean-up after a crash)."""
    return f".{path.name}.{secrets.token_hex(hex_digits // 2)}{TEMP_SUFFIX}"


def replace_file(path: Path, payload: bytes, *, temp: Path, mode: int = 0o644) -> None:
    """Write ``payload`` to ``temp``, ``fsync`` it and rename it onto ``path``.

    Parameters
    ----------
    path : Path
        The file to replace (or create).
    payload : bytes
        Its new content.
    temp : Path
        A name in ``path``'s directory that does not exist yet (e.g. `temp_name`).
    mode : int, default 0o644
        Permission bits of a new file (before the umask).

    Raises
    ------
    OSError
        If ``temp`` exists or cannot be created, or a write, the sync or the rename fails
        (the disk is full, ...): the temporary file is removed then and ``path`` is left
        as it was. The directory is not synced: call `fsync_directory`.
    """
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(payload)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def fsync_directory(directory: Path) -> None:
    """``fsync`` ``directory``, so a rename into it survives a power loss.

    A file system that cannot sync a directory (``EINVAL``, ``ENOTSUP``) is accepted.

    Raises
    ------
    OSError
        If the directory cannot be opened, or the sync fails otherwise.
    """
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    fd = os.open(directory, flags)
    try:
        os.fsync(fd)
    except OSError as exc:  # some file systems cannot fsync a directory: nothing to do
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)
