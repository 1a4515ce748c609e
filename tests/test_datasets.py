"""Tests of edge_runtime.datasets: the shipped motes-light data and the user-file parser."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
from pathlib import Path

import numpy as np
import pytest

import edge_runtime.datasets as datasets_module
from edge_runtime.datasets import (
    BUILTIN_DATASETS,
    DatasetError,
    builtin_dataset_path,
    load_dataset,
)

EXPECTED = np.array([[1.0, 2.5, -3.0], [4.0, 5e-3, 6.0]])


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    data = text.encode("utf-8") if isinstance(text, str) else text
    suffix = Path(name).suffix.lower()
    if suffix == ".gz":
        data = gzip.compress(data)
    elif suffix == ".xz":
        data = lzma.compress(data)
    elif suffix == ".bz2":
        data = bz2.compress(data)
    path.write_bytes(data)
    return path


# --------------------------------------------------------------------------------------------
# The built-in dataset


def test_the_builtin_names_are_exactly_motes_light() -> None:
    assert BUILTIN_DATASETS == ("motes-light",)
    assert datasets_module.__all__ == []  # internal to the runtime: no user surface
    assert issubclass(DatasetError, ValueError)


def test_motes_light_has_7712_samples_of_48_motes_as_float64() -> None:
    data = load_dataset("motes-light")
    assert data.shape == (7712, 48)
    assert data.dtype == np.float64
    assert data.flags.c_contiguous
    assert np.isfinite(data).all()


def test_motes_light_first_row_parses_the_original_text_exactly() -> None:
    data = load_dataset("motes-light")
    assert data[0, 0] == float("45.08000183")
    assert data[0, 1] == float("121.4400024")
    assert data[0, 10] == 0.0  # a dropout in the original data


def test_motes_light_matches_numpy_loadtxt_of_the_shipped_text() -> None:
    text = lzma.decompress(builtin_dataset_path("motes-light").read_bytes()).decode("ascii")
    reference = np.loadtxt(io.StringIO(text))
    np.testing.assert_array_equal(load_dataset("motes-light"), reference)


def test_motes_light_has_dropout_zeros_and_positive_light_readings() -> None:
    data = load_dataset("motes-light")
    assert (data == 0).any()
    assert (data >= 0).all()
    assert data.max() > 100


def test_each_load_returns_a_fresh_writable_array() -> None:
    first = load_dataset("motes-light")
    first[0, 0] = -1.0
    second = load_dataset("motes-light")
    assert second[0, 0] == float("45.08000183")
    assert second.flags.writeable


def test_the_shipped_file_path_loads_like_the_name() -> None:
    path = builtin_dataset_path("motes-light")
    assert path.name == "motes-light.txt.xz"
    assert path.is_file()
    np.testing.assert_array_equal(load_dataset(path), load_dataset("motes-light"))
    np.testing.assert_array_equal(load_dataset(str(path)), load_dataset("motes-light"))


def test_the_shipped_attribution_names_the_sources() -> None:
    readme = (builtin_dataset_path("motes-light").parent / "README.md").read_text()
    for source in ("Intel", "SPIRIT", "Papadimitriou", "Deshpande", "Grammenos", "NeurIPS 2020"):
        assert source in readme


def test_an_unknown_builtin_name_is_rejected_by_builtin_dataset_path() -> None:
    with pytest.raises(DatasetError, match="unknown built-in dataset 'nope'"):
        builtin_dataset_path("nope")


# --------------------------------------------------------------------------------------------
# User files that load


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("comma.csv", "1,2.5,-3\n4,5e-3,6\n"),
        ("comma-spaces.csv", "1, 2.5 , -3\n 4,5e-3, 6\n"),
        ("semicolon.csv", "1;2.5;-3\n4;5e-3;6\n"),
        ("whitespace.txt", "1 2.5\t-3\n  4\t\t5e-3   6  \n"),
        ("header.csv", "a,b,c\n1,2.5,-3\n4,5e-3,6\n"),
        ("header-ws.txt", "x y z\n1 2.5 -3\n4 5e-3 6\n"),
        ("header-semicolon.csv", "mote 1;mote 2;mote 3\n1;2.5;-3\n4;5e-3;6\n"),
        ("comments.csv", "# light readings\n\n1,2.5,-3  # first\n\n# between\n4,5e-3,6\n\n"),
        ("comment-header.csv", "# made by hand\na,b,c\n1,2.5,-3\n4,5e-3,6\n"),
        ("crlf.csv", "a,b,c\r\n1,2.5,-3\r\n4,5e-3,6\r\n"),
        ("bom.csv", "\ufeffa,b,c\n1,2.5,-3\n4,5e-3,6\n"),
        ("no-final-newline.txt", "1 2.5 -3\n4 5e-3 6"),
        ("compressed.csv.gz", "a,b,c\n1,2.5,-3\n4,5e-3,6\n"),
        ("compressed.txt.xz", "1 2.5 -3\n4 5e-3 6\n"),
        ("compressed.txt.bz2", "1;2.5;-3\n4;5e-3;6\n"),
        ("upper-suffix.TXT.GZ", "1 2.5 -3\n4 5e-3 6\n"),
    ],
)
def test_text_files_in_every_supported_variant_load(tmp_path: Path, name: str, text: str) -> None:
    data = load_dataset(write(tmp_path, name, text))
    np.testing.assert_array_equal(data, EXPECTED)
    assert data.dtype == np.float64


def test_a_single_column_and_a_single_row_keep_two_dimensions(tmp_path: Path) -> None:
    assert load_dataset(write(tmp_path, "col.txt", "1\n2\n3\n")).shape == (3, 1)
    assert load_dataset(write(tmp_path, "row.txt", "1 2 3\n")).shape == (1, 3)


def test_a_path_may_be_a_string(tmp_path: Path) -> None:
    path = write(tmp_path, "x.csv", "1,2.5,-3\n4,5e-3,6\n")
    np.testing.assert_array_equal(load_dataset(str(path)), EXPECTED)


def test_large_but_finite_values_are_kept_exactly(tmp_path: Path) -> None:
    data = load_dataset(write(tmp_path, "big.txt", "1.7976931348623157e308 -0.0 5e-324\n"))
    assert data[0, 0] == np.finfo(np.float64).max
    assert data[0, 2] == 5e-324


# --------------------------------------------------------------------------------------------
# Errors: one line, naming the file and where


def error_message(path_or_name: str | Path) -> str:
    with pytest.raises(DatasetError) as info:
        load_dataset(path_or_name)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    message = error_message(tmp_path / "absent.csv")
    assert "dataset file not found" in message
    assert "absent.csv" in message


def test_an_unknown_bare_name_is_neither_builtin_nor_a_file() -> None:
    message = error_message("motes-dark")
    assert "unknown dataset 'motes-dark'" in message
    assert "motes-light" in message


def test_a_directory_is_not_a_dataset(tmp_path: Path) -> None:
    assert "is a directory" in error_message(tmp_path)


@pytest.mark.parametrize(
    "text", ["", "\n\n  \n", "# only\n# comments\n", "a,b,c\n", "a b c\n# nothing else\n"]
)
def test_a_file_without_data_rows_is_empty(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, "empty.csv", text)
    message = error_message(path)
    assert "no data rows" in message
    assert str(path) in message


def test_ragged_rows_name_both_lines_and_widths(tmp_path: Path) -> None:
    path = write(tmp_path, "ragged.csv", "# c\n1,2,3\n\n4,5\n")
    message = error_message(path)
    assert str(path) in message
    assert "ragged rows: line 4 has 2 values, line 2 has 3" in message


def test_a_row_wider_than_the_header_is_ragged(tmp_path: Path) -> None:
    message = error_message(write(tmp_path, "h.csv", "a,b\n1,2,3\n"))
    assert "line 2 has 3 values, the header on line 1 has 2" in message


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("1,2,3\n4,x,6\n", "line 2, column 2", "non-numeric value 'x'"),
        ("1 2 3\n4 5 six\n", "line 2, column 3", "non-numeric value 'six'"),
        ("1,,3\n", "line 1, column 2", "empty cell"),
        ("1,2,\n", "line 1, column 3", "empty cell"),
        ("a,b\nc,d\n1,2\n", "line 2, column 1", "non-numeric value 'c'"),
        ("1,2\na,b\n", "line 2, column 1", "non-numeric value 'a'"),
        ("t,1,2\n0,1,2\n", "line 1, column 1", "non-numeric value 't'"),
        ("1_000 2\n", "line 1, column 1", "non-numeric value '1_000'"),
        ("1;2,5\n", "line 1, column 2", "decimal commas are not supported"),
        ("0x10 1\n", "line 1, column 1", "non-numeric value '0x10'"),
    ],
)
def test_non_numeric_cells_name_line_and_column(
    tmp_path: Path, text: str, where: str, what: str
) -> None:
    path = write(tmp_path, "bad.csv", text)
    message = error_message(path)
    assert f"{path}: {where}: " in message
    assert what in message
    assert "expected a number" in message


@pytest.mark.parametrize(
    ("text", "where", "cell"),
    [
        ("1 2\n3 nan\n", "line 2, column 2", "'nan'"),
        ("1,NaN\n", "line 1, column 2", "'NaN'"),
        ("inf 1\n", "line 1, column 1", "'inf'"),
        ("1 2\n3 -Infinity\n", "line 2, column 2", "'-Infinity'"),
        ("# x\n1 1e999\n", "line 2, column 2", "'1e999'"),
    ],
)
def test_non_finite_values_are_rejected_naming_line_and_column(
    tmp_path: Path, text: str, where: str, cell: str
) -> None:
    path = write(tmp_path, "nonfinite.txt", text)
    message = error_message(path)
    assert f"{path}: {where}: non-finite value {cell}" in message
    assert "NaN and infinity are not allowed" in message


def test_a_file_that_is_not_utf8_is_rejected(tmp_path: Path) -> None:
    message = error_message(write(tmp_path, "latin1.csv", b"caf\xe9\n1\n"))
    assert "not UTF-8" in message


@pytest.mark.parametrize("name", ["broken.csv.gz", "broken.txt.xz", "broken.txt.bz2"])
def test_a_corrupt_compressed_file_is_rejected(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"1,2,3\n")  # plain text under a compressed name
    message = error_message(path)
    assert "cannot decompress" in message
    assert name in message
