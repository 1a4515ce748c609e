"""FPCA on the section (h) tree: streaming leaves, two aggregators, one root.

Each live leaf streams its rows (`Fault.rows`) through ``FPCAEdge(d, r, block_size)``
(default oversample: it tracks ``r + 10`` directions at ``r = 10``), flushes its last
partial block and publishes its ``tracked_subspace``; two aggregators (the first and the
second half of the leaves) merge their children keeping every direction
(`merge_many` with ``rank=None``, as the runtime's aggregators do) and the root merges
the two at rank ``r`` (section (f)'s Motes tree, `benchmarks.privacy.motes_tree`). A dead
leaf publishes nothing: its aggregator merges the others. Private: every leaf is
``FPCAEdge(..., privacy=(epsilon, delta), clip_norm=C)`` with the Gaussian mechanism and
one release of all its rows (`benchmarks.privacy.leaves.fpca_leaf`, seed ``100 seed + i``).

Messages and bytes (encoded `SubspaceMessage`, float32, `wire_bytes.snapshot_bytes`),
for two publish policies that bracket what a deployment does:

- ``final``: each leaf publishes once, at the end of its stream, and each aggregator
  once, after all its live children (8 + 2 messages without faults): the least FPCA can
  send for this root estimate. The only policy of a private leaf (one release).
- ``per block``: each leaf publishes after every block of ``block_size`` rows and each
  aggregator re-publishes its merge after every child snapshot (leaves interleaved
  block by block): the most an unthrottled runtime sends. The runtime's rate limits
  land in between (section (g): 57 messages on Motes light, status messages included).

The root's estimate is the same under both (the last snapshots are the final ones).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.fedpower.faults import Fault
from benchmarks.fedpower.wire_bytes import snapshot_bytes
from benchmarks.privacy.leaves import fpca_leaf
from edge_runtime.fpca import FPCAEdge, Subspace, merge_many
from edge_runtime.wire import PrivacyParams

__all__ = ["FPCARun", "fpca_run", "per_block_traffic"]


@dataclass(frozen=True, eq=False)
class FPCARun:
    """One FPCA tree run.

    Attributes
    ----------
    basis : ndarray of shape (d, r)
        The root's basis.
    seconds : float
        Wall time of the numerics (leaves' streaming and flush, the merges; no I/O).
    messages, wire_bytes : int
        Snapshots published and their encoded bytes under the ``final`` policy.
    """

    basis: np.ndarray
    seconds: float
    messages: int
    wire_bytes: int


def _groups(m: int) -> list[range]:
    half = (m + 1) // 2
    return [range(half), range(half, m)]


def _leaf_subspace(
    rows: np.ndarray,
    rank: int,
    block_size: int,
    privacy: tuple[float, float] | None,
    clip_norm: float | None,
    seed: int,
) -> Subspace:
    if privacy is not None:
        assert clip_norm is not None
        return fpca_leaf(
            rows,
            rank,
            block_size=rows.shape[0],
            epsilon=privacy[0],
            delta=privacy[1],
            clip_norm=clip_norm,
            seed=seed,
        )
    est = FPCAEdge(rows.shape[1], rank, block_size)
    est.partial_fit(rows)
    est.flush()
    return est.tracked_subspace


def fpca_run(
    parts: Sequence[np.ndarray],
    rank: int,
    block_size: int = 50,
    *,
    privacy: tuple[float, float] | None = None,
    clip_norm: float | None = None,
    fault: Fault | None = None,
    seed: int = 0,
) -> FPCARun:
    """The tree of the module docstring over ``parts`` (``(n_l, d)`` each, one leaf each)."""
    fault = Fault() if fault is None else fault
    m = len(parts)
    t0 = time.perf_counter()
    subs: dict[int, Subspace] = {}
    for i, part in enumerate(parts):
        rows = fault.rows(i, np.asarray(part, dtype=np.float64), m)
        if fault.connected(i, m) and rows.shape[0] > 0:
            subs[i] = _leaf_subspace(rows, rank, block_size, privacy, clip_norm, 100 * seed + i)
    middle = {
        g: merge_many([subs[i] for i in group if i in subs])
        for g, group in enumerate(_groups(m))
        if any(i in subs for i in group)
    }
    root = merge_many(list(middle.values()), rank=rank)
    seconds = time.perf_counter() - t0
    params = (
        None
        if privacy is None
        else PrivacyParams(epsilon=privacy[0], delta=privacy[1], clip_norm=float(clip_norm or 1))
    )
    sizes = [
        snapshot_bytes(s, f"leaf-{i}", 0, {f"leaf-{i}": s.n_samples}, params)
        for i, s in subs.items()
    ]
    for g, merged in middle.items():
        prov = {f"leaf-{i}": subs[i].n_samples for i in _groups(m)[g] if i in subs}
        sizes.append(snapshot_bytes(merged, f"agg-{g}", 0, prov, params))
    return FPCARun(root.basis[:, :rank], seconds, len(sizes), int(sum(sizes)))


def per_block_traffic(
    parts: Sequence[np.ndarray], rank: int, block_size: int = 50, fault: Fault | None = None
) -> tuple[int, int]:
    """``(messages, bytes)`` of the ``per block`` policy (non-private; module docstring)."""
    fault = Fault() if fault is None else fault
    m = len(parts)
    rows = [fault.rows(i, np.asarray(p, dtype=np.float64), m) for i, p in enumerate(parts)]
    live = [i for i in range(m) if fault.connected(i, m) and rows[i].shape[0] > 0]
    est = {i: FPCAEdge(rows[i].shape[1], rank, block_size) for i in live}
    latest: dict[int, Subspace] = {}
    seq = dict.fromkeys(range(-2, m), 0)
    messages = total = 0
    n_blocks = max(-(-rows[i].shape[0] // block_size) for i in live)
    for b in range(n_blocks):
        for i in live:
            block = rows[i][b * block_size : (b + 1) * block_size]
            if block.shape[0] == 0:
                continue
            est[i].partial_fit(block)
            if block.shape[0] < block_size:
                est[i].flush()
            latest[i] = est[i].tracked_subspace
            seq[i] += 1
            total += snapshot_bytes(latest[i], f"leaf-{i}", seq[i], {f"leaf-{i}": 1})
            g = next(k for k, grp in enumerate(_groups(m)) if i in grp)
            merged = merge_many([latest[j] for j in _groups(m)[g] if j in latest])
            seq[g - 2] += 1
            prov = {f"leaf-{j}": latest[j].n_samples for j in _groups(m)[g] if j in latest}
            total += snapshot_bytes(merged, f"agg-{g}", seq[g - 2], prov)
            messages += 2
    return messages, total
