"""Bounded memory of a private leaf (``mechanism="gaussian"``), traced with tracemalloc.

The bound asserted here, in bytes, for ``d = n_features``, ``b = block_size``, ``t =
min(rank + oversample, d)`` tracked directions and horizon ``H``:

- held between blocks: the non-private estimator's preallocated arrays (FPCAEdge's
  docstring, as in ``tests/test_fpca_memory.py``), ``8 (d (3 t + b + 3) + min(d, t + b +
  1)**2 + t)``, plus `PrivateGram`'s ``8 (3 d**2 + H)``: three ``(d, d)`` float64 matrices
  (the released sum of the closed segments, the exact sum of the open one and the latest
  release, which is the first one when a segment has just closed) and the ``H``
  coefficients of the factorisation; plus a few KB of Python objects;
- transient, within one block: ``8 max(b d, 3 d**2)``, the larger of the clipping's
  ``(b, d)`` temporary (`numpy.linalg.norm` squares the rows) and the release's three
  ``(d, d)`` temporaries (the noise sum, one draw and its transpose copy), plus a few KB.

Measured at d = 48, rank 10 (t = 20), b = 241: 195.4 KB (H = 1) and 195.8 KB (H = 64)
allocated by the constructor (the formula: 190.6 and 191.1 KB, i.e. 135.3 KB of estimator
arrays + 55.3 KB of PrivateGram + 8 H), flat to 16 bytes between blocks 10 and 60 / 74;
96.8-97.0 KB transient per block (formula: 92.5 KB). PrivateGram alone: 58.3-58.5 KB
allocated (formula 55.3-55.8 KB), 56.7-57.5 KB transient per release (formula 55.3 KB).
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from edge_runtime.fpca import FPCAEdge
from edge_runtime.fpca.private_gram import PrivateGram

N_FEATURES, RANK, BLOCK_SIZE = 48, 10, 241
WARM_UP = 10  # blocks before the first measurement
OBJECTS = 8192  # bytes of Python objects (attributes, small arrays' headers) allowed


def estimator_bytes(edge: FPCAEdge) -> int:
    """The non-private estimator's preallocated arrays (FPCAEdge docstring), in bytes."""
    d, b = edge.n_features, edge.block_size
    t = min(d, edge.rank + edge.oversample_)
    return 8 * (d * (3 * t + b + 3) + min(d, t + b + 1) ** 2 + t)


def gram_bytes(d: int, horizon: int) -> int:
    """PrivateGram's arrays: three (d, d) float64 matrices and H coefficients."""
    return 8 * (3 * d * d + horizon)


def release_temporaries(d: int) -> int:
    """The release's three (d, d) float64 temporaries."""
    return 8 * 3 * d * d


def block_temporaries(d: int, b: int) -> int:
    """The larger of the clipping's (b, d) temporary and the release's temporaries."""
    return max(8 * b * d, release_temporaries(d))


def unit_block(rng: np.random.Generator, k: int, d: int) -> np.ndarray:
    rows = rng.standard_normal((k, d))
    rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1.0)
    return rows


# scipy's array-API layer (``xp.asarray`` in the wrapper of `scipy.linalg.eigh`, scipy
# 1.17) keeps a few 54-byte objects per call for its first ~2000 calls, ~24 KB in all, then
# nothing more (measured: 6.2 KB after 128 blocks, 23.6 KB after 3000). That is not the
# leaf's memory; the flatness checks leave its allocations out.
THIRD_PARTY_CACHE = tracemalloc.Filter(False, "*/scipy/_lib/array_api_compat/*")


def held_after_collection() -> int:
    """Traced bytes after a full collection, without scipy's array-API allocations.

    The first call caches the filter's compiled pattern (``fnmatch``): call it once before
    the first measurement.
    """
    gc.collect()  # also clears CPython's free lists
    snapshot = tracemalloc.take_snapshot().filter_traces([THIRD_PARTY_CACHE])
    return sum(trace.size for trace in snapshot.traces)


