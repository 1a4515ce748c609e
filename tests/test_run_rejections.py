"""``edge-runtime run`` on data some readings of which the leaves reject (issue 21, item 3).

Completion counts what the leaves keep (their ``valid_range``), not what was sent; the error
ratio is computed on the kept readings and says so; data the leaves would reject whole is
refused at once, in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_cli import cli

from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import error_ratio
from edge_runtime.runner import screen_data
from edge_runtime.topology import load_topology, parse_topology

ROOT = Path(__file__).resolve().parent.parent
MOTES = ROOT / "topologies" / "motes-light.toml"


def glitched_motes(tmp_path: Path) -> tuple[Path, np.ndarray, list[int]]:
    """The Motes light data with 7 readings out of [0, 2000] lux on 5 leaves' shares."""
    data = load_dataset("motes-light").copy()
    bad = [5, 100, 101, 1500, 1999, 6000, 7700]  # 964 rows a leaf: pi-01 x3, -02, -03, -07, -08
    data[bad[:4], 3] = 1e7
    data[bad[4:], 0] = -5.0
    path = tmp_path / "glitched.txt"
    np.savetxt(path, data, fmt="%.6f")
    return path, data, bad


def test_screening_counts_each_leafs_kept_and_rejected_readings(tmp_path: Path) -> None:
    _, data, bad = glitched_motes(tmp_path)
    topology = load_topology(MOTES)
    s = screen_data(topology, data)
    assert s.n_rejected == len(bad)
    assert sum(s.accepted.values()) == len(data) - len(bad)
    assert {leaf: n for leaf, n in s.rejected.items() if n} == {
        "pi-01": 3,
        "pi-02": 1,
        "pi-03": 1,
        "pi-07": 1,
        "pi-08": 1,
    }
    keep = np.ones(len(data), dtype=bool)
    keep[bad] = False
    assert np.array_equal(s.reference, data[keep])  # contiguous split: the order is kept
    assert all(len(s.kept[leaf]) == s.accepted[leaf] for leaf in s.accepted)


def test_clipping_leaves_keep_every_reading_clipped() -> None:
    topology = parse_topology(
        """
[defaults]
rank = 1
valid_range = [0, 10]
out_of_range = "clip"
[[nodes]]
id = "root"
[[nodes]]
id = "a"
parent = "root"
"""
    )
    data = np.array([[1.0, 20.0], [-3.0, 5.0]])
    s = screen_data(topology, data)
    assert s.accepted == {"a": 2} and s.n_rejected == 0
    assert np.array_equal(s.reference, [[1.0, 10.0], [0.0, 5.0]])


@pytest.mark.mqtt
def test_run_with_some_readings_rejected_exits_0_and_reports_them(tmp_path: Path) -> None:
    path, data, bad = glitched_motes(tmp_path)
    proc = cli("run", str(MOTES), "--data", str(path), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["covered"] is True
    assert summary["leaves_reporting"] == summary["leaves_total"] == 8
    assert summary["out_of_range"] == len(bad)
    assert summary["root_n_samples"] == len(data) - len(bad)
    keep = np.ones(len(data), dtype=bool)
    keep[bad] = False
    clean = error_ratio(data[keep], np.linalg.svd(data[keep], full_matrices=False)[2][:10].T)
    assert clean == pytest.approx(1.0)
    # on the kept rows, as good as the federation is on clean data (measured: 1.0005)
    assert 1.0 <= summary["error_ratio"] < 1.01
    text = cli("run", str(MOTES), "--data", str(path))
    assert text.returncode == 0, text.stderr[-3000:]
    assert f"of the {len(data) - len(bad)} accepted readings" in text.stdout
    assert f"out of range        {len(bad)} readings" in text.stdout


def test_data_entirely_out_of_range_is_refused_at_once_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "millilux.txt"
    np.savetxt(path, np.full((100, 48), 5e6))
    proc = cli("run", str(MOTES), "--data", str(path), timeout=60.0)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "every one of the 100 readings is outside the leaves' valid_range" in lines[0]
    assert "Traceback" not in proc.stderr
