"""The soak itself: Mosquitto and one agent process per node of a small tree, a publisher
feeding the leaves, faults in turn, samples, and the result."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiomqtt
import numpy as np

from benchmarks.processes import sample_process
from edge_runtime.broker import LocalMosquitto, free_port
from edge_runtime.datasets import load_dataset
from edge_runtime.wire import decode_confirm, encode_readings

WARMUP_S = 120.0  # samples before this age of a process are not its baseline



@dataclass
class Incarnation:
    """One process of a node (a restart makes a new one) and its samples."""

    node: str
    pid: int
    started: float
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (age s, rss, fds)
    ended: str = "running"

def topology_text(prefix: str, leaves: int) -> str:
    lines = [
        'name = "soak"',
        f'prefix = "{prefix}"',
        "[defaults]",
        "rank = 10",
        "block_size = 50",
        "valid_range = [0.0, 2000.0]",
        'out_of_range = "reject"',
        "[[nodes]]",
        'id = "root"',
        "[[nodes]]",
        'id = "site-a"',
        'parent = "root"',
    ]
    for i in range(1, leaves + 1):
        lines += [
            "[[nodes]]",
            f'id = "pi-{i:02d}"',
            'parent = "site-a"',
            f'sensor_topic = "{prefix}-sensors/pi-{i:02d}"',
        ]
    return "\n".join(lines) + "\n"


class Soak:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.prefix = f"soak{os.getpid()}"
        self.leaves = [f"pi-{i:02d}" for i in range(1, args.leaves + 1)]
        self.nodes = ["root", "site-a", *self.leaves]
        self.topology = workdir / "soak.toml"
        self.topology.write_text(topology_text(self.prefix, args.leaves))
        self.port = free_port(low=20001)
        self.broker = LocalMosquitto(port=self.port, keep_dir=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.incarnations: list[Incarnation] = []
        self.current: dict[str, Incarnation] = {}
        self.broker_inc: list[Incarnation] = []
        self.faults: list[tuple[float, str]] = []
        self.sent: dict[str, int] = dict.fromkeys(self.leaves, 0)
        self.confirms: dict[str, dict[str, object]] = {}
        self.publisher_reconnects = 0
        self.t0 = time.monotonic()
        self.data = np.asarray(load_dataset("motes-light"), dtype=np.float64)

    # ------------------------------------------------------------ processes
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def start_agent(self, node: str) -> None:
        state = self.workdir / "state" / node
        state.mkdir(parents=True, exist_ok=True)
        log = open(self.workdir / f"{node}.log", "ab")  # noqa: SIM115 - handed to the child
        cmd = [
            sys.executable,
            "-m",
            "edge_runtime.cli",
            "agent",
            "--topology",
            str(self.topology),
            "--node",
            node,
            "--broker",
            f"mqtt://127.0.0.1:{self.port}",
        ]
        if node in self.leaves:
            cmd += ["--state-dir", str(state)]
            if self.args.checkpoint_interval is not None:
                cmd += ["--checkpoint-interval", str(self.args.checkpoint_interval)]
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(self.workdir)
        )
        log.close()
        self.procs[node] = proc
        inc = Incarnation(node, proc.pid, time.monotonic())
        self.incarnations.append(inc)
        self.current[node] = inc

    def kill_agent(self, node: str) -> None:
        proc = self.procs[node]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        self.current[node].ended = "SIGKILL"

    def start_broker(self) -> None:
        self.broker.start()
        assert self.broker.pid is not None
        inc = Incarnation("mosquitto", self.broker.pid, time.monotonic())
        self.broker_inc.append(inc)
        self.current["mosquitto"] = inc

    def restart_broker(self) -> None:
        self.broker.stop()
        self.current["mosquitto"].ended = "restarted"
        self.start_broker()

    def sample(self) -> None:
        now = time.monotonic()
        for inc in list(self.current.values()):
            if inc.ended != "running":
                continue
            got = sample_process(inc.pid)
            if got is not None:
                inc.samples.append((now - inc.started, got.rss_bytes, got.fds))

    # ------------------------------------------------------------ publisher
    async def publish(self, stop: asyncio.Event) -> None:
        """Every leaf: ``rate`` readings/s in messages of ``batch``, one source, sequence
        numbers continuing across broker restarts; confirmations recorded."""
        args = self.args
        interval = args.batch / args.rate
        row = 0
        sensor = {leaf: f"{self.prefix}-sensors/{leaf}" for leaf in self.leaves}
        confirm_topics = {f"{self.prefix}/root/site-a/{leaf}/confirm": leaf for leaf in self.leaves}
        next_t = time.monotonic()
        while not stop.is_set():
            try:
                async with aiomqtt.Client("127.0.0.1", self.port, timeout=5) as client:
                    for topic in confirm_topics:
                        await client.subscribe(topic, qos=1)

                    async def listen(c: aiomqtt.Client = client) -> None:
                        async for m in c.messages:
                            leaf = confirm_topics.get(str(m.topic))
                            if leaf and isinstance(m.payload, bytes | bytearray) and m.payload:
                                with contextlib.suppress(Exception):
                                    conf = decode_confirm(bytes(m.payload))
                                    self.confirms[leaf] = {
                                        "ingested": dict(conf.ingested),
                                        "durable": dict(conf.durable),
                                        "at_s": round(self.elapsed(), 1),
                                    }

                    listener = asyncio.create_task(listen())
                    try:
                        while not stop.is_set():
                            for leaf in self.leaves:
                                idx = np.arange(row, row + args.batch) % self.data.shape[0]
                                payload = encode_readings(
                                    self.data[idx], source=f"soak:{leaf}", seq=self.sent[leaf]
                                )
                                await client.publish(sensor[leaf], payload, qos=1)
                                self.sent[leaf] += args.batch
                            row = (row + args.batch) % self.data.shape[0]
                            next_t += interval
                            delay = next_t - time.monotonic()
                            if delay > 0:
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

    async def read_confirms(self) -> None:
        """The leaves' retained confirmations, now."""
        topics = {f"{self.prefix}/root/site-a/{leaf}/confirm": leaf for leaf in self.leaves}
        async with aiomqtt.Client("127.0.0.1", self.port, timeout=5) as client:
            for topic in topics:
                await client.subscribe(topic, qos=1)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(3.0):
                    async for m in client.messages:
                        leaf = topics.get(str(m.topic))
                        if leaf and isinstance(m.payload, bytes | bytearray) and m.payload:
                            conf = decode_confirm(bytes(m.payload))
                            self.confirms[leaf] = {
                                "ingested": dict(conf.ingested),
                                "durable": dict(conf.durable),
                                "at_s": round(self.elapsed(), 1),
                            }

    # ---------------------------------------------------------------- run
    async def run(self) -> dict[str, object]:
        args = self.args
        self.start_broker()
        for node in self.nodes:
            self.start_agent(node)
        stop = asyncio.Event()
        publisher = asyncio.create_task(self.publish(stop))
        faults = self._fault_plan()
        end = self.t0 + args.minutes * 60.0
        next_sample = time.monotonic() + 5.0
        next_fault = self.t0 + args.fault_every
        try:
            while time.monotonic() < end:
                now = time.monotonic()
                if now >= next_sample:
                    self.sample()
                    next_sample += args.sample_every
                if now >= next_fault and now < end - args.fault_every / 2:
                    kind = next(faults)
                    await self._fault(kind)
                    next_fault += args.fault_every
                await asyncio.sleep(1.0)
            self.sample()
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(publisher, 10)
            await asyncio.sleep(15.0)  # leaves: the idle checkpoint and confirmation
            with contextlib.suppress(Exception):
                await self.read_confirms()
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for node, proc in self.procs.items():
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                if self.current[node].ended == "running":
                    self.current[node].ended = f"exit {proc.returncode}"
            self.broker.stop()
        return self._result()

    def _fault_plan(self):
        killable = self.leaves[:-1] or self.leaves
        i = 0
        while True:
            yield ("kill", killable[i % len(killable)])
            yield ("broker", "")
            yield ("kill", "site-a")
            yield ("broker", "")
            i += 1

    async def _fault(self, fault: tuple[str, str]) -> None:
        kind, node = fault
        at = round(self.elapsed(), 1)
        if kind == "kill":
            self.kill_agent(node)
            await asyncio.sleep(2.0)
            self.start_agent(node)
            self.faults.append((at, f"SIGKILL {node}, restarted"))
        else:
            await asyncio.to_thread(self.restart_broker)
            self.faults.append((at, "broker restarted"))
        print(f"[{at:7.1f}s] {self.faults[-1][1]}", flush=True)

    # ------------------------------------------------------------- result
    def _result(self) -> dict[str, object]:
        rows = []
        for inc in [*self.incarnations, *self.broker_inc]:
            s = inc.samples
            if not s:
                continue
            base = next((x for x in s if x[0] >= WARMUP_S), None)
            last = s[-1]
            flat_rss = flat_fd = None
            if base is not None and last[0] - base[0] >= 300:
                flat_rss = last[1] <= base[1] * 1.10
                flat_fd = last[2] <= base[2] + 2
            rows.append(
                {
                    "node": inc.node,
                    "pid": inc.pid,
                    "ended": inc.ended,
                    "life_s": round(last[0], 0),
                    "samples": len(s),
                    "rss_first": s[0][1],
                    "rss_base": None if base is None else base[1],
                    "rss_last": last[1],
                    "rss_max": max(x[1] for x in s),
                    "fd_first": s[0][2],
                    "fd_base": None if base is None else base[2],
                    "fd_last": last[2],
                    "fd_max": max(x[2] for x in s),
                    "flat_rss": flat_rss,
                    "flat_fd": flat_fd,
                    "series": [(round(a, 0), r, f) for a, r, f in s],
                }
            )
        log_lines = {}
        for node in self.nodes:
            path = self.workdir / f"{node}.log"
            with contextlib.suppress(OSError):
                log_lines[node] = sum(1 for _ in path.open("rb"))
        return {
            "minutes": self.args.minutes,
            "leaves": self.leaves,
            "rate": self.args.rate,
            "batch": self.args.batch,
            "port": self.port,
            "faults": self.faults,
            "processes": rows,
            "sent": self.sent,
            "confirms": self.confirms,
            "publisher_reconnects": self.publisher_reconnects,
            "log_lines": log_lines,
            "workdir": str(self.workdir),
        }
