"""The event benchmark: fault placement, the frozen-fault rule, event matching, NAB."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.anomaly import event_bench as bench
from benchmarks.anomaly.events import DELAY_WINDOW, classify_events, match_faults, merge_alarms
from benchmarks.anomaly.events import AlarmEvent as Ev
from benchmarks.anomaly.inject import CONSTANT_KINDS, Fault, FaultConfig, inject, noise_sigma
from benchmarks.anomaly.nab import STANDARD, Stream, nab_raw, nab_score, scaled_sigmoid

SMALL = FaultConfig(counts={"short": 3, "noise": 2, "stuck_rail": 1, "stuck_zero": 1,
                            "stuck_last": 2, "drift": 1})


def synthetic(n: int = 2000, d: int = 5, seed: int = 0) -> np.ndarray:
    """Slow sinusoids plus noise (n, d), positive."""
    noise = np.random.default_rng(seed).normal(0, 1.0, (n, d))
    return 100 + 30 * np.sin(np.arange(n)[:, None] / 40.0 + np.arange(d)) + noise


@pytest.mark.parametrize("seed", [0, 1])
def test_faults_land_where_labelled(seed: int) -> None:
    clean = synthetic()
    sigma = noise_sigma(clean[:400])
    inj = inject(clean, start=400, seed=seed, sigma=sigma, config=SMALL)
    assert len(inj.faults) == sum(SMALL.counts.values())
    assert [f.start for f in inj.faults] == sorted(f.start for f in inj.faults)
    expected = np.zeros(clean.shape, dtype=bool)
    for f in inj.faults:
        assert f.start >= 400
        expected[f.start : f.end, f.sensor] = True
        got, truth = inj.data[f.start : f.end, f.sensor], clean[f.start : f.end, f.sensor]
        if f.kind == "short":
            assert f.end == f.start + 1 and abs(got[0] - truth[0]) >= 5 * sigma[f.sensor]
        if f.kind in CONSTANT_KINDS:
            np.testing.assert_array_equal(got, f.size)
        else:
            assert (got != truth).all()
    # Nothing outside the labelled cells changed; faults never overlap (guard readings).
    np.testing.assert_array_equal(inj.data[~expected], clean[~expected])
    gaps = [b.start - a.end for a, b in zip(inj.faults, inj.faults[1:], strict=False)]
    assert min(gaps) >= SMALL.guard
    again = inject(clean, start=400, seed=seed, sigma=sigma, config=SMALL)  # same seed: same
    np.testing.assert_array_equal(again.data, inj.data)


def test_frozen_fault_counts_only_where_truth_moves_away() -> None:
    n = 600
    clean = np.full((n, 2), 50.0)
    clean[:, 1] += np.sin(np.arange(n) / 7.0)  # noise scale for both sensors
    clean[420:, 0] += np.arange(n - 420, dtype=float)  # sensor 0 flat up to 420, then a ramp
    cfg = FaultConfig(counts={"stuck_last": 1}, stuck_length=(80, 80), guard=10)
    partial = 0
    for seed in range(30):
        (f,) = inject(clean, start=300, seed=seed, sigma=np.array([3.0, 3.0]), config=cfg).faults
        partial += int(0 < f.visible.size < f.end - f.start)
        truth, frozen = clean[f.start : f.end, f.sensor], clean[f.start - 1, f.sensor]
        assert f.size == frozen
        rows = np.arange(f.start, f.end)
        np.testing.assert_array_equal(f.visible, rows[np.abs(truth - frozen) > 3.0])
        if f.sensor == 0 and f.end <= 420:
            assert f.onset is None  # flat truth: nothing to detect
    assert partial > 0  # some faults are visible only once the truth has moved away
    # A flat sensor stuck at its own value: never visible, so not in recall.
    inj = inject(np.full((600, 1), 7.0), start=300, seed=0, sigma=np.array([1.0]), config=cfg)
    assert inj.faults[0].onset is None
    assert match_faults(inj.faults, [Ev(inj.faults[0].start, 400, 0)]) == []
    assert classify_events([Ev(inj.faults[0].start, 400, 0)], inj.faults) == (0, 0, 1)


def test_matcher_counts_inside_window_only() -> None:
    noise = Fault("noise", 2, 100, 140, np.arange(100, 140), 1.0)
    last = 100 + DELAY_WINDOW["noise"]
    (m,) = match_faults([noise], [Ev(last, last + 3, 2)])
    assert m.detected and m.delay == DELAY_WINDOW["noise"] and m.identified
    assert not match_faults([noise], [Ev(last + 1, last + 3, 2)])[0].detected
    assert not match_faults([noise], [Ev(90, 110, 2)])[0].detected  # started before the fault
    (m,) = match_faults([noise], [Ev(105, 106, 0)])
    assert m.detected and m.delay == 5 and m.identified is False
    spike = Fault("short", 1, 50, 51, np.array([50]), 9.0)
    assert match_faults([spike], [Ev(50, 51, 1)])[0].detected
    assert not match_faults([spike], [Ev(51, 52, 1)])[0].detected
    # A stuck fault whose truth moves away at 130: delay counts from there.
    stuck = Fault("stuck_last", 0, 120, 160, np.arange(130, 160), 5.0)
    (m,) = match_faults([stuck], [Ev(125, 126, 0)])
    assert m.detected and m.delay == 0
    assert not match_faults([stuck], [Ev(141, 142, 0)])[0].detected
    # Merging: consecutive alarms are one event, named at its first reading.
    alarms = np.array([0, 1, 1, 0, 1, 0, 0, 1], dtype=bool)
    sensors = np.array([-1, 3, 4, -1, 2, -1, -1, 0])
    assert merge_alarms(alarms, sensors) == [Ev(1, 3, 3), Ev(4, 5, 2), Ev(7, 8, 0)]
    events = [Ev(101, 102, 2), Ev(300, 301, 0), Ev(145, 146, 2)]
    assert classify_events(events, [noise]) == (2, 1, 0)


def test_nab_perfect_is_100_and_null_is_0() -> None:
    windows = [(100, 119), (300, 309), (500, 540)]
    assert nab_score([Stream([lo for lo, _ in windows], windows)]) == pytest.approx(100.0)
    assert nab_score([Stream([], windows)]) == pytest.approx(0.0)
    assert nab_raw(Stream([], windows)) == pytest.approx(3 * STANDARD.a_fn)
    # Later detection in a window earns less; a far false positive costs |A_FP|.
    assert 0 < nab_score([Stream([119, 300, 500], windows)]) < 100
    for far in (10, 2000):
        assert nab_raw(Stream([far], windows)) == pytest.approx(STANDARD.a_fp + 3 * STANDARD.a_fn)
    assert scaled_sigmoid(0.0) == pytest.approx(0.0)
    # Neutral spans are ignored; only the first detection of a window counts.
    stream = Stream([100, 105, 300, 500, 20], windows, [(15, 25)])
    assert nab_score([stream]) == pytest.approx(100.0)


class _Oracle:
    """Alarms on every reading that differs from the clean data, naming the sensor."""

    def __init__(self, clean: np.ndarray) -> None:
        self.clean = clean

    def update(self, x: np.ndarray, t: float) -> tuple[bool, int]:
        diff = np.abs(x - self.clean[round(t)])
        return bool(diff.max() > 0), int(np.argmax(diff))


def test_runner_end_to_end_small() -> None:
    clean = synthetic()
    ds = bench.Dataset("synthetic", clean, 400, 1.0)
    res = bench.evaluate("oracle", lambda w: _Oracle(clean), ds, 2, SMALL, log=lambda s: None)
    assert res.clean_events == 0
    assert res.recall(("short",)) == res.recall(("noise", "drift")) == 1.0
    assert res.identification == res.precision == 1.0
    assert res.nab > 90
    assert "| oracle |" in bench.render([(ds, [res], 2)], "")
    # The NAB view of a run: one window per visible fault, from its first faulty row.
    inj = inject(clean, start=400, seed=0, sigma=noise_sigma(clean[:400]), config=SMALL)
    stream = bench.nab_stream([], inj.faults, len(clean) - 400, len(clean))
    visible = [f for f in inj.faults if f.onset is not None]
    assert [w[0] for w in stream.windows] == [f.start for f in visible]
    assert all(w[1] >= f.onset for w, f in zip(stream.windows, visible, strict=True))


def test_second_dataset_loads(tmp_path) -> None:
    ds = bench.load_matrix(bench.DAPHNET, bench.DAPHNET_EPOCH)
    assert ds.data.shape == (7040, 9) and ds.warmup == 7040 // 3
    assert np.isfinite(ds.data).all()
    # Any matrix: whitespace text without a header, or .npy.
    np.savetxt(tmp_path / "m.txt", synthetic(30, 3))
    np.save(tmp_path / "m.npy", synthetic(30, 3))
    for name in ("m.txt", "m.npy"):
        got = bench.load_matrix(tmp_path / name, 60.0, warmup=10)
        np.testing.assert_allclose(got.data, synthetic(30, 3))
        assert got.warmup == 10 and got.epoch == 60.0
