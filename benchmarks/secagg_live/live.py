"""One live run: a private Mosquitto, the Motes light tree's agents in this process, the
readings published over MQTT, the root's model read from the broker, every payload counted.

`Scenario` says what runs (a topology file of the repository, changed in memory: the prefix,
the secure-aggregation keys, one ``noise_seed`` per leaf); `live_run` runs it once for one
seed and returns a `RunResult`.

How the releases are arranged (secure sum):

- The root and the leaves start first; block 0 is published and the run waits until every
  leaf holds it (``SecAggRelease.pending_rows``); only then do the two sites' aggregators
  start. A site's first slot is due ``secagg_slot_s`` after it starts (`SecAggSite`'s time
  grid), then every ``secagg_slot_s``: so slot 0 is never early for block 0.
- **One release per leaf** (``blocks = 1``): block 0 is all 964 readings of every leaf.
  Once both sites have released slot 0 the run waits for the root's model covering every
  reading, lets it settle (`SETTLE_S` without a new model) and takes the last model the
  broker delivered, then checks that each site has still released exactly one slot
  (``slots_released == 1``) and stops the agents, before slot 1 is due (slot 0 ends well
  under a second after its start, slot 1 is due one period later; a slot 1 started but
  not released changes nothing the root has). A run that breaks any of these is reported
  invalid, not scored.
- **Continual release** (``blocks = 4``): block ``k`` is rows ``241 k .. 241 k + 240`` of
  every leaf; block ``k + 1`` is published only after both sites ended slot ``k`` (so no
  reading of it can enter slot ``k``), and the run checks that every leaf holds it before
  either site starts slot ``k + 1`` (else invalid), and that slots 0-3 all released.

Today's private mode (mechanism ``"gaussian"``): all readings at once; the model is taken
once it covers every reading and settled.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
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
from edge_runtime.broker import LocalMosquitto
from edge_runtime.fpca import error_ratio
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology, parse_topology
from edge_runtime.wire import decode_subspace, encode_readings

__all__ = ["PREFIX", "RunResult", "Scenario", "build_topology", "live_run"]

PREFIX = "bench"
#: Rows per published readings message (a msgpack 2-D batch).
BATCH = 64
#: Seconds without a new root model before the last one is taken.
SETTLE_S = 1.0
#: Poll period of the in-process monitor (slot starts and ends), seconds.
POLL_S = 0.005
D = 48
SECAGG_KINDS = ("keys", "shares", "delivery", "masked", "unmask", "unmasked", "outcome", "roster")


@dataclass(frozen=True)
class Scenario:
    """What one row runs."""

    key: str
    label: str
    #: A topology file of the repository (its leaves' readings: Motes light, contiguous).
    topology: str
    #: Secure sum per site (mechanism "gaussian-secagg"), else today's private mode.
    secagg: bool = True
    threshold: int | None = None
    #: Blocks per leaf, one per slot (secure sum; 1 = one release per leaf).
    blocks: int = 1
    release_horizon: int | None = None
    slot_s: float = 5.0
    #: The sites' ``rank`` (None: the file's, 10): what a site's snapshot keeps of its
    #: noisy Gram matrix (`benchmarks.secagg` merges every direction, 48).
    site_rank: int | None = None


@dataclass
class RunResult:
    """One live run."""

    scenario: str
    seed: int
    valid: bool
    note: str = ""
    error: float = float("nan")
    #: Payload bytes per message kind (all topics), and messages per kind.
    bytes: dict[str, int] = field(default_factory=dict)
    messages: dict[str, int] = field(default_factory=dict)
    #: Slots started per site (secure sum), released per site.
    slots_started: int = 0
    slots_released: int = 0
    #: Seconds from each slot's start to its outcome (both sites, every slot).
    slot_seconds: list[float] = field(default_factory=list)
    #: Seconds from the last reading published to the first root model covering all.
    latency_s: float = float("nan")
    wall_s: float = float("nan")
    #: Which attempt of this (row, seed) this is (`benchmarks.secagg_live.run` retries an
    #: invalid run).
    attempt: int = 1


def _free_port(rng: random.Random) -> int:
    for _ in range(200):
        port = rng.randrange(20001, 60000)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port above 20000 on 127.0.0.1")


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


def _dump(doc: dict[str, Any]) -> str:
    lines = [f"{k} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict | list)]
    lines += [
        f"{k} = {_toml_value(v)}" for k, v in doc.items() if isinstance(v, list) and k != "nodes"
    ]
    for name, table in doc.items():
        if isinstance(table, dict):
            lines.append(f"[{name}]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    for node in doc.get("nodes", []):
        lines.append("[[nodes]]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in node.items()]
    return "\n".join(lines) + "\n"


def build_topology(scenario: Scenario, seed: int, root: Path) -> Topology:
    """The scenario's topology file with prefix `PREFIX`, its secure-aggregation keys and
    ``noise_seed = 1000 * seed + i`` on leaf ``i`` (1-based, file order)."""
    doc = tomllib.loads((root / scenario.topology).read_text(encoding="utf-8"))
    doc["prefix"] = PREFIX
    if scenario.release_horizon is not None:
        doc["defaults"]["release_horizon"] = scenario.release_horizon
    parents = {n.get("parent") for n in doc["nodes"]}
    i = 0
    for node in doc["nodes"]:
        if node["id"] not in parents:  # a leaf
            i += 1
            node["noise_seed"] = 1000 * seed + i
        elif "secagg_slot_s" in node:
            node["secagg_slot_s"] = float(scenario.slot_s)
            if scenario.threshold is not None:
                node["secagg_threshold"] = scenario.threshold
            if scenario.site_rank is not None:
                node["rank"] = scenario.site_rank
    return parse_topology(_dump(doc))


def kind_of(topic: str, sensors: dict[str, str]) -> str:
    """The message kind of ``topic``: a secagg kind, readings, snapshot, model, status, ..."""
    if topic in sensors:
        return "readings"
    levels = topic.split("/")
    if "secagg" in levels[1:-1]:
        return levels[levels.index("secagg", 1) + 1]
    if levels[-1] == "subspace":
        return "snapshot"
    if levels[-1] == "model":
        return "model"
    if "status" in levels[1:]:
        return "status"
    return levels[-1]


class _Monitor:
    """Slot starts and ends per site, read from the sites' cores every `POLL_S`."""

    def __init__(self, sites: dict[str, Any]) -> None:
        self.sites = sites
        self.start: dict[str, dict[int, float]] = {s: {} for s in sites}
        self.end: dict[str, dict[int, float]] = {s: {} for s in sites}
        self.outcomes: dict[str, list[dict[str, Any]]] = {s: [] for s in sites}

    def core(self, site: str) -> Any:
        return self.sites[site].secagg.site

    def ended(self, site: str) -> int:
        return len(self.end[site])

    def released(self, site: str) -> int:
        return int(self.core(site).status()["slots_released"])

    async def run(self) -> None:
        while True:
            now = time.monotonic()
            for name in self.sites:
                core = self.core(name)
                slot = core.slot
                if slot is not None and slot not in self.start[name]:
                    self.start[name][slot] = now
                status = core.status()
                for record in status["recent"]:
                    if record["slot"] not in self.end[name]:
                        self.end[name][record["slot"]] = now
                        self.start[name].setdefault(record["slot"], now)
                        self.outcomes[name].append(record)
            await asyncio.sleep(POLL_S)


