"""Synthetic data for the benchmarks: Synth(alpha) power-law streams and low-rank streams.

`synth` is the generator of supplementary D.1 of Grammenos et al. (2020), taken from the
authors' MATLAB code (``synthetic_data_gen.m`` with ``spectrum_type = "pl"``, ``lambda = 1``,
``rand_type = "normal"``, in the repository ``andylamp/federated_pca``), written for rows:

    sigma_i = lambda * i ** (-alpha),  i = 1 .. d
    U       = Q factor of the QR of a (d, d) standard normal matrix   (random orthogonal)
    G       = (n, d) standard normal matrix
    X       = G diag(sigma) U^T / sqrt(n - 1)
    X      /= max_j ||X[j]||_2                                          (largest row norm 1)

so the rows are i.i.d. zero-mean Gaussian samples whose covariance has the power-law
spectrum ``sigma_i ** 2``: a small ``alpha`` gives a nearly flat spectrum (hard for any
rank-``r`` method: every direction matters), a large ``alpha`` a concentrated one. The paper
uses ``d = 400``, ``n = 4000`` and ``alpha in {0.001, 0.1, 0.5, 1, 2, 3}``.

`low_rank` is the stream used for the throughput benchmark: rank-``rank`` Gaussian signal
plus small isotropic noise, so every method does its full amount of work.

Both take a ``seed`` and use their own `numpy.random.Generator` (never the global state).
"""

from __future__ import annotations

import numpy as np

__all__ = ["SYNTH_ALPHAS", "low_rank", "synth"]

#: The spectrum decay exponents of supplementary D.1 (Fig. 9 of the paper).
SYNTH_ALPHAS: tuple[float, ...] = (0.001, 0.1, 0.5, 1.0, 2.0, 3.0)


def synth(
    alpha: float,
    n_features: int = 400,
    n_samples: int = 4000,
    *,
    scale: float = 1.0,
    seed: int = 0,
) -> np.ndarray:
    """Synth(alpha): ``n_samples`` Gaussian rows with power-law spectrum ``i ** (-alpha)``.

    Parameters
    ----------
    alpha : float
        Decay exponent of the singular values, >= 0.
    n_features : int, default=400
        Dimension ``d``, >= 1.
    n_samples : int, default=4000
        Number of rows ``n``, >= 2.
    scale : float, default=1.0
        ``lambda``, the leading singular value of the population spectrum (before the final
        normalisation, which makes it irrelevant for error ratios).
    seed : int, default=0
        Seed of the private random generator.

    Returns
    -------
    ndarray of shape (n_samples, n_features), float64
        Rows are samples; the largest row has Euclidean norm 1.

    Raises
    ------
    ValueError
        If ``alpha < 0``, ``n_features < 1`` or ``n_samples < 2``.

    Examples
    --------
    >>> X = synth(1.0, n_features=20, n_samples=100, seed=3)
    >>> X.shape, round(float(np.linalg.norm(X, axis=1).max()), 12)
    ((100, 20), 1.0)
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
    n_samples: int,
    n_features: int,
    rank: int,
    *,
    noise: float = 1e-2,
    seed: int = 0,
) -> np.ndarray:
    """Rank-``rank`` Gaussian samples plus isotropic noise of standard deviation ``noise``.

    ``X = A B + noise * E`` with ``A`` ``(n_samples, rank)``, ``B`` ``(rank, n_features)``
    and ``E`` ``(n_samples, n_features)`` standard normal; ``B``'s rows are scaled by
    ``1 / sqrt(i)`` (``i = 1 .. rank``) so the singular values are distinct.

    Parameters
    ----------
    n_samples, n_features, rank : int
        Shape of the result and rank of its signal part, each >= 1, ``rank <= n_features``.
    noise : float, default=1e-2
        Noise standard deviation, >= 0.
    seed : int, default=0
        Seed of the private random generator.

    Returns
    -------
    ndarray of shape (n_samples, n_features), float64, C-contiguous.

    Raises
    ------
    ValueError
        If a size is < 1 or ``rank > n_features``.

    Examples
    --------
    >>> low_rank(30, 8, 2, seed=1).shape
    (30, 8)
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
