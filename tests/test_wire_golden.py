"""Rolling upgrades: golden fixtures of every message kind, the schema-version rule, and an
agent refusing a message from a future version against a real broker.

The fixtures in ``tests/golden/`` are the bytes each release's encoders wrote
(``tests/golden/make_golden.py``, never rewritten); every later release must decode them to
the same fields.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path

import aiomqtt
import msgpack
import numpy as np
import pytest
import structlog
from golden.make_golden import CASES, GOLDEN_DIR, encode
from helpers import low_rank_data, tree_topology

from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.fpca import FPCAEdge
from edge_runtime.settings import AgentSettings
from edge_runtime.wire import (
    REASONS,
    SCHEMA_VERSIONS,
    SUBSPACE_VERSION,
    SubspaceMessage,
    WireError,
    decode_confirm,
    decode_readings,
    decode_status,
    decode_subspace,
    encode_subspace,
    understood_versions,
)
from edge_runtime.wire.fedpower import decode_reply, decode_round
from edge_runtime.wire.fields import Schema, require

DECODERS: dict[str, Callable[[bytes], object]] = {
    "subspace": decode_subspace,
    "readings": decode_readings,
    "status": decode_status,
    "confirm": decode_confirm,
    "round": decode_round,
    "reply": decode_reply,
}
LABELS = {
    "subspace": "subspace message",
    "readings": "readings",
    "status": "status document",
    "confirm": "confirmation",
    "round": "round message",
    "reply": "reply message",
}


def fixture_bytes(name: str) -> bytes:
    return (GOLDEN_DIR / name).read_bytes()


def plain(value: object) -> object:
    """A decoded field as the plain data `CASES` writes (arrays as nested lists)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {key: plain(item) for key, item in dataclasses.asdict(value).items()}
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    return value


def field_of(msg: object, name: str) -> object:
    """``msg.name``, or its subspace's (a snapshot's basis, singular values and mean)."""
    if hasattr(msg, name):
        return getattr(msg, name)
    return getattr(msg.subspace, name)  # type: ignore[attr-defined]


def parsed(payload: bytes) -> object:
    """The payload's map or array, JSON or msgpack as the fixture's extension says."""
    return json.loads(payload) if payload[:1] in (b"{", b"[") else msgpack.unpackb(payload)


def repacked(payload: bytes, obj: object) -> bytes:
    if payload[:1] in (b"{", b"["):
        return json.dumps(obj).encode()
    return msgpack.packb(obj, use_bin_type=True)


# --------------------------------------------------------------------------- golden fixtures
def test_the_golden_directory_holds_exactly_the_fixtures_of_the_cases() -> None:
    files = {path.name for path in Path(GOLDEN_DIR).iterdir() if path.is_file()}
    assert files - {"make_golden.py"} == set(CASES)


