"""Measuring helpers: side-by-side timing, running error ratios, peak memory, summaries over
seeds and repeats (`summarise`, `median_of`) and seeded generators (`rng_for`, `seed_for`).

Timing on 2 shared, noisy cores (`time_side_by_side`): each contender runs once untimed, the
contenders alternate within each repeat so a slow moment hits all of them, and the median is
reported; callers wrap it in `single_thread` (small matrices are slower with more BLAS threads).
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla
from threadpoolctl import threadpool_limits

__all__ = [
    "GramTracker", "Summary", "basis_of", "median_of", "peak_memory", "rng_for", "seed_for",
    "single_thread", "summarise", "time_side_by_side",
]  # fmt: skip


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Limit every BLAS/OpenMP pool (numpy's, scipy's and scikit-learn's) to one thread."""
    with threadpool_limits(limits=1):
        yield


def time_side_by_side(
    contenders: Mapping[str, Callable[[], Any]], repeats: int, *, warmup: bool = True
) -> dict[str, float]:
    """Median seconds per call of each zero-argument callable, by name, over ``repeats`` >= 1
    rounds (in order, reversed on odd rounds; garbage collection off), after one untimed call
    each with ``warmup``. ValueError without contenders or for ``repeats < 1``."""
    if repeats < 1 or not contenders:
        raise ValueError(f"need repeats >= 1 and contenders, got {repeats}, {list(contenders)}")
    names = list(contenders)
    for name in names if warmup else ():
        contenders[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()  # a collection inside one contender's run would be charged to it alone
    try:
        for i in range(repeats):
            for name in names if i % 2 == 0 else reversed(names):
                t0 = time.perf_counter()
                contenders[name]()
                times[name].append(time.perf_counter() - t0)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {name: statistics.median(ts) for name, ts in times.items()}


def basis_of(estimator: Any) -> np.ndarray:
    """The current ``(n_features, rank)`` basis of FPCAEdge (``.subspace``) or a baseline."""
    if hasattr(estimator, "subspace"):
        return estimator.subspace.basis
    return np.asarray(estimator.basis)


class GramTracker:
    """Running error ratios on a growing prefix of a stream, from its Gram matrix.

    Keeps ``G = X^T X`` ``(d, d)``, the column sums and the row count, so the error of an
    orthonormal ``U`` on the rows so far is ``tr G - tr U^T G U`` and that of the offline
    rank-``r`` SVD ``tr G`` minus the ``r`` largest eigenvalues: their ratio is
    `edge_runtime.fpca.error_ratio` on the prefix without an SVD of it (centred: ``G - n mu
    mu^T``). Accurate to about ``1e-16 tr G / error``.
    """

    def __init__(self, n_features: int) -> None:
        self.gram = np.zeros((n_features, n_features))
        self.total = np.zeros(n_features)
        self.n_samples = 0
        self._cache: dict[tuple[int, bool], float] = {}

    def add(self, x: np.ndarray) -> None:
        """Add rows ``x`` of shape ``(m, d)``."""
        self.gram += x.T @ x
        self.total += x.sum(axis=0)
        self.n_samples += x.shape[0]
        self._cache.clear()

    def _gram(self, centred: bool) -> np.ndarray:
        if not centred:
            return self.gram
        mu = self.total / self.n_samples
        return self.gram - self.n_samples * np.outer(mu, mu)

    def best_error(self, rank: int, *, centred: bool = False) -> float:
        """Sum of squared residuals of the offline rank-``rank`` SVD of the rows so far."""
        key = (rank, centred)
        if key not in self._cache:
            g = self._gram(centred)
            d = g.shape[0]
            top = sla.eigh(g, eigvals_only=True, subset_by_index=[d - rank, d - 1]) if rank else []
            self._cache[key] = max(float(np.trace(g) - np.sum(top)), 0.0)
        return self._cache[key]

    def error(self, basis: np.ndarray, *, centred: bool = False) -> float:
        """Sum of squared residuals of projecting the rows so far onto ``span(basis)``."""
        g = self._gram(centred)
        return max(float(np.trace(g) - np.sum(basis * (g @ basis))), 0.0)

    def ratio(self, basis: np.ndarray, *, centred: bool = False) -> float:
        """``error(basis) / best_error(rank)``, ``rank = basis.shape[1]``; inf if best is 0."""
        best = self.best_error(basis.shape[1], centred=centred)
        err = self.error(basis, centred=centred)
        return err / best if best > 0 else (1.0 if err == 0 else float("inf"))


def peak_memory(run: Callable[[], Any]) -> int:
    """Peak bytes allocated (tracemalloc) while ``run()`` executes, above what was allocated
    before it; tracemalloc must not be running already."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        run()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak - base


@dataclass(frozen=True)
class Summary:
    """Mean, standard deviation, median and quartiles of ``n`` values (NaN when ``n = 0``)."""

    n: int
    mean: float
    std: float
    median: float
    p25: float
    p75: float


def summarise(values: Sequence[float]) -> Summary:
    """The `Summary` of ``values`` (std with ``ddof = 1``; 0 for one value)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return Summary(0, *[math.nan] * 5)
    p25, median, p75 = (float(q) for q in np.percentile(v, [25, 50, 75]))
    std = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return Summary(int(v.size), float(v.mean()), std, median, p25, p75)


def rng_for(*key: int) -> np.random.Generator:
    """A generator seeded by ``SeedSequence(key)``: independent streams per distinct key."""
    return np.random.default_rng(np.random.SeedSequence([abs(int(k)) for k in key]))


def seed_for(*key: int) -> int:
    """A 63-bit integer seed derived from ``key`` (for ``random_state`` arguments)."""
    state = np.random.SeedSequence([abs(int(k)) for k in key]).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))


def median_of(values: Iterable[float | None]) -> float | None:
    """Median of the finite ``values`` (None and NaN count as missing); None if there are none."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(finite) if finite else None
