"""Agents hosted in this process (`AgentHost`), and what a host reports when it stops.

`AgentHost` creates the agents of some nodes, starts them, waits until each is connected
and stops them together (`AgentHost.add_agents` and `remove_agents` start and stop some
while the others run: a leaf an open aggregator admits, a device retired); `WorkerReport`
(with one `AgentReport` per agent, and the process's peak memory `peak_rss_bytes` and CPU
time `cpu_time_s`) is what it returns, in this process or sent back by a worker process
(`edge_runtime.workers.pool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import sys
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from edge_runtime.agents import create_agent
from edge_runtime.agents.common.shell.agent import Agent
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology

__all__ = [
    "AgentHost",
    "AgentReport",
    "WorkerError",
    "WorkerReport",
    "cpu_time_s",
    "format_nodes",
    "peak_rss_bytes",
]

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


class AgentHost:
    """Host the agents of ``nodes`` in this process's event loop.

    ``async with AgentHost(...) as host`` creates the agents (``restore_from_broker``
    off: a run starts from a clean broker), starts them and waits until every one is
    connected; `close` stops them all at once (each publishes its final snapshot) and
    returns their counters. Leaving the block closes them too. `add_agents` and
    `remove_agents` start and stop some agents while the others run.

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
        self._removed: list[AgentReport] = []
        self._report: WorkerReport | None = None

    @property
    def workers(self) -> int:
        """Processes hosting agents: 1 (this one)."""
        return 1

    async def __aenter__(self) -> AgentHost:
        try:
            await self._start(self.topology, self.nodes)
        except BaseException:
            await self.close()
            raise
        return self

    async def _start(self, topology: Topology, nodes: Sequence[str]) -> None:
        """Create and start the agents of ``nodes``, and wait until each is connected."""
        agents = [
            create_agent(
                topology, node, self.settings, n_features=self.n_features, restore_from_broker=False
            )
            for node in nodes
        ]
        self.agents += agents  # from now on `close` stops them, whatever happens here
        try:
            for agent in agents:
                await agent.__aenter__()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.connect_timeout_s
            for agent in agents:
                await agent.wait_connected(max(0.0, deadline - loop.time()))
        except TimeoutError:
            missing = [a.node_id for a in agents if not a.connected.is_set()]
            raise WorkerError(
                f"{len(missing)} of {len(agents)} agents ({format_nodes(missing)}) did not "
                f"connect to the broker at {self.settings.host}:{self.settings.port} within "
                f"{self.connect_timeout_s:g} s"
            ) from None

    async def add_agents(self, topology: Topology, nodes: Sequence[str]) -> None:
        """Start the agents of ``nodes`` while the others run, and wait until each is
        connected (bounded by ``connect_timeout_s``).

        Parameters
        ----------
        topology : Topology
            Where the new nodes are declared: for a leaf an open aggregator admits, the
            host's topology with the leaf added (`edge_runtime.topology.deployed.with_node`
            of `Topology.admitted_leaf`); the running agents keep theirs.
        nodes : sequence of str
            Node ids, none of them hosted here already.

        Raises
        ------
        ValueError
            If a node is hosted here already.
        KeyError
            If a node is not in ``topology``.
        WorkerError
            If some new agent does not connect in time (the new agents stay hosted: `close`
            stops them).
        """
        hosted = {a.node_id for a in self.agents} & set(nodes)
        if hosted:
            raise ValueError(f"already hosted here: {format_nodes(sorted(hosted))}")
        await self._start(topology, nodes)

    async def remove_agents(self, nodes: Sequence[str]) -> list[AgentReport]:
        """Stop the agents of ``nodes`` (each publishes its final snapshot, in parallel; each
        bounded as in `close`) and stop hosting them; ids not hosted here are ignored.

        Returns
        -------
        list of AgentReport
            Their counters, in hosting order; `close` reports them too.
        """
        wanted = set(nodes)
        gone = [a for a in self.agents if a.node_id in wanted]
        for agent in gone:
            agent.stop()
        await asyncio.gather(*(agent.aclose() for agent in gone))
        self.agents = [a for a in self.agents if a.node_id not in wanted]
        reports = [AgentReport.of(a) for a in gone]
        self._removed += reports
        return reports

    async def __aexit__(self, *exc_info: object) -> None:
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
                agents=(*self._removed, *(AgentReport.of(a) for a in self.agents)),
                peak_rss_bytes=peak_rss_bytes(),
                cpu_s=cpu_time_s(),
            )
        return [self._report]


def format_nodes(nodes: Sequence[str], shown: int = 3) -> str:
    """``nodes`` for a one-line message: the first ``shown`` ids, then ``and N more``."""
    more = len(nodes) - shown
    return ", ".join(nodes[:shown]) + (f" and {more} more" if more > 0 else "")
