"""One live run: a private Mosquitto, the Motes light tree's agents in this process, the readings
published over MQTT, the root's model read from the broker, every payload counted by kind.

`build_topology` changes a topology file in memory (the prefix, the secure-aggregation keys, one
``noise_seed`` per leaf); `live_run` runs a `Scenario` once for one seed.

How the releases are arranged (secure sum): the root and the leaves start first; block 0 is
published and the run waits until every leaf holds it (``SecAggRelease.pending_rows``); only
then do the sites start, so their slot 0, due ``secagg_slot_s`` later on their time grid, holds
every leaf's block. **One release per leaf** (``blocks = 1``): once both sites released slot 0
and the root's model covers every reading and settled (`SETTLE_S` without a new model), the
last model is taken and each site must have released exactly one slot. **Continual**
(``blocks = 4``): block ``k + 1`` (241 rows of every leaf) is published only after both sites
ended slot ``k``, and must be held by every leaf before either site starts slot ``k + 1``. A run
breaking any of these is invalid, not scored. Today's private mode: all readings at once, the
model taken once it covers every reading and settled.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import tomllib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomqtt
import numpy as np

from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.broker import LocalMosquitto, free_port
from edge_runtime.declaration import value_text
from edge_runtime.fpca import error_ratio
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology, parse_topology
from edge_runtime.wire import decode_subspace, encode_readings

PREFIX = "bench"
BATCH = 64  # rows per published readings message (a msgpack 2-D batch)
SETTLE_S = 1.0  # seconds without a new root model before the last one is taken
POLL_S = 0.005  # poll period of the waits and of the slot monitor, seconds
D = 48
SECAGG_KINDS = ("keys", "shares", "delivery", "masked", "unmask", "unmasked", "outcome", "roster")


@dataclass(frozen=True)
class Scenario:
    """What one row runs: a topology file of the repository (Motes light, contiguous), the
    secure sum per site (else today's private mode), its threshold, blocks per leaf (one per
    slot), horizon, slot period and the sites' ``rank`` (None: the file's)."""

    key: str
    label: str
    topology: str
    secagg: bool = True
    threshold: int | None = None
    blocks: int = 1
    release_horizon: int | None = None
    slot_s: float = 5.0
    site_rank: int | None = None


@dataclass
class RunResult:
    """One live run: its error ratio, payload bytes and messages per kind, slots started and
    released per site, seconds per slot (both sites), from the last reading to the first
    root model covering all, its wall time and which attempt of this (row, seed) it is."""

    scenario: str
    seed: int
    valid: bool
    note: str = ""
    error: float = float("nan")
    bytes: dict[str, int] = field(default_factory=dict)
    messages: dict[str, int] = field(default_factory=dict)
    slots_started: int = 0
    slots_released: int = 0
    slot_seconds: list[float] = field(default_factory=list)
    latency_s: float = float("nan")
    wall_s: float = float("nan")
    attempt: int = 1


def build_topology(scenario: Scenario, seed: int, root: Path) -> Topology:
    """The scenario's topology file with prefix `PREFIX`, its secure-aggregation keys and
    ``noise_seed = 1000 * seed + i`` on leaf ``i`` (1-based, file order)."""
    doc = tomllib.loads((root / scenario.topology).read_text(encoding="utf-8"))
    doc["prefix"] = PREFIX
    if scenario.release_horizon is not None:
        doc["defaults"]["release_horizon"] = scenario.release_horizon
    parents = {n.get("parent") for n in doc["nodes"]}
    leaves = [n for n in doc["nodes"] if n["id"] not in parents]
    for i, node in enumerate(leaves, 1):
        node["noise_seed"] = 1000 * seed + i
    for node in doc["nodes"]:
        if "secagg_slot_s" in node:
            node["secagg_slot_s"] = float(scenario.slot_s)
            site = {"secagg_threshold": scenario.threshold, "rank": scenario.site_rank}
            node.update({k: v for k, v in site.items() if v is not None})
    return parse_topology("\n".join(f"{k} = {value_text(v)}" for k, v in doc.items()))


def kind_of(topic: str, sensors: dict[str, str]) -> str:
    """The message kind of ``topic``: a secagg kind, readings, snapshot, model, status, ..."""
    levels = topic.split("/")
    if topic in sensors:
        return "readings"
    if "secagg" in levels[1:-1]:
        return levels[levels.index("secagg", 1) + 1]
    if levels[-1] in ("subspace", "model"):
        return "snapshot" if levels[-1] == "subspace" else "model"
    return "status" if "status" in levels[1:] else levels[-1]


async def start_agents(stack: contextlib.AsyncExitStack, topology: Topology, settings: Any,
                       nodes: Sequence[str], agents: dict[str, Any]) -> None:
    """Start the agents of ``nodes`` in ``stack`` (into ``agents``), then wait until each is
    connected (10 s)."""
    for node in nodes:
        if topology.is_leaf(node):
            agent: Any = LeafAgent(topology, node, settings, n_features=D)
        else:
            width = None if node == topology.root else D
            agent = AggregatorAgent(topology, node, settings, n_features=width)
        agents[node] = await stack.enter_async_context(agent)
    for node in nodes:
        await agents[node].wait_connected(10)


async def publish(client: aiomqtt.Client, topology: Topology, rows: dict[str, np.ndarray],
                  lo: int, hi: int) -> None:
    """Rows ``lo:hi`` of every leaf to its sensor topic, `BATCH` per message, QoS 1."""
    for leaf, values in rows.items():
        end = min(hi, len(values))
        for i in range(lo, end, BATCH):
            chunk = values[i : min(i + BATCH, end)]
            await client.publish(topology.nodes[leaf].sensor_topic, encode_readings(chunk), qos=1)


def site_core(agent: AggregatorAgent) -> Any:
    """A secure-aggregation site's core (`SecAggSite`) inside its aggregator agent."""
    return agent.secagg.release.site  # type: ignore[union-attr]


