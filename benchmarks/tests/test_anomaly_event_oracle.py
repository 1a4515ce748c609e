"""The hindsight oracle: the clean-budget limit and the recall it allows."""

from __future__ import annotations

import numpy as np

from benchmarks.anomaly.event_bench import Dataset
from benchmarks.anomaly.event_oracle import evaluate, hindsight_threshold, render
from benchmarks.anomaly.inject import FaultConfig, noise_sigma

SPIKES = FaultConfig(counts={"short": 8})
N, D, WARMUP = 4000, 12, 1000
EPOCH = 86400.0 / 1500  # 2 device-days scored: a budget of 2 a day allows 4 events


def correlated(seed: int = 0) -> np.ndarray:
    """Sensors following one random walk (their changes mostly shared) plus a little noise
    of their own: no sensor ever glitches alone."""
    rng = np.random.default_rng(seed)
    walk = np.cumsum(rng.normal(0.0, 1.0, N))
    return 1000.0 + walk[:, None] * rng.uniform(0.5, 2.0, D) + rng.normal(0.0, 0.1, (N, D))


def with_glitches(x: np.ndarray, per_day: int = 10, seed: int = 1) -> np.ndarray:
    """``x`` with one-reading, one-sensor glitches as large as the injected spikes (5-10
    sigma) all over the scored rows: clean, but indistinguishable from a spike."""
    rng, sigma, y, k = np.random.default_rng(seed), noise_sigma(x[:WARMUP]), x.copy(), per_day * 2
    rows = rng.choice(np.arange(WARMUP + 1, N - 1, 3), k, replace=False)
    cols = rng.integers(0, D, k)
    y[rows, cols] += rng.choice([-1.0, 1.0], k) * rng.uniform(5, 10, k) * sigma[cols]
    return y


def test_hindsight_threshold_counts_events_above_it() -> None:
    s = np.array([0.0, 5.0, 0.0, 3.0, 3.0, 0.0, 1.0, 0.0])
    # nothing exceeds the largest value; only the 5; the 5 and the run of 3s; all 3 events
    assert [hindsight_threshold(s, k) for k in range(4)] == [5.0, 3.0, 1.0, 0.0]
    # Below every reading all is one event, yet the limit stays where the count first fits
    # from above (a lower threshold that merges everything would not be a usable limit).
    assert hindsight_threshold(np.array([2.0, 1.0, 2.0, 1.0, 2.0]), 1) == 2.0


def test_spikes_all_found_when_the_clean_stream_has_no_glitches() -> None:
    res = evaluate(Dataset("correlated", correlated(), WARMUP, EPOCH), 2, (2.0,), SPIKES)
    assert res.visible["short"] == 16
    recall, names = res.best(2.0, ("short",))
    assert recall == 1.0
    assert any("loo" in n for n in names)  # the cross-sensor residual isolates the spike


def test_clean_glitches_as_large_as_the_spikes_take_the_budget() -> None:
    ds = Dataset("glitchy", with_glitches(correlated()), WARMUP, EPOCH)
    res = evaluate(ds, seeds=2, budgets=(2.0, 20.0), config=SPIKES)
    recall, _ = res.best(2.0, ("short",))
    assert recall <= 0.5
    assert res.best(20.0, ("short",))[0] > recall  # a larger budget buys recall back
    text = render(ds, res)
    assert "SHORT (0)" in text and "glitchy" in text
