"""Crash-safe checkpoint files: numpy arrays plus JSON values, replaced atomically.

A checkpoint is one file holding a flat mapping of names to values -- numpy arrays, and
JSON-able values (None, bool, int, float, str, lists and str-keyed dicts of them) such as
the scalars of `FPCAEdge.get_state` and a leaf's ``"epoch"``, ``"seq"`` and
``"ingested"`` (source -> last sequence number). The file is an uncompressed ``.npz``
(zip) archive: every array is one ``.npy`` member (``a0``, ``a1``, ...) and the member
``header`` is a ``uint8`` array with the UTF-8 JSON document::

    {"format": "edge_runtime.checkpoint", "version": 1,
     "arrays": {"basis": "a0", ...}, "values": {"rank_": 10, "epoch": "...", ...}}

Nothing is pickled: `save_checkpoint` refuses object arrays and `load_checkpoint` reads
with ``np.load(..., allow_pickle=False)``; zip's CRC-32 of every member detects
corruption.

Why atomic: a device may lose power or be SIGKILLed at any instant, including in the
middle of writing its checkpoint. `save_checkpoint` therefore never writes the
checkpoint's path in place: it serialises the whole mapping in memory, writes it to a
new temporary file in the same directory, calls ``fsync`` on that file (its data is on
disk), renames it onto the path with `os.replace` (atomic on POSIX: any reader or restart
sees either the old file or the new one, never a mix), then calls ``fsync`` on the
directory (the rename itself is on disk). A crash at any point leaves either the old or
the new complete checkpoint at the path, plus at worst a stray temporary file, which the
next save removes and which loading ignores.

Only the standard library and numpy; no asyncio (call it from a worker thread if the
event loop must not block on ``fsync``).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import math
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from edge_runtime.atomicfile import TEMP_SUFFIX, fsync_directory, replace_file, temp_name
from edge_runtime.errors import EdgeRuntimeError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "CheckpointError",
    "load_checkpoint",
    "save_checkpoint",
]

#: ``"format"`` of the JSON header; anything else is a foreign file.
FORMAT_NAME = "edge_runtime.checkpoint"
#: ``"version"`` written by `save_checkpoint`; `load_checkpoint` reads versions <= this.
FORMAT_VERSION = 1
#: Default limit of `load_checkpoint` on a file's size, in bytes (256 MiB; an FPCAEdge
#: state at d = 48, rank 10, b = 50 is about 30 KB).
DEFAULT_MAX_BYTES = 256 * 1024 * 1024

_HEADER_MEMBER = "header"
_TEMP_HEX_DIGITS = 16  # random hex digits of a temporary name (`_temp_pattern` matches them)
# One save at a time in this process, so removing stray temporary files never removes
# the file of a save in progress. Writers in other processes are not coordinated: one
# writing process per checkpoint path.
_SAVE_LOCK = threading.Lock()


class CheckpointError(EdgeRuntimeError, ValueError):
    """A checkpoint file that cannot be read: truncated, corrupt, foreign or too large.

    The message is one line: the path and the reason.
    """


def checkpoint_temp_name(path: Path) -> str:
    """A fresh temporary file name for a save of ``path``: ``.<name>.<16 hex digits>.tmp``
    (`edge_runtime.atomicfile.temp_name`), recognised and removed by the next save."""
    return temp_name(path, _TEMP_HEX_DIGITS)


def _temp_pattern(path: Path) -> re.Pattern[str]:
    digits = f"[0-9a-f]{{{_TEMP_HEX_DIGITS}}}"
    return re.compile(rf"\.{re.escape(path.name)}\.{digits}{re.escape(TEMP_SUFFIX)}")


def _plain(value: object, where: str) -> object:
    """``value`` as plain JSON data (numpy scalars unwrapped, tuples as lists), or raise."""
    if isinstance(value, np.generic) and not isinstance(value, np.void):
        value = value.item()
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"checkpoint value {where} is {value} (JSON needs a finite float)")
        return value
    if isinstance(value, list | tuple):
        return [_plain(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"checkpoint value {where} has a non-str key {key!r}")
            out[key] = _plain(item, f"{where}[{key!r}]")
        return out
    raise TypeError(
        f"checkpoint value {where} is a {type(value).__name__} (expected an ndarray or JSON data)"
    )


def serialise(state: Mapping[str, object]) -> bytes:
    """The bytes `save_checkpoint` writes for ``state`` (its format is the module docstring's).

    Raises
    ------
    TypeError, ValueError
        As `save_checkpoint`: a non-str key, an object array, a value that is not JSON data.
    """
    if not isinstance(state, Mapping):
        raise TypeError(f"checkpoint state must be a mapping, got {type(state).__name__}")
    arrays: dict[str, np.ndarray] = {}
    members: dict[str, str] = {}
    values: dict[str, object] = {}
    for key, value in state.items():
        if not isinstance(key, str):
            raise TypeError(f"checkpoint keys must be str, got {key!r}")
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise TypeError(f"checkpoint array {key!r} has dtype {value.dtype} (objects)")
            member = f"a{len(arrays)}"
            members[key] = member
            arrays[member] = value
        else:
            values[key] = _plain(value, repr(key))
    header = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "arrays": members,
        "values": values,
    }
    text = json.dumps(header, allow_nan=False, separators=(",", ":"))
    arrays[_HEADER_MEMBER] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    buffer = io.BytesIO()
    # No allow_pickle=False here: object arrays are refused above, and numpy < 2.1
    # (Debian bookworm's 1.24) would store the keyword as an array named allow_pickle.
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _remove_stray_temporaries(path: Path) -> None:
    pattern = _temp_pattern(path)
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        if pattern.fullmatch(name):
            with contextlib.suppress(OSError):
                os.unlink(path.parent / name)


def save_checkpoint(path: Path, state: Mapping[str, object]) -> int:
    """Write ``state`` to ``path`` atomically and durably; return the file's size in bytes.

    Parameters
    ----------
    path : Path
        The checkpoint file; its directory must exist. Replaced if it exists.
    state : mapping of str to ndarray or JSON data
        Arrays of any shape and non-object dtype (stored with their dtype and shape,
        values bit for bit), and JSON-able values: None, bool, int,
        finite float (stored exactly), str, list/tuple (read back as lists) and
        mappings with str keys (read back as dicts), nested; numpy scalars are stored
        as the equivalent Python scalars. E.g. `FPCAEdge.get_state` plus a leaf's
        ``"epoch"``, ``"seq"`` and ``"ingested"``.

    Returns
    -------
    int
        Bytes written (the size of the new file).

    Raises
    ------
    FileNotFoundError
        If ``path``'s directory does not exist (the message names it).
    OSError
        If writing, syncing or renaming fails (disk full, permissions, ``path`` is a
        directory...); the previous checkpoint at ``path`` is then untouched and the
        temporary file removed.
    TypeError, ValueError
        If ``state`` holds something that cannot be stored (an object array, a
        non-str key, a NaN float, another type); nothing is written then.

    Notes
    -----
    The bytes are built in memory first (the state's size; the file is never
    partially written because of a serialisation error), written to a temporary file
    ``.<name>.<16 hex digits>.tmp`` in the same directory (so the rename stays on one
    file system), flushed and synced (``fsync``), renamed onto ``path`` by `os.replace`,
    and the directory synced: after a SIGKILL or a power loss at any point, ``path``
    holds either the old or the new complete checkpoint (see the module docstring).
    Stray temporary files of ``path`` left by a crashed save are removed first. Saves in
    one process are serialised by a lock; use one writing process per path. Cost: one
    copy of the state in memory, one write and two ``fsync`` calls (milliseconds on an
    SD card per call, more on a busy one).
    """
    path = Path(path)
    payload = serialise(state)
    directory = path.parent
    if not directory.is_dir():
        raise FileNotFoundError(
            errno.ENOENT, f"checkpoint directory {str(directory)!r} does not exist"
        )
    with _SAVE_LOCK:
        _remove_stray_temporaries(path)
        replace_file(path, payload, temp=directory / checkpoint_temp_name(path), mode=0o666)
        fsync_directory(directory)
    return len(payload)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "no details"
    return f"{type(exc).__name__}: {text}"


def _parse(data: bytes, max_bytes: int) -> dict[str, object]:
    """The mapping stored in ``data``; CheckpointError (without the path) if it is not one."""
    if not data:
        raise CheckpointError("the file is empty")
    if not data.startswith(b"PK\x03\x04"):
        raise CheckpointError("not a checkpoint (no zip signature)")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            unpacked = sum(info.file_size for info in archive.zip.infolist())
            if unpacked > max_bytes:  # a foreign, compressed archive
                raise CheckpointError(f"members unpack to {unpacked} bytes > max_bytes {max_bytes}")
            names = set(archive.files)
            if _HEADER_MEMBER not in names:
                raise CheckpointError("not a checkpoint (no header member)")
            raw = archive[_HEADER_MEMBER]
            if raw.dtype != np.uint8 or raw.ndim != 1:
                raise CheckpointError("not a checkpoint (header is not a byte array)")
            header = json.loads(raw.tobytes().decode("utf-8"))
            if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
                raise CheckpointError("not a checkpoint (foreign header)")
            version = header.get("version")
            if not isinstance(version, int) or isinstance(version, bool) or version < 1:
                raise CheckpointError(f"invalid format version {version!r}")
            if version > FORMAT_VERSION:
                raise CheckpointError(
                    f"format version {version} is newer than this reader's {FORMAT_VERSION}"
                )
            members = header.get("arrays")
            values = header.get("values")
            if not isinstance(members, dict) or not isinstance(values, dict):
                raise CheckpointError("malformed header (arrays/values missing)")
            if set(members) & set(values):
                raise CheckpointError("malformed header (a key is both an array and a value)")
            expected = {_HEADER_MEMBER, *members.values()}
            if len(set(members.values())) != len(members) or names != expected:
                raise CheckpointError(
                    f"archive members {sorted(names)} do not match the header's arrays"
                )
            out: dict[str, object] = dict(values)
            for key, member in members.items():
                out[key] = archive[member]  # reads the member to its end: CRC-32 checked
            return out
    except CheckpointError:
        raise
    except Exception as exc:  # untrusted bytes: zipfile, numpy, zlib, json raise many types
        raise CheckpointError(f"corrupt or truncated ({_one_line(exc)})") from None


def load_checkpoint(path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, object] | None:
    """Read the mapping saved by `save_checkpoint` at ``path``; None if there is no file.

    Parameters
    ----------
    path : Path
        The checkpoint file. Stray temporary files beside it (a crashed save) are
        ignored.
    max_bytes : int, default=DEFAULT_MAX_BYTES
        Largest file accepted, in bytes; a larger file is refused before it is read (and
        an archive whose members would unpack to more, before they are unpacked).

    Returns
    -------
    dict or None
        A new dict: each stored array as an ndarray (same dtype, shape and values, bit
        for bit), each JSON value as read back (lists for tuples). None if ``path``
        does not exist.

    Raises
    ------
    CheckpointError
        (a ValueError) with a one-line message naming ``path`` and the reason, for any
        file that is not a complete checkpoint of a supported version: empty, truncated,
        corrupt (CRC mismatch), foreign (another format, a plain ``.npy``/``.npz``, a
        pickle), from a newer format version, larger than ``max_bytes``, or unreadable
        (a directory, no permission). Never another exception for a file's content.
    """
    path = Path(path)
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size > max_bytes:
                raise CheckpointError(
                    f"checkpoint {str(path)!r}: {size} bytes exceeds max_bytes {max_bytes}"
                )
            data = file.read(max_bytes + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"checkpoint {str(path)!r}: cannot read ({_one_line(exc)})") from None
    if len(data) > max_bytes:
        raise CheckpointError(f"checkpoint {str(path)!r}: exceeds max_bytes {max_bytes}")
    try:
        return _parse(data, max_bytes)
    except CheckpointError as exc:
        raise CheckpointError(f"checkpoint {str(path)!r}: {exc}") from None