class _Monitor:
    """Slot starts and ends per site, read from the sites' cores every `POLL_S`."""

    def __init__(self, sites: dict[str, Any]) -> None:
        self.sites = sites
        self.start: dict[str, dict[int, float]] = {s: {} for s in sites}
        self.end: dict[str, dict[int, float]] = {s: {} for s in sites}
        self.outcomes: dict[str, list[dict[str, Any]]] = {s: [] for s in sites}

    def released(self, site: str) -> int:
        return int(site_core(self.sites[site]).status()["slots_released"])

    async def run(self) -> None:
        while True:
            now = time.monotonic()
            for name, agent in self.sites.items():
                core = site_core(agent)
                if core.slot is not None and core.slot not in self.start[name]:
                    self.start[name][core.slot] = now
                for record in core.status()["recent"]:
                    if record["slot"] not in self.end[name]:
                        self.end[name][record["slot"]] = now
                        self.start[name].setdefault(record["slot"], now)
                        self.outcomes[name].append(record)
            await asyncio.sleep(POLL_S)


class _InvalidRunError(Exception):
    pass


async def _until(condition: Any, timeout_s: float, what: str) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            while not condition():
                await asyncio.sleep(POLL_S)
    except TimeoutError:
        raise _InvalidRunError(f"timed out after {timeout_s:g} s waiting for {what}") from None


