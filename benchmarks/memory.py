"""Benchmark (e): peak memory against stream length, FPCA-Edge and IncrementalPCA.

Peak bytes allocated (tracemalloc) while a fresh estimator ingests a stream of
``n_samples`` rows at ``d = 48``, fed in batches of one block; the stream's batches are
views of a pool allocated before tracing starts, so only the estimator's own
allocations (construction, state and per-update temporaries) count. Flat means the peak does not
grow with the stream length.
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


def _feed(
    make: Callable[[], Any], pool: np.ndarray, n_samples: int, batch: int
) -> Callable[[], None]:
    def run() -> None:
        est = make()  # construction counts: the state is part of the peak
        start = 0
        for _ in range(n_samples // batch):  # bounded: n_samples / batch calls
            if start + batch > pool.shape[0]:
                start = 0
            est.partial_fit(pool[start : start + batch])
            start += batch
        if hasattr(est, "subspace"):
            est.subspace  # noqa: B018 (reading the result is part of the work)

    return run


def memory_row(
    n_samples: int,
    *,
    n_features: int = 48,
    rank: int = 10,
    block_size: int = 50,
    with_ipca: bool = True,
    seed: int = 0,
) -> MemoryRow:
    """Peak tracemalloc bytes of FPCAEdge (and IncrementalPCA) over ``n_samples`` rows.

    ``n_samples`` is rounded down to a multiple of ``block_size``. Both get one
    ``partial_fit`` call per block of ``block_size`` rows.
    """
    pool = low_rank(POOL_ROWS, n_features, rank, noise=0.05, seed=seed)
    with single_thread():
        fpca = peak_memory(
            _feed(lambda: FPCAEdge(n_features, rank, block_size), pool, n_samples, block_size)
        )
        ipca = None
        if with_ipca:
            make_ipca = lambda: IncrementalPCA(n_components=rank, batch_size=block_size)  # noqa: E731
            ipca = peak_memory(_feed(make_ipca, pool, n_samples, block_size))
    return MemoryRow(n_samples, fpca, ipca)
