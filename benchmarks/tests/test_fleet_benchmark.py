"""The fleet benchmark (section (g)) on tiny fleets against the real command line, each part
with a private Mosquitto on loopback: numbers land in the report, missing summary keys show
as n/a, a stalled command is stopped, and nothing is left running. No speed is checked."""

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
from benchmarks.processes import CommandResult, descendants, log_events_of, run_command
from benchmarks.results import DERIVED_PROPERTIES
from benchmarks.run import QUICK, expand_names, main, run_suite
from benchmarks.schema import revive, to_json

TINY = dataclasses.replace(QUICK, name="tiny", fleet=scaling.TINY)
MINIMAL = Path(__file__).resolve().parents[2] / "topologies" / "minimal.toml"
STDERR = "\n".join([
    '{"node": "leaf-1", "seq": 1, "event": "publish_not_delivered", "level": "error"}',
    '{"node": "leaf-1", "seq": 1, "event": "publish_delivered_late", "level": "warning"}',
    '{"node": "leaf-2", "event": "connection_lost", "level": "warning"}',
    '{"node": "leaf-3", "event": "connection_lost", "level": "warning"}',
    "ERROR:mqtt:failed to receive on socket: [Errno 32] Broken pipe", '{"not an event": 1}',
    "{broken json",
])  # fmt: skip


@pytest.fixture(autouse=True)
def no_children_left():
    """Fails a test that leaves a process of its own running (those of the session, e.g. a
    session-wide Mosquitto, do not count)."""
    before = set(descendants(os.getpid()))
    yield
    assert not set(descendants(os.getpid())) - before


def _sweep(rows: list[scaling.SweepRow], large: scaling.SweepRow | None = None):
    return scaling.SweepResult(rows, 200, 48, None, 900.0, large)


def _large(logged: dict[str, int] | None) -> scaling.SweepRow:
    summary = {"covered": True, "samples": 512_000, "undelivered": 0, "error_ratio": 1.0}
    run = scaling.RunOutcome(0, 300.0, 500.0, 1 << 30, 2 << 30, summary, "", logged)
    return scaling.SweepRow(10_240, 64, 160, 50, [run], scaling.summarise([run]))


def _large_check(sweep: scaling.SweepResult):
    (check,) = [c for c in report_section.checks(sweep, None, None) if "10,240" in c.item]
    return check


@pytest.mark.mqtt
def test_the_sweep_and_dtype_parts_write_section_g_with_its_plot_and_raw_results(tmp_path):
    res = run_suite(TINY, tmp_path, only=["fleet-sweep", "fleet-dtype"], log=lambda _: None)

    (row,) = res.fleet_sweep.rows
    assert (row.n_leaves, row.fan_out, row.n_sites) == (4, 2, 2)
    (run,) = row.runs
    assert run.covered, run.error
    assert run.summary["samples"] == 4 * scaling.TINY.readings_per_leaf
    assert 0 < row.medians["messages_per_reading"] < 1
    assert row.medians["error_ratio"] == pytest.approx(1.0, abs=1e-3)
    text = (tmp_path / "REPORT.md").read_text()
    assert "## (g) Fleet" in text and "| 4 (2 x 2) | 1/1 |" in text
    assert "**Default dtype: float" in text and "Done-when check (issue 9" in text
    assert (tmp_path / "fleet.png").stat().st_size > 1000
    saved = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert saved["fleet_sweep"]["rows"][0]["runs"][0]["summary"]["covered"] is True


def test_update_keeps_the_sweep_from_results_json_when_only_dtype_is_rerun(tmp_path):
    run = scaling.RunOutcome(0, 2.0, 1.0, 70 << 20, 80 << 20, {"samples": 1600})
    sweep = scaling.SweepResult(
        [scaling.SweepRow(8, 3, 3, 200, [run], {"wall_s": 1.5, "messages_per_reading": 0.01})],
        200, 48, None, 60.0,
    )  # fmt: skip
    first = run_suite(TINY, tmp_path, only=["fleet-dtype"], log=lambda _: None)
    first.fleet_sweep = sweep  # as if the sweep had run: saved by the next write
    (tmp_path / "results.json").write_text(json.dumps(to_json(first, DERIVED_PROPERTIES)))

    again = run_suite(TINY, tmp_path, only=["fleet-dtype"], update=True, log=lambda _: None)

    assert again.fleet_sweep == sweep
    assert "| 8 (3 x 3) | 0/1 |" in (tmp_path / "REPORT.md").read_text()


def test_missing_summary_keys_are_none_and_ratios_are_derived_from_the_json():
    summary = {"samples": 1000, "messages": 20, "payload_bytes": 100, "raw_bytes": 400,
               "wall_s": 2.0, "covered": True, "resent": 0}  # fmt: skip
    metrics = scaling.metrics_of(scaling.RunOutcome(0, 3.0, 2.0, 1000, 1500, summary))

    assert metrics["messages_per_reading"] == pytest.approx(0.02)
    assert metrics["payload_ratio"] == pytest.approx(0.25)
    assert metrics["readings_per_s"] == pytest.approx(500.0)  # samples / wall_s fallback
    assert metrics["resent"] == 0
    assert metrics["latency_p95_s"] is None and metrics["peak_rss_bytes"] is None


