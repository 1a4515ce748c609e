"""Benchmark (e): peak tracemalloc bytes of FPCA-Edge and IncrementalPCA over a stream.

A fresh estimator ingests ``n_samples`` rows at ``d = 48``, one ``partial_fit`` per block, from
views of a pool allocated before tracing: only the estimator's own allocations count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.decomposition import IncrementalPCA

from benchmarks.measure import peak_memory, single_thread
from benchmarks.synth import low_rank
from edge_runtime.fpca import FPCAEdge

__all__ = ["MemoryRow", "memory_row"]

#: Rows in the pool the stream cycles through.
POOL_ROWS = 10_000


@dataclass
class MemoryRow:
    """Peak bytes for one stream length; ``ipca`` is None when not measured."""

    n_samples: int
    fpca: int
    ipca: int | None


def _feed(make: Callable[[], Any], pool: np.ndarray, n_samples: int, batch: int) -> int:
    def run() -> None:
        est = make()  # construction counts: the state is part of the peak
        start = 0
        for _ in range(n_samples // batch):  # bounded: n_samples / batch calls
            start = 0 if start + batch > pool.shape[0] else start
            est.partial_fit(pool[start : start + batch])
            start += batch
        if hasattr(est, "subspace"):
            est.subspace  # noqa: B018 (reading the result is part of the work)

    return peak_memory(run)


def memory_row(
    n_samples: int, *, n_features: int = 48, rank: int = 10, block_size: int = 50,
    with_ipca: bool = True, seed: int = 0,
) -> MemoryRow:  # fmt: skip
    """Peak bytes of FPCAEdge (and IncrementalPCA) over ``n_samples`` rows (rounded down to
    whole blocks of ``block_size``)."""
    pool = low_rank(POOL_ROWS, n_features, rank, noise=0.05, seed=seed)
    with single_thread():
        fpca = _feed(lambda: FPCAEdge(n_features, rank, block_size), pool, n_samples, block_size)
        make_ipca = lambda: IncrementalPCA(n_components=rank, batch_size=block_size)  # noqa: E731
        ipca = _feed(make_ipca, pool, n_samples, block_size) if with_ipca else None
    return MemoryRow(n_samples, fpca, ipca)
