"""Anomaly scoring on the leaves (issue 13, item 2): the core on a virtual clock, the keys of
the topology, and a small tree against a real Mosquitto."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import uuid

import aiomqtt
import numpy as np
import pytest
from helpers import collect_retained, low_rank_data

from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.agents.leaf.core.scoring import RESIDUAL_FLOOR, ScoringCore, encode_document
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.fpca import AnomalyScorer, FPCAEdge
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import TopologyError, parse_topology
from edge_runtime.wire import SubspaceMessage, encode_readings

D, R = 8, 2
SCALES = np.array([6.0, 4.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])


def readings(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, D)) * SCALES


def model_message(seq: int = 1, epoch: str = "e1", node: str = "root") -> SubspaceMessage:
    est = FPCAEdge(D, R, oversample=2, block_size=50).fit(readings(4000, seed=1))
    model = est.tracked_subspace.truncate(R)  # as the root publishes it
    return SubspaceMessage(node_id=node, epoch=epoch, seq=seq, subspace=model, timestamp=0.0)


def core(mode: str = "reading", *, window: int = 1000) -> ScoringCore:
    return ScoringCore(
        "leaf-1", "root", mode=mode, alpha=0.01, interval_s=10.0, now=0.0, window=window
    )


def spike() -> np.ndarray:
    x = np.zeros(D)
    x[5] = 40.0  # a residual direction, far beyond the noise
    return x


# ---------------------------------------------------------------------------- the core


def test_readings_before_a_model_are_counted_unscored_and_produce_no_document() -> None:
    c = core()
    assert c.score(readings(5, seed=2), source="s", seq=0, timestamp=1.0) == []
    extra = c.status_extra()
    assert extra["unscored"] == 5 and extra["scored"] == 0 and extra["anomalies"] == 0
    assert extra["anomaly_rate"] is None and extra["last_q"] is None


def test_only_the_roots_newer_models_are_taken() -> None:
    c = core()
    assert c.offer_model(model_message(node="site-a")) == "not_root"
    assert c.offer_model(model_message(seq=3)) is None
    assert c.offer_model(model_message(seq=3)) == "old"
    assert c.offer_model(model_message(seq=2)) == "old"
    assert c.offer_model(model_message(seq=1, epoch="e2")) is None  # the root restarted
    assert c.model is not None and c.model.epoch == "e2" and c.models == 2


def test_scores_flag_a_planted_spike_with_its_source_and_sequence_number() -> None:
    c = core()
    c.offer_model(model_message())
    assert c.score(readings(300, seed=3), source="s", seq=0, timestamp=1.0)  # energy builds
    batch = readings(20, seed=4)
    batch[7] = spike()
    docs = c.score(batch, source="s", seq=300, timestamp=1700000000.25)
    assert len(docs) == 20
    flagged = [d for d in docs if d["anomaly"]]
    assert [(d["source"], d["seq"]) for d in flagged] == [("s", 307)]
    doc = flagged[0]
    assert set(doc) == {
        "node", "source", "seq", "ts", "q", "t2", "anomaly",
        "q_limit", "t2_limit", "alpha", "rank", "model_seq",
    }  # fmt: skip
    assert doc["node"] == "leaf-1" and doc["ts"] == 1700000000.25 and doc["model_seq"] == 1
    assert doc["alpha"] == 0.01 and doc["rank"] == R and doc["q"] > doc["q_limit"] > 0
    # plain JSON: flat keys, numbers, no NaN
    parsed = json.loads(encode_document(doc))
    assert all(not isinstance(v, dict | list) for v in parsed.values())
    assert c.scored == 320 and c.anomalies >= 1 and c.last_q == docs[-1]["q"]
    assert c.anomaly_rate == pytest.approx(c.anomalies / 320)


def test_false_alarm_rate_on_normal_readings_is_about_alpha() -> None:
    c = core()
    c.offer_model(model_message())
    c.score(readings(2000, seed=5), source=None, seq=None, timestamp=0.0)
    before = c.anomalies
    c.score(readings(4000, seed=6), source=None, seq=None, timestamp=0.0)
    rate = (c.anomalies - before) / 4000
    assert rate < 0.04  # the flag's false-alarm rate is at most 2 alpha (plus estimation)


def test_limits_use_the_leafs_own_energy_estimate() -> None:
    c = core()
    msg = model_message()
    c.offer_model(msg)
    x = readings(500, seed=7)
    c.score(x, source=None, seq=None, timestamp=0.0)
    # the first readings build the energy; the limits are those of AnomalyScorer with the
    # leaf's mean squared norm (an uncentred model), up to the rebuild tolerance
    energy = float(np.einsum("ij,ij->", x, x) / len(x))
    expected = AnomalyScorer(msg.subspace, alpha=0.01, total_energy=energy)
    assert c.scorer is not None
    assert c.scorer.t2_limit == pytest.approx(expected.t2_limit)
    assert c.scorer.q_limit == pytest.approx(expected.q_limit, rel=0.1)
    assert not c.energy_floored


def test_a_leaf_quieter_than_the_fleet_uses_the_residual_floor() -> None:
    c = core()
    msg = model_message()
    c.offer_model(msg)
    c.score(readings(200, seed=8) * 0.3, source=None, seq=None, timestamp=0.0)
    assert c.energy_floored and c.status_extra()["energy_floored"] is True
    assert c.scorer is not None and c.scorer.q_limit > 0
    lam = msg.subspace.singular_values**2 / msg.subspace.n_samples
    residual = float(np.sum(c.scorer.discarded_eigenvalues_))
    assert residual == pytest.approx(RESIDUAL_FLOOR * float(np.sum(lam)), rel=1e-9)


def test_anomaly_rate_is_a_sliding_window() -> None:
    c = core(window=10)
    c.offer_model(model_message())
    c.score(readings(200, seed=9), source=None, seq=None, timestamp=0.0)
    c.score(np.vstack([spike(), spike()]), source=None, seq=None, timestamp=0.0)
    assert c.anomaly_rate is not None and c.anomaly_rate >= 0.2
    anomalies = c.anomalies
    quiet = readings(10, seed=10) * 0.2  # well inside the limits
    c.score(quiet, source=None, seq=None, timestamp=0.0)
    assert c.anomaly_rate == 0.0 and c.anomalies == anomalies  # the count stays


def test_interval_mode_batches_one_document_per_interval() -> None:
    c = core("interval")
    c.offer_model(model_message(seq=4))
    assert c.next_wakeup(0.0) == math.inf  # nothing scored: nothing to say
    assert c.score(readings(300, seed=11), source="s", seq=0, timestamp=5.0) == []
    assert c.next_wakeup(1.0) == 10.0
    batch = readings(10, seed=12)
    batch[3] = spike()
    assert c.score(batch, source="s", seq=300, timestamp=6.0) == []
    assert c.interval_document(9.9, 9.9) is None  # not due
    doc = c.interval_document(10.0, 1700000010.0)
    assert doc is not None
    assert doc["n"] == 310 and doc["anomalies"] >= 1 and doc["anomaly"] == 1
    assert {"source": "s", "seq": 303} in [
        {"source": f["source"], "seq": f["seq"]} for f in doc["flagged"]
    ]
    assert doc["model_seq"] == 4 and doc["interval_s"] == 10.0 and doc["ts"] == 1700000010.0
    assert doc["max_q"] >= doc["q_limit"] and doc["flagged_dropped"] == 0
    json.loads(encode_document(doc))
    # the next interval starts at 10 and has nothing yet
    assert c.next_wakeup(10.0) == math.inf
    assert c.interval_document(20.0, 20.0) is None
    c.score(readings(3, seed=13), source="s", seq=310, timestamp=21.0)
    assert c.interval_document(29.9, 29.9) is None
    later = c.interval_document(30.0, 30.0)
    assert later is not None and later["n"] == 3


def test_scoring_cost_is_bounded_per_batch() -> None:
    # O(n d r) per batch: the scorer keeps only the (d, r) basis; state does not grow
    c = core()
    c.offer_model(model_message())
    for seed in range(20):
        c.score(readings(100, seed=100 + seed), source="s", seq=seed * 100, timestamp=0.0)
    assert c.scored == 2000 and len(c._window) == 1000
    assert c._energy.mean is not None and c._energy.mean.shape == (D,)


# ---------------------------------------------------------------------------- topology

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


def test_score_keys_default_off_and_apply_to_leaves_only() -> None:
    t = topo()
    assert t.nodes["leaf"].score == "off" and t.nodes["leaf"].score_alpha == 0.01
    t = topo('score = "interval"\nscore_interval_s = 5\nscore_alpha = 0.05')
    leaf, root = t.nodes["leaf"], t.nodes["root"]
    assert (leaf.score, leaf.score_interval_s, leaf.score_alpha) == ("interval", 5.0, 0.05)
    assert root.score == "off"  # [defaults] scoring is the leaves'
    assert t.scores_topic("leaf") == "fpca/root/leaf/scores"


@pytest.mark.parametrize(
    ("defaults", "leaf", "message"),
    [
        ('score = "always"', "", "score must be one of 'off', 'reading', 'interval'"),
        ("score_alpha = 1.5", "", "score_alpha must be in (0, 1)"),
        ("score_interval_s = 0", "", "score_interval_s must be > 0"),
        (
            "",
            'score = "reading"\nepsilon = 1.0\ndelta = 1e-5\nclip_norm = 1.0',
            "set score_allow_private = true",
        ),
    ],
)
def test_bad_score_settings_are_one_line_errors(defaults: str, leaf: str, message: str) -> None:
    with pytest.raises(TopologyError, match=r"^[^\n]*$") as info:
        topo(defaults, leaf)
    assert message in str(info.value)


def test_private_leaf_scores_only_when_explicitly_allowed() -> None:
    t = topo(
        "",
        'score = "reading"\nscore_allow_private = true\nepsilon = 1.0\ndelta = 1e-5\n'
        "clip_norm = 1.0",
    )
    assert t.nodes["leaf"].score == "reading"


def test_an_aggregator_cannot_score() -> None:
    text = BASE.format(defaults="", leaf="")
    text = text.replace('id = "root"', 'id = "root"\nscore = "reading"')
    with pytest.raises(TopologyError, match="aggregator"):
        parse_topology(text)


# ---------------------------------------------------------------------------- the shell


def scoring_tree(mode: str = "reading") -> object:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    return parse_topology(
        f"""
