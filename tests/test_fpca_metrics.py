"""Tests of the accuracy metrics, the offline baseline and the public names of edge_runtime.fpca."""

from __future__ import annotations

import doctest
from types import ModuleType

import numpy as np
import pytest

import edge_runtime.fpca
from edge_runtime.fpca import (
    error_ratio,
    merge,
    metrics,
    offline_subspace,
    principal_angles,
    projection_error,
    streaming,
)


def random_basis(rng: np.random.Generator, d: int, r: int) -> np.ndarray:
    return np.linalg.qr(rng.normal(size=(d, r)))[0]


def test_public_names_are_exactly_the_contract_list() -> None:
    assert sorted(edge_runtime.fpca.__all__) == sorted(
        [
            "Subspace",
            "FPCAEdge",
            "MergeTree",
            "merge_subspaces",
            "merge_many",
            "offline_subspace",
            "projection_error",
            "error_ratio",
            "principal_angles",
            "AnomalyScorer",
            "q_limit",
            "t2_limit",
            "total_energy",
            "FaultDetector",
            "FaultVerdict",
        ]
    )
    for name in edge_runtime.fpca.__all__:
        assert hasattr(edge_runtime.fpca, name)


@pytest.mark.parametrize("module", [merge, metrics, streaming])
def test_docstring_examples_run_and_give_the_documented_output(module: ModuleType) -> None:
    result = doctest.testmod(module, verbose=False)

    assert result.attempted > 0
    assert result.failed == 0


def test_projection_error_is_the_mean_squared_residual_per_sample() -> None:
    rng = np.random.default_rng(30)
    x = rng.normal(size=(40, 9))
    u = random_basis(rng, 9, 3)

    expected = sum(np.sum((row - u @ (u.T @ row)) ** 2) for row in x) / 40

    assert projection_error(x, u) == pytest.approx(expected, rel=1e-12)
    assert projection_error(np.array([[3.0, 4.0]]), np.array([[1.0], [0.0]])) == 16.0
    assert projection_error(x, np.zeros((9, 0))) == pytest.approx(np.sum(x**2) / 40)


def test_error_ratio_is_one_for_the_offline_basis_and_larger_for_a_random_one() -> None:
    rng = np.random.default_rng(31)
    x = rng.normal(size=(200, 10)) * np.linspace(5.0, 0.5, 10)

    best = offline_subspace(x, 3).basis

    assert error_ratio(x, best) == pytest.approx(1.0, abs=1e-12)
    assert error_ratio(x, random_basis(rng, 10, 3)) > 1.5
    # Any other basis of the same rank is worse (the offline one is optimal).
    rotated = np.linalg.qr(best + 0.05 * rng.normal(size=best.shape))[0]
    assert error_ratio(x, rotated) > 1.0 + 1e-6


def test_error_ratio_of_exactly_low_rank_data_is_one_or_infinite() -> None:
    rng = np.random.default_rng(32)
    x = rng.normal(size=(50, 2)) @ rng.normal(size=(2, 8))

    assert error_ratio(x, offline_subspace(x, 2).basis) == 1.0
    assert error_ratio(x, offline_subspace(x, 3).basis) == 1.0
    assert error_ratio(x, random_basis(rng, 8, 2)) == float("inf")


def test_principal_angles_are_zero_for_the_same_span_and_right_for_orthogonal_ones() -> None:
    rng = np.random.default_rng(33)
    u = random_basis(rng, 7, 3)
    rotation = random_basis(rng, 3, 3)

    same = principal_angles(u, u @ rotation)

    assert same.shape == (3,)
    assert same.max() < 1e-12
    e = np.eye(4)
    np.testing.assert_allclose(principal_angles(e[:, :2], e[:, [0, 2]]), [np.pi / 2, 0.0])
    assert principal_angles(e[:, :2], e[:, :0]).shape == (0,)


def test_offline_subspace_is_the_truncated_svd_with_deterministic_signs() -> None:
    rng = np.random.default_rng(34)
    x = rng.normal(size=(30, 6))

    sub = offline_subspace(x, 4)

    _, s, vt = np.linalg.svd(x)
    assert (sub.rank, sub.n_features, sub.n_samples) == (4, 6, 30)
    np.testing.assert_allclose(sub.singular_values, s[:4], rtol=1e-12)
    np.testing.assert_allclose(np.abs(sub.basis), np.abs(vt[:4].T), atol=1e-12)
    rows = np.argmax(np.abs(sub.basis), axis=0)
    assert (sub.basis[rows, np.arange(4)] > 0).all()
    assert offline_subspace(x[:3], 5).rank == 3
    assert offline_subspace(x, 0).rank == 0


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: projection_error(np.ones(3), np.eye(3)), ValueError, "X must be 2-D"),
        (lambda: projection_error(np.ones((0, 3)), np.eye(3)), ValueError, "at least one sample"),
        (
            lambda: projection_error(np.ones((2, 3)), np.eye(4)[:, :2]),
            ValueError,
            r"basis must have shape \(3, rank\), got \(4, 2\)",
        ),
        (
            lambda: error_ratio(np.array([[1.0, np.nan]]), np.eye(2)),
            ValueError,
            "X contains NaN or infinity",
        ),
        (lambda: offline_subspace(np.ones((2, 3)), -1), ValueError, "rank must be >= 0, got -1"),
        (lambda: offline_subspace(np.ones((2, 3)), 1.5), TypeError, "rank must be an integer"),
        (lambda: offline_subspace([["a"]], 1), TypeError, "X must be a numeric array"),
        (
            lambda: principal_angles(np.eye(3), np.eye(4)),
            ValueError,
            r"b_basis must have shape \(3, rank\)",
        ),
    ],
)
def test_metrics_reject_bad_input_with_a_message_naming_it(
    call: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        call()  # type: ignore[operator]


def test_a_float32_basis_of_full_rank_data_scores_one_and_a_wrong_basis_inf() -> None:
    """Rank-3 data at r = 3: the offline error is zero; a basis rounded to float32 (the wire's
    dtype) still spans the data to rounding and scores 1.0, a basis missing a direction inf."""
    x = np.c_[np.random.default_rng(0).normal(size=(400, 3)), np.zeros(400)]
    exact = np.linalg.svd(x, full_matrices=False)[2][:3].T
    assert error_ratio(x, exact.astype(np.float32).astype(np.float64)) == 1.0
    assert error_ratio(x, np.eye(4)[:, [0, 1, 3]]) == float("inf")
