"""The fleet benchmark (section (g)) runs end to end on tiny fleets and measures what it says.

Benchmarks report numbers; nothing here checks a speed. These tests run the harness
against the real command line (``edge-runtime run``, ``agent``, ``replay``, each starting
or using a private Mosquitto on a free loopback port) with a few leaves and check that the
numbers land in the report, that missing summary keys show as n/a, that a stalled command
is stopped, and that nothing is left running.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from benchmarks.fleet import live, report_section, scaling
from benchmarks.fleet.dtype import measure_dtypes
from benchmarks.processes import descendants, run_command
from benchmarks.run import QUICK, expand_names, main, run_suite

TINY = dataclasses.replace(QUICK, name="tiny", fleet=scaling.TINY)
MINIMAL = Path(__file__).resolve().parents[2] / "topologies" / "minimal.toml"


_CHILDREN_BEFORE: set[tuple[int, str]] = set()


@pytest.fixture(autouse=True)
def _children_before() -> None:
    """Processes the test session already runs (e.g. a session-wide Mosquitto) are not
    the benchmark's: only processes started during the test count as left behind."""
    _CHILDREN_BEFORE.clear()
    _CHILDREN_BEFORE.update(descendants(os.getpid()))


def _no_children_left() -> bool:
    return not set(descendants(os.getpid())) - _CHILDREN_BEFORE


@pytest.mark.mqtt
def test_the_sweep_and_dtype_parts_write_section_g_with_its_plot_and_raw_results(tmp_path):
    lines: list[str] = []
    res = run_suite(TINY, tmp_path, only=["fleet-sweep", "fleet-dtype"], log=lines.append)

    (row,) = res.fleet_sweep.rows
    assert (row.n_leaves, row.fan_out, row.n_sites) == (4, 2, 2)
    (run,) = row.runs
    assert run.covered, run.error
    assert run.summary["samples"] == 4 * scaling.TINY.readings_per_leaf
    assert 0 < row.medians["messages_per_reading"] < 1
    assert row.medians["error_ratio"] == pytest.approx(1.0, abs=1e-3)
    text = (tmp_path / "REPORT.md").read_text()
    assert "## (g) Fleet" in text
    assert "| 4 (2 x 2) | 1/1 |" in text
    assert "**Default dtype: float" in text
    assert "Done-when check (issue 9" in text
    assert (tmp_path / "fleet.png").stat().st_size > 1000
    saved = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert saved["fleet_sweep"]["rows"][0]["runs"][0]["summary"]["covered"] is True
    assert _no_children_left()


def test_update_keeps_the_sweep_from_results_json_when_only_dtype_is_rerun(tmp_path):
    sweep = scaling.SweepResult(
        rows=[
            scaling.SweepRow(
                8,
                3,
                3,
                200,
                [scaling.RunOutcome(0, 2.0, 1.0, 70 << 20, 80 << 20, {"samples": 1600})],
                {"wall_s": 1.5, "messages_per_reading": 0.01},
            )
        ],
        readings_per_leaf=200,
        n_features=48,
        workers=None,
        run_timeout_s=60.0,
    )
    first = run_suite(TINY, tmp_path, only=["fleet-dtype"], log=lambda _: None)
    first.fleet_sweep = sweep  # as if the sweep had run: saved by the next write
    (tmp_path / "results.json").write_text(json.dumps(_jsonable(first)))

    again = run_suite(TINY, tmp_path, only=["fleet-dtype"], update=True, log=lambda _: None)

    assert again.fleet_sweep == sweep
    assert "| 8 (3 x 3) | 0/1 |" in (tmp_path / "REPORT.md").read_text()


def _jsonable(obj):
    from benchmarks.results import DERIVED_PROPERTIES
    from benchmarks.schema import to_json

    return to_json(obj, DERIVED_PROPERTIES)


