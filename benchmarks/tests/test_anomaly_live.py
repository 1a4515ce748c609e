"""The live-vs-offline check of the fault detector: its document mapping and metrics,
without a broker (the live run itself is `benchmarks.anomaly.live_events`)."""

from __future__ import annotations

import numpy as np

from benchmarks.anomaly import live_events
from benchmarks.anomaly.inject import Fault
from edge_runtime.topology import load_topology


def doc(seq: int, anomaly: int = 0, sensor: int | None = None, leaf: str = "leaf") -> dict:
    return {"source": f"replay:r1:{leaf}", "seq": seq, "anomaly": anomaly, "sensor": sensor}


def test_documents_map_back_to_rows_and_foreign_ones_are_skipped() -> None:
    docs = [doc(5), doc(6, 1, 3), doc(7, 1, None), doc(8, 1, 1, leaf="other"),
            {"source": "mote-1", "seq": 9, "anomaly": 1, "sensor": 1},
            doc(42, 1, 2)]  # the last beyond the leaf's rows
    alarms, sensors, seen = live_events.alarms_from_documents(docs, np.arange(10), 10)
    assert np.flatnonzero(alarms).tolist() == [6, 7]
    assert sensors[6] == 3 and sensors[7] == -1 and sensors[5] == -1
    assert np.flatnonzero(seen).tolist() == [5, 6, 7]


def test_identical_runs_score_identically_and_a_spike_is_detected_and_named() -> None:
    spike = Fault("short", 4, 250, 251, np.array([250]), 30.0)
    faulty = np.arange(400) == 250
    runs = ((np.zeros(400, dtype=bool), np.full(400, -1)), (faulty, np.where(faulty, 4, -1)))
    res, again = (live_events.score_runs(name, *runs, [spike], 100, 31.0) for name in "xy")
    assert res.recall(("short",)) == 1.0 and res.identification == 1.0
    assert (res.true_events, res.false_events, res.clean_events) == (1, 0, 0)
    assert res.nab == again.nab and res.nab > 0


def test_the_live_topology_is_one_faults_leaf_warmed_like_the_offline_benchmark() -> None:
    topology = load_topology(live_events.TOPOLOGY)
    leaf = topology.nodes[live_events.LEAF]
    assert topology.leaves() == [live_events.LEAF]
    assert (leaf.score, leaf.score_detector, leaf.score_warmup) == ("reading", "faults", 2787)
    assert leaf.valid_range is None  # the injected spikes reach the detector
    assert topology.split_rows(7712)[live_events.LEAF].tolist() == list(range(7712))
