"""Agents hosted in processes: `AgentHost` (this process) and `WorkerPool` (N processes).

`edge-runtime run --workers N` spreads the agents of a topology over N worker processes
so that N cores run them (one asyncio loop per process; each agent keeps its own MQTT
connection, so nothing changes for the broker or the other agents). `assign_nodes`
chooses which agents each worker hosts; the main process keeps the replay and the
model watcher.

A worker is started with the ``"spawn"`` method (a fresh interpreter: the parent has
an event loop and threads, which ``fork`` would copy in an undefined state), hosts its
agents in an `AgentHost`, sends ``ready`` once every agent is connected, runs until the
parent sends ``stop`` (or the pipe to the parent closes: the parent died), then stops
its agents (final snapshots) and sends back a `WorkerReport`. BLAS runs one thread per
worker. A worker that fails sends its error as one line (and prints the traceback at log
level debug). Every wait of the parent is bounded: a worker that fails to start, dies, or
does not answer ends the run with a one-line `WorkerError`, and every worker is
terminated (SIGTERM, then SIGKILL) on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import multiprocessing
import multiprocessing.connection
import os
import resource
import signal
import sys
import time
import traceback
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Any, NoReturn, TypeVar

from edge_runtime.agents import Agent, AgentSettings, create_agent
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.topology import Topology

__all__ = [
    "START_METHOD",
    "AgentHost",
    "AgentReport",
    "WorkerError",
    "WorkerPool",
    "WorkerReport",
    "assign_nodes",
    "cpu_time_s",
    "peak_rss_bytes",
]

START_METHOD = "spawn"
"""multiprocessing start method of the workers (never ``fork``: see the module doc)."""

T = TypeVar("T")


class WorkerError(EdgeRuntimeError, RuntimeError):
    """An agent host failed: a worker did not start, died, or an agent did not connect.

    The message is one line, naming the worker and what happened.
    """


@dataclass(frozen=True)
class AgentReport:
    """Counters of one agent at its end.

    ``merges`` is 0 for leaves; ``rejects`` sums every reject reason; ``undelivered``
    counts snapshots whose echo never came back (see `Agent.publish_snapshot`).
    """

    node: str
    messages_published: int = 0
    bytes_published: int = 0
    merges: int = 0
    rejects: int = 0
    undelivered: int = 0

    @classmethod
    def of(cls, agent: Agent) -> AgentReport:
        """The counters of ``agent`` now."""
        return cls(
            node=agent.node_id,
            messages_published=agent.stats.messages_published,
            bytes_published=agent.stats.bytes_published,
            merges=int(getattr(agent, "merges", 0)),
            rejects=int(sum(dict(agent.rejects).values())),
            undelivered=int(agent.undelivered),
        )


@dataclass(frozen=True)
class WorkerReport:
    """What one host process sends back: its agents' counters and its own resources.

    ``peak_rss_bytes`` is the process's peak resident set size (`peak_rss_bytes`);
    ``cpu_s`` its user + system CPU time in seconds.
    """

    pid: int
    agents: tuple[AgentReport, ...]
    peak_rss_bytes: int
    cpu_s: float


def peak_rss_bytes() -> int:
    """Peak resident set size of this process, bytes.

    ``VmHWM`` of ``/proc/self/status`` on Linux: ``getrusage``'s ``ru_maxrss`` survives
    ``exec``, so a spawned worker would report at least its parent's peak (measured: a
    parent at 420 MB gives a fresh spawned child ``ru_maxrss`` = 420 MB, ``VmHWM`` 15 MB).
    Elsewhere ``ru_maxrss`` (KiB on Linux and BSD, bytes on macOS).
    """
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def cpu_time_s() -> float:
    """User + system CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ------------------------------------------------------------------------- assignment
def _preorder(topology: Topology) -> list[str]:
    order: list[str] = []
    stack = [topology.root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(topology.children(node)))
    return order


