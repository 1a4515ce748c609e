"""The harness itself: the one entry point and its table, the result schema, process sampling,
the reports' prose templates."""

from __future__ import annotations

import ast
import gc
import importlib
import math
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from benchmarks.__main__ import main
from benchmarks.processes import io_counters, sample_process
from benchmarks.registry import BENCHMARKS
from benchmarks.reporting import TEMPLATES, prose
from benchmarks.schema import KEYS, read_result, revive, to_json, write_result

ROOT = Path(__file__).resolve().parents[2]


def test_python_m_benchmarks_lists_every_benchmark_without_importing_one() -> None:
    code = (
        "import sys; from benchmarks.__main__ import main; main([]); "
        "print(sorted(m for m in sys.modules if m.startswith(('benchmarks.', 'numpy', "
        "'edge_runtime'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    listing, imported = out.stdout.rstrip("\n").rsplit("\n", 1)
    for name in BENCHMARKS:
        assert f"  {name} " in listing
    assert imported == "['benchmarks.__main__', 'benchmarks.registry']"


def test_every_entry_and_render_names_a_function_and_an_unknown_name_exits_2(capsys) -> None:
    for target in (t for b in BENCHMARKS.values() for t in (b.entry, b.render) if t):
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), target
    assert main(["no-such-benchmark"]) == 2
    assert "acceptance" in capsys.readouterr().err


@dataclass
class _Inner:
    value: float
    count: int = 0


@dataclass
class _Row:
    label: str
    inner: _Inner
    spread: tuple[float, float]
    by_key: dict[float, list[_Inner]] = field(default_factory=dict)
    maybe: _Inner | None = None


def test_a_result_file_reads_back_into_the_rows_it_was_written_from(tmp_path: Path) -> None:
    rows = [
        _Row("a", _Inner(math.nan, 3), (1.5, math.inf), {0.5: [_Inner(2.0)]}),
        _Row("b", _Inner(1.25), (0.0, -1.0), maybe=_Inner(-math.inf, 1)),
    ]
    path = tmp_path / "x.json"
    write_result(path, "x", {"seeds": 2}, {"main": rows}, {"a": 1.0}, {"wall_s": 0.5})

    doc = read_result(path, "x")

    assert tuple(doc) == KEYS
    back = revive(list[_Row], doc["rows"]["main"])
    assert to_json(back) == to_json(rows)
    assert math.isnan(back[0].inner.value) and back[0].spread[1] == math.inf
    assert back[0].by_key == {0.5: [_Inner(2.0)]} and back[0].maybe is None
    assert doc["environment"] == {"wall_s": 0.5}
    with pytest.raises(ValueError, match="not of 'y'"):
        read_result(path, "y")


def test_process_samples_count_cpu_memory_files_and_written_bytes(tmp_path: Path) -> None:
    before = sample_process()
    (tmp_path / "f").write_bytes(os.urandom(1 << 16))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        other = sample_process(child.pid)
        assert other is not None and other.rss_bytes > 0 and other.fds >= 3
    finally:
        child.kill()
        child.wait()
    assert sample_process(child.pid) is None
    after = sample_process()
    assert before is not None and after is not None and after.cpu_s >= before.cpu_s > 0
    assert after.peak_rss_bytes >= after.rss_bytes > 0
    counters = io_counters()
    assert set(counters) == {"rchar", "wchar", "syscr", "syscw", "read_bytes", "write_bytes"}
    assert counters["wchar"] >= 1 << 16


def test_churn_and_membership_reports_render_again_from_their_stored_results(
    tmp_path: Path,
) -> None:
    from benchmarks.fleet import churn, membership
    from benchmarks.fleet.churn_run import ChurnPlan, RunResult
    from benchmarks.reporting import Check

    plan = ChurnPlan(leaves=8, join=2, retire=1, readings_per_leaf=20, workers=1, waves=1)
    quiet = RunResult(False, 1.5, 3.0, 2.0, 160, 12, 8, 9000, {"a": 20}, {"a": 20}, 20, 1.0001)
    moving = RunResult(True, None, 4.0, retired=["b"], retired_seen={"b"}, events=["join c"])
    made = churn.render(plan, [(quiet, moving)], "python -m benchmarks churn")
    write_result(
        tmp_path / "churn.json", "churn", {"plan": plan, "command": "python -m benchmarks churn"},
        {"pairs": [(quiet, moving)]}, {}, {},
    )  # fmt: skip
    assert churn.render_stored(tmp_path) == made == (tmp_path / "churn.md").read_text()

    checks = [Check("enrol", "8 of 8", "8", True), Check("forget", "n/a", "0", None)]
    steps = [["enrolled", "8 leaves | ok"]]
    made = membership.render(checks, steps, ["edge-runtime enroll"], "")
    write_result(
        tmp_path / "membership.json", "membership", {"commands": ["edge-runtime enroll"]},
        {"checks": checks, "steps": steps}, {}, {"error": ""},
    )  # fmt: skip
    assert membership.render_stored(tmp_path) == made


def test_render_skips_a_report_that_keeps_no_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.registry import render_all

    assert render_all(["--out", str(tmp_path / "empty")]) == 0
    assert capsys.readouterr().out.count("not rendered") == sum(
        1 for b in BENCHMARKS.values() if b.render
    )
    with pytest.raises(FileNotFoundError):
        render_all(["--out", str(tmp_path / "empty"), "churn"])


