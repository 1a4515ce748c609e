"""Behaviour of the streaming sensor-fault detector (edge_runtime.fpca.faults)."""

from __future__ import annotations

import numpy as np
import pytest

from edge_runtime.fpca.faults import FaultDetector, FaultVerdict
from edge_runtime.fpca.faults_limits import PotLimit, pot_quantile

D = 8


def _sensors(n: int, seed: int) -> np.ndarray:
    """Readings of ``D`` sensors: two shared factors (a cycle of 500 readings and a random
    walk) plus sensor noise, > 0."""
    rng = np.random.default_rng(seed)
    factors = np.cumsum(rng.normal(0.0, 1.0, size=(n, 2)), axis=0)
    factors[:, 0] += 40.0 * np.sin(2 * np.pi * np.arange(n) / 500.0)
    loadings = rng.uniform(0.5, 1.5, size=(2, D))
    return 200.0 + factors @ loadings + rng.normal(0.0, 0.5, size=(n, D))


def _detector(x: np.ndarray, **params: object) -> FaultDetector:
    return FaultDetector.from_warmup(x, rank=2, log_offset=None, **params)


def _diff_sigma(x: np.ndarray, j: int) -> float:
    d = np.diff(x[:, j])
    return float(1.4826 * np.median(np.abs(d - np.median(d))))


def test_spike_alarms_at_the_reading_and_names_the_sensor() -> None:
    x = _sensors(4000, 1)
    det = _detector(x[:3000])
    for i in range(3000, 3500):
        assert det.update(x[i], float(i)) == (False, -1)
    j, i = 5, 3500
    spiked = x[i].copy()
    spiked[j] += 10.0 * _diff_sigma(x[:3000], j)
    v = det.verdict(spiked, float(i))
    assert isinstance(v, FaultVerdict)
    assert v.alarm and v.sensor == j and v.kind == "short"
    assert v.score > v.limit
    assert int(np.argmax(v.contributions)) == j
    # One spike is one alarm: the next (clean) reading is not flagged.
    assert det.update(x[i + 1], float(i + 1)) == (False, -1)


def test_frozen_sensor_is_named_within_the_window() -> None:
    x = _sensors(4000, 2)
    det = _detector(x[:3000])
    j, start = 3, 3200
    x = x.copy()
    x[start:, j] = x[start - 1, j]
    named = [i for i in range(3000, 3300) if det.update(x[i], float(i)) == (True, j)]
    assert named and start <= named[0] < start + 20


def test_noise_burst_is_named() -> None:
    x = _sensors(4000, 3)
    det = _detector(x[:3000])
    j, start = 6, 3200
    x = x.copy()
    rng = np.random.default_rng(30)
    x[start : start + 30, j] += rng.normal(0.0, 3.0 * _diff_sigma(x[:3000], j), 30)
    hits = [(i, det.verdict(x[i], float(i))) for i in range(3000, 3250)]
    named = [i for i, v in hits if v.alarm and v.sensor == j]
    assert named and start <= named[0] < start + 20
    assert not any(v.alarm for i, v in hits if i < start)


def test_alarm_rate_on_stationary_gaussian_data_is_near_the_target() -> None:
    rng = np.random.default_rng(4)
    risk, n = 1e-3, 20_000
    x = 100.0 + rng.normal(size=(4000 + n, D))
    det = FaultDetector.from_warmup(x[:4000], rank=2, log_offset=None, risk=risk)
    kinds = [det.verdict(row, float(i)).kind for i, row in enumerate(x[4000:])]
    short = sum(k == "short" for k in kinds)
    # Binomial(n, risk): mean 20, sd 4.5; the GPD extrapolation adds its own error.
    assert abs(short - n * risk) <= 5.0 * np.sqrt(n * risk)
    alarms = sum(k != "" for k in kinds)
    assert alarms <= 3 * n * risk + 5.0 * np.sqrt(3 * n * risk) + 30  # noise EWMA clusters


