"""FedPower numerics (`edge_runtime.fedpower`): convergence, OPT, schedule, RDP, server core."""

from __future__ import annotations

import doctest
import importlib
import math

import numpy as np
import pytest

import edge_runtime.fedpower as fedpower
from edge_runtime.fedpower import (
    MECHANISM,
    FedPowerBudget,
    FedPowerServer,
    LocalGram,
    Schedule,
    aggregate,
    fedpower_noise_std,
    local_iterations,
    orthonormalise,
    power_step_sensitivity,
    procrustes_rotation,
    rdp_epsilon,
    run_fedpower,
)
from edge_runtime.fedpower.accounting import gaussian_rdp
from edge_runtime.fpca import offline_subspace, principal_angles
from edge_runtime.fpca.gaussian_mechanism import analytic_gaussian_sigma, gaussian_delta

RANK = 3


def heterogeneous_parts(seed: int, m: int = 6, d: int = 20, n: int = 400) -> list[np.ndarray]:
    """``m`` devices sharing a top-3 subspace ``U``, each with its own basis ``U R_l`` of it.

    Device ``l`` has covariance ``U R_l diag(10, 6, 3) R_l^T U^T`` plus a complement of
    variances in [0.1, 1]: its local eigenvectors are a random rotation ``R_l`` of every
    other device's, so after many local iterations the replies agree in span, not in basis.
    """
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    u, v = q[:, :RANK], q[:, RANK:]
    parts = []
    for _ in range(m):
        rotation, _ = np.linalg.qr(rng.normal(size=(RANK, RANK)))
        top = rng.normal(size=(n, RANK)) * np.sqrt([10.0, 6.0, 3.0])
        rest = rng.normal(size=(n, d - RANK)) * np.sqrt(rng.uniform(0.1, 1.0, d - RANK))
        parts.append(top @ (u @ rotation).T + rest @ v.T)
    return parts


def largest_angle(basis: np.ndarray, parts: list[np.ndarray]) -> float:
    return float(principal_angles(basis, offline_subspace(np.vstack(parts), RANK).basis).max())


def test_public_names_are_exactly_all() -> None:
    assert sorted(fedpower.__all__) == sorted(
        [
            "MECHANISM",
            "FedPowerBudget",
            "FedPowerResult",
            "FedPowerServer",
            "LocalGram",
            "RoundRecord",
            "RoundStart",
            "Schedule",
            "aggregate",
            "fedpower_noise_std",
            "local_iterations",
            "orthonormalise",
            "power_step_sensitivity",
            "procrustes_rotation",
            "rdp_epsilon",
            "run_fedpower",
        ]
    )
    for name in fedpower.__all__:
        assert getattr(fedpower, name) is not None


@pytest.mark.parametrize(
    "module",
    ["accounting", "aggregation", "local_gram", "power", "schedule", "simulation"],
)
def test_docstring_examples_run(module: str) -> None:
    result = doctest.testmod(importlib.import_module(f"edge_runtime.fedpower.{module}"))
    assert result.failed == 0 and result.attempted > 0


