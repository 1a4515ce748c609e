"""The synchronous cores of `edge_runtime.sources`: specs, lines, backoff, rate limit, cursors.

No I/O except the cursor file round trip in a temporary directory.
"""

from __future__ import annotations

import doctest
import importlib
import json
import random
from pathlib import Path

import numpy as np
import pytest

import edge_runtime.sources as sources_pkg
from edge_runtime.sources import (
    MAX_SOURCE_ID_CHARS,
    REJECT_REASONS,
    Backoff,
    CursorLog,
    FileCursor,
    LineParser,
    LineSplitter,
    LogRateLimiter,
    SourceSettings,
    SourceSpec,
    source_id,
)
from edge_runtime.sources.cursor import head_digest, load_cursor_log, save_cursor_log


def test_the_package_has_no_user_surface_and_its_names_resolve() -> None:
    assert sources_pkg.__all__ == []  # internal to the runtime: its modules import from here
    public = {name for name in dir(sources_pkg) if not name.startswith("_")}
    modules = {
        "restart",
        "base",
        "command",
        "cursor",
        "errors",
        "factory",
        "file",
        "lines",
        "ratelimit",
        "serialport",
        "spec",
    }
    imported = {"annotations", "TYPE_CHECKING", "lazy_names"}  # the lazy loader's (issue 24)
    names = public - modules - imported
    assert {"SourceSpec", "SourceError", "open_source"} <= names
    assert all(getattr(sources_pkg, name) is not None for name in names)


@pytest.mark.parametrize("name", ["lines", "restart", "ratelimit"])
def test_the_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(f"edge_runtime.sources.{name}")
    result = doctest.testmod(module, verbose=False)
    assert result.attempted > 0 and result.failed == 0


# ---------------------------------------------------------------------------- spec
@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ({}, SourceSpec()),
        ({"kind": "mqtt", "topic": "sensors/bench"}, SourceSpec(topic="sensors/bench")),
        (
            {"kind": "command", "command": ["python3", "read.py"], "format": "csv"},
            SourceSpec(kind="command", command=("python3", "read.py"), format="csv"),
        ),
        (
            {"kind": "command", "command": ["sh", "-c", "cat x"], "restart": "never"},
            SourceSpec(kind="command", command=("sh", "-c", "cat x"), restart="never"),
        ),
        (
            {"kind": "file", "path": "/run/s.fifo", "format": "json", "follow": False},
            SourceSpec(kind="file", path=Path("/run/s.fifo"), format="json", follow=False),
        ),
        (
            {"kind": "serial", "port": "/dev/ttyUSB0", "baudrate": 115200},
            SourceSpec(kind="serial", port="/dev/ttyUSB0", baudrate=115200),
        ),
    ],
)
def test_from_mapping_accepts_the_documented_tables(table: dict, expected: SourceSpec) -> None:
    assert SourceSpec.from_mapping(table, "node 'pi-07'") == expected


@pytest.mark.parametrize(
    ("table", "fragments"),
    [
        ("file", ["node 'x'", "table", "'file'"]),
        ({"kind": "usb"}, ["'kind'", "'usb'", "'serial'"]),
        ({"kind": "file", "pth": "a.csv"}, ["unknown source key 'pth'", "'path'"]),
        ({"kind": "mqtt", "path": "a.csv"}, ["unknown source key 'path'", "'mqtt'"]),
        ({"kind": "command", "command": "python3 read.py"}, ["'command'", "python3 read.py"]),
        ({"kind": "command", "command": []}, ["'command'", "[]"]),
        ({"kind": "command", "command": ["python3", 3]}, ["'command'", "3"]),
        ({"kind": "command"}, ["needs key 'command'"]),
        ({"kind": "file"}, ["needs key 'path'"]),
        ({"kind": "file", "path": ""}, ["'path'", "''"]),
        ({"kind": "file", "path": "a", "follow": "yes"}, ["'follow'", "'yes'"]),
        ({"kind": "serial"}, ["needs key 'port'"]),
        ({"kind": "serial", "port": "/dev/x", "baudrate": True}, ["'baudrate'", "True"]),
        ({"kind": "serial", "port": "/dev/x", "baudrate": 0}, ["'baudrate'", "0"]),
        ({"kind": "file", "path": "a", "format": "xml"}, ["'format'", "'xml'", "'csv'"]),
        ({"kind": "command", "command": ["a"], "restart": "sometimes"}, ["'restart'"]),
    ],
)
def test_from_mapping_refuses_bad_tables_in_one_line_naming_key_and_value(
    table: object, fragments: list[str]
) -> None:
    with pytest.raises(ValueError) as info:
        SourceSpec.from_mapping(table, "node 'x'")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("node 'x'")
    for fragment in fragments:
        assert fragment in message