def test_memory_does_not_grow_with_the_stream() -> None:
    x = _sensors(8000, 5)
    det = _detector(x[:3000])
    shapes = {k: v.shape for k, v in vars(det).items() if isinstance(v, np.ndarray)}
    before = det.nbytes
    det.run(x[3000:])
    assert det.nbytes == before
    assert {k: v.shape for k, v in vars(det).items() if isinstance(v, np.ndarray)} == shapes
    assert before < 100_000


def test_a_flagged_reading_does_not_update_the_limits_or_scales() -> None:
    x = _sensors(3500, 6)
    det = _detector(x[:3000])
    det.run(x[3000:3400])
    j = 2
    spiked = x[3400].copy()
    spiked[j] += 50.0 * _diff_sigma(x[:3000], j)
    scale_before = det._scale2.copy()
    v = det.verdict(spiked, 3400.0)
    assert v.alarm and v.sensor == j
    assert det._scale2[j] == scale_before[j]
    lim = det.limits["short"]
    assert lim._buf.max() < v.score  # the spike's score never entered the window


def test_pot_limit_matches_an_exponential_quantile() -> None:
    rng = np.random.default_rng(7)
    s = rng.exponential(size=200_000)
    # P(S > z) = exp(-z): the 1e-4 quantile is ln(1e4) = 9.21.
    assert pot_quantile(s, 1e-4) == pytest.approx(np.log(1e4), rel=0.05)
    lim = PotLimit(window=4096, risk=1e-3, every=16)
    assert lim.limit == np.inf
    for value in s[:5000]:
        lim.push(float(value))
    assert lim.limit == pytest.approx(np.log(1e3), rel=0.15)
    assert lim.nbytes == 8 * 4096


def test_input_errors() -> None:
    with pytest.raises(ValueError, match="rank"):
        FaultDetector(4, rank=4)
    with pytest.raises(ValueError, match="2-D"):
        FaultDetector.from_warmup(np.zeros(5))
    det = _detector(_sensors(500, 8))
    with pytest.raises(ValueError, match="shape"):
        det.update(np.zeros(D + 1), 0.0)
    with pytest.raises(ValueError, match="finite"):
        det.update(np.full(D, np.nan), 0.0)
    with pytest.raises(ValueError, match="risk keys"):
        FaultDetector(4, rank=1, risk={"spike": 1e-3})


def test_stuck_at_the_saturation_rail_is_named() -> None:
    x = np.clip(_sensors(4000, 9), None, 260.0)  # every sensor saturates at 260
    det = _detector(x[:3000])
    start = next(i for i in range(3100, 4000) if x[i].max() < 200.0)  # all below the rail
    j = 4
    x = x.copy()
    x[start : start + 30, j] = 260.0
    hits = [(i, det.verdict(x[i], float(i))) for i in range(3000, start + 30)]
    named = [(i, v.kind) for i, v in hits if v.alarm and v.sensor == j]
    assert named and start <= named[0][0] < start + 10


def test_stuck_at_zero_is_named_and_a_dead_sensor_is_one_event() -> None:
    x = _sensors(4000, 10)
    det = _detector(x[:3000])
    j, start = 1, 3300
    x = x.copy()
    x[start:, j] = 0.0
    alarms, sensors = det.run(x[3000:])
    rows = np.flatnonzero(alarms) + 3000
    assert rows.size and start <= rows[0] < start + 5 and sensors[rows[0] - 3000] == j
    # Muted after `mute_after` repeats: the alarm stops, so later faults start new events.
    assert not alarms[start - 3000 + det.mute_after :].any()


def test_auto_log_offset() -> None:
    from edge_runtime.fpca.faults import auto_log_offset

    assert auto_log_offset(np.array([[1.0, -1.0], [2.0, 0.0]])) is None  # signed
    assert auto_log_offset(np.ones((5, 2))) is None  # never changes
    x = np.array([[0.0, 10.0], [2.0, 10.0], [2.0, 14.0], [0.0, 10.0]])
    assert auto_log_offset(x) == pytest.approx(1.4826 * 3.0)  # median of 2 and 4
