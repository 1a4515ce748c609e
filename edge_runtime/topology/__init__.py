"""The aggregation tree: nodes, their FPCA settings and MQTT topic names, read from TOML.

A topology is a rooted tree of nodes. A node without children is a *leaf*: it reads sensor
readings (from its ``sensor_topic``) and runs FPCA-Edge (Grammenos et al., "Federated Principal
Component Analysis", NeurIPS 2020, eq. (3) block update, eq. (4) adaptive rank). A node with
children is an *aggregator*: it merges its children's latest subspaces (Alg. 2, Merge_r) and
publishes upwards; the one node without a parent is the *root*, whose merge is the global
estimate (Alg. 1). The format is documented in ``topologies/README.md``; in short::

    name = "motes-light"
    prefix = "fpca"                # topic prefix, default "fpca"
    [defaults]                     # any per-node setting; a node's own keys override
    rank = 10
    [data]
    dataset = "motes-light"        # built-in dataset name or a path relative to this file
    split = "contiguous"           # or "round-robin"
    [[nodes]]
    id = "root"
    [[nodes]]
    id = "pi-01"
    parent = "root"

A leaf may run with differential privacy: the keys ``epsilon``, ``delta`` and ``clip_norm``
(all three or none; leaves only, an aggregator reports the weakest guarantee of its
children), optionally ``mechanism`` (``"gaussian"``, the default: the Gaussian mechanism on
block Gram matrices with continual release over ``release_horizon`` blocks; or
``"fpca-eq8"``: streaming MOD-SuLQ, eq. (5)-(8) and Lemma 2, with its ``chunk_size``) and
``noise_seed``. The mechanisms are described in `edge_runtime.fpca.privacy`.

A leaf may declare what its sensors can produce, from their datasheet:
``valid_range = [lo, hi]`` (or per feature ``[[lo1, ...], [hi1, ...]]``), with
``out_of_range = "reject"`` (the default: a reading with a value outside is dropped) or
``"clip"``, and ``max_reading_rate`` (readings per second). Leaves only, like the privacy
keys; `Topology.reading_norm_sq_bound` and `Topology.max_reading_rate` bound the readings
under any node.

A leaf may read its readings from a local source instead of its sensor topic:
``source = { kind = "command", command = ["sh", "motes.sh"], format = "csv" }`` (kinds
``command``, ``file``, ``serial``; ``mqtt`` is the default and may name the ``topic``), see
`edge_runtime.sources.SourceSpec`. Leaves only, and not in ``[defaults]`` (two leaves reading
one file or port would count its readings twice); a relative ``path`` is relative to the
TOML file's folder.

An aggregator may be declared open: ``open = true`` on its ``[[nodes]]`` table,
and optionally a ``[nodes.admit]`` table right after it with the settings of the leaves it
admits at run time (the keys of ``[defaults]``, which they override; most usefully
``valid_range`` and ``max_reading_rate``, the bounds the aggregator holds every admitted leaf
to). `Topology.admitted_leaf` gives such a leaf's `NodeConfig`. An open node is an
aggregator even without declared children.

Topics (``<path>`` is the chain of ids from the root, e.g. ``root/site-a/pi-01``):
``<prefix>/<path>/subspace`` (retained snapshot), ``<prefix>/<path>/status`` (online/offline),
``<prefix>/<path>/status/detail`` (JSON), ``<prefix>/<path>/confirm`` (a leaf's reading
confirmations, JSON), ``<prefix>/<root>/model`` (global estimate); an
aggregator subscribes to ``<prefix>/<path>/+/subspace``.

Topic names are built and parsed in `edge_runtime.topology.topics` only.

Every problem raises `TopologyError` (a `ValueError`) with a one-line message that names the
file (when there is one) and the offending node or key.

The package, each module one concept, imports pointing down the list:

- ``topics``: the topic layout ``<prefix>/<path>/<kind>``, built and parsed;
- ``keys``: every key of the file declared once (`edge_runtime.topology.keys.TOPOLOGY_KEYS`:
  kind, default, bounds, unit, roles, doc), and the key groups derived from it;
- ``checks``: `TopologyError` and the field checks shared by parsing and construction;
- ``node_checks`` and ``node``: one node's settings, `NodeConfig`, and their checks;
- ``fedpower_config``: `FedPowerConfig`, the settings of a FedPower deployment;
- ``parents``: the parent links as a tree, cycle detection, paths from the root;
- ``tree``: `Topology`, the validated tree with its walks and topic names;
- ``loading``: `load_topology` and `parse_topology`, TOML to `Topology`.
- ``reference``: the key tables of ``topologies/README.md``, generated from ``keys``.

A user imports `load_topology`, `parse_topology`, `Topology`, `NodeConfig` and
`TopologyError` (``__all__``); the constants re-exported below serve the runtime's modules.

The split of a dataset's rows over the leaves is `edge_runtime.datasets.split`.
"""

from __future__ import annotations

from edge_runtime.fpca.privacy import MECHANISMS as MECHANISMS  # re-exported, not in __all__
from edge_runtime.topology.checks import MAX_ID_LENGTH as MAX_ID_LENGTH
from edge_runtime.topology.checks import TopologyError
from edge_runtime.topology.fedpower_config import FedPowerConfig as FedPowerConfig
from edge_runtime.topology.keys import ALGORITHMS as ALGORITHMS
from edge_runtime.topology.keys import DEFAULT_BLOCK_SIZE as DEFAULT_BLOCK_SIZE
from edge_runtime.topology.keys import DEFAULT_PREFIX as DEFAULT_PREFIX
from edge_runtime.topology.keys import DEFAULT_RELEASE_HORIZON as DEFAULT_RELEASE_HORIZON
from edge_runtime.topology.keys import OUT_OF_RANGE_MODES as OUT_OF_RANGE_MODES
from edge_runtime.topology.keys import SCORE_MODES as SCORE_MODES
from edge_runtime.topology.keys import SPLITS as SPLITS
from edge_runtime.topology.keys import STALE_POLICIES as STALE_POLICIES
from edge_runtime.topology.loading import load_topology, parse_topology
from edge_runtime.topology.node import NodeConfig
from edge_runtime.topology.topics import RESERVED_IDS as RESERVED_IDS
from edge_runtime.topology.tree import Topology

__all__ = [
    "NodeConfig",
    "Topology",
    "TopologyError",
    "load_topology",
    "parse_topology",
]
