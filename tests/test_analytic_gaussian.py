"""The analytic Gaussian mechanism, the square-root factorisation and `PrivateGram`'s noise.

`analytic_gaussian_sigma` is checked against an independent implementation of Balle &
Wang (ICML 2018), Algorithm 1 (the ``v*`` / ``u*`` formulation with ``B+`` / ``B-``),
solved by plain bisection in 50-digit arithmetic (`mpmath`), and against their Theorem 8
(the exact privacy profile) at random points. The continual-release noise of
`PrivateGram` is checked statistically against the covariance the factorisation
``M = R R`` predicts (Henzinger, Upadhyay, Upadhyay, SODA 2023; Fichtenberger et al.,
ICML 2023).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mpmath import mp, mpf
from scipy import stats

from edge_runtime.fpca.continual import (
    continual_multiplier,
    prefix_noise,
    sqrt_factorisation_coefficients,
)
from edge_runtime.fpca.gaussian_mechanism import (
    REPLACE_ONE_SENSITIVITY,
    analytic_gaussian_sigma,
    gaussian_delta,
    symmetric_noise,
)
from edge_runtime.fpca.private_gram import PrivateGram, release_noise_std

# 8 x 8 log-spaced grid over the documented range, corners included.
EPSILONS = tuple(float(e) for e in np.geomspace(0.01, 100.0, 8))
DELTAS = tuple(float(d) for d in np.geomspace(1e-12, 0.5, 8))
DIGITS = 50  # working precision of the reference
REL_TOL = 1e-9  # documented accuracy of analytic_gaussian_sigma


# -- the reference: Balle & Wang (2018), Algorithm 1, by bisection in mpmath ---------------


def balle_wang_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Algorithm 1 of Balle & Wang (2018), solved by bisection at `DIGITS` digits.

    ``delta_0 = Phi(0) - e^eps Phi(-sqrt(2 eps))``. If ``delta >= delta_0``: ``v* = sup{v
    >= 0 : B+(v) <= delta}`` with ``B+(v) = Phi(sqrt(eps v)) - e^eps Phi(-sqrt(eps (v +
    2)))`` (increasing) and ``alpha = sqrt(1 + v*/2) - sqrt(v*/2)``; else ``u* = inf{u >= 0
    : B-(u) <= delta}`` with ``B-(u) = Phi(-sqrt(eps u)) - e^eps Phi(-sqrt(eps (u + 2)))``
    (decreasing) and ``alpha = sqrt(1 + u*/2) + sqrt(u*/2)``. ``sigma = alpha Delta /
    sqrt(2 eps)``. The root is bracketed by doubling (<= 200 steps) and bisected to a
    relative width of 1e-35 (<= 400 steps).
    """
    with mp.workdps(DIGITS):
        eps, dlt = mpf(epsilon), mpf(delta)
        phi, sqrt, e_eps = mp.ncdf, mp.sqrt, mp.exp(eps)
        delta_0 = phi(0) - e_eps * phi(-sqrt(2 * eps))
        if dlt >= delta_0:
            sign = 1

            def inside(v: mpf) -> bool:  # v <= v*
                return phi(sqrt(eps * v)) - e_eps * phi(-sqrt(eps * (v + 2))) <= dlt
        else:
            sign = -1

            def inside(v: mpf) -> bool:  # v < u*
                return phi(-sqrt(eps * v)) - e_eps * phi(-sqrt(eps * (v + 2))) > dlt

        low, high = mpf(0), mpf(1)
        for _ in range(200):
            if not inside(high):
                break
            low, high = high, 2 * high
        else:
            raise AssertionError(f"no bracket for ({epsilon}, {delta})")
        for _ in range(400):
            if high - low <= mpf(10) ** -35 * high:
                break
            middle = (low + high) / 2
            if inside(middle):
                low = middle
            else:
                high = middle
        else:
            raise AssertionError(f"bisection did not converge for ({epsilon}, {delta})")
        root = (low + high) / 2
        alpha = sqrt(1 + root / 2) - sign * sqrt(root / 2)
        return float(alpha * mpf(sensitivity) / sqrt(2 * eps))


