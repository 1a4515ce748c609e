"""The Motes light tree of section (f): private leaves, two aggregators, one root.

`load_motes` splits ``load_dataset("motes-light")`` (7712 x 48, lux) into contiguous leaves
clipped at `MOTES_CLIP`; each leaf publishes a rank ``r + 10`` subspace (`leaves`), two
aggregators keep every direction, the root merges at rank ``r``; DPdisPCA, the central Analyze
Gauss and a random subspace skip the tree. Score: `error_ratio` on all rows, unclipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.measure import rng_for
from benchmarks.privacy import leaves
from benchmarks.privacy.comparators import dpdispca
from edge_runtime.fpca import Subspace, error_ratio, merge_many
from edge_runtime.fpca.privacy import (
    clip_to_unit_ball,
    default_block_size,
    gaussian_default_block_size,
)
from edge_runtime.fpca.private_gram import PrivateGram

__all__ = [
    "CENTRAL", "DPDISPCA", "EQ8", "GAUSSIAN", "MERGED_BLOCKS", "MOD_SULQ", "MOTES_CLIP",
    "ONE_RELEASE", "PLAIN", "RANDOM", "RUNNING_SUM", "MotesData", "TreeMethod", "block_rows",
    "load_motes", "releases_per_leaf", "root_error", "tree_root",
]  # fmt: skip

#: Clipping norm of the Motes light rows (lux): the 95th percentile of their norms.
MOTES_CLIP = 8230.0
#: Directions a leaf publishes beyond ``r`` (`FPCAEdge`'s default oversample at r = 10).
LEAF_OVERSAMPLE = 10

# `TreeMethod.kind`: FPCAEdge leaves, hand-built leaves, or no tree.
GAUSSIAN, EQ8, MOD_SULQ, PLAIN = "gaussian", "fpca-eq8", "mod-sulq", "plain"
MERGED_BLOCKS, RUNNING_SUM = "merged-blocks", "running-sum"
DPDISPCA, CENTRAL, RANDOM = "dpdispca", "central", "random"
_BLOCKWISE = (GAUSSIAN, EQ8, MERGED_BLOCKS, RUNNING_SUM)

#: ``TreeMethod.block_size`` for one release of all of a leaf's rows.
ONE_RELEASE = 0


@dataclass(frozen=True)
class TreeMethod:
    """One row of the Motes tables: ``kind`` (a constant above), rows per release
    (`ONE_RELEASE`, or None: `FPCAEdge`'s default for the mechanism at ``horizon``) and the
    continual-release horizon ``H`` (`GAUSSIAN`, `RUNNING_SUM`)."""

    label: str
    kind: str
    block_size: int | None = ONE_RELEASE
    horizon: int = 1


@dataclass(frozen=True)
class MotesData:
    """Rows ``x`` ``(n, d)`` in lux, the leaves' contiguous ``parts``, the same clipped and
    divided by ``clip_norm`` (``unit_parts``, norm <= 1)."""

    x: np.ndarray
    parts: tuple[np.ndarray, ...]
    unit_parts: tuple[np.ndarray, ...]
    clip_norm: float

    @property
    def n_features(self) -> int:
        """``d``."""
        return int(self.x.shape[1])


def load_motes(
    rows: int | None = None, n_leaves: int = 8, clip_norm: float = MOTES_CLIP
) -> MotesData:
    """Motes light (its first ``rows`` rows; None: all) split into ``n_leaves`` leaves."""
    from edge_runtime.datasets import load_dataset

    x = np.ascontiguousarray(load_dataset("motes-light")[:rows], dtype=np.float64)
    parts = tuple(np.array_split(x, n_leaves))
    unit = tuple(clip_to_unit_ball(p, clip_norm) for p in parts)
    return MotesData(x, parts, unit, float(clip_norm))


def block_rows(
    method: TreeMethod, leaf_rows: int, n_features: int, epsilon: float, delta: float
) -> int:
    """Rows per release of ``method`` on a leaf of ``leaf_rows`` rows (0: not block-wise)."""
    if method.kind not in _BLOCKWISE:
        return 0
    if method.block_size == ONE_RELEASE:
        return leaf_rows
    if method.block_size is None and method.kind == EQ8:
        return default_block_size(epsilon, delta, n_features)
    if method.block_size is None:
        return gaussian_default_block_size(epsilon, delta, n_features, method.horizon)
    return method.block_size


def releases_per_leaf(
    method: TreeMethod, leaf_rows: int, n_features: int, epsilon: float, delta: float
) -> int:
    """Releases a leaf of ``leaf_rows`` rows makes (the last block flushed; 1 if not block-wise)."""
    block = block_rows(method, leaf_rows, n_features, epsilon, delta)
    return -(-leaf_rows // block) if block else 1


def tree_root(subspaces: Sequence[Subspace], rank: int) -> Subspace:
    """Two aggregators (each half of ``subspaces``, every direction kept), then the root."""
    half = (len(subspaces) + 1) // 2
    middle = [merge_many(list(g)) for g in (subspaces[:half], subspaces[half:])]
    return merge_many(middle, rank=rank)


def _leaf(data: MotesData, method: TreeMethod, i: int, rank: int, eps: float, delta: float,
          seed: int) -> Subspace:  # fmt: skip
    count, c, unit = rank + LEAF_OVERSAMPLE, data.clip_norm, data.unit_parts[i]
    if method.kind == PLAIN:
        return leaves.plain_leaf(data.parts[i], rank)
    if method.kind == MOD_SULQ:
        return leaves.mod_sulq_leaf(unit, count, eps, delta, c, rng_for(1, seed, i))
    block = block_rows(method, data.parts[i].shape[0], data.n_features, eps, delta)
    rng = np.random.default_rng(seed * 100 + i)  # the same noise for both states
    if method.kind == RUNNING_SUM:
        return leaves.running_sum_leaf(unit, block, count, eps, delta, c, rng, method.horizon)
    if method.kind == MERGED_BLOCKS:
        return leaves.merged_blocks_leaf(unit, block, count, eps, delta, c, rng)
    return leaves.fpca_leaf(
        data.parts[i], rank, block_size=block, epsilon=eps, delta=delta, clip_norm=c,
        mechanism=method.kind, horizon=method.horizon, seed=seed * 100 + i,
    )  # fmt: skip


def root_error(
    data: MotesData, method: TreeMethod, *, rank: int, epsilon: float, delta: float, seed: int
) -> float:
    """`error_ratio` on all of ``data.x`` (1 is the offline SVD's) of the root's basis ``(d,
    rank)`` for one seed: leaf ``i`` of the `FPCAEdge` and state kinds draws from seed
    ``100 seed + i``, the others from ``SeedSequence((kind tag, seed, ...))``."""
    d = data.n_features
    if method.kind == RANDOM:
        basis = np.linalg.qr(rng_for(4, seed).standard_normal((d, rank)))[0]
    elif method.kind == DPDISPCA:
        basis = dpdispca(list(data.unit_parts), rank, epsilon, delta, rng_for(2, seed))
    elif method.kind == CENTRAL:
        gram = PrivateGram(d, epsilon, delta, rng=rng_for(3, seed))
        gram.release(np.concatenate(data.unit_parts))
        basis = gram.top(rank)[0]
    else:
        subs = [_leaf(data, method, i, rank, epsilon, delta, seed) for i in range(len(data.parts))]
        basis = tree_root(subs, rank).basis[:, :rank]
    return error_ratio(data.x, basis)
