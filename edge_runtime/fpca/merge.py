"""Merging subspaces: Merge_r (Alg. 2) and a balanced merge tree over many of them.

A merge combines the summaries of two disjoint data sets into the summary of their
union without access to the data: by Lemma 1 of Grammenos et al. (2020), merging the
exact SVDs of ``X1`` and ``X2`` without truncation gives the exact SVD of
``vstack(X1, X2)``, and the result does not depend on the order of the merges
(Lemma 10). This is what lets aggregators combine children's snapshots as they arrive.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edge_runtime.fpca._linalg import svd_update
from edge_runtime.fpca._validation import check_forget, check_int
from edge_runtime.fpca.subspace import Subspace

__all__ = ["merge_many", "merge_subspaces"]


def _check_subspace(s: object, name: str) -> Subspace:
    if not isinstance(s, Subspace):
        raise TypeError(f"{name} must be a Subspace, got {type(s).__name__}")
    if not (np.isfinite(s.basis).all() and np.isfinite(s.singular_values).all()):
        raise ValueError(f"{name} has non-finite basis or singular values; expected finite")
    return s


def merge_subspaces(
    a: Subspace, b: Subspace, rank: int | None = None, forget: float = 1.0
) -> Subspace:
    """Merge two subspaces into the rank-``rank`` summary of both data sets (Merge_r).

    The cost is ``O(n_features * (r1 + r2)**2 + (r1 + r2)**3)`` time and
    ``O(n_features * (r1 + r2))`` memory, where ``r1 = a.rank`` and ``r2 = b.rank``:
    only a QR of a ``(n_features, r2)`` matrix and the SVD of a small
    ``(r1 + r2) x (r1 + r2)`` matrix are computed, never the SVD of the
    ``(n_features, r1 + r2)`` concatenation.

    Parameters
    ----------
    a : Subspace
        The first (older) subspace, ``U1``, ``S1``. May have rank 0.
    b : Subspace
        The second (newer) subspace, ``U2``, ``S2``, with the same ``n_features``.
        May have rank 0.
    rank : int or None, default=None
        Rank ``r`` to keep, >= 0. None keeps ``max(a.rank, b.rank)``. The result has
        rank ``min(rank, a.rank + b.rank, n_features)``.
    forget : float, default=1.0
        Forgetting factor ``lambda`` in (0, 1] applied to the singular values of the
        older subspace ``a``; 1.0 weighs both equally.

    Returns
    -------
    Subspace
        ``basis`` of shape ``(n_features, rank)`` (orthonormal, deterministic signs:
        the largest-|.| entry of each column is positive), non-increasing
        ``singular_values`` of shape ``(rank,)``, and
        ``n_samples = a.n_samples + b.n_samples``.

    Raises
    ------
    TypeError
        If ``a`` or ``b`` is not a Subspace, or ``rank`` is not an integer.
    ValueError
        If ``n_features`` differ (the message names both), ``rank < 0``,
        ``forget`` is outside (0, 1], or a subspace holds NaN or infinity.

    Notes
    -----
    Alg. 2 (Merge_r) of Grammenos et al. (2020), with the columns of the paper's
    ``U`` as our basis: ``Z = U1^T U2``; ``[Q, R] = QR(U2 - U1 Z)``;
    ``[U_small, S', ~] = SVD_r([[lambda S1, Z S2], [0, R S2]])``;
    ``U' = [U1, Q] U_small``. The same routine performs the streaming block update
    of eq. (3) in `FPCAEdge`. By Lemma 1 the result equals the SVD_r of
    ``[lambda U1 S1, U2 S2]``, which for exact untruncated inputs is the SVD_r of
    the stacked data.

    References
    ----------
    A. Grammenos, R. Mendoza-Smith, J. Crowcroft, C. Mascolo. "Federated Principal
    Component Analysis." NeurIPS 2020. arXiv:1907.08059.

    Examples
    --------
    >>> import numpy as np
    >>> from edge_runtime.fpca import merge_subspaces, offline_subspace
    >>> rng = np.random.default_rng(0)
    >>> x1, x2 = rng.normal(size=(30, 8)), rng.normal(size=(40, 8))
    >>> merged = merge_subspaces(offline_subspace(x1, 8), offline_subspace(x2, 8))
    >>> merged.rank, merged.n_samples
    (8, 70)
    >>> full = np.linalg.svd(np.vstack([x1, x2]), compute_uv=False)
    >>> bool(np.allclose(merged.singular_values, full))
    True
    """
    a = _check_subspace(a, "a")
    b = _check_subspace(b, "b")
    if a.n_features != b.n_features:
        raise ValueError(
            f"cannot merge subspaces with different n_features: a has {a.n_features}, "
            f"b has {b.n_features}"
        )
    rank = max(a.rank, b.rank) if rank is None else check_int(rank, "rank", 0)
    forget = check_forget(forget)
    cols = b.basis * b.singular_values
    basis, sv = svd_update(a.basis, a.singular_values, cols, rank, forget)
    return Subspace(basis, sv, a.n_samples + b.n_samples)


def merge_many(subspaces: Sequence[Subspace], rank: int | None = None) -> Subspace:
    """Merge any number of subspaces by a balanced binary tree of `merge_subspaces`.

    Level by level, neighbours are merged pairwise (``(s0, s1), (s2, s3), ...``; an
    odd one out moves up unchanged), so ``len(subspaces) - 1`` merges in
    ``ceil(log2(len(subspaces)))`` levels, each as accurate as a single merge.

    Parameters
    ----------
    subspaces : sequence of Subspace
        At least one, all with the same ``n_features``; any may have rank 0.
    rank : int or None, default=None
        Rank kept by every merge, >= 0. None keeps the largest input rank.

    Returns
    -------
    Subspace
        Summary of all inputs; ``n_samples`` is the sum of theirs. A single input is
        returned truncated to ``rank``.

    Raises
    ------
    TypeError
        If an element is not a Subspace or ``rank`` is not an integer.
    ValueError
        If ``subspaces`` is empty, ``n_features`` differ (the message names the
        position), or ``rank < 0``.

    Notes
    -----
    Alg. 1 of Grammenos et al. (2020) merges up an aggregation tree; by Lemma 10 the
    result is invariant to the order of the leaves (up to rounding, and exactly so
    when no merge truncates).

    Examples
    --------
    >>> import numpy as np
    >>> from edge_runtime.fpca import merge_many, offline_subspace
    >>> rng = np.random.default_rng(1)
    >>> parts = [offline_subspace(rng.normal(size=(20, 6)), 6) for _ in range(5)]
    >>> merge_many(parts).n_samples
    100
    """
    items = list(subspaces)
    if not items:
        raise ValueError("merge_many needs at least one subspace, got an empty sequence")
    for i, s in enumerate(items):
        _check_subspace(s, f"subspaces[{i}]")
        if s.n_features != items[0].n_features:
            raise ValueError(
                f"subspaces[{i}] has n_features {s.n_features}, expected "
                f"{items[0].n_features} (as subspaces[0])"
            )
    if rank is not None:
        rank = check_int(rank, "rank", 0)
    if len(items) == 1:
        return items[0] if rank is None else items[0].truncate(rank)
    while len(items) > 1:  # ceil(log2(n)) levels
        merged = [
            merge_subspaces(items[i], items[i + 1], rank) for i in range(0, len(items) - 1, 2)
        ]
        if len(items) % 2:
            merged.append(items[-1])
        items = merged
    return items[0]
