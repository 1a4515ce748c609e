"""Dealing a dataset's rows to the leaves of a deployment for a replay: the split rules.

`split_rows` knows nothing about trees: it takes the leaves' shares in leaf order and
returns their rows in the same order; `edge_runtime.topology.Topology.split_rows` calls it
with the leaves of a topology.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

__all__ = ["SPLITS", "split_rows"]

SPLITS: tuple[str, ...] = ("contiguous", "round-robin")
"""How `split_rows` deals a dataset's rows to the leaves."""


def split_rows(n_rows: int, shares: Sequence[float], split: str = "contiguous") -> list[np.ndarray]:
    """Deal rows ``0 .. n_rows-1`` of a dataset to leaves; every row exactly once.

    ``"contiguous"``: leaf ``i`` gets one contiguous range, the ranges in leaf order, of
    ``n_rows * shares[i] / sum(shares)`` rows rounded by the largest-remainder method (exact
    rational arithmetic; ties go to the earlier leaf), so each count is within 1 of its exact
    quota. ``"round-robin"``: row ``j`` goes to leaf ``j % len(shares)``; shares are ignored.
    With fewer rows than leaves some leaves get none.

    Parameters
    ----------
    n_rows : int
        Number of rows (samples) in the dataset, >= 0 (a NumPy integer is accepted).
    shares : sequence of float
        Relative share of each leaf, in leaf order: at least one, each finite and > 0.
    split : {"contiguous", "round-robin"}, default "contiguous"
        One of `SPLITS`.

    Returns
    -------
    list of ndarray of shape (n_leaf_rows,), int64
        Increasing row indices of each leaf, in the order of ``shares``.

    Raises
    ------
    ValueError
        If ``n_rows`` is not a non-negative integer (checked first), ``shares`` is empty or
        holds a value that is not a finite number > 0, or ``split`` is not one of `SPLITS`.
    """
    if isinstance(n_rows, bool) or not isinstance(n_rows, int | np.integer) or n_rows < 0:
        raise ValueError(f"n_rows must be a non-negative integer, got {n_rows!r}")
    n_rows = int(n_rows)
    if not shares or not all(math.isfinite(share) and share > 0 for share in shares):
        raise ValueError(f"shares must be one or more finite numbers > 0, got {list(shares)!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(map(repr, SPLITS))}, got {split!r}")
    if split == "round-robin":
        k = len(shares)
        return [np.arange(i, n_rows, k, dtype=np.int64) for i in range(k)]
    fractions = [Fraction(share) for share in shares]
    total = sum(fractions, Fraction(0))
    quotas = [n_rows * share / total for share in fractions]
    counts = [math.floor(quota) for quota in quotas]
    remaining = n_rows - sum(counts)  # 0 <= remaining < len(shares)
    by_remainder = sorted(range(len(shares)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in by_remainder[:remaining]:
        counts[i] += 1
    result: list[np.ndarray] = []
    start = 0
    for count in counts:
        result.append(np.arange(start, start + count, dtype=np.int64))
        start += count
    return result
