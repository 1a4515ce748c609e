"""Benchmark (h), FPCA vs FedPower, runs end to end on tiny sizes and measures what it claims.

Benchmarks report numbers, they are not timed tests: nothing here checks a speed. These
tests check the behaviour the section rests on: the fault-free simulation is
`run_fedpower`, FedPower with OPT converges on a tiny heterogeneous Synth, FPCA's tree is
accurate, the fault models and the byte counts do what the report says, and the section
lands in REPORT.md with its plot.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from benchmarks import report, results
from benchmarks.fedpower import data, section
from benchmarks.fedpower.faults import DEAD, STRAGGLER, Fault
from benchmarks.fedpower.fedpower_runs import simulate
from benchmarks.fedpower.fpca_tree import fpca_run, per_block_traffic
from benchmarks.fedpower.wire_bytes import reply_bytes, round_bytes
from benchmarks.run import QUICK, run_suite
from edge_runtime.fedpower import run_fedpower
from edge_runtime.fpca import error_ratio

TINY = dataclasses.replace(QUICK, name="tiny", fedpower=section.TINY)


@pytest.fixture(scope="module")
def synth_tiny() -> data.Dataset:
    return data.load(data.SYNTH, synth_shape=(12, 800))


def test_without_faults_the_simulation_is_run_fedpower(synth_tiny):
    for opt, part in ((True, 1.0), (False, 0.75)):
        mine = simulate(synth_tiny.parts, 3, 6, 2, opt=opt, participation=part, seed=4)
        ref = run_fedpower(
            synth_tiny.parts, 3, 6, 2, opt=opt, participation=part, rng=np.random.default_rng(4)
        )
        for a, b in zip(mine.history, ref.history, strict=True):
            np.testing.assert_array_equal(a, b)
        assert mine.timeouts == 0


def test_fedpower_with_opt_converges_and_fpca_is_accurate_on_tiny_synth(synth_tiny):
    x = synth_tiny.x
    run = simulate(synth_tiny.parts, 3, 30, 1)
    errors = [error_ratio(x, b) for b in run.history]
    assert errors[-1] < 1 + 1e-6 < errors[0]
    # several local steps on non-i.i.d. leaves: OPT keeps a small floor, plain averaging not
    opt = error_ratio(x, simulate(synth_tiny.parts, 3, 30, 2, opt=True).history[-1])
    plain = error_ratio(x, simulate(synth_tiny.parts, 3, 30, 2, opt=False).history[-1])
    assert opt < 1.01 < 1.1 < plain
    tree = fpca_run(synth_tiny.parts, 3, 20)
    assert error_ratio(x, tree.basis) < 1.1
    assert tree.messages == 8 + 2


def test_the_fault_models_hit_one_leaf_as_documented(synth_tiny):
    parts, m = synth_tiny.parts, len(synth_tiny.parts)
    straggler, dead = Fault(STRAGGLER), Fault(DEAD)
    assert straggler.rows(m - 1, parts[-1], m).shape[0] == -(-parts[-1].shape[0] // 10)
    assert straggler.rows(0, parts[0], m) is parts[0]
    assert [k for k in range(1, 31) if straggler.replies(m - 1, k, m)] == [10, 20, 30]
    assert dead.rows(m - 1, parts[-1], m).shape[0] == 0 and not dead.connected(m - 1, m)

    slow = simulate(parts, 3, 20, 1, fault=straggler)
    assert slow.timeouts == 18  # full participation: every round but 10 and 20 times out
    assert slow.replies_per_round[9] == m and slow.replies_per_round[0] == m - 1
    gone = simulate(parts, 3, 20, 1, fault=dead)
    assert gone.timeouts == 20 and set(gone.replies_per_round) == {m - 1}
    d = parts[0].shape[1]
    # a round: one copy per subscribed leaf (7 when one is dead) plus each reply
    assert gone.bytes_per_round[0] == (m - 1) * round_bytes(d, 3, 1, 1) + sum(
        reply_bytes(d, 3, 1, f"leaf-{i}", parts[i].shape[0], False) for i in range(m - 1)
    )
    x_live = np.concatenate(parts[:-1])
    assert error_ratio(x_live, gone.history[-1]) < 1 + 1e-6
    assert fpca_run(parts, 3, 20, fault=dead).messages == 7 + 2


def test_per_block_publishing_costs_more_than_final_snapshots(synth_tiny):
    final = fpca_run(synth_tiny.parts, 3, 20)
    msgs, nbytes = per_block_traffic(synth_tiny.parts, 3, 20)
    assert msgs == 2 * 8 * 5  # 100 rows per leaf in blocks of 20, a leaf and an aggregator
    assert nbytes > final.wire_bytes > 0


def test_the_section_lands_in_the_report_with_its_plot(tmp_path):
    lines: list[str] = []
    res = run_suite(TINY, tmp_path, only=["fedpower"], log=lines.append)
    fp = res.fedpower
    assert fp is not None and set(fp.shapes) == {data.MOTES, data.SYNTH}
    text = (tmp_path / "REPORT.md").read_text()
    assert "## (h) FPCA vs FedPower" in text
    assert "| The benchmark table is in REPORT.md |" in text
    assert "When to pick which" in text
    assert (tmp_path / "fedpower.png").stat().st_size > 0
    assert [c.passed for c in report.fedpower_done_when(res)] == [True]
    # results.json reads back into the same section
    again = results.load_results(tmp_path / "results.json")
    assert again.fedpower is not None
    assert again.fedpower.curves[0].errors == fp.curves[0].errors
