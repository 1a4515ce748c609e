"""The default horizon of the continual release: noise of the k-th release against H.

A private leaf with ``mechanism="gaussian"`` releases its running Gram sum after every
block. With horizon ``H`` (`edge_runtime.fpca.continual`), the noise of the ``t``-th
prefix sum of a segment has std ``sigma_1 multiplier(H) multiplier(t)`` per entry
(``sigma_1`` the std of one release at ``H = 1``, `release_noise_std`), and after
``H`` releases the segment closes, its last output (noise ``sigma_1 multiplier(H)**2``)
kept as a constant. So the ``k``-th release (``k = m H + t``, ``1 <= t <= H``) carries
the independent noise of ``m`` closed segments and of step ``t`` of the open one:

    factor(H, k) = multiplier(H) sqrt(m multiplier(H)**2 + multiplier(t)**2)

relative to ``sigma_1``; ``H = 1`` gives ``sqrt(k)`` (independent noise per block,
summed). `noise_factor` computes it from the factorisation's coefficients
(`edge_runtime.fpca.continual.continual_multiplier`); `empirical_noise_factor` measures
it with `edge_runtime.fpca.private_gram.PrivateGram` itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from edge_runtime.fpca.continual import continual_multiplier
from edge_runtime.fpca.private_gram import PrivateGram

__all__ = [
    "HORIZONS",
    "RELEASES",
    "best_horizon",
    "empirical_noise_factor",
    "noise_factor",
    "noise_table",
]

#: Horizons of the table (the runtime's default, 64, among them).
HORIZONS: tuple[int, ...] = (1, 4, 16, 64, 256)
#: Release counts ``k`` of the table.
RELEASES: tuple[int, ...] = (1, 2, 4, 16, 64, 256, 1024)


def noise_factor(horizon: int, k: int) -> float:
    """Noise std of the ``k``-th release with horizon ``H``, relative to one release at ``H = 1``.

    Parameters
    ----------
    horizon : int
        ``H >= 1``.
    k : int
        Release index, ``>= 1``.

    Returns
    -------
    float
        ``multiplier(H) sqrt(m multiplier(H)**2 + multiplier(t)**2)`` with ``m = (k - 1)
        // H`` closed segments and ``t = k - m H``.

    Examples
    --------
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
    """`noise_factor` measured with `PrivateGram`: the std of the ``k``-th released sum's diagonal.

    ``repeats`` fresh `PrivateGram` objects (``epsilon = 1, delta = 1e-5``) release ``k``
    blocks of zeros; the diagonal entries of the ``k``-th release (pure noise, std
    ``sigma`` per entry for one release) are pooled. Relative standard error about
    ``1 / sqrt(2 repeats n_features)``.

    Returns
    -------
    float
        Their root mean square over ``sigma`` of one release at ``H = 1``.
    """
    zeros = np.zeros((1, n_features))
    rng = np.random.default_rng(seed)
    diagonals = []
    sigma_one = PrivateGram(n_features, 1.0, 1e-5, rng=rng).noise_std
    for _ in range(repeats):
        gram = PrivateGram(n_features, 1.0, 1e-5, horizon=horizon, rng=rng)
        for _ in range(k):
            gram.release(zeros)
        diagonals.append(np.diag(gram.released))
    values = np.concatenate(diagonals)
    return float(np.sqrt(np.mean(values**2)) / sigma_one)
