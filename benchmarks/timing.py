"""Benchmarks (b), (c), (d): ingest throughput, merge time, aggregator update time.

All timings run under `single_thread` (one BLAS thread for every library) and report
medians of side-by-side repeats (`time_side_by_side`); the Done-when criteria use the
ratios, which are stable across machines where absolute times are not.

(b) samples/s of `FPCAEdge` against scikit-learn's ``IncrementalPCA.partial_fit`` with
    the same batches (one batch = one FPCA-Edge block), from a fresh estimator to the
    end of the stream.
(c) `merge_subspaces` (Alg. 2) against the naive SVD of ``[U1 S1, U2 S2]``, with the
    largest principal angle between the two results.
(d) `MergeTree.update` of one child against `merge_many` over all ``k`` children.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
from sklearn.decomposition import IncrementalPCA

from benchmarks.measure import single_thread, time_side_by_side
from benchmarks.synth import low_rank
from edge_runtime.fpca import FPCAEdge, merge_many, merge_subspaces, principal_angles
from edge_runtime.fpca.subspace import Subspace

__all__ = [
    "AggregatorRow",
    "MergeRow",
    "ThroughputRow",
    "aggregator_times",
    "growth_check",
    "merge_times",
    "throughput",
]


@dataclass
class ThroughputRow:
    """Samples/s of FPCA-Edge and IncrementalPCA for one (d, r, b); None = not run.

    ``note`` says why a side did not run (e.g. ``"r > d"``, or IncrementalPCA's
    ``b >= r`` requirement).
    """

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
    n_features: int,
    rank: int,
    block_size: int,
    *,
    n_blocks: int,
    repeats: int,
    seed: int = 0,
) -> ThroughputRow:
    """Samples/s of both estimators over ``n_blocks * block_size`` low-rank samples.

    Each timed run builds a fresh estimator and feeds the stream one batch of
    ``block_size`` rows per ``partial_fit`` call. IncrementalPCA(n_components=rank)
    needs ``block_size >= rank`` for its first call; otherwise it is not run (None).
    Neither runs when ``rank > n_features``; FPCA-Edge does not when it rejects the
    parameters (the ValueError's message goes into ``note``).
    """
    n = n_blocks * block_size
    if rank > n_features:
        return ThroughputRow(n_features, rank, block_size, n, None, None, "r > d")
    try:
        FPCAEdge(n_features, rank, block_size)
    except ValueError as exc:
        fpca_error = str(exc)
    else:
        fpca_error = ""
    x = low_rank(n, n_features, min(2 * rank, n_features), seed=seed)
    batches = [x[i : i + block_size] for i in range(0, n, block_size)]

    def run_fpca() -> None:
        est = FPCAEdge(n_features, rank, block_size)
        for b in batches:
            est.partial_fit(b)

    def run_ipca() -> None:
        est = IncrementalPCA(n_components=rank, batch_size=block_size)
        for b in batches:
            est.partial_fit(b)

    contenders = {}
    notes = []
    if fpca_error:
        notes.append(f"FPCAEdge: {fpca_error}")
    else:
        contenders["fpca"] = run_fpca
    if block_size >= rank:
        contenders["ipca"] = run_ipca
    else:
        notes.append("IncrementalPCA needs b >= r")
    times = {}
    if contenders:
        with single_thread():
            times = time_side_by_side(contenders, repeats)
    return ThroughputRow(
        n_features,
        rank,
        block_size,
        n,
        n / times["fpca"] if "fpca" in times else None,
        n / times["ipca"] if "ipca" in times else None,
        "; ".join(notes),
    )


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


def _naive_scipy(a: Subspace, b: Subspace, rank: int) -> np.ndarray:
    cat = np.hstack([a.basis * a.singular_values, b.basis * b.singular_values])
    u = sla.svd(cat, full_matrices=False, check_finite=False, lapack_driver="gesdd")[0]
    return u[:, :rank]


def _naive_numpy(a: Subspace, b: Subspace, rank: int) -> np.ndarray:
    cat = np.hstack([a.basis * a.singular_values, b.basis * b.singular_values])
    return np.linalg.svd(cat, full_matrices=False)[0][:, :rank]


def merge_inputs(n_features: int, rank: int, *, seed: int = 0) -> tuple[Subspace, Subspace]:
    """Two overlapping rank-``rank`` subspaces of ``n_features`` dimensions to merge.

    Both are offline rank-``rank`` SVDs of ``4 * rank`` samples drawn from one
    distribution: Gaussian coefficients on ``4 * rank`` random directions with
    power-law weights ``i ** -1`` (Synth(1)-like, restricted to a random
    ``4 * rank``-dimensional subspace so that set-up stays cheap at large ``d``). The two
    spans overlap (shared leading directions) without being equal, as the summaries of
    two halves of one stream are.
    """
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
    """Time merging two rank-``rank`` subspaces (`merge_inputs`), Alg. 2 vs naive SVD.

    As supplementary Fig. 5 (there: d = 800, r = 100). Naive: ``svd([U1 S1, U2 S2])``
    (economy, both scipy's gesdd and numpy's; the faster is the reference), truncated
    to ``rank`` columns. Alg. 2:
    `merge_subspaces` as called by an aggregator (validation, signs and the
    `Subspace` result included).
    """
    a, b = merge_inputs(n_features, rank, seed=seed)
    with single_thread():
        times = time_side_by_side(
            {
                "merge": lambda: merge_subspaces(a, b, rank),
                "scipy": lambda: _naive_scipy(a, b, rank),
                "numpy": lambda: _naive_numpy(a, b, rank),
            },
            repeats,
        )
    angle = float(principal_angles(merge_subspaces(a, b, rank).basis, _naive_scipy(a, b, rank))[0])
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
    children: Sequence[int],
    n_features: int,
    rank: int,
    *,
    n_updates: int,
    repeats_many: int,
    seed: int = 0,
) -> list[AggregatorRow]:
    """Time one child's arrival at a full `MergeTree` vs re-merging all children.

    For every ``k`` in ``children`` a `MergeTree` over ``k`` slots is filled (untimed)
    with child snapshots: offline rank-``rank`` SVDs of 50 low-rank samples each (what
    a leaf tracking ``rank`` directions publishes). Then ``n_updates`` rounds each give
    every tree one arrival (a random child's slot replaced by a fresh snapshot), the
    trees side by side in alternating order, so a slow moment of the machine hits all
    ``k`` alike; the median per ``k`` is reported. `merge_many` over all ``k`` children
    at the same rank is timed likewise, ``repeats_many`` rounds.

    Returns
    -------
    list of AggregatorRow
        One per ``k``, in the order of ``children``.
    """
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
        plan = iter(
            zip(
                rng.integers(0, k, size=n_updates + 1).tolist(),
                rng.integers(0, len(pool), size=n_updates + 1).tolist(),
                strict=True,
            )
        )
        tree = trees[k]

        def run() -> None:
            key, j = next(plan)
            tree.update(key, pool[j])
            merges[k].append(tree.merges_last_update)

        return run

    def remerge(k: int) -> Callable[[], None]:
        return lambda: merge_many(kids[k], rank=rank)

    with single_thread():
        update_t = time_side_by_side({str(k): arrival(k) for k in children}, n_updates)
        many_t = time_side_by_side(
            {str(k): remerge(k) for k in children}, repeats_many, warmup=False
        )
    return [
        AggregatorRow(k, update_t[str(k)], many_t[str(k)], int(np.median(merges[k])))
        for k in children
    ]


def growth_check(rows: Sequence[AggregatorRow]) -> tuple[float, float]:
    """Least-squares fits of update time: slope in log2 k, and exponent p of t ~ k^p.

    Returns
    -------
    (seconds per doubling of k, exponent p)
        Growth no faster than log k shows as a constant cost per doubling and an
        exponent at most about 0.29 (log2 k itself grows like k^0.29 over 4 .. 1024;
        a fixed overhead per update lowers it further; linear growth gives 1).
    """
    k = np.array([r.n_children for r in rows], dtype=float)
    t = np.array([r.update for r in rows])
    per_doubling = float(np.polyfit(np.log2(k), t, 1)[0])
    exponent = float(np.polyfit(np.log(k), np.log(t), 1)[0])
    return per_doubling, exponent
