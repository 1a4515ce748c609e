"""`benchmarks.pi_budget.emulated` without measuring: its cells, its long run's rate, a missing
sysroot skipped; where an aarch64 sysroot is built, its Python's versions and numpy's route."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.pi_budget import emulated
from benchmarks.pi_budget.run import DEPLOYED_ENV, device_env


def _cpu(rate: float, batch: int = 1, ms: float = 2.0, kept_up: bool = True) -> dict:
    n = int(rate * 20)
    return {"rate": rate, "batch": batch, "n": n, "ms_per_reading": ms, "window_s": 20.0,
            "core_share": rate * ms / 1000, "cpu_after_s": 0.02 if kept_up else 1.5,
            "kept_up": kept_up}  # fmt: skip


def _entry(**over: object) -> dict:
    res = {
        "import_s": 6.123, "import_numpy_s": 1.61, "import_cpu_s": 2.0, "import_runs": 5,
        "import_numpy_cpu_s": 0.8,
        "rss_start_mb": 85.0, "rss_long_mb": 88.25, "n_long": 10_000, "window_s": 20.0,
        "cpu": [_cpu(1.0, ms=26.0), _cpu(10.0, ms=7.2), _cpu(100.0, ms=4.6, kept_up=False),
                _cpu(100.0, emulated.BATCH, ms=1.4)],
        "long": {"rate": 50.0, "rate_why": "50/s: ...", "kept_up": True},
        "python": "3.11.2", "numpy": "2.4.6", "route": "PyPI wheels", "rss_python_mb": 30.0,
    }  # fmt: skip
    return res | over


def test_columns_have_every_row_and_mark_qemu_and_lag() -> None:
    cells = emulated.emulated_columns(_entry())
    assert list(cells) == list(emulated.ROW_KEYS)
    assert cells["import"] == "6.12 (CPU 2.00; numpy alone 1.61, CPU 0.80)"
    assert cells["rss_start"] == "85.0 (qemu's)"
    assert cells["rss_long"] == "88.2 (+3.2; 10,000 readings at 50/s; qemu's)"
    assert cells["cpu_1"] == "26.00 (20 s, 20 readings; qemu's)"
    assert "did not keep up" in cells["cpu_100"]
    assert "did not keep up" not in cells["cpu_100_batched"]
    notes = "\n".join(emulated.emulated_notes({"aarch64": _entry()}))
    assert emulated.EMULATED_LABEL in notes
    assert "PyPI wheels" in notes and "no timing claims" in notes.lower()


def test_long_rate_is_100_when_the_100_row_kept_up_else_lower() -> None:
    assert emulated.long_rate([_cpu(100.0, ms=2.0)])[0] == 100.0
    rate, why = emulated.long_rate([_cpu(100.0, ms=4.6, kept_up=False)])
    assert rate == 50.0 and "did not keep up" in why
    assert emulated.long_rate([_cpu(100.0, ms=30.0)])[0] == 20.0  # 0.6 core / 30 ms = 20/s


def test_kept_up_allows_a_bounded_backlog_not_a_growing_one() -> None:
    assert emulated.kept_up(0.4, 40.0, 1.0)  # 100 s at 100/s, 1 s of work left: 2.5 %
    assert not emulated.kept_up(0.4, 4.0, 1.0)  # 10 s window, 25 % left
    assert not emulated.kept_up(0.95, 40.0, 0.0)  # a full core


def test_a_missing_sysroot_is_skipped_with_one_line(
    tmp_path, monkeypatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("EDGE_ARM_CACHE", str(tmp_path / "cache"))
    assert emulated.sysroot("aarch64") is None
    assert emulated.main(["--arch", "aarch64", "armhf", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all("skipped: no sysroot" in line for line in out)
    assert not (tmp_path / "out").exists()


def test_an_arch_measured_before_keeps_its_entry(tmp_path) -> None:
    path = tmp_path / emulated.JSON_NAME
    path.write_text(json.dumps({"armhf": _entry(route="Debian bookworm packages")}))
    assert emulated.load(path)["armhf"]["route"] == "Debian bookworm packages"
    assert emulated.load(tmp_path / "none.json") == {}
    assert "armhf (emulated)" in emulated.summary(emulated.load(path))


@pytest.mark.skipif(emulated.sysroot("aarch64") is None, reason="no aarch64 sysroot")
def test_the_emulated_python_reports_its_versions_and_route() -> None:
    root = emulated.sysroot("aarch64")
    assert root is not None
    info = emulated.probe(emulated.emulated_python("aarch64", root))
    assert info["machine"] == "aarch64" and info["python"].startswith("3.11")
    assert info["route"] == "PyPI wheels"


def test_the_budget_benchmark_runs_the_agent_as_the_unit_does() -> None:
    """The systemd unit's ``Environment=PYTHON...`` assignments are the benchmark's."""
    unit = Path(__file__).resolve().parents[2] / "devices" / "edge-runtime-agent@.service"
    assigned = re.findall(r"^Environment=(PYTHON\S*)=(\S*)$", unit.read_text(), re.MULTILINE)
    assert dict(assigned) == DEPLOYED_ENV == {"PYTHONOPTIMIZE": "2"}
    assert device_env()["PYTHONOPTIMIZE"] == "2"
    assert "PYTHONOPTIMIZE" not in device_env(deployed=False)
