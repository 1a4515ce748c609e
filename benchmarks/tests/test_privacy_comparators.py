"""The privacy comparators (MOD-SuLQ, DPdisPCA) and the pieces of benchmark (f).

The comparators live in ``benchmarks/privacy`` (benchmarks, not runtime): these tests
check that each computes what its paper describes (mask shape and scale, recovery
without noise), that the leaves of the Motes tree recover the data without meaningful
noise, and that the horizon table's formula is what `PrivateGram` does.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.privacy import horizon, leaves
from benchmarks.privacy import motes_tree as mt
from benchmarks.privacy import synth_table as st
from benchmarks.privacy.comparators import (
    dpdispca,
    dpdispca_noise_std,
    mod_sulq,
    mod_sulq_eigenpairs,
    site_factor,
    symmetric_gaussian,
)
from benchmarks.synth import synth
from edge_runtime.fpca import error_ratio, merge_many
from edge_runtime.fpca.privacy import mod_sulq_noise_std
from edge_runtime.fpca.private_gram import PrivateGram


@pytest.fixture(scope="module")
def data():
    x = synth(1.0, n_features=20, n_samples=5000, seed=7)
    _, vectors = np.linalg.eigh(x.T @ x / len(x))
    return x, vectors[:, -1]


def test_the_mod_sulq_mask_is_symmetric_with_entry_std_beta():
    beta = mod_sulq_noise_std(1.0, 0.05, 20, 5000)
    rng = np.random.default_rng(0)
    masks = [symmetric_gaussian(20, beta, rng) for _ in range(300)]
    assert all(np.array_equal(m, m.T) for m in masks)
    upper = np.concatenate([m[np.triu_indices(20)] for m in masks])  # 63,000 entries
    assert upper.std() == pytest.approx(beta, rel=0.02)
    assert abs(upper.mean()) < 4 * beta / math.sqrt(upper.size)
    # the entries above the diagonal are independent of each other (only mirrored)
    a, b = (np.array([m[0, j] for m in masks]) for j in (1, 2))
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.2


def test_mod_sulq_returns_the_top_eigenvectors_of_the_masked_second_moment(data):
    x, _ = data
    n, d = x.shape
    basis = mod_sulq(x, 5, 0.7, 0.05, np.random.default_rng(3))
    mask = symmetric_gaussian(d, mod_sulq_noise_std(0.7, 0.05, d, n), np.random.default_rng(3))
    values, vectors = np.linalg.eigh(x.T @ x / n + mask)
    expected = vectors[:, ::-1][:, :5]
    assert basis.shape == (d, 5)
    assert np.allclose(np.abs(np.sum(basis * expected, axis=0)), 1.0)
    assert np.all(np.diff(values[::-1][:5]) <= 0)
    basis2, top = mod_sulq_eigenpairs(x, 5, 0.7, 0.05, np.random.default_rng(3))
    assert np.array_equal(basis2, basis) and np.allclose(top, values[::-1][:5])


def test_mod_sulq_and_dpdispca_recover_v1_without_meaningful_noise(data):
    x, v1 = data
    rng = np.random.default_rng(1)
    assert st.q_a(v1, mod_sulq(x, 5, 1e6, 0.05, rng)[:, 0]) > 0.999
    assert st.q_a(v1, dpdispca([x], 5, 1e6, 0.05, rng)[:, 0]) > 0.999
    assert st.q_a(v1, dpdispca(np.array_split(x, 8), 5, 1e6, 0.05, rng)[:, 0]) > 0.999


def test_fpca_in_the_synth_table_recovers_v1_without_meaningful_noise(data):
    x, v1 = data
    for mechanism in ("gaussian", "fpca-eq8"):
        for b in (5000, 1000):
            direction = st.fpca_first_direction(
                x, 5, 1e6, 0.05, block_size=b, mechanism=mechanism, seed=0
            )
            assert st.q_a(v1, direction) > 0.999


def test_dpdispca_site_message_is_scaled_eigenvectors_and_tau_is_the_gaussian_mechanism():
    assert dpdispca_noise_std(0.5, 0.05, 200) == pytest.approx(
        math.sqrt(2 * math.log(1.25 / 0.05)) / (200 * 0.5)
    )
    x = synth(1.0, n_features=10, n_samples=2000, seed=2)
    p = site_factor(x, 4, 1e6, 0.05, np.random.default_rng(0))
    values, vectors = np.linalg.eigh(x.T @ x / len(x))
    # P P^T is the rank-4 truncation of the (essentially unmasked) second moment
    top = vectors[:, ::-1][:, :4] * values[::-1][:4]
    assert np.allclose(p @ p.T, top @ vectors[:, ::-1][:, :4].T, atol=1e-6)


def test_dpdispca_averages_the_sites_and_checks_its_inputs():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="at least one site"):
        dpdispca([], 2, 1.0, 0.05, rng)
    with pytest.raises(ValueError, match="same n_features"):
        dpdispca([np.zeros((3, 4)), np.zeros((3, 5))], 2, 1.0, 0.05, rng)
    with pytest.raises(ValueError, match="intermediate_rank"):
        dpdispca([np.zeros((3, 4))], 3, 1.0, 0.05, rng, intermediate_rank=2)


@pytest.mark.parametrize("method", ["mod_sulq", "dpdispca"])
def test_the_comparators_refuse_rows_outside_the_unit_ball(method):
    x = np.eye(4)[:3] * 1.01
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="unit ball"):
        if method == "mod_sulq":
            mod_sulq(x, 2, 1.0, 0.05, rng)
        else:
            dpdispca([x], 2, 1.0, 0.05, rng)


def test_random_level_is_the_mean_q_a_of_random_directions():
    rng = np.random.default_rng(5)
    u = rng.standard_normal((20_000, 20))
    u /= np.linalg.norm(u, axis=1)[:, None]
    assert np.abs(u[:, 0]).mean() == pytest.approx(st.random_level(20), rel=0.02)
    assert st.random_level(20) == pytest.approx(0.181, abs=5e-4)


def test_q_a_is_between_zero_and_one():
    rng = np.random.default_rng(4)
    for _ in range(200):
        u, v = rng.standard_normal((2, 20))
        u /= np.linalg.norm(u)
        v /= np.linalg.norm(v)
        assert 0.0 <= st.q_a(u, v) <= 1.0
        assert st.q_a(u, -u) == pytest.approx(1.0)  # sign-blind
        assert st.q_a(u, u * (1 + 1e-12)) == 1.0  # rounding above 1 is clipped


@pytest.fixture(scope="module")
def motes():
    return mt.load_motes(rows=1600, n_leaves=4)


@pytest.mark.parametrize(
    "method",
    [
        mt.TreeMethod("g", mt.GAUSSIAN, mt.ONE_RELEASE),
        mt.TreeMethod("g", mt.GAUSSIAN, 100, 4),
        mt.TreeMethod("eq8", mt.EQ8, 100),
        mt.TreeMethod("ms", mt.MOD_SULQ),
        mt.TreeMethod("b", mt.MERGED_BLOCKS, 100),
        mt.TreeMethod("a", mt.RUNNING_SUM, 100, 4),
        mt.TreeMethod("dp", mt.DPDISPCA),
        mt.TreeMethod("c", mt.CENTRAL),
    ],
    ids=lambda m: f"{m.kind}-{m.block_size}-{m.horizon}",
)
def test_every_tree_method_recovers_the_motes_subspace_without_meaningful_noise(motes, method):
    ratio = mt.root_error(motes, method, rank=5, epsilon=1e6, delta=1e-5, seed=0)
    assert ratio < 1.05


def test_the_tree_merges_halves_then_the_root_and_a_random_subspace_is_far_off(motes):
    subs = [leaves.plain_leaf(p, 5) for p in motes.parts]
    root = mt.tree_root(subs, 5)
    halves = [merge_many(subs[:2], rank=10), merge_many(subs[2:], rank=10)]
    assert np.allclose(np.abs(root.basis.T @ merge_many(halves, rank=5).basis), np.eye(5))
    rnd = mt.root_error(motes, mt.TreeMethod("r", mt.RANDOM), rank=5, epsilon=1, delta=1e-5, seed=0)
    assert rnd > 5 * error_ratio(motes.x, root.basis)


def test_the_two_leaf_states_share_their_noise_and_agree_on_a_single_block(motes):
    unit = motes.unit_parts[0]
    c = motes.clip_norm

    def both(block):
        a = leaves.running_sum_leaf(unit, block, 10, 1.0, 1e-5, c, np.random.default_rng(3))
        b = leaves.merged_blocks_leaf(unit, block, 10, 1.0, 1e-5, c, np.random.default_rng(3))
        return a, b

    a, b = both(unit.shape[0])  # one release: the same noisy matrix, truncated alike
    assert np.allclose(np.abs(a.basis.T @ b.basis), np.eye(10), atol=1e-8)
    assert np.allclose(a.singular_values, b.singular_values)
    a, b = both(100)  # several releases: the sum keeps what the truncations drop
    assert not np.allclose(a.singular_values, b.singular_values)
    # the blocks' releases are PrivateGram's, noise matrix by noise matrix
    gram = PrivateGram(unit.shape[1], 1.0, 1e-5, rng=np.random.default_rng(5))
    total = np.zeros((unit.shape[1],) * 2)
    for rows, released in leaves.block_releases(unit, 100, 1.0, 1e-5, np.random.default_rng(5)):
        gram.release(unit[gram.releases * 100 : gram.releases * 100 + rows])
        total += released
        assert np.allclose(total, gram.released, rtol=0, atol=1e-9)


def test_releases_per_leaf_counts_the_flushed_block_and_resolves_defaults():
    g = mt.TreeMethod("g", mt.GAUSSIAN, 31)
    assert mt.releases_per_leaf(g, 964, 48, 1.0, 1e-5) == 32  # 31 blocks + 3 rows
    assert mt.releases_per_leaf(mt.TreeMethod("g", mt.GAUSSIAN), 964, 48, 1.0, 1e-5) == 1
    default = mt.TreeMethod("g", mt.GAUSSIAN, None, 64)
    assert mt.block_rows(default, 964, 48, 1.0, 1e-5) == 799
    assert mt.releases_per_leaf(mt.TreeMethod("r", mt.RANDOM), 964, 48, 1.0, 1e-5) == 1


@pytest.mark.parametrize(("h", "k"), [(1, 5), (4, 4), (4, 9), (3, 7)])
def test_the_horizon_formula_is_what_private_gram_releases(h, k):
    measured = horizon.empirical_noise_factor(h, k, n_features=8, repeats=250)
    assert measured == pytest.approx(horizon.noise_factor(h, k), rel=0.08)


def test_the_horizon_table_is_sqrt_k_at_h_1_and_the_square_multiplier_at_segment_ends():
    assert horizon.noise_table((1,), (1, 4, 16)) == [pytest.approx([1.0, 2.0, 4.0])]
    m64 = horizon.noise_factor(64, 1)
    assert horizon.noise_factor(64, 64) == pytest.approx(m64**2)
    assert horizon.noise_factor(64, 128) == pytest.approx(m64**2 * math.sqrt(2))
    assert horizon.best_horizon((1, 4, 16, 64), 4) == 4


@pytest.mark.parametrize("module", ["comparators", "horizon"])
def test_the_docstring_examples_run(module):
    import doctest
    import importlib

    mod = importlib.import_module(f"benchmarks.privacy.{module}")
    failed, attempted = doctest.testmod(mod)
    assert attempted > 0 and failed == 0
