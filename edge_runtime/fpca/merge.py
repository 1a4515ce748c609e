"""Merging subspaces: Merge_r (Alg. 2) and a balanced merge tree over many of them.

A merge combines the summaries of two disjoint data sets into the summary of their
union without access to the data: by Lemma 1 of Grammenos et al. (2020), merging the
exact SVDs of ``X1`` and ``X2`` without truncation gives the exact SVD of
``vstack(X1, X2)``, and the result does not depend on the order of the merges
(Lemma 10). This is what lets aggregators combine children's snapshots as they arrive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from edge_runtime.fpca._validation import check_forget, check_int
from edge_runtime.fpca.linalg import svd_update
from edge_runtime.fpca.subspace import Subspace, flip_signs

__all__ = ["merge_many", "merge_subspaces"]


def _check_subspace(s: object, name: str) -> Subspace:
    if not isinstance(s, Subspace):
        raise TypeError(f"{name} must be a Subspace, got {type(s).__name__}")
    # A sum is finite only if every term is (NaN and inf propagate); the elementwise
    # check runs only when the cheap one fails (e.g. a finite sum that overflows).
    if not math.isfinite(float(np.sum(s.basis)) + float(np.sum(s.singular_values))) and not (
        np.isfinite(s.basis).all() and np.isfinite(s.singular_values).all()
    ):
        raise ValueError(f"{name} has non-finite basis or singular values; expected finite")
    if s.mean is not None and not np.isfinite(s.mean).all():
        raise ValueError(f"{name} has a non-finite mean; expected finite")
    return s


def _merged_mean(
    a: Subspace, b: Subspace, forget: float
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The merged mean and the mean-correction column (None if not needed)."""
    if a.mean is None and b.mean is None:
        return None, None
    if a.mean is None or b.mean is None:
        lacking, having = ("a", "b") if a.mean is None else ("b", "a")
        raise ValueError(
            f"cannot merge an uncentred with a centred subspace: {lacking} has no mean "
            f"(uncentred) but {having} has one; merge centred summaries with centred ones"
        )
    weight_a = forget * forget * a.n_samples
    weight_b = float(b.n_samples)
    total = weight_a + weight_b
    if total == 0.0:
        return a.mean.copy(), None
    mean = a.mean + (weight_b / total) * (b.mean - a.mean)
    if weight_a == 0.0 or weight_b == 0.0:
        return mean, None
    correction = math.sqrt(weight_a * weight_b / total) * (a.mean - b.mean)
    return mean, correction


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
        ``singular_values`` of shape ``(rank,)``,
        ``n_samples = a.n_samples + b.n_samples``, and for centred inputs the
        weighted ``mean = (w_a mean_a + w_b mean_b) / (w_a + w_b)`` with ``w_a =
        forget**2 * a.n_samples``, ``w_b = b.n_samples`` (a's mean if both are 0).

    Raises
    ------
    TypeError
        If ``a`` or ``b`` is not a Subspace, or ``rank`` is not an integer.
    ValueError
        If ``n_features`` differ (the message names both), ``rank < 0``,
        ``forget`` is outside (0, 1], a subspace holds NaN or infinity, or one is
        centred (has a ``mean``) and the other not (the message names which lacks it).

    Notes
    -----
    Alg. 2 (Merge_r) of Grammenos et al. (2020), with the columns of the paper's
    ``U`` as our basis: ``Z = U1^T U2``; ``[Q, R] = QR(U2 - U1 Z)``;
    ``[U_small, S', ~] = SVD_r([[lambda S1, Z S2], [0, R S2]])``;
    ``U' = [U1, Q] U_small``. The same routine performs the streaming block update
    of eq. (3) in `FPCAEdge`. By Lemma 1 the result equals the SVD_r of
    ``[lambda U1 S1, U2 S2]``, which for exact untruncated inputs is the SVD_r of
    the stacked data. It is computed from the ``(r1 + r2) x (r1 + r2)`` Gram matrix
    of that concatenation, which needs only ``U1^T U2`` (no QR of a
    ``(n_features, r2)`` matrix), and by the QR + SVD above when the kept singular
    values are too ill-conditioned for it (``s_r < 1e-3 s_1``); see
    ``edge_runtime/fpca/linalg.py``.

    Centred summaries (both with ``mean``): the column ``sqrt(w_a w_b / (w_a + w_b))
    (mean_a - mean_b)`` is appended to ``U2 S2`` (Ross et al. 2008, as in
    scikit-learn's ``IncrementalPCA``), so the result is the summary of the union
    centred on its weighted mean; without truncation it is exact. The weights are the
    sample counts (``a``'s scaled by ``forget**2``, as its singular values by
    ``forget``); for summaries of forgetting streams this weighs the means by raw,
    not effective, counts.

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
    mean, correction = _merged_mean(a, b, forget)
    cols_sv: np.ndarray | None = b.singular_values
    # U2 S2 (and the mean correction), Fortran-ordered as the LAPACK kernels want it.
    cols = np.empty((b.n_features, b.rank + (correction is not None)), order="F")
    np.multiply(b.basis, b.singular_values, out=cols[:, : b.rank])
    if correction is not None:
        cols[:, b.rank] = correction
        cols_sv = None
    basis, sv = svd_update(
        a.basis, a.singular_values, cols, rank, forget, cols_singular_values=cols_sv
    )
    return Subspace(flip_signs(basis, copy=False), sv, a.n_samples + b.n_samples, mean)


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
        Inputs must be all centred or all uncentred (as `merge_subspaces`).

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
