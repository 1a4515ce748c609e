"""A real-time soak (issue 21, item 6): processes, faults every few minutes, RSS and open files.

One command (from the repository root)::

    python -m benchmarks.soak --minutes 35            # the soak of the report
    python -m benchmarks.soak --minutes 3 --fault-every 40 --sample-every 10   # a short try

What runs, as deployed: a private Mosquitto (`edge_runtime.broker.LocalMosquitto` on a free
127.0.0.1 port above 20000, persistence on), and one ``edge-runtime agent`` process per node
of a small tree -- ``root``, one aggregator ``site-a`` and ``--leaves`` leaves, each leaf with
its own ``--state-dir`` (as the systemd unit runs them) -- fed continuously by a publisher in
this process: per leaf one sequenced source (``{"src", "seq", "x"}``, QoS 1, the map form
``replay`` sends) of Motes light rows (48 features, looped), ``--rate`` readings/s per leaf in
messages of ``--batch``. The publisher reconnects after a broker restart and continues its
sequence numbers (readings lost meanwhile show as gaps the leaves time out).

Faults every ``--fault-every`` seconds, in turn: SIGKILL a leaf and start it again (same
command and state directory), restart the broker (SIGTERM, start on the same port; its
persistence keeps the retained messages and sessions), SIGKILL the aggregator and start it
again. One leaf (the last) is never killed: the control.

Every ``--sample-every`` seconds: ``VmRSS`` (``/proc/PID/status``) and the number of open
file descriptors (``/proc/PID/fd``) of every agent and of the broker; per agent process
(incarnation) the first, last and largest sample, and whether it is flat: the last sample
within 10 % (RSS) and within 2 descriptors (files) of the first sample taken 2 minutes or
more into its life (start-up imports and the first blocks settle first). Also each
process's log lines, and at the end the leaves' confirmations (ingested and durable per
source) against what was sent.

The report: ``SOAK.md`` and ``soak.json`` in ``--out`` (default
``benchmarks/report/longevity/``). The run is bounded: ``--minutes`` plus a minute to stop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiomqtt
import numpy as np

from edge_runtime.broker import LocalMosquitto
from edge_runtime.datasets import load_dataset
from edge_runtime.wire import decode_confirm, encode_readings

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path(__file__).resolve().parent / "report" / "longevity"
WARMUP_S = 120.0  # samples before this age of a process are not its baseline


def free_port(low: int = 20001) -> int:
    """A free TCP port above 20000 on 127.0.0.1."""
    rng = np.random.default_rng()
    for _ in range(200):
        port = int(rng.integers(low, 60000))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


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


def proc_sample(pid: int) -> tuple[int, int] | None:
    """(VmRSS bytes, open file descriptors) of ``pid``; None if it is gone."""
    try:
        rss = 0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, ValueError):
        return None
    return rss, fds


@dataclass
class Incarnation:
    node: str
    pid: int
    started: float
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (age s, rss, fds)
    ended: str = "running"


class Soak:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.prefix = f"soak{os.getpid()}"
        self.leaves = [f"pi-{i:02d}" for i in range(1, args.leaves + 1)]
        self.nodes = ["root", "site-a", *self.leaves]
        self.topology = workdir / "soak.toml"
        self.topology.write_text(topology_text(self.prefix, args.leaves))
        self.port = free_port()
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
            got = proc_sample(inc.pid)
            if got is not None:
                inc.samples.append((now - inc.started, *got))

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


def proc_io(pid: int) -> dict[str, int]:
    """``/proc/PID/io`` as numbers (write_bytes: bytes sent to storage; syscw: writes)."""
    out = {}
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = int(value)
    return out


async def io_probe(args: argparse.Namespace, workdir: Path) -> dict[str, object]:
    """One leaf process with ``--state-dir`` under a real Mosquitto, fed ``--rate`` readings/s
    (default 100) in messages of ``--batch`` for ``--minutes``: its ``/proc/PID/io`` over the
    window after a warm-up, its ``fsync`` calls counted by ``strace -c`` where ptrace is
    allowed, and its checkpoints from its status document; extrapolated to a day."""
    args.leaves = 1
    soak = Soak(args, workdir)
    soak.start_broker()
    leaf = soak.leaves[0]
    soak.start_agent(leaf)
    stop = asyncio.Event()
    publisher = asyncio.create_task(soak.publish(stop))
    await asyncio.sleep(args.warmup)
    pid = soak.procs[leaf].pid
    first = proc_io(pid)
    ckpt0 = await _checkpoints(soak, leaf)
    t1 = time.monotonic()
    strace = None
    trace_out = workdir / "strace.txt"
    with contextlib.suppress(OSError):
        strace = subprocess.Popen(
            [
                "strace",
                "-f",
                "-c",
                "-e",
                "trace=fsync,fdatasync,rename,renameat,renameat2",
                "-o",
                str(trace_out),
                "-p",
                str(pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    await asyncio.sleep(args.minutes * 60.0)
    last = proc_io(pid)
    t2 = time.monotonic()
    ckpt1 = await _checkpoints(soak, leaf)
    if strace is not None:
        strace.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            strace.wait(timeout=10)
    stop.set()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(publisher, 10)
    soak.procs[leaf].send_signal(signal.SIGTERM)
    soak.procs[leaf].wait(timeout=30)
    soak.broker.stop()
    window = t2 - t1
    per_day = 86_400.0 / window
    fsyncs = None
    with contextlib.suppress(OSError):
        for line in trace_out.read_text().splitlines():
            parts = line.split()
            if parts and parts[-1] in ("fsync", "fdatasync") and len(parts) >= 5:
                fsyncs = (fsyncs or 0) + int(parts[3])
    delta = {k: last[k] - first[k] for k in last}
    checkpoints = None if ckpt0 is None or ckpt1 is None else ckpt1 - ckpt0
    return {
        "checkpoint_interval": args.checkpoint_interval,
        "rate": args.rate,
        "batch": args.batch,
        "window_s": round(window, 1),
        "io_delta": delta,
        "write_bytes_per_day": delta["write_bytes"] * per_day,
        "wchar_per_day": delta["wchar"] * per_day,
        "syscw_per_day": delta["syscw"] * per_day,
        "checkpoints": checkpoints,
        "checkpoints_per_day": None if checkpoints is None else checkpoints * per_day,
        "fsyncs": fsyncs,
        "fsyncs_per_day": None if fsyncs is None else fsyncs * per_day,
        "strace": trace_out.read_text() if trace_out.exists() else None,
        "readings_sent": soak.sent[leaf],
    }


async def _checkpoints(soak: Soak, leaf: str) -> int | None:
    """The leaf's ``checkpoints`` from its retained status document (None if none came)."""
    topic = f"{soak.prefix}/root/site-a/{leaf}/status/detail"
    async with aiomqtt.Client("127.0.0.1", soak.port, timeout=5) as client:
        await client.subscribe(topic, qos=1)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(3.0):
                async for m in client.messages:
                    if isinstance(m.payload, bytes | bytearray) and m.payload:
                        return int(json.loads(m.payload)["extra"]["checkpoints"])
    return None


