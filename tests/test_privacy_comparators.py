"""The privacy comparators (MOD-SuLQ, DPdisPCA, OpenDP reference) and the utility harness.

The comparators live in ``benchmarks/privacy`` (benchmarks, not runtime): these tests
check that each computes what its paper describes (mask shape and scale, recovery
without noise) and that the utility benchmark runs on a tiny configuration and
produces the table it reports. OpenDP is optional: its tests skip when it is not
installed, and the harness must skip it gracefully.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pytest

from benchmarks.privacy import opendp_ref
from benchmarks.privacy import utility as pu
from benchmarks.privacy.dpdispca import dpdispca, dpdispca_noise_std, site_factor
from benchmarks.privacy.mod_sulq import mod_sulq, symmetric_gaussian
from benchmarks.synth import synth
from edge_runtime.fpca.privacy import mod_sulq_noise_std

TINY = pu.TINY


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


def test_mod_sulq_and_dpdispca_recover_v1_without_meaningful_noise(data):
    x, v1 = data
    rng = np.random.default_rng(1)
    assert pu.q_a(v1, mod_sulq(x, 5, 1e6, 0.05, rng)[:, 0]) > 0.999
    assert pu.q_a(v1, dpdispca([x], 5, 1e6, 0.05, rng)[:, 0]) > 0.999
    assert pu.q_a(v1, dpdispca(np.array_split(x, 8), 5, 1e6, 0.05, rng)[:, 0]) > 0.999


def test_fpca_dp_in_the_harness_recovers_v1_without_meaningful_noise(data):
    x, v1 = data
    for b in (5000, 1000):
        basis = pu.fpca_dp_basis(x, 5, 1e6, 0.05, block_size=b, clip_norm=1.0, seed=0)
        assert pu.q_a(v1, basis[:, 0]) > 0.999


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
    assert np.abs(u[:, 0]).mean() == pytest.approx(pu.random_level(20), rel=0.02)
    assert pu.random_level(20) == pytest.approx(0.181, abs=5e-4)


def test_q_a_is_between_zero_and_one():
    rng = np.random.default_rng(4)
    for _ in range(200):
        u, v = rng.standard_normal((2, 20))
        u /= np.linalg.norm(u)
        v /= np.linalg.norm(v)
        assert 0.0 <= pu.q_a(u, v) <= 1.0
        assert pu.q_a(u, -u) == pytest.approx(1.0)  # sign-blind
        assert pu.q_a(u, u * (1 + 1e-12)) == 1.0  # rounding above 1 is clipped


def test_the_utility_harness_runs_on_a_tiny_configuration():
    lines: list[str] = []
    t0 = time.perf_counter()
    res = pu.run_utility(TINY, log=lines.append)
    assert time.perf_counter() - t0 < 30  # a few seconds normally
    assert list(res.panels) == ["Synth(1)", pu.FEDERATED, pu.MOTES]
    assert [c.method for c in res.panels["Synth(1)"]] == [
        pu.FPCA_ONE,
        pu.FPCA_STREAM,
        pu.MODSULQ,
        pu.DPDIS,
    ]
    assert [c.method for c in res.panels[pu.FEDERATED]] == [
        pu.FED_FPCA,
        pu.FED_DPDIS,
        pu.FED_MODSULQ,
    ]
    assert [c.method for c in res.panels[pu.MOTES]][-1] == pu.CLIPPED
    for curves in res.panels.values():
        for c in curves:
            assert c.epsilons == [0.5, 4.0]
            assert all(0.0 <= m <= 1.0 for m in c.mean)
            assert all(lo <= hi for lo, hi in zip(c.p25, c.p75, strict=True))
    assert res.curve("Synth(1)", pu.MODSULQ).trials == [3, 3]
    assert res.motes_clipped_rows == pytest.approx(0.05 * 600, abs=1)
    assert 0.0 <= res.motes_clip_q <= 1.0
    assert res.stream_block_size == 80  # ceil(400 / 5)
    assert set(res.noise) >= {"omega, n = 400", "beta, n = 400", "tau, n = 400"}
    assert res.opendp_status.startswith("not run")
    assert [c.item.split(" ")[0] for c in pu.checks(res)] == ["q_A", "FPCA-DP"]


def test_the_harness_skips_opendp_gracefully_when_it_is_not_installed(monkeypatch):
    monkeypatch.setattr(opendp_ref, "available", lambda: False)
    sizes = dataclasses.replace(TINY, opendp=True, federated_alpha=None, motes=False)
    res = pu.run_utility(sizes, log=lambda _: None)
    assert res.opendp_status.startswith("not installed")
    assert res.curve("Synth(1)", pu.OPENDP) is None


@pytest.mark.skipif(not opendp_ref.available(), reason="optional extra privacy-ref not installed")
def test_opendp_runs_in_a_child_and_is_killed_at_the_timeout():
    x = synth(1.0, n_features=6, n_samples=300, seed=0)
    run = opendp_ref.run_pca(x[None], 0.3, 2, timeout=60)
    assert not run.timed_out and not run.error
    assert len(run.components) == 1 and run.components[0].shape == (6,)
    t0 = time.perf_counter()
    slow = opendp_ref.run_pca(synth(1.0, 20, 5000, seed=0)[None], 8.0, 5, timeout=2)
    assert slow.timed_out and slow.components == []
    assert time.perf_counter() - t0 < 15


@pytest.mark.parametrize("module", ["mod_sulq", "dpdispca"])
def test_the_docstring_examples_run(module):
    import doctest
    import importlib

    mod = importlib.import_module(f"benchmarks.privacy.{module}")
    failed, attempted = doctest.testmod(mod)
    assert attempted > 0 and failed == 0
