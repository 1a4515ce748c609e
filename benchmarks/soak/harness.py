"""The soak itself: Mosquitto and one agent process per node of a small tree, a publisher
feeding the leaves, faults in turn, samples of every process, and the result."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiomqtt
import numpy as np

from benchmarks.processes import sample_process
from benchmarks.soak.agent_process import AgentProcess
from edge_runtime.broker import LocalMosquitto, free_port
from edge_runtime.datasets import load_dataset
from edge_runtime.wire import decode_confirm, encode_readings

WARMUP_S = 120.0  # samples before this age of a process are not its baseline


@dataclass
class Incarnation:
    """One process of a node (a restart makes a new one) and its samples (age s, RSS, fds)."""

    node: str
    pid: int
    started: float
    samples: list[tuple[float, int, int]] = field(default_factory=list)
    ended: str = "running"


def topology_text(prefix: str, leaves: int) -> str:
    """``root``, ``site-a`` and ``leaves`` leaves ``pi-NN`` (rank 10, blocks of 50)."""
    lines = [f'name = "soak"\nprefix = "{prefix}"\n[defaults]\nrank = 10\nblock_size = 50',
             'valid_range = [0.0, 2000.0]\nout_of_range = "reject"',
             '[[nodes]]\nid = "root"\n[[nodes]]\nid = "site-a"\nparent = "root"']
    lines += [f'[[nodes]]\nid = "pi-{i:02d}"\nparent = "site-a"\n'
              f'sensor_topic = "{prefix}-sensors/pi-{i:02d}"' for i in range(1, leaves + 1)]
    return "\n".join(lines) + "\n"


class Soak:
    """The processes of one soak (``args``: the command's options) in ``workdir``."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args, self.workdir = args, workdir
        self.prefix = f"soak{os.getpid()}"
        self.leaves = [f"pi-{i:02d}" for i in range(1, args.leaves + 1)]
        self.nodes = ["root", "site-a", *self.leaves]
        self.topology = workdir / "soak.toml"
        self.topology.write_text(topology_text(self.prefix, args.leaves))
        self.port = free_port(low=20001)
        self.broker = LocalMosquitto(port=self.port, keep_dir=True)
        self.procs: dict[str, AgentProcess] = {}
        self.incarnations: list[Incarnation] = []
        self.broker_inc: list[Incarnation] = []
        self.current: dict[str, Incarnation] = {}
        self.faults: list[tuple[float, str]] = []
        self.sent: dict[str, int] = dict.fromkeys(self.leaves, 0)
        self.confirms: dict[str, dict[str, object]] = {}
        self.confirm_topics = {f"{self.prefix}/root/site-a/{leaf}/confirm": leaf
                               for leaf in self.leaves}
        self.publisher_reconnects = 0
        self.t0 = time.monotonic()
        self.data = np.asarray(load_dataset("motes-light"), dtype=np.float64)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def start_agent(self, node: str) -> None:
        """``edge-runtime agent`` for ``node`` (a leaf with its ``--state-dir``), 1 BLAS thread."""
        extra: list[str] = []
        if node in self.leaves:
            state = self.workdir / "state" / node
            state.mkdir(parents=True, exist_ok=True)
            extra = ["--state-dir", str(state)]
            if self.args.checkpoint_interval is not None:
                extra += ["--checkpoint-interval", str(self.args.checkpoint_interval)]
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        proc = AgentProcess(self.topology, node, f"mqtt://127.0.0.1:{self.port}",
                            self.workdir / f"{node}.log", extra, cwd=self.workdir, env=env)
        self.procs[node] = proc
        self.current[node] = Incarnation(node, proc.pid, time.monotonic())
        self.incarnations.append(self.current[node])

    def start_broker(self) -> None:
        self.broker.start()
        assert self.broker.pid is not None
        self.current["mosquitto"] = Incarnation("mosquitto", self.broker.pid, time.monotonic())
        self.broker_inc.append(self.current["mosquitto"])

    def sample(self) -> None:
        now = time.monotonic()
        for inc in list(self.current.values()):
            if inc.ended == "running" and (got := sample_process(inc.pid)) is not None:
                inc.samples.append((now - inc.started, got.rss_bytes, got.fds))

    def _confirm(self, message: aiomqtt.Message) -> None:
        leaf = self.confirm_topics.get(str(message.topic))
        if leaf and isinstance(message.payload, bytes | bytearray) and message.payload:
            conf = decode_confirm(bytes(message.payload))
            self.confirms[leaf] = {"ingested": dict(conf.ingested), "durable": dict(conf.durable),
                                   "at_s": round(self.elapsed(), 1)}

    async def publish(self, stop: asyncio.Event) -> None:
        """Every leaf: ``--rate`` readings/s in messages of ``--batch``, one source, sequence
        numbers continuing across broker restarts; confirmations recorded."""
        args = self.args
        interval, row, next_t = args.batch / args.rate, 0, time.monotonic()
        while not stop.is_set():
            try:
                async with aiomqtt.Client("127.0.0.1", self.port, timeout=5) as client:
                    for topic in self.confirm_topics:
                        await client.subscribe(topic, qos=1)

                    async def listen(c: aiomqtt.Client = client) -> None:
                        async for m in c.messages:
                            with contextlib.suppress(Exception):
                                self._confirm(m)

                    listener = asyncio.create_task(listen())
                    try:
                        while not stop.is_set():
                            idx = np.arange(row, row + args.batch) % self.data.shape[0]
                            for leaf in self.leaves:
                                payload = encode_readings(self.data[idx], source=f"soak:{leaf}",
                                                          seq=self.sent[leaf])
                                topic = f"{self.prefix}-sensors/{leaf}"
                                await client.publish(topic, payload, qos=1)
                                self.sent[leaf] += args.batch
                            row = (row + args.batch) % self.data.shape[0]
                            next_t += interval
                            if (delay := next_t - time.monotonic()) > 0:
                                with contextlib.suppress(TimeoutError):
                                    await asyncio.wait_for(stop.wait(), delay)
                            else:
                                next_t = time.monotonic()  # behind: do not burst
                    finally:
                        listener.cancel()
                        with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
                            await listener
            except aiomqtt.MqttError:
                self.publisher_reconnects += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)
                next_t = time.monotonic()

    async def read_retained(self, topics: list[str], handle) -> None:
        """``handle`` every message on ``topics`` for 3 s (their retained ones first)."""
        async with aiomqtt.Client("127.0.0.1", self.port, timeout=5) as client:
            for topic in topics:
                await client.subscribe(topic, qos=1)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(3.0):
                    async for m in client.messages:
                        if handle(m):
                            return

    async def run(self) -> dict[str, object]:
        args = self.args
        self.start_broker()
        for node in self.nodes:
            self.start_agent(node)
        stop = asyncio.Event()
        publisher = asyncio.create_task(self.publish(stop))
        faults, end = self._fault_plan(), self.t0 + args.minutes * 60.0
        next_sample, next_fault = time.monotonic() + 5.0, self.t0 + args.fault_every
        try:
            while (now := time.monotonic()) < end:
                if now >= next_sample:
                    self.sample()
                    next_sample += args.sample_every
                if next_fault <= now < end - args.fault_every / 2:
                    await self._fault(*next(faults))
                    next_fault += args.fault_every
                await asyncio.sleep(1.0)
            self.sample()
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(publisher, 10)
            await asyncio.sleep(15.0)  # leaves: the idle checkpoint and confirmation
            with contextlib.suppress(Exception):
                await self.read_retained(list(self.confirm_topics), self._confirm)
            for proc in self.procs.values():
                proc.terminate()
            for node, proc in self.procs.items():
                proc.stop(30.0)
                if self.current[node].ended == "running":
                    self.current[node].ended = f"exit {proc.proc.returncode}"
            self.broker.stop()
        return self._result()

    def _fault_plan(self) -> Iterator[tuple[str, str]]:
        """A leaf (never the last: the control) killed, the broker restarted, the aggregator
        killed, the broker restarted; again, the next leaf."""
        killable = self.leaves[:-1] or self.leaves
        for i in itertools.count():
            yield from (("kill", killable[i % len(killable)]), ("broker", ""), ("kill", "site-a"),
                        ("broker", ""))

    async def _fault(self, kind: str, node: str) -> None:
        at = round(self.elapsed(), 1)
        if kind == "kill":
            self.procs[node].kill()
            self.current[node].ended = "SIGKILL"
            await asyncio.sleep(2.0)
            self.start_agent(node)
            self.faults.append((at, f"SIGKILL {node}, restarted"))
        else:
            await asyncio.to_thread(self._restart_broker)
            self.faults.append((at, "broker restarted"))
        print(f"[{at:7.1f}s] {self.faults[-1][1]}", flush=True)

    def _restart_broker(self) -> None:
        self.broker.stop()
        self.current["mosquitto"].ended = "restarted"
        self.start_broker()

    def _result(self) -> dict[str, object]:
        rows = []
        for inc in [*self.incarnations, *self.broker_inc]:
            if not (s := inc.samples):
                continue
            base = next((x for x in s if x[0] >= WARMUP_S), None)
            last = s[-1]
            flat = base is not None and last[0] - base[0] >= 300
            rows.append({
                "node": inc.node, "pid": inc.pid, "ended": inc.ended, "life_s": round(last[0], 0),
                "samples": len(s), "rss_first": s[0][1], "rss_base": base and base[1],
                "rss_last": last[1], "rss_max": max(x[1] for x in s), "fd_first": s[0][2],
                "fd_base": base and base[2], "fd_last": last[2], "fd_max": max(x[2] for x in s),
                "flat_rss": last[1] <= base[1] * 1.10 if flat and base else None,
                "flat_fd": last[2] <= base[2] + 2 if flat and base else None,
                "series": [(round(a, 0), r, f) for a, r, f in s],
            })
        log_lines = {}
        for node in self.nodes:
            with contextlib.suppress(OSError):
                log_lines[node] = sum(1 for _ in (self.workdir / f"{node}.log").open("rb"))
        return {"minutes": self.args.minutes, "leaves": self.leaves, "rate": self.args.rate,
                "batch": self.args.batch, "port": self.port, "faults": self.faults,
                "processes": rows, "sent": self.sent, "confirms": self.confirms,
                "publisher_reconnects": self.publisher_reconnects, "log_lines": log_lines,
                "workdir": str(self.workdir)}
