"""Fault-injection helpers: agent processes by pid, a recording MQTT monitor, an MQTT proxy.

Everything here talks to a real Mosquitto and real ``edge-runtime`` processes:

- `Cluster` starts ``edge-runtime agent`` subprocesses (one per node), signals them by pid
  (SIGKILL, SIGTERM, SIGSTOP) and stops every one it started, bounded, in `Cluster.stop_all`.
  Each process logs JSON lines (structlog, stderr is a file) that `AgentProc.events` parses.
- `Monitor` subscribes to ``<prefix>/#`` and records every message with its arrival time
  (``time.time()``), reconnecting when the broker goes away; it decodes the root's model.
- `MqttProxy` is a small asyncio TCP proxy for MQTT 3.1.1/5 that forwards bytes unchanged
  and records, per topic, the sequence numbers of the sensor readings a client *acknowledged*
  (PUBACK) — what a client has taken responsibility for — and can hold a connection open
  after the client died (the broker then only learns of it by its keepalive: a power cut).

The tests run in the event loop that also runs the monitor and the proxy, so every wait here
is an ``await`` (never ``time.sleep`` or a blocking ``Popen.wait``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import aiomqtt
import numpy as np

from edge_runtime.fpca import FPCAEdge, Subspace
from edge_runtime.fpca.merge_tree import MergeTree
from edge_runtime.topology import Topology, load_topology
from edge_runtime.wire import SubspaceMessage, WireError, decode_readings, decode_subspace

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
KEEPALIVE_S = 5.0  # AgentSettings.keepalive_s default; the agent CLI has no flag for it


# ------------------------------------------------------------------------------ topology
def topology_text(
    prefix: str,
    sites: Mapping[str, Iterable[str]],
    *,
    rank: int = 3,
    block_size: int = 20,
    idle_flush_s: float = 0.2,
) -> str:
    """TOML of root -> sites -> leaves with explicit sensor topics under ``<prefix>-sensors``."""
    lines = [
        'name = "faults"',
        f'prefix = "{prefix}"',
        "[defaults]",
        f"rank = {rank}",
        f"block_size = {block_size}",
        f"idle_flush_s = {idle_flush_s}",
        "[data]",
        'split = "contiguous"',
        "[[nodes]]",
        'id = "root"',
    ]
    for site, leaves in sites.items():
        lines += ["[[nodes]]", f'id = "{site}"', 'parent = "root"']
        for leaf in leaves:
            lines += [
                "[[nodes]]",
                f'id = "{leaf}"',
                f'parent = "{site}"',
                f'sensor_topic = "{prefix}-sensors/{leaf}"',
            ]
    return "\n".join(lines) + "\n"


TREE = {"site-0": ["leaf-0-0", "leaf-0-1"], "site-1": ["leaf-1-0", "leaf-1-1"]}


def write_topology(
    directory: Path, name: str = "tree.toml", *, prefix: str | None = None, sites=None, **kw
) -> tuple[Path, Topology]:
    prefix = prefix or f"f{uuid.uuid4().hex[:10]}"
    path = directory / name
    path.write_text(topology_text(prefix, sites or TREE, **kw))
    return path, load_topology(path)


# ------------------------------------------------------------------------------ reference
def offline_model(topology: Topology, data: np.ndarray) -> tuple[Subspace, dict[str, Subspace]]:
    """The no-fault estimate computed offline, exactly as the agents compute it.

    Each leaf runs FPCA-Edge over its rows in order and publishes its tracked subspace;
    each aggregator merges its children's latest snapshots in a `MergeTree` over its
    children in topology order; the root's model is its merge truncated to its rank. The
    result depends only on the leaves' final states, not on arrival order.
    Returns (root model, {node: subspace}).
    """
    split = topology.split_rows(data.shape[0])
    subs: dict[str, Subspace] = {}
    for leaf, rows in split.items():
        cfg = topology.nodes[leaf]
        est = FPCAEdge(data.shape[1], cfg.rank, block_size=cfg.block_size)
        est.partial_fit(data[rows])
        subs[leaf] = est.tracked_subspace

    def merged(node: str) -> Subspace:
        if topology.is_leaf(node):
            return subs[node]
        tree = MergeTree(topology.children(node))
        for child in topology.children(node):
            tree.update(child, merged(child))
        subs[node] = tree.result
        return tree.result

    root = topology.root
    return merged(root).truncate(topology.nodes[root].rank), subs


# ------------------------------------------------------------------------------ processes
def cli_args(*args: str) -> list[str]:
    return [PYTHON, "-m", "edge_runtime.cli", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


@dataclass
class AgentProc:
    """One ``edge-runtime`` subprocess: its pid, log file and start time (wall clock)."""

    name: str
    popen: subprocess.Popen
    log_path: Path
    started: float

    @property
    def pid(self) -> int:
        return self.popen.pid

    def events(self) -> list[dict]:
        """The JSON log lines written so far (other lines are skipped)."""
        out = []
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return out
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def event_times(self, event: str) -> list[float]:
        """Wall-clock times (``time.time()`` scale) of every log event named ``event``."""
        return [
            log_time(e)
            for e in self.events()
            if e.get("event") == event and isinstance(e.get("timestamp"), str)
        ]

    def tail(self, n: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def log_time(event: Mapping[str, object]) -> float:
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


def spawn(name: str, args: list[str], log_dir: Path) -> AgentProc:
    log_dir.mkdir(parents=True, exist_ok=True)
    n = len(list(log_dir.glob(f"{name}.*.log")))
    log_path = log_dir / f"{name}.{n}.log"
    out_path = log_dir / f"{name}.{n}.out"
    with log_path.open("wb") as err, out_path.open("wb") as out:
        popen = subprocess.Popen(
            args,
            cwd=ROOT,
            env=_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    return AgentProc(name, popen, log_path, time.time())


def stdout_of(proc: AgentProc) -> str:
    return proc.log_path.with_suffix(".out").read_text(errors="replace")


async def wait_exit(proc: AgentProc, timeout_s: float) -> int | None:
    """The exit status, or None if still running after ``timeout_s`` seconds (non-blocking)."""
    deadline = time.monotonic() + timeout_s
    while True:
        code = proc.popen.poll()
        if code is not None or time.monotonic() >= deadline:
            return code
        await asyncio.sleep(0.05)


def send_signal(proc: AgentProc, sig: int) -> None:
    """Signal the process by pid (only if it has not been reaped, so the pid is still ours)."""
    if proc.popen.poll() is None:
        os.kill(proc.pid, sig)


async def terminate(proc: AgentProc, grace_s: float = 5.0) -> int | None:
    """SIGCONT + SIGTERM, then SIGKILL after ``grace_s``; always reaps."""
    if proc.popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
            os.kill(proc.pid, signal.SIGTERM)
        if await wait_exit(proc, grace_s) is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            await wait_exit(proc, 5.0)
    return proc.popen.poll()


class Cluster:
    """Agent processes of one topology, started and stopped by pid."""

    def __init__(self, work: Path, topology_path: Path, topology: Topology, broker_url: str):
        self.work = work
        self.topology_path = topology_path
        self.topology = topology
        self.broker_url = broker_url
        self.log_dir = work / "logs"
        self.procs: dict[str, AgentProc] = {}
        self.history: list[AgentProc] = []

    def start(
        self, node: str, *, broker_url: str | None = None, extra: Iterable[str] = ()
    ) -> AgentProc:
        args = cli_args(
            "agent", "--log-level", "info",
            "--topology", str(self.topology_path), "--node", node,
            "--broker", broker_url or self.broker_url, *extra,
        )  # fmt: skip
        proc = spawn(node, args, self.log_dir)
        self.procs[node] = proc
        self.history.append(proc)
        return proc

    def start_all(self, nodes: Iterable[str] | None = None, **kw) -> None:
        for node in nodes if nodes is not None else self.topology.nodes:
            self.start(node, **kw)

    def replay(self, data: Path, *extra: str, topology: Path | None = None) -> AgentProc:
        args = cli_args(
            "replay", "--topology", str(topology or self.topology_path),
            "--data", str(data), "--broker", self.broker_url, *extra,
        )  # fmt: skip
        proc = spawn("replay", args, self.log_dir)
        self.history.append(proc)
        return proc

    def watch(self, *extra: str) -> AgentProc:
        args = cli_args(
            "watch", "--topology", str(self.topology_path), "--broker", self.broker_url, *extra
        )
        proc = spawn("watch", args, self.log_dir)
        self.history.append(proc)
        return proc

    def dead(self) -> dict[str, str]:
        """Agents that exited although nobody stopped them: {node: log tail}."""
        return {
            node: p.tail()
            for node, p in self.procs.items()
            if p.popen.poll() is not None and p.popen.returncode != 0
        }

    async def stop_all(self, grace_s: float = 5.0) -> dict[str, int | None]:
        """Stop every process ever started here (SIGTERM, SIGKILL after ``grace_s``)."""
        codes = await asyncio.gather(*(terminate(p, grace_s) for p in self.history))
        return {p.name: c for p, c in zip(self.history, codes, strict=True)}


# ------------------------------------------------------------------------------ monitor
@dataclass
class Record:
    t: float
    topic: str
    payload: bytes
    retain: bool


class Monitor:
    """Records every message under ``<prefix>/#`` with its arrival time; survives broker loss."""

    def __init__(self, host: str, port: int, topology: Topology) -> None:
        self.host, self.port, self.topology = host, port, topology
        self.records: list[Record] = []
        self.connects = 0
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    async def __aenter__(self) -> Monitor:
        self._task = asyncio.create_task(self._run(), name="monitor")
        async with asyncio.timeout(10):
            while self.connects == 0:
                await asyncio.sleep(0.02)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        prefix = self.topology.prefix
        while True:
            try:
                async with aiomqtt.Client(
                    self.host, self.port, timeout=5, keepalive=5, clean_session=True
                ) as client:
                    await client.subscribe(f"{prefix}/#", qos=1)
                    self.connects += 1
                    async for message in client.messages:
                        payload = message.payload
                        if not isinstance(payload, bytes | bytearray):
                            payload = str(payload).encode()
                        self.records.append(
                            Record(time.time(), str(message.topic), bytes(payload), message.retain)
                        )
                        self._changed.set()
            except aiomqtt.MqttError:
                await asyncio.sleep(0.2)

    # -- views
    def on(self, topic: str, since: float = 0.0) -> list[Record]:
        return [r for r in self.records if r.topic == topic and r.t >= since]

    def models(self, since: float = 0.0) -> list[tuple[float, SubspaceMessage]]:
        out = []
        for r in self.on(self.topology.model_topic(), since):
            if r.payload:
                with contextlib.suppress(WireError):
                    out.append((r.t, decode_subspace(r.payload)))
        return out

    def snapshots(self, node: str, since: float = 0.0) -> list[tuple[float, SubspaceMessage]]:
        out = []
        for r in self.on(self.topology.subspace_topic(node), since):
            if r.payload:
                with contextlib.suppress(WireError):
                    out.append((r.t, decode_subspace(r.payload)))
        return out

    def model(self) -> SubspaceMessage | None:
        models = self.models()
        return models[-1][1] if models else None

    def status(self, node: str) -> list[tuple[float, bytes]]:
        return [(r.t, r.payload) for r in self.on(self.topology.status_topic(node))]

    def details(self, node: str, since: float = 0.0) -> list[tuple[float, dict]]:
        out = []
        for r in self.on(self.topology.status_detail_topic(node), since):
            with contextlib.suppress(ValueError):
                out.append((r.t, json.loads(r.payload)))
        return out

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Whether ``predicate()`` became true within ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, 0.2)):
                    await self._changed.wait()
        return True

    async def wait_model(
        self, predicate: Callable[[SubspaceMessage], bool], timeout_s: float
    ) -> SubspaceMessage | None:
        """The latest model once ``predicate(model)`` holds, else the latest one (or None)."""
        await self.wait_for(lambda: (m := self.model()) is not None and predicate(m), timeout_s)
        return self.model()

    async def wait_quiet(self, topic: str, quiet_s: float, timeout_s: float) -> None:
        """Wait until nothing arrived on ``topic`` for ``quiet_s`` seconds (bounded)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            recs = self.on(topic)
            last = recs[-1].t if recs else 0.0
            if time.time() - last >= quiet_s:
                return
            await asyncio.sleep(0.05)


# ------------------------------------------------------------------------------ proxy
def _varint(buf: bytes | bytearray, pos: int) -> tuple[int, int] | None:
    """MQTT variable byte integer at ``pos``: (value, next position), None if incomplete."""
    value, mult = 0, 1
    for i in range(4):
        if pos + i >= len(buf):
            return None
        byte = buf[pos + i]
        value += (byte & 0x7F) * mult
        if not byte & 0x80:
            return value, pos + i + 1
        mult *= 128
    raise ValueError("malformed MQTT remaining length")


def _packets(buf: bytearray) -> list[tuple[int, int, bytes]]:
    """Pop every complete packet off ``buf``: [(type, flags, body)]."""
    out = []
    while len(buf) >= 2:
        got = _varint(buf, 1)
        if got is None:
            break
        length, start = got
        if len(buf) < start + length:
            break
        out.append((buf[0] >> 4, buf[0] & 0x0F, bytes(buf[start : start + length])))
        del buf[: start + length]
    return out


_TYPES = {1: "CONNECT", 2: "CONNACK", 3: "PUBLISH", 4: "PUBACK", 8: "SUBSCRIBE", 9: "SUBACK",
          12: "PINGREQ", 13: "PINGRESP", 14: "DISCONNECT"}  # fmt: skip


@dataclass
class _Conn:
    index: int
    version: int = 4  # MQTT 3.1.1 unless CONNECT says 5
    inflight: dict[int, tuple[str, list[int]]] = field(default_factory=dict)
    open: bool = True


class MqttProxy:
    """TCP proxy to an MQTT broker that watches what its clients acknowledge.

    Bytes are forwarded unchanged in both directions. Broker-to-client PUBLISH packets
    are parsed (topic, packet id, and the ``seq`` of a sensor reading payload), and a
    client-to-broker PUBACK records that reading as *acknowledged*: the broker will not
    deliver it again, so from then on the client alone is responsible for it.
    ``acked[topic]`` lists the acknowledged sequence numbers in order, with the index of
    the connection they came through in ``acked_conn``.

    With ``hold_on_client_close`` the broker side of a connection stays open (silent)
    after its client disconnects, as after a power cut: the broker notices only by the
    client's keepalive.
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.acked: dict[str, list[int]] = {}
        self.acked_conn: dict[str, list[int]] = {}
        self.conns: list[_Conn] = []
        self.hold_on_client_close = False
        self.closed_at: list[float] = []
        self.trace: list[tuple[float, int, bool, int, int | str | None]] = []
        self._server: asyncio.Server | None = None
        self._held: list[asyncio.StreamWriter] = []
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.port: int | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    async def __aenter__(self) -> MqttProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:  # ends every pump: their reads see the close
            writer.close()
        tasks = list(self._tasks)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=2)
            for task in pending:
                task.cancel()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2):
                await self._server.wait_closed()

    def acked_through(self, topic: str, conn_below: int | None = None) -> list[int]:
        seqs = self.acked.get(topic, [])
        if conn_below is None:
            return list(seqs)
        conns = self.acked_conn.get(topic, [])
        return [s for s, c in zip(seqs, conns, strict=True) if c < conn_below]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = _Conn(len(self.conns))
        self.conns.append(conn)
        self._writers.append(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            conn.open = False
            self._tasks.discard(task)
            return
        self._writers.append(up_writer)
        try:
            await asyncio.gather(
                self._pump(reader, up_writer, conn, upstream=True),
                self._pump(up_reader, writer, conn, upstream=False),
            )
        except asyncio.CancelledError:
            pass  # torn down by __aexit__: nothing to report from a test proxy
        finally:
            conn.open = False
            self.closed_at.append(time.time())
            writer.close()
            if self.hold_on_client_close:
                self._held.append(up_writer)
            else:
                up_writer.close()
            self._tasks.discard(task)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        conn: _Conn,
        *,
        upstream: bool,
    ) -> None:
        buf = bytearray()
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                buf += data
                # observe first, then forward: a PUBACK is recorded before the broker sees it
                for ptype, _flags, body in _packets(buf):
                    self._observe(conn, ptype, _flags, body, upstream)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        if upstream and self.hold_on_client_close:
            return  # keep the broker side open and silent
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()

    def trace_tail(
        self, conn: int, n: int = 12, since: float = 0.0, until: float = float("inf")
    ) -> list[str]:
        """The last ``n`` packets of connection ``conn`` in [since, until]: time, direction,
        type, packet id (and topic of a PUBLISH)."""
        rows = [r for r in self.trace if r[1] == conn and since <= r[0] <= until][-n:]
        return [
            f"{t:.3f} {'c->b' if up else 'b->c'} {_TYPES.get(ty, ty)} {pid}"
            for t, _, up, ty, pid in rows
        ]

    def _observe(self, conn: _Conn, ptype: int, flags: int, body: bytes, upstream: bool) -> None:
        pid: int | str | None = None
        if ptype in (4, 8, 9) and len(body) >= 2:
            pid = int.from_bytes(body[0:2], "big")
        elif ptype == 3 and len(body) >= 2:
            tlen = int.from_bytes(body[0:2], "big")
            topic = body[2 : 2 + tlen].decode("utf-8", "replace").rsplit("/", 2)
            qos = (flags >> 1) & 3
            ident = int.from_bytes(body[2 + tlen : 4 + tlen], "big") if qos else None
            pid = f"{'/'.join(topic[-2:])} id={ident}"
        self.trace.append((time.time(), conn.index, upstream, ptype, pid))
        if upstream and ptype == 1 and len(body) >= 7:  # CONNECT: protocol level
            name_len = int.from_bytes(body[0:2], "big")
            if len(body) > 2 + name_len:
                conn.version = body[2 + name_len]
        elif not upstream and ptype == 3:  # PUBLISH to the client
            qos = (flags >> 1) & 3
            tlen = int.from_bytes(body[0:2], "big")
            topic = body[2 : 2 + tlen].decode("utf-8", "replace")
            pos = 2 + tlen
            if qos == 0:
                return
            pid = int.from_bytes(body[pos : pos + 2], "big")
            pos += 2
            if conn.version == 5:
                got = _varint(body, pos)
                if got is None:
                    return
                plen, pos = got
                pos += plen
            seqs: list[int] = []  # every reading of a batch, first seq onwards
            with contextlib.suppress(WireError, ValueError):
                readings = decode_readings(body[pos:])
                if readings.seq is not None:
                    seqs = list(range(readings.seq, readings.seq + len(readings.values)))
            conn.inflight[pid] = (topic, seqs)
        elif upstream and ptype == 4 and len(body) >= 2:  # PUBACK from the client
            pid = int.from_bytes(body[0:2], "big")
            got = conn.inflight.pop(pid, None)
            if got is not None and got[1]:
                topic, seqs = got
                self.acked.setdefault(topic, []).extend(seqs)
                self.acked_conn.setdefault(topic, []).extend([conn.index] * len(seqs))