def test_anomaly_reports_render_again_from_their_stored_results(tmp_path: Path) -> None:
    from benchmarks.anomaly import event_bench, live_events

    rows = [
        event_bench.DetectorResult(
            "static", visible={"short": 4}, injected={"short": 5}, detected={"short": 3},
            delays={"short": [0, 1, 0]}, identified=3, n_detected=3, true_events=3,
            false_events=1, neutral_events=2, clean_events=2, clean_readings=900,
            clean_days=1.5, clean_share=0.9, nab=12.5, nab_seeds=[10.0, 15.0], seconds=2.0,
        ),
        event_bench.DetectorResult("silent"),
    ]  # fmt: skip
    coverage = [["clean", "100", "100", "0", "3", "0"]]
    agreement = [["clean", "1.00"]]
    made = live_events.render(0, 500.0, rows, agreement, coverage, 50, 150, "Run now.")
    write_result(
        tmp_path / live_events.RESULT_FILE, "anomaly-live",
        {"seed": 0, "rate": 500.0, "warmup": 50, "readings": 150, "provenance": "Run now."},
        {"detectors": rows, "agreement": agreement, "coverage": coverage}, {}, {},
    )  # fmt: skip
    assert live_events.render_stored(tmp_path) == made

    ds = event_bench.Dataset("tiny", np.zeros((150, 3)), 50, 31.0)
    made = event_bench.render([(ds, rows, 2)], "Run now.")
    stored = [{"dataset": {"name": "tiny", "shape": (150, 3), "warmup": 50, "epoch": 31.0},
               "seeds": 2, "detectors": rows}]  # fmt: skip
    write_result(
        tmp_path / event_bench.RESULT_FILE, "anomaly-events", {"note": "Run now."},
        {"sections": stored}, {}, {},
    )  # fmt: skip
    assert event_bench.render_stored(tmp_path) == made
    assert (tmp_path / "anomaly_events.png").exists()


def test_the_live_secure_sum_keeps_its_runs_in_the_schema(tmp_path: Path) -> None:
    from benchmarks.secagg_live import run
    from benchmarks.secagg_live.live import RunResult

    runs = [
        RunResult("one-t4", 0, True, error=2.4, bytes={"masked": 9500}, slot_seconds=[0.3]),
        RunResult("one-t4", 1, False, note="slot skipped"),
    ]
    meta = {"seeds": 2, "slot_s": 5.0, "stamp": "2026-11-28 12:00 UTC", "seconds": 60.0,
            "tree": "abc1234"}  # fmt: skip
    run._write(tmp_path, runs, meta)

    back, got = run._load(tmp_path / "secagg_live.json")

    assert got == meta and to_json(back) == to_json(runs) and math.isnan(back[1].error)
    doc = read_result(tmp_path / "secagg_live.json", "secagg-live")
    assert doc["medians"] == {"one-t4": 2.4} and doc["environment"]["commit"] == "abc1234"


def test_longevity_and_soak_store_what_renders_their_committed_reports(tmp_path: Path) -> None:
    """Stored by the functions a run calls, from the committed results; rendered again, the
    committed LONGEVITY.md, LONGEVITY-DAYS.md and SOAK.md come out byte for byte."""
    from benchmarks.longevity import report as longevity
    from benchmarks.longevity.stats import DayStats
    from benchmarks.soak import report as soak

    committed = ROOT / "benchmarks" / "report" / "longevity"
    folder = tmp_path / "longevity"
    doc = read_result(committed / "longevity.json", "longevity")
    judgement = doc["rows"]["judgement"]
    results = {"meta": doc["parameters"], **doc["rows"], **judgement}
    results["_days"] = {k: revive(list[DayStats], v) for k, v in doc["rows"]["days"].items()}
    longevity.write_report(results, folder)
    days = read_result(committed / "longevity-days.json", "longevity")
    run = days["parameters"]["run"]
    longevity.store_days(folder, run, revive(list[DayStats], days["rows"]["days"]), 1.0)
    stored = read_result(committed / "soak.json", "soak")
    result = {**stored["parameters"], **stored["rows"]}
    soak.write_report(result, folder, result.pop("argv"))
    for name in ("LONGEVITY.md", "LONGEVITY-DAYS.md", "SOAK.md"):
        (folder / name).unlink(missing_ok=True)

    longevity.render(tmp_path)
    soak.render(tmp_path)

    for name in ("LONGEVITY.md", "LONGEVITY-DAYS.md", "SOAK.md"):
        assert (folder / name).read_text() == (committed / name).read_text(), name


def test_prose_fills_a_template_block_and_keeps_its_blank_lines() -> None:
    lines = prose("fleet", "intro")
    assert lines[0].startswith("## (g) Fleet") and lines[1] == "" and lines[-1] == ""
    (single,) = prose("privacy", "spectrum", lo1=1, hi1=2, rank=3, lor=0.5, hir=0.6, norm=7)
    assert single.startswith("Scale: a leaf's Gram matrix has one dominant eigenvalue (1-2:")
    with pytest.raises(KeyError):
        prose("privacy", "spectrum")  # its fields are missing


def test_every_template_block_is_used_and_every_use_names_a_block() -> None:
    # No garbage collection inside ast.parse: Python 3.11.7's AST conversion keeps its
    # recursion depth in shared state (CPython gh-106905), and a finalizer of an earlier
    # test's MQTT client formatting a traceback there fails the parse with SystemError.
    gc.collect()
    gc.disable()
    try:
        sources = (ROOT / "benchmarks").rglob("*.py")
        trees = [ast.parse(p.read_text(encoding="utf-8")) for p in sources]
    finally:
        gc.enable()
    used = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "prose":
                args = node.args[:2]
                if all(isinstance(a, ast.Constant) for a in args) and len(args) == 2:
                    used.add((args[0].value, args[1].value))
    blocks = {
        (path.stem, line[5:-4])
        for path in TEMPLATES.glob("*.md")
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith("<!-- ") and line.endswith(" -->")
    }
    assert used == blocks