async def _until(condition: Any, timeout_s: float, what: str) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            while not condition():
                await asyncio.sleep(POLL_S)
    except TimeoutError:
        raise _InvalidRunError(f"timed out after {timeout_s:g} s waiting for {what}") from None


class _InvalidRunError(Exception):
    pass


async def live_run(
    scenario: Scenario, seed: int, data_x: np.ndarray, parts: Sequence[np.ndarray], root: Path
) -> RunResult:
    """Run ``scenario`` once with the leaves' noise seeded by ``seed`` (`build_topology`)."""
    began = time.monotonic()
    topology = build_topology(scenario, seed, root)
    leaves = topology.leaves()
    assert len(leaves) == len(parts)
    rows = dict(zip(leaves, parts, strict=True))
    n_rows = {leaf: len(p) for leaf, p in rows.items()}
    sensors = {topology.nodes[leaf].sensor_topic: leaf for leaf in leaves}
    result = RunResult(scenario.key, seed, valid=False)
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    models: list[tuple[float, Any]] = []
    port = _free_port(random.Random(f"{scenario.key}-{seed}-{time.time_ns()}"))
    broker = LocalMosquitto(port=port)
    broker.start()
    try:
        settings = AgentSettings(host=broker.host, port=broker.port, timeout_s=5.0)
        async with contextlib.AsyncExitStack() as stack:
            counter = await stack.enter_async_context(
                aiomqtt.Client(broker.host, broker.port, timeout=5)
            )
            await counter.subscribe(f"{PREFIX}/#", qos=1)
            for topic in sensors:
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

            counting = asyncio.create_task(count())
            stack.callback(counting.cancel)
            agents: dict[str, Any] = {}
            aggregators = [n for n in topology.nodes if not topology.is_leaf(n)]
            site_ids = [n for n in aggregators if topology.secagg_leaves(n)]

            async def start(node: str) -> None:
                if topology.is_leaf(node):
                    agent = LeafAgent(topology, node, settings, n_features=D)
                else:
                    width = None if node == topology.root else D
                    agent = AggregatorAgent(topology, node, settings, n_features=width)
                agents[node] = await stack.enter_async_context(agent)

            # the sites last (secure sum): their slot grid starts when they start, and
            # block 0 is then already held by every leaf
            for node in [*(n for n in aggregators if n not in site_ids), *leaves]:
                await start(node)
            for agent in agents.values():
                await agent.wait_connected(10)
            sensor = await stack.enter_async_context(
                aiomqtt.Client(broker.host, broker.port, timeout=5)
            )

            async def publish(lo: int, hi: int) -> None:
                for leaf, values in rows.items():
                    topic = topology.nodes[leaf].sensor_topic
                    for i in range(lo, min(hi, len(values)), BATCH):
                        chunk = values[i : min(i + BATCH, hi, len(values))]
                        await sensor.publish(topic, encode_readings(chunk), qos=1)

            def complete() -> bool:
                return bool(models) and dict(models[-1][1].provenance) == n_rows

            try:
                blocks = scenario.blocks if scenario.secagg else 1
                size = -(-max(n_rows.values()) // blocks)
                sent_last = time.monotonic()
                monitor = None
                for k in range(blocks):
                    await publish(k * size, (k + 1) * size)
                    sent_last = time.monotonic()
                    if not scenario.secagg:
                        break
                    want = {leaf: min(size, n - k * size) for leaf, n in n_rows.items()}
                    await _until(
                        lambda w=want: all(
                            agents[leaf].secagg.release is not None
                            and agents[leaf].secagg.release.pending_rows == w[leaf]
                            for leaf in leaves
                        ),
                        60.0 if k == 0 else 2 * scenario.slot_s,
                        f"block {k} at the leaves",
                    )
                    held = time.monotonic()
                    if monitor is None:  # block 0 is held: start the sites, slot 0 is due
                        for node in site_ids:  # one period from now
                            await start(node)
                        for node in site_ids:
                            await agents[node].wait_connected(10)
                        sites = {n: agents[n] for n in site_ids}
                        assert all(a.secagg.site is not None for a in sites.values())
                        monitor = _Monitor(sites)
                        monitoring = asyncio.create_task(monitor.run())
                        stack.callback(monitoring.cancel)
                    late = [s for s in sites if monitor.start[s].get(k, held + 1) < held]
                    if late:
                        raise _InvalidRunError(
                            f"block {k} not held by every leaf when {late} started slot {k}"
                        )
                    await _until(
                        lambda k=k, m=monitor, ss=sites: all(m.ended(s) > k for s in ss),
                        3 * scenario.slot_s,
                        f"slot {k}'s outcome",
                    )
                    if any(monitor.released(s) != k + 1 for s in sites):
                        reasons = [
                            f"{s}: {r.get('reason')}"
                            for s in sites
                            for r in monitor.outcomes[s]
                            if not r["released"]
                        ]
                        raise _InvalidRunError(
                            f"slot {k}: released {[monitor.released(s) for s in sites]} slots"
                            f" ({'; '.join(reasons)})"
                        )
                await _until(complete, 6 * scenario.slot_s, "the root's model covering every leaf")
                first = next(t for t, m in models if dict(m.provenance) == n_rows)
                result.latency_s = first - sent_last
                while time.monotonic() - models[-1][0] < SETTLE_S:
                    await asyncio.sleep(POLL_S)
                model = models[-1][1]
                if not complete():
                    raise _InvalidRunError("the last model does not cover every leaf")
                if monitor is not None:
                    released = [monitor.released(s) for s in sites]
                    if any(r != blocks for r in released):
                        raise _InvalidRunError(
                            f"{released} slots released when the model was taken"
                        )
                    result.slots_released = blocks
                    result.slots_started = max(len(monitor.start[s]) for s in sites)
                    result.slot_seconds = [
                        monitor.end[s][k] - monitor.start[s][k]
                        for s in sites
                        for k in sorted(monitor.end[s])
                    ]
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
    result.bytes = dict(sizes)
    result.messages = dict(counts)
    result.wall_s = time.monotonic() - began
    return result
