"""`MergeTree`: an aggregator's merged summary of k children, updated in O(log k) merges.

An aggregator with ``k`` children keeps the latest `Subspace` of each child in a slot
and publishes the merge of all of them. Recomputing `merge_many` on every arrival costs
``k - 1`` merges; `MergeTree` keeps the merged partial results of the sub-ranges of a
balanced binary tree over the slots, so a new snapshot from one child recomputes only
the merges on its path to the root: at most ``ceil(log2(k))``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from edge_runtime.fpca._validation import check_int
from edge_runtime.fpca.merge import merge_subspaces
from edge_runtime.fpca.subspace import Subspace

__all__ = ["MergeTree"]

_NO_NODE = -1


def _left_size(n_leaves: int) -> int:
    """Leaves in the left subtree of a node over ``n_leaves >= 2`` leaves.

    The largest power of two strictly below ``n_leaves``: the shape `merge_many`'s
    level-by-level pairing (neighbours merged, an odd one out carried up) produces.
    """
    return 1 << ((n_leaves - 1).bit_length() - 1)


class MergeTree:
    """Merged summary of a fixed set of slots, updated in O(log k) merges per arrival.

    A balanced binary tree over the ``k`` slot keys, in the order given. Each slot
    (leaf) holds the latest `Subspace` of one child or nothing; each internal node
    caches the `merge_subspaces` of its two children's results, its left child as the
    older subspace ``a``. `update` replaces one slot and recomputes only the nodes on
    its path to the root, so one arrival costs at most ``ceil(log2(k))`` merges instead
    of the ``k - 1`` of `merge_many`. Empty subtrees are skipped: a node with one empty
    child takes the other child's result object as is (no merge, no copy), and the
    result is None while every slot is empty.

    Memory is ``O(k)`` cached subspaces of ``O(n_features * r)`` floats each, i.e.
    ``O(k * n_features * r)`` with ``r`` the largest rank kept, plus ``O(k)`` for the
    tree itself. `remove` also costs at most ``ceil(log2(k))`` merges.

    Parameters
    ----------
    keys : sequence of hashable
        The ``k >= 0`` slot keys (e.g. child node ids), fixed for the tree's lifetime;
        their order fixes the merge order.
    rank : int or None, default=None
        Rank ``r >= 0`` kept by every merge, and the maximum rank of `result`. None
        lets each merge keep the larger of its two input ranks (as
        `merge_subspaces` does), so `result` has the largest filled slot's rank.

    Attributes
    ----------
    keys : tuple of hashable
        The slot keys, in tree order.
    rank : int or None
        The ``rank`` given.
    result : Subspace or None
        Merge of all filled slots (None when all are empty).
    merges_last_update : int
        Number of `merge_subspaces` calls the last `update` or `remove` made
        (0 before the first).

    Raises
    ------
    ValueError
        If a key occurs twice in ``keys`` (the message names it) or ``rank < 0``.
    TypeError
        If a key is not hashable or ``rank`` is not an integer.

    Notes
    -----
    The tree over ``n`` leaves puts the first ``2**m`` leaves in its left subtree
    (``2**m`` the largest power of two below ``n``) and the other ``n - 2**m`` in its
    right subtree, recursively. This is exactly the pairing of `merge_many`, which
    merges neighbours level by level and carries an odd one out up unchanged, so when
    **all slots are filled** `result` equals ``merge_many([slots in key order], rank)``
    bitwise (same merges, same operands, same order).

    When some slots are empty, the tree skips them but keeps its fixed shape, while
    `merge_many` of the filled slots alone pairs them by their positions in the
    shorter list, so the two may group the same inputs differently. By Lemma 1 and the
    order invariance of Lemma 10 of Grammenos et al. (2020), the results then agree
    up to rounding (largest principal angle and relative singular-value differences of
    order 1e-12) whenever no merge truncates a non-zero singular value, e.g. when
    ``rank`` is at least the rank of the union of the data; when merges do truncate,
    both are rank-``r`` approximations with the paper's error bounds but not the same
    one. A single filled slot is returned as is, or truncated to ``rank`` (as
    `merge_many` of one subspace).

    This is the merge up an aggregation tree of Alg. 1 (Merge_r, Alg. 2, at each
    node) of the federated PCA of Grammenos et al., with partial results cached so
    that one child's arrival does not redo its siblings' merges.

    References
    ----------
    A. Grammenos, R. Mendoza-Smith, J. Crowcroft, C. Mascolo. "Federated Principal
    Component Analysis." NeurIPS 2020. arXiv:1907.08059.

    Examples
    --------
    >>> import numpy as np
    >>> from edge_runtime.fpca import merge_many, offline_subspace
    >>> from edge_runtime.fpca.tree import MergeTree
    >>> rng = np.random.default_rng(0)
    >>> parts = {f"leaf{i}": offline_subspace(rng.normal(size=(20, 6)), 3) for i in range(8)}
    >>> tree = MergeTree(list(parts), rank=3)
    >>> tree.result is None
    True
    >>> for key, sub in parts.items():
    ...     merged = tree.update(key, sub)
    >>> len(tree), tree.merges_last_update, merged.n_samples
    (8, 3, 160)
    >>> reference = merge_many(list(parts.values()), rank=3)
    >>> bool(np.array_equal(merged.basis, reference.basis))
    True
    >>> tree.remove("leaf3").n_samples
    140
    """

    def __init__(self, keys: Sequence[Hashable], rank: int | None = None) -> None:
        self._keys: tuple[Hashable, ...] = tuple(keys)
        self._rank = None if rank is None else check_int(rank, "rank", 0)
        self._index: dict[Hashable, int] = {}
        for i, key in enumerate(self._keys):
            if key in self._index:
                raise ValueError(
                    f"duplicate slot key {key!r} in keys (positions "
                    f"{self._index[key]} and {i}); keys must be unique"
                )
            self._index[key] = i
        k = len(self._keys)
        # Nodes 0 .. k-1 are the leaves (slot i is node i); internal nodes follow.
        n_nodes = max(2 * k - 1, 0)
        self._parent = [_NO_NODE] * n_nodes
        self._left = [_NO_NODE] * n_nodes
        self._right = [_NO_NODE] * n_nodes
        self._value: list[Subspace | None] = [None] * n_nodes
        self._n_internal = 0
        if k:
            self._build(0, k)
        self._n_filled = 0
        self._n_features: int | None = None
        self._result: Subspace | None = None
        self.merges_last_update = 0

    def _build(self, lo: int, hi: int) -> int:
        """Build the subtree over leaves ``lo .. hi-1`` (recursion depth ceil(log2(k)))."""
        if hi - lo == 1:
            return lo
        split = lo + _left_size(hi - lo)
        left, right = self._build(lo, split), self._build(split, hi)
        node = len(self._keys) + self._n_internal
        self._n_internal += 1
        self._left[node], self._right[node] = left, right
        self._parent[left] = self._parent[right] = node
        return node

    @property
    def keys(self) -> tuple[Hashable, ...]:
        """The slot keys, in tree (merge) order."""
        return self._keys

    @property
    def rank(self) -> int | None:
        """Rank kept by every merge (None: the larger input rank)."""
        return self._rank

    @property
    def result(self) -> Subspace | None:
        """Merge of all filled slots, or None when every slot is empty."""
        return self._result

    def __len__(self) -> int:
        """Number of filled slots."""
        return self._n_filled

    def __repr__(self) -> str:
        return f"MergeTree(k={len(self._keys)}, filled={self._n_filled}, rank={self._rank})"

    def _slot(self, key: Hashable) -> int:
        try:
            return self._index[key]
        except (KeyError, TypeError):
            raise KeyError(
                f"unknown slot key {key!r}; the tree's keys are fixed at "
                f"construction ({len(self._keys)} slots)"
            ) from None

    def update(self, key: Hashable, subspace: Subspace) -> Subspace | None:
        """Replace the slot ``key`` with ``subspace`` and return the merged result.

        Recomputes only the merges on the slot's path to the root: at most
        ``ceil(log2(k))`` calls of `merge_subspaces`, each ``O(n_features * r**2 +
        r**3)`` time for ranks up to ``r``; fewer where a sibling subtree is empty.

        Parameters
        ----------
        key : hashable
            One of the tree's keys.
        subspace : Subspace
            The slot's new summary, ``basis`` of shape ``(n_features, rank)``; it is
            stored, not copied (a `Subspace` is immutable).

        Returns
        -------
        Subspace or None
            The new `result`: rank ``min(rank, ...)`` with ``n_samples`` the sum over
            the filled slots (never None after an update).

        Raises
        ------
        KeyError
            If ``key`` is not one of the tree's keys (the message names it).
        TypeError
            If ``subspace`` is not a Subspace.
        ValueError
            If ``subspace`` holds NaN or infinity, or its ``n_features`` differs from
            that of the other filled slots (the message names both keys and sizes).
            The tree is unchanged when anything is raised.
        """
        slot = self._slot(key)
        if not isinstance(subspace, Subspace):
            raise TypeError(
                f"subspace for slot {key!r} must be a Subspace, got {type(subspace).__name__}"
            )
        if not (np.isfinite(subspace.basis).all() and np.isfinite(subspace.singular_values).all()):
            raise ValueError(f"subspace for slot {key!r} has non-finite basis or singular values")
        others = self._n_filled - (self._value[slot] is not None)
        if others and subspace.n_features != self._n_features:
            other = next(
                k for i, k in enumerate(self._keys) if i != slot and self._value[i] is not None
            )
            raise ValueError(
                f"subspace for slot {key!r} has n_features {subspace.n_features}, but the "
                f"other filled slots have {self._n_features} (e.g. slot {other!r})"
            )
        was_empty = self._value[slot] is None
        self._recompute(slot, subspace)
        self._n_filled += was_empty
        self._n_features = subspace.n_features
        return self._result

    def remove(self, key: Hashable) -> Subspace | None:
        """Empty the slot ``key`` and return the merged result of the others.

        At most ``ceil(log2(k))`` merges (none if the slot was already empty).

        Parameters
        ----------
        key : hashable
            One of the tree's keys.

        Returns
        -------
        Subspace or None
            The new `result`; None when no slot is filled any more.

        Raises
        ------
        KeyError
            If ``key`` is not one of the tree's keys (the message names it).
        """
        slot = self._slot(key)
        if self._value[slot] is None:
            self.merges_last_update = 0
            return self._result
        self._recompute(slot, None)
        self._n_filled -= 1
        if not self._n_filled:
            self._n_features = None
        return self._result

    def _recompute(self, slot: int, leaf: Subspace | None) -> None:
        """Set leaf ``slot`` and recompute its ancestors; commit only if every merge succeeds."""
        path: list[tuple[int, Subspace | None]] = [(slot, leaf)]
        merges = 0
        node, value = slot, leaf
        while (parent := self._parent[node]) != _NO_NODE:
            left, right = self._left[parent], self._right[parent]
            sibling = self._value[right] if node == left else self._value[left]
            if sibling is None:
                pass  # value passes up unchanged (the same object)
            elif value is not None:
                a, b = (value, sibling) if node == left else (sibling, value)
                value = merge_subspaces(a, b, self._rank)
                merges += 1
            else:
                value = sibling
            path.append((parent, value))
            node = parent
        for n, v in path:
            self._value[n] = v
        # The root is a raw slot when at most one slot is filled (or k == 1): truncate it
        # to ``rank`` as merge_many does for one subspace; merged results already fit.
        if value is not None and self._rank is not None and value.rank > self._rank:
            value = value.truncate(self._rank)
        self._result = value
        self.merges_last_update = merges