def theorem_8_delta(s: float, epsilon: float) -> mpf:
    """Balle & Wang (2018), Theorem 8, at `DIGITS` digits: the exact delta of std ``s``."""
    with mp.workdps(DIGITS):
        s, eps = mpf(s), mpf(epsilon)
        return mp.ncdf(1 / (2 * s) - eps * s) - mp.exp(eps) * mp.ncdf(-1 / (2 * s) - eps * s)


def classical_sigma(epsilon: float, delta: float) -> float:
    """Dwork & Roth (2014), Theorem A.1: ``sqrt(2 ln(1.25 / delta)) / epsilon`` (eps < 1)."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


# -- analytic_gaussian_sigma ---------------------------------------------------------------


def test_reference_reproduces_the_papers_example() -> None:
    # The reference itself: Balle & Wang's running example and the module's doctest.
    assert balle_wang_sigma(1.0, 1e-5) == pytest.approx(3.7306316, rel=1e-7)
    assert float(theorem_8_delta(balle_wang_sigma(1.0, 1e-5), 1.0)) == pytest.approx(
        1e-5, rel=1e-12
    )


def test_sigma_matches_balle_wang_algorithm_1_on_an_8_by_8_grid() -> None:
    worst = 0.0
    for eps in EPSILONS:
        for delta in DELTAS:
            reference = balle_wang_sigma(eps, delta)
            got = analytic_gaussian_sigma(eps, delta)
            worst = max(worst, abs(got / reference - 1.0))
            assert got == pytest.approx(reference, rel=REL_TOL, abs=0.0), (eps, delta)
    assert worst < REL_TOL


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    log_eps=st.floats(min_value=-2.0, max_value=2.0),
    log_delta=st.floats(min_value=-12.0, max_value=math.log10(0.5)),
)
def test_sigma_brackets_theorem_8_at_random_points(log_eps: float, log_delta: float) -> None:
    # delta(s) is decreasing, so |sigma / sigma* - 1| <= 1e-9 iff delta lies between the
    # Theorem 8 profile at sigma (1 + 1e-9) and at sigma (1 - 1e-9).
    eps, delta = 10.0**log_eps, 10.0**log_delta
    sigma = analytic_gaussian_sigma(eps, delta)
    assert theorem_8_delta(sigma * (1.0 + REL_TOL), eps) <= delta
    assert theorem_8_delta(sigma * (1.0 - REL_TOL), eps) >= delta
    # The module's own profile agrees with the 50-digit one.
    assert gaussian_delta(sigma, eps) == pytest.approx(delta, rel=1e-6)


def test_sensitivity_scales_sigma_linearly() -> None:
    for eps, delta in ((0.01, 1e-12), (1.0, 1e-5), (100.0, 0.5)):
        unit = analytic_gaussian_sigma(eps, delta)
        for scale in (1e-3, REPLACE_ONE_SENSITIVITY, 7.0, 1e4):
            assert analytic_gaussian_sigma(eps, delta, scale) == pytest.approx(
                scale * unit, rel=1e-14
            )
    assert analytic_gaussian_sigma(1.0, 1e-5, sensitivity=REPLACE_ONE_SENSITIVITY) == (
        pytest.approx(math.sqrt(2.0) * 3.7306316, rel=1e-7)
    )


def test_sigma_is_below_the_classical_calibration_for_epsilon_below_one() -> None:
    # The classical sigma is (eps, delta)-DP for eps < 1 and sigma* is the smallest that
    # is, so sigma* <= classical; the analytic one is strictly smaller on the whole grid.
    for eps in (e for e in EPSILONS if e < 1.0):
        for delta in DELTAS:
            assert analytic_gaussian_sigma(eps, delta) < classical_sigma(eps, delta)
    assert classical_sigma(1.0, 1e-5) == pytest.approx(4.845, abs=1e-3)  # the docstring's


def test_sigma_is_strictly_decreasing_in_epsilon_and_in_delta() -> None:
    table = np.array([[analytic_gaussian_sigma(e, d) for d in DELTAS] for e in EPSILONS])
    assert (np.diff(table, axis=0) < 0.0).all()  # along epsilon
    assert (np.diff(table, axis=1) < 0.0).all()  # along delta
    assert np.isfinite(table).all() and (table > 0.0).all()


BAD_EPSILONS = (0, 0.0, -1.0, -1e-300, math.nan, math.inf, -math.inf, "abc", None, [1.0])
BAD_DELTAS = (0, 0.0, 1, 1.0, 1.5, -1e-5, math.nan, math.inf, "abc", None, (0.1,))
BAD_SENSITIVITIES = (0.0, -2.0, math.nan, math.inf, "x", None)


@pytest.mark.parametrize(
    ("args", "name", "value"),
    [((v, 1e-5), "epsilon", v) for v in BAD_EPSILONS]
    + [((1.0, v), "delta", v) for v in BAD_DELTAS]
    + [((1.0, 1e-5, v), "sensitivity", v) for v in BAD_SENSITIVITIES],
    ids=repr,
)
def test_bad_arguments_raise_one_line_value_errors_naming_the_value(
    args: tuple[object, ...], name: str, value: object
) -> None:
    with pytest.raises(ValueError) as info:
        analytic_gaussian_sigma(*args)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message
    assert name in message and repr(value) in message


@pytest.mark.parametrize(
    "args", [(True, 1e-5), ("1", 1e-5), (1.0, "1e-5"), (1.0, 1e-5, True), (1.0, 1e-5, "2")]
)
def test_bools_and_numeric_strings_are_rejected(args: tuple[object, ...]) -> None:
    try:
        analytic_gaussian_sigma(*args)  # type: ignore[arg-type]
    except ValueError:
        return
    raise AssertionError(f"analytic_gaussian_sigma{args!r} did not raise")


def test_numpy_scalars_are_accepted() -> None:
    assert analytic_gaussian_sigma(np.float64(1.0), np.float32(1e-5)) == pytest.approx(
        analytic_gaussian_sigma(1.0, float(np.float32(1e-5))), rel=1e-15
    )
    assert analytic_gaussian_sigma(np.int64(2), 0.01, np.int32(3)) == pytest.approx(
        3.0 * analytic_gaussian_sigma(2.0, 0.01), rel=1e-14
    )


def test_release_noise_std_is_sqrt2_times_multiplier_times_sigma() -> None:
    for horizon in (1, 4, 64, 1024):
        expected = math.sqrt(2.0) * continual_multiplier(horizon) * balle_wang_sigma(1.0, 1e-5)
        assert release_noise_std(1.0, 1e-5, horizon) == pytest.approx(expected, rel=REL_TOL)


# -- the square-root factorisation of the prefix-sum matrix --------------------------------


def toeplitz_lower(coefficients: np.ndarray) -> np.ndarray:
    """``R[i, j] = c_{i - j}`` for ``i >= j``, else 0."""
    h = coefficients.shape[0]
    index = np.subtract.outer(np.arange(h), np.arange(h))
    return np.where(index >= 0, coefficients[np.clip(index, 0, h - 1)], 0.0)


def exact_coefficient(k: int) -> Fraction:
    return Fraction(math.comb(2 * k, k), 4**k)


def test_coefficients_are_binom_2k_k_over_4_to_the_k() -> None:
    coefficients = sqrt_factorisation_coefficients(200)
    assert coefficients.shape == (200,) and coefficients.dtype == np.float64
    exact = np.array([float(exact_coefficient(k)) for k in range(200)])
    np.testing.assert_allclose(coefficients, exact, rtol=1e-13, atol=0.0)
    assert (np.diff(coefficients) < 0.0).all() and coefficients[0] == 1.0


@pytest.mark.parametrize("horizon", [*range(1, 17), 31, 32, 33, 63, 64])
def test_r_times_r_is_the_prefix_sum_matrix(horizon: int) -> None:
    r = toeplitz_lower(sqrt_factorisation_coefficients(horizon))
    m = np.tril(np.ones((horizon, horizon)))
    np.testing.assert_allclose(r @ r, m, rtol=0.0, atol=1e-13)


def test_multiplier_is_the_largest_column_norm_of_r_and_matches_exact_sums() -> None:
    assert continual_multiplier(1) == 1.0
    for horizon in (1, 2, 3, 4, 7, 64, 100):
        r = toeplitz_lower(sqrt_factorisation_coefficients(horizon))
        column_norms = np.linalg.norm(r, axis=0)
        # Replacing one reading moves one block: the sensitivity factor is max_j ||R e_j||,
        # reached by the first column.
        assert continual_multiplier(horizon) == pytest.approx(column_norms.max(), rel=1e-14)
        assert column_norms[0] == column_norms.max()
    for horizon in (1, 2, 4, 64):
        exact = sum((exact_coefficient(k) ** 2 for k in range(horizon)), Fraction(0))
        assert continual_multiplier(horizon) == pytest.approx(math.sqrt(exact), rel=1e-13)
    with mp.workdps(30):  # longer horizons: binomials in 30-digit arithmetic
        for horizon in (1024, 4096):
            total = mp.fsum(mp.binomial(2 * k, k) ** 2 / mpf(16) ** k for k in range(horizon))
            assert continual_multiplier(horizon) == pytest.approx(float(mp.sqrt(total)), rel=1e-12)
    assert continual_multiplier(2) == pytest.approx(math.sqrt(1.25), rel=1e-15)
    # Rounded values (continual.py's docstring quotes 1.53 and 1.88 for 64 and 1024).
    assert [round(continual_multiplier(h), 2) for h in (4, 64, 1024)] == [1.22, 1.55, 1.81]


def test_prefix_noise_is_the_weighted_sum_of_regenerated_draws() -> None:
    d, sigma, horizon = 5, 2.0, 6
    key = np.array([1, 2, 3, 4], dtype=np.uint32)
    c = sqrt_factorisation_coefficients(horizon)
    draws = []
    for j in range(1, horizon + 1):
        seed = np.random.SeedSequence([1, 2, 3, 4], spawn_key=(j,))
        draws.append(symmetric_noise(d, sigma, np.random.Generator(np.random.PCG64(seed))))
    for step in range(1, horizon + 1):
        expected = sum(c[step - j] * draws[j - 1] for j in range(1, step + 1))
        np.testing.assert_allclose(
            prefix_noise(step, d, sigma, key, c), expected, rtol=1e-14, atol=1e-14
        )
    assert np.array_equal(prefix_noise(3, d, sigma, key, c), prefix_noise(3, d, sigma, key, c))


# -- PrivateGram: the noise of the released prefix sums ------------------------------------


def noise_map(horizon: int, steps: int) -> np.ndarray:
    """``L`` with ``noise_t = sum_i L[t, i] Z_i`` over the draws ``Z`` of all segments.

    Step ``t`` (0-based) is position ``p = t % H + 1`` of segment ``t // H``; its noise is
    the last output noise of every closed segment, ``sum_j c_{H-j} Z_{s,j}``, plus the
    open segment's ``sum_{j <= p} c_{p-j} Z_{seg,j}``.
    """
    c = sqrt_factorisation_coefficients(horizon)
    segments = -(-steps // horizon)
    out = np.zeros((steps, segments * horizon))
    for t in range(steps):
        segment, position = divmod(t, horizon)
        for s in range(segment):
            out[t, s * horizon : (s + 1) * horizon] = c[::-1]
        out[t, segment * horizon : segment * horizon + position + 1] = c[position::-1]
    return out


def test_noise_map_is_m_for_one_segment_and_sqrt_t_growth_for_horizon_1() -> None:
    h = 8
    full = noise_map(h, h)
    r = toeplitz_lower(sqrt_factorisation_coefficients(h))
    np.testing.assert_array_equal(full, r)
    independent = noise_map(1, 5)
    np.testing.assert_array_equal(independent, np.tril(np.ones((5, 5))))


def unit_rows(rng: np.random.Generator, k: int, d: int) -> np.ndarray:
    rows = rng.standard_normal((k, d))
    rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1.0)
    return rows


@pytest.mark.parametrize(("horizon", "steps"), [(1, 5), (4, 10), (16, 17)])
def test_release_noise_has_the_covariance_of_the_factorisation(horizon: int, steps: int) -> None:
    d, runs, eps, delta = 16, 250, 1.0, 1e-5
    rng = np.random.default_rng(1000 + horizon)
    keys = np.random.default_rng(2000 + horizon)  # the segment keys of all runs
    upper = np.triu_indices(d, 1)
    diagonal = np.empty((runs, d, steps))
    off_diagonal = np.empty((runs, upper[0].size, steps))
    sigma = release_noise_std(eps, delta, horizon)
    for run in range(runs):
        gram = PrivateGram(d, eps, delta, horizon=horizon, rng=keys)
        assert gram.noise_std == sigma
        exact = np.zeros((d, d))
        for t in range(steps):
            rows = unit_rows(rng, 3, d)
            exact += rows.T @ rows
            gram.release(rows)
            noise = gram.released - exact
            assert np.array_equal(noise, noise.T)
            diagonal[run, :, t] = np.diag(noise)
            off_diagonal[run, :, t] = noise[upper]
    assert gram.releases == steps

    lmap = noise_map(horizon, steps)
    predicted = sigma**2 * (lmap @ lmap.T)  # covariance over steps of one diagonal entry
    # The brief's form of the diagonal: sigma_AGM-based sigma**2 m(H)**2 sum_{k<t} c_k**2
    # within the first segment.
    c = sqrt_factorisation_coefficients(horizon)
    base = REPLACE_ONE_SENSITIVITY * analytic_gaussian_sigma(eps, delta)
    for t in range(min(horizon, steps)):
        assert predicted[t, t] == pytest.approx(
            base**2 * continual_multiplier(horizon) ** 2 * float(c[: t + 1] @ c[: t + 1]),
            rel=1e-12,
        )

    tests = 0
    for samples, scale in ((diagonal, 1.0), (off_diagonal, 0.5)):
        flat = samples.reshape(-1, steps)  # independent rows, zero mean
        n = flat.shape[0]
        cov = scale * predicted
        empirical = flat.T @ flat / n
        # Variances: n s2 / var ~ chi2(n); two-sided at 1e-6 (fixed seed: deterministic).
        low, high = stats.chi2.ppf([0.5e-6, 1.0 - 0.5e-6], n) / n
        ratio = np.diag(empirical) / np.diag(cov)
        assert ((ratio > low) & (ratio < high)).all(), (ratio, low, high)
        # Covariances across steps: Var(x_s x_t) = C_ss C_tt + C_st**2; 5.5 standard errors.
        error = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / n)
        assert (np.abs(empirical - cov) < 5.5 * error).all()
        tests += 1
    assert tests == 2


def test_noise_is_reproduced_after_get_state_and_set_state() -> None:
    d, horizon, steps, eps, delta = 6, 4, 11, 2.0, 1e-6
    rng = np.random.default_rng(7)
    blocks = [unit_rows(rng, 4, d) for _ in range(steps)]

    uninterrupted = PrivateGram(d, eps, delta, horizon=horizon, rng=np.random.default_rng(9))
    reference = []
    for block in blocks:
        uninterrupted.release(block)
        reference.append(uninterrupted.released.copy())

    for stop in (1, 2, 4, 6):  # mid-segment, at a segment's close, in the next segment
        first = PrivateGram(d, eps, delta, horizon=horizon, rng=np.random.default_rng(9))
        for block in blocks[:stop]:
            first.release(block)
        state = first.get_state()
        # Another process: a generator in another state. The open segment's noise comes
        # from the saved key, so the rest of the segment is bit-identical; the next
        # segment's key comes from the new generator, so its noise is fresh.
        restored = PrivateGram(d, eps, delta, horizon=horizon, rng=np.random.default_rng(123))
        restored.set_state(state)
        assert restored.releases == stop
        np.testing.assert_array_equal(restored.released, reference[stop - 1])
        # The key of the segment after `stop` is in the state (a segment that closes at
        # `stop` draws the next one's key then), so the first release that differs is the
        # first one of the segment after.
        segment_end = (stop // horizon + 1) * horizon
        for t in range(stop, steps):
            restored.release(blocks[t])
            if t < segment_end:
                np.testing.assert_array_equal(restored.released, reference[t])
            else:
                assert not np.array_equal(restored.released, reference[t])
                break
        else:
            raise AssertionError("the stream ended before the segment closed")

    # With the generator in the same state too, the whole continuation is bit-identical.
    first = PrivateGram(d, eps, delta, horizon=horizon, rng=np.random.default_rng(9))
    for block in blocks[:2]:
        first.release(block)
    restored = PrivateGram(d, eps, delta, horizon=horizon, rng=np.random.default_rng(9))
    restored.set_state(first.get_state())
    for t in range(2, steps):
        restored.release(blocks[t])
        np.testing.assert_array_equal(restored.released, reference[t])