def assign_nodes(topology: Topology, workers: int) -> list[list[str]]:
    """Split the nodes of ``topology`` into at most ``workers`` balanced groups.

    The nodes are taken in depth-first pre-order (each aggregator followed by its whole
    subtree) and cut into ``workers`` contiguous runs whose sizes differ by at most one.
    So the groups are balanced by agent count, and every subtree stays in one worker
    except at most ``workers - 1`` subtrees that straddle a cut. Never more groups than
    nodes; no group is empty. Measured with 2 workers on depth-2 trees of 512 and 1024
    leaves: dealing the nodes round-robin instead gave the same wall time and readings/s
    within the run-to-run noise (each agent talks only to the broker, so where its parent
    runs does not matter to it); keeping subtrees together costs nothing and keeps a
    worker's failure to whole sites.

    Parameters
    ----------
    topology : Topology
    workers : int
        Number of groups wanted, >= 1.

    Returns
    -------
    list of list of str
        Node ids per group, in pre-order; together every node exactly once.

    Raises
    ------
    ValueError
        If ``workers`` is below 1.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    order = _preorder(topology)
    n = min(workers, len(order))
    size, extra = divmod(len(order), n)
    groups: list[list[str]] = []
    start = 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        groups.append(order[start:end])
        start = end
    return groups


# ------------------------------------------------------------------------ in process
class AgentHost:
    """Host the agents of ``nodes`` in this process's event loop.

    ``async with AgentHost(...) as host`` creates the agents (``restore_from_broker``
    off: a run starts from a clean broker), starts them and waits until every one is
    connected; `close` stops them all at once (each publishes its final snapshot) and
    returns their counters. Leaving the block closes them too.

    Parameters
    ----------
    topology : Topology
    nodes : sequence of str
        Node ids to host.
    settings : AgentSettings
    n_features : int
        Width of the readings (each leaf's ``n_features``).
    connect_timeout_s : float, optional
        Seconds for every agent to connect; default ``3 * settings.timeout_s``.

    Raises
    ------
    WorkerError
        On entering, if some agent is not connected within ``connect_timeout_s``.
    """

    def __init__(
        self,
        topology: Topology,
        nodes: Sequence[str],
        settings: AgentSettings,
        n_features: int,
        *,
        connect_timeout_s: float | None = None,
    ) -> None:
        self.topology = topology
        self.nodes = list(nodes)
        self.settings = settings
        self.n_features = n_features
        self.connect_timeout_s = (
            3 * settings.timeout_s if connect_timeout_s is None else connect_timeout_s
        )
        self.agents: list[Agent] = []
        self._report: WorkerReport | None = None

    @property
    def workers(self) -> int:
        """Processes hosting agents: 1 (this one)."""
        return 1

    async def __aenter__(self) -> AgentHost:
        self.agents = [
            create_agent(
                self.topology,
                node,
                self.settings,
                n_features=self.n_features,
                restore_from_broker=False,
            )
            for node in self.nodes
        ]
        try:
            for agent in self.agents:
                await agent.__aenter__()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.connect_timeout_s
            for agent in self.agents:
                await agent.wait_connected(max(0.0, deadline - loop.time()))
        except TimeoutError:
            missing = [a.node_id for a in self.agents if not a.connected.is_set()]
            await self.close()
            raise WorkerError(
                f"{len(missing)} of {len(self.agents)} agents ({_names(missing)}) did not "
                f"connect to the broker at {self.settings.host}:{self.settings.port} within "
                f"{self.connect_timeout_s:g} s"
            ) from None
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def guard(self, work: Awaitable[T]) -> T:
        """Await ``work`` (in this process nothing else can fail on its own)."""
        return await work

    async def close(self) -> list[WorkerReport]:
        """Stop every agent (final snapshots, in parallel); idempotent.

        Bounded: each agent's `Agent.aclose` gives up after ``3 * timeout_s`` seconds.
        """
        if self._report is None:
            for agent in self.agents:
                agent.stop()
            await asyncio.gather(*(agent.aclose() for agent in self.agents))
            self._report = WorkerReport(
                pid=os.getpid(),
                agents=tuple(AgentReport.of(a) for a in self.agents),
                peak_rss_bytes=peak_rss_bytes(),
                cpu_s=cpu_time_s(),
            )
        return [self._report]


def _names(nodes: Sequence[str], shown: int = 3) -> str:
    more = len(nodes) - shown
    return ", ".join(nodes[:shown]) + (f" and {more} more" if more > 0 else "")


# ------------------------------------------------------------------ worker processes
@dataclass(frozen=True)
class _Job:
    """What a worker needs, picklable (a `Topology` holds mappingproxies, which are not)."""

    topology_fields: dict[str, Any]
    nodes: tuple[str, ...]
    settings: AgentSettings
    n_features: int
    connect_timeout_s: float | None
    log_level: str

    @classmethod
    def make(cls, topology: Topology, nodes: Sequence[str], **kwargs: Any) -> _Job:
        fields = {f.name: getattr(topology, f.name) for f in dataclasses.fields(topology) if f.init}
        fields["nodes"] = dict(topology.nodes)
        return cls(topology_fields=fields, nodes=tuple(nodes), **kwargs)

    def topology(self) -> Topology:
        return Topology(**self.topology_fields)


def _worker_main(conn: Connection, job: _Job) -> None:
    """Entry point of a worker process (see the module doc for the protocol)."""
    # Ctrl-C reaches the whole process group; the parent decides how the run ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from threadpoolctl import threadpool_limits

    from edge_runtime.logs import configure_logging

    try:
        configure_logging(job.log_level)
        with threadpool_limits(limits=1):
            asyncio.run(_serve(conn, job))
    except BaseException as exc:  # report it in one line, then exit non-zero
        if job.log_level.lower() == "debug":
            traceback.print_exc()
        with contextlib.suppress(Exception):
            conn.send(("error", _one_line(exc)))
        sys.exit(1)


def _one_line(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split())
    return text if isinstance(exc, WorkerError) else f"{type(exc).__name__}: {text}"


async def _serve(conn: Connection, job: _Job) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    host = AgentHost(
        job.topology(),
        job.nodes,
        job.settings,
        job.n_features,
        connect_timeout_s=job.connect_timeout_s,
    )

    def on_parent() -> None:
        # anything from the parent -- "stop", or end of file when it died -- means stop
        loop.remove_reader(conn.fileno())
        stop.set()

    async with host:
        loop.add_reader(conn.fileno(), on_parent)
        try:
            conn.send(("ready", None))
            await stop.wait()
        finally:
            loop.remove_reader(conn.fileno())
        (report,) = await host.close()
    conn.send(("stopped", report))


async def _readable(*fds: int) -> None:
    """Wait until one of ``fds`` is readable (data, end of file, or a process ended)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def done() -> None:
        if not ready.done():
            ready.set_result(None)

    for fd in fds:
        loop.add_reader(fd, done)
    try:
        await ready
    finally:
        for fd in fds:
            loop.remove_reader(fd)


@dataclass
class _Worker:
    index: int
    nodes: list[str]
    process: BaseProcess
    conn: Connection

    def ended(self) -> bool:
        """Whether the process has ended (its sentinel is ready; it may not be reaped yet)."""
        return bool(multiprocessing.connection.wait([self.process.sentinel], timeout=0))

    def name(self, total: int) -> str:
        return f"worker {self.index + 1}/{total} ({len(self.nodes)} agents: {_names(self.nodes)})"


_WHEN = {"ready": "while starting", "stopped": "while stopping its agents"}


def _exit_text(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


class WorkerPool:
    """Host the agents in worker processes, one group of `assign_nodes` each.

    ``async with WorkerPool(...) as pool`` starts the workers and waits until each has
    every agent connected; `guard` runs the main work while watching the workers;
    `close` stops them and collects their `WorkerReport`. Leaving the block without
    `close` (an error) terminates the workers.

    Parameters
    ----------
    topology : Topology
    groups : list of list of str
        Node ids per worker (e.g. `assign_nodes`); one process per group.
    settings : AgentSettings
    n_features : int
    startup_timeout_s : float, default 120
        Seconds for every worker to start (a fresh interpreter, imports) and connect its
        agents.
    stop_timeout_s : float, optional
        Seconds for every worker to stop its agents and report; default
        ``3 * settings.timeout_s + 10`` (an agent's own shutdown bound, plus slack).
    connect_timeout_s : float, optional
        Each worker's `AgentHost` ``connect_timeout_s``.
    log_level : str, default "warning"
        Log level of the workers (their logs go to the same stderr).

    Raises
    ------
    WorkerError
        On entering, if a worker dies or fails, or not every worker is ready within
        ``startup_timeout_s``; from `guard` if a worker ends while the work runs; from
        `close` if a worker fails to report within ``stop_timeout_s``.
    """

    def __init__(
        self,
        topology: Topology,
        groups: Sequence[Sequence[str]],
        settings: AgentSettings,
        n_features: int,
        *,
        startup_timeout_s: float = 120.0,
        stop_timeout_s: float | None = None,
        connect_timeout_s: float | None = None,
        log_level: str = "warning",
    ) -> None:
        if not groups or any(not g for g in groups):
            raise ValueError("need at least one group, and no empty group")
        self.topology = topology
        self.groups = [list(g) for g in groups]
        self.settings = settings
        self.n_features = n_features
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = (
            3 * settings.timeout_s + 10.0 if stop_timeout_s is None else stop_timeout_s
        )
        self.connect_timeout_s = connect_timeout_s
        self.log_level = log_level
        self._workers: list[_Worker] = []
        self._reports: list[WorkerReport] | None = None

    @property
    def workers(self) -> int:
        """Number of worker processes."""
        return len(self.groups)

    @property
    def pids(self) -> list[int | None]:
        """Process ids of the started workers, in group order."""
        return [w.process.pid for w in self._workers]

    async def __aenter__(self) -> WorkerPool:
        context = multiprocessing.get_context(START_METHOD)
        try:
            for index, nodes in enumerate(self.groups):
                parent_end, child_end = context.Pipe()
                job = _Job.make(
                    self.topology,
                    nodes,
                    settings=self.settings,
                    n_features=self.n_features,
                    connect_timeout_s=self.connect_timeout_s,
                    log_level=self.log_level,
                )
                process = context.Process(
                    target=_worker_main,
                    args=(child_end, job),
                    name=f"edge-runtime-worker-{index + 1}",
                    daemon=True,
                )
                process.start()
                child_end.close()
                self._workers.append(_Worker(index, list(nodes), process, parent_end))
            await self._expect_all("ready", self.startup_timeout_s)
        except BaseException:
            self._terminate(grace_s=0.0)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._terminate(grace_s=0.0 if self._reports is None else 5.0)

    async def guard(self, work: Awaitable[T]) -> T:
        """Await ``work``; if a worker ends meanwhile, cancel it and raise `WorkerError`."""
        task = asyncio.ensure_future(work)
        watch = asyncio.ensure_future(self._watch())
        try:
            await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (task, watch):
                if not t.done():
                    t.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await t
        if not task.done() or task.cancelled():
            watch.result()  # raises the WorkerError
        return task.result()

    async def _watch(self) -> NoReturn:
        await _readable(*(w.process.sentinel for w in self._workers))
        dead = next((w for w in self._workers if w.ended()), self._workers[0])
        await self._fail(dead, "while running")

    async def close(self) -> list[WorkerReport]:
        """Ask every worker to stop, collect their reports, reap them; idempotent."""
        if self._reports is None:
            for worker in self._workers:
                with contextlib.suppress(OSError):
                    worker.conn.send(("stop", None))
            try:
                self._reports = await self._expect_all("stopped", self.stop_timeout_s)
            finally:
                self._terminate(grace_s=0.0 if self._reports is None else 5.0)
        return self._reports

    async def _expect_all(self, kind: str, timeout_s: float) -> list[Any]:
        results: dict[int, Any] = {}

        async def one(worker: _Worker) -> None:
            results[worker.index] = await self._expect(worker, kind)

        try:
            async with asyncio.timeout(timeout_s):
                async with asyncio.TaskGroup() as group:
                    for worker in self._workers:
                        group.create_task(one(worker))
        except TimeoutError:
            late = next(w for w in self._workers if w.index not in results)
            raise WorkerError(
                f"{late.name(self.workers)} was not {kind} within {timeout_s:g} s"
            ) from None
        except BaseExceptionGroup as group:
            raise group.exceptions[0] from None
        return [results[w.index] for w in self._workers]

    async def _expect(self, worker: _Worker, kind: str) -> Any:
        """The payload of the next message of ``worker``, which must be ``kind``."""
        when = _WHEN[kind]
        while not worker.conn.poll():
            if worker.ended():
                await self._fail(worker, when)
            await _readable(worker.conn.fileno(), worker.process.sentinel)
        try:
            got, payload = worker.conn.recv()
        except (EOFError, OSError):
            await self._fail(worker, when)
        if got == "error":
            raise WorkerError(f"{worker.name(self.workers)}: {payload}")
        if got != kind:
            raise WorkerError(f"{worker.name(self.workers)} sent {got!r}, expected {kind!r}")
        return payload

    async def _fail(self, worker: _Worker, when: str) -> NoReturn:
        """Raise the `WorkerError` for a worker that ended (its own message if it sent one)."""
        with contextlib.suppress(EOFError, OSError, ValueError):
            if worker.conn.poll():
                got, payload = worker.conn.recv()
                if got == "error":
                    raise WorkerError(f"{worker.name(self.workers)}: {payload}")
        worker.process.join(timeout=1.0)
        raise WorkerError(
            f"{worker.name(self.workers)} {_exit_text(worker.process.exitcode)} {when}"
        )

    def _terminate(self, grace_s: float) -> None:
        """End every worker: wait up to ``grace_s`` s, then SIGTERM, then SIGKILL; close pipes."""
        deadline = time.monotonic() + grace_s
        for worker in self._workers:
            worker.process.join(timeout=max(0.0, deadline - time.monotonic()))
        for worker in self._workers:
            if worker.process.is_alive():
                worker.process.terminate()
        for worker in self._workers:
            worker.process.join(timeout=2.0)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=2.0)
            with contextlib.suppress(OSError):
                worker.conn.close()
