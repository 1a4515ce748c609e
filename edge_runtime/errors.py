"""The one base of every error edge_runtime raises on purpose.

Each error keeps the built-in class it always had as a second base, so ``except ValueError``
still catches a bad payload, and ``except EdgeRuntimeError`` catches anything of ours::

    EdgeRuntimeError
    ├── WireError(ValueError)          edge_runtime.wire: a payload or message the wire refuses
    ├── TopologyError(ValueError)      edge_runtime.topology: a topology file or tree that is wrong
    ├── DatasetError(ValueError)       edge_runtime.datasets: a missing or malformed data table
    ├── CheckpointError(ValueError)    edge_runtime.checkpoint: a truncated or foreign checkpoint
    ├── AclError(ValueError)           edge_runtime.acl: a user or topic unfit for a Mosquitto ACL
    ├── BridgeError(ValueError)        edge_runtime.bridge: a site that cannot be bridged
    ├── SourceError(RuntimeError)      edge_runtime.sources: a local source that cannot run at all
    ├── BrokerError(RuntimeError)      edge_runtime.broker: no broker, a bad URL, a failed start
    │   └── DynsecError                 edge_runtime.broker.dynsec: a refused dynsec command
    ├── LimitError(RuntimeError)       edge_runtime.limits: an OS limit too low for the run
    ├── WorkerError(RuntimeError)      edge_runtime.workers: an agent host that failed
    ├── PlotError                      edge_runtime.plots: plots that cannot be written
    ├── NotFittedError(ValueError)     edge_runtime.fpca: an estimator used before it learned
    ├── SecAggError(ValueError)        edge_runtime.secagg: a slot message a core refuses
    │   └── UnmaskRefusedError          edge_runtime.secagg: a leaf refusing to reveal shares
    └── CliError                       edge_runtime.cli: a one-line error for the user, exit code

Every message is one line naming the offending value and what was expected. Errors from
the libraries below us are translated where they cross into our code: msgpack's into
`WireError`, tomllib's into `TopologyError`, ``OSError`` on a checkpoint into
`CheckpointError`, aiomqtt's ``MqttError`` into a logged reconnect inside the agents and a
`CliError` at the command line. The numerics (`edge_runtime.fpca`, `edge_runtime.fedpower`)
are usable alone and raise plain ``ValueError`` / ``TypeError`` for bad arguments, as numpy
and scipy do; only `NotFittedError` is theirs (scikit-learn's protocol).
"""

from __future__ import annotations

__all__ = ["EdgeRuntimeError"]


class EdgeRuntimeError(Exception):
    """Base of every error edge_runtime raises on purpose; see the tree above."""
