"""What a private leaf keeps between blocks: memory of the two candidate states.

(a) The running released ``d x d`` Gram sum whose top eigenpairs are published
    (`edge_runtime.fpca.private_gram.PrivateGram`, what ``FPCAEdge(mechanism="gaussian")``
    keeps): the released sum of the closed segments and the exact sum of the open one,
    plus the latest release while a segment of ``H > 1`` is open.
(b) FPCA's streaming summary of per-block releases (`benchmarks.privacy.leaves.
    merged_blocks_leaf`): every block's ``G_b + noise_b`` truncated to its top
    ``r + oversample`` eigenpairs and merged (`edge_runtime.fpca.merge_subspaces`) into
    a rank ``r + oversample`` subspace.

Both release the same thing per block (same noise, same guarantee); they differ in what
is kept, hence in accuracy (the error at the root of the Motes tree, measured by
`benchmarks.privacy.motes_tree`) and memory, measured here with `tracemalloc` (numpy
reports its allocations to it): the largest state held between two releases, and the
peak during the stream, both excluding the input rows (allocated before tracing) and
the published basis buffers of `FPCAEdge`, which both states need alike.
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
    """Bytes one leaf's state takes (tracemalloc)."""

    #: Largest traced size held between two releases.
    retained: int
    #: Peak traced size during the stream (temporaries of a release included).
    peak: int


def _running_sum(
    unit_rows: np.ndarray, block_size: int, count: int, epsilon: float, delta: float, horizon: int
) -> int:
    """Stream the blocks through `PrivateGram` (publishing the top ``count`` pairs each time).

    Returns the largest traced size between two releases (0 when not tracing).
    """
    d = unit_rows.shape[1]
    gram = PrivateGram(d, epsilon, delta, horizon=horizon, rng=np.random.default_rng(0))
    retained = 0
    for start in range(0, unit_rows.shape[0], block_size):
        gram.release(unit_rows[start : start + block_size])
        top = top_eigenpairs(gram.released, count)
        del top
        retained = max(retained, tracemalloc.get_traced_memory()[0])
    return retained


def _merged(
    unit_rows: np.ndarray, block_size: int, count: int, epsilon: float, delta: float, horizon: int
) -> int:
    """State (b) over the stream; the traced size while its result (the state) is held."""
    del horizon  # (b) has no continual release
    rng = np.random.default_rng(0)
    result = merged_blocks_leaf(unit_rows, block_size, count, epsilon, delta, 1.0, rng)
    retained = tracemalloc.get_traced_memory()[0]
    del result
    return retained


def measure_memory(
    state: str,
    unit_rows: np.ndarray,
    block_size: int,
    count: int,
    *,
    epsilon: float = 1.0,
    delta: float = 1e-5,
    horizon: int = 1,
) -> StateMemory:
    """Memory of state ``"a"`` (running sum) or ``"b"`` (merged summaries) over one leaf's stream.

    Parameters
    ----------
    state : {"a", "b"}
    unit_rows : ndarray of shape (n, d)
        The leaf's rows scaled to the unit ball.
    block_size : int
        Rows per release.
    count : int
        Eigenpairs published (and, for (b), kept): ``r + oversample``.
    epsilon, delta : float
        The budget (does not change the memory).
    horizon : int, default=1
        ``H`` of (a)'s continual release.

    Returns
    -------
    StateMemory
    """
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
