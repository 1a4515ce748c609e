"""Mean bookkeeping of a centred `FPCAEdge` (``center=True``), with eq. (2)'s forgetting.

Forgetting (eq. (2) of Grammenos et al. 2020): ``S <- lambda S`` before each block, so
older samples fade geometrically and a drifting stream is tracked. With ``center=True``
the mean is forgotten consistently: it is the mean with the same weights ``lambda**(2
j)`` (``j`` blocks old), with effective count ``n_eff <- lambda**2 n_eff + b``.

Centring: each block is centred on its own mean ``m_B`` and the column ``sqrt(w b / (w
+ b)) (m_old - m_B)`` is appended to it, with ``w = lambda**2 n_eff`` the effective count
of the earlier samples, so that ``U S`` stays the summary of the samples centred on the
running mean (Ross, Lim, Lin, Yang, "Incremental Learning for Robust Visual Tracking",
IJCV 2008, Sec. 3.1; the update of scikit-learn's ``IncrementalPCA``). Without
truncation it equals the SVD of the globally centred data.

References
----------
D. A. Ross, J. Lim, R.-S. Lin, M.-H. Yang. "Incremental Learning for Robust Visual
Tracking." IJCV 77, 2008. doi:10.1007/s11263-007-0075-7.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["centre_rows", "mean_weight"]


def centre_rows(
    buffer: np.ndarray,
    k: int,
    mean: np.ndarray,
    weight: float,
    scratch: np.ndarray,
    forget: float,
) -> tuple[int, float]:
    """Centre ``buffer[:k]`` in place on its mean; row ``k`` gets the mean correction.

    Parameters
    ----------
    buffer : ndarray of shape (>= k + 1, n_features), float64
        Rows ``:k`` are the block's samples (centred in place); row ``k`` receives the
        correction column when there are earlier samples.
    k : int
        Samples in the block, >= 1.
    mean : ndarray of shape (n_features,), float64
        The running mean of effective weight ``weight``, updated in place to the mean
        including the block.
    weight : float
        Effective number of samples behind ``mean`` (0 before the first block).
    scratch : ndarray of shape (n_features,), float64
        Work array (overwritten).
    forget : float
        The forgetting factor ``lambda`` in (0, 1].

    Returns
    -------
    n_cols : int
        Columns of the update: ``k``, or ``k + 1`` with the correction column
        ``sqrt(w k / (w + k)) (mean_old - mean_block)``, ``w = forget**2 weight`` (Ross
        et al. 2008).
    weight : float
        The new effective weight ``w + k``.
    """
    rows = buffer[:k]
    np.mean(rows, axis=0, out=scratch)
    old = (forget * forget) * weight
    total = old + k
    rows -= scratch
    n_cols = k
    if old > 0.0:
        correction = buffer[k]
        np.subtract(mean, scratch, out=correction)
        correction *= math.sqrt(old * k / total)
        n_cols = k + 1
    # mean <- mean + (k / total) * (mean_block - mean)
    np.subtract(scratch, mean, out=scratch)
    scratch *= k / total
    mean += scratch
    return n_cols, total


def mean_weight(n_samples: int, block_size: int, forget: float) -> float:
    """Effective count behind the mean after ``n_samples`` in blocks (as `centre_rows`).

    Parameters
    ----------
    n_samples : int
        Samples summarised, >= 0: ``n_samples // block_size`` full blocks, then one
        short block of the remainder.
    block_size : int
        Samples per full block, >= 1.
    forget : float
        The forgetting factor in (0, 1].

    Returns
    -------
    float
        ``n_samples`` if ``forget == 1``; else the recurrence ``w <- forget**2 w + b``,
        stopped early at its floating-point fixed point.
    """
    full, rest = divmod(n_samples, block_size)
    decay = forget * forget
    if forget == 1.0:
        weight = float(full * block_size)  # the recurrence below, exactly (integers < 2**53)
    else:
        weight = 0.0
        for _ in range(full):  # stops at the recurrence's floating-point fixed point
            updated = decay * weight + block_size
            if updated == weight:
                break
            weight = updated
    if rest:
        weight = decay * weight + rest
    return weight
