"""The Motes light tree of section (f): private leaves, two aggregators, one root.

Data: `edge_runtime.datasets.load_dataset("motes-light")` (7712 x 48, lux, uncentred),
split into ``leaves`` contiguous parts (8 leaves of 964 rows). Every leaf clips its rows
at ``C`` (`MOTES_CLIP`, 8230 lux: the clip norm of issue 10's measurements, the 95th
percentile of this dataset's row norms: taken from the data, which is fine for replaying
a public dataset but not for a deployment, where it must come from the sensors' range)
and publishes a rank ``r + 10`` subspace (`leaves`: `FPCAEdge`'s tracked subspace, every
direction of the released sum for ``"gaussian"``; ``r + 10`` directions for the
hand-built leaves); two aggregators merge half of the leaves each keeping every
direction they receive (`edge_runtime.fpca.merge_many` with ``rank=None``, as the
runtime's aggregators do), the root merges the two at rank ``r``. The score is
`edge_runtime.fpca.error_ratio` of the root's basis on all rows (unclipped): the mean
squared residual over that of the offline rank-``r`` SVD, 1 is optimal.

Methods (`TreeMethod.kind`): the tree with `FPCAEdge` leaves (``"gaussian"``,
``"fpca-eq8"``), with symmetric MOD-SuLQ leaves, with the two leaf states of the
state-choice table (``"running-sum"``, ``"merged-blocks"``: `PrivateGram` directly, the
same noise matrices for the same seed) and without privacy (``"plain"``); and, without the tree,
DPdisPCA over the leaves (`benchmarks.privacy.dpdispca`, one round, ``S = leaves``),
the central Analyze Gauss (one Gaussian release of the Gram matrix of all rows, the
noise of a single leaf: the best any tree of private leaves can hope for) and a random
rank-``r`` subspace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.privacy import leaves
from benchmarks.privacy.dpdispca import dpdispca
from benchmarks.privacy.stats import rng_for
from edge_runtime.fpca import Subspace, error_ratio, merge_many
from edge_runtime.fpca.privacy import (
    clip_to_unit_ball,
    default_block_size,
    gaussian_default_block_size,
)
from edge_runtime.fpca.private_gram import PrivateGram

__all__ = [
    "CENTRAL",
    "DPDISPCA",
    "EQ8",
    "GAUSSIAN",
    "MERGED_BLOCKS",
    "MOD_SULQ",
    "MOTES_CLIP",
    "ONE_RELEASE",
    "PLAIN",
    "RANDOM",
    "RUNNING_SUM",
    "MotesData",
    "TreeMethod",
    "block_rows",
    "load_motes",
    "releases_per_leaf",
    "root_basis",
    "root_error",
    "tree_root",
]

#: Clipping norm of the Motes light rows (lux): the 95th percentile of their norms.
MOTES_CLIP = 8230.0
#: Directions a leaf publishes beyond ``r`` (`FPCAEdge`'s default oversample at r = 10).
LEAF_OVERSAMPLE = 10

GAUSSIAN = "gaussian"
EQ8 = "fpca-eq8"
MOD_SULQ = "mod-sulq"
MERGED_BLOCKS = "merged-blocks"
RUNNING_SUM = "running-sum"
PLAIN = "plain"
DPDISPCA = "dpdispca"
CENTRAL = "central"
RANDOM = "random"

#: ``TreeMethod.block_size`` for one release of all of a leaf's rows.
ONE_RELEASE = 0


@dataclass(frozen=True)
class TreeMethod:
    """One row of the Motes tables: how the leaves (or the central release) are private.

    Attributes
    ----------
    label : str
        Name in the report.
    kind : str
        `GAUSSIAN`, `EQ8`, `MOD_SULQ`, `RUNNING_SUM`, `MERGED_BLOCKS`, `PLAIN`,
        `DPDISPCA`, `CENTRAL` or `RANDOM`.
    block_size : int or None
        Rows per release for the block-wise kinds: a positive int, `ONE_RELEASE` (the
        leaf's rows at once) or None (what `FPCAEdge` picks when given no block size:
        `gaussian_default_block_size` at ``horizon``, or eq. (8)'s `default_block_size`).
    horizon : int
        ``H`` of the continual release (`GAUSSIAN` and `RUNNING_SUM` only).
    """

    label: str
    kind: str
    block_size: int | None = ONE_RELEASE
    horizon: int = 1


@dataclass(frozen=True)
class MotesData:
    """The Motes light rows and their split into leaves."""

    #: ``(n, d)`` raw rows (lux).
    x: np.ndarray
    #: The leaves' raw rows, contiguous, ``n / leaves`` each.
    parts: tuple[np.ndarray, ...]
    #: The same rows clipped at `clip_norm` and divided by it (norm <= 1).
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
    if method.kind not in (GAUSSIAN, EQ8, MERGED_BLOCKS, RUNNING_SUM):
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


def _leaf(
    data: MotesData,
    method: TreeMethod,
    i: int,
    rank: int,
    epsilon: float,
    delta: float,
    seed: int,
) -> Subspace:
    count = rank + LEAF_OVERSAMPLE
    c = data.clip_norm
    if method.kind == PLAIN:
        return leaves.plain_leaf(data.parts[i], rank)
    if method.kind == MOD_SULQ:
        return leaves.mod_sulq_leaf(
            data.unit_parts[i], count, epsilon, delta, c, rng_for(1, seed, i)
        )
    block = block_rows(method, data.parts[i].shape[0], data.n_features, epsilon, delta)
    if method.kind in (MERGED_BLOCKS, RUNNING_SUM):  # the same noise for the same seed
        rng = np.random.default_rng(seed * 100 + i)
        unit = data.unit_parts[i]
        if method.kind == RUNNING_SUM:
            return leaves.running_sum_leaf(
                unit, block, count, epsilon, delta, c, rng, horizon=method.horizon
            )
        return leaves.merged_blocks_leaf(unit, block, count, epsilon, delta, c, rng)
    return leaves.fpca_leaf(
        data.parts[i],
        rank,
        block_size=block,
        epsilon=epsilon,
        delta=delta,
        clip_norm=c,
        mechanism=method.kind,
        horizon=method.horizon,
        seed=seed * 100 + i,
    )


def root_basis(
    data: MotesData,
    method: TreeMethod,
    *,
    rank: int,
    epsilon: float,
    delta: float,
    seed: int,
) -> np.ndarray:
    """The root's rank-``rank`` basis, ``(d, rank)``, for one seed of ``method``.

    Leaf ``i`` of the `FPCAEdge`, running-sum and merged-blocks kinds draws its noise
    from seed ``100 seed + i``; the other kinds from ``SeedSequence((kind tag, seed,
    ...))``.
    """
    d = data.n_features
    if method.kind == RANDOM:
        q, _ = np.linalg.qr(rng_for(4, seed).standard_normal((d, rank)))
        return q
    if method.kind == DPDISPCA:
        return dpdispca(list(data.unit_parts), rank, epsilon, delta, rng_for(2, seed))
    if method.kind == CENTRAL:
        gram = PrivateGram(d, epsilon, delta, rng=rng_for(3, seed))
        gram.release(np.concatenate(data.unit_parts))
        return gram.top(rank)[0]
    subs = [_leaf(data, method, i, rank, epsilon, delta, seed) for i in range(len(data.parts))]
    return tree_root(subs, rank).basis[:, :rank]


def root_error(
    data: MotesData,
    method: TreeMethod,
    *,
    rank: int,
    epsilon: float,
    delta: float,
    seed: int,
) -> float:
    """`error_ratio` of `root_basis` on all of ``data.x`` (1 is the offline SVD's)."""
    basis = root_basis(data, method, rank=rank, epsilon=epsilon, delta=delta, seed=seed)
    return error_ratio(data.x, basis)
