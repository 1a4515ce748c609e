"""`MergeTree`: an aggregator's merged summary of k children, updated in O(log k) merges.

An aggregator with ``k`` children keeps the latest `Subspace` of each child in a slot
and publishes the merge of all of them. Recomputing `merge_many` on every arrival costs
``k - 1`` merges; `MergeTree` keeps the merged partial results of the sub-ranges of a
balanced binary tree over the slots, so a new snapshot from one child recomputes only
the merges on its path to the root: at most ``ceil(log2(k))``. Children may join
(`MergeTree.insert`) and leave (`MergeTree.discard`) at the same cost: a new key takes a
free slot, and when none is free the tree doubles its slots under a new root.
"""

from __future__ import annotations

import heapq
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
    """Merged summary of a set of keyed slots, updated in O(log k) merges per change.

    A balanced binary tree over slots, one per key. Each slot (leaf) holds the latest
    `Subspace` of one child or nothing; each internal node caches the `merge_subspaces`
    of its two children's results, its left child as the older subspace ``a``. `update`
    replaces one slot and recomputes only the nodes on its path to the root, so one
    arrival costs at most `depth` merges instead of the ``k - 1`` of `merge_many`.
    Empty subtrees are skipped: a node with one empty child takes the other child's
    result object as is (no merge, no copy), and the result is None while every slot is
    empty.

    Keys join and leave while the tree runs. `insert` gives a new key the free slot
    furthest left; when no slot is free, the tree first doubles its `capacity`: a new
    root takes the old tree as its left subtree and a balanced subtree of as many empty
    slots as its right one (no merge: the new root's result is the old root's). `discard`
    empties a key's slot (as `remove`) and frees it for the next `insert`.

    **Cost, exactly.** `update`, `remove`, `discard` and ``insert(key, subspace)`` each
    make at most ``min(depth, filled - 1)`` calls of `merge_subspaces` (``filled``: the
    slots holding a subspace after the call, or before it for a removal), counted in
    `merges_last_update`; ``insert(key)`` without a subspace makes none. ``depth =
    ceil(log2(capacity))``; the capacity starts at ``len(keys)`` and only doubles when a
    key is inserted while every slot holds a key, so ``capacity <= max(len(keys), 1,
    2 * (k_max - 1))`` and ``depth <= ceil(log2(k_max)) + 1``, where ``k_max`` is the
    largest number of keys the tree has held (its initial keys included). Each merge is
    ``O(n_features * r**2 + r**3)`` time for ranks up to ``r``. Doubling costs no merge
    and ``O(capacity)`` bookkeeping (amortised ``O(1)`` per insert); slots are never
    given back, so a tree that shrank keeps its depth (an aggregator rebuilds its tree
    when it restarts).

    Memory is ``O(capacity)`` cached subspaces of ``O(n_features * r)`` floats each,
    i.e. ``O(capacity * n_features * r)`` with ``r`` the largest rank kept, plus
    ``O(capacity)`` for the tree itself.

    Parameters
    ----------
    keys : sequence of hashable, default ()
        The ``k >= 0`` initial slot keys (e.g. the child node ids a topology declares);
        their order fixes the merge order.
    rank : int or None, default=None
        Rank ``r >= 0`` kept by every merge, and the maximum rank of `result`. None
        lets each merge keep the larger of its two input ranks (as
        `merge_subspaces` does), so `result` has the largest filled slot's rank.

    Attributes
    ----------
    keys : tuple of hashable
        The slot keys, in tree (merge) order.
    rank : int or None
        The ``rank`` given.
    result : Subspace or None
        Merge of all filled slots (None when all are empty).
    capacity : int
        Slots in the tree, free ones included.
    depth : int
        Levels above the slots, ``ceil(log2(capacity))``: the most merges of one change.
    merges_last_update : int
        Number of `merge_subspaces` calls the last `update`, `remove`, `insert` or
        `discard` made (0 before the first).

    Raises
    ------
    ValueError
        If a key occurs twice in ``keys`` (the message names it) or ``rank < 0``.
    TypeError
        If a key is not hashable or ``rank`` is not an integer.

    Notes
    -----
    The tree over ``n`` initial keys puts the first ``2**m`` slots in its left subtree
    (``2**m`` the largest power of two below ``n``) and the other ``n - 2**m`` in its
    right subtree, recursively. This is exactly the pairing of `merge_many`, which
    merges neighbours level by level and carries an odd one out up unchanged, so when
    **all initial slots are filled** (and no key was inserted or discarded) `result`
    equals ``merge_many([slots in key order], rank)`` bitwise (same merges, same
    operands, same order).

    When some slots are empty, or the tree grew, it groups the filled slots differently
    from `merge_many` of the filled slots alone. By Lemma 1 and the order invariance of
    Lemma 10 of Grammenos et al. (2020), the results then agree up to rounding (largest
    principal angle and relative singular-value differences of order 1e-12) whenever no
    merge truncates a non-zero singular value, e.g. when ``rank`` is at least the rank
    of the union of the data; when merges do truncate, both are rank-``r``
    approximations with the paper's error bounds but not the same one. A single filled
    slot is returned as is, or truncated to ``rank`` (as `merge_many` of one subspace).

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
    >>> from edge_runtime.fpca.merge_tree import MergeTree
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
    >>> joined = offline_subspace(rng.normal(size=(30, 6)), 3)
    >>> tree.insert("leaf8", joined).n_samples  # no free slot: 8 slots become 16
    170
    >>> tree.capacity, tree.depth, tree.merges_last_update
    (16, 4, 1)
    >>> tree.discard("leaf0").n_samples, "leaf0" in tree
    (150, False)
    """

    def __init__(self, keys: Sequence[Hashable] = (), rank: int | None = None) -> None:
        initial: tuple[Hashable, ...] = tuple(keys)
        self._rank = None if rank is None else check_int(rank, "rank", 0)
        self._slot_of: dict[Hashable, int] = {}  # key -> its leaf node
        for i, key in enumerate(initial):
            if key in self._slot_of:
                raise ValueError(
                    f"duplicate slot key {key!r} in keys (positions "
                    f"{self._slot_of[key]} and {i}); keys must be unique"
                )
            self._slot_of[key] = i
        # Node arrays; leaf ids increase from left to right (new leaves are appended
        # right of the old ones), so a heap of leaf ids yields the leftmost free slot.
        self._parent: list[int] = []
        self._left: list[int] = []
        self._right: list[int] = []
        self._value: list[Subspace | None] = []
        self._free: list[int] = []  # heap of free leaf ids
        self._capacity = 0
        self._depth = 0
        self._root = _NO_NODE
        if initial:
            self._root = self._new_subtree(len(initial))
            self._capacity = len(initial)
            self._depth = (len(initial) - 1).bit_length()
        self._ordered: tuple[Hashable, ...] | None = initial
        self._n_filled = 0
        self._n_features: int | None = None
        self._result: Subspace | None = None
        self.merges_last_update = 0

    def _new_node(self, left: int = _NO_NODE, right: int = _NO_NODE) -> int:
        self._parent.append(_NO_NODE)
        self._left.append(left)
        self._right.append(right)
        self._value.append(None)
        return len(self._value) - 1

    def _new_subtree(self, n_leaves: int) -> int:
        """Append ``n_leaves >= 1`` empty leaves and a balanced tree over them; its root."""
        first = len(self._value)
        for _ in range(n_leaves):
            self._new_node()
        return self._build(first, first + n_leaves)

    def _build(self, lo: int, hi: int) -> int:
        """Build the subtree over leaves ``lo .. hi-1`` (recursion depth ceil(log2(k)))."""
        if hi - lo == 1:
            return lo
        split = lo + _left_size(hi - lo)
        left, right = self._build(lo, split), self._build(split, hi)
        node = self._new_node(left, right)
        self._parent[left] = self._parent[right] = node
        return node

    def _grow(self) -> None:
        """Double the capacity (one slot from none): the old tree becomes the left subtree
        of a new root, a balanced tree of empty slots its right one. No merge."""
        first_new, n_new = len(self._value), max(self._capacity, 1)
        subtree = self._new_subtree(n_new)  # leaves first_new .. first_new + n_new - 1
        if self._capacity:
            root = self._new_node(self._root, subtree)
            self._parent[self._root] = self._parent[subtree] = root
            self._value[root] = self._value[self._root]  # the right half is empty
            self._depth += 1
            subtree = root
        self._root = subtree
        self._capacity += n_new
        for leaf in range(first_new, first_new + n_new):
            heapq.heappush(self._free, leaf)

    @property
    def keys(self) -> tuple[Hashable, ...]:
        """The slot keys, in tree (merge) order."""
        if self._ordered is None:
            by_slot = sorted(self._slot_of.items(), key=lambda item: item[1])
            self._ordered = tuple(key for key, _ in by_slot)
        return self._ordered

    @property
    def rank(self) -> int | None:
        """Rank kept by every merge (None: the larger input rank)."""
        return self._rank

    @property
    def result(self) -> Subspace | None:
        """Merge of all filled slots, or None when every slot is empty."""
        return self._result

    @property
    def capacity(self) -> int:
        """Slots in the tree, free ones included (never decreases)."""
        return self._capacity

    @property
    def depth(self) -> int:
        """``ceil(log2(capacity))``: the most merges one change can cost."""
        return self._depth

    def __len__(self) -> int:
        """Number of filled slots."""
        return self._n_filled

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is one of the tree's keys (filled or not)."""
        try:
            return key in self._slot_of
        except TypeError:  # unhashable: never a key
            return False

    def __repr__(self) -> str:
        return (
            f"MergeTree(k={len(self._slot_of)}, filled={self._n_filled}, "
            f"capacity={self._capacity}, rank={self._rank})"
        )

    def _slot(self, key: Hashable) -> int:
        try:
            return self._slot_of[key]
        except (KeyError, TypeError):
            raise KeyError(
                f"unknown slot key {key!r} ({len(self._slot_of)} keys); add a key with insert first"
            ) from None

    def insert(self, key: Hashable, subspace: Subspace | None = None) -> Subspace | None:
        """Add the key ``key`` (an empty slot), and fill it with ``subspace`` if given.

        The key takes the leftmost free slot; with none free the tree first doubles its
        `capacity` (no merge). Without ``subspace`` no merge is made; with it, the cost
        is that of `update`: at most `depth` merges.

        Parameters
        ----------
        key : hashable
            Not yet a key of the tree.
        subspace : Subspace, optional
            The new slot's summary, ``basis`` of shape ``(n_features, rank)``.

        Returns
        -------
        Subspace or None
            The new `result`.

        Raises
        ------
        ValueError
            If ``key`` is already a key (the message names it), or as `update`.
        TypeError
            If ``key`` is not hashable, or as `update`. When `update` raises, the key is
            not added (the tree may keep its new capacity).
        """
        if key in self._slot_of:
            raise ValueError(f"slot key {key!r} is already in the tree; use update")
        if not self._free:
            self._grow()
        leaf = heapq.heappop(self._free)
        self._slot_of[key] = leaf
        self._ordered = None
        if subspace is None:
            self.merges_last_update = 0
            return self._result
        try:
            return self.update(key, subspace)
        except (TypeError, ValueError):
            del self._slot_of[key]
            heapq.heappush(self._free, leaf)
            raise

    def discard(self, key: Hashable) -> Subspace | None:
        """Remove the key ``key`` and its subspace; its slot is free for a later `insert`.

        At most `depth` merges (none when the slot was empty or ``key`` is not a key:
        like `set.discard`, an absent key is not an error).

        Returns
        -------
        Subspace or None
            The new `result`; None when no slot is filled any more.
        """
        if key not in self:
            self.merges_last_update = 0
            return self._result
        self.remove(key)
        heapq.heappush(self._free, self._slot_of.pop(key))
        self._ordered = None
        return self._result

    def update(self, key: Hashable, subspace: Subspace) -> Subspace | None:
        """Replace the slot ``key`` with ``subspace`` and return the merged result.

        Recomputes only the merges on the slot's path to the root: at most `depth`
        calls of `merge_subspaces`, each ``O(n_features * r**2 + r**3)`` time for ranks
        up to ``r``; fewer where a sibling subtree is empty.

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
                k for k, s in self._slot_of.items() if s != slot and self._value[s] is not None
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
        """Empty the slot ``key`` (the key stays) and return the merged result of the others.

        At most `depth` merges (none if the slot was already empty).

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
