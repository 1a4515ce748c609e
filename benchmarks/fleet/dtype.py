"""Fleet benchmark, offline: float32 against float64 snapshots on the wire.

The federation of ``topologies/motes-light.toml`` without a broker: the data split over
the 8 leaves as the topology deals it, one `FPCAEdge` per leaf (the topology's rank 10 and
block size 50, default oversample) over its rows, its ``tracked_subspace`` (pending rows
included, as a leaf's final snapshot) sent through ``encode_subspace(msg, dtype=...)`` and
`decode_subspace`, each aggregator a `MergeTree` over its children's decoded snapshots
whose merge goes over the wire again, the root's merge truncated to rank 10. Reported per
dtype: the root's error ratio (`edge_runtime.fpca.error_ratio` on all rows), bytes of a
leaf's and of an aggregator's snapshot, and the largest principal angle between the root
bases of the two dtypes. The same on synthetic fleet data (8 leaves of 200 readings).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from benchmarks.fleet.inputs import fleet_topology_text
from benchmarks.fleet.scaling import MOTES_TOPOLOGY
from benchmarks.synth import low_rank
from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import FPCAEdge, MergeTree, Subspace, error_ratio, principal_angles
from edge_runtime.topology import Topology, load_topology, parse_topology
from edge_runtime.wire import SubspaceMessage, decode_subspace, encode_subspace

__all__ = ["DTYPES", "DtypeResult", "DtypeRow", "federate_over_wire", "measure_dtypes"]

DTYPES: tuple[Literal["float64", "float32"], ...] = ("float64", "float32")
#: float32 is the better default when its root error ratio is within this of float64's.
RATIO_TOLERANCE = 1e-6


@dataclass
class DtypeRow:
    """One data set through the wire in one dtype."""

    data: str
    dtype: str
    error_ratio: float
    leaf_bytes: float
    aggregator_bytes: float
    max_angle_to_float64: float


@dataclass
class DtypeResult:
    """Both dtypes on every data set, and the default they point to."""

    rows: list[DtypeRow]
    recommended: str
    reason: str


def _over_wire(
    node: str, subspace: Subspace, provenance: dict[str, int], dtype: str
) -> tuple[Subspace, int]:
    msg = SubspaceMessage(node, "bench", 1, subspace, 0.0, provenance=provenance)
    payload = encode_subspace(msg, dtype=dtype)  # type: ignore[arg-type]
    return decode_subspace(payload).subspace, len(payload)


def federate_over_wire(
    topology: Topology, data: np.ndarray, dtype: str
) -> tuple[np.ndarray, list[int], list[int]]:
    """The root basis of ``topology`` on ``data`` with every snapshot sent in ``dtype``.

    Parameters
    ----------
    topology : Topology
        Every leaf runs `FPCAEdge` with its node's rank and block size.
    data : ndarray of shape (n_samples, n_features)
    dtype : {"float64", "float32"}

    Returns
    -------
    basis : ndarray of shape (n_features, rank of the root)
    leaf_bytes, aggregator_bytes : list of int
        Payload sizes of the leaves' and of the non-root aggregators' snapshots.
    """
    d = data.shape[1]
    rows = topology.split_rows(data.shape[0])
    leaf_bytes: list[int] = []
    aggregator_bytes: list[int] = []
    received: dict[str, tuple[Subspace, dict[str, int]]] = {}
    for leaf, index in rows.items():
        cfg = topology.nodes[leaf]
        est = FPCAEdge(d, cfg.rank, cfg.block_size).partial_fit(data[index])
        provenance = {leaf: len(index)}
        sub, size = _over_wire(leaf, est.tracked_subspace, provenance, dtype)
        received[leaf] = (sub, provenance)
        leaf_bytes.append(size)

    def merge(node: str) -> tuple[Subspace, dict[str, int]]:
        children = topology.children(node)
        tree = MergeTree(children)
        provenance: dict[str, int] = {}
        for child in children:
            sub, prov = received[child] if topology.is_leaf(child) else merge(child)
            tree.update(child, sub)
            provenance.update(prov)
        result = tree.result
        assert result is not None
        if node == topology.root:
            return result.truncate(topology.nodes[node].rank), provenance
        sub, size = _over_wire(node, result, provenance, dtype)
        aggregator_bytes.append(size)
        return sub, provenance

    root, _ = merge(topology.root)
    return root.basis, leaf_bytes, aggregator_bytes


def measure_dtypes(log: Callable[[str], None] = print) -> DtypeResult:
    """float32 against float64 snapshots on Motes light and on synthetic fleet data."""
    motes = load_topology(MOTES_TOPOLOGY)
    synthetic = parse_topology(fleet_topology_text(8, fan_out=3))
    cases = [
        ("Motes light (7712 x 48), motes-light.toml", motes, load_dataset("motes-light")),
        ("synthetic, 8 leaves x 200 readings (d = 48)", synthetic, low_rank(1600, 48, 10)),
    ]
    rows: list[DtypeRow] = []
    for name, topology, data in cases:
        bases: dict[str, np.ndarray] = {}
        for dtype in DTYPES:
            basis, leaf_bytes, agg_bytes = federate_over_wire(topology, data, dtype)
            bases[dtype] = basis
            rows.append(
                DtypeRow(
                    data=name,
                    dtype=dtype,
                    error_ratio=error_ratio(data, basis),
                    leaf_bytes=float(np.mean(leaf_bytes)),
                    aggregator_bytes=float(np.mean(agg_bytes)) if agg_bytes else math.nan,
                    max_angle_to_float64=float(principal_angles(bases["float64"], basis).max()),
                )
            )
    worst = max(
        abs(a.error_ratio - b.error_ratio) for a, b in zip(rows[::2], rows[1::2], strict=True)
    )
    saved = 1.0 - rows[1].leaf_bytes / rows[0].leaf_bytes
    motes64, motes32 = rows[0], rows[1]
    if worst <= RATIO_TOLERANCE:
        recommended = "float32"
        reason = (
            f"float32 changes the root error ratio by at most {worst:.1e} (Motes "
            f"{motes32.error_ratio:.6f} vs {motes64.error_ratio:.6f} with float64) and "
            f"makes a leaf snapshot {saved:.0%} smaller ({motes32.leaf_bytes:,.0f} vs "
            f"{motes64.leaf_bytes:,.0f} bytes)"
        )
    else:
        recommended = "float64"
        reason = (
            f"float32 changes the root error ratio by {worst:.1e} (> {RATIO_TOLERANCE:g}); "
            f"it would save {saved:.0%} of a leaf snapshot's bytes"
        )
    log(f"  wire dtype: default {recommended}: {reason}")
    return DtypeResult(rows=rows, recommended=recommended, reason=reason)