def test_a_done_when_item_is_unknown_not_passed_when_its_key_is_missing():
    row = scaling.SweepRow(1024, 32, 32, 200)
    row.runs = [scaling.RunOutcome(0, 90.0, 80.0, 1, 1, {"covered": True})]
    row.medians = {"error_ratio": 1.0, "resent": 0.0, "undelivered": None}

    first = report_section.checks(_sweep([row]), None, None)[0]

    assert first.passed is None
    assert "publish_not_delivered n/a" in first.measured


def test_log_lines_are_counted_by_event_and_carried_into_the_run_outcome():
    counts = {"connection_lost": 2, "publish_delivered_late": 1, "publish_not_delivered": 1}
    assert log_events_of(STDERR) == counts and log_events_of("") == {}
    result = CommandResult(0, 1.0, 1.0, None, None, '{"covered": true}', "", {"x": 2})
    assert scaling.RunOutcome.from_command(result).logged == {"x": 2}


def test_the_count_at_10240_leaves_is_a_line_of_section_g_and_a_done_when_check():
    sweep = _sweep([], _large({"connection_lost": 3}))
    text = "\n".join(report_section.section(sweep, None, None, None, None))
    assert "**k = 10,240 leaves in one run** (160 sites x fan-out 64, 50 readings per leaf" in text
    assert "publish_not_delivered logged 0, publish_delivered_late 0, connection_lost 3" in text
    check = _large_check(sweep)
    assert check.passed is True and "publish_not_delivered logged 0" in check.measured
    check = _large_check(_sweep([], _large({"publish_not_delivered": 731})))
    assert check.passed is False and "publish_not_delivered logged 731" in check.measured


def test_results_of_an_older_harness_read_back_as_not_measured():
    data = json.loads(json.dumps(to_json(_sweep([], _large(None)), DERIVED_PROPERTIES)))
    revived = revive(scaling.SweepResult, data)
    assert revived.large.runs[0].logged is None
    assert revived.large.medians["not_delivered_logged"] is None
    assert _large_check(revived).passed is None
    del data["large"]  # a harness without the large run
    assert revive(scaling.SweepResult, data).large is None


def test_only_the_full_sizes_run_the_large_point():
    assert scaling.FULL.large == (10_240, 64, 50)
    assert scaling.QUICK.large is None and scaling.TINY.large is None


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs 5 s from now (a killed process may take a moment to go)."""
    for _ in range(50):
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return False
        except OSError:
            return False
        time.sleep(0.1)
    return True


def test_a_command_past_its_time_limit_is_stopped_with_its_detached_children():
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " start_new_session=True)\nprint(child.pid, flush=True)\ntime.sleep(60)\n"
    )
    result = run_command([sys.executable, "-c", script], timeout_s=1.0)

    assert result.stalled and result.wall_s < 30
    assert not _alive(int(result.stdout.split()[0]))  # like run's Mosquitto: own session


def test_float32_snapshots_are_about_half_the_bytes_at_the_same_root_error_ratio():
    result = measure_dtypes(log=lambda _: None)

    f64, f32 = result.rows[0], result.rows[1]
    assert (f64.dtype, f32.dtype) == ("float64", "float32")
    assert f32.leaf_bytes < 0.6 * f64.leaf_bytes
    assert f32.error_ratio == pytest.approx(f64.error_ratio, abs=1e-6)
    assert result.recommended == "float32"


@pytest.mark.mqtt
def test_latency_is_measured_with_every_node_a_process():
    sizes = dataclasses.replace(scaling.TINY, latency_readings=80)
    result = live.measure_latency(sizes, log=lambda _: None, topology_path=MINIMAL)

    assert result.covered, result.error
    assert result.readings_at_root == result.readings == 80 and result.n_processes == 3
    assert 0 <= result.p50_from_publish_s <= result.p95_from_publish_s
    assert result.p50_s >= result.p50_from_publish_s - 1e-9  # production <= publish
    assert {c.role for c in result.costs} == {"leaf", "root"}


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


def test_fleet_names_its_parts_and_is_not_in_a_default_run():
    parts = ["fleet-sweep", "fleet-motes", "fleet-latency", "fleet-agent", "fleet-dtype"]
    assert expand_names(["fleet"]) == parts
    assert not any(name.startswith("fleet") for name in expand_names(None))


def test_fleet_options_without_a_fleet_part_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--only", "merge", "--ks", "8,32"])

    assert exit_info.value.code == 2
    assert "add --only fleet" in capsys.readouterr().err
