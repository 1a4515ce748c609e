"""Synthetic fleets for the simulation: balanced trees and low-rank-plus-noise readings."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from edge_runtime.topology import DEFAULT_PREFIX, NodeConfig, Topology
from edge_runtime.topology.topics import default_sensor_topic

__all__ = ["balanced_topology", "low_rank_data"]


def balanced_topology(
    k: int,
    fanout: int,
    *,
    rank: int,
    block_size: int = 50,
    name: str = "simulation",
    **node_options: Any,
) -> Topology:
    """A tree of ``k`` leaves, all at the same depth, under aggregators of <= ``fanout`` children.

    Aggregator levels are added until one node (``root``) remains; children are dealt to
    their parents in order, as evenly as possible. ``k = 10_000, fanout = 100`` gives a root
    over 100 aggregators of 100 leaves; ``fanout = 22`` gives three aggregator levels.

    Parameters
    ----------
    k : int
        Number of leaves (``leaf-00000`` ...), >= 1.
    fanout : int
        Most children per aggregator, >= 2.
    rank, block_size : int
        Every node's ``rank`` and ``block_size``.
    name : str
    **node_options
        Further `NodeConfig` fields for every node (e.g. ``publish_max_interval_s``).

    Returns
    -------
    Topology
        Leaves read ``sensors/<id>``; aggregators are ``agg-<level>-<i>`` (level 1 above the
        leaves).

    Raises
    ------
    ValueError
        If ``k < 1`` or ``fanout < 2`` (and `TopologyError` for invalid node options).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1 leaf, got {k}")
    if fanout < 2:
        raise ValueError(f"fanout must be >= 2, got {fanout}")
    width = len(str(k - 1))
    level_ids = [f"leaf-{i:0{width}d}" for i in range(k)]
    parent_of: dict[str, str] = {}
    upper: list[list[str]] = []
    level = 1
    while True:
        groups = math.ceil(len(level_ids) / fanout)
        ids = ["root"] if groups == 1 else [f"agg-{level}-{i}" for i in range(groups)]
        for group, members in enumerate(np.array_split(np.arange(len(level_ids)), groups)):
            for member in members:
                parent_of[level_ids[member]] = ids[group]
        upper.append(ids)
        if groups == 1:
            break
        level_ids, level = ids, level + 1
    nodes: dict[str, NodeConfig] = {}
    leaves = [f"leaf-{i:0{width}d}" for i in range(k)]
    for ids in reversed(upper):  # root first, then each level down
        for node_id in ids:
            nodes[node_id] = NodeConfig(
                node_id, parent_of.get(node_id), rank, block_size, **node_options
            )
    for leaf in leaves:
        nodes[leaf] = NodeConfig(
            leaf,
            parent_of[leaf],
            rank,
            block_size,
            sensor_topic=default_sensor_topic(leaf),
            **node_options,
        )
    return Topology(name=name, prefix=DEFAULT_PREFIX, nodes=nodes, root="root")


def low_rank_data(
    n_samples: int,
    n_features: int,
    rank: int,
    *,
    noise: float = 0.1,
    seed: int = 0,
) -> np.ndarray:
    """Rank-``rank`` Gaussian signal plus isotropic Gaussian noise, rows as samples.

    ``X = (G * s) @ W^T + noise * E`` with ``W`` a random orthonormal ``(n_features, rank)``
    basis, ``s`` linearly spaced from 5 down to 2, ``G`` and ``E`` standard normal.

    Returns
    -------
    ndarray of shape (n_samples, n_features), float64
    """
    if not 1 <= rank <= n_features:
        raise ValueError(f"rank must be in [1, n_features={n_features}], got {rank}")
    rng = np.random.default_rng(seed)
    w, _ = np.linalg.qr(rng.standard_normal((n_features, rank)))
    scales = np.linspace(5.0, 2.0, rank)
    x = (rng.standard_normal((n_samples, rank)) * scales) @ w.T
    x += noise * rng.standard_normal((n_samples, n_features))
    return x
