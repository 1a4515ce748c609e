"""Datasets to replay through a topology: the shipped ``motes-light`` and user files.

``load_dataset`` returns a float64 array of shape ``(n_samples, n_features)`` (samples are rows,
the scikit-learn convention; the paper, Grammenos et al., NeurIPS 2020, writes them as columns).

Built-in datasets (`BUILTIN_DATASETS`):

``"motes-light"``
    Light readings (lux) of 48 Mica2Dot motes in the Intel Berkeley Research Lab, 7712 aligned
    time steps, shape ``(7712, 48)``; zeros are dropouts in the original data. Prepared by the
    SPIRIT project (Papadimitriou, Sun, Faloutsos, VLDB 2005) from the Intel Lab deployment
    (Deshpande et al., VLDB 2004); the "Light" dataset (d = 48, N = 7712) of Grammenos et al.,
    NeurIPS 2020. Shipped as the xz-compressed original text, see ``README.md`` here.

A user file is plain text, one sample per row, numbers separated by commas, semicolons or
whitespace (detected from the first non-comment line), with optionally

- one header line of non-numeric column names (the first non-comment line);
- ``#`` comments, whole-line or trailing, and blank lines (both skipped);
- compression: names ending in ``.gz``, ``.xz`` or ``.bz2`` are decompressed first.

Every problem raises `DatasetError` (a `ValueError`) with a one-line message naming the file and,
where it applies, the line and column (1-based, counted in the decompressed text).

How a replay deals a dataset's rows to the leaves of a topology is `edge_runtime.datasets.split`.

Examples
--------
>>> from edge_runtime.datasets import load_dataset
>>> X = load_dataset("motes-light")
>>> X.shape, X.dtype
((7712, 48), dtype('float64'))
"""

from __future__ import annotations

import bz2
import functools
import gzip
import lzma
import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from edge_runtime.errors import EdgeRuntimeError

__all__: list[str] = []  # internal to the runtime: no user surface

BUILTIN_DATASETS: tuple[str, ...] = ("motes-light",)
"""Names `load_dataset` accepts without a file; each is shipped as ``<name>.txt.xz``."""

_HERE = Path(__file__).resolve().parent

_DECOMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    ".gz": gzip.decompress,
    ".xz": lzma.decompress,
    ".bz2": bz2.decompress,
}

# A decimal comma as written in some locales, e.g. "1,5" in a semicolon-separated file.
_DECIMAL_COMMA = re.compile(r"^[+-]?\d+,\d+$")


class DatasetError(EdgeRuntimeError, ValueError):
    """A dataset is missing, unreadable or not a rectangular table of finite numbers."""


def builtin_dataset_path(name: str) -> Path:
    """Return the path of the shipped file of the built-in dataset ``name``.

    Parameters
    ----------
    name : str
        One of `BUILTIN_DATASETS`.

    Returns
    -------
    Path
        The xz-compressed text file inside this package; `load_dataset` accepts it too.

    Raises
    ------
    DatasetError
        If ``name`` is not a built-in dataset.
    """
    if name not in BUILTIN_DATASETS:
        raise DatasetError(
            f"unknown built-in dataset {name!r}, expected one of: {', '.join(BUILTIN_DATASETS)}"
        )
    return _HERE / f"{name}.txt.xz"


def load_dataset(name_or_path: str | os.PathLike[str]) -> np.ndarray:
    """Load a built-in dataset by name, or a text file of numbers by path.

    Parameters
    ----------
    name_or_path : str or path-like
        A name in `BUILTIN_DATASETS` (a built-in name wins over a file of the same name in the
        working directory), or the path of a text file in the format of the module docstring
        (``~`` is expanded; a relative path is relative to the working directory).

    Returns
    -------
    ndarray of shape (n_samples, n_features), float64
        A new, writable, C-contiguous array; every value finite.

    Raises
    ------
    DatasetError
        If the file does not exist or cannot be read or decompressed, is not UTF-8, holds no data
        rows, has ragged rows (names the line and both widths), a non-numeric cell (line and
        column) or a NaN/infinite value (line and column).

    Notes
    -----
    A built-in dataset is parsed once per process (about 0.2 s for motes-light) and kept in
    memory (3 MB); each call returns a copy. User files are read whole into memory.
    """
    if isinstance(name_or_path, str) and name_or_path in BUILTIN_DATASETS:
        return _load_builtin(name_or_path).copy()
    path = Path(name_or_path).expanduser()
    for name in BUILTIN_DATASETS:
        if path.is_file() and path.resolve() == builtin_dataset_path(name):
            return _load_builtin(name).copy()
    return _parse_text(_read_text(path, name_or_path), str(path))


