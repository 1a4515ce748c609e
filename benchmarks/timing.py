"""Benchmarks (b), (c), (d): ingest throughput, merge time, aggregator update time.

All under `single_thread`, medians of side-by-side repeats (`time_side_by_side`); the checks use
ratios, which hold across machines where absolute times do not. (b) `FPCAEdge` against
scikit-learn's ``IncrementalPCA.partial_fit`` on the same batches; (c) `merge_subspaces` (Alg. 2)
against the naive SVD of ``[U1 S1, U2 S2]``; (d) `MergeTree.update` of one child against
`merge_many` over all ``k`` children.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla
from sklearn.decomposition import IncrementalPCA

from benchmarks.measure import single_thread, time_side_by_side
from benchmarks.synth import low_rank
from edge_runtime.fpca import FPCAEdge, merge_many, merge_subspaces, principal_angles
from edge_runtime.fpca.subspace import Subspace

__all__ = [
    "AggregatorRow", "MergeRow", "ThroughputRow", "aggregator_times", "growth_check",
    "merge_times", "throughput",
]  # fmt: skip


@dataclass
class ThroughputRow:
    """Samples/s of FPCA-Edge and IncrementalPCA for one (d, r, b); None = not run (``note``
    says why, e.g. ``"r > d"`` or IncrementalPCA's ``b >= r``)."""

    n_features: int
    rank: int
    block_size: int
    n_samples: int
    fpca: float | None
    ipca: float | None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """FPCA-Edge samples/s divided by IncrementalPCA's (None unless both ran)."""
        return None if self.ipca is None or self.fpca is None else self.fpca / self.ipca


def throughput(
    n_features: int, rank: int, block_size: int, *, n_blocks: int, repeats: int, seed: int = 0
) -> ThroughputRow:
    """Samples/s of both, each timed run a fresh estimator fed ``n_blocks`` batches of
    ``block_size`` low-rank rows. Neither runs when ``rank > n_features``; IncrementalPCA not
    when ``block_size < rank``; FPCA-Edge not when it rejects the sizes (its message in
    ``note``)."""
    n = n_blocks * block_size
    if rank > n_features:
        return ThroughputRow(n_features, rank, block_size, n, None, None, "r > d")
    fpca_error = ""
    try:
        FPCAEdge(n_features, rank, block_size)
    except ValueError as exc:
        fpca_error = str(exc)
    x = low_rank(n, n_features, min(2 * rank, n_features), seed=seed)
    batches = [x[i : i + block_size] for i in range(0, n, block_size)]

    def feed(make: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            est = make()
            for b in batches:
                est.partial_fit(b)

        return run

    contenders, notes = {}, []
    if fpca_error:
        notes.append(f"FPCAEdge: {fpca_error}")
    else:
        contenders["fpca"] = feed(lambda: FPCAEdge(n_features, rank, block_size))
    if block_size >= rank:
        contenders["ipca"] = feed(lambda: IncrementalPCA(n_components=rank, batch_size=block_size))
    else:
        notes.append("IncrementalPCA needs b >= r")
    times = {}
    if contenders:
        with single_thread():
            times = time_side_by_side(contenders, repeats)
    fpca, ipca = (n / times[k] if k in times else None for k in ("fpca", "ipca"))
    return ThroughputRow(n_features, rank, block_size, n, fpca, ipca, "; ".join(notes))


@dataclass
class MergeRow:
    """Median seconds of Alg. 2 and of the naive SVD merge, and their disagreement."""

    n_features: int
    rank: int
    merge: float
    naive_scipy: float
    naive_numpy: float
    max_angle: float

    @property
    def naive(self) -> float:
        """The faster of the two naive variants (the fair reference)."""
        return min(self.naive_scipy, self.naive_numpy)

    @property
    def speedup(self) -> float:
        """Naive seconds divided by Alg. 2 seconds."""
        return self.naive / self.merge


def _naive(a: Subspace, b: Subspace, rank: int, svd: Callable[..., Any]) -> np.ndarray:
    """The first ``rank`` left singular vectors of ``[U1 S1, U2 S2]`` by ``svd``."""
    cat = np.hstack([a.basis * a.singular_values, b.basis * b.singular_values])
    return svd(cat, full_matrices=False)[0][:, :rank]


def _scipy_svd(a: np.ndarray, full_matrices: bool) -> Any:
    return sla.svd(a, full_matrices=full_matrices, check_finite=False, lapack_driver="gesdd")


def merge_inputs(n_features: int, rank: int, *, seed: int = 0) -> tuple[Subspace, Subspace]:
    """Two overlapping rank-``rank`` subspaces to merge: offline SVDs of two draws of ``4 rank``
    samples from one distribution, Gaussian on ``4 rank`` random directions weighted ``1 / i``
    (Synth(1)-like, cheap at large ``d``), as two halves of one stream."""
    rng = np.random.default_rng(seed)
    m = min(4 * rank, n_features)
    mix = rng.standard_normal((m, n_features)) / np.arange(1, m + 1)[:, None]
    parts = []
    for _ in range(2):
        x = rng.standard_normal((4 * rank, m)) @ mix
        _, s, vt = sla.svd(x, full_matrices=False, check_finite=False)
        parts.append(Subspace(vt[:rank].T, s[:rank], x.shape[0]))
    return parts[0], parts[1]


def merge_times(n_features: int, rank: int, *, repeats: int, seed: int = 0) -> MergeRow:
    """Time merging `merge_inputs`, as supplementary Fig. 5 (d = 800, r = 100): Alg. 2 as an
    aggregator calls it (checks, signs, `Subspace` result) against the economy SVD of ``[U1 S1,
    U2 S2]`` by scipy's gesdd and by numpy, truncated to ``rank``."""
    a, b = merge_inputs(n_features, rank, seed=seed)
    with single_thread():
        times = time_side_by_side(
            {
                "merge": lambda: merge_subspaces(a, b, rank),
                "scipy": lambda: _naive(a, b, rank, _scipy_svd),
                "numpy": lambda: _naive(a, b, rank, np.linalg.svd),
            },
            repeats,
        )
    naive = _naive(a, b, rank, _scipy_svd)
    angle = float(principal_angles(merge_subspaces(a, b, rank).basis, naive)[0])
    return MergeRow(n_features, rank, times["merge"], times["scipy"], times["numpy"], angle)


@dataclass
class AggregatorRow:
    """Per-arrival cost of an aggregator with ``n_children`` children."""

    n_children: int
    update: float
    merge_many: float
    merges_per_update: int

    @property
    def update_per_log2k(self) -> float:
        """``update / log2(n_children)``: flat or falling means growth <= log k."""
        return self.update / math.log2(self.n_children)


def aggregator_times(
    children: Sequence[int], n_features: int, rank: int, *, n_updates: int, repeats_many: int,
    seed: int = 0,
) -> list[AggregatorRow]:  # fmt: skip
    """One `AggregatorRow` per ``k`` in ``children``: a `MergeTree` of ``k`` child snapshots
    (rank-``rank`` SVDs of 50 low-rank samples) gets ``n_updates`` random arrivals, the trees
    side by side, median per ``k``; `merge_many` over the ``k`` is timed ``repeats_many`` times."""
    from edge_runtime.fpca.merge_tree import MergeTree

    rng = np.random.default_rng(seed)
    pool = []
    for i in range(65):  # distinct snapshots, reused cyclically
        xi = low_rank(50, n_features, min(rank, n_features), noise=0.1, seed=seed * 1000 + i)
        _, s, vt = sla.svd(xi, full_matrices=False, check_finite=False)
        pool.append(Subspace(vt[:rank].T, s[:rank], 50))
    kids = {k: [pool[i % len(pool)] for i in range(k)] for k in children}
    trees = {}
    for k in children:
        trees[k] = MergeTree(list(range(k)), rank=rank)
        for i, sub in enumerate(kids[k]):
            trees[k].update(i, sub)
    merges: dict[int, list[int]] = {k: [] for k in children}

    def arrival(k: int) -> Callable[[], None]:
        # n_updates + 1 arrivals (one warm-up), drawn up front; bounded by the iterator
        keys = rng.integers(0, k, size=n_updates + 1).tolist()
        plan = iter(zip(keys, rng.integers(0, len(pool), size=n_updates + 1).tolist(), strict=True))
        tree = trees[k]

        def run() -> None:
            key, j = next(plan)
            tree.update(key, pool[j])
            merges[k].append(tree.merges_last_update)

        return run

    with single_thread():
        update_t = time_side_by_side({str(k): arrival(k) for k in children}, n_updates)
        remerge = {str(k): lambda k=k: merge_many(kids[k], rank=rank) for k in children}
        many_t = time_side_by_side(remerge, repeats_many, warmup=False)
    return [
        AggregatorRow(k, update_t[str(k)], many_t[str(k)], int(np.median(merges[k])))
        for k in children
    ]


def growth_check(rows: Sequence[AggregatorRow]) -> tuple[float, float]:
    """Least-squares fits of the update time: (seconds per doubling of k, exponent p of t ~
    k^p); log k growth gives p <= about 0.29 over k = 4 .. 1024, linear growth 1."""
    k = np.array([r.n_children for r in rows], dtype=float)
    t = np.array([r.update for r in rows])
    per_doubling = float(np.polyfit(np.log2(k), t, 1)[0])
    exponent = float(np.polyfit(np.log(k), np.log(t), 1)[0])
    return per_doubling, exponent
