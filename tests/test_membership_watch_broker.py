"""Joins and forgets as ``edge-runtime watch`` and the dashboard show them, against the real
broker (issue 23): an open aggregator admits a leaf the topology does not declare, and later
forgets it when its retained snapshot is deleted (a zero-length retained publish, as
``retire --forget`` does). ``watch`` runs as the installed command; the dashboard's MQTT
follower and view model run in the test. Every wait is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import aiomqtt
import pytest
from helpers import low_rank_data

from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.dashboard import DashboardState
from edge_runtime.dashboard.follower import Follower
from edge_runtime.fpca import FPCAEdge
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import parse_topology
from edge_runtime.wire import SubspaceMessage, encode_subspace

pytestmark = pytest.mark.mqtt

ENTRY = str(Path(sys.executable).parent / "edge-runtime")
WAIT_S = 10.0  # a single wait; the whole test is bounded by TEST_S
TEST_S = 18.0


def topology_text() -> str:
    """root -> site-0 (open; declares leaf-0-0); a unique prefix."""
    return f"""
name = "fleet"
prefix = "w{uuid.uuid4().hex[:10]}"
[defaults]
rank = 3
[[nodes]]
id = "root"
[[nodes]]
id = "site-0"
parent = "root"
open = true
[nodes.admit]
max_reading_rate = 1000
[[nodes]]
id = "leaf-0-0"
parent = "site-0"
"""


def snapshot(leaf: str, rows, seq: int = 1) -> SubspaceMessage:
    sub = FPCAEdge(rows.shape[1], 3, block_size=10).fit(rows).subspace
    return SubspaceMessage(
        node_id=leaf,
        epoch=f"{leaf}-e",
        seq=seq,
        subspace=sub,
        timestamp=0.0,
        provenance={leaf: sub.n_samples},
        deployment="fleet",
    )


async def wait_for(predicate: Callable[[], bool], what: str, seen: Callable[[], object]) -> None:
    try:
        async with asyncio.timeout(WAIT_S):
            while not predicate():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"no {what} within {WAIT_S} s; saw {seen()!r}") from None


async def test_watch_and_the_dashboard_show_a_leaf_joining_and_being_forgotten(
    tmp_path: Path, mosquitto
) -> None:
    text = topology_text()
    path = tmp_path / "fleet.toml"
    path.write_text(text, encoding="utf-8")
    topology = parse_topology(text, path)
    settings = AgentSettings(
        host=mosquitto.host, port=mosquitto.port, timeout_s=5.0, wire_dtype="float64"
    )
    data = low_rank_data(130, 8, 3, seed=31)
    declared, joined = snapshot("leaf-0-0", data[:40]), snapshot("pi-09", data[40:90])
    pi09_topic = topology.subspace_topic("leaf-0-0").replace("leaf-0-0", "pi-09")
    assert "pi-09" not in topology.nodes

    state = DashboardState(topology)
    stop = asyncio.Event()
    lines: list[str] = []

    async def read(stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            lines.append(line.decode().rstrip("\n"))

    def dashboard() -> dict[str, object]:
        snap = state.snapshot(0.0)
        rows = {m["aggregator"]: m for m in snap["membership"]}  # type: ignore[union-attr]
        return {"site-0": rows.get("site-0"), "events": snap["membership_events"]}

    async def publish(topic: str, payload: bytes) -> None:
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            await client.publish(topic, payload, qos=1, retain=True)

    watch = await asyncio.create_subprocess_exec(
        ENTRY, "watch", "--topology", str(path), "--broker",
        f"mqtt://{mosquitto.host}:{mosquitto.port}", "--timeout", "60",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert watch.stdout is not None
    reader = asyncio.create_task(read(watch.stdout))
    follower = asyncio.create_task(Follower(state, settings).run(stop))
    try:
        async with (
            asyncio.timeout(TEST_S),
            AggregatorAgent(topology, "root", settings) as root,
            AggregatorAgent(topology, "site-0", settings) as site,
        ):
            await root.wait_connected(5)
            await site.wait_connected(5)
            await publish(topology.subspace_topic("leaf-0-0"), encode_subspace(declared))
            # watch prints a root model only once it follows the status documents too
            await wait_for(
                lambda: any(line.startswith("root n_samples=40 ") for line in lines),
                "first root model line from watch",
                lambda: lines,
            )
            # an aggregator sends a status document on a change of its health (or every 30 s)
            assert dashboard()["site-0"] is None

            await publish(pi09_topic, encode_subspace(joined))
            await wait_for(
                lambda: "site-0 joined: pi-09 (joins=1)" in lines, "join line", lambda: lines
            )
            await wait_for(
                lambda: (dashboard()["site-0"] or {}).get("joined") == ["pi-09"],  # type: ignore[attr-defined]
                "pi-09 in the dashboard's joined",
                dashboard,
            )

            await publish(pi09_topic, b"")  # retire --forget
            forgot = "site-0 forgot: pi-09 n_samples=50 (forgets=1)"
            await wait_for(lambda: forgot in lines, "forget line", lambda: lines)
            await wait_for(
                lambda: "pi-09" in dashboard()["site-0"]["forgotten"],  # type: ignore[index]
                "pi-09 in the dashboard's forgotten",
                dashboard,
            )
            row = dashboard()["site-0"]
            assert row["joined"] == [] and (row["joins"], row["forgets"]) == (1, 1)  # type: ignore[index]
            assert row["forgotten"]["pi-09"]["n_samples"] == 50  # type: ignore[index]
            events = [(e["event"], e["child"]) for e in dashboard()["events"]]  # type: ignore[union-attr]
            assert events == [("joined", "pi-09"), ("forgotten", "pi-09")]
            assert site.core.forgets == 1 and site.core.joins == 1

            # the next root model's line carries the counts
            more = snapshot("leaf-0-0", data[:80], seq=2)
            await publish(topology.subspace_topic("leaf-0-0"), encode_subspace(more))
            await wait_for(
                lambda: any(
                    line.startswith("root n_samples=80 ") and line.endswith("| joins=1 forgets=1")
                    for line in lines
                ),
                "a root model line with the counts",
                lambda: lines,
            )
        assert lines.index("site-0 joined: pi-09 (joins=1)") < lines.index(forgot)
        assert sum(" joined: " in line or " forgot: " in line for line in lines) == 2
    finally:
        stop.set()
        if watch.returncode is None:
            watch.terminate()
        try:
            await asyncio.wait_for(watch.wait(), 5.0)
        except TimeoutError:
            watch.kill()
            await watch.wait()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(follower, 5.0)
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
