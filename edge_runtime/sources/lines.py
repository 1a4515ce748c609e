"""Lines of text in, readings out: the byte-stream splitter and the line parser (no I/O).

`LineSplitter` cuts a byte stream (a file, a command's stdout, a serial port) into lines and
bounds the memory an endless line can take; `LineParser` turns one line into one reading, a
float64 vector of shape ``(n_features,)``, or names why it cannot (a *reason*, counted).
Both are plain synchronous objects in the style of h11: bytes go in, lines or readings come
out, and the async source shells around them only move bytes.

Line formats
------------
``"csv"``
    Numbers separated by commas: ``21.5,40.2,1013.25``. A line without a comma is split on
    white space instead, so ``21.5 40.2 1013.25`` (spaces or tabs) is accepted too. Every
    field must be a number as Python's `float` reads it (``1``, ``-2.5``, ``1e-3``); a header
    line such as ``temp,hum`` is rejected as ``not_numeric`` (and counted), never fatal.
``"json"``
    One JSON value per line: an array of numbers ``[21.5, 40.2, 1013.25]``, or an object
    whose key ``"x"`` holds that array, ``{"t": "2025-01-01T00:00:00Z", "x": [21.5, 40.2]}``
    (other keys are ignored, so a script may add a timestamp or a device id). A ``seq`` key
    is ignored too: sources number readings themselves.
``"auto"`` (the default)
    Per line: JSON when its first non-blank character is ``[`` or ``{``, else CSV.

Lines end with ``\\n``; one trailing ``\\r`` is removed (serial devices often send
``\\r\\n``). Text is ASCII/UTF-8.

Reject reasons (`REJECT_REASONS`)
---------------------------------
==============  ==========================================================================
``empty``       a blank line, ``[]`` or ``{"x": []}``
``not_numeric`` a CSV field or JSON element that is not a number (text, ``true``, ``null``,
                an empty field as in ``1,,2``, bytes that are not ASCII digits)
``non_finite``  NaN or infinity (``nan``, ``inf``, JSON ``NaN``), or a number beyond float64
``width``       a different number of values than expected: ``n_features`` when given, else
                the width of the first accepted line
``too_long``    a line longer than ``max_line_bytes`` (default 64 KiB)
``json``        a line that looks like JSON but is not valid JSON, or is not an array of
                numbers / an object with such an array under ``"x"`` (nested arrays included)
==============  ==========================================================================
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Literal

import numpy as np

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "FORMATS",
    "REJECT_REASONS",
    "LineParser",
    "LineSplitter",
]

DEFAULT_MAX_LINE_BYTES = 64 * 1024
"""Longest line accepted, bytes (64 KiB: 48 float64 values in text need ~1.2 KiB)."""

FORMATS: tuple[str, ...] = ("auto", "csv", "json")
"""Every line format a source accepts (see the module docstring)."""

REJECT_REASONS: tuple[str, ...] = (
    "empty",
    "not_numeric",
    "non_finite",
    "width",
    "too_long",
    "json",
)
"""Every reason `LineParser.parse` can return (see the module docstring)."""

Format = Literal["auto", "csv", "json"]

_BLANK = b" \t\r\n\x0b\x0c"


class LineSplitter:
    """Cut a byte stream into lines, with bounded memory.

    ``feed(data)`` returns the complete lines in ``data`` (plus what was held back from
    earlier calls), each without its ``\\n`` and one trailing ``\\r``, paired with the stream
    offset just past its newline. The unterminated rest is held until its newline arrives.

    A line longer than ``max_line_bytes`` is returned once, as soon as it is known to be too
    long, as its first ``max_line_bytes + 1`` bytes with end offset ``-1`` (it is mid-line,
    so not a resumable position); the rest of it, up to and including its newline, is
    dropped. Memory is at most ``max_line_bytes + 1`` bytes plus one ``data`` chunk.

    Parameters
    ----------
    max_line_bytes : int, default `DEFAULT_MAX_LINE_BYTES`
        Longest line returned whole, bytes (without the newline), >= 1.
    offset : int, default 0
        Stream offset of the first byte that will be fed (a file source resuming at a byte
        offset passes it, so end offsets are file offsets).

    Attributes
    ----------
    boundary : int
        Stream offset just past the last newline consumed: where the next line starts.

    Raises
    ------
    ValueError
        If ``max_line_bytes < 1`` or ``offset < 0``.
    """

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, offset: int = 0) -> None:
        if isinstance(max_line_bytes, bool) or not isinstance(max_line_bytes, int):
            raise ValueError(f"max_line_bytes must be an int >= 1, got {max_line_bytes!r}")
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be an int >= 1, got {max_line_bytes!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        self.max_line_bytes = max_line_bytes
        self.boundary = offset
        self._pos = offset  # stream offset of the next byte fed
        self._rest = bytearray()
        self._discarding = False  # inside a too-long line, dropping bytes up to its newline

    @property
    def position(self) -> int:
        """Stream offset of the next byte to be fed (bytes fed so far plus ``offset``)."""
        return self._pos

    @property
    def pending(self) -> int:
        """Bytes held back: the start of an unterminated line (0 while dropping a long one)."""
        return len(self._rest)

    def feed(self, data: bytes) -> list[tuple[bytes, int]]:
        """The lines completed by ``data``, as ``(line, end_offset)`` pairs, in order."""
        out: list[tuple[bytes, int]] = []
        base, start, limit = self._pos, 0, self.max_line_bytes
        self._pos += len(data)
        while (newline := data.find(b"\n", start)) >= 0:
            end = base + newline + 1
            if self._discarding:
                self._discarding = False
            else:
                if self._rest:
                    self._rest += data[start:newline]
                    line = bytes(self._rest)
                    self._rest.clear()
                else:
                    line = data[start:newline]
                if len(line) > limit:
                    out.append((line[: limit + 1], -1))
                else:
                    out.append((line[:-1] if line.endswith(b"\r") else line, end))
            self.boundary = end
            start = newline + 1
        if not self._discarding and start < len(data):
            self._rest += data[start:]
            if len(self._rest) > limit:
                out.append((bytes(self._rest[: limit + 1]), -1))
                self._rest.clear()
                self._discarding = True
        return out

    def flush(self) -> list[tuple[bytes, int]]:
        """End of stream: the unterminated rest as a last line (if any), and reset.

        A line being dropped for its length was already returned; nothing more comes of it.
        """
        out: list[tuple[bytes, int]] = []
        if self._rest:
            line = bytes(self._rest)
            out.append((line[:-1] if line.endswith(b"\r") else line, self._pos))
        self.boundary = self._pos
        self._rest.clear()
        self._discarding = False
        return out


class LineParser:
    """One line of text -> one reading, or the reason it is rejected (counted).

    Parameters
    ----------
    format : {"auto", "csv", "json"}, default "auto"
        The line format (module docstring).
    n_features : int or None, default None
        Required number of values per reading; None takes the width of the first accepted
        line and requires it of every later line.
    max_line_bytes : int, default `DEFAULT_MAX_LINE_BYTES`
        Longer lines are rejected as ``too_long`` without being parsed.

    Attributes
    ----------
    width : int or None
        The number of values every accepted reading has (``n_features``, or the first
        accepted line's width; None before it).
    rejects : Counter of str to int
        Rejected lines per reason (`REJECT_REASONS`).
    accepted : int
        Lines accepted.

    Raises
    ------
    ValueError
        If ``format`` is not one of `FORMATS`, ``n_features`` is not None or an int >= 1, or
        ``max_line_bytes`` is not an int >= 1.

    Examples
    --------
    >>> parser = LineParser("auto")
    >>> parser.parse(b"1.5,2,3e2")
    array([  1.5,   2. , 300. ])
    >>> parser.parse('{"t": 17, "x": [1, 2, 3]}')
    array([1., 2., 3.])
    >>> parser.parse(b"temp,hum,pressure"), parser.parse(b"1,2"), parser.parse(b"1,nan,3")
    ('not_numeric', 'width', 'non_finite')
    >>> dict(parser.rejects)
    {'not_numeric': 1, 'width': 1, 'non_finite': 1}
    """

    def __init__(
        self,
        format: Format = "auto",
        n_features: int | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        if format not in FORMATS:
            expected = ", ".join(map(repr, FORMATS))
            raise ValueError(f"format must be one of {expected}, got {format!r}")
        if n_features is not None and (
            isinstance(n_features, bool) or not isinstance(n_features, int) or n_features < 1
        ):
            raise ValueError(f"n_features must be None or an int >= 1, got {n_features!r}")
        if isinstance(max_line_bytes, bool) or not isinstance(max_line_bytes, int):
            raise ValueError(f"max_line_bytes must be an int >= 1, got {max_line_bytes!r}")
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be an int >= 1, got {max_line_bytes!r}")
        self.format: Format = format
        self.n_features = n_features
        self.max_line_bytes = max_line_bytes
        self.width: int | None = n_features
        self.rejects: Counter[str] = Counter()
        self.accepted = 0

    def parse(self, line: bytes | str, *, count: bool = True) -> np.ndarray | str:
        """Parse one line (without its newline).

        Parameters
        ----------
        line : bytes or str
        count : bool, default True
            Whether to count the outcome in ``accepted`` / ``rejects`` (a file source
            re-reading lines it already reported passes False). The width learnt from the
            first accepted line is kept either way.

        Returns
        -------
        ndarray of shape (width,), float64, or str
            The reading (finite values), or the reject reason, one of `REJECT_REASONS`.
        """
        result = self.parse_values(line, count=count)
        return result if isinstance(result, str) else np.array(result, dtype=np.float64)

    def parse_values(self, line: bytes | str, *, count: bool = True) -> list[float] | str:
        """`parse` without the array: the reading as a list of ``width`` finite floats
        (sources build one array per batch, cheaper than one per line), or the reason."""
        data = line.encode("utf-8", "surrogateescape") if isinstance(line, str) else line
        result: list[float] | str
        if len(data) > self.max_line_bytes:
            result = "too_long"
        else:
            data = data.strip(_BLANK)
            if not data:
                result = "empty"
            elif self.format == "json" or (self.format == "auto" and data[:1] in b"[{"):
                result = _parse_json(data)
            else:
                result = _parse_csv(data)
        if not isinstance(result, str):
            if self.width is None:
                self.width = len(result)
            elif len(result) != self.width:
                result = "width"
        if count:
            if isinstance(result, str):
                self.rejects[result] += 1
            else:
                self.accepted += 1
        return result

    def describe(self, reason: str, line: bytes | str) -> str:
        """One line saying why ``line`` was rejected (for logs), e.g.
        ``"reading has 2 values, expected 3"``."""
        if reason == "width":
            got = self._width_of(line)
            return f"reading has {got} values, expected {self.width}"
        text = line if isinstance(line, str) else bytes(line).decode("utf-8", "replace")
        excerpt = text[:80] + ("..." if len(text) > 80 else "")
        return {
            "empty": "blank line",
            "not_numeric": f"not a list of numbers: {excerpt!r}",
            "non_finite": f"NaN or infinity in {excerpt!r}",
            "too_long": f"line longer than {self.max_line_bytes} bytes",
            "json": f"not a JSON array of numbers or an object with one under 'x': {excerpt!r}",
        }.get(reason, f"{reason}: {excerpt!r}")

    def _width_of(self, line: bytes | str) -> int | str:
        probe = LineParser(self.format, None, self.max_line_bytes)
        result = probe.parse(line)
        return result.shape[0] if isinstance(result, np.ndarray) else "?"


def _all_finite(values: list[float]) -> bool:
    total = sum(values)  # finite iff every value is, unless finite values overflow the sum
    return math.isfinite(total) or all(map(math.isfinite, values))


def _parse_csv(data: bytes) -> list[float] | str:
    fields = data.split(b",") if b"," in data else data.split()
    try:
        values = [float(field) for field in fields]
    except ValueError:
        return "not_numeric"
    return values if _all_finite(values) else "non_finite"


def _parse_json(data: bytes) -> list[float] | str:
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):  # includes UnicodeDecodeError, int digit limits
        return "json"
    if isinstance(obj, dict):
        if "x" not in obj:
            return "json"
        obj = obj["x"]
    if not isinstance(obj, list):
        return "json"
    if not obj:
        return "empty"
    values: list[float] = []
    for item in obj:
        kind = type(item)
        if kind is float:
            values.append(item)
        elif kind is int:
            try:
                values.append(float(item))
            except OverflowError:
                return "non_finite"
        elif kind is list:
            return "json"
        else:  # str, bool, None, dict
            return "not_numeric"
    return values if _all_finite(values) else "non_finite"
