"""The in-memory federation: thousands of real cores, simulated broker faults, exact results."""

from __future__ import annotations

import inspect
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.fpca import error_ratio
from edge_runtime.simulation.config import Faults, Feed, Link, SimulationConfig, SimulationResult
from edge_runtime.simulation.engine import Simulation
from edge_runtime.simulation.fleet import balanced_topology, low_rank_data

FEATURES, RANK, BLOCK, PER_LEAF = 16, 4, 50, 200
FAULTY = Link(latency_s=0.02, jitter=1.0, drop=0.02, duplicate=0.05)
FAULTY_IN_ORDER = Link(latency_s=0.02, jitter=1.0, drop=0.02, duplicate=0.05, ordered=True)


def run(
    k: int, fanout: int, config: SimulationConfig, *, seed: int = 1, per_leaf: int = PER_LEAF
) -> tuple[np.ndarray, SimulationResult]:
    topology = balanced_topology(k, fanout, rank=RANK, block_size=BLOCK)
    data = low_rank_data(k * per_leaf, FEATURES, RANK, seed=seed)
    return data, Simulation(topology, data, config).run()


def faulty(seed: int = 3, **options: object) -> SimulationConfig:
    """Drops and duplicates on every link, snapshots reordered (readings keep MQTT's order),
    10 % of the leaves, two aggregators and the root crashing, 10 % stragglers, a fifth of
    the snapshots through the wire."""
    settings: dict[str, object] = {
        "seed": seed,
        "snapshots": FAULTY,
        "readings": FAULTY_IN_ORDER,
        "faults": Faults(leaf_crashes=0.1, aggregator_crashes=2, root_crash=True),
        "wire_sample": 0.2,
    }
    return SimulationConfig(**{**settings, **options})  # type: ignore[arg-type]


def test_a_balanced_topology_puts_every_leaf_at_the_same_depth_under_small_aggregators() -> None:
    topology = balanced_topology(10, 3, rank=2)
    assert len(topology.leaves()) == 10
    assert topology.children("root") == ["agg-2-0", "agg-2-1"]
    assert max(len(topology.children(a)) for a in topology.aggregators()) <= 3
    assert {topology.path(leaf).count("/") for leaf in topology.leaves()} == {3}


def test_64_leaves_with_every_fault_converge_to_the_offline_answer_covering_each_reading_once() -> (
    None
):
    data, result = run(64, 8, faulty())
    assert result.finished
    assert result.faults["dropped"] > 0 and result.faults["duplicated"] > 0
    assert result.faults["leaf_crashes"] == 6 and result.faults["aggregator_crashes"] == 3
    assert result.counters["duplicate_snapshots"] > 0
    assert result.counters["wire_messages"] > 0
    assert result.coverage_exact, result.coverage_missing
    assert result.root_n_samples == data.shape[0]
    assert result.counters["unconfirmed"] == 0
    assert result.counters["gap_rows"] == 0
    assert result.error_ratio <= 1.001
    assert result.error_ratio == pytest.approx(error_ratio(data, result.model_basis), rel=1e-12)


def test_the_same_seed_gives_the_same_run_bit_for_bit() -> None:
    _, first = run(64, 8, faulty(seed=5))
    _, second = run(64, 8, faulty(seed=5))
    assert np.array_equal(first.model_basis, second.model_basis)
    assert first.summary() == second.summary()
    _, other = run(64, 8, faulty(seed=6))
    assert other.summary() != first.summary()


def test_a_fault_free_run_resends_nothing_and_reports_no_undelivered_snapshot() -> None:
    config = SimulationConfig(seed=2, feed=Feed(stragglers=0.0))
    _, result = run(64, 8, config)
    assert result.coverage_exact
    assert result.resent_readings == 0
    assert result.counters.get("undelivered", 0) == 0
    assert result.faults == {}
    assert result.error_ratio <= 1.001


def test_leaves_restored_from_checkpoints_cover_every_reading_exactly() -> None:
    _, result = run(64, 8, faulty(seed=4, checkpoint_every=1))  # crashes after a checkpoint
    assert result.faults["leaf_crashes"] == 6
    assert result.counters["restored_from_checkpoint"] > 0
    assert result.counters["unconfirmed"] == 0
    assert result.coverage_exact, result.coverage_missing
    assert result.error_ratio <= 1.001