@functools.lru_cache(maxsize=len(BUILTIN_DATASETS))
def _load_builtin(name: str) -> np.ndarray:
    """Parse a shipped dataset once (about 0.15 s for motes-light); the result is read-only."""
    path = builtin_dataset_path(name)
    data = _parse_text(_read_text(path, str(path)), str(path))
    data.setflags(write=False)
    return data


def _read_text(path: Path, original: object) -> str:
    """Read, decompress (by suffix) and decode ``path`` as UTF-8 text."""
    if not path.exists():
        if isinstance(original, str) and os.sep not in original and "/" not in original:
            raise DatasetError(
                f"unknown dataset {original!r}: not a built-in dataset "
                f"({', '.join(BUILTIN_DATASETS)}) and no file {str(path)!r}"
            )
        raise DatasetError(f"dataset file not found: {str(path)!r}")
    if path.is_dir():
        raise DatasetError(f"dataset path {str(path)!r} is a directory, expected a file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"cannot read dataset file {str(path)!r}: {exc.strerror}") from exc
    decompress = _DECOMPRESSORS.get(path.suffix.lower())
    if decompress is not None:
        try:
            raw = decompress(raw)
        except (OSError, EOFError, lzma.LZMAError) as exc:
            raise DatasetError(
                f"cannot decompress dataset file {str(path)!r} ({path.suffix} by its name): {exc}"
            ) from exc
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DatasetError(
            f"dataset file {str(path)!r} is not UTF-8 text (byte {exc.start})"
        ) from exc


def _split_cells(line: str, delimiter: str | None) -> list[str]:
    """Split one comment-free, stripped line; ``None`` means runs of whitespace."""
    if delimiter is None:
        return line.split()
    return [cell.strip() for cell in line.split(delimiter)]


def _detect_delimiter(line: str) -> str | None:
    """Semicolon if the line has one, else comma if it has one, else whitespace (``None``)."""
    if ";" in line:
        return ";"
    if "," in line:
        return ","
    return None


def _parse_cell(cell: str) -> float | None:
    """A cell's value, or ``None`` if it is not a plain decimal number."""
    if "_" in cell:  # float() accepts "1_000"; no data file means that
        return None
    try:
        return float(cell)
    except ValueError:
        return None


def _cell_problem(cell: str, delimiter: str | None) -> str:
    """Describe why ``cell`` is not a number, for the error message."""
    if cell == "":
        return "empty cell"
    hint = ""
    if delimiter == ";" and _DECIMAL_COMMA.match(cell):
        hint = " (decimal commas are not supported; write '.')"
    return f"non-numeric value {cell!r}{hint}"


def _parse_text(text: str, where: str) -> np.ndarray:
    """Parse the text format of the module docstring into an (n_samples, n_features) array."""
    rows: list[list[float]] = []
    row_lines: list[int] = []
    delimiter: str | None = None
    width = 0
    width_from = ""
    seen_content = False
    for line_no, raw_line in enumerate(text.split("\n"), start=1):
        line = raw_line.split("#", 1)[0].strip()
        if not line:
            continue
        if not seen_content:
            delimiter = _detect_delimiter(line)
        cells = _split_cells(line, delimiter)
        values: list[float] | None
        try:
            if "_" in line:  # see _parse_cell
                raise ValueError(line)
            values = [float(cell) for cell in cells]
        except ValueError:
            values = None
        if values is None:
            bad = [col for col, cell in enumerate(cells, start=1) if _parse_cell(cell) is None]
            if not seen_content and len(bad) == len(cells) and all(cells):
                seen_content = True  # the one header line of column names
                width, width_from = len(cells), f"the header on line {line_no} has"
                continue
            col = bad[0]
            raise DatasetError(
                f"{where}: line {line_no}, column {col}: "
                f"{_cell_problem(cells[col - 1], delimiter)}, expected a number"
            )
        if not width:
            width, width_from = len(values), f"line {line_no} has"
        elif len(values) != width:
            raise DatasetError(
                f"{where}: ragged rows: line {line_no} has {len(values)} values, "
                f"{width_from} {width}"
            )
        seen_content = True
        rows.append(values)
        row_lines.append(line_no)
    if not rows:
        raise DatasetError(f"{where}: no data rows (the file is empty or holds only comments)")
    data = np.array(rows, dtype=np.float64)
    finite = np.isfinite(data)
    if not finite.all():
        row, col = (int(i) for i in np.argwhere(~finite)[0])
        line = text.split("\n")[row_lines[row] - 1].split("#", 1)[0].strip()
        cell = _split_cells(line, delimiter)[col]
        raise DatasetError(
            f"{where}: line {row_lines[row]}, column {col + 1}: non-finite value {cell!r} "
            f"(read as {float(data[row, col])}; NaN and infinity are not allowed)"
        )
    return data
