"""The default horizon of the continual release: noise of the k-th release against H.

With horizon ``H`` (`edge_runtime.fpca.continual`) the ``t``-th prefix sum of a segment has
noise std ``sigma_1 multiplier(H) multiplier(t)`` per entry, and a closed segment keeps its
last output (``sigma_1 multiplier(H)**2``). So the ``k``-th release, ``k = m H + t``, carries

    factor(H, k) = multiplier(H) sqrt(m multiplier(H)**2 + multiplier(t)**2)

times ``sigma_1`` (one release at ``H = 1``, `release_noise_std`); ``H = 1`` gives ``sqrt(k)``.
`empirical_noise_factor` measures it with `PrivateGram` itself (the tests compare the two).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from edge_runtime.fpca.continual import continual_multiplier
from edge_runtime.fpca.private_gram import PrivateGram

__all__ = [
    "HORIZONS", "RELEASES", "best_horizon", "empirical_noise_factor", "noise_factor",
    "noise_table",
]  # fmt: skip

#: Horizons ``H`` (the runtime's default, 64, among them) and releases ``k`` of the table.
HORIZONS: tuple[int, ...] = (1, 4, 16, 64, 256)
RELEASES: tuple[int, ...] = (1, 2, 4, 16, 64, 256, 1024)


def noise_factor(horizon: int, k: int) -> float:
    """``factor(H, k)`` of the module docstring (``H, k >= 1``; ValueError otherwise).

    >>> round(noise_factor(1, 16), 6)
    4.0
    >>> round(noise_factor(4, 4), 4)  # multiplier(4)**2
    1.4883
    """
    if horizon < 1 or k < 1:
        raise ValueError(f"horizon and k must be >= 1, got {horizon}, {k}")
    closed, step = divmod(k - 1, horizon)
    full = continual_multiplier(horizon)
    return full * math.sqrt(closed * full**2 + continual_multiplier(step + 1) ** 2)


def noise_table(
    horizons: Sequence[int] = HORIZONS, releases: Sequence[int] = RELEASES
) -> list[list[float]]:
    """``[noise_factor(H, k) for k in releases]`` for each ``H`` in ``horizons``."""
    return [[noise_factor(h, k) for k in releases] for h in horizons]


def best_horizon(horizons: Sequence[int], k: int) -> int:
    """The ``H`` of ``horizons`` with the least noise at release ``k`` (the smaller on ties)."""
    return min(horizons, key=lambda h: (round(noise_factor(h, k), 12), h))


def empirical_noise_factor(
    horizon: int, k: int, *, n_features: int = 8, repeats: int = 200, seed: int = 0
) -> float:
    """`noise_factor` measured: the RMS of the diagonal of the ``k``-th release of ``repeats``
    `PrivateGram` s (eps 1, delta 1e-5) fed zeros, over one release's sigma at ``H = 1``
    (relative standard error about ``1 / sqrt(2 repeats n_features)``)."""
    zeros = np.zeros((1, n_features))
    rng = np.random.default_rng(seed)
    diagonals = []
    sigma_one = PrivateGram(n_features, 1.0, 1e-5, rng=rng).noise_std
    for _ in range(repeats):
        gram = PrivateGram(n_features, 1.0, 1e-5, horizon=horizon, rng=rng)
        for _ in range(k):
            gram.release(zeros)
        diagonals.append(np.diag(gram.released))
    return float(np.sqrt(np.mean(np.concatenate(diagonals) ** 2)) / sigma_one)