def test_messages_are_counted_by_kind_and_stay_far_below_one_per_reading() -> None:
    data, result = run(64, 8, faulty())
    kinds = set(result.messages)
    assert {"leaf_snapshot", "aggregator_snapshot", "model", "confirm", "online"} <= kinds
    assert result.agent_messages == sum(result.messages.values())
    assert result.messages_per_reading == result.agent_messages / data.shape[0]
    assert result.messages_per_reading < 0.1  # a tenth of the leaves crash here
    assert result.sensor_messages >= data.shape[0] / Feed().batch_size


def test_leaves_restore_from_float32_snapshots_from_the_wire() -> None:
    """Leaves without a state directory restore from their retained snapshot (a leaf with
    one checkpoints with its first snapshot, so it restores from the checkpoint)."""
    _, result = run(64, 8, replace(faulty(seed=1, wire_sample=1.0), restore="snapshot"))
    assert result.counters["restored_from_snapshot"] > 0  # float32 bases, re-orthonormalised
    assert result.coverage_exact


@pytest.mark.slow
@pytest.mark.timeout(1800)  # about a minute alone; much longer on a shared, loaded machine
def test_ten_thousand_leaves_with_faults_and_stragglers_converge_under_the_message_budget() -> None:
    """The issue's case: 100 aggregators of 100 leaves, 200 readings of 16 features each,
    every leaf with a state directory (issue 21): every reading confirmed durable."""
    config = SimulationConfig(
        seed=0,
        feed=Feed(stragglers=0.1, straggler_slowdown=10.0),
        snapshots=Link(drop=0.01, duplicate=0.02),
        readings=Link(drop=0.01, duplicate=0.02),
        faults=Faults(leaf_crashes=0.01, aggregator_crashes=3, root_crash=True),
        wire_sample=0.01,
    )
    data, result = run(10_000, 100, config, seed=0)
    assert result.finished
    assert result.faults["leaf_crashes"] == 100
    assert result.coverage_exact, result.coverage_missing
    assert result.root_n_samples == data.shape[0] == 2_000_000
    assert result.error_ratio <= 1.001
    assert result.messages_per_reading <= 0.05
    assert result.counters["unconfirmed"] == 0
    assert result.counters["checkpoint_pending"] == 0


# ------------------------------------------------ leaves with a state directory (issue 21)
TAIL_PER_LEAF = 73  # one full block of 50 and a tail of 23 that only a checkpoint covers
QUIET = SimulationConfig(seed=2, feed=Feed(stragglers=0.0))


def test_by_default_every_leaf_has_a_state_directory_with_the_agents_defaults() -> None:
    """The deployment as documented: ``edge-runtime agent --state-dir`` (the systemd unit)."""
    agent = inspect.signature(LeafAgent.__init__).parameters
    config = SimulationConfig()
    assert config.restore == "checkpoint"
    assert config.checkpoint_every == agent["checkpoint_every"].default
    assert config.checkpoint_interval_s == agent["checkpoint_interval_s"].default
    with pytest.raises(ValueError, match="checkpoint_interval_s"):
        SimulationConfig(checkpoint_interval_s=0.0)
    with pytest.raises(ValueError, match="checkpoint_every"):
        SimulationConfig(checkpoint_every=0)


def test_the_readings_after_the_last_full_block_become_durable_when_the_streams_end() -> None:
    data, result = run(16, 4, QUIET, per_leaf=TAIL_PER_LEAF)
    counters = result.counters
    assert result.finished and result.coverage_exact
    assert counters["unconfirmed"] == 0 and counters["unconfirmed_leaves"] == 0
    assert counters["checkpoint_pending"] == 0
    assert counters.get("checkpoint_late", 0) == 0  # every deadline was a wake-up
    assert counters["checkpoints"] >= 16
    assert result.resent_readings == 0  # no probe was needed
    assert result.root_n_samples == data.shape[0]


