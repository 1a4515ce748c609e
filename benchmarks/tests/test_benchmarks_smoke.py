"""The suite runs end to end on tiny sizes and what its numbers rest on is right (the running
error ratio, the Synth generator, the checkpoints, the Done-when evaluation); no speed is
checked."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

from benchmarks import report, results
from benchmarks.accuracy import checkpoints
from benchmarks.measure import GramTracker, time_side_by_side
from benchmarks.privacy import section as privacy_section
from benchmarks.reporting import Check, checks_table, figure, save_figure, table
from benchmarks.run import QUICK, render, run_suite
from benchmarks.synth import low_rank, synth
from benchmarks.timing import MergeRow, throughput
from edge_runtime.fpca import error_ratio, offline_subspace

TINY = dataclasses.replace(
    QUICK, name="tiny", motes_points=4, motes_rows=600, synth_shape=(30, 300),
    synth_alphas=(0.5, 2.0), synth_points=3, grid_d=(48, 100), grid_r=(10, 50), grid_b=(25, 50),
    grid_blocks=2, grid_work=0, grid_repeats=1, merge_repeats=1, merge_sweep_d=(120,),
    merge_sweep_r=(10,), children=(4, 8), child_updates=3, memory_lengths=(500, 1000),
    memory_ipca_max=500, privacy=privacy_section.TINY,
)  # fmt: skip


def test_the_suite_writes_a_report_with_every_section_and_plot(tmp_path):
    lines: list[str] = []
    res = run_suite(TINY, tmp_path, log=lines.append)

    text = (tmp_path / "REPORT.md").read_text()
    assert text.index("## Done-when check") < text.index("## (a)")
    assert text.index("## Done-when check (issues 5 and 10") < text.index("## (a)")
    for section in ("## (a)", "## (b)", "## (c)", "## (d)", "## (e)", "## (f)"):
        assert section in text
    pngs = ("accuracy_motes", "accuracy_synth", "throughput", "merge", "aggregator", "memory")
    for png in (*pngs, "privacy_utility"):
        assert (tmp_path / f"{png}.png").stat().st_size > 1000
    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored["name"] == "suite" and stored["parameters"]["mode"] == "tiny"
    assert lines[-1].startswith("wrote ")
    # every method of (a) has a finite final ratio >= 1 on the Motes prefix
    assert len(res.motes) >= 6
    assert all(t.final >= 1.0 - 1e-9 for t in res.motes.values())


def test_update_reruns_one_benchmark_keeps_the_others_and_reads_back_equal_results(tmp_path):
    first = run_suite(TINY, tmp_path, only=["merge", "privacy"], log=lambda _: None)
    back = results.load_results(tmp_path / "results.json")
    assert back.merge == first.merge and back.private_mode is not None
    for got, want in zip(back.private_mode.motes, first.private_mode.motes, strict=True):
        assert (got.label, got.block_size, got.releases, got.error) == (
            want.label, want.block_size, want.releases, want.error,
        )  # fmt: skip
        assert got.noise_std == pytest.approx(want.noise_std, nan_ok=True)  # NaN without noise
    assert back.private_mode.synth == first.private_mode.synth
    assert back.private_mode.state_choice == first.private_mode.state_choice
    assert back.private_mode.motes_shape == first.private_mode.motes_shape == (7712, 48)
    before = json.loads((tmp_path / "results.json").read_text())["rows"]
    res = run_suite(TINY, tmp_path, only=["privacy"], update=True, log=lambda _: None)

    after = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert after["merge"] == before["merge"]  # kept, not re-timed
    for key in ("motes", "curves", "synth"):  # seeded: the same numbers
        assert after["private_mode"][key] == before["private_mode"][key]
    text = (tmp_path / "REPORT.md").read_text()
    assert "## (c)" in text and "## (f)" in text
    assert res.environment["run"].count("re-ran privacy") == 1
    again = run_suite(TINY, tmp_path, only=["privacy"], update=True, log=lambda _: None)
    assert again.environment["run"].count("re-ran privacy") == 1  # replaced, not stacked
    assert set(res.seconds) == {"merge", "privacy", "total"}
    with pytest.raises(ValueError, match="is a 'tiny' run"):
        run_suite(QUICK, tmp_path, only=["merge"], update=True, log=lambda _: None)


def test_render_rewrites_the_same_report_and_plots_from_results_json_alone(tmp_path):
    run_suite(TINY, tmp_path, only=["merge", "memory"], log=lambda _: None)
    written = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".md", ".png")}
    for name in written:
        (tmp_path / name).unlink()

    render(tmp_path, log=lambda _: None)

    again = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".md", ".png")}
    assert again == written
    with pytest.raises(ValueError, match="cannot read benchmark results"):
        render(tmp_path / "missing", log=lambda _: None)


def test_report_tables_render_cells_as_str_with_optional_alignment(tmp_path):
    assert table(["a", "b"], [[1, "x"], [2.5, ""]]) == "| a | b |\n|---|---|\n| 1 | x |\n| 2.5 |  |"
    assert table(["a", "b", "c"], [], align="lrc").splitlines()[1] == "|---|---:|:---:|"
    with pytest.raises(ValueError, match="one of l, r, c for each of the 2 columns"):
        table(["a", "b"], [], align="l")
    rows = checks_table([Check("i", "m", "t", True), Check("j", "n", "u", None)])
    assert rows.splitlines()[2:] == ["| i | m | t | pass |", "| j | n | u | n/a |"]
    fig, axes = figure(1, 2, figsize=(4, 2))
    assert type(fig.canvas).__name__ == "FigureCanvasAgg" and len(axes) == 2
    assert save_figure(fig, tmp_path / "f.png").stat().st_size > 1000


def test_the_private_mode_beats_its_comparators_on_a_tiny_run():
    res = privacy_section.run_privacy(privacy_section.TINY, log=lambda _: None)

    def median(method):
        return res.row(method.label).error.median

    one = median(privacy_section.ONE_RELEASE)
    # the Gaussian mechanism is far better than eq. (8) and a random subspace, the
    # central release (same noise, 8 times the signal) better still, no privacy best
    assert median(privacy_section.CENTRAL) < one < median(privacy_section.BLOCKS_241)
    assert one < median(privacy_section.EQ8_241) / 3
    assert one < median(privacy_section.RANDOM) / 3
    assert res.row("no privacy (FPCA-Edge leaves, same tree)").error.median < 1.01
    # continual release: less noise than summing independent releases of the same blocks
    assert median(privacy_section.CONTINUAL_241) < median(privacy_section.BLOCKS_241)
    gaussian, eq8 = res.synth_curve("gaussian, one block"), res.synth_curve("eq. (8), one block")
    assert all(g.mean > e.mean for g, e in zip(gaussian.q, eq8.q, strict=True))
    found = privacy_section.checks(res)  # at tiny sizes the numbers, not the verdicts, count
    assert [c.item.split(" ")[0] for c in found] == ["q_A", "Motes", "Synth(1)"]
    assert all(isinstance(c.passed, bool) for c in found)
    (a, a4, b) = res.state_choice
    assert (a.state, a4.state, b.state) == ("a", "a", "b") and a4.horizon == 4
    assert b.retained_bytes < a.retained_bytes < a4.retained_bytes
    assert res.noise_factors[0] == pytest.approx([1.0, 2.0, 4.0])  # H = 1: sqrt(k)


def test_the_throughput_grid_marks_cells_that_cannot_run():
    row = throughput(48, 50, 25, n_blocks=1, repeats=1)
    assert (row.fpca, row.ipca, row.note) == (None, None, "r > d")


def test_the_running_ratio_equals_error_ratio_on_every_prefix():
    x = low_rank(400, 12, 3, noise=0.3, seed=4) + 2.0
    basis = offline_subspace(x[:150], 3).basis
    tracker = GramTracker(12)
    for stop in (100, 250, 400):
        tracker.add(x[tracker.n_samples : stop])
        prefix = x[:stop]
        assert tracker.ratio(basis) == pytest.approx(error_ratio(prefix, basis), rel=1e-9)
        centred = prefix - prefix.mean(axis=0)
        assert tracker.ratio(basis, centred=True) == pytest.approx(
            error_ratio(centred, basis), rel=1e-9
        )


def test_synth_has_the_power_law_spectrum_unit_largest_row_and_its_seed():
    x = synth(1.0, n_features=20, n_samples=20_000, seed=1)
    assert np.linalg.norm(x, axis=1).max() == pytest.approx(1.0)
    s = np.linalg.svd(x, compute_uv=False)  # sigma_i ~ i^-1: s_1 / s_i is close to i
    assert s[0] / s[[1, 4, 9, 19]] == pytest.approx([2, 5, 10, 20], rel=0.05)
    assert np.array_equal(synth(0.5, 10, 50, seed=2), synth(0.5, 10, 50, seed=2))
    assert not np.array_equal(synth(0.5, 10, 50, seed=2), synth(0.5, 10, 50, seed=3))


def test_checkpoints_are_increasing_block_multiples_ending_at_the_stream_length():
    pts = checkpoints(7712, 40)
    assert pts == sorted(set(pts)) and pts[-1] == 7712 and all(p % 50 == 0 for p in pts[:-1])


def test_side_by_side_timing_runs_every_contender_warmup_plus_repeats():
    calls = {"a": 0, "b": 0}
    times = time_side_by_side({k: lambda k=k: calls.__setitem__(k, calls[k] + 1) for k in calls}, 5)
    assert calls == {"a": 6, "b": 6}
    assert set(times) == {"a", "b"} and all(t >= 0 for t in times.values())


def test_done_when_fails_an_item_whose_number_misses_its_target():
    res = results.Results("t", 10, 50, 0, {})
    res.merge = MergeRow(800, 100, merge=2.0, naive_scipy=1.0, naive_numpy=1.5, max_angle=0.0)
    (check,) = report.done_when(res)
    assert check.passed is False and "0.50x" in check.measured
