"""``edge-runtime run --plot DIR``: the recorded series and the PNGs of a real Motes run."""

from __future__ import annotations

import itertools
import json
import struct
import subprocess
import sys
import textwrap
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest

from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import error_ratio
from edge_runtime.plots import PLOT_FILES, RunRecorder, write_plots
from edge_runtime.runner import run_topology
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import load_topology

needs_matplotlib = pytest.mark.skipif(
    find_spec("matplotlib") is None, reason="the plot extra (matplotlib) is not installed"
)

ROOT = Path(__file__).resolve().parent.parent
MOTES = ROOT / "topologies" / "motes-light.toml"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """Width and height in pixels from the IHDR chunk; asserts the PNG signature."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE, path
    assert head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


def assert_pngs(folder: Path) -> None:
    for name in PLOT_FILES:
        path = folder / name
        assert path.is_file(), name
        assert 5_000 < path.stat().st_size < 2_000_000, (name, path.stat().st_size)
        width, height = png_size(path)
        assert 400 <= width <= 2000 and 300 <= height <= 1500, (name, width, height)


@needs_matplotlib
@pytest.mark.mqtt
async def test_motes_run_records_monotone_coverage_to_full_and_writes_the_pngs(mosquitto, tmp_path):
    topology = load_topology(MOTES)
    data = load_dataset(topology.dataset_path() or topology.dataset)
    settings = AgentSettings(host=mosquitto.host, port=mosquitto.port)
    recorder = RunRecorder(data)
    # Paced so that the root publishes several models on the way.
    summary = await run_topology(topology, data, settings, rate=8000.0, recorder=recorder)
    assert summary.covered

    fractions = [p.fraction for p in recorder.coverage]
    times = [p.t_s for p in recorder.coverage]
    assert len(fractions) >= 2
    assert all(b >= a for a, b in itertools.pairwise(fractions)), fractions
    assert all(b >= a for a, b in itertools.pairwise(times)), times
    print(f"{len(fractions)} root models, {len(recorder.errors)} error-ratio points")
    assert fractions[-1] == 1.0 and recorder.coverage[-1].n_samples == data.shape[0]

    assert 1 <= len(recorder.errors) <= recorder.max_points
    final = recorder.errors[-1]
    assert final.n_samples == data.shape[0]
    assert final.error_ratio == pytest.approx(summary.error_ratio, rel=1e-6)
    assert all(p.error_ratio >= 1.0 - 1e-9 for p in recorder.errors)
    assert recorder.final is not None and recorder.final.rank == summary.rank
    assert recorder.anomalies == []  # the leaves do not score yet

    written = write_plots(recorder, tmp_path / "plots")
    assert [p.name for p in written] == list(PLOT_FILES)
    assert_pngs(tmp_path / "plots")


def test_error_points_are_subsampled_to_at_most_max_points():
    rng = np.random.default_rng(3)
    data = rng.normal(size=(500, 6))
    recorder = RunRecorder(data, max_points=10)
    basis = np.linalg.qr(rng.normal(size=(6, 2)))[0]

    class Model:  # the attributes RunRecorder reads of a SubspaceMessage
        def __init__(self, n: int, seq: int) -> None:
            self.n_samples, self.seq, self.rank = n, seq, 2
            self.subspace = type("S", (), {"basis": basis})()

    models = [Model(n, i) for i, n in enumerate(range(1, 501))]
    for i, model in enumerate(models):
        recorder.on_model(model, float(i))  # type: ignore[arg-type]
    recorder.finish(models[-1], 500.0)  # type: ignore[arg-type]
    assert len(recorder.coverage) == 500
    assert 2 <= len(recorder.errors) <= 10
    assert recorder.errors[-1].n_samples == 500
    assert recorder.errors[-1].error_ratio == pytest.approx(error_ratio(data, basis), rel=1e-9)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edge_runtime.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("edge-runtime: error:")
    return lines[0]


def test_plot_without_matplotlib_fails_up_front_naming_the_extra(tmp_path):
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["matplotlib"] = None  # import matplotlib now raises ImportError
        from edge_runtime.cli import main
        sys.exit(main(["run", {str(MOTES)!r}, "--plot", {str(tmp_path / "out")!r}]))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc)
    assert "matplotlib" in line and ".whl[plot]'" in line and "'edge-runtime[" not in line
    assert proc.stdout == ""  # failed before any run
    assert not (tmp_path / "out").exists()


@needs_matplotlib
def test_plot_into_a_file_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "not-a-folder.png"
    path.write_bytes(b"x")
    proc = cli("run", str(MOTES), "--plot", str(path))
    assert proc.returncode == 2
    line = one_error_line(proc)
    assert "--plot" in line and "not a folder" in line
    assert proc.stdout == ""


@needs_matplotlib
@pytest.mark.mqtt
def test_cli_run_with_plot_lists_the_files_in_its_json_summary(tmp_path):
    proc = cli("run", str(MOTES), "--plot", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["plots"] == [str(tmp_path / "out" / name) for name in PLOT_FILES]
    assert_pngs(tmp_path / "out")