@pytest.mark.parametrize("horizon", [1, 64])
def test_private_gram_holds_three_matrices_and_releases_with_three_temporaries(
    horizon: int,
) -> None:
    d = N_FEATURES
    rng = np.random.default_rng(70 + horizon)
    keys = np.random.default_rng(71)
    blocks = [unit_block(rng, 20, d) for _ in range(4)]  # reused: no allocation per block
    # At least 50 releases after the warm-up, whole segments (the checkpoints are at the
    # same position in a segment).
    n_releases = WARM_UP + max(50, horizon)
    transient = np.zeros(n_releases, dtype=np.int64)
    tracemalloc.start()
    try:
        held_after_collection()  # warms the filter's pattern cache (fnmatch)
        before = tracemalloc.get_traced_memory()[0]
        gram = PrivateGram(d, 1.0, 1e-5, horizon=horizon, rng=keys)
        allocated = tracemalloc.get_traced_memory()[0] - before
        first = 0
        for i in range(n_releases):
            if i == WARM_UP:
                first = held_after_collection()
            tracemalloc.reset_peak()
            start = tracemalloc.get_traced_memory()[0]
            gram.release(blocks[i % len(blocks)])
            transient[i] = tracemalloc.get_traced_memory()[1] - start
        last = held_after_collection()
    finally:
        tracemalloc.stop()

    assert gram.releases == n_releases
    arrays = gram_bytes(d, horizon)
    assert arrays <= allocated <= arrays + OBJECTS  # measured: arrays + 3 KB
    assert abs(last - first) < 2048  # nothing grows with the releases
    # Three (d, d) temporaries (55.3 KB at d = 48; measured 56.7 KB), at least one.
    assert transient.max() <= release_temporaries(d) + 4096
    assert transient.min() >= 8 * d * d


@pytest.mark.parametrize("horizon", [1, 64])
def test_private_leaf_memory_is_flat_and_within_the_stated_bound(horizon: int) -> None:
    d, b = N_FEATURES, BLOCK_SIZE
    rng = np.random.default_rng(80 + horizon)
    block = rng.standard_normal((b, d)) * 2.0  # rows around norm 14: most get clipped
    # At least 50 blocks after the warm-up, a whole segment for H = 64, so the two
    # checkpoints are at the same position in a segment.
    n_blocks = WARM_UP + max(50, horizon)
    transient = np.zeros(n_blocks, dtype=np.int64)
    with threadpool_limits(limits=1, user_api="blas"):
        tracemalloc.start()
        try:
            before = held_after_collection()
            edge = FPCAEdge(
                d,
                RANK,
                b,
                privacy=(1.0, 1e-5),
                clip_norm=5.0,
                mechanism="gaussian",
                horizon=horizon,
                random_state=81,
            )
            allocated = held_after_collection() - before
            first = 0
            for i in range(n_blocks):
                if i == WARM_UP:
                    first = held_after_collection()
                tracemalloc.reset_peak()
                start = tracemalloc.get_traced_memory()[0]
                edge.partial_fit(block)  # one full block per call
                peak = tracemalloc.get_traced_memory()[1]
                transient[i] = peak - start
            last = held_after_collection() - before
            first -= before
        finally:
            tracemalloc.stop()

    assert edge.n_blocks_ == n_blocks and edge.n_releases_ == n_blocks
    assert edge.n_clipped_ > 0
    held = estimator_bytes(edge) + gram_bytes(d, horizon)  # 190.6 KB here
    temporaries = block_temporaries(d, b)  # 92.5 KB here
    # Construction allocates the stated arrays (the formula bounds them) and some objects.
    assert held - 2048 <= allocated <= held + OBJECTS
    # Flat: what stays allocated does not grow with the number of blocks.
    assert first <= held + OBJECTS and last <= held + OBJECTS
    assert abs(last - first) < 2048
    # Transient: within the stated bound at every block, and not growing either.
    assert transient.max() <= temporaries + OBJECTS
    # (+ one (d, d) matrix: closing a segment allocates the new open sum and key)
    assert transient[-10:].max() <= transient[1 : WARM_UP + 1].max() + 8 * d * d
