"""Bounded memory of FPCAEdge as a guarantee: 10^6 samples, traced with tracemalloc."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from edge_runtime.fpca import FPCAEdge

# b = 100 rather than the default 50 halves the number of blocks (and the run time);
# the memory bound does not depend on it.
N_FEATURES, RANK, BLOCK_SIZE = 48, 10, 100
CHUNK_ROWS = 5000  # 50 blocks per partial_fit call
N_SAMPLES = 10**6


def state_bytes(edge: FPCAEdge) -> int:
    """The documented size of the preallocated state, in bytes (FPCAEdge docstring)."""
    d, b = edge.n_features, edge.block_size
    t = min(d, edge.rank + edge.oversample_)
    return 8 * (d * (3 * t + b + 3) + min(d, t + b + 1) ** 2 + t)


def test_state_is_preallocated_and_as_large_as_documented() -> None:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        edge = FPCAEdge(N_FEATURES, RANK, BLOCK_SIZE)
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()

    # The arrays (the formula is an upper bound on them) plus a few KB of Python objects.
    assert state_bytes(edge) - 2048 <= allocated <= state_bytes(edge) + 8192


@pytest.mark.slow
def test_a_million_samples_leave_the_traced_memory_flat() -> None:
    rng = np.random.default_rng(60)
    signal_rank = 12
    mixing = (
        rng.normal(size=(signal_rank, N_FEATURES)) * np.linspace(3.0, 0.5, signal_rank)[:, None]
    )
    factors = np.empty((CHUNK_ROWS, signal_rank))
    signal = np.empty((CHUNK_ROWS, N_FEATURES))
    chunk = np.empty((CHUNK_ROWS, N_FEATURES))  # refilled in place: no allocation per chunk
    edge = FPCAEdge(N_FEATURES, RANK, BLOCK_SIZE)
    # d * (t + b) * 8 bytes: 46 KB here.
    unit = N_FEATURES * (edge.rank + edge.oversample_ + BLOCK_SIZE) * 8

    # One BLAS thread: on a busy 2-core machine OpenBLAS's threads make these small
    # products many times slower (see the FPCAEdge docstring); memory is unaffected.
    with threadpool_limits(limits=1, user_api="blas"):
        tracemalloc.start()
        try:
            first = current = highest = peak = 0
            for i in range(N_SAMPLES // CHUNK_ROWS):  # 200 chunks
                rng.standard_normal(out=factors)
                rng.random(out=chunk)  # noise, uniform in [0, 1)
                chunk += np.matmul(factors, mixing, out=signal)
                edge.partial_fit(chunk)
                current, traced_peak = tracemalloc.get_traced_memory()
                if i == 0:
                    first = current  # after block 50
                    tracemalloc.reset_peak()
                else:
                    highest = max(highest, current)
                    peak = max(peak, traced_peak)
        finally:
            tracemalloc.stop()

    assert edge.n_samples_seen_ == N_SAMPLES
    assert edge.n_blocks_ == N_SAMPLES // BLOCK_SIZE
    # Flat: what stays allocated after 10^6 samples is what was after block 50.
    assert abs(current - first) < 2048
    assert highest - first < 2048
    # Transient allocations within a partial_fit call: a few state-sized work arrays
    # (LAPACK workspaces, small products) and the input check's boolean mask (1/8 of
    # the chunk), never anything that grows with the stream.
    assert peak - first < 4 * unit + chunk.nbytes // 8 + 8192