def test_from_mapping_resolves_a_relative_path_against_base_dir(tmp_path: Path) -> None:
    spec = SourceSpec.from_mapping({"kind": "file", "path": "data/a.csv"}, "n", base_dir=tmp_path)
    assert spec.path == tmp_path / "data" / "a.csv"
    absolute = SourceSpec.from_mapping({"kind": "file", "path": "/a.csv"}, "n", base_dir=tmp_path)
    assert absolute.path == Path("/a.csv")


def test_a_spec_refuses_fields_of_another_kind() -> None:
    with pytest.raises(ValueError, match="'port' does not apply to kind 'file'"):
        SourceSpec(kind="file", path=Path("a"), port="/dev/ttyS0")
    with pytest.raises(ValueError, match="needs 'command'"):
        SourceSpec(kind="command")


def test_source_ids_are_stable_and_bounded() -> None:
    spec = SourceSpec(kind="file", path=Path("/var/lib/sensors/a.csv"))
    assert source_id(spec, "pi-07") == "file:/var/lib/sensors/a.csv"
    assert source_id(SourceSpec(kind="command", command=("x",)), "pi-07") == "command:pi-07"
    assert source_id(SourceSpec(kind="serial", port="/dev/ttyUSB0"), "n") == "serial:/dev/ttyUSB0"
    deep = SourceSpec(kind="file", path=Path("/" + "d" * 150 + "/readings.csv"))
    long_id = source_id(deep, "n")
    assert len(long_id) <= MAX_SOURCE_ID_CHARS
    assert long_id == source_id(deep, "other") and long_id.endswith("/readings.csv")
    with pytest.raises(ValueError, match="mqtt"):
        source_id(SourceSpec(), "n")


def test_settings_refuse_non_positive_values_naming_them() -> None:
    with pytest.raises(ValueError, match="poll_interval_s"):
        SourceSettings(poll_interval_s=0)
    with pytest.raises(ValueError, match="max_batch_rows"):
        SourceSettings(max_batch_rows=0)
    with pytest.raises(ValueError, match="restart_max_s"):
        SourceSettings(restart_initial_s=2.0, restart_max_s=1.0)


# ---------------------------------------------------------------------------- lines
@pytest.mark.parametrize(
    ("line", "values"),
    [
        (b"1.5,2,-3e2", [1.5, 2.0, -300.0]),
        (b" 1.5 , 2 , 3 \r", [1.5, 2.0, 3.0]),
        (b"1.5 2\t3", [1.5, 2.0, 3.0]),
        ("[1, 2.5, 3]", [1.0, 2.5, 3.0]),
        (b'{"t": "2025-01-01", "seq": 9, "x": [1, 2, 3]}', [1.0, 2.0, 3.0]),
    ],
)
def test_parser_reads_csv_whitespace_and_json_lines(line: bytes | str, values: list) -> None:
    result = LineParser("auto").parse(line)
    assert isinstance(result, np.ndarray) and result.dtype == np.float64
    np.testing.assert_array_equal(result, values)


