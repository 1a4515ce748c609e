"""Sensor-fault scoring on the leaves (issue 25, item 2's integration): the core on a virtual
clock (warm-up, verdicts, documents, counters, bounded memory), the topology keys
``score_detector`` and ``score_warmup``, and a leaf against a real Mosquitto."""

from __future__ import annotations

import asyncio
import json
import math
import uuid

import aiomqtt
import numpy as np
import pytest
from helpers import collect_retained

from edge_runtime.agents.leaf.core.fault_scoring import SUSPECT_HOLD, FaultScoringCore
from edge_runtime.agents.leaf.core.scoring import ScoringCore, encode_document
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import TopologyError, parse_topology
from edge_runtime.topology.keys import DEFAULT_SCORE_WARMUP
from edge_runtime.wire import encode_readings

D = 8
WARMUP = 600


def light(n: int, seed: int) -> np.ndarray:
    """Positive readings of ``D`` sensors driven by two slow common factors plus noise."""
    rng = np.random.default_rng(seed)
    factors = np.cumsum(rng.standard_normal((n, 2)) * 0.5, axis=0)
    loadings = np.random.default_rng(1000).uniform(0.5, 1.5, (2, D))
    return 100.0 + factors @ loadings + rng.standard_normal((n, D)) * 0.5


def core(mode: str = "reading", *, warmup: int = WARMUP, window: int = 1000) -> FaultScoringCore:
    return FaultScoringCore(
        "leaf-1", mode=mode, interval_s=10.0, now=0.0, warmup=warmup, window=window
    )


def warmed(mode: str = "reading") -> tuple[FaultScoringCore, np.ndarray]:
    c = core(mode)
    x = light(WARMUP + 400, seed=0)
    assert c.score(x[:WARMUP], source="s", seq=0, timestamp=1.0) == []
    return c, x[WARMUP:]


# ---------------------------------------------------------------------------- the core


def test_warm_up_readings_get_no_document_and_count_down_in_the_status() -> None:
    c = core()
    x = light(WARMUP, seed=0)
    assert c.status_extra()["warming_up"] == WARMUP and c.buffer_bytes == 0
    assert c.score(x[:100], source="s", seq=0, timestamp=1.0) == []
    assert c.warming_up == WARMUP - 100
    assert c.buffer_bytes == WARMUP * D * 8  # the documented bound, allocated once
    assert c.score(x[100:], source="s", seq=100, timestamp=2.0) == []
    extra = c.status_extra()
    assert extra["warming_up"] == 0 and c.detector is not None
    assert c.buffer_bytes == 0  # freed once the detector is built
    assert extra["scored"] == 0 and extra["anomaly_rate"] is None and extra["suspect"] is None
    assert extra["score_detector"] == "faults" and extra["detector_bytes"] == c.detector.nbytes
    assert "unscored" not in extra  # no model to wait for


def test_a_block_across_the_end_of_the_warm_up_is_scored_from_its_first_row_after_it() -> None:
    c = core()
    x = light(WARMUP + 10, seed=0)
    assert not c.completes_warmup(WARMUP - 5) and c.completes_warmup(WARMUP)
    c.score(x[: WARMUP - 5], source="s", seq=0, timestamp=1.0)
    assert not c.completes_warmup(4) and c.completes_warmup(5)  # the shell threads that one
    docs = c.score(x[WARMUP - 5 :], source="s", seq=WARMUP - 5, timestamp=2.0)
    assert [d["seq"] for d in docs] == list(range(WARMUP, WARMUP + 10))
    assert c.scored == 10 and not c.completes_warmup(10**6)


def test_a_spike_raises_an_alarm_naming_the_spiked_sensor_and_the_documents_fields() -> None:
    c, rest = warmed()
    docs = c.score(rest[:100], source="s", seq=WARMUP, timestamp=1700000000.0)
    assert len(docs) == 100 and sum(d["anomaly"] for d in docs) == 0
    quiet = docs[0]
    assert set(quiet) == {
        "node",
        "source",
        "seq",
        "ts",
        "anomaly",
        "sensor",
        "fault",
        "score",
        "limit",
        "detector",
    }
    assert quiet["sensor"] is None and quiet["fault"] is None and quiet["detector"] == "faults"
    spiked = rest[100:101].copy()
    spiked[0, 3] += 40.0
    (doc,) = c.score(spiked, source="s", seq=WARMUP + 100, timestamp=1700000000.25)
    assert doc == {
        "node": "leaf-1",
        "source": "s",
        "seq": WARMUP + 100,
        "ts": 1700000000.25,
        "anomaly": 1,
        "sensor": 3,
        "fault": "short",
        "score": doc["score"],
        "limit": doc["limit"],
        "detector": "faults",
    }
    assert doc["score"] > doc["limit"] > 0
    assert json.loads(encode_document(doc)) == doc
    extra = c.status_extra()
    assert extra["anomalies"] == 1 and extra["scored"] == 101
    assert extra["anomaly_rate"] == pytest.approx(1 / 101)
    assert extra["suspect"] == {"sensor": 3, "fault": "short", "seq": WARMUP + 100, "ts": doc["ts"]}