def write_report(result: dict[str, object], out: Path, argv: list[str]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(result, indent=1))
    procs: list[dict] = result["processes"]  # type: ignore[assignment]
    md = [
        "# Soak: processes under faults, RSS and open files (issue 21, item 6)",
        "",
        f"`python -m benchmarks.soak {' '.join(argv)}`: {result['minutes']} minutes, "
        f"Mosquitto, `root`, `site-a` and {len(result['leaves'])} leaves "  # type: ignore[arg-type]
        f"(each `edge-runtime agent` with `--state-dir`), fed {result['rate']} readings/s "
        f"per leaf in messages of {result['batch']}; a fault every few minutes. Method: "
        "the module docstring of `benchmarks/soak.py`.",
        "",
        "Faults: "
        + "; ".join(f"{t:.0f} s {what}" for t, what in result["faults"])  # type: ignore[union-attr]
        + ".",
        "",
        "| process | pid | ended | life (s) | samples | RSS first / at 2 min / last / max (MB) "
        "| open fds first / at 2 min / last / max | flat (RSS, fds) |",
        "|---|---:|---|---:|---:|---|---|---|",
    ]

    def mb(x: int | None) -> str:
        return "-" if x is None else f"{x / 1e6:.1f}"

    for p in procs:
        flat = (
            "n/a (< 5 min after warm-up)"
            if p["flat_rss"] is None
            else f"{'yes' if p['flat_rss'] else 'NO'}, {'yes' if p['flat_fd'] else 'NO'}"
        )
        md.append(
            f"| {p['node']} | {p['pid']} | {p['ended']} | {p['life_s']:.0f} | {p['samples']} "
            f"| {mb(p['rss_first'])} / {mb(p['rss_base'])} / {mb(p['rss_last'])} / "
            f"{mb(p['rss_max'])} | {p['fd_first']} / "
            f"{'-' if p['fd_base'] is None else p['fd_base']} / {p['fd_last']} / {p['fd_max']} "
            f"| {flat} |"
        )
    md += [
        "",
        "Readings sent per leaf and its last confirmation (source `soak:<leaf>`):",
        "",
        "| leaf | sent | ingested | durable |",
        "|---|---:|---:|---:|",
    ]
    for leaf in result["leaves"]:  # type: ignore[union-attr]
        c = result["confirms"].get(leaf, {})  # type: ignore[union-attr]
        src = f"soak:{leaf}"
        md.append(
            f"| {leaf} | {result['sent'][leaf]:,} | "  # type: ignore[index]
            f"{c.get('ingested', {}).get(src, -1) + 1:,} | "
            f"{c.get('durable', {}).get(src, -1) + 1:,} |"
        )
    md += [
        "",
        "Log lines per node over the whole soak (all incarnations): "
        + ", ".join(f"{k} {v}" for k, v in result["log_lines"].items())  # type: ignore[union-attr]
        + f"; publisher reconnects {result['publisher_reconnects']}.",
        "",
    ]
    path = out / "SOAK.md"
    path.write_text("\n".join(md))
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--minutes", type=float, default=35.0)
    p.add_argument("--leaves", type=int, default=3)
    p.add_argument("--rate", type=float, default=20.0, help="readings/s per leaf")
    p.add_argument("--batch", type=int, default=10, help="readings per message")
    p.add_argument("--fault-every", type=float, default=240.0, help="seconds")
    p.add_argument("--sample-every", type=float, default=60.0, help="seconds")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument(
        "--io",
        action="store_true",
        help="instead: one leaf at --rate (use 100) for --minutes, /proc/PID/io",
    )
    p.add_argument(
        "--checkpoint-interval",
        type=float,
        default=None,
        help="the leaves' --checkpoint-interval (default: the agent's own)",
    )
    p.add_argument("--warmup", type=float, default=30.0, help="--io: seconds before measuring")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="edge-soak-"))
    if args.io:
        io = asyncio.run(io_probe(args, workdir))
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "proc_io.json").write_text(json.dumps(io, indent=1))
        print(json.dumps({k: v for k, v in io.items() if k != "strace"}, indent=1))
        print(io.get("strace") or "")
        return 0
    soak = Soak(args, workdir)
    print(f"soak: {args.minutes} min, broker 127.0.0.1:{soak.port}, work dir {workdir}", flush=True)
    try:
        result = asyncio.run(soak.run())
    finally:
        for proc in soak.procs.values():
            if proc.poll() is None:
                proc.kill()
        with contextlib.suppress(Exception):
            soak.broker.keep_dir = False
            soak.broker.stop()
    path = write_report(result, args.out, argv if argv is not None else sys.argv[1:])
    print(f"report: {path}")
    print(path.read_text())
    if not args.keep:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
