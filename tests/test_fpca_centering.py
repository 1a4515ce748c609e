"""Tests of centred summaries: FPCAEdge(center=True), Subspace.mean and centred merges."""

from __future__ import annotations

import numpy as np
import pytest

from edge_runtime.fpca import (
    FPCAEdge,
    Subspace,
    error_ratio,
    merge_many,
    merge_subspaces,
    offline_subspace,
    principal_angles,
)


def offset_data(rng: np.random.Generator, n: int, d: int, scales: list[float]) -> np.ndarray:
    """Samples with a large mean (``10 + 5 * N(0, 1)`` per feature) and a random signal."""
    w = np.linalg.qr(rng.normal(size=(d, len(scales))))[0]
    mean = 10.0 + 5.0 * rng.normal(size=d)
    return mean + (rng.normal(size=(n, len(scales))) * scales) @ w.T + 0.2 * rng.normal(size=(n, d))


def centred_summary(x: np.ndarray, rank: int) -> Subspace:
    """Offline reference: truncated SVD of ``x`` minus its mean, with that mean."""
    mean = x.mean(axis=0)
    exact = offline_subspace(x - mean, rank)
    return Subspace(exact.basis, exact.singular_values, x.shape[0], mean)


def assert_same_summary(got: Subspace, want: Subspace, rtol: float = 1e-10) -> None:
    assert got.n_samples == want.n_samples
    assert got.mean is not None and want.mean is not None
    np.testing.assert_allclose(got.mean, want.mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        got.singular_values, want.singular_values, rtol=0, atol=rtol * want.singular_values[0]
    )
    assert principal_angles(got.basis, want.basis).max() < 1e-8


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    return offset_data(np.random.default_rng(50), 437, 8, [6.0, 4.0, 3.0, 2.0, 1.0])


@pytest.mark.parametrize("block_size", [1, 7, 50, 500])
def test_centred_stream_equals_the_svd_of_the_globally_centred_data_when_nothing_is_truncated(
    data: np.ndarray, block_size: int
) -> None:
    # rank 4 + oversample 4 = all 8 dimensions tracked: no truncation anywhere.
    edge = FPCAEdge(8, 4, block_size, oversample=4, center=True).partial_fit(data)

    tracked = edge.tracked_subspace
    assert_same_summary(tracked, centred_summary(data, 8))
    assert_same_summary(edge.subspace, centred_summary(data, 4))
    assert edge.subspace.centered


