"""Reproduction: a secure-aggregation site's snapshot can count readings of a slot it has not
released yet (``python -m benchmarks.secagg_live.provenance_race [seed]``).

Continual release on Motes light (`benchmarks.secagg_live.live`'s arrangement, 5 s slots,
t = 4): every site snapshot on the broker is printed with its provenance and the number of
slots its site had released when the snapshot arrived. A snapshot counting more readings
than the released slots hold was made from the leaves' status documents (``readings_released``,
published right after each leaf's unmask response) before the slot's outcome: the site's
shell (`edge_runtime.agents.aggregator.shell.secagg`, ``_count`` sets ``_recount`` once
any slot released) sends its old noisy Gram with the new counts. The root then reports
covering readings that are not in its estimate yet, until the outcome's snapshot follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
from pathlib import Path

import aiomqtt

from benchmarks.privacy import motes_tree as mt
from benchmarks.secagg_live.live import D, Scenario, _free_port, build_topology
from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.broker import LocalMosquitto
from edge_runtime.logs import configure_logging
from edge_runtime.settings import AgentSettings
from edge_runtime.wire import decode_subspace, encode_readings


async def main(seed: int) -> int:
    """Run once; print every site snapshot; returns how many were premature."""
    configure_logging("error")
    data = mt.load_motes()
    scenario = Scenario(
        "race", "race", "topologies/motes-secagg.toml", threshold=4, blocks=4, release_horizon=4
    )
    topology = build_topology(scenario, seed, Path(__file__).resolve().parents[2])
    leaves = topology.leaves()
    rows = dict(zip(leaves, data.parts, strict=True))
    broker = LocalMosquitto(port=_free_port(random.Random()))
    broker.start()
    seen: list[tuple[str, int, int, int]] = []
    try:
        settings = AgentSettings(host=broker.host, port=broker.port, timeout_s=5.0)
        async with contextlib.AsyncExitStack() as stack:
            client = await stack.enter_async_context(aiomqtt.Client(broker.host, broker.port))
            await client.subscribe(f"{topology.prefix}/root/+/subspace", qos=1)
            agents: dict[str, object] = {}
            for node in ["root", *leaves, "site-a", "site-b"]:
                if topology.is_leaf(node):
                    agent = LeafAgent(topology, node, settings, n_features=D)
                else:
                    width = None if node == "root" else D
                    agent = AggregatorAgent(topology, node, settings, n_features=width)
                agents[node] = await stack.enter_async_context(agent)
            for agent in agents.values():
                await agent.wait_connected(10)  # type: ignore[attr-defined]

            def released(site: str) -> int:
                return int(agents[site].secagg.site.status()["slots_released"])  # type: ignore[attr-defined]

            async def listen() -> None:
                async for message in client.messages:
                    site = str(message.topic).split("/")[-2]
                    snap = decode_subspace(bytes(message.payload))  # type: ignore[arg-type]
                    n = sum(dict(snap.provenance).values())
                    seen.append((site, snap.seq, n, released(site)))

            task = asyncio.create_task(listen())
            stack.callback(task.cancel)
            sensor = await stack.enter_async_context(aiomqtt.Client(broker.host, broker.port))
            for k in range(4):
                for leaf, values in rows.items():
                    for i in range(241 * k, 241 * (k + 1), 64):
                        chunk = values[i : min(i + 64, 241 * (k + 1))]
                        topic = topology.nodes[leaf].sensor_topic
                        await sensor.publish(topic, encode_readings(chunk), qos=1)
                while not all(released(s) > k for s in ("site-a", "site-b")):
                    await asyncio.sleep(0.01)
            await asyncio.sleep(1.5)
    finally:
        broker.stop()
    premature = 0
    for site, seq, n, rel in seen:
        flag = n > 4 * 241 * rel
        premature += flag
        print(
            f"{site} snapshot seq {seq}: provenance {n} readings; the site had released {rel}"
            f" slots ({4 * 241 * rel} readings)" + ("  <-- PREMATURE" if flag else "")
        )
    print(f"premature snapshots: {premature}")
    return premature


def cli(argv: list[str]) -> int:
    """``python -m benchmarks secagg-race [SEED]``: print the snapshots; exit status 0."""
    asyncio.run(main(int(argv[0]) if argv else 0))
    return 0


if __name__ == "__main__":
    cli(sys.argv[1:])
