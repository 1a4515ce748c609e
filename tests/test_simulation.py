"""The in-memory federation: thousands of real cores, simulated broker faults, exact results."""

from __future__ import annotations

import numpy as np
import pytest

from edge_runtime.fpca import error_ratio
from edge_runtime.simulation import (
    Faults,
    Feed,
    Link,
    Simulation,
    SimulationConfig,
    SimulationResult,
    balanced_topology,
    low_rank_data,
)

FEATURES, RANK, BLOCK, PER_LEAF = 16, 4, 50, 200
FAULTY = Link(latency_s=0.02, jitter=1.0, drop=0.02, duplicate=0.05)
FAULTY_IN_ORDER = Link(latency_s=0.02, jitter=1.0, drop=0.02, duplicate=0.05, ordered=True)


def run(
    k: int, fanout: int, config: SimulationConfig, *, seed: int = 1
) -> tuple[np.ndarray, SimulationResult]:
    topology = balanced_topology(k, fanout, rank=RANK, block_size=BLOCK)
    data = low_rank_data(k * PER_LEAF, FEATURES, RANK, seed=seed)
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
    _, result = run(64, 8, faulty(seed=4, restore="checkpoint"))
    assert result.faults["leaf_crashes"] == 6
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
    _, result = run(64, 8, faulty(seed=1, wire_sample=1.0))
    assert result.counters["restored_from_snapshot"] > 0  # float32 bases, re-orthonormalised
    assert result.coverage_exact


@pytest.mark.slow
def test_ten_thousand_leaves_with_faults_and_stragglers_converge_under_the_message_budget() -> None:
    """The issue's case: 100 aggregators of 100 leaves, 200 readings of 16 features each."""
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
