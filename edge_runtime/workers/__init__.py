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
its agents (final snapshots) and sends back a `WorkerReport`. Meanwhile the parent may ask
it to ``add`` agents (a topology and node ids; answered ``added`` once they are connected)
or ``remove`` some (answered ``removed`` with their `AgentReport`), one request at a time:
`WorkerPool.add_agents`, `WorkerPool.remove_agents`, e.g. for a leaf an open aggregator
admits or a device retired while the tree runs. BLAS runs one thread per
worker. A worker that fails sends its error as one line (and prints the traceback at log
level debug). Every wait of the parent is bounded: a worker that fails to start, dies, or
does not answer ends the run with a one-line `WorkerError`, and every worker is
terminated (SIGTERM, then SIGKILL) on the way out.
"""

from edge_runtime.workers.host import AgentHost as AgentHost
from edge_runtime.workers.host import AgentReport as AgentReport
from edge_runtime.workers.host import WorkerError as WorkerError
from edge_runtime.workers.host import WorkerReport as WorkerReport
from edge_runtime.workers.host import cpu_time_s as cpu_time_s
from edge_runtime.workers.host import peak_rss_bytes as peak_rss_bytes
from edge_runtime.workers.pool import START_METHOD as START_METHOD
from edge_runtime.workers.pool import WorkerPool as WorkerPool
from edge_runtime.workers.pool import assign_nodes as assign_nodes

__all__: list[str] = []  # internal to the runtime: no user surface
