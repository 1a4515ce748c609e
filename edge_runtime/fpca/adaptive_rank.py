"""Adaptive rank of `FPCAEdge`: eq. (4) of Grammenos et al. (2020).

After each block, ``w = s_r / sum_{i <= r} s_i`` over the reported ``r = rank_``
singular values. If ``w > upper`` the rank grows by one (reported at once when the
state already tracks that direction, else after the next block); if ``w < lower`` it
shrinks by one (the last tracked direction is dropped at once). The rank stays in ``[1,
min(block_size, n_features, max_rank)]`` and changes at most once per ``holdoff``
blocks.

References
----------
A. Grammenos, R. Mendoza-Smith, J. Crowcroft, C. Mascolo. "Federated Principal
Component Analysis." NeurIPS 2020. arXiv:1907.08059.
"""

from __future__ import annotations

import numpy as np

__all__ = ["check_rank_bounds", "rank_cap", "rank_step"]


def check_rank_bounds(rank_bounds: object) -> tuple[float, float]:
    """``(lower, upper)`` as floats with ``0 < lower < upper < 1``.

    Raises
    ------
    ValueError
        If ``rank_bounds`` is not two numbers, or they are out of order or range.
    """
    try:
        lower, upper = (float(v) for v in rank_bounds)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise ValueError(
            f"rank_bounds must be two numbers (lower, upper), got {rank_bounds!r}"
        ) from None
    if not 0.0 < lower < upper < 1.0:
        raise ValueError(f"rank_bounds must satisfy 0 < lower < upper < 1, got {rank_bounds!r}")
    return lower, upper


def rank_cap(
    rank: int, n_features: int, block_size: int, adaptive: bool, max_rank: int | None
) -> int:
    """The largest reported rank: ``min(n_features, block_size, max_rank)`` if ``adaptive``.

    Without ``adaptive`` the rank is fixed, and the cap is ``rank`` itself.

    Raises
    ------
    ValueError
        If ``rank`` exceeds ``n_features``, ``block_size`` (with ``adaptive``) or
        ``max_rank``; the message names both values.
    """
    if rank > n_features:
        raise ValueError(f"rank {rank} exceeds n_features {n_features}")
    if adaptive and rank > block_size:
        raise ValueError(
            f"rank {rank} exceeds block_size {block_size} (required with adaptive=True)"
        )
    if max_rank is not None and rank > max_rank:
        raise ValueError(f"rank {rank} exceeds max_rank {max_rank}")
    if adaptive:
        return min(n_features, block_size, max_rank or n_features)
    return rank


def rank_step(
    singular_values: np.ndarray,
    rank: int,
    rank_cap: int,
    rank_bounds: tuple[float, float],
    n_blocks: int,
    last_change: int | None,
    holdoff: int,
) -> int:
    """The change eq. (4) makes to the reported rank after a block: +1, -1 or 0.

    Parameters
    ----------
    singular_values : ndarray of shape (t,), float64
        The state's singular values, non-increasing.
    rank : int
        The reported rank ``r`` (``rank_``), >= 1.
    rank_cap : int
        Largest rank allowed, ``min(block_size, n_features, max_rank)``.
    rank_bounds : tuple of (float, float)
        ``(lower, upper)`` bounds on ``w = s_r / sum_{i <= r} s_i``.
    n_blocks : int
        Blocks applied so far; ``last_change`` is the count at the last change (None:
        none yet).
    holdoff : int
        Minimum number of blocks between two changes, >= 1.

    Returns
    -------
    int
        0 within the hold-off, with no positive singular value, or with ``w`` in bounds
        (or at the rank's limits); +1 if ``w > upper``; -1 if ``w < lower``.
    """
    if last_change is not None and n_blocks - last_change < holdoff:
        return 0
    sv = singular_values[:rank]
    total = float(sv.sum())
    if sv.shape[0] == 0 or total <= 0.0:
        return 0
    weight = float(sv[-1]) / total
    lower, upper = rank_bounds
    if weight > upper and rank < rank_cap:
        return 1
    if weight < lower and rank > 1:
        return -1
    return 0
