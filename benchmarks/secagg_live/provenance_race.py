"""Reproduction: a secure-aggregation site's snapshot can count readings of a slot it has not
released yet (``python -m benchmarks secagg-race [SEED]``).

Continual release on Motes light (`benchmarks.secagg_live.live`'s arrangement, 5 s slots, t = 4):
every site snapshot on the broker is printed with its provenance and the slots its site had
released when it arrived. A snapshot counting more readings than the released slots hold was
made from the leaves' status documents (``readings_released``) before the slot's outcome: the
root then reports covering readings not in its estimate yet, until the outcome's snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Any

import aiomqtt

from benchmarks.privacy import motes_tree as mt
from benchmarks.secagg_live.live import Scenario, build_topology, publish, site_core, start_agents
from edge_runtime.broker import LocalMosquitto, free_port
from edge_runtime.logs import configure_logging
from edge_runtime.settings import AgentSettings
from edge_runtime.wire import decode_subspace

SITES = ("site-a", "site-b")


async def main(seed: int) -> int:
    """Run once; print every site snapshot; returns how many were premature."""
    configure_logging("error")
    data = mt.load_motes()
    scenario = Scenario("race", "race", "topologies/motes-secagg.toml", threshold=4, blocks=4,
                        release_horizon=4)
    topology = build_topology(scenario, seed, Path(__file__).resolve().parents[2])
    leaves = topology.leaves()
    rows = dict(zip(leaves, data.parts, strict=True))
    broker = LocalMosquitto(port=free_port(low=20001))
    broker.start()
    seen: list[tuple[str, int, int, int]] = []
    try:
        settings = AgentSettings(host=broker.host, port=broker.port, timeout_s=5.0)
        async with contextlib.AsyncExitStack() as stack:
            client = await stack.enter_async_context(aiomqtt.Client(broker.host, broker.port))
            await client.subscribe(f"{topology.prefix}/root/+/subspace", qos=1)
            agents: dict[str, Any] = {}
            await start_agents(stack, topology, settings, ["root", *leaves, *SITES], agents)

            def released(site: str) -> int:
                return int(site_core(agents[site]).status()["slots_released"])

            async def listen() -> None:
                async for message in client.messages:
                    site = str(message.topic).split("/")[-2]
                    snap = decode_subspace(bytes(message.payload))  # type: ignore[arg-type]
                    n = sum(dict(snap.provenance).values())
                    seen.append((site, snap.seq, n, released(site)))

            stack.callback(asyncio.create_task(listen()).cancel)
            sensor = await stack.enter_async_context(aiomqtt.Client(broker.host, broker.port))
            for k in range(4):
                await publish(sensor, topology, rows, 241 * k, 241 * (k + 1))
                while not all(released(s) > k for s in SITES):
                    await asyncio.sleep(0.01)
            await asyncio.sleep(1.5)
    finally:
        broker.stop()
    premature = 0
    for site, seq, n, rel in seen:
        flag = n > 4 * 241 * rel
        premature += flag
        print(f"{site} snapshot seq {seq}: provenance {n} readings; the site had released {rel}"
              f" slots ({4 * 241 * rel} readings)" + ("  <-- PREMATURE" if flag else ""))
    print(f"premature snapshots: {premature}")
    return premature


def cli(argv: list[str]) -> int:
    """``python -m benchmarks secagg-race [SEED]``: print the snapshots; exit status 0."""
    asyncio.run(main(int(argv[0]) if argv else 0))
    return 0


if __name__ == "__main__":
    cli(sys.argv[1:])