# --- Done-when: convergence and the effect of OPT -------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decaying_schedule_with_opt_reaches_the_offline_subspace(seed: int) -> None:
    parts = heterogeneous_parts(seed)
    result = run_fedpower(
        parts, RANK, rounds=40, local_steps=8, decay="exponential", rng=np.random.default_rng(1)
    )
    assert result.local_steps[:5] == (8, 4, 2, 1, 1)
    assert largest_angle(result.basis, parts) <= 1e-6
    assert np.allclose(result.basis.T @ result.basis, np.eye(RANK), atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_opt_beats_plain_averaging_with_many_local_iterations(seed: int) -> None:
    """Theorem 8's effect: misaligned local bases hurt the plain average, not OPT."""
    parts = heterogeneous_parts(seed)
    errors = {
        opt: largest_angle(
            run_fedpower(parts, RANK, 10, 30, opt=opt, rng=np.random.default_rng(1)).basis, parts
        )
        for opt in (True, False)
    }
    assert errors[True] < errors[False] / 5


def test_one_local_step_is_the_centralised_power_method_with_or_without_opt() -> None:
    parts = heterogeneous_parts(4)
    z0 = orthonormalise(np.random.default_rng(2).normal(size=(20, RANK)))
    m = sum(p.T @ p for p in parts) / sum(len(p) for p in parts)
    z = z0
    for _ in range(15):
        z = orthonormalise(m @ z)
    for opt in (True, False):
        res = run_fedpower(parts, RANK, 15, 1, opt=opt, initial_basis=z0)
        assert np.allclose(res.basis @ res.basis.T, z @ z.T, atol=1e-10)


def test_partial_participation_draws_k_of_m_devices_each_round() -> None:
    parts = heterogeneous_parts(5)
    res = run_fedpower(parts, RANK, 12, 2, participation=0.5, rng=np.random.default_rng(3))
    assert all(len(who) == 3 for who in res.participants)
    assert len(set(res.participants)) > 1
    assert largest_angle(res.basis, parts) < 0.2


def test_private_run_reports_its_budget_and_large_budgets_approach_the_exact_answer() -> None:
    parts = heterogeneous_parts(6)
    rows = np.vstack(parts)
    clip = float(np.linalg.norm(rows, axis=1).max())
    res = run_fedpower(parts, RANK, 30, 1, privacy=(1e6, 1e-5), clip_norm=clip)
    assert res.budget is not None
    assert res.budget.mechanism == MECHANISM == "fedpower-gaussian-rdp"
    assert res.budget.neighbours == "replace-one"
    assert res.budget.iterations == 30
    assert res.budget.as_dict()["sigma"] == res.budget.sigma
    assert largest_angle(res.basis, parts) < 1e-2
    noisy = run_fedpower(parts, RANK, 30, 1, privacy=(0.1, 1e-5), clip_norm=clip)
    assert noisy.budget is not None and noisy.budget.sigma > res.budget.sigma


# --- local iterations ---------------------------------------------------------------------


def test_local_iterations_return_the_last_product_before_orthonormalisation() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 6))
    a = x.T @ x / 50
    z = orthonormalise(rng.normal(size=(6, 2)))
    assert np.allclose(local_iterations(a, z, 1), a @ z)
    q = orthonormalise(a @ orthonormalise(a @ z))
    assert np.allclose(local_iterations(a, z, 3), a @ q)


def test_local_iterations_add_noise_of_the_given_std() -> None:
    a = np.zeros((40, 40))
    y = local_iterations(a, np.eye(40)[:, :5], 1, np.random.default_rng(0), noise_std=2.0)
    assert abs(float(y.std()) - 2.0) < 0.15
    with pytest.raises(ValueError, match="rng"):
        local_iterations(a, np.eye(40)[:, :5], 1, None, noise_std=1.0)


# --- schedule -----------------------------------------------------------------------------


def test_schedule_synchronises_every_p_iterations_and_at_t() -> None:
    assert Schedule(3, total=10).sync_points() == (3, 6, 9, 10)
    assert Schedule(1, total=4).sync_points() == (1, 2, 3, 4)
    assert Schedule(5, total=5).sync_points() == (5,)
    assert Schedule(8, total=20, decay="exponential").sync_points() == (
        8,
        12,
        14,
        15,
        16,
        17,
        18,
        19,
        20,
    )
    assert Schedule(4, total=12, decay="linear").sync_points() == (4, 7, 9, 10, 11, 12)
    assert Schedule(3, total=10).n_rounds == 4
    assert Schedule(3).n_rounds is None
    with pytest.raises(ValueError, match="past the last round"):
        Schedule(3, total=10).local_steps(5)
    with pytest.raises(ValueError, match="total is None"):
        Schedule(3).sync_points()


@pytest.mark.parametrize("decay", [None, "exponential", "linear"])
def test_schedule_local_steps_agree_with_sync_points(decay: str | None) -> None:
    for period in (1, 2, 3, 7, 16, 33):
        for total in (1, 5, 17, 64, 200):
            s = Schedule(period, total=total, decay=decay)
            points = s.sync_points()
            steps = [s.local_steps(k) for k in range(1, len(points) + 1)]
            assert np.cumsum(steps).tolist() == list(points)
            assert s.n_rounds == len(points) and points[-1] == total
            unbounded = Schedule(period, decay=decay)
            assert all(
                unbounded.local_steps(k) >= s.local_steps(k) for k in range(1, len(points) + 1)
            )
    assert Schedule(6, decay="exponential").local_steps(10**6) == 1


# --- aggregation --------------------------------------------------------------------------


def test_procrustes_recovers_a_known_rotation() -> None:
    rng = np.random.default_rng(0)
    reference = orthonormalise(rng.normal(size=(12, 4)))
    rotation, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    y = 3.0 * reference @ rotation.T  # scaled and rotated
    d = procrustes_rotation(y, reference)
    assert np.allclose(d, rotation, atol=1e-12)
    assert np.allclose(y @ d, 3.0 * reference, atol=1e-12)


