"""Summaries over seeds and seeded generators shared by the section (f) benchmarks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Summary", "rng_for", "seed_for", "summarise"]


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