@pytest.mark.parametrize(
    ("fmt", "line", "reason"),
    [
        ("auto", b"", "empty"),
        ("auto", b"   \t", "empty"),
        ("auto", b"[]", "empty"),
        ("auto", b"temp,hum,pres", "not_numeric"),
        ("auto", b"1,,3", "not_numeric"),
        ("auto", b"1,2,\xff", "not_numeric"),
        ("auto", b'["1", 2, 3]', "not_numeric"),
        ("auto", b"[true, 2, 3]", "not_numeric"),
        ("auto", b"[null, 2, 3]", "not_numeric"),
        ("auto", b"1,nan,3", "non_finite"),
        ("auto", b"1,inf,3", "non_finite"),
        ("auto", b"[1, NaN, 3]", "non_finite"),
        ("auto", b"[1, 1e400, 3]", "non_finite"),
        ("auto", b"[1, " + b"9" * 400 + b", 3]", "non_finite"),
        ("auto", b"[1, 2", "json"),
        ("auto", b'{"y": [1, 2, 3]}', "json"),
        ("auto", b"[[1, 2, 3]]", "json"),
        ("auto", b"[1, " + b"9" * 5000 + b", 3]", "json"),
        ("json", b"1,2,3", "json"),
        ("csv", b"[1,2,3]", "not_numeric"),
        ("auto", b"1," * 40000 + b"1", "too_long"),
        ("auto", b"1,2", "width"),
    ],
)
def test_parser_rejects_bad_lines_by_reason_and_counts_them(
    fmt: str, line: bytes, reason: str
) -> None:
    parser = LineParser(fmt, n_features=3)  # type: ignore[arg-type]
    assert parser.parse(line) == reason
    assert parser.rejects == {reason: 1}
    assert reason in REJECT_REASONS


def test_parser_learns_the_width_from_the_first_accepted_line() -> None:
    parser = LineParser()
    assert parser.parse(b"header") == "not_numeric"
    assert isinstance(parser.parse(b"1,2,3"), np.ndarray)
    assert parser.width == 3
    assert parser.parse(b"1,2,3,4") == "width"
    assert parser.describe("width", b"1,2,3,4") == "reading has 4 values, expected 3"
    assert parser.parse(b"4,5,6", count=False).tolist() == [4, 5, 6]  # type: ignore[union-attr]
    assert parser.accepted == 1 and parser.rejects == {"not_numeric": 1, "width": 1}


def test_parser_refuses_bad_options() -> None:
    with pytest.raises(ValueError, match="format"):
        LineParser("xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_features"):
        LineParser(n_features=0)


def test_splitter_returns_lines_with_their_end_offsets_across_chunks() -> None:
    splitter = LineSplitter(offset=100)
    assert splitter.feed(b"1,2\r\n3,") == [(b"1,2", 105)]
    assert splitter.pending == 2
    assert splitter.feed(b"4\n\n5,6") == [(b"3,4", 109), (b"", 110)]
    assert splitter.boundary == 110 and splitter.position == 113
    assert splitter.flush() == [(b"5,6", 113)]
    assert splitter.flush() == []


def test_splitter_reports_a_too_long_line_once_and_drops_the_rest_of_it() -> None:
    splitter = LineSplitter(max_line_bytes=8)
    out = splitter.feed(b"1,2\n" + b"x" * 6)
    assert out == [(b"1,2", 4)]
    out = splitter.feed(b"y" * 6)  # now 12 bytes without a newline: reported at once
    assert out == [(b"xxxxxxyyy", -1)]
    assert splitter.pending == 0
    assert splitter.feed(b"z" * 100) == []  # still the same line: dropped, memory bounded
    assert splitter.pending == 0
    assert splitter.feed(b"zz\n7,8\n") == [(b"7,8", 4 + 12 + 100 + 3 + 4)]
    assert splitter.boundary == 123
    assert splitter.feed(b"a" * 20 + b"\n") == [(b"a" * 9, -1)]