def test_aggregate_with_opt_undoes_rotations_that_break_the_plain_average() -> None:
    rng = np.random.default_rng(1)
    base = orthonormalise(rng.normal(size=(10, 3)))
    swap = np.array([[0.0, 0.0, 1.0], [0.0, -1.0, 0.0], [1.0, 0.0, 0.0]])  # b0 <-> b2, -b1
    rotation, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    bases = [base, 2.0 * base @ swap, base @ rotation]
    z = aggregate(bases, [5, 5, 1])
    assert principal_angles(z, base).max() < 1e-12
    # Without OPT the first two cancel in b1 and merge b0 with b2: a direction is lost.
    plain = aggregate(bases[:2], [2, 1], opt=False)
    assert principal_angles(plain, base).max() > 0.1
    # Deterministic signs: the largest-|.| entry of each column is positive.
    rows = np.argmax(np.abs(z), axis=0)
    assert (z[rows, np.arange(3)] > 0).all()


# --- differential privacy -----------------------------------------------------------------


def test_rdp_epsilon_has_the_known_closed_form_value() -> None:
    # One Gaussian, sigma = Delta = 1, delta = 1e-5: eps = 0.5 + 2 sqrt(0.5 ln 1e5).
    assert rdp_epsilon(1.0, 1, 1.0, 1e-5) == pytest.approx(0.5 + 2 * math.sqrt(0.5 * math.log(1e5)))
    # ... which is the minimum over alpha of Mironov's Prop. 3 bound.
    alphas = np.linspace(1.001, 50, 200_000)
    grid = min(gaussian_rdp(a, 1.0) + math.log(1e5) / (a - 1) for a in alphas[::100])
    assert rdp_epsilon(1.0, 1, 1.0, 1e-5) <= grid + 1e-9


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 4.0])
def test_rdp_conversion_is_looser_than_the_exact_gaussian(epsilon: float) -> None:
    exact_sigma = analytic_gaussian_sigma(epsilon, 1e-5)
    for conversion in ("mironov", "cks"):
        assert rdp_epsilon(exact_sigma, 1, 1.0, 1e-5, conversion) >= epsilon
        sigma = fedpower_noise_std(epsilon, 1e-5, 1, 1.0, conversion)
        assert sigma >= exact_sigma
        assert gaussian_delta(sigma, epsilon) <= 1e-5  # what it claims holds exactly


@pytest.mark.parametrize("conversion", ["mironov", "cks"])
def test_noise_calibration_round_trips_and_accounting_is_monotone(conversion: str) -> None:
    for eps, delta, t in [(0.5, 1e-6, 1), (1.0, 1e-5, 30), (8.0, 1e-3, 500)]:
        sigma = fedpower_noise_std(eps, delta, t, math.sqrt(2), conversion)
        assert rdp_epsilon(sigma, t, math.sqrt(2), delta, conversion) == pytest.approx(
            eps, rel=1e-9
        )
    sigmas = [0.5, 1.0, 2.0, 4.0]
    assert np.all(np.diff([rdp_epsilon(s, 10, 1.0, 1e-5, conversion) for s in sigmas]) < 0)
    assert np.all(np.diff([rdp_epsilon(2.0, t, 1.0, 1e-5, conversion) for t in (1, 2, 8, 64)]) > 0)
    assert np.all(
        np.diff([rdp_epsilon(2.0, 5, 1.0, d, conversion) for d in (1e-8, 1e-5, 1e-2)]) < 0
    )
    assert np.all(
        np.diff([fedpower_noise_std(1.0, 1e-5, t, 1.0, conversion) for t in (1, 4, 16)]) > 0
    )


def test_improved_conversion_is_never_looser_and_sensitivity_depends_on_rank() -> None:
    for sigma in (0.3, 1.0, 5.0, 40.0):
        assert rdp_epsilon(sigma, 7, 1.0, 1e-5, "cks") <= rdp_epsilon(sigma, 7, 1.0, 1e-5)
    assert power_step_sensitivity(1) == 1.0
    assert power_step_sensitivity(2) == power_step_sensitivity(10) == math.sqrt(2)
    budget = FedPowerBudget.calibrate(1.0, 1e-5, 2.0, 40, 5)
    assert budget.sigma == fedpower_noise_std(1.0, 1e-5, 40, math.sqrt(2))


def test_power_step_sensitivity_bound_holds_for_replaced_readings() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        x, x2 = rng.normal(size=(2, 6))
        x /= max(1.0, np.linalg.norm(x))
        x2 /= max(1.0, np.linalg.norm(x2))
        q = orthonormalise(rng.normal(size=(6, 3)))
        change = (np.outer(x, x) - np.outer(x2, x2)) @ q
        assert np.linalg.norm(change) <= math.sqrt(2) + 1e-12
        assert np.linalg.norm(change[:, :1]) <= 1.0 + 1e-12


