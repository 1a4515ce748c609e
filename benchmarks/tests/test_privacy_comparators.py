"""The privacy comparators compute what their papers describe (mask shape and scale, recovery
without noise), the Motes tree's leaves recover the data without meaningful noise, and the
horizon table's formula is what `PrivateGram` does."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

from benchmarks.privacy import comparators, horizon, leaves
from benchmarks.privacy import motes_tree as mt
from benchmarks.privacy import synth_table as st
from benchmarks.privacy.comparators import dpdispca, mod_sulq, symmetric_gaussian
from benchmarks.synth import synth
from edge_runtime.fpca import error_ratio, merge_many
from edge_runtime.fpca.privacy import mod_sulq_noise_std
from edge_runtime.fpca.private_gram import PrivateGram


@pytest.fixture(scope="module")
def data():
    x = synth(1.0, n_features=20, n_samples=5000, seed=7)
    return x, np.linalg.eigh(x.T @ x / len(x))[1][:, -1]


@pytest.fixture(scope="module")
def motes():
    return mt.load_motes(rows=1600, n_leaves=4)


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
    assert basis.shape == (d, 5)
    assert np.allclose(np.abs(np.sum(basis * vectors[:, ::-1][:, :5], axis=0)), 1.0)
    basis2, top = comparators.mod_sulq_eigenpairs(x, 5, 0.7, 0.05, np.random.default_rng(3))
    assert np.array_equal(basis2, basis) and np.allclose(top, values[::-1][:5])


def test_the_comparators_and_fpca_recover_v1_without_meaningful_noise(data):
    x, v1 = data
    rng = np.random.default_rng(1)
    assert st.q_a(v1, mod_sulq(x, 5, 1e6, 0.05, rng)[:, 0]) > 0.999
    assert st.q_a(v1, dpdispca([x], 5, 1e6, 0.05, rng)[:, 0]) > 0.999
    assert st.q_a(v1, dpdispca(np.array_split(x, 8), 5, 1e6, 0.05, rng)[:, 0]) > 0.999
    for mechanism in ("gaussian", "fpca-eq8"):
        for b in (5000, 1000):
            v = st.fpca_first_direction(x, 5, 1e6, 0.05, block_size=b, mechanism=mechanism, seed=0)
            assert st.q_a(v1, v) > 0.999


def test_dpdispca_site_message_is_scaled_eigenvectors_and_tau_is_the_gaussian_mechanism():
    tau = comparators.dpdispca_noise_std(0.5, 0.05, 200)
    assert tau == pytest.approx(math.sqrt(2 * math.log(1.25 / 0.05)) / (200 * 0.5))
    x = synth(1.0, n_features=10, n_samples=2000, seed=2)
    p = comparators.site_factor(x, 4, 1e6, 0.05, np.random.default_rng(0))
    values, vectors = np.linalg.eigh(x.T @ x / len(x))
    # P P^T is the rank-4 truncation of the (essentially unmasked) second moment
    top = vectors[:, ::-1][:, :4]
    assert np.allclose(p @ p.T, (top * values[::-1][:4]) @ top.T, atol=1e-6)


@pytest.mark.parametrize(
    ("sites", "kwargs", "match"),
    [
        ([], {}, "at least one site"),
        ([np.zeros((3, 4)), np.zeros((3, 5))], {}, "same n_features"),
        ([np.zeros((3, 4))], {"rank": 3, "intermediate_rank": 2}, "intermediate_rank"),
        ([np.eye(4)[:3] * 1.01], {}, "unit ball"),
    ],
)
def test_dpdispca_checks_its_inputs(sites, kwargs, match):
    args = {"rank": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        dpdispca(sites, epsilon=1.0, delta=0.05, rng=np.random.default_rng(0), **args)


def test_mod_sulq_refuses_rows_outside_the_unit_ball():
    with pytest.raises(ValueError, match="unit ball"):
        mod_sulq(np.eye(4)[:3] * 1.01, 2, 1.0, 0.05, np.random.default_rng(0))


def test_q_a_is_sign_blind_in_zero_one_and_random_level_is_its_mean_for_random_directions():
    rng = np.random.default_rng(5)
    u = rng.standard_normal((20_000, 20))
    u /= np.linalg.norm(u, axis=1)[:, None]
    assert np.abs(u[:, 0]).mean() == pytest.approx(st.random_level(20), rel=0.02)
    assert st.random_level(20) == pytest.approx(0.181, abs=5e-4)
    for a, b in zip(u[:200], u[200:400], strict=True):
        assert 0.0 <= st.q_a(a, b) <= 1.0
        assert st.q_a(a, -a) == pytest.approx(1.0)
        assert st.q_a(a, a * (1 + 1e-12)) == 1.0  # rounding above 1 is clipped


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
    assert mt.root_error(motes, method, rank=5, epsilon=1e6, delta=1e-5, seed=0) < 1.05


def test_the_tree_merges_halves_then_the_root_and_a_random_subspace_is_far_off(motes):
    subs = [leaves.plain_leaf(p, 5) for p in motes.parts]
    root = mt.tree_root(subs, 5)
    halves = [merge_many(subs[:2], rank=10), merge_many(subs[2:], rank=10)]
    assert np.allclose(np.abs(root.basis.T @ merge_many(halves, rank=5).basis), np.eye(5))
    rnd = mt.root_error(motes, mt.TreeMethod("r", mt.RANDOM), rank=5, epsilon=1, delta=1e-5, seed=0)
    assert rnd > 5 * error_ratio(motes.x, root.basis)


def test_the_two_leaf_states_share_their_noise_and_agree_on_a_single_block(motes):
    unit, c = motes.unit_parts[0], motes.clip_norm

    def both(block):
        return [f(unit, block, 10, 1.0, 1e-5, c, np.random.default_rng(3))
                for f in (leaves.running_sum_leaf, leaves.merged_blocks_leaf)]  # fmt: skip

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
    assert mt.releases_per_leaf(mt.TreeMethod("g", mt.GAUSSIAN, 31), 964, 48, 1.0, 1e-5) == 32
    assert mt.releases_per_leaf(mt.TreeMethod("g", mt.GAUSSIAN), 964, 48, 1.0, 1e-5) == 1
    assert mt.block_rows(mt.TreeMethod("g", mt.GAUSSIAN, None, 64), 964, 48, 1.0, 1e-5) == 799
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


@pytest.mark.parametrize("module", [comparators, horizon], ids=lambda m: m.__name__)
def test_the_docstring_examples_run(module):
    failed, attempted = doctest.testmod(module)
    assert attempted > 0 and failed == 0