def test_centred_stream_mean_is_the_sample_mean_including_pending_rows(data: np.ndarray) -> None:
    edge = FPCAEdge(8, 2, 50, center=True).partial_fit(data[:120])

    np.testing.assert_allclose(edge.subspace.mean, data[:120].mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(edge.mean_, data[:100].mean(axis=0), rtol=1e-13)
    assert edge.n_blocks_ == 2


def test_centred_stream_gives_bitwise_identical_state_for_any_chunking(data: np.ndarray) -> None:
    whole = FPCAEdge(8, 3, 20, center=True, forget=0.95).partial_fit(data)
    chunked = FPCAEdge(8, 3, 20, center=True, forget=0.95)

    for start in range(0, data.shape[0], 13):
        chunked.partial_fit(data[start : start + 13])

    a, b = whole.subspace, chunked.subspace
    np.testing.assert_array_equal(a.basis, b.basis)
    np.testing.assert_array_equal(a.singular_values, b.singular_values)
    np.testing.assert_array_equal(a.mean, b.mean)


def test_centred_stream_on_motes_light_is_within_one_percent_of_the_centred_svd() -> None:
    from edge_runtime.datasets import load_dataset

    x = load_dataset("motes-light")

    edge = FPCAEdge(48, 10, 50, center=True).fit(x)

    np.testing.assert_allclose(edge.subspace.mean, x.mean(axis=0), rtol=1e-10)
    assert error_ratio(x - x.mean(axis=0), edge.subspace.basis) <= 1.01


def test_forgetting_weighs_the_mean_like_the_covariance() -> None:
    # Block j holds 4 copies of the value j: with forget lambda the mean is the
    # average of j with weights lambda**(2 * (blocks after j)), as for the scatter.
    x = np.repeat(np.arange(5.0), 4)[:, None] * np.ones((1, 3))
    forget = 0.5

    edge = FPCAEdge(3, 1, 4, center=True, forget=forget).fit(x)

    weights = forget ** (2.0 * np.arange(4, -1, -1))
    np.testing.assert_allclose(edge.mean_, np.full(3, weights @ np.arange(5.0) / weights.sum()))


def test_centred_merge_of_two_parts_equals_the_centred_svd_of_the_union(data: np.ndarray) -> None:
    part1, part2 = data[:150], data[150:]

    merged = merge_subspaces(centred_summary(part1, 8), centred_summary(part2, 8), rank=8)

    assert_same_summary(merged, centred_summary(data, 8))
    np.testing.assert_allclose(merged.mean, data.mean(axis=0), rtol=1e-13)


def test_centred_merge_of_single_samples_recovers_their_spread() -> None:
    rng = np.random.default_rng(51)
    x = rng.normal(size=(5, 6)) + 3.0
    singles = [Subspace(np.zeros((6, 0)), np.zeros(0), 1, row) for row in x]

    merged = merge_many(singles, rank=4)

    assert_same_summary(merged, centred_summary(x, 4))


def test_federated_centred_summaries_match_the_offline_centred_svd() -> None:
    from edge_runtime.datasets import load_dataset

    x = load_dataset("motes-light")
    leaves = [FPCAEdge(48, 10, 50, center=True).fit(part) for part in np.array_split(x, 8)]

    merged = merge_many([leaf.tracked_subspace for leaf in leaves], rank=20).truncate(10)

    assert merged.n_samples == x.shape[0]
    np.testing.assert_allclose(merged.mean, x.mean(axis=0), rtol=1e-10)
    assert error_ratio(x - x.mean(axis=0), merged.basis) <= 1.01


def test_merging_a_centred_summary_of_no_samples_returns_the_other_one(data: np.ndarray) -> None:
    full = centred_summary(data, 3)
    empty = Subspace(np.zeros((8, 0)), np.zeros(0), 0, np.full(8, 99.0))

    for merged in (merge_subspaces(full, empty), merge_subspaces(empty, full)):
        assert_same_summary(merged, full)
    assert merge_subspaces(empty, empty).mean is not None


def test_merging_centred_with_uncentred_summaries_names_the_one_without_a_mean(
    data: np.ndarray,
) -> None:
    centred = centred_summary(data, 3)
    raw = offline_subspace(data, 3)

    with pytest.raises(ValueError, match="b has no mean"):
        merge_subspaces(centred, raw)
    with pytest.raises(ValueError, match="a has no mean"):
        merge_subspaces(raw, centred)
    with pytest.raises(ValueError, match="has no mean"):
        merge_many([centred, centred, raw])


def test_merge_rejects_a_non_finite_mean() -> None:
    bad = Subspace(np.eye(3)[:, :1], np.ones(1), 2, np.array([0.0, np.inf, 0.0]))
    good = Subspace(np.eye(3)[:, :1], np.ones(1), 2, np.zeros(3))

    with pytest.raises(ValueError, match="a has a non-finite mean"):
        merge_subspaces(bad, good)


def test_subspace_mean_is_validated_read_only_and_kept_by_truncate() -> None:
    s = Subspace(np.eye(4)[:, :2], np.array([2.0, 1.0]), 5, [1.0, 2.0, 3.0, 4.0])

    assert s.mean is not None
    assert s.mean.dtype == np.float64
    with pytest.raises(ValueError, match="read-only"):
        s.mean[0] = 0.0
    np.testing.assert_array_equal(s.truncate(1).mean, [1.0, 2.0, 3.0, 4.0])
    assert "centered=True" in repr(s)
    assert Subspace(np.eye(4)[:, :2], np.ones(2), 5).mean is None
    with pytest.raises(ValueError, match=r"mean must have shape \(4,\) \(n_features\), got \(3,\)"):
        Subspace(np.eye(4)[:, :2], np.ones(2), 5, np.zeros(3))


def naive_centred_stream(
    x: np.ndarray, rank: int, block_size: int, tracked: int, forget: float
) -> Subspace:
    """Reference: explicit SVD of ``[forget U S, (B - m_B)^T, correction]`` per block."""
    d = x.shape[1]
    u, s, mean, weight = np.zeros((d, 0)), np.zeros(0), np.zeros(d), 0.0
    for start in range(0, x.shape[0], block_size):
        block = x[start : start + block_size]
        k = block.shape[0]
        block_mean = block.mean(axis=0)
        old = forget**2 * weight
        cols = [forget * u * s, (block - block_mean).T]
        if old > 0:
            cols.append(np.sqrt(old * k / (old + k)) * (mean - block_mean)[:, None])
        u, s, _ = np.linalg.svd(np.hstack(cols), full_matrices=False)
        u, s = u[:, :tracked], s[:tracked]
        mean = (old * mean + k * block_mean) / (old + k)
        weight = old + k
    return Subspace(u[:, :rank], s[:rank], x.shape[0], mean)


@pytest.mark.parametrize("forget", [1.0, 0.9])
def test_truncating_centred_stream_matches_the_explicit_reference(
    data: np.ndarray, forget: float
) -> None:
    edge = FPCAEdge(8, 2, 25, oversample=1, center=True, forget=forget).fit(data)

    assert_same_summary(edge.subspace, naive_centred_stream(data, 2, 25, 3, forget))
