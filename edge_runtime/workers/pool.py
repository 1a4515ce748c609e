"""Agents hosted in worker processes (`WorkerPool`), one group of `assign_nodes` each.

The protocol between the parent and a worker is in the `edge_runtime.workers` docstring:
a spawned interpreter hosts its agents in an `AgentHost`, sends ``ready``, answers ``add``
and ``remove`` requests, runs until the parent sends ``stop`` (or dies), then sends back its
`WorkerReport`; every wait of the parent is bounded and ends in a one-line `WorkerError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import multiprocessing
import multiprocessing.connection
import signal
import sys
import time
import traceback
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, NoReturn, TypeVar

from edge_runtime.aio import cancel_and_wait
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology
from edge_runtime.workers.host import (
    AgentHost,
    AgentReport,
    WorkerError,
    WorkerReport,
    format_nodes,
)

__all__ = [
    "START_METHOD",
    "WorkerPool",
    "assign_nodes",
]

START_METHOD = "spawn"
"""multiprocessing start method of the workers (never ``fork``: see `edge_runtime.workers`)."""

T = TypeVar("T")


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


# ------------------------------------------------------------------ worker processes
@dataclass(frozen=True)
class Job:
    """What a worker needs, picklable (a `Topology` holds mappingproxies, which are not)."""

    topology_fields: dict[str, Any]
    nodes: tuple[str, ...]
    settings: AgentSettings
    n_features: int
    connect_timeout_s: float | None
    log_level: str

    @classmethod
    def make(cls, topology: Topology, nodes: Sequence[str], **kwargs: Any) -> Job:
        """The job of ``nodes`` of ``topology``; ``kwargs`` are the other fields."""
        return cls(topology_fields=_topology_fields(topology), nodes=tuple(nodes), **kwargs)

    def topology(self) -> Topology:
        return Topology(**self.topology_fields)


def _topology_fields(topology: Topology) -> dict[str, Any]:
    """``Topology(**fields)`` rebuilds ``topology``; picklable (a `Topology` holds
    mappingproxies, which are not)."""
    fields = {f.name: getattr(topology, f.name) for f in dataclasses.fields(topology) if f.init}
    fields["nodes"] = dict(topology.nodes)
    fields["admit"] = {node: dict(admit) for node, admit in topology.admit.items()}
    return fields


def _worker_main(conn: Connection, job: Job) -> None:
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


async def _serve(conn: Connection, job: Job) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    requests: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    host = AgentHost(
        job.topology(),
        job.nodes,
        job.settings,
        job.n_features,
        connect_timeout_s=job.connect_timeout_s,
    )

    def on_parent() -> None:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError, ValueError):  # the parent died
            kind, payload = "stop", None
        if kind in ("add", "remove"):
            requests.put_nowait((kind, payload))
        else:  # "stop", or end of file
            loop.remove_reader(conn.fileno())
            stop.set()

    async def serve_requests() -> None:
        while True:  # one at a time, answered in order
            kind, payload = await requests.get()
            if kind == "add":
                fields, nodes = payload
                await host.add_agents(Topology(**fields), nodes)
                conn.send(("added", None))
            else:
                conn.send(("removed", await host.remove_agents(payload)))

    async with host:
        loop.add_reader(conn.fileno(), on_parent)
        serving = asyncio.create_task(serve_requests())
        stopping = asyncio.create_task(stop.wait())
        try:
            conn.send(("ready", None))
            await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if serving.done():
                serving.result()  # a request failed: the worker reports it and exits
        finally:
            loop.remove_reader(conn.fileno())
            for task in (serving, stopping):
                task.cancel()
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
    requests: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)  # one at a time

    def ended(self) -> bool:
        """Whether the process has ended (its sentinel is ready; it may not be reaped yet)."""
        return bool(multiprocessing.connection.wait([self.process.sentinel], timeout=0))

    def name(self, total: int) -> str:
        agents = f"{len(self.nodes)} agents: {format_nodes(self.nodes)}"
        return f"worker {self.index + 1}/{total} ({agents})"


_WHEN = {
    "ready": "while starting",
    "stopped": "while stopping its agents",
    "added": "while starting more agents",
    "removed": "while stopping some agents",
}


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
    `add_agents` and `remove_agents` start and stop some agents in running workers;
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
                job = Job.make(
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

    async def __aexit__(self, *exc_info: object) -> None:
        self._terminate(grace_s=0.0 if self._reports is None else 5.0)

    async def guard(self, work: Awaitable[T]) -> T:
        """Await ``work``; if a worker ends meanwhile, cancel it and raise `WorkerError`."""
        task = asyncio.ensure_future(work)
        watch = asyncio.ensure_future(self._watch())
        try:
            await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            running = [t for t in (task, watch) if not t.done()]
            for t in running:
                t.cancel()
            for t in running:  # bounded, and a cancellation of the caller stays
                await cancel_and_wait(t)
        if not task.done() or task.cancelled():
            watch.result()  # raises the WorkerError
        return task.result()

    async def _watch(self) -> NoReturn:
        await _readable(*(w.process.sentinel for w in self._workers))
        dead = next((w for w in self._workers if w.ended()), self._workers[0])
        await self._fail(dead, "while running")

    async def add_agents(
        self, topology: Topology, nodes: Sequence[str], *, worker: int | None = None
    ) -> int:
        """Start the agents of ``nodes`` in a running worker (`AgentHost.add_agents`) and
        wait until each is connected; not while `close` runs.

        Parameters
        ----------
        topology : Topology
            Where the new nodes are declared (e.g. the pool's topology with a leaf an open
            aggregator admits, `edge_runtime.topology.deployed.with_node`).
        nodes : sequence of str
            Node ids hosted by no worker yet.
        worker : int, optional
            Index of the worker (0-based); default the one hosting the fewest agents.

        Returns
        -------
        int
            The index of the worker that hosts them.

        Raises
        ------
        ValueError
            If a node is hosted already, or ``worker`` is out of range.
        WorkerError
            If the worker fails (e.g. an agent did not connect) or does not answer within
            ``startup_timeout_s``; the worker has then ended.
        """
        hosted = {n for w in self._workers for n in w.nodes} & set(nodes)
        if hosted:
            raise ValueError(f"already hosted: {format_nodes(sorted(hosted))}")
        if worker is None:
            worker = min(range(len(self._workers)), key=lambda i: len(self._workers[i].nodes))
        if not 0 <= worker < len(self._workers):
            raise ValueError(f"worker must be in 0..{len(self._workers) - 1}, got {worker}")
        target = self._workers[worker]
        request = ("add", (_topology_fields(topology), tuple(nodes)))
        await self._request(target, request, "added", self.startup_timeout_s)
        target.nodes += nodes
        self.groups[worker] += nodes
        return worker

    async def remove_agents(self, nodes: Sequence[str]) -> list[AgentReport]:
        """Stop the agents of ``nodes`` in the workers hosting them (each publishes its final
        snapshot: `AgentHost.remove_agents`); ids hosted nowhere are ignored; not while
        `close` runs. Their counters are in the workers' final reports too.

        Returns
        -------
        list of AgentReport

        Raises
        ------
        WorkerError
            If a worker fails or does not answer within ``stop_timeout_s``.
        """
        wanted = set(nodes)
        reports: list[AgentReport] = []
        for i, worker in enumerate(self._workers):
            mine = [n for n in worker.nodes if n in wanted]
            if mine:
                request = ("remove", tuple(mine))
                reports += await self._request(worker, request, "removed", self.stop_timeout_s)
                worker.nodes = [n for n in worker.nodes if n not in wanted]
                self.groups[i] = [n for n in self.groups[i] if n not in wanted]
        return reports

    async def _request(
        self, worker: _Worker, request: tuple[str, Any], answer: str, timeout_s: float
    ) -> Any:
        async with worker.requests:
            try:
                worker.conn.send(request)
            except OSError:
                await self._fail(worker, _WHEN[answer])
            try:
                async with asyncio.timeout(timeout_s):
                    return await self._expect(worker, answer)
            except TimeoutError:
                raise WorkerError(
                    f"{worker.name(self.workers)} did not answer {request[0]!r} within "
                    f"{timeout_s:g} s"
                ) from None

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