# --- server core --------------------------------------------------------------------------


def make_server(**kwargs: object) -> FedPowerServer:
    z0 = orthonormalise(np.random.default_rng(0).normal(size=(8, 2)))
    defaults: dict[str, object] = {"quorum": 2, "round_timeout": 5.0}
    defaults.update(kwargs)
    return FedPowerServer(["a", "b", "c"], z0, Schedule(2, total=10), **defaults)  # type: ignore[arg-type]


def reply(server: FedPowerServer, seed: int) -> np.ndarray:
    return server.basis + 0.01 * np.random.default_rng(seed).normal(size=server.basis.shape)


def test_first_k_of_m_replies_close_a_round_and_late_replies_are_dropped() -> None:
    server = make_server()
    start = server.start_round(0.0)
    assert (start.round, start.local_steps, start.deadline) == (1, 2, 5.0)
    assert start.participants == {"a", "b", "c"}
    assert server.offer("b", 1, reply(server, 1), 10)
    assert not server.close_due(1.0)
    assert not server.offer("b", 1, reply(server, 2), 10)  # duplicate
    assert server.duplicate_replies == 1
    assert server.offer("a", 1, reply(server, 3), 30)
    assert server.close_due(1.0)
    server.close_round(1.0)
    assert server.history[-1].replied == ("a", "b") and not server.history[-1].timed_out
    assert not server.offer("c", 1, reply(server, 4), 10)  # the straggler, too late
    assert server.late_replies == 1
    server.start_round(2.0)
    assert not server.offer("c", 1, reply(server, 4), 10)  # an old round while 2 is open
    assert server.late_replies == 2


def test_a_timeout_closes_the_round_without_a_dead_leaf() -> None:
    server = make_server(quorum=3)
    before = server.basis.copy()
    server.start_round(10.0)
    assert server.offer("a", 1, reply(server, 1), 10)
    assert server.offer("b", 1, reply(server, 2), 10)
    assert not server.close_due(14.9)
    assert server.close_due(15.0)  # "c" is dead
    new = server.close_round()
    assert server.timeouts == 1 and server.history[-1].timed_out
    assert server.history[-1].closed == 15.0
    assert not np.allclose(new, before)
    server.start_round(15.0)  # the next round asks "c" again: a restarted leaf rejoins
    assert "c" in server._open.participants  # type: ignore[union-attr]


def test_a_round_without_replies_keeps_the_basis_and_the_schedule_ends() -> None:
    server = make_server()
    before = server.basis.copy()
    for k in range(5):
        server.start_round(float(k))
        assert server.close_due(k + 5.0)
        assert np.array_equal(server.close_round(), before)
    assert server.done and server.timeouts == 5
    assert [r.local_steps for r in server.history] == [2, 2, 2, 2, 2]
    with pytest.raises(ValueError, match="done"):
        server.start_round(9.0)


def test_sampled_rounds_ask_k_leaves_and_count_unasked_replies() -> None:
    server = make_server(sample=True, rng=np.random.default_rng(0), quorum=1)
    start = server.start_round(0.0)
    (asked,) = start.participants
    other = next(n for n in "abc" if n != asked)
    assert not server.offer(other, 1, reply(server, 1), 10)
    assert server.unasked_replies == 1
    assert server.offer(asked, 1, reply(server, 2), 10)
    assert server.close_due(0.0)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: s.offer("zz", 1, s.basis, 1), "unknown leaf 'zz'"),
        (lambda s: s.offer("a", 2, s.basis, 1), "round 2 has not started"),
        (lambda s: s.offer("a", 1, np.ones((8, 3)), 1), "basis must have 2 columns"),
        (lambda s: s.offer("a", 1, np.full((8, 2), np.nan), 1), "basis contains NaN"),
        (lambda s: s.offer("a", 1, s.basis, -1), "n_samples must be >= 0"),
        (lambda s: s.start_round(1.0), "still open"),
    ],
)
def test_server_rejects_bad_input_with_one_line(call, match: str) -> None:  # type: ignore[no-untyped-def]
    server = make_server()
    server.start_round(0.0)
    with pytest.raises(ValueError, match=match) as info:
        call(server)
    assert "\n" not in str(info.value)


# --- LocalGram ----------------------------------------------------------------------------