async def live_run(
    scenario: Scenario, seed: int, data_x: np.ndarray, parts: Sequence[np.ndarray], root: Path
) -> RunResult:
    """Run ``scenario`` once with the leaves' noise seeded by ``seed`` (`build_topology`)."""
    began = time.monotonic()
    topology = build_topology(scenario, seed, root)
    leaves = topology.leaves()
    rows = dict(zip(leaves, parts, strict=True))
    n_rows = {leaf: len(p) for leaf, p in rows.items()}
    sensors = {topology.nodes[leaf].sensor_topic: leaf for leaf in leaves}
    result = RunResult(scenario.key, seed, valid=False)
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    models: list[tuple[float, Any]] = []
    broker = LocalMosquitto(port=free_port(low=20001))
    broker.start()
    try:
        settings = AgentSettings(host=broker.host, port=broker.port, timeout_s=5.0)
        async with contextlib.AsyncExitStack() as stack:
            client = aiomqtt.Client(broker.host, broker.port, timeout=5)
            counter = await stack.enter_async_context(client)
            for topic in [f"{PREFIX}/#", *sensors]:
                await counter.subscribe(topic, qos=1)
            model_topic = topology.model_topic()

            async def count() -> None:
                async for message in counter.messages:
                    topic = str(message.topic)
                    payload = bytes(message.payload) if message.payload else b""  # type: ignore[arg-type]
                    kind = kind_of(topic, sensors)
                    counts[kind] += 1
                    sizes[kind] += len(payload)
                    if topic == model_topic and payload:
                        models.append((time.monotonic(), decode_subspace(payload)))

            stack.callback(asyncio.create_task(count()).cancel)
            agents: dict[str, Any] = {}
            aggregators = [n for n in topology.nodes if not topology.is_leaf(n)]
            site_ids = [n for n in aggregators if topology.secagg_leaves(n)]
            # the sites last (secure sum): their slot grid starts when they start
            first = [n for n in aggregators if n not in site_ids]
            await start_agents(stack, topology, settings, [*first, *leaves], agents)
            client = aiomqtt.Client(broker.host, broker.port, timeout=5)
            sensor = await stack.enter_async_context(client)

            def complete() -> bool:
                return bool(models) and dict(models[-1][1].provenance) == n_rows

            try:
                blocks = scenario.blocks if scenario.secagg else 1
                size = -(-max(n_rows.values()) // blocks)
                monitor: _Monitor | None = None
                sites: dict[str, Any] = {}
                for k in range(blocks):
                    await publish(sensor, topology, rows, k * size, (k + 1) * size)
                    sent_last = time.monotonic()
                    if not scenario.secagg:
                        break
                    want = {leaf: min(size, n - k * size) for leaf, n in n_rows.items()}
                    await _until(
                        lambda w=want: all(
                            agents[leaf].release_shell.release is not None
                            and agents[leaf].release_shell.release.pending_rows == w[leaf]
                            for leaf in leaves
                        ),
                        60.0 if k == 0 else 2 * scenario.slot_s, f"block {k} at the leaves",
                    )
                    held = time.monotonic()
                    if monitor is None:  # block 0 is held: start the sites, slot 0 is due
                        await start_agents(stack, topology, settings, site_ids, agents)
                        sites = {n: agents[n] for n in site_ids}  # one period from now
                        monitor = _Monitor(sites)
                        stack.callback(asyncio.create_task(monitor.run()).cancel)
                    if late := [s for s in sites if monitor.start[s].get(k, held + 1) < held]:
                        raise _InvalidRunError(
                            f"block {k} not held by every leaf when {late} started slot {k}")
                    await _until(lambda k=k, m=monitor: min(len(e) for e in m.end.values()) > k,
                                 3 * scenario.slot_s, f"slot {k}'s outcome")
                    if any(monitor.released(s) != k + 1 for s in sites):
                        reasons = [f"{s}: {r.get('reason')}" for s in sites
                                   for r in monitor.outcomes[s] if not r["released"]]
                        done = [monitor.released(s) for s in sites]
                        why = "; ".join(reasons)
                        raise _InvalidRunError(f"slot {k}: released {done} slots ({why})")
                await _until(complete, 6 * scenario.slot_s, "the root's model covering every leaf")
                first_t = next(t for t, m in models if dict(m.provenance) == n_rows)
                result.latency_s = first_t - sent_last
                while time.monotonic() - models[-1][0] < SETTLE_S:
                    await asyncio.sleep(POLL_S)
                model = models[-1][1]
                if not complete():
                    raise _InvalidRunError("the last model does not cover every leaf")
                if monitor is not None:
                    released = [monitor.released(s) for s in sites]
                    if any(r != blocks for r in released):
                        raise _InvalidRunError(
                            f"{released} slots released when the model was taken")
                    result.slots_released = blocks
                    result.slots_started = max(len(monitor.start[s]) for s in sites)
                    result.slot_seconds = [monitor.end[s][k] - monitor.start[s][k]
                                           for s in sites for k in sorted(monitor.end[s])]
                    survivors = {r.get("survivors") for s in sites for r in monitor.outcomes[s]}
                    result.note = f"survivors {sorted(x for x in survivors if x)}"
                result.error = error_ratio(data_x, model.subspace.basis)
                result.valid = True
            except _InvalidRunError as exc:
                result.note = str(exc)
            for agent in agents.values():
                await agent.aclose()
            await asyncio.sleep(0.2)  # the last status documents and Last Wills
    finally:
        broker.stop()
    result.bytes, result.messages = dict(sizes), dict(counts)
    result.wall_s = time.monotonic() - began
    return result
