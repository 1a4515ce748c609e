"""Snapshots of an `FPCAEdge`: folding in the pending rows, and resuming from a snapshot.

A snapshot (`FPCAEdge.subspace`, `FPCAEdge.tracked_subspace`) is the state with the
pending rows folded in by one block update (eq. (3)) on copies, so reading one changes
nothing (`fold_pending`); with privacy the pending rows are never folded in, since
releasing them afresh for every read would spend the budget again.

Resuming (`FPCAEdge.from_subspace`) is what a leaf does when it has no checkpoint but finds
its own retained `FPCAEdge.tracked_subspace` on the broker: the snapshot's basis, singular
values, sample count and (centred) mean become the state (`read_snapshot`). Against a
checkpoint it loses the pending block: a snapshot summarises the pending rows of its
moment (folded in as a short block) but not the rows themselves, so the next blocks
start at the snapshot instead of on the original block boundaries.

Taken at a block boundary (``n_samples`` a multiple of ``block_size``) with the original
run's parameters (with ``adaptive``, ``current_rank`` its ``rank_`` then), continuing
matches the original run to rounding: the snapshot's basis is the state's up to the signs
of its columns. The ``n_features x n_features`` Gram formulation of the update (used while
``n_features <= n_tracked_ + block_size`` and the reported directions are well
conditioned, e.g. d = 48, b = 50) does not depend on those signs, so there the
continuation is bitwise identical; the ``(t + b)``-sized Gram and the QR + SVD
formulations differ in the last bits (principal angles ~1e-15 rad). The hold-off counter
restarts, so with ``holdoff > 1`` the first adaptive rank change may come earlier. From a
snapshot taken within a block, the result differs by the truncation error of one extra
(short) update.
"""

from __future__ import annotations

import numpy as np

from edge_runtime.fpca._validation import check_int
from edge_runtime.fpca.centring import centre_rows, mean_weight
from edge_runtime.fpca.linalg import TrackedBasis, svd_update
from edge_runtime.fpca.parameters import Params
from edge_runtime.fpca.state import Learned, check_basis
from edge_runtime.fpca.subspace import Subspace

__all__ = ["fold_pending", "read_snapshot"]


def fold_pending(
    state: TrackedBasis,
    pending: np.ndarray,
    mean: np.ndarray | None,
    weight: float,
    params: Params,
    rank_: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, float]:
    """The ``state`` with the ``pending`` rows ``(k, d)`` folded in, as new arrays.

    Parameters
    ----------
    state : TrackedBasis
        The basis ``(d, t)`` and singular values ``(t,)`` (not modified).
    pending : ndarray of shape (k, d)
        The pending rows (not modified).
    mean : ndarray of shape (d,) or None
        The running mean when centred (not modified), else None.
    weight : float
        The mean's effective count (`edge_runtime.fpca.centring`).
    params, rank_
        The estimator's parameters and reported rank (the update keeps
        ``params.n_target(rank_)`` directions, eq. (3)).

    Returns
    -------
    basis, singular_values, mean, weight
        The mean and weight after `centre_rows` when centred (else ``None`` and
        ``weight``), so `FPCAEdge.flush` can adopt all four as its state.
    """
    k, d = pending.shape
    rows = np.empty((k + 1, d))
    rows[:k] = pending
    n_cols = k
    if mean is not None:
        mean = mean.copy()
        n_cols, weight = centre_rows(rows, k, mean, weight, np.empty_like(mean), params.forget)
    new_basis, new_sv = svd_update(
        state.basis,
        state.singular_values,
        rows[:n_cols].T,
        params.n_target(rank_),
        params.forget,
        check_rank=rank_,
    )
    return new_basis, new_sv, mean, weight


def read_snapshot(subspace: Subspace, params: Params, current_rank: int | None) -> Learned:
    """The state `FPCAEdge.from_subspace` starts from, checked against ``params``.

    ``rank_`` is ``current_rank`` (None: ``params.rank``); the leading ``n_target(rank_)``
    directions are kept; ``n_blocks_ = n_samples // block_size`` and the remainder counts
    as flushed; no pending rows, no recent rank change. A centred estimator's mean weight
    is rebuilt by `edge_runtime.fpca.centring.mean_weight`.

    Raises
    ------
    TypeError
        If ``current_rank`` is not an integer.
    ValueError
        One line naming the field: non-finite values, a basis not orthonormal within
        1e-8, negative or increasing singular values, rank 0 with ``n_samples > 0`` (or
        the reverse), a ``mean`` when not ``center`` (or none when ``center``), a
        ``current_rank`` out of range.
    """
    rank_ = params.rank
    if current_rank is not None:
        current_rank = check_int(current_rank, "current_rank", 1)
        if params.adaptive and current_rank > params.rank_cap:
            raise ValueError(
                f"current_rank {current_rank} exceeds the adaptive rank's limit {params.rank_cap}"
            )
        if not params.adaptive and current_rank != params.rank:
            raise ValueError(
                f"current_rank {current_rank} differs from rank {params.rank} (adaptive=False)"
            )
        rank_ = current_rank
    t = min(subspace.rank, params.n_target(rank_))
    basis = subspace.basis[:, :t]
    sv = subspace.singular_values[:t]
    check_basis(basis, sv, params.n_features, t, "subspace")
    n = subspace.n_samples
    if (n > 0) != (subspace.rank > 0):
        raise ValueError(f"subspace: rank {subspace.rank} with n_samples {n} (must be 0 together)")
    weight = 0.0
    mean = subspace.mean
    if params.center:
        if mean is None and n == 0:
            mean = np.zeros(params.n_features)  # e.g. Subspace.empty: nothing to centre yet
        if mean is None:
            raise ValueError("subspace: mean is None but center=True (an uncentred summary)")
        if not np.isfinite(mean).all():
            raise ValueError("subspace: mean contains NaN or infinity")
        weight = mean_weight(n, params.block_size, params.forget)
    elif mean is not None:
        raise ValueError("subspace: has a mean (a centred summary) but center=False")
    return Learned(
        rank_=rank_,
        n_samples_seen_=n,
        n_blocks_=n // params.block_size,
        n_flushed_=n % params.block_size,
        basis=basis,
        singular_values=sv,
        pending=np.empty((0, params.n_features)),
        mean=mean,
        mean_weight=weight,
        last_rank_change=None,
    )
