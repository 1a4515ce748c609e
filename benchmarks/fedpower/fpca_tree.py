"""FPCA on the section (h) tree: streaming ``FPCAEdge(d, r, block_size)`` leaves (private:
`leaves.fpca_leaf`, one release, seed ``100 seed + i``), two aggregators keeping every direction,
the root at rank ``r``; a dead leaf publishes nothing. Bytes of encoded float32 snapshots
(`wire_bytes.snapshot_bytes`) under the ``final`` and ``per block`` publish policies
(``templates/fedpower.md``); the root is the same under both.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.fedpower.faults import Fault
from benchmarks.fedpower.wire_bytes import snapshot_bytes
from benchmarks.privacy.leaves import fpca_leaf, streamed
from edge_runtime.fpca import FPCAEdge, Subspace, merge_many
from edge_runtime.wire import PrivacyParams

__all__ = ["FPCARun", "fpca_run", "per_block_traffic"]


@dataclass(frozen=True, eq=False)
class FPCARun:
    """The root's basis ``(d, r)``, the numerics' wall time (no I/O), and the snapshots
    published and their encoded bytes under the ``final`` policy."""

    basis: np.ndarray
    seconds: float
    messages: int
    wire_bytes: int


def _groups(m: int) -> list[range]:
    return [range((m + 1) // 2), range((m + 1) // 2, m)]


def _live_rows(parts: Sequence[np.ndarray], fault: Fault) -> dict[int, np.ndarray]:
    """The rows of every leaf that publishes anything, by leaf index."""
    m = len(parts)
    rows = {i: fault.rows(i, np.asarray(p, dtype=np.float64), m) for i, p in enumerate(parts)}
    return {i: r for i, r in rows.items() if fault.connected(i, m) and r.shape[0] > 0}


def fpca_run(
    parts: Sequence[np.ndarray], rank: int, block_size: int = 50, *,
    privacy: tuple[float, float] | None = None, clip_norm: float | None = None,
    fault: Fault | None = None, seed: int = 0,
) -> FPCARun:  # fmt: skip
    """The tree of the module docstring over ``parts`` (``(n_l, d)`` each, one leaf each)."""
    m, t0 = len(parts), time.perf_counter()
    subs: dict[int, Subspace] = {}
    for i, rows in _live_rows(parts, Fault() if fault is None else fault).items():
        if privacy is None:
            subs[i] = streamed(FPCAEdge(rows.shape[1], rank, block_size), rows).tracked_subspace
        else:
            eps, delta = privacy
            subs[i] = fpca_leaf(rows, rank, block_size=rows.shape[0], epsilon=eps, delta=delta,
                                clip_norm=clip_norm, seed=100 * seed + i)  # fmt: skip
    children = {g: [i for i in group if i in subs] for g, group in enumerate(_groups(m))}
    middle = {g: merge_many([subs[i] for i in kids]) for g, kids in children.items() if kids}
    root = merge_many(list(middle.values()), rank=rank)
    seconds = time.perf_counter() - t0
    params = None if privacy is None else PrivacyParams(
        epsilon=privacy[0], delta=privacy[1], clip_norm=float(clip_norm or 1))  # fmt: skip
    sizes = [snapshot_bytes(s, f"leaf-{i}", 0, {f"leaf-{i}": s.n_samples}, params)
             for i, s in subs.items()]  # fmt: skip
    for g, merged in middle.items():
        prov = {f"leaf-{i}": subs[i].n_samples for i in children[g]}
        sizes.append(snapshot_bytes(merged, f"agg-{g}", 0, prov, params))
    return FPCARun(root.basis[:, :rank], seconds, len(sizes), int(sum(sizes)))


def per_block_traffic(
    parts: Sequence[np.ndarray], rank: int, block_size: int = 50, fault: Fault | None = None
) -> tuple[int, int]:
    """``(messages, bytes)`` of the ``per block`` policy (non-private), leaves interleaved
    block by block."""
    rows = _live_rows(parts, Fault() if fault is None else fault)
    groups = _groups(len(parts))
    est = {i: FPCAEdge(r.shape[1], rank, block_size) for i, r in rows.items()}
    latest: dict[int, Subspace] = {}
    seq = dict.fromkeys(range(-2, len(parts)), 0)
    messages = total = 0
    for b in range(max(-(-r.shape[0] // block_size) for r in rows.values())):
        for i, leaf_rows in rows.items():
            block = leaf_rows[b * block_size : (b + 1) * block_size]
            if block.shape[0] == 0:
                continue
            est[i].partial_fit(block)
            if block.shape[0] < block_size:
                est[i].flush()
            latest[i], seq[i] = est[i].tracked_subspace, seq[i] + 1
            total += snapshot_bytes(latest[i], f"leaf-{i}", seq[i], {f"leaf-{i}": 1})
            g = next(k for k, grp in enumerate(groups) if i in grp)
            kids = [j for j in groups[g] if j in latest]
            seq[g - 2] += 1
            prov = {f"leaf-{j}": latest[j].n_samples for j in kids}
            merged = merge_many([latest[j] for j in kids])
            total += snapshot_bytes(merged, f"agg-{g}", seq[g - 2], prov)
            messages += 2
    return messages, total