name = "scoring"
prefix = "{prefix}"
[defaults]
rank = 3
block_size = 10
idle_flush_s = 0.2
score = "{mode}"
score_detector = "static"
score_interval_s = 0.5
[[nodes]]
id = "root"
[[nodes]]
id = "leaf-1"
parent = "root"
sensor_topic = "{prefix}-sensors/leaf-1"
[[nodes]]
id = "leaf-2"
parent = "root"
sensor_topic = "{prefix}-sensors/leaf-2"
"""
    )


async def _publish(broker, topic: str, rows: np.ndarray, source: str, start: int) -> None:
    async with aiomqtt.Client(broker.host, broker.port, timeout=5) as client:
        for i, row in enumerate(rows):
            await client.publish(topic, encode_readings(row, source=source, seq=start + i), qos=1)


@pytest.mark.mqtt
@pytest.mark.parametrize("mode", ["reading", "interval"])
async def test_leaves_score_readings_against_the_roots_model_and_flag_a_spike(
    mosquitto, mode: str
) -> None:
    topology = scoring_tree(mode)
    settings = AgentSettings(host=mosquitto.host, port=mosquitto.port, timeout_s=5.0)
    data = low_rank_data(200, 12, 3, noise=0.3, seed=3)
    leaf = "leaf-1"
    async with (
        AggregatorAgent(topology, "root", settings) as root,
        LeafAgent(topology, "leaf-1", settings) as a,
        LeafAgent(topology, "leaf-2", settings) as b,
    ):
        for agent in (root, a, b):
            await agent.wait_connected(5)
        await _publish(mosquitto, topology.nodes["leaf-1"].sensor_topic, data[:80], "s", 0)
        await _publish(mosquitto, topology.nodes["leaf-2"].sensor_topic, data[80:160], "s", 0)
        async with asyncio.timeout(15):  # the root's model reaches the leaf
            while a.core.scoring is None or a.core.scoring.model is None:
                await asyncio.sleep(0.05)
        rows = data[160:200].copy()
        rows[10] = rows[10] + 60.0 * np.linalg.qr(np.eye(12))[0][:, 11]  # spike, seq 90
        docs: list[dict] = []
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            await client.subscribe(topology.scores_topic(leaf), qos=1)
            await _publish(mosquitto, topology.nodes[leaf].sensor_topic, rows, "s", 80)
            # An interval document scored before the spike (readings of the first 80 scored
            # once the root's first model arrived mid-stream) may still arrive after this
            # subscription, so the interval run waits for the document naming seq 90 (or
            # the bound), never for a count of readings.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(15):
                    async for message in client.messages:
                        assert not message.retain
                        doc = json.loads(bytes(message.payload))  # type: ignore[arg-type]
                        docs.append(doc)
                        if mode == "reading" and doc["seq"] == 119:
                            break
                        if mode == "interval" and ["s", 90] in [
                            [f["source"], f["seq"]] for f in doc["flagged"]
                        ]:
                            break
        if mode == "reading":
            spike_doc = next((d for d in docs if d["seq"] == 90), None)
            assert spike_doc is not None, f"no document for seq 90 in {len(docs)}"
            assert spike_doc["anomaly"] == 1 and spike_doc["source"] == "s"
            assert spike_doc["q"] > spike_doc["q_limit"]
            assert spike_doc["model_seq"] >= 1 and spike_doc["alpha"] == 0.01
        else:
            flagged = [(f["source"], f["seq"]) for d in docs for f in d["flagged"]]
            assert ("s", 90) in flagged
            assert all(d["node"] == leaf and "q_limit" in d for d in docs)
        async with asyncio.timeout(15):  # the status document shows the anomaly
            while True:
                raw = await collect_retained(
                    mosquitto.host, mosquitto.port, topology.status_detail_topic(leaf), 1.0
                )
                extra = json.loads(raw)["extra"] if raw else {}
                if extra.get("anomalies", 0) >= 1:
                    break
                await asyncio.sleep(0.2)
        assert extra["scored"] >= 40 and 0 < extra["anomaly_rate"] <= 1
        assert extra["last_q"] is not None


@pytest.mark.mqtt
async def test_score_off_keeps_the_leafs_subscriptions_and_status(mosquitto) -> None:
    topology = scoring_tree("reading")
    off = parse_topology(
        BASE.format(defaults="", leaf="")  # score = "off" by default
    )
    leaf = LeafAgent(off, "leaf", AgentSettings(host=mosquitto.host, port=mosquitto.port))
    assert leaf.subscriptions() == ["sensors/leaf"]
    assert "anomalies" not in leaf.status_detail().extra
    scoring = LeafAgent(topology, "leaf-1", AgentSettings(host=mosquitto.host, port=mosquitto.port))
    assert topology.model_topic() in scoring.subscriptions()


@pytest.fixture
def mosquitto(shared_mosquitto):
    """This worker's broker (conftest): the tests here are isolated by their topic prefix."""
    return shared_mosquitto
