"""The aggregation tree (`Topology`): its nodes, walks over the tree and their topic names.

A `Topology` is validated on construction, whether parsed from TOML
(`edge_runtime.topology.loading`) or built directly: one tree (`parents.check_tree`), the
rules between a node's role and its settings (leaves read sensors and may be private,
aggregators do neither), and FedPower's rules. Topic names come from
`edge_runtime.topology.topics`; the dataset split from `edge_runtime.datasets.split`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from edge_runtime.declaration import validated
from edge_runtime.fedpower import MECHANISM as FEDPOWER_MECHANISM
from edge_runtime.topology import topics
from edge_runtime.topology.checks import (
    TopologyError,
    aggregator_privacy_message,
    aggregator_sensor_message,
    aggregator_sensor_topic_message,
    aggregator_source_message,
    check_kind,
    prefix_problem,
    unknown_key_message,
)
from edge_runtime.topology.fedpower_config import FedPowerConfig, fedpower_private_leaf
from edge_runtime.topology.keys import (
    ADMIT_KEYS,
    ALGORITHMS,
    BUILTIN_DEFAULTS,
    PRIVACY_KEYS,
    SENSOR_KEYS,
    SPLITS,
)
from edge_runtime.topology.node import NodeConfig
from edge_runtime.topology.parents import check_tree, root_paths
from edge_runtime.topology.secagg import check_secagg, secagg_children
from edge_runtime.topology.topics import default_sensor_topic

__all__ = ["Topology"]


def _check_topology(values: dict[str, Any]) -> dict[str, Any]:
    """Check a topology's fields (`Topology`'s Raises) and return them normalised: the nodes
    (FedPower's private leaves and the secure-aggregation sites' defaults filled in) and the
    admit settings as read-only mappings, ``source_path`` a `Path`."""
    name, prefix, root = values["name"], values["prefix"], values["root"]
    dataset, split = values["dataset"], values["split"]
    algorithm, fedpower = values["algorithm"], values["fedpower"]
    if not isinstance(name, str) or name == "":
        raise TopologyError(f"name must be a non-empty string, got {name!r}")
    check_kind("topology", "prefix", prefix)
    problem = prefix_problem(prefix)
    if problem is not None:
        raise TopologyError(f"prefix {prefix!r} is not a valid topic prefix: it {problem}")
    if split not in SPLITS:
        raise TopologyError(
            f"split must be one of {', '.join(map(repr, SPLITS))}, got {split!r}"
        )
    if algorithm not in ALGORITHMS:
        raise TopologyError(
            f"algorithm must be one of {', '.join(map(repr, ALGORITHMS))}, "
            f"got {algorithm!r}"
        )
    if not isinstance(fedpower, FedPowerConfig):
        raise TopologyError(f"fedpower must be a FedPowerConfig, got {fedpower!r}")
    if dataset is not None and (not isinstance(dataset, str) or not dataset):
        raise TopologyError(f"dataset must be a non-empty string, got {dataset!r}")
    nodes = dict(values["nodes"])
    for key, node in nodes.items():
        if not isinstance(node, NodeConfig) or node.id != key:
            raise TopologyError(f"nodes[{key!r}] must be a NodeConfig with id {key!r}")
    parents = {node_id: node.parent for node_id, node in nodes.items()}
    open_nodes = {node_id for node_id, node in nodes.items() if node.open}
    found = check_tree(parents, open_nodes)
    if found != root:
        raise TopologyError(f"root is {root!r}, but the node without a parent is {found!r}")
    children: dict[str, list[str]] = {node_id: [] for node_id in nodes}
    for node_id, parent in parents.items():
        if parent is not None:
            children[parent].append(node_id)
    aggregators = frozenset(n for n in nodes if children[n] or n in open_nodes)
    for node_id, node in nodes.items():
        if node_id in aggregators and node.sensor_topic is not None:
            raise TopologyError(aggregator_sensor_topic_message(node_id, node.sensor_topic))
        if node_id not in aggregators and node.sensor_topic is None:
            raise TopologyError(f"leaf {node_id!r} has no sensor_topic")
        if node_id in aggregators and node.source is not None:
            raise TopologyError(aggregator_source_message(node_id))
        if node_id in aggregators:
            for key in PRIVACY_KEYS:
                if getattr(node, key) is not None:
                    raise TopologyError(aggregator_privacy_message(node_id, key))
            for key in SENSOR_KEYS:
                if getattr(node, key) != BUILTIN_DEFAULTS[key]:
                    raise TopologyError(aggregator_sensor_message(node_id, key))
    n_leaves = sum(1 for node_id in nodes if node_id not in aggregators)
    for node_id, node in nodes.items():
        if node.score != "off" and (node_id in aggregators or algorithm != "fpca"):
            what = "an aggregator" if node_id in aggregators else f"a {algorithm} leaf"
            raise TopologyError(
                f"node {node_id!r}: score = {node.score!r} is not supported on {what} "
                "(FPCA leaves only)"
            )
    if algorithm != "fedpower":
        for node_id, node in nodes.items():
            if node.mechanism == FEDPOWER_MECHANISM:
                raise TopologyError(
                    f"leaf {node_id!r}: mechanism {FEDPOWER_MECHANISM!r} needs "
                    'algorithm = "fedpower"'
                )
    if algorithm == "fedpower" and open_nodes:
        raise TopologyError(
            f'node {sorted(open_nodes)[0]!r}: open = true needs algorithm = "fpca" '
            "(FedPower's rounds run over the leaves the topology declares)"
        )
    if algorithm == "fedpower":
        for node_id, node in nodes.items():
            if node.epsilon is not None:
                nodes[node_id] = fedpower_private_leaf(node_id, node, fedpower)
        q = fedpower.quorum
        if isinstance(q, int) and q > n_leaves:
            raise TopologyError(
                f"topology: fedpower_quorum {q} exceeds the number of leaves {n_leaves}"
            )
    seeds: dict[int, str] = {}
    for node_id, node in nodes.items():
        if node.noise_seed is None:
            continue
        if node.noise_seed in seeds:
            raise TopologyError(
                f"nodes {seeds[node.noise_seed]!r} and {node_id!r} share noise_seed "
                f"{node.noise_seed}: their noise would cancel in the difference of their "
                "snapshots; give each leaf its own seed"
            )
        seeds[node.noise_seed] = node_id
    check_secagg(nodes, children, aggregators)
    admit = {
        node_id: MappingProxyType(_check_admit(nodes, node_id, settings))
        for node_id, settings in dict(values["admit"]).items()
    }
    source_path = values["source_path"]
    return {
        **values,
        "nodes": MappingProxyType(nodes),
        "admit": MappingProxyType(admit),
        "source_path": None if source_path is None else Path(source_path),
    }


@validated(_check_topology)
@dataclass(frozen=True)
class Topology:
    """A validated aggregation tree with its topic names and dataset split.

    Parameters
    ----------
    name : str
        Name of the deployment (for logs and summaries).
    prefix : str
        Topic prefix, e.g. ``"fpca"``: no ``+``/``#``/NUL, no leading/trailing ``/``, no empty
        level, not starting with ``$``.
    nodes : Mapping[str, NodeConfig]
        Every node by id, in file order (kept as a read-only mapping).
    root : str
        Id of the one node without a parent.
    dataset : str or None, default None
        Built-in dataset name or a file path (relative to ``source_path``'s folder), or None.
    split : str, default "contiguous"
        One of `SPLITS`, see `split_rows`.
    source_path : Path or None, default None
        The TOML file this came from, if any.
    algorithm : {"fpca", "fedpower"}, default "fpca"
        The federated algorithm (`ALGORITHMS`): FPCA's asynchronous merges, or FedPower's
        rounds of local power iterations (the root is the server).
    fedpower : FedPowerConfig, default FedPowerConfig()
        The round settings when ``algorithm = "fedpower"`` (ignored otherwise).
    admit : Mapping[str, Mapping[str, object]], default {}
        For each open aggregator (``NodeConfig.open``), the settings of the leaves it
        admits at run time (keys of `ADMIT_KEYS`; from a file: ``[defaults]`` overridden by
        the node's ``[nodes.admit]`` table); an open aggregator without an entry admits
        leaves of its own ``rank`` and the built-in defaults. See `admitted_leaf`.

    Raises
    ------
    TopologyError
        If the nodes do not form one tree rooted at ``root`` with at least one leaf (or an
        open root), a leaf has no sensor topic or an aggregator has one, an aggregator has a
        privacy setting, two leaves share a ``noise_seed``, ``admit`` names a node that is
        not open or holds invalid settings, a FedPower topology has an open aggregator, or
        another field is invalid.

    Notes
    -----
    Every method taking a ``node_id`` raises `TopologyError` when it is not a node of the
    topology (the message lists up to ten node ids). A FedPower topology replaces each
    private leaf by a copy with FedPower's mechanism (`fedpower_private_leaf`). A node is an
    aggregator when it has children or is open (an open node without declared children
    admits them all at run time); every other node is a leaf.
    """

    name: str
    prefix: str
    nodes: Mapping[str, NodeConfig]
    root: str
    dataset: str | None = None
    split: str = "contiguous"
    source_path: Path | None = None
    algorithm: str = "fpca"
    fedpower: FedPowerConfig = field(default_factory=FedPowerConfig)
    admit: Mapping[str, Mapping[str, object]] = field(default_factory=dict)

    @cached_property
    def _children(self) -> Mapping[str, tuple[str, ...]]:
        """Each node's children, in file order (derived from the nodes once)."""
        children: dict[str, list[str]] = {node_id: [] for node_id in self.nodes}
        for node_id, node in self.nodes.items():
            if node.parent is not None:
                children[node.parent].append(node_id)
        return MappingProxyType({k: tuple(v) for k, v in children.items()})

    @cached_property
    def _aggregators(self) -> frozenset[str]:
        """The nodes with children or open."""
        return frozenset(n for n, kids in self._children.items() if kids or self.nodes[n].open)

    @cached_property
    def _paths(self) -> Mapping[str, str]:
        """Each node's chain of ids from the root (`root_paths`)."""
        return MappingProxyType(root_paths({n: node.parent for n, node in self.nodes.items()}))

    def __hash__(self) -> int:
        return hash(
            (
                self.name,
                self.prefix,
                tuple(self.nodes.values()),
                self.root,
                self.dataset,
                self.split,
                self.source_path,
                self.algorithm,
                self.fedpower,
                tuple((k, tuple(v.items())) for k, v in self.admit.items()),
            )
        )

    # -- tree -------------------------------------------------------------------------------

    def _node(self, node_id: str) -> NodeConfig:
        try:
            return self.nodes[node_id]
        except (KeyError, TypeError):
            known = list(self.nodes)
            shown = ", ".join(known[:10]) + (", ..." if len(known) > 10 else "")
            raise TopologyError(
                f"unknown node {node_id!r} in topology {self.name!r} (nodes: {shown})"
            ) from None

    def children(self, node_id: str) -> list[str]:
        """Ids of the children of ``node_id``, in file order (empty for a leaf).

        Raises
        ------
        TopologyError
            If ``node_id`` is not a node.
        """
        self._node(node_id)
        return list(self._children[node_id])

    def is_leaf(self, node_id: str) -> bool:
        """Whether ``node_id`` has no children (and so reads sensors and runs FPCA-Edge).

        Raises
        ------
        TopologyError
            If ``node_id`` is not a node.
        """
        self._node(node_id)
        return node_id not in self._aggregators

    def leaves(self) -> list[str]:
        """Ids of all leaves, in file order."""
        return [node_id for node_id in self._children if node_id not in self._aggregators]

    def aggregators(self) -> list[str]:
        """Ids of all nodes with children or open (the root included), in file order."""
        return [node_id for node_id in self._children if node_id in self._aggregators]

    def is_open(self, node_id: str) -> bool:
        """Whether ``node_id`` is an open aggregator (admits children at run time).

        Raises
        ------
        TopologyError
            If ``node_id`` is not a node.
        """
        return self._node(node_id).open

    def admitted_leaf(self, parent: str, node_id: str) -> NodeConfig:
        """The settings of leaf ``node_id`` admitted at run time under open ``parent``.

        The open aggregator's ``admit`` settings (`Topology.admit`: from a file,
        ``[defaults]`` overridden by the node's ``[nodes.admit]`` table; the aggregator's
        ``rank`` when they set none), with ``id = node_id``, ``parent = parent`` and the
        default sensor topic ``sensors/<node_id>``. The aggregator holds every child it
        admits to these settings' ``valid_range`` and ``max_reading_rate``
        (`edge_runtime.agents.aggregator.core.plausibility`).

        Parameters
        ----------
        parent : str
            An open aggregator.
        node_id : str
            The admitted child's id (a valid node id; it is not checked against the
            declared nodes).

        Returns
        -------
        NodeConfig

        Raises
        ------
        TopologyError
            If ``parent`` is not a node or not open, or ``node_id`` is not a valid id.
        """
        node = self._node(parent)
        if not node.open:
            raise TopologyError(
                f"node {parent!r} is not open: it admits no children at run time (set "
                "open = true on it)"
            )
        return _admitted(node, node_id, self.admit.get(parent, {}))

    def subtree(self, node_id: str) -> list[str]:
        """``node_id`` and every node below it, in file order (``[node_id]`` for a leaf).

        Raises
        ------
        TopologyError
            If ``node_id`` is not a node.
        """
        prefix = self.path(node_id)
        return [
            node
            for node in self._children
            if self._paths[node] == prefix or self._paths[node].startswith(prefix + "/")
        ]

    def leaves_under(self, node_id: str) -> list[str]:
        """Leaves in the subtree of ``node_id`` (`subtree`), in file order (``[node_id]``
        for a leaf).

        Raises
        ------
        TopologyError
            If ``node_id`` is not a node.
        """
        return [node for node in self.subtree(node_id) if node not in self._aggregators]

    def reading_norm_sq_bound(self, node_id: str, n_features: int) -> float | None:
        """Largest squared Euclidean norm of one reading of ``n_features`` values that any
        leaf under ``node_id`` (the node itself for a leaf) passes to its estimator: the
        maximum over those leaves of `NodeConfig.reading_norm_sq_bound`, ``sum_j
        max(lo_j**2, hi_j**2)`` of its ``valid_range``. None if one of them declares no
        range, or per-feature bounds of another width.

        Parameters
        ----------
        node_id : str
            Any node.
        n_features : int
            Values per reading, >= 1.

        Returns
        -------
        float or None
            In the readings' squared units.

        Raises
        ------
        TopologyError
            If ``node_id`` is not a node.
        ValueError
            If ``n_features < 1``.
        """
        bounds = [
            self.nodes[leaf].reading_norm_sq_bound(n_features)
            for leaf in self.leaves_under(node_id)
        ]
        if any(bound is None for bound in bounds):
            return None
        return max(bounds)  # type: ignore[type-var]

    def max_reading_rate(self, node_id: str) -> float | None:
        """Readings per second the leaves under ``node_id`` (the node itself for a leaf) can
        produce at most: the sum of their declared ``max_reading_rate``; None if one of them
        declares none.

        Returns
        -------
        float or None
            Readings per second.

        Raises
        ------
        TopologyError
            If ``node_id`` is not a node.
        """
        rates = [self.nodes[leaf].max_reading_rate for leaf in self.leaves_under(node_id)]
        if any(rate is None for rate in rates):
            return None
        return float(sum(rates))  # type: ignore[arg-type]

    def path(self, node_id: str) -> str:
        """The chain of ids from the root to ``node_id``, e.g. ``"root/site-a/pi-01"``: the
        ``<path>`` of its topic names (`edge_runtime.topology.topics`).

        Raises
        ------
        TopologyError
            If ``node_id`` is not a node.
        """
        self._node(node_id)
        return self._paths[node_id]

    # -- topics (built by `edge_runtime.topology.topics`; see Notes for an unknown node) --

    def subspace_topic(self, node_id: str) -> str:
        """``<prefix>/<path>/subspace``: the node's latest snapshot (retained, QoS 1)."""
        return topics.node_topic(self.prefix, self.path(node_id), topics.SUBSPACE)

    def status_topic(self, node_id: str) -> str:
        """``<prefix>/<path>/status``: ``online`` / ``offline`` (retained, Last Will)."""
        return topics.node_topic(self.prefix, self.path(node_id), topics.STATUS)

    def status_detail_topic(self, node_id: str) -> str:
        """``<prefix>/<path>/status/detail``: the JSON status document (retained)."""
        return topics.node_topic(self.prefix, self.path(node_id), topics.STATUS_DETAIL)

    def scores_topic(self, node_id: str) -> str:
        """``<prefix>/<path>/scores``: a scoring leaf's anomaly scores (JSON, not retained;
        `edge_runtime.agents.leaf.core.scoring`)."""
        return topics.node_topic(self.prefix, self.path(node_id), topics.SCORES)

    def confirm_topic(self, node_id: str) -> str:
        """``<prefix>/<path>/confirm``: a leaf's reading confirmations (JSON, retained).

        Maps each sensor source to the last sequence number the leaf ingested and the last
        one that is durable (see `edge_runtime.wire.ConfirmMessage`).
        """
        return topics.node_topic(self.prefix, self.path(node_id), topics.CONFIRM)

    def model_topic(self) -> str:
        """``<prefix>/<root>/model``: the global estimate (retained)."""
        return topics.node_topic(self.prefix, self.path(self.root), topics.MODEL)

    def round_topic(self) -> str:
        """``<prefix>/<root>/round``: FedPower's round message from the root (retained)."""
        return topics.node_topic(self.prefix, self.path(self.root), topics.ROUND)

    def reply_topic(self, node_id: str) -> str:
        """``<prefix>/<path>/reply``: a FedPower leaf's reply to a round (not retained)."""
        return topics.node_topic(self.prefix, self.path(node_id), topics.REPLY)

    def config_topic(self) -> str:
        """``<prefix>/config``: the deployed topology (retained, operator-only)."""
        return topics.config_topic(self.prefix)

    def config_node_topic(self, node_id: str) -> str:
        """``<prefix>/config/nodes/<id>``: an enrolled device's entry (retained JSON)."""
        return topics.config_node_topic(self.prefix, node_id)

    def children_filter(self, node_id: str) -> str:
        """``<prefix>/<path>/+/subspace``: the filter matching the snapshots of the children.

        Defined for leaves too (it then matches nothing the topology publishes).
        """
        return topics.children_filter(self.prefix, self.path(node_id))

    # -- secure aggregation (`edge_runtime.topology.secagg`) --------------------------------

    def secagg_leaves(self, node_id: str) -> list[str]:
        """The children of ``node_id`` of mechanism ``"gaussian-secagg"``, in file order:
        the site it sums (empty for a leaf or an aggregator without secagg leaves)."""
        self._node(node_id)
        return secagg_children(self.nodes, self._children, node_id)

    def secagg_topic(self, node_id: str, kind: str) -> str:
        """``<prefix>/<path>/<kind>`` for a secagg kind of `edge_runtime.topology.topics`:
        a leaf's ``SECAGG_KEYS`` ... ``SECAGG_UNMASKED``, an aggregator's ``SECAGG_ROSTER``,
        ``SECAGG_UNMASK``, ``SECAGG_OUTCOME`` or ``secagg_delivery_kind(leaf)``."""
        return topics.node_topic(self.prefix, self.path(node_id), kind)

    def secagg_children_filter(self, node_id: str) -> str:
        """``<prefix>/<path>/+/secagg/+``: what a site's leaves publish to it."""
        return topics.secagg_children_filter(self.prefix, self.path(node_id))

    # -- data -------------------------------------------------------------------------------

    def split_rows(self, n_rows: int) -> dict[str, np.ndarray]:
        """Deal rows ``0 .. n_rows-1`` of a dataset to the leaves; every row exactly once.

        ``"contiguous"``: leaf ``i`` (file order) gets one contiguous range, the ranges in leaf
        order, of ``n_rows * share_i / sum(shares)`` rows rounded by the largest-remainder
        method (exact rational arithmetic; ties go to the earlier leaf), so each count is within
        1 of its exact quota. ``"round-robin"``: row ``j`` goes to leaf ``j % n_leaves``; shares
        are ignored. With fewer rows than leaves some leaves get none.

        Parameters
        ----------
        n_rows : int
            Number of rows (samples) in the dataset, >= 0.

        Returns
        -------
        dict of leaf id -> ndarray of shape (n_leaf_rows,), int64
            Increasing row indices, keys in leaf file order.

        Raises
        ------
        ValueError
            If ``n_rows`` is not a non-negative integer, or the topology declares no leaf
            (an open root without declared children).
        """
        leaves = self.leaves()
        if not leaves:
            raise ValueError(
                f"topology {self.name!r} declares no leaf to deal rows to (its open "
                "aggregators admit their children at run time)"
            )
        shares = [self.nodes[leaf].share for leaf in leaves]
        from edge_runtime.datasets import split as data_split  # here: an agent needs no data

        return dict(zip(leaves, data_split.split_rows(n_rows, shares, self.split), strict=True))

    def dataset_path(self) -> Path | None:
        """The file of the configured dataset, or ``None`` if there is no ``dataset``.

        A built-in name (see `edge_runtime.datasets.BUILTIN_DATASETS`; it wins over a file of the
        same name) gives the file shipped in the package. Otherwise ``~`` is expanded and a
        relative path is taken relative to the TOML file's folder (the working directory when
        the topology was parsed from a string). The file's existence is not checked here.
        `edge_runtime.datasets.load_dataset` accepts the result in every case.
        """
        if self.dataset is None:
            return None
        # here: an agent needs no data (a leaf's import time and RSS)
        from edge_runtime.datasets import BUILTIN_DATASETS, builtin_dataset_path

        if self.dataset in BUILTIN_DATASETS:
            return builtin_dataset_path(self.dataset)
        path = Path(self.dataset).expanduser()
        if not path.is_absolute() and self.source_path is not None:
            path = self.source_path.parent / path
        return path


def _admitted(parent: NodeConfig, node_id: str, settings: Mapping[str, object]) -> NodeConfig:
    """Leaf ``node_id`` under ``parent`` with ``settings`` (``rank``: the parent's unless
    given) and the default sensor topic."""
    rank = settings.get("rank", parent.rank)
    given = {k: v for k, v in settings.items() if k != "rank"}
    return NodeConfig(
        id=node_id,
        parent=parent.id,
        rank=rank,  # type: ignore[arg-type]
        sensor_topic=default_sensor_topic(node_id),
        **given,  # type: ignore[arg-type]
    )


def _check_admit(
    nodes: Mapping[str, NodeConfig], node_id: str, settings: Mapping[str, object]
) -> dict[str, object]:
    """``settings`` of the leaves open aggregator ``node_id`` admits, checked as a
    leaf's and normalised (`NodeConfig`), in their given order."""
    where = f"[nodes.admit] of node {node_id!r}"
    if node_id not in nodes or not nodes[node_id].open:
        raise TopologyError(
            f"{where}: admit settings need an open aggregator (open = true on node {node_id!r})"
        )
    for key in settings:
        if key not in ADMIT_KEYS:
            raise TopologyError(unknown_key_message(where, key, ADMIT_KEYS))
    try:
        leaf = _admitted(nodes[node_id], node_id, settings)
    except TopologyError as exc:
        problem = str(exc).removeprefix(f"node {node_id!r}: ")
        raise TopologyError(f"{where}: {problem}") from None
    return {key: getattr(leaf, key) for key in settings}
