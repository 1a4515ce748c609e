"""Tests of `MergeTree`: incremental merges of k slots, bitwise equal to `merge_many`."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_runtime.fpca import merge_tree as tree_module
from edge_runtime.fpca.merge import merge_many, merge_subspaces
from edge_runtime.fpca.merge_tree import MergeTree
from edge_runtime.fpca.metrics import offline_subspace, principal_angles
from edge_runtime.fpca.subspace import Subspace


def random_subspace(rng: np.random.Generator, d: int, rank: int, n_samples: int = 10) -> Subspace:
    """A random orthonormal basis with decreasing singular values (not from data)."""
    basis = np.linalg.qr(rng.normal(size=(d, rank)))[0]
    sv = np.sort(rng.uniform(0.5, 10.0, size=rank))[::-1]
    return Subspace(basis, sv, n_samples)


def random_subspaces(seed: int, k: int, d: int = 12, ranks: tuple[int, ...] = (1, 2, 3, 4)):
    rng = np.random.default_rng(seed)
    return [
        random_subspace(rng, d, int(rng.choice(ranks)), int(rng.integers(1, 50))) for _ in range(k)
    ]


def assert_bitwise_equal(a: Subspace | None, b: Subspace) -> None:
    assert a is not None
    assert np.array_equal(a.basis, b.basis)
    assert np.array_equal(a.singular_values, b.singular_values)
    assert a.n_samples == b.n_samples


def filled_tree(subs: list[Subspace], rank: int | None = None) -> MergeTree:
    tree = MergeTree(range(len(subs)), rank=rank)
    for i, s in enumerate(subs):
        tree.update(i, s)
    return tree


# A pool of exact summaries of data lying in one common 3-dim subspace of R^10: every
# merge at rank >= 3 is then lossless, so any pairing gives the same result up to rounding
# (Lemma 1, Lemma 10), which is what holds when some slots are empty.
_POOL_RANK = 3


def _low_rank_pool(size: int = 24, d: int = 10) -> list[Subspace]:
    rng = np.random.default_rng(1234)
    w = np.linalg.qr(rng.normal(size=(d, _POOL_RANK)))[0]
    pool = []
    for _ in range(size):
        n = int(rng.integers(5, 40))
        x = (rng.normal(size=(n, _POOL_RANK)) * [5.0, 2.0, 0.7]) @ w.T
        pool.append(offline_subspace(x, _POOL_RANK))
    return pool


POOL = _low_rank_pool()


def largest_principal_angle(a: np.ndarray, b: np.ndarray) -> float:
    """Largest principal angle between the spans of orthonormal ``a`` and ``b`` (same rank).

    ``arcsin`` of the spectral norm of the part of ``b`` outside ``span(a)``: accurate for
    tiny angles (unlike ``arccos`` of cosines near 1), and cheaper than scipy's.
    """
    if b.shape[1] == 0:
        return 0.0
    return float(np.arcsin(min(1.0, np.linalg.norm(b - a @ (a.T @ b), 2))))


def assert_same_summary(a: Subspace | None, b: Subspace) -> None:
    """Equal up to rounding: same n_samples, singular values and span of the directions
    with non-zero singular values (directions of zero singular value are arbitrary)."""
    assert a is not None
    assert a.rank == b.rank
    assert a.n_samples == b.n_samples
    scale = b.singular_values[0] if b.rank else 1.0
    np.testing.assert_allclose(a.singular_values, b.singular_values, rtol=0, atol=1e-10 * scale)
    m = int(np.count_nonzero(b.singular_values > 1e-8 * scale))
    assert largest_principal_angle(a.basis[:, :m], b.basis[:, :m]) < 1e-8


def test_largest_principal_angle_helper_agrees_with_principal_angles() -> None:
    rng = np.random.default_rng(3)
    a, b = (np.linalg.qr(rng.normal(size=(10, 3)))[0] for _ in range(2))

    assert largest_principal_angle(a, b) == pytest.approx(principal_angles(a, b).max(), rel=1e-9)
    # a few ulp of 1.0 (aarch64 gives 1.0057e-15 where x86 gives less): the same subspace
    assert largest_principal_angle(a, a[:, ::-1]) < 1e-13


@pytest.mark.parametrize("k", [*range(1, 18), 31, 32, 33, 64, 100, 129])
@pytest.mark.parametrize("rank", [None, 0, 2, 5])
def test_all_filled_result_equals_merge_many_bitwise(k: int, rank: int | None) -> None:
    subs = random_subspaces(k, k)

    tree = filled_tree(subs, rank)

    assert len(tree) == k
    assert_bitwise_equal(tree.result, merge_many(subs, rank))


@pytest.mark.parametrize("k", [1, 2, 3, 5, 7, 12, 17, 40])
def test_any_update_order_gives_merge_many_bitwise(k: int) -> None:
    subs = random_subspaces(100 + k, k)
    expected = merge_many(subs, 3)
    rng = np.random.default_rng(k)
    for _ in range(3):
        tree = MergeTree([f"child-{i}" for i in range(k)], rank=3)
        # Random order, with stale snapshots first that are later replaced.
        stale = random_subspaces(200 + k, k)
        for i in rng.permutation(k)[: k // 2]:
            tree.update(f"child-{i}", stale[i])
        for i in rng.permutation(k):
            tree.update(f"child-{i}", subs[i])
        assert_bitwise_equal(tree.result, expected)


def test_update_returns_the_result() -> None:
    subs = random_subspaces(5, 4)
    tree = MergeTree("abcd")
    for key, s in zip("abcd", subs, strict=True):
        returned = tree.update(key, s)
        assert returned is tree.result


@pytest.mark.parametrize("k", [4, 5, 16, 33, 100, 256, 1024])
def test_a_single_update_makes_at_most_ceil_log2_k_merges(k: int) -> None:
    rng = np.random.default_rng(k)
    subs = [random_subspace(rng, 4, 1) for _ in range(k)]
    bound = math.ceil(math.log2(k))
    tree = MergeTree(range(k), rank=1)
    for i, s in enumerate(subs):  # filling: each arrival is a single update too
        tree.update(i, s)
        assert tree.merges_last_update <= bound

    # Slot 0 is a deepest leaf: with every slot filled its update needs exactly the bound.
    tree.update(0, subs[1])
    assert tree.merges_last_update == bound
    tree.update(0, subs[0])
    for i in {k - 1, k // 2, *rng.integers(0, k, size=8).tolist()}:
        tree.update(i, subs[(i + 1) % k])
        assert 1 <= tree.merges_last_update <= bound
        tree.remove(i)
        assert tree.merges_last_update <= bound
        tree.update(i, subs[i])
        assert tree.merges_last_update <= bound
    assert_bitwise_equal(tree.result, merge_many(subs, 1))


def test_merges_last_update_counts_skipped_empty_subtrees() -> None:
    subs = random_subspaces(7, 8)
    tree = MergeTree(range(8))
    assert tree.merges_last_update == 0

    tree.update(0, subs[0])
    assert tree.merges_last_update == 0  # all siblings empty: no merge
    tree.update(7, subs[7])
    assert tree.merges_last_update == 1  # only the root merges
    tree.update(1, subs[1])
    assert tree.merges_last_update == 2  # (0, 1) then the root
    tree.remove(5)  # already empty
    assert tree.merges_last_update == 0


def test_single_filled_slot_is_passed_up_without_copy_or_merge() -> None:
    s = random_subspaces(8, 1, ranks=(4,))[0]
    tree = MergeTree(range(13))

    assert tree.update(6, s) is s
    assert tree.merges_last_update == 0


def test_rank_truncates_the_result_but_slots_keep_their_rank() -> None:
    a, b = random_subspaces(9, 2, ranks=(4,))
    tree = MergeTree(["a", "b"], rank=2)

    only_a = tree.update("a", a)
    assert only_a is not None
    assert only_a.rank == 2
    assert_bitwise_equal(only_a, a.truncate(2))
    assert_bitwise_equal(only_a, merge_many([a], 2))

    # The merge uses the stored, untruncated slot, as merge_many does.
    both = tree.update("b", b)
    assert both is not None
    assert both.rank == 2
    assert_bitwise_equal(both, merge_subspaces(a, b, 2))


def test_rank_none_keeps_the_largest_input_rank() -> None:
    subs = random_subspaces(10, 5, ranks=(1, 2, 5))
    tree = filled_tree(subs)

    assert tree.result is not None
    assert tree.result.rank == max(s.rank for s in subs)


def test_empty_tree_has_no_result() -> None:
    tree = MergeTree(["x", "y", "z"], rank=3)

    assert tree.result is None
    assert len(tree) == 0
    assert tree.keys == ("x", "y", "z")
    assert tree.rank == 3
    assert MergeTree([]).result is None
    assert len(MergeTree([])) == 0


def test_remove_then_re_add_restores_the_result_bitwise() -> None:
    subs = POOL[:9]
    tree = filled_tree(subs, rank=_POOL_RANK)
    full = tree.result
    assert full is not None

    without_4 = tree.remove(4)
    assert len(tree) == 8
    others = subs[:4] + subs[5:]
    assert_same_summary(without_4, merge_many(others, _POOL_RANK))

    tree.update(4, subs[4])
    assert len(tree) == 9
    assert_bitwise_equal(tree.result, full)


def test_removing_every_slot_empties_the_tree_and_frees_n_features() -> None:
    tree = MergeTree(["a", "b"])
    tree.update("a", random_subspaces(11, 1, d=6)[0])
    tree.update("b", random_subspaces(12, 1, d=6)[0])
    tree.remove("a")
    assert tree.remove("b") is None
    assert tree.result is None
    assert len(tree) == 0

    # No filled slot constrains n_features any more.
    s = random_subspaces(13, 1, d=9)[0]
    assert tree.update("a", s) is s


def test_the_only_filled_slot_may_change_n_features() -> None:
    tree = MergeTree(["a", "b"])
    tree.update("a", random_subspaces(14, 1, d=6)[0])
    s = random_subspaces(15, 1, d=9)[0]

    assert tree.update("a", s) is s


def test_unknown_key_raises_key_error_naming_it() -> None:
    tree = MergeTree(["a", "b"])
    s = random_subspaces(16, 1)[0]

    with pytest.raises(KeyError, match="'c'"):
        tree.update("c", s)
    with pytest.raises(KeyError, match="'c'"):
        tree.remove("c")
    with pytest.raises(KeyError, match=r"\['a'\]"):
        tree.update(["a"], s)  # unhashable: still not a key


def test_duplicate_keys_raise_value_error_naming_the_key() -> None:
    with pytest.raises(ValueError, match="duplicate slot key 'b'"):
        MergeTree(["a", "b", "c", "b"])


def test_invalid_rank_is_rejected() -> None:
    with pytest.raises(ValueError, match="rank"):
        MergeTree(["a"], rank=-1)
    with pytest.raises(TypeError, match="rank"):
        MergeTree(["a"], rank=2.5)  # type: ignore[arg-type]


def test_n_features_mismatch_raises_naming_both_slots_and_leaves_the_tree_unchanged() -> None:
    tree = MergeTree(["left", "right", "other"])
    a = random_subspaces(17, 1, d=6)[0]
    tree.update("left", a)

    with pytest.raises(ValueError, match=r"'right'.*n_features 7.*6.*'left'"):
        tree.update("right", random_subspaces(18, 1, d=7)[0])
    assert len(tree) == 1
    assert tree.result is a


def test_non_subspace_and_non_finite_inputs_are_rejected() -> None:
    tree = MergeTree(["a", "b"])
    good = random_subspaces(19, 1, ranks=(2,))[0]
    tree.update("a", good)
    bad = Subspace(good.basis.copy(), np.array([np.nan, 1.0]), 3)

    with pytest.raises(TypeError, match=r"'b'.*Subspace"):
        tree.update("b", good.basis)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"'b'.*non-finite"):
        tree.update("b", bad)
    assert len(tree) == 1
    assert tree.result is good


def test_docstring_example_runs() -> None:
    result = doctest.testmod(tree_module, verbose=False)

    assert result.attempted > 0
    assert result.failed == 0


_OPS = st.lists(
    st.tuples(st.integers(0, 15), st.one_of(st.none(), st.integers(0, len(POOL) - 1))),
    min_size=1,
    max_size=30,
)


@settings(max_examples=100, deadline=None)
@given(k=st.integers(1, 16), ops=_OPS, rank=st.sampled_from([None, _POOL_RANK, 5]))
def test_random_update_sequences_track_merge_many_of_the_filled_slots(
    k: int, ops: list[tuple[int, int | None]], rank: int | None
) -> None:
    tree = MergeTree([f"n{i}" for i in range(k)], rank=rank)
    slots: dict[int, Subspace] = {}
    bound = math.ceil(math.log2(k)) if k > 1 else 0
    for raw_slot, pool_index in ops:
        slot = raw_slot % k
        if pool_index is None:
            tree.remove(f"n{slot}")
            slots.pop(slot, None)
        else:
            tree.update(f"n{slot}", POOL[pool_index])
            slots[slot] = POOL[pool_index]
        assert tree.merges_last_update <= bound
        assert len(tree) == len(slots)

        filled = [slots[i] for i in sorted(slots)]
        if not filled:
            assert tree.result is None
            continue
        expected = merge_many(filled, rank)
        if len(filled) == k:
            assert_bitwise_equal(tree.result, expected)
        else:
            assert_same_summary(tree.result, expected)


# ------------------------------------------------------------ keys joining and leaving


def test_inserting_into_an_empty_tree_doubles_its_capacity_when_every_slot_is_taken() -> None:
    tree = MergeTree(rank=_POOL_RANK)
    capacities = []
    for i, sub in enumerate(POOL[:9]):
        tree.insert(f"n{i}", sub)
        capacities.append(tree.capacity)
        assert tree.depth == math.ceil(math.log2(tree.capacity))
        assert tree.merges_last_update <= math.ceil(math.log2(i + 1)) + 1
    assert capacities == [1, 2, 4, 4, 8, 8, 8, 8, 16]
    assert tree.keys == tuple(f"n{i}" for i in range(9))
    assert len(tree) == 9
    assert_same_summary(tree.result, merge_many(POOL[:9], _POOL_RANK))


def test_a_new_key_takes_the_leftmost_free_slot_before_the_tree_grows() -> None:
    tree = MergeTree(["a", "b", "c", "d"], rank=_POOL_RANK)
    for key, sub in zip("abcd", POOL, strict=False):
        tree.update(key, sub)
    tree.discard("b")
    tree.discard("c")
    assert "b" not in tree and tree.keys == ("a", "d")

    tree.insert("e", POOL[5])
    assert tree.capacity == 4  # no growth: "e" took "b"'s slot
    assert tree.keys == ("a", "e", "d")
    assert_same_summary(tree.result, merge_many([POOL[0], POOL[5], POOL[3]], _POOL_RANK))


def test_insert_without_a_subspace_makes_an_empty_slot_and_no_merge() -> None:
    tree = filled_tree(POOL[:3], rank=_POOL_RANK)
    before = tree.result

    assert tree.insert("new") is before
    assert tree.merges_last_update == 0
    assert len(tree) == 3 and "new" in tree
    tree.update("new", POOL[3])
    assert len(tree) == 4
    assert_same_summary(tree.result, merge_many(POOL[:4], _POOL_RANK))


def test_inserting_an_existing_key_or_a_bad_subspace_leaves_the_keys_unchanged() -> None:
    tree = MergeTree(["a"])
    tree.update("a", random_subspaces(20, 1, d=6)[0])

    with pytest.raises(ValueError, match="'a' is already"):
        tree.insert("a")
    with pytest.raises(ValueError, match=r"'b'.*n_features 7"):
        tree.insert("b", random_subspaces(21, 1, d=7)[0])
    with pytest.raises(TypeError):
        tree.insert(["unhashable"])  # type: ignore[arg-type]
    assert tree.keys == ("a",)
    assert "b" not in tree and ["unhashable"] not in tree


def test_discarding_an_absent_key_is_not_an_error_and_merges_nothing() -> None:
    tree = filled_tree(POOL[:2])

    assert tree.discard("absent") is tree.result
    assert tree.merges_last_update == 0
    assert tree.discard(0) is not None
    assert tree.discard(1) is None
    assert tree.keys == () and tree.result is None


@pytest.mark.parametrize("k", [16, 100, 1024])
def test_a_join_or_a_leave_makes_at_most_ceil_log2_k_plus_one_merges(k: int) -> None:
    """Grown one key at a time from empty, then leaves and joins at random: each change
    costs at most ceil(log2(k_max)) + 1 merges, k_max the most keys held."""
    rng = np.random.default_rng(k)
    subs = [random_subspace(rng, 4, 1) for _ in range(k)]
    tree = MergeTree(rank=1)
    worst = 0
    for i, s in enumerate(subs):
        tree.insert(i, s)
        assert tree.merges_last_update <= math.ceil(math.log2(i + 1)) + 1
        worst = max(worst, tree.merges_last_update)
    assert worst <= tree.depth == math.ceil(math.log2(k))
    bound = math.ceil(math.log2(k)) + 1
    left = [int(i) for i in rng.choice(k, size=k // 4, replace=False)]
    for i in left:
        tree.discard(i)
        assert tree.merges_last_update <= bound
    capacity = tree.capacity
    for i in left:
        tree.insert(i, subs[i])
        assert tree.merges_last_update <= bound
    assert tree.capacity == capacity == 2 ** math.ceil(math.log2(k))  # freed slots reused
    assert len(tree) == k


def test_the_cost_bound_holds_after_growing_from_a_size_that_is_no_power_of_two() -> None:
    tree = MergeTree(range(5), rank=_POOL_RANK)
    for i in range(5):
        tree.update(i, POOL[i])
    for i in range(5, 11):
        tree.insert(i, POOL[i])
        assert tree.merges_last_update <= tree.depth <= math.ceil(math.log2(i + 1)) + 1
    assert tree.capacity == 20 and tree.depth == 5
    assert_same_summary(tree.result, merge_many(POOL[:11], _POOL_RANK))


_MEMBERSHIP_OPS = st.lists(
    st.tuples(
        st.sampled_from(["insert", "update", "remove", "discard"]),
        st.integers(0, 23),
        st.integers(0, len(POOL) - 1),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(k0=st.integers(0, 5), ops=_MEMBERSHIP_OPS, rank=st.sampled_from([None, _POOL_RANK]))
def test_random_joins_and_leaves_track_merge_many_of_the_remaining_children(
    k0: int, ops: list[tuple[str, int, int]], rank: int | None
) -> None:
    tree = MergeTree([f"n{i}" for i in range(k0)], rank=rank)
    keys = {f"n{i}" for i in range(k0)}
    slots: dict[str, Subspace] = {}
    k_max = k0
    for op, raw_key, pool_index in ops:
        key = f"n{raw_key}"
        if op == "insert" and key not in keys:
            tree.insert(key, POOL[pool_index])
            keys.add(key)
            slots[key] = POOL[pool_index]
        elif op == "update" and key in keys:
            tree.update(key, POOL[pool_index])
            slots[key] = POOL[pool_index]
        elif op == "remove" and key in keys:
            tree.remove(key)
            slots.pop(key, None)
        elif op == "discard":
            tree.discard(key)
            keys.discard(key)
            slots.pop(key, None)
        else:
            continue
        k_max = max(k_max, len(keys))
        assert tree.merges_last_update <= tree.depth
        assert tree.merges_last_update <= max(0, math.ceil(math.log2(max(k_max, 1)))) + 1
        assert tree.depth == (math.ceil(math.log2(tree.capacity)) if tree.capacity else 0)
        assert tree.capacity <= max(k0, 1, 2 * (k_max - 1))
        assert set(tree.keys) == keys and len(tree) == len(slots)
        filled = [slots[key] for key in tree.keys if key in slots]
        if not filled:
            assert tree.result is None
        else:
            assert_same_summary(tree.result, merge_many(filled, rank))