def test_the_suspect_clears_after_enough_readings_without_an_alarm() -> None:
    c, rest = warmed()
    spiked = rest[:1].copy()
    spiked[0, 5] += 40.0
    c.score(spiked, source=None, seq=None, timestamp=0.0)
    assert c.suspect is not None and c.suspect["sensor"] == 5 and c.suspect["seq"] is None
    before = c.health()
    docs = c.score(rest[1 : SUSPECT_HOLD + 5], source=None, seq=None, timestamp=0.0)
    assert sum(d["anomaly"] for d in docs) == 0
    assert c.suspect is None and c.status_extra()["suspect"] is None
    assert c.health() != before  # the status document is due: the suspect is gone


def test_interval_documents_list_the_flagged_readings_with_sensor_and_fault() -> None:
    c, rest = warmed("interval")
    assert c.next_wakeup(0.0) == math.inf  # nothing scored yet
    x = rest[:50].copy()
    x[20, 6] += 40.0
    assert c.score(x, source="s", seq=WARMUP, timestamp=5.0) == []
    assert c.next_wakeup(1.0) == 10.0 and c.interval_document(9.9, 5.0) is None
    doc = c.interval_document(10.0, 12.5)
    assert doc is not None
    assert (doc["n"], doc["anomalies"], doc["anomaly"], doc["detector"]) == (50, 1, 1, "faults")
    (flag,) = doc["flagged"]
    assert (flag["source"], flag["seq"], flag["sensor"], flag["fault"]) == (
        "s",
        WARMUP + 20,
        6,
        "short",
    )
    assert doc["flagged_dropped"] == 0 and doc["ts"] == 12.5
    assert c.interval_document(25.0, 20.0) is None  # nothing scored since


def test_the_rate_window_the_detector_and_the_intervals_state_stay_bounded() -> None:
    c = core("interval", window=50)
    x = light(WARMUP + 300, seed=4)
    c.score(x[:WARMUP], source=None, seq=None, timestamp=0.0)
    assert c.detector is not None
    size = c.detector.nbytes
    for k in range(6):
        block = x[WARMUP + 50 * k : WARMUP + 50 * (k + 1)].copy()
        block[:, 2] += 40.0 * (np.arange(50) % 2)  # an alarm every other reading
        c.score(block, source=None, seq=None, timestamp=float(k))
    assert c.detector.nbytes == size and len(c._window) == 50
    assert len(c._iv_flagged) <= 100 and c.buffer_bytes == 0
    assert c.anomaly_rate is not None and 0 < c.anomaly_rate <= 1


def test_a_reading_of_another_width_is_refused_and_changes_nothing() -> None:
    c, rest = warmed()
    c.score(rest[:5], source="s", seq=WARMUP, timestamp=0.0)
    with pytest.raises(ValueError, match="readings have 3 values, the fault detector expects 8"):
        c.score(np.ones((2, 3)), source="s", seq=WARMUP + 5, timestamp=0.0)
    assert c.scored == 5


def test_a_single_sensor_cannot_build_a_detector_and_says_so() -> None:
    c = core(warmup=10)
    assert c.score(np.arange(12.0).reshape(12, 1), source=None, seq=None, timestamp=0.0) == []
    extra = c.status_extra()
    assert "n_features must be >= 2" in str(extra["scorer_error"])
    assert extra["warming_up"] == 0 and extra["scored"] == 0 and c.buffer_bytes == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "always"}, "mode must be 'reading' or 'interval', got 'always'"),
        ({"warmup": 1}, "warmup must be an integer >= 2 readings, got 1"),
        ({"interval_s": 0.0}, "interval_s must be > 0 seconds, got 0.0"),
        ({"window": 0}, "window must be >= 1 reading, got 0"),
    ],
)
def test_bad_core_settings_are_one_line_errors(kwargs: dict, message: str) -> None:
    args = {"mode": "reading", "interval_s": 10.0, "now": 0.0, "warmup": 10, **kwargs}
    with pytest.raises(ValueError, match=message):
        FaultScoringCore("leaf", **args)


# ---------------------------------------------------------------------------- topology keys

BASE = """
name = "t"
[defaults]
rank = 2
{defaults}
[[nodes]]
id = "root"
[[nodes]]
id = "leaf"
parent = "root"
{leaf}
"""


def topo(defaults: str = "", leaf: str = "") -> object:
    return parse_topology(BASE.format(defaults=defaults, leaf=leaf))


