"""The live-vs-offline benchmark of the sensor-fault detector (issue 25): its document
mapping and metrics, without a broker (the live run itself is `benchmarks.anomaly.live_events`)."""

from __future__ import annotations

import numpy as np

from benchmarks.anomaly import live_events
from benchmarks.anomaly.inject import Fault
from edge_runtime.topology import load_topology


def doc(seq: int, anomaly: int = 0, sensor: int | None = None) -> dict:
    return {"source": "replay:r1:leaf", "seq": seq, "anomaly": anomaly, "sensor": sensor}


def test_documents_map_back_to_rows_and_foreign_ones_are_skipped() -> None:
    rows = np.arange(10)
    docs = [
        doc(5),
        doc(6, 1, 3),
        doc(7, 1, None),
        {"source": "replay:r1:other", "seq": 8, "anomaly": 1, "sensor": 1},
        {"source": "mote-1", "seq": 9, "anomaly": 1, "sensor": 1},
        doc(42, 1, 2),  # beyond the leaf's rows
    ]
    alarms, sensors, seen = live_events.alarms_from_documents(docs, rows, 10)
    assert np.flatnonzero(alarms).tolist() == [6, 7]
    assert sensors[6] == 3 and sensors[7] == -1 and sensors[5] == -1
    assert np.flatnonzero(seen).tolist() == [5, 6, 7]


def test_identical_runs_score_identically_and_a_spike_is_detected_and_named() -> None:
    n, warmup = 400, 100
    spike = Fault("short", 4, 250, 251, np.array([250]), 30.0)
    faulty = np.zeros(n, dtype=bool)
    faulty[250] = True
    sensors = np.where(faulty, 4, -1)
    clean = (np.zeros(n, dtype=bool), np.full(n, -1))
    res = live_events.score_runs("x", clean, (faulty, sensors), [spike], warmup, 31.0)
    again = live_events.score_runs("y", clean, (faulty, sensors), [spike], warmup, 31.0)
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
