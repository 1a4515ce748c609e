"""Benchmark (h), FPCA vs FedPower, on tiny sizes: the fault-free simulation is `run_fedpower`,
FedPower with OPT converges on heterogeneous Synth, FPCA's tree is accurate, the fault models
and byte counts do what the report says, and the section lands in REPORT.md with its plot.
Nothing here checks a speed."""

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


@pytest.fixture(scope="module")
def synth_tiny() -> data.Dataset:
    return data.load(data.SYNTH, synth_shape=(12, 800))


@pytest.mark.parametrize(("opt", "part"), [(True, 1.0), (False, 0.75)])
def test_without_faults_the_simulation_is_run_fedpower(synth_tiny, opt, part):
    mine = simulate(synth_tiny.parts, 3, 6, 2, opt=opt, participation=part, seed=4)
    ref = run_fedpower(synth_tiny.parts, 3, 6, 2, opt=opt, participation=part,
                       rng=np.random.default_rng(4))  # fmt: skip
    for a, b in zip(mine.history, ref.history, strict=True):
        np.testing.assert_array_equal(a, b)
    assert mine.timeouts == 0


def test_fedpower_with_opt_converges_and_fpca_is_accurate_on_tiny_synth(synth_tiny):
    x, parts = synth_tiny.x, synth_tiny.parts
    errors = [error_ratio(x, b) for b in simulate(parts, 3, 30, 1).history]
    assert errors[-1] < 1 + 1e-6 < errors[0]
    # several local steps on non-i.i.d. leaves: OPT keeps a small floor, plain averaging not
    opt, plain = (error_ratio(x, simulate(parts, 3, 30, 2, opt=o).history[-1])
                  for o in (True, False))  # fmt: skip
    assert opt < 1.01 < 1.1 < plain
    tree = fpca_run(parts, 3, 20)
    assert error_ratio(x, tree.basis) < 1.1 and tree.messages == 8 + 2
    msgs, nbytes = per_block_traffic(parts, 3, 20)
    assert msgs == 2 * 8 * 5  # 100 rows per leaf in blocks of 20, a leaf and an aggregator
    assert nbytes > tree.wire_bytes > 0


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
    assert error_ratio(np.concatenate(parts[:-1]), gone.history[-1]) < 1 + 1e-6
    assert fpca_run(parts, 3, 20, fault=dead).messages == 7 + 2


def test_the_section_lands_in_the_report_with_its_plot(tmp_path):
    tiny = dataclasses.replace(QUICK, name="tiny", fedpower=section.TINY)
    res = run_suite(tiny, tmp_path, only=["fedpower"], log=lambda _: None)
    fp = res.fedpower
    assert fp is not None and set(fp.shapes) == {data.MOTES, data.SYNTH}
    text = (tmp_path / "REPORT.md").read_text()
    assert "## (h) FPCA vs FedPower" in text and "When to pick which" in text
    assert "| The benchmark table is in REPORT.md |" in text
    assert (tmp_path / "fedpower.png").stat().st_size > 0
    assert [c.passed for c in report.fedpower_done_when(res)] == [True]
    again = results.load_results(tmp_path / "results.json")  # reads back into the same section
    assert again.fedpower is not None and again.fedpower.curves[0].errors == fp.curves[0].errors
