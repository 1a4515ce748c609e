"""Fleet benchmark, offline: float32 against float64 snapshots on the wire.

A topology's federation without a broker: each leaf an `FPCAEdge` (its node's rank and
block size) over its rows, whose ``tracked_subspace`` goes through ``encode_subspace(msg,
dtype=...)`` and `decode_subspace`; each aggregator a `MergeTree` whose merge goes over the
wire again; the root's merge truncated to its rank. Per dtype: the root's error ratio, bytes
of a leaf's and an aggregator's snapshot, and the largest principal angle to float64's root.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from benchmarks.fleet.inputs import fleet_topology_text
from benchmarks.fleet.scaling import MOTES_TOPOLOGY
from benchmarks.synth import low_rank
from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import FPCAEdge, MergeTree, Subspace, error_ratio, principal_angles
from edge_runtime.topology import Topology, load_topology, parse_topology
from edge_runtime.wire import SubspaceMessage, decode_subspace, encode_subspace

__all__ = ["DTYPES", "DtypeResult", "DtypeRow", "federate_over_wire", "measure_dtypes"]

DTYPES = ("float64", "float32")
#: float32 is the better default when its root error ratio is within this of float64's.
RATIO_TOLERANCE = 1e-6


@dataclass
class DtypeRow:
    """One data set through the wire in one dtype (bytes: mean payload sizes)."""

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


def federate_over_wire(
    topology: Topology, data: np.ndarray, dtype: str
) -> tuple[np.ndarray, list[int], list[int]]:
    """The root basis ``(n_features, root rank)`` of ``topology`` on ``data`` ``(n_samples,
    n_features)`` with every snapshot sent in ``dtype``, and the payload sizes of the
    leaves' and of the non-root aggregators' snapshots."""
    sizes: dict[bool, list[int]] = {True: [], False: []}  # by "is a leaf"

    def over_wire(node: str, sub: Subspace, provenance: dict[str, int]) -> Subspace:
        msg = SubspaceMessage(node, "bench", 1, sub, 0.0, provenance=provenance)
        payload = encode_subspace(msg, dtype=dtype)  # type: ignore[arg-type]
        sizes[topology.is_leaf(node)].append(len(payload))
        return decode_subspace(payload).subspace

    rows = topology.split_rows(data.shape[0])

    def snapshot(node: str) -> tuple[Subspace, dict[str, int]]:
        cfg = topology.nodes[node]
        if topology.is_leaf(node):
            est = FPCAEdge(data.shape[1], cfg.rank, cfg.block_size).partial_fit(data[rows[node]])
            provenance = {node: len(rows[node])}
            return over_wire(node, est.tracked_subspace, provenance), provenance
        tree, provenance = MergeTree(topology.children(node)), {}
        for child in topology.children(node):
            sub, prov = snapshot(child)
            tree.update(child, sub)
            provenance.update(prov)
        assert tree.result is not None
        if node == topology.root:
            return tree.result.truncate(cfg.rank), provenance
        return over_wire(node, tree.result, provenance), provenance

    root, _ = snapshot(topology.root)
    return root.basis, sizes[True], sizes[False]


def measure_dtypes(log: Callable[[str], None] = print) -> DtypeResult:
    """float32 against float64 snapshots on Motes light and on synthetic fleet data."""
    cases = [
        ("Motes light (7712 x 48), motes-light.toml", load_topology(MOTES_TOPOLOGY),
         load_dataset("motes-light")),
        ("synthetic, 8 leaves x 200 readings (d = 48)",
         parse_topology(fleet_topology_text(8, fan_out=3)), low_rank(1600, 48, 10)),
    ]  # fmt: skip
    rows: list[DtypeRow] = []
    for name, topology, data in cases:
        bases: dict[str, np.ndarray] = {}
        for dtype in DTYPES:
            bases[dtype], leaf_bytes, agg_bytes = federate_over_wire(topology, data, dtype)
            rows.append(DtypeRow(
                name, dtype, error_ratio(data, bases[dtype]), float(np.mean(leaf_bytes)),
                float(np.mean(agg_bytes)) if agg_bytes else math.nan,
                float(principal_angles(bases["float64"], bases[dtype]).max()),
            ))  # fmt: skip
    pairs = zip(rows[::2], rows[1::2], strict=True)
    worst = max(abs(a.error_ratio - b.error_ratio) for a, b in pairs)
    m64, m32 = rows[0], rows[1]
    saved = 1.0 - m32.leaf_bytes / m64.leaf_bytes
    if worst <= RATIO_TOLERANCE:
        recommended, reason = "float32", (
            f"float32 changes the root error ratio by at most {worst:.1e} (Motes "
            f"{m32.error_ratio:.6f} vs {m64.error_ratio:.6f} with float64) and makes a leaf "
            f"snapshot {saved:.0%} smaller ({m32.leaf_bytes:,.0f} vs {m64.leaf_bytes:,.0f} bytes)"
        )
    else:
        recommended, reason = "float64", (
            f"float32 changes the root error ratio by {worst:.1e} (> {RATIO_TOLERANCE:g}); "
            f"it would save {saved:.0%} of a leaf snapshot's bytes"
        )
    log(f"  wire dtype: default {recommended}: {reason}")
    return DtypeResult(rows, recommended, reason)
