"""edge_runtime: asyncio MQTT runtime for federated, streaming PCA (FPCA-Edge) on IoT devices.

What a user imports, by where it lives (each package's ``__all__`` lists exactly these):

- the command line: `main` (`edge_runtime.cli.main`, the ``edge-runtime`` entry point);
- the numerics, `edge_runtime.fpca`: `FPCAEdge` (streaming, block-based truncated SVD with
  adaptive rank and optional differential privacy), `Subspace`, `merge_subspaces` and the
  metrics, scores and fault detector listed there;
- the wire codec, `edge_runtime.wire`: the message classes (`SubspaceMessage`, ...), their
  ``encode_*``/``decode_*`` functions and `WireError`;
- the global model of a running federation: `load_model` (`edge_runtime.model`);
- topology loading, `edge_runtime.topology`: `load_topology`, `parse_topology`, `Topology`,
  `NodeConfig` and `TopologyError`;
- `EdgeRuntimeError`, the base of every error the runtime raises on purpose.

The FedPower numerics, `edge_runtime.fedpower`, are a library beside `edge_runtime.fpca`
with a surface of their own. Every other package (agents, broker, sources, monitor, ...)
is internal to the runtime: its ``__all__`` is empty.

The names here are imported on first use (PEP 562, `edge_runtime.lazy`; this module
imports nothing else, so the import layers hold and ``import edge_runtime`` stays cheap
for an agent process).
"""

from __future__ import annotations

from edge_runtime.lazy import lazy_names

__version__ = "0.1.0"

__all__ = [
    "EdgeRuntimeError",
    "FPCAEdge",
    "Subspace",
    "SubspaceMessage",
    "Topology",
    "TopologyError",
    "WireError",
    "decode_subspace",
    "encode_subspace",
    "load_model",
    "load_topology",
    "main",
    "merge_subspaces",
    "parse_topology",
]

_MODULE_OF = {
    name: f"edge_runtime.{module}"
    for module, names in {
        "cli": ("main",),
        "errors": ("EdgeRuntimeError",),
        "fpca": ("FPCAEdge", "Subspace", "merge_subspaces"),
        "model": ("load_model",),
        "topology": ("Topology", "TopologyError", "load_topology", "parse_topology"),
        "wire": ("SubspaceMessage", "WireError", "decode_subspace", "encode_subspace"),
    }.items()
    for name in names
}
"""The module of each public name (imported on first use by `__getattr__`)."""

__getattr__, __dir__ = lazy_names(globals(), _MODULE_OF, __all__)
