"""The fleet benchmark's large run (issue 21): 10,240 leaves, publish_not_delivered counted.

No run here (minutes and most of a machine); these check the harness: log lines are
counted by event, the count lands in section (g) and in the Done-when check, and a
results.json of an older harness (nothing counted) reads back as "not measured".
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("matplotlib")

from benchmarks.fleet import report_section, scaling
from benchmarks.processes import CommandResult, log_events_of
from benchmarks.results import DERIVED_PROPERTIES
from benchmarks.schema import revive, to_json

STDERR = "\n".join(
    [
        '{"node": "leaf-1", "seq": 1, "event": "publish_not_delivered", "level": "error"}',
        '{"node": "leaf-1", "seq": 1, "event": "publish_delivered_late", "level": "warning"}',
        '{"node": "leaf-2", "event": "connection_lost", "level": "warning"}',
        '{"node": "leaf-3", "event": "connection_lost", "level": "warning"}',
        "ERROR:mqtt:failed to receive on socket: [Errno 32] Broken pipe",
        '{"not an event": 1}',
        "{broken json",
    ]
)


def test_log_lines_are_counted_by_event() -> None:
    assert log_events_of(STDERR) == {
        "connection_lost": 2,
        "publish_delivered_late": 1,
        "publish_not_delivered": 1,
    }
    assert log_events_of("") == {}


def _large(logged: dict[str, int] | None, returncode: int = 0) -> scaling.SweepRow:
    summary = {"covered": True, "samples": 512_000, "undelivered": 0, "error_ratio": 1.0}
    run = scaling.RunOutcome(returncode, 300.0, 500.0, 1 << 30, 2 << 30, summary, "", logged)
    return scaling.SweepRow(10_240, 64, 160, 50, [run], scaling.summarise([run]))


def _sweep(large: scaling.SweepRow | None) -> scaling.SweepResult:
    return scaling.SweepResult(
        rows=[], readings_per_leaf=200, n_features=48, workers=None, run_timeout_s=900.0,
        large=large,
    )  # fmt: skip


def test_the_count_at_10240_leaves_is_a_line_of_section_g_and_a_done_when_check() -> None:
    sweep = _sweep(_large({"connection_lost": 3}))
    text = "\n".join(report_section.section(sweep, None, None, None, None))
    assert "**k = 10,240 leaves in one run** (160 sites x fan-out 64, 50 readings per leaf" in text
    assert "publish_not_delivered logged 0, publish_delivered_late 0, connection_lost 3" in text
    (check,) = [c for c in report_section.checks(sweep, None, None) if "10,240" in c.item]
    assert check.passed is True
    assert "publish_not_delivered logged 0" in check.measured


def test_a_reported_delivered_snapshot_fails_the_check() -> None:
    sweep = _sweep(_large({"publish_not_delivered": 731}))
    (check,) = [c for c in report_section.checks(sweep, None, None) if "10,240" in c.item]
    assert check.passed is False
    assert "publish_not_delivered logged 731" in check.measured


def test_results_of_an_older_harness_read_back_as_not_measured() -> None:
    sweep = _sweep(_large(None))
    data = json.loads(json.dumps(to_json(sweep, DERIVED_PROPERTIES)))
    revived = revive(scaling.SweepResult, data)
    assert revived.large.runs[0].logged is None
    assert revived.large.medians["not_delivered_logged"] is None
    (check,) = [c for c in report_section.checks(revived, None, None) if "10,240" in c.item]
    assert check.passed is None
    del data["large"]  # before issue 21: no large run at all
    assert revive(scaling.SweepResult, data).large is None


def test_a_command_result_carries_its_log_counts_into_the_run_outcome() -> None:
    result = CommandResult(0, 1.0, 1.0, None, None, '{"covered": true}', "", {"x": 2})
    assert scaling.RunOutcome.from_command(result).logged == {"x": 2}


def test_only_the_full_sizes_run_the_large_point() -> None:
    assert scaling.FULL.large == (10_240, 64, 50)
    assert scaling.QUICK.large is None and scaling.TINY.large is None