# ---------------------------------------------------------------------------- backoff, limit
def test_backoff_doubles_to_its_cap_with_bounded_jitter_and_resets() -> None:
    backoff = Backoff(0.5, 4.0, random.Random(1))
    delays = [backoff.next_delay() for _ in range(10)]
    nominal = [min(4.0, 0.5 * 2**k) for k in range(10)]
    assert all(n / 2 <= d < n for d, n in zip(delays, nominal, strict=True))
    assert max(delays) < 4.0 and backoff.failures == 10
    backoff.reset()
    assert 0.25 <= backoff.next_delay() < 0.5
    again = Backoff(0.5, 4.0, random.Random(1))
    assert [again.next_delay() for _ in range(10)] == delays
    huge = Backoff(1.0, 60.0, random.Random(0))
    huge.failures = 10_000
    assert huge.nominal() == 60.0
    with pytest.raises(ValueError, match="initial_s"):
        Backoff(2.0, 1.0, random.Random())


def test_rate_limiter_lets_a_burst_through_then_reports_the_count() -> None:
    limiter = LogRateLimiter(burst=3, interval_s=60.0)
    verdicts = [limiter.allow(t) for t in range(100)]
    assert verdicts[:3] == [(True, 0)] * 3
    assert all(v == (False, 0) for v in verdicts[3:60])
    assert verdicts[60] == (True, 57)  # a new window: logged, with the suppressed count
    assert limiter.flush() == 39 - 2 and limiter.flush() == 0


# ---------------------------------------------------------------------------- cursors
def _cursor(offset: int, seq: int, *, ino: int = 7, head: bytes = b"1,2\n") -> FileCursor:
    return FileCursor(1, ino, offset, seq, 2, len(head), head_digest(head))


def test_cursor_log_resumes_from_the_newest_cursor_at_or_before_start_seq() -> None:
    log = CursorLog(history=3)
    log.new_file(_cursor(0, 0))
    for offset, seq in ((40, 10), (80, 20), (120, 30), (160, 40)):
        log.record(_cursor(offset, seq))
    assert len(log.cursors) == 3  # bounded: (40, 10) was dropped

    def head(n: int) -> str:
        return head_digest(b"1,2\n"[:n])

    assert log.choose(25, 1, 7, 1000, head) == _cursor(80, 20)
    assert log.choose(40, 1, 7, 1000, head) == _cursor(160, 40)
    assert log.choose(15, 1, 7, 1000, head) == _cursor(0, 0)  # the origin is kept
    assert log.choose(25, 1, 8, 1000, head) is None  # another inode
    assert log.choose(25, 1, 7, 70, head) == _cursor(0, 0)  # shrunk below the others
    assert log.choose(25, 1, 7, 1000, lambda n: head_digest(b"9,9\n"[:n])) is None
    log.keep_until(25)
    assert [c.seq for c in log.cursors] == [20]


def test_cursor_log_forgets_the_old_content_of_a_truncated_file() -> None:
    log = CursorLog(history=8)
    log.new_file(_cursor(0, 0))
    log.record(_cursor(80, 20))
    log.record(_cursor(50, 5, ino=9))
    log.new_file(_cursor(0, 20))  # same inode, truncated: numbering continues at 20
    assert log.origin == _cursor(0, 20)
    assert [c.ino for c in log.cursors] == [9]


def test_cursor_file_round_trips_and_bad_files_are_one_line_errors(tmp_path: Path) -> None:
    log = CursorLog(history=4)
    log.new_file(_cursor(0, 0))
    log.record(_cursor(80, 20))
    path = tmp_path / "c.json"
    assert load_cursor_log(path, "file:/a", 4) is None
    save_cursor_log(path, log, "file:/a")
    loaded = load_cursor_log(path, "file:/a", 4)
    assert loaded is not None and loaded.origin == log.origin
    assert list(loaded.cursors) == list(log.cursors)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(ValueError, match="not 'file:/b'"):
        load_cursor_log(path, "file:/b", 4)
    path.write_text(json.dumps({**log.to_json("file:/a"), "cursors": [{"dev": -1}]}))
    with pytest.raises(ValueError, match=r"c\.json"):
        load_cursor_log(path, "file:/a", 4)
    path.write_bytes(b"\x00garbage")
    with pytest.raises(ValueError) as info:
        load_cursor_log(path, "file:/a", 4)
    assert "\n" not in str(info.value)