def test_missing_summary_keys_are_none_and_ratios_are_derived_from_the_json():
    run = scaling.RunOutcome(
        returncode=0,
        wall_s=3.0,
        cpu_s=2.0,
        max_rss_bytes=1000,
        total_rss_bytes=1500,
        summary={
            "samples": 1000,
            "messages": 20,
            "payload_bytes": 100,
            "raw_bytes": 400,
            "wall_s": 2.0,
            "covered": True,
            "resent": 0,
        },
    )
    metrics = scaling.metrics_of(run)

    assert metrics["messages_per_reading"] == pytest.approx(0.02)
    assert metrics["payload_ratio"] == pytest.approx(0.25)
    assert metrics["readings_per_s"] == pytest.approx(500.0)  # samples / wall_s fallback
    assert metrics["resent"] == 0
    assert metrics["latency_p95_s"] is None
    assert metrics["peak_rss_bytes"] is None


def test_a_done_when_item_is_unknown_not_passed_when_its_key_is_missing():
    row = scaling.SweepRow(1024, 32, 32, 200)
    row.runs = [scaling.RunOutcome(0, 90.0, 80.0, 1, 1, {"covered": True})]
    row.medians = {"error_ratio": 1.0, "resent": 0.0, "undelivered": None}
    sweep = scaling.SweepResult([row], 200, 48, None, 900.0)

    first = report_section.checks(sweep, None, None)[0]

    assert first.passed is None
    assert "publish_not_delivered n/a" in first.measured


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs 5 s from now (a killed process may take a moment to go)."""
    for _ in range(50):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
        time.sleep(0.1)
    return True


def test_a_command_past_its_time_limit_is_stopped_with_its_detached_children():
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " start_new_session=True)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    result = run_command([sys.executable, "-c", script], timeout_s=1.0)

    assert result.stalled
    assert result.wall_s < 30
    assert not _alive(int(result.stdout.split()[0]))  # like run's Mosquitto: own session
    assert _no_children_left()


def test_float32_snapshots_are_about_half_the_bytes_at_the_same_root_error_ratio():
    result = measure_dtypes(log=lambda _: None)

    f64, f32 = result.rows[0], result.rows[1]
    assert (f64.dtype, f32.dtype) == ("float64", "float32")
    assert f32.leaf_bytes < 0.6 * f64.leaf_bytes
    assert f32.error_ratio == pytest.approx(f64.error_ratio, abs=1e-6)
    assert result.recommended == "float32"


@pytest.mark.mqtt
def test_latency_is_measured_with_every_node_a_process_and_nothing_is_left_running():
    sizes = dataclasses.replace(scaling.TINY, latency_readings=80)
    result = live.measure_latency(sizes, log=lambda _: None, topology_path=MINIMAL)

    assert result.covered, result.error
    assert result.readings_at_root == result.readings == 80
    assert result.n_processes == 3
    assert 0 <= result.p50_from_publish_s <= result.p95_from_publish_s
    assert result.p50_s >= result.p50_from_publish_s - 1e-9  # production <= publish
    assert {c.role for c in result.costs} == {"leaf", "root"}
    assert _no_children_left()


@pytest.mark.mqtt
def test_agent_cost_reports_cpu_per_reading_and_memory_of_each_role():
    result = live.measure_agent_cost(scaling.TINY, log=lambda _: None)

    assert result.covered, result.error
    roles = {c.role: c for c in result.costs}
    assert set(roles) == {"leaf", "aggregator", "root"}
    leaf = roles["leaf"]
    assert leaf.readings == 50
    assert leaf.peak_rss_bytes >= leaf.rss_bytes > 10 << 20
    assert leaf.cpu_per_reading_s is not None and leaf.cpu_per_reading_s >= 0
    assert _no_children_left()


def test_fleet_names_its_parts_and_is_not_in_a_default_run():
    assert expand_names(["fleet"]) == [
        "fleet-sweep",
        "fleet-motes",
        "fleet-latency",
        "fleet-agent",
        "fleet-dtype",
    ]
    assert not any(name.startswith("fleet") for name in expand_names(None))


def test_fleet_options_without_a_fleet_part_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--only", "merge", "--ks", "8,32"])

    assert exit_info.value.code == 2
    assert "add --only fleet" in capsys.readouterr().err