def _pre_fix_checkpoint_due(self: LeafCore, now: float, *, force: bool = False) -> bool:
    """`LeafCore.checkpoint_due` before 814e671 (idle only while unpublished, and the
    trailing publish in the same step had just published everything)."""
    if not self.checkpointing or (
        self.n_samples == self.durability.checkpointed_n and self.ingested == self.durable
    ):
        return False
    blocks = 0 if self.estimator is None else self.estimator.n_blocks_
    if force or (self.idle(now) and self.snapshot_n() == self.published_n):
        return True
    if self._drops_uncovered() and now >= self.unpublished_since + self.policy.max_interval_s:
        return True
    durability = self.durability
    return blocks - durability.checkpointed_blocks >= (durability.checkpoint_every or 1)


def _without_checkpoint_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core holds the checkpoint until its deadline but does not report it as a wake-up."""
    wakeups = LeafCore._other_wakeups

    def forgetful(self: LeafCore, now: float) -> list[float]:
        deadline = self.checkpoint_deadline()
        return [t for t in wakeups(self, now) if t != deadline]

    monkeypatch.setattr(LeafCore, "_other_wakeups", forgetful)


def test_the_idle_durability_bug_of_issue_21_shows_as_unconfirmed_readings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rule the agents had shows here as it did against Mosquitto: every leaf's tail
    after its last full block stays unconfirmed, and the replay gives up."""
    _without_checkpoint_deadline(monkeypatch)
    monkeypatch.setattr(LeafCore, "checkpoint_due", _pre_fix_checkpoint_due)
    _, result = run(16, 4, QUIET, per_leaf=TAIL_PER_LEAF)
    assert result.finished and result.coverage_exact  # the root's model covers everything
    assert result.counters["unconfirmed"] == 16 * (TAIL_PER_LEAF - BLOCK)
    assert result.counters["unconfirmed_leaves"] == result.counters["checkpoint_pending"] == 16
    assert result.resent_readings > 0  # the replay probed, in vain


def test_a_checkpoint_deadline_the_core_does_not_report_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The simulation wakes a core only at its ``next_wakeup`` (never by polling, unlike
    the shell's ``MAX_SLEEP_S``), so a forgotten deadline is met late, at some other
    wake-up (a status heartbeat, the replay's probe), and counted."""
    _without_checkpoint_deadline(monkeypatch)
    _, result = run(16, 4, QUIET, per_leaf=TAIL_PER_LEAF)
    assert result.counters["checkpoint_late"] > 0


def test_a_leaf_without_a_state_directory_is_durable_once_published() -> None:
    _, result = run(16, 4, SimulationConfig(seed=2, restore="snapshot"), per_leaf=TAIL_PER_LEAF)
    assert result.counters["unconfirmed"] == 0
    assert result.counters.get("checkpoints", 0) == 0
    assert result.coverage_exact


def test_a_crashed_leaf_with_a_state_directory_restarts_from_its_checkpoint() -> None:
    """As `Recovery`, with the first checkpoint written with the first snapshot: the
    leaves crash while their readings arrive, and resume from their checkpoint (exact),
    never from their retained float32 snapshot; nothing is lost."""
    _, result = run(64, 8, faulty(seed=4))
    assert result.faults["leaf_crashes"] == 6
    assert result.counters.get("restored_from_checkpoint", 0) > 0
    assert result.counters.get("restored_from_snapshot", 0) == 0
    assert result.counters["unconfirmed"] == 0
    assert result.coverage_exact, result.coverage_missing


def test_the_command_exits_1_when_readings_stay_unconfirmed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from edge_runtime.simulation.__main__ import main

    args = ["--leaves", "8", "--fanout", "4", "--readings-per-leaf", "73", "--drop", "0"]
    args += ["--duplicate", "0", "--leaf-crashes", "0", "--aggregator-crashes", "0"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["counters"]["unconfirmed"] == 0 and summary["coverage_exact"]
    _without_checkpoint_deadline(monkeypatch)
    monkeypatch.setattr(LeafCore, "checkpoint_due", _pre_fix_checkpoint_due)
    assert main(args) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["counters"]["unconfirmed"] == 8 * 23 and summary["coverage_exact"]
    assert math.isfinite(summary["virtual_s"])