def test_score_detector_defaults_to_faults_with_the_default_warm_up() -> None:
    node = topo('score = "reading"').nodes["leaf"]
    assert (node.score_detector, node.score_warmup) == ("faults", DEFAULT_SCORE_WARMUP)
    node = topo('score = "reading"\nscore_detector = "static"\nscore_warmup = 50').nodes["leaf"]
    assert (node.score_detector, node.score_warmup) == ("static", 50)


@pytest.mark.parametrize(
    ("defaults", "message"),
    [
        ('score_detector = "pca"', "score_detector must be one of 'faults', 'static', got 'pca'"),
        ("score_warmup = 1", "score_warmup must be >= 2 readings, got 1"),
        ("score_warmup = 2.5", "score_warmup must be an integer, got float 2.5"),
        ("score_detector = 3", "score_detector must be a string"),
    ],
)
def test_bad_detector_keys_are_one_line_errors(defaults: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message) as info:
        topo(defaults)
    assert "\n" not in str(info.value)


def test_an_aggregator_cannot_take_the_detector_keys() -> None:
    text = BASE.format(defaults="", leaf="").replace('id = "root"', 'id = "root"\nscore_warmup = 9')
    with pytest.raises(TopologyError, match="score_warmup"):
        parse_topology(text)


def test_the_leaf_builds_the_core_its_detector_names_and_subscribes_accordingly() -> None:
    faults = LeafAgent(topo('score = "reading"'), "leaf")
    assert isinstance(faults.core.scoring, FaultScoringCore)
    assert faults.subscriptions() == ["sensors/leaf"]  # no model needed
    static = LeafAgent(topo('score = "reading"\nscore_detector = "static"'), "leaf")
    assert isinstance(static.core.scoring, ScoringCore)
    assert static.subscriptions() == ["sensors/leaf", "fpca/root/model"]
    off = LeafAgent(topo(), "leaf")
    assert off.core.scoring is None and "suspect" not in off.status_detail().extra


# ---------------------------------------------------------------------------- the shell


@pytest.mark.mqtt
@pytest.mark.parametrize("mode", ["reading", "interval"])
async def test_a_leaf_with_the_fault_detector_publishes_a_document_naming_the_spiked_sensor(
    mosquitto, mode: str
) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    topology = parse_topology(
        f"""
name = "faults"
prefix = "{prefix}"
[defaults]
rank = 3
block_size = 10
idle_flush_s = 0.2
score = "{mode}"
score_interval_s = 0.5
score_warmup = {WARMUP}
[[nodes]]
id = "root"
[[nodes]]
id = "leaf-1"
parent = "root"
sensor_topic = "{prefix}-sensors/leaf-1"
"""
    )
    settings = AgentSettings(host=mosquitto.host, port=mosquitto.port, timeout_s=5.0)
    x = light(WARMUP + 40, seed=0)
    x[WARMUP + 20, 4] += 40.0  # the spike, seq WARMUP + 20
    sensor_topic = topology.nodes["leaf-1"].sensor_topic
    docs: list[dict] = []
    async with LeafAgent(topology, "leaf-1", settings) as leaf:  # no root: no model needed
        await leaf.wait_connected(5)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            await client.subscribe(topology.scores_topic("leaf-1"), qos=1)
            for start in range(0, len(x), 100):  # blocks of 100 readings
                payload = encode_readings(x[start : start + 100], source="s", seq=start)
                await client.publish(sensor_topic, payload, qos=1)
            async with asyncio.timeout(20):
                async for message in client.messages:
                    assert not message.retain
                    docs.append(json.loads(bytes(message.payload)))  # type: ignore[arg-type]
                    if mode == "reading" and docs[-1]["seq"] == WARMUP + 39:
                        break
                    if mode == "interval" and sum(d["n"] for d in docs) >= 40:
                        break
        assert all(d["detector"] == "faults" and d["node"] == "leaf-1" for d in docs)
        if mode == "reading":
            assert [d["seq"] for d in docs] == list(range(WARMUP, WARMUP + 40))
            spike = docs[20]
            assert (spike["anomaly"], spike["sensor"], spike["fault"]) == (1, 4, "short")
        else:
            flagged = [(f["seq"], f["sensor"], f["fault"]) for d in docs for f in d["flagged"]]
            assert (WARMUP + 20, 4, "short") in flagged
        async with asyncio.timeout(15):  # the status document names the suspect
            while True:
                raw = await collect_retained(
                    mosquitto.host, mosquitto.port, topology.status_detail_topic("leaf-1"), 1.0
                )
                extra = json.loads(raw)["extra"] if raw else {}
                if extra.get("anomalies", 0) >= 1:
                    break
                await asyncio.sleep(0.2)
        assert extra["suspect"]["sensor"] == 4 and extra["suspect"]["fault"] == "short"
        assert extra["warming_up"] == 0 and extra["scored"] == 40


@pytest.fixture
def mosquitto(shared_mosquitto):
    """This worker's broker (conftest): the tests here are isolated by their topic prefix."""
    return shared_mosquitto
