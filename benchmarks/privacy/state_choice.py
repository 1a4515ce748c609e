"""Memory of the two candidate states of a private leaf (`leaves`: (a) the running released
Gram sum, (b) merged per-block summaries), by `tracemalloc` (numpy reports to it): the largest
state held between two releases and the peak during the stream, without the input rows.
"""

from __future__ import annotations

import tracemalloc
from dataclasses import dataclass

import numpy as np

from benchmarks.privacy.leaves import merged_blocks_leaf, top_eigenpairs
from edge_runtime.fpca.private_gram import PrivateGram

__all__ = ["StateMemory", "measure_memory"]


@dataclass(frozen=True)
class StateMemory:
    """Bytes (tracemalloc): largest held between two releases, and peak during the stream."""

    retained: int
    peak: int


def _running_sum(unit_rows, block_size, count, epsilon, delta, horizon) -> int:
    """State (a) over the stream; the largest traced size between two releases."""
    d = unit_rows.shape[1]
    gram = PrivateGram(d, epsilon, delta, horizon=horizon, rng=np.random.default_rng(0))
    retained = 0
    for start in range(0, unit_rows.shape[0], block_size):
        gram.release(unit_rows[start : start + block_size])
        top = top_eigenpairs(gram.released, count)
        del top
        retained = max(retained, tracemalloc.get_traced_memory()[0])
    return retained


def _merged(unit_rows, block_size, count, epsilon, delta, horizon) -> int:
    """State (b) over the stream (no continual release); the traced size holding the state."""
    rng = np.random.default_rng(0)
    result = merged_blocks_leaf(unit_rows, block_size, count, epsilon, delta, 1.0, rng)
    retained = tracemalloc.get_traced_memory()[0]
    del result
    return retained


def measure_memory(
    state: str, unit_rows: np.ndarray, block_size: int, count: int, *, epsilon: float = 1.0,
    delta: float = 1e-5, horizon: int = 1,
) -> StateMemory:  # fmt: skip
    """`StateMemory` of ``state`` ``"a"`` or ``"b"`` over one leaf's unit-ball rows ``(n, d)``
    in blocks of ``block_size``, publishing ``count`` eigenpairs (the budget changes nothing);
    ValueError for another state."""
    if state not in ("a", "b"):
        raise ValueError(f"state must be 'a' or 'b', got {state!r}")
    run = _running_sum if state == "a" else _merged
    run(unit_rows, block_size, count, epsilon, delta, horizon)  # warm-up: first-call caches
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        retained = run(unit_rows, block_size, count, epsilon, delta, horizon)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return StateMemory(retained=retained - base, peak=peak - base)