def test_local_gram_state_round_trips_and_matches_the_batch_moment() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(90, 5))
    g = LocalGram(5)
    for chunk in np.array_split(x, 7):
        g.add(chunk)
    g.add(np.zeros((0, 5)))
    assert g.n_samples == 90
    assert np.allclose(g.matrix, x.T @ x / 90)
    restored = LocalGram.from_state(g.get_state())
    assert restored.n_samples == 90 and np.array_equal(restored.gram, g.gram)
    assert restored.get_state()["clip_norm"] is None
    assert g.gram.nbytes == 8 * 5 * 5
    clipped = LocalGram(5, clip_norm=0.5)
    clipped.add(x)
    assert np.linalg.eigvalsh(clipped.gram).sum() <= 90 + 1e-9  # trace = sum ||x||^2 <= n
    assert LocalGram.from_state(clipped.get_state()).clip_norm == 0.5
    assert np.array_equal(LocalGram(3).matrix, np.zeros((3, 3)))


# --- bad inputs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: LocalGram(0), "n_features must be >= 1"),
        (lambda: LocalGram(3, clip_norm=-1.0), "clip_norm must be a finite number > 0"),
        (lambda: LocalGram(3).add(np.ones((2, 4))), r"rows must have shape \(n, 3\)"),
        (lambda: LocalGram(3).add(np.array([[1.0, np.inf, 0.0]])), "row 0"),
        (lambda: LocalGram.from_state({"gram": np.eye(2), "n_samples": -1}), "n_samples"),
        (lambda: LocalGram.from_state({"gram": np.ones((2, 3)), "n_samples": 1}), "gram"),
        (lambda: local_iterations(np.eye(3), np.ones((4, 1)), 1), "Z must have 3 rows"),
        (lambda: local_iterations(np.ones((3, 2)), np.ones((3, 1)), 1), "A must be a square"),
        (lambda: local_iterations(np.eye(3), np.ones((3, 1)), 0), "steps must be >= 1"),
        (lambda: local_iterations(np.eye(3), np.ones((3, 4)), 1), "1 <= rank <= n_features"),
        (lambda: Schedule(0), "period must be >= 1"),
        (lambda: Schedule(2, decay="cosine"), "decay must be one of"),
        (lambda: Schedule(2, total=0), "total must be >= 1"),
        (lambda: aggregate([], []), "at least one basis"),
        (lambda: aggregate([np.eye(3)[:, :2]], [1.0, 2.0]), "one entry per basis"),
        (lambda: aggregate([np.eye(3)[:, :2]], [-1.0]), "finite and >= 0"),
        (lambda: aggregate([np.eye(3)[:, :2]], [0.0]), "not all be 0"),
        (lambda: aggregate([np.eye(3)[:, :2], np.eye(4)[:, :2]], [1, 1]), r"bases\[1\]"),
        (lambda: rdp_epsilon(0.0, 1, 1.0, 1e-5), "sigma must be a finite number > 0"),
        (lambda: rdp_epsilon(1.0, 0, 1.0, 1e-5), "iterations must be >= 1"),
        (lambda: rdp_epsilon(1.0, 1, 1.0, 1.0), "delta must be a number in"),
        (lambda: rdp_epsilon(1.0, 1, 1.0, 1e-5, "exact"), "conversion must be one of"),
        (lambda: fedpower_noise_std(-1.0, 1e-5, 1, 1.0), "epsilon must be"),
        (lambda: fedpower_noise_std(1.0, 1e-5, 1, math.inf), "sensitivity must be"),
        (lambda: gaussian_rdp(1.0, 1.0), "alpha must be > 1"),
        (lambda: run_fedpower([], 1, 1), "at least one device"),
        (lambda: run_fedpower([np.ones((4, 3))], 4, 1), "rank must be <= n_features 3"),
        (lambda: run_fedpower([np.ones((4, 3))], 1, 1, participation=0.0), "participation"),
        (lambda: run_fedpower([np.ones((4, 3))], 1, 1, privacy=(1.0, 1e-5)), "clip_norm"),
        (lambda: FedPowerServer([], np.eye(3)[:, :1], Schedule(1)), "leaves must be"),
        (lambda: FedPowerServer(["a", "a"], np.eye(3)[:, :1], Schedule(1)), "distinct"),
        (lambda: FedPowerServer(["a"], np.eye(3)[:, :1], Schedule(1), quorum=2), "quorum"),
        (
            lambda: FedPowerServer(["a"], np.eye(3)[:, :1], Schedule(1), round_timeout=0),
            "round_timeout",
        ),
        (lambda: FedPowerServer(["a"], np.eye(3)[:, :1], Schedule(1), sample=True), "rng"),
    ],
)
def test_bad_inputs_raise_one_line_value_errors(call, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert "\n" not in str(info.value)
