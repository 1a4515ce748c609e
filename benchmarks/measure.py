"""Measuring helpers: side-by-side timing, running error ratios, peak memory.

Timing on this kind of machine (2 shared, noisy cores) follows three rules, applied by
`time_side_by_side`: every contender runs once untimed first (warm caches, LAPACK work
space, BLAS thread pools); the contenders then alternate within each repeat, so a slow
moment of the machine hits all of them; and the reported figure is the median over
repeats. Callers wrap the timing in `single_thread` so both sides use one BLAS thread
(small matrices are slower with more threads, and the two OpenBLAS copies of the numpy
and scipy wheels would otherwise compete for the two cores).
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import scipy.linalg as sla
from threadpoolctl import threadpool_limits

__all__ = [
    "GramTracker",
    "basis_of",
    "peak_memory",
    "single_thread",
    "time_side_by_side",
]


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Limit every BLAS/OpenMP pool (numpy's, scipy's and scikit-learn's) to one thread."""
    with threadpool_limits(limits=1):
        yield


def time_side_by_side(
    contenders: Mapping[str, Callable[[], Any]], repeats: int, *, warmup: bool = True
) -> dict[str, float]:
    """Median wall time in seconds of each callable, timed alternately.

    Parameters
    ----------
    contenders : mapping of str to callable
        Zero-argument callables; each call is one timed run.
    repeats : int
        Number of timed runs per contender, >= 1. Repeat ``i`` runs the contenders in
        order, reversed on odd ``i`` (so neither side always goes first).
    warmup : bool, default=True
        Run each contender once untimed first.

    Returns
    -------
    dict of str to float
        Median seconds per call, by contender name.

    Raises
    ------
    ValueError
        If ``repeats < 1`` or there are no contenders.
    """
    if repeats < 1 or not contenders:
        raise ValueError(f"need repeats >= 1 and contenders, got {repeats}, {list(contenders)}")
    names = list(contenders)
    if warmup:
        for name in names:
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
    """Running error ratios of bases on a growing prefix of a stream, via its Gram matrix.

    Keeps ``G = X^T X`` (``(d, d)``), the column sums and the count of all rows added, so
    the error of any orthonormal basis ``U`` on the rows seen so far is
    ``(tr G - tr U^T G U) / n`` and the error of the exact (offline) rank-``r`` SVD is
    ``(tr G - sum of the r largest eigenvalues of G) / n``: the ratio of the two is
    `edge_runtime.fpca.error_ratio` on the prefix without keeping it or recomputing an
    SVD of it. The centred variants use ``G - n mu mu^T`` (``mu`` the mean of the rows).

    Precision: the errors are differences of ``tr G`` and a partial trace, accurate to
    about ``1e-16 * tr G`` absolute, so a ratio is accurate to about ``1e-16 * tr G /
    error``; `benchmarks.accuracy` checks the final value against ``error_ratio``.

    Parameters
    ----------
    n_features : int
        Dimension ``d``.
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
    """Peak bytes allocated (tracemalloc) while ``run()`` executes, from a fresh baseline.

    Only allocations made during the call count: inputs created before it (e.g. the
    stream's chunks) do not. tracemalloc must not be running already.
    """
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