def test_every_kind_has_a_golden_fixture_of_each_version_it_reads() -> None:
    have = {(case["kind"], case["version"]) for case in CASES.values()}
    for kind, current in SCHEMA_VERSIONS.items():
        for version in understood_versions(current):
            assert (kind, version) in have, f"no golden fixture of {kind} v{version}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_fixture_decodes_to_its_fields(name: str) -> None:
    case = CASES[name]
    msg = DECODERS[case["kind"]](fixture_bytes(name))
    got = {key: plain(field_of(msg, key)) for key in case["fields"]}
    assert got == case["fields"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_fixture_carries_the_version_of_its_name(name: str) -> None:
    case = CASES[name]
    obj = parsed(fixture_bytes(name))
    version = obj.get("v", 1) if isinstance(obj, dict) else 1  # readings: none means 1
    assert version == case["version"]
    assert f"-v{version}" in name


CURRENT = sorted(
    name for name, case in CASES.items() if case["version"] == SCHEMA_VERSIONS[case["kind"]]
)


@pytest.mark.parametrize("name", CURRENT)
def test_todays_encoder_writes_the_golden_bytes_of_the_current_version(name: str) -> None:
    kind = CASES[name]["kind"]
    assert encode(name) == fixture_bytes(name), (
        f"{kind} is encoded differently from its golden v{SCHEMA_VERSIONS[kind]} fixture "
        f"{name}: raise the kind's version and add a fixture (tests/golden/make_golden.py)"
    )


@pytest.mark.parametrize(
    "name", sorted(name for name in CASES if isinstance(parsed(fixture_bytes(name)), dict))
)
def test_a_golden_message_of_a_future_version_is_refused_cleanly(name: str) -> None:
    kind = CASES[name]["kind"]
    payload = fixture_bytes(name)
    obj = parsed(payload)
    assert isinstance(obj, dict)
    future = SCHEMA_VERSIONS[kind] + 1
    obj["v"] = future
    with pytest.raises(WireError) as info:
        DECODERS[kind](repacked(payload, obj))
    assert info.value.reason == "version_newer"
    understood = understood_versions(SCHEMA_VERSIONS[kind])
    versions = " and ".join(map(str, understood))
    assert str(info.value) == (
        f"{LABELS[kind]} has schema version {future}, newer than this node understands "
        f"({'versions' if len(understood) > 1 else 'version'} {versions}): upgrade this node"
    )


# --------------------------------------------------------------------------- the version rule
def test_a_node_reads_the_current_version_and_the_one_before() -> None:
    assert understood_versions(1) == (1,)
    assert understood_versions(2) == (1, 2)
    assert understood_versions(7) == (6, 7)
    for bad in (0, -1, True, 1.0):
        with pytest.raises(ValueError, match="schema version"):
            understood_versions(bad)  # type: ignore[arg-type]


def test_every_kind_is_at_version_1_in_this_release() -> None:
    assert dict(SCHEMA_VERSIONS) == dict.fromkeys(DECODERS, 1)
    assert {"version", "version_newer"} <= set(REASONS)


def test_a_kind_at_version_2_upgrades_version_1_maps_and_refuses_the_others() -> None:
    def from_v1(obj: dict[str, object]) -> dict[str, object]:  # v2 renamed "n" to "count"
        return {**{k: v for k, v in obj.items() if k != "n"}, "v": 2, "count": obj["n"]}

    schema = Schema("test message", 2, from_previous=from_v1)
    assert require({"v": 2, "count": 5}, ("v", "count"), schema) == {"v": 2, "count": 5}
    assert require({"v": 1, "n": 5}, ("v", "count"), schema) == {"v": 2, "count": 5}
    with pytest.raises(WireError) as info:
        require({"v": 3}, ("v", "count"), schema)
    assert info.value.reason == "version_newer"
    assert str(info.value) == (
        "test message has schema version 3, newer than this node understands "
        "(versions 1 and 2): upgrade this node"
    )
    with pytest.raises(WireError) as info:
        require({"v": 0, "count": 5}, ("v", "count"), schema)
    assert (info.value.reason, str(info.value)) == (
        "version",
        "test message has schema version 0, older than this node understands "
        "(versions 1 and 2): upgrade the sender",
    )


def test_a_kind_with_unversioned_maps_reads_them_as_that_version() -> None:
    at_2 = Schema("readings", 2, unversioned=1, from_previous=lambda o: {**o, "v": 2})
    assert require({"x": 1}, ("x",), at_2) == {"x": 1, "v": 2}
    at_3 = Schema("readings", 3, unversioned=1)
    with pytest.raises(WireError) as info:
        require({"x": 1}, ("x",), at_3)
    assert info.value.reason == "version"


# --------------------------------------------------------------------------- an agent, real broker
@pytest.mark.mqtt
async def test_an_aggregator_counts_and_logs_a_snapshot_of_a_future_version_and_carries_on(
    mosquitto,
) -> None:
    topology = tree_topology(sites=1, leaves_per_site=2, rank=2, block_size=5)
    node = topology.nodes["leaf-0-0"]
    estimator = FPCAEdge(6, node.rank, block_size=node.block_size)
    estimator.partial_fit(low_rank_data(30, 6, 2, seed=7))
    sub = estimator.subspace
    valid = encode_subspace(
        SubspaceMessage("leaf-0-0", "e0", 1, sub, 1.0, provenance={"leaf-0-0": 30})
    )
    future = msgpack.unpackb(valid)
    future["v"] = SUBSPACE_VERSION + 1
    settings = AgentSettings(host=mosquitto.host, port=mosquitto.port, timeout_s=5.0)
    topic = topology.subspace_topic("leaf-0-0")
    with structlog.testing.capture_logs() as logs:
        async with AggregatorAgent(topology, "site-0", settings) as agg:
            await agg.wait_connected(5)
            async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
                await client.publish(topic, msgpack.packb(future, use_bin_type=True), qos=1)
                async with asyncio.timeout(10):
                    while not agg.rejects:
                        await asyncio.sleep(0.02)
                assert agg.snapshot is None
                await client.publish(topic, valid, qos=1)  # the same node, today's version
                async with asyncio.timeout(10):
                    while agg.snapshot is None:
                        await asyncio.sleep(0.02)
            assert agg.snapshot.n_samples == 30
    assert dict(agg.rejects) == {"version_newer": 1}
    lines = [e for e in logs if e["event"] == "message_rejected"]
    assert [(e["reason"], e["topic"]) for e in lines] == [("version_newer", topic)]
    assert lines[0]["detail"] == (
        f"subspace message has schema version {SUBSPACE_VERSION + 1}, newer than this node "
        f"understands (version {SUBSPACE_VERSION}): upgrade this node"
    )
