"""Tests of Merge_r (Alg. 2), the merge tree and the Subspace value type."""

from __future__ import annotations

import numpy as np
import pytest

from edge_runtime.fpca import (
    Subspace,
    merge_many,
    merge_subspaces,
    offline_subspace,
    principal_angles,
)
from edge_runtime.fpca.linalg import UpdateBuffers, svd_update
from edge_runtime.fpca.subspace import flip_signs


def low_rank_data(
    rng: np.random.Generator, n: int, d: int, scales: list[float], noise: float = 0.0
) -> np.ndarray:
    """``n`` samples in ``d`` dimensions with a random ``len(scales)``-dim signal plus noise."""
    w = np.linalg.qr(rng.normal(size=(d, len(scales))))[0]
    x = (rng.normal(size=(n, len(scales))) * scales) @ w.T
    return x + noise * rng.normal(size=(n, d))


def svd_of_concatenated_factors(
    a: Subspace, b: Subspace, rank: int, forget: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Reference: SVD_r of ``[forget * U1 S1, U2 S2]`` computed the expensive way."""
    concat = np.hstack([forget * a.basis * a.singular_values, b.basis * b.singular_values])
    u, s, _ = np.linalg.svd(concat, full_matrices=False)
    return u[:, :rank], s[:rank]


def assert_orthonormal(basis: np.ndarray, tol: float = 1e-12) -> None:
    gram = basis.T @ basis
    assert np.abs(gram - np.eye(basis.shape[1])).max() < tol


def test_merge_matches_offline_svd_of_stacked_data_when_ranks_are_full() -> None:
    rng = np.random.default_rng(0)
    x1 = low_rank_data(rng, 100, 20, [9.0, 5.0, 2.0, 1.0])
    x2 = low_rank_data(rng, 80, 20, [7.0, 4.0, 3.0, 1.5, 0.5])
    a, b = offline_subspace(x1, 4), offline_subspace(x2, 5)

    merged = merge_subspaces(a, b, rank=9)

    stacked = np.vstack([x1, x2])
    exact = offline_subspace(stacked, 9)
    assert merged.rank == 9
    assert merged.n_samples == 180
    np.testing.assert_allclose(
        merged.singular_values, exact.singular_values, rtol=0, atol=1e-10 * exact.singular_values[0]
    )
    assert principal_angles(merged.basis, exact.basis).max() < 1e-8
    # With deterministic signs the bases agree column by column, not only as spans.
    np.testing.assert_allclose(merged.basis, exact.basis, atol=1e-8)


def test_merge_with_truncation_matches_truncated_svd_of_the_concatenated_factors() -> None:
    rng = np.random.default_rng(1)
    a = offline_subspace(rng.normal(size=(40, 20)), 6)
    b = offline_subspace(rng.normal(size=(30, 20)), 7)

    merged = merge_subspaces(a, b, rank=5)

    basis, sv = svd_of_concatenated_factors(a, b, 5)
    assert merged.rank == 5
    np.testing.assert_allclose(merged.singular_values, sv, rtol=1e-12)
    assert principal_angles(merged.basis, basis).max() < 1e-8
    assert_orthonormal(merged.basis)


def test_merge_matches_the_reference_when_the_ranks_add_up_to_more_than_n_features() -> None:
    rng = np.random.default_rng(12)
    a = offline_subspace(rng.normal(size=(30, 8)), 5)
    # b's leading direction is also a's: its column adds nothing new to the span.
    shared = np.linalg.qr(np.hstack([a.basis[:, :1], rng.normal(size=(8, 5))]))[0]
    b = Subspace(shared, np.array([6.0, 5.0, 4.0, 3.0, 2.0, 1.0]), 30)

    merged = merge_subspaces(a, b, rank=8)

    basis, sv = svd_of_concatenated_factors(a, b, 8)
    np.testing.assert_allclose(merged.singular_values, sv, rtol=1e-12)
    assert principal_angles(merged.basis, basis).max() < 1e-8
    assert_orthonormal(merged.basis)


def test_merge_gives_the_same_subspace_whichever_argument_comes_first() -> None:
    rng = np.random.default_rng(2)
    a = offline_subspace(rng.normal(size=(15, 12)), 4)
    b = offline_subspace(rng.normal(size=(15, 12)), 5)

    ab, ba = merge_subspaces(a, b, rank=9), merge_subspaces(b, a, rank=9)

    np.testing.assert_allclose(ab.singular_values, ba.singular_values, rtol=1e-12)
    np.testing.assert_allclose(ab.basis, ba.basis, atol=1e-10)


def test_merge_many_gives_the_same_subspace_for_any_order_of_the_leaves() -> None:
    rng = np.random.default_rng(7)
    x = low_rank_data(rng, 1600, 30, [10.0, 8.0, 6.0, 4.0, 3.0], noise=0.01)
    leaves = [offline_subspace(part, 5) for part in np.array_split(x, 8)]
    reference = merge_many(leaves)

    for _ in range(6):
        order = rng.permutation(len(leaves))
        merged = merge_many([leaves[i] for i in order])
        assert principal_angles(reference.basis, merged.basis).max() < 1e-8
        np.testing.assert_allclose(merged.singular_values, reference.singular_values, rtol=1e-10)
        assert merged.n_samples == 1600
    offline = offline_subspace(x, 5)
    assert principal_angles(reference.basis, offline.basis).max() < 1e-6


def test_merge_with_a_rank_zero_subspace_returns_the_other_one() -> None:
    rng = np.random.default_rng(3)
    b = offline_subspace(rng.normal(size=(10, 6)), 3)
    empty = Subspace.empty(6)

    left, right = merge_subspaces(empty, b), merge_subspaces(b, empty)

    for merged in (left, right):
        assert merged.rank == 3
        assert merged.n_samples == 10
        np.testing.assert_allclose(merged.singular_values, b.singular_values, rtol=1e-14)
        np.testing.assert_allclose(merged.basis, b.basis, atol=1e-14)
    both_empty = merge_subspaces(empty, empty)
    assert both_empty.rank == 0
    assert both_empty.n_samples == 0


def test_merge_keeps_the_larger_input_rank_by_default_and_never_more_than_n_features() -> None:
    rng = np.random.default_rng(4)
    a = offline_subspace(rng.normal(size=(10, 6)), 3)
    b = offline_subspace(rng.normal(size=(10, 6)), 5)

    assert merge_subspaces(a, b).rank == 5
    assert merge_subspaces(a, b, rank=2).rank == 2
    assert merge_subspaces(a, b, rank=100).rank == 6
    assert merge_subspaces(a, a.truncate(1), rank=100).rank == 4


def test_merge_returns_an_orthonormal_basis_even_beyond_the_rank_of_the_data() -> None:
    rng = np.random.default_rng(5)
    a = offline_subspace(low_rank_data(rng, 30, 10, [3.0, 2.0]), 2)

    merged = merge_subspaces(a, a, rank=4)

    assert merged.rank == 4
    assert_orthonormal(merged.basis)
    np.testing.assert_allclose(merged.singular_values[:2], np.sqrt(2) * a.singular_values)
    assert merged.singular_values[2:].max() < 1e-12 * merged.singular_values[0]
    assert principal_angles(merged.basis[:, :2], a.basis).max() < 1e-10


def test_merge_stays_exact_when_the_newer_subspace_has_a_zero_singular_value() -> None:
    rng = np.random.default_rng(6)
    a = offline_subspace(rng.normal(size=(20, 8)), 3)
    q = np.linalg.qr(rng.normal(size=(8, 4)))[0]
    b = Subspace(q, np.array([2.0, 0.0, 1.5, 1.0]), 5)

    merged = merge_subspaces(a, b, rank=6)

    basis, sv = svd_of_concatenated_factors(a, b, 6)
    np.testing.assert_allclose(merged.singular_values, sv, rtol=1e-12)
    assert principal_angles(merged.basis, basis).max() < 1e-8
    assert_orthonormal(merged.basis)
    beyond = merge_subspaces(a, b, rank=7)
    assert beyond.singular_values[6] < 1e-12
    assert_orthonormal(beyond.basis)


def test_forget_factor_scales_the_singular_values_of_the_older_subspace() -> None:
    older = Subspace(np.eye(4)[:, [0]], np.array([3.0]), 9)
    newer = Subspace(np.eye(4)[:, [1]], np.array([2.0]), 4)

    merged = merge_subspaces(older, newer, rank=2, forget=0.5)

    np.testing.assert_allclose(merged.singular_values, [2.0, 1.5])
    np.testing.assert_allclose(merged.basis, np.eye(4)[:, [1, 0]], atol=1e-15)
    assert merged.n_samples == 13
    rng = np.random.default_rng(8)
    a = offline_subspace(rng.normal(size=(10, 7)), 3)
    b = offline_subspace(rng.normal(size=(10, 7)), 3)
    basis, sv = svd_of_concatenated_factors(a, b, 4, forget=0.3)
    general = merge_subspaces(a, b, rank=4, forget=0.3)
    np.testing.assert_allclose(general.singular_values, sv, rtol=1e-12)
    assert principal_angles(general.basis, basis).max() < 1e-8


def test_merge_gives_deterministic_signs() -> None:
    rng = np.random.default_rng(9)
    a = offline_subspace(rng.normal(size=(10, 7)), 3)
    b = offline_subspace(rng.normal(size=(10, 7)), 3)

    merged = merge_subspaces(a, b)

    np.testing.assert_array_equal(merged.basis, flip_signs(merged.basis))
    rows = np.argmax(np.abs(merged.basis), axis=0)
    assert (merged.basis[rows, np.arange(merged.rank)] > 0).all()


def test_merge_rejects_subspaces_with_different_n_features_naming_both() -> None:
    with pytest.raises(ValueError, match="a has 48, b has 46"):
        merge_subspaces(Subspace.empty(48), Subspace.empty(46))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"rank": -1}, ValueError, "rank must be >= 0, got -1"),
        ({"rank": 2.5}, TypeError, "rank must be an integer, got 2.5"),
        ({"rank": True}, TypeError, "rank must be an integer"),
        ({"forget": 0.0}, ValueError, r"forget must be in \(0, 1\], got 0.0"),
        ({"forget": 1.5}, ValueError, r"forget must be in \(0, 1\], got 1.5"),
        ({"forget": "x"}, TypeError, "forget must be a number"),
    ],
)
def test_merge_rejects_bad_rank_and_forget_values(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    a = Subspace(np.eye(3)[:, :1], np.ones(1), 1)
    with pytest.raises(error, match=message):
        merge_subspaces(a, a, **kwargs)  # type: ignore[arg-type]


def test_merge_rejects_non_finite_subspaces_and_other_types() -> None:
    bad = Subspace(np.array([[np.nan], [0.0]]), np.ones(1), 1)
    with pytest.raises(ValueError, match="b has non-finite basis or singular values"):
        merge_subspaces(Subspace.empty(2), bad)
    with pytest.raises(TypeError, match="a must be a Subspace, got ndarray"):
        merge_subspaces(np.eye(2), Subspace.empty(2))  # type: ignore[arg-type]


def test_merge_many_of_one_subspace_returns_it_truncated_to_rank() -> None:
    s = offline_subspace(np.random.default_rng(10).normal(size=(9, 5)), 4)

    assert merge_many([s]) is s
    assert merge_many([s], rank=2).rank == 2


def test_merge_many_truncates_to_rank_and_counts_all_samples() -> None:
    rng = np.random.default_rng(11)
    parts = [offline_subspace(rng.normal(size=(n, 8)), 4) for n in (5, 6, 7, 8, 9)]

    merged = merge_many(parts, rank=3)

    assert merged.rank == 3
    assert merged.n_samples == 35
    assert merge_many(parts).rank == 4


def test_merge_many_rejects_an_empty_sequence_and_mismatched_n_features() -> None:
    with pytest.raises(ValueError, match="at least one subspace"):
        merge_many([])
    with pytest.raises(ValueError, match=r"subspaces\[2\] has n_features 5, expected 6"):
        merge_many([Subspace.empty(6), Subspace.empty(6), Subspace.empty(5)])
    with pytest.raises(TypeError, match=r"subspaces\[1\] must be a Subspace"):
        merge_many([Subspace.empty(6), "x"])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("basis", "sv", "n", "message"),
    [
        (np.ones(3), np.ones(1), 1, r"basis must be 2-D .* got shape \(3,\)"),
        (np.eye(3)[:, :2], np.ones(3), 1, "singular_values has 3 entries but basis has rank 2"),
        (np.ones((2, 3)), np.ones(3), 1, "rank 3 exceeds n_features 2"),
        (np.eye(3)[:, :1], np.ones(1), -1, "n_samples must be >= 0, got -1"),
    ],
)
def test_subspace_rejects_inconsistent_shapes_and_counts(
    basis: np.ndarray, sv: np.ndarray, n: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Subspace(basis, sv, n)


def test_subspace_arrays_are_read_only_and_truncate_keeps_the_leading_directions() -> None:
    s = Subspace(np.eye(4)[:, :3], np.array([3.0, 2.0, 1.0]), 7)

    with pytest.raises(ValueError, match="read-only"):
        s.basis[0, 0] = 5.0
    with pytest.raises(ValueError, match="read-only"):
        s.singular_values[0] = 5.0
    head = s.truncate(2)
    assert (head.rank, head.n_features, head.n_samples) == (2, 4, 7)
    np.testing.assert_array_equal(head.singular_values, [3.0, 2.0])
    assert s.truncate(10).rank == 3
    assert Subspace.empty(4).rank == 0


@pytest.mark.parametrize("method", ["gram_d", "gram_small", "qr_svd", "auto"])
@pytest.mark.parametrize(("d", "t0", "k", "rank"), [(12, 4, 50, 8), (60, 10, 20, 10), (9, 0, 3, 3)])
@pytest.mark.parametrize("preallocated", [False, True])
def test_every_formulation_of_the_update_gives_the_svd_of_the_concatenation(
    method: str, d: int, t0: int, k: int, rank: int, preallocated: bool
) -> None:
    rng = np.random.default_rng(13)
    u = np.linalg.qr(rng.normal(size=(d, t0)))[0]
    s = np.sort(rng.uniform(1.0, 10.0, t0))[::-1]
    cols = rng.normal(size=(d, k))
    buffers = UpdateBuffers(d, rank, k) if preallocated else None
    out = np.empty((d, rank), order="F") if preallocated else None

    basis, sv = svd_update(u, s, cols, rank, 0.8, method=method, buffers=buffers, out_basis=out)

    concat = np.hstack([0.8 * u * s, cols])
    ref_u, ref_s, _ = np.linalg.svd(concat, full_matrices=False)
    np.testing.assert_allclose(sv, ref_s[:rank], rtol=1e-12)
    assert principal_angles(basis, ref_u[:, :rank]).max() < 1e-10
    assert_orthonormal(basis)


def test_merge_of_ill_conditioned_subspaces_is_as_precise_as_the_svd_of_the_concatenation() -> None:
    # Singular values down to 1e-7 s_1: a Gram matrix would lose 14 digits there, so the
    # update falls back to the QR + SVD formulation.
    rng = np.random.default_rng(14)
    sv = np.logspace(0, -7, 6)
    a = Subspace(np.linalg.qr(rng.normal(size=(30, 6)))[0], sv, 10)
    b = Subspace(np.linalg.qr(rng.normal(size=(30, 6)))[0], 0.5 * sv, 10)

    merged = merge_subspaces(a, b, rank=8)

    basis, ref_sv = svd_of_concatenated_factors(a, b, 8)
    np.testing.assert_allclose(merged.singular_values, ref_sv, rtol=1e-8)
    assert principal_angles(merged.basis, basis).max() < 1e-8
    assert_orthonormal(merged.basis)
    cols = b.basis * b.singular_values
    forced = svd_update(a.basis, a.singular_values, cols, 8, method="gram_small")
    precise = svd_update(a.basis, a.singular_values, cols, 8, method="qr_svd")
    np.testing.assert_array_equal(forced[1], precise[1])


def test_merge_at_d_800_rank_100_matches_the_svd_of_the_concatenation() -> None:
    rng = np.random.default_rng(15)
    a = Subspace(np.linalg.qr(rng.normal(size=(800, 100)))[0], np.linspace(50.0, 1.0, 100), 600)
    b = Subspace(np.linalg.qr(rng.normal(size=(800, 100)))[0], np.linspace(40.0, 2.0, 100), 600)

    merged = merge_subspaces(a, b, rank=100)

    basis, sv = svd_of_concatenated_factors(a, b, 100)
    np.testing.assert_allclose(merged.singular_values, sv, rtol=1e-12)
    assert principal_angles(merged.basis, basis).max() < 1e-8
    assert_orthonormal(merged.basis)


def test_merge_many_pairs_neighbours_level_by_level() -> None:
    # The pairing order is shared with MergeTree: ((s0 s1) (s2 s3)) (s4).
    rng = np.random.default_rng(16)
    parts = [offline_subspace(rng.normal(size=(6, 10)), 3) for _ in range(5)]

    merged = merge_many(parts, rank=3)

    left = merge_subspaces(
        merge_subspaces(parts[0], parts[1], 3), merge_subspaces(parts[2], parts[3], 3), 3
    )
    expected = merge_subspaces(left, parts[4], 3)
    np.testing.assert_array_equal(merged.basis, expected.basis)
    np.testing.assert_array_equal(merged.singular_values, expected.singular_values)
