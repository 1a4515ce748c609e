"""Synthetic streams: Synth(alpha) power-law data and low-rank data, each from its own seeded
`numpy.random.Generator` (never the global state)."""

from __future__ import annotations

import numpy as np

__all__ = ["SYNTH_ALPHAS", "low_rank", "synth"]

#: The spectrum decay exponents of supplementary D.1 (Fig. 9 of the paper).
SYNTH_ALPHAS: tuple[float, ...] = (0.001, 0.1, 0.5, 1.0, 2.0, 3.0)


def synth(
    alpha: float, n_features: int = 400, n_samples: int = 4000, *, scale: float = 1.0, seed: int = 0
) -> np.ndarray:
    """Synth(alpha), supplementary D.1 of Grammenos et al. (2020) as the authors' MATLAB code
    (``synthetic_data_gen.m``, ``spectrum_type = "pl"``), for rows: ``X = G diag(sigma) U^T /
    sqrt(n - 1)`` with ``sigma_i = scale * i^-alpha``, ``U`` the Q of a normal ``(d, d)``
    matrix and ``G`` normal ``(n, d)``, then scaled so the largest row norm is 1.

    Returns float64 ``(n_samples, n_features)``. ValueError if ``alpha < 0``, ``n_features < 1``
    or ``n_samples < 2``.
    """
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    if n_features < 1 or n_samples < 2:
        raise ValueError(f"need n_features >= 1 and n_samples >= 2, got {n_features}, {n_samples}")
    rng = np.random.default_rng(seed)
    sigma = scale * np.arange(1, n_features + 1, dtype=np.float64) ** (-float(alpha))
    basis = np.linalg.qr(rng.standard_normal((n_features, n_features)))[0]
    x = (rng.standard_normal((n_samples, n_features)) * sigma) @ basis.T
    x /= np.sqrt(n_samples - 1)
    x /= np.linalg.norm(x, axis=1).max()
    return x


def low_rank(
    n_samples: int, n_features: int, rank: int, *, noise: float = 1e-2, seed: int = 0
) -> np.ndarray:
    """``X = A B + noise E``: ``A`` ``(n_samples, rank)``, ``B`` ``(rank, n_features)`` with
    rows scaled by ``1 / sqrt(i)`` (distinct singular values) and ``E`` standard normal.

    Returns C-contiguous float64 ``(n_samples, n_features)``. ValueError if a size is < 1 or
    ``rank > n_features``.
    """
    if min(n_samples, n_features, rank) < 1 or rank > n_features:
        raise ValueError(
            f"need sizes >= 1 and rank <= n_features, got {n_samples}, {n_features}, {rank}"
        )
    rng = np.random.default_rng(seed)
    mix = rng.standard_normal((rank, n_features)) / np.sqrt(np.arange(1, rank + 1))[:, None]
    x = rng.standard_normal((n_samples, rank)) @ mix
    x += noise * rng.standard_normal((n_samples, n_features))
    return np.ascontiguousarray(x)
