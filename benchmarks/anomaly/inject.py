"""The event benchmark's fault model: seeded SHORT (one reading offset), NOISE (added noise),
CONSTANT (``stuck_rail``, ``stuck_zero``, ``stuck_last``: the sensor reports its rail, 0 or
its last value) and DRIFT (a linear offset) faults, one sensor (column) at a time, laid out in
random order at least ``guard`` readings apart after a clean warm-up. Sizes are in units of
``sigma_j``, the sensor's robust sigma of its *non-zero* first differences over the warm-up
(`noise_sigma`: held readings make the plain MAD 0 for 27 of 48 motes); ranges in
`FaultConfig`, the rules in ``templates/anomaly_events.md``. A CONSTANT reading counts only
where the truth is more than ``frozen_noise sigma_j`` away (`Fault.visible`); a fault with no
such reading is invisible: out of recall, its alarms neither true nor false.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["CONSTANT_KINDS", "KINDS", "Fault", "FaultConfig", "Injected", "inject",
           "local_sigma", "noise_sigma"]

#: Fault kinds, in table order.
KINDS = ("short", "noise", "stuck_rail", "stuck_zero", "stuck_last", "drift")
#: The CONSTANT kinds (the "truth moved away" rule applies to these).
CONSTANT_KINDS = ("stuck_rail", "stuck_zero", "stuck_last")

#: 1 / Phi^-1(3/4): MAD to standard deviation for Gaussian data.
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class FaultConfig:
    """Faults per kind per seed (``counts``) and their sizes: ranges ``(lo, hi)`` of the
    spike (``sigma_j``), the noise (local sigmas) and the drift (``sigma_j``), lengths in
    readings, ``noise_context`` readings for the local sigma, ``frozen_noise`` (``sigma_j``)
    and ``guard`` clean readings after each fault."""

    counts: dict[str, int] = field(default_factory=lambda: {
        "short": 8, "noise": 4, "stuck_rail": 2, "stuck_zero": 2, "stuck_last": 3, "drift": 1})
    short_size: tuple[float, float] = (5.0, 10.0)
    noise_factor: tuple[float, float] = (2.0, 4.0)
    noise_length: tuple[int, int] = (20, 60)
    noise_context: int = 100
    stuck_length: tuple[int, int] = (20, 80)
    frozen_noise: float = 1.0
    drift_size: tuple[float, float] = (10.0, 20.0)
    drift_length: int = 200
    guard: int = 60


@dataclass(frozen=True)
class Fault:
    """One injected fault (``kind`` of `KINDS`) on column ``sensor``, rows ``[start, end)``
    of the full matrix; ``visible`` (int rows) those faulty to an observer (all but where a
    CONSTANT fault's truth is within the noise; empty: invisible); ``size`` the offset, noise
    standard deviation, constant or final drift, units of the readings."""

    kind: str
    sensor: int
    start: int
    end: int
    visible: np.ndarray
    size: float

    @property
    def onset(self) -> int | None:
        """First visible row (where the detection delay counts from), None if invisible."""
        return int(self.visible[0]) if self.visible.size else None


@dataclass(frozen=True)
class Injected:
    """A faulty copy of the data and its faults, sorted by ``start``."""

    data: np.ndarray
    faults: list[Fault]


def noise_sigma(data: np.ndarray) -> np.ndarray:
    """``1.4826 median |diff|`` over each sensor's non-zero first differences of ``data``
    (n_samples >= 2, n_features): shape (n_features,), units of the readings; a sensor that
    never changes gets the smallest positive value of the others (1.0 if none)."""
    diff = np.diff(np.asarray(data, dtype=np.float64), axis=0)
    out = np.array([MAD_TO_SIGMA * float(np.median(np.abs(c[c != 0]))) if np.any(c != 0)
                    else 0.0 for c in diff.T])
    positive = out[out > 0]
    out[out == 0] = positive.min() if positive.size else 1.0
    return out


def local_sigma(column: np.ndarray, floor: float) -> float:
    """Robust sigma of the non-zero first differences of ``column`` (shape (m,)), >= floor."""
    diff = np.diff(column)
    diff = diff[diff != 0]
    if diff.size < 5:
        return floor
    return max(floor, MAD_TO_SIGMA * float(np.median(np.abs(diff))))


def inject(
    clean: np.ndarray, *, start: int, seed: int, sigma: np.ndarray,
    config: FaultConfig | None = None,
) -> Injected:
    """A copy of ``clean`` (n_samples, n_features) with one ``seed``'s faults (``config``,
    None: ``FaultConfig()``) in rows ``[start, n)``, ``start >= 1``, sized by ``sigma``
    (n_features,), `noise_sigma` of the warm-up; the faults sorted by start row. Raises
    ValueError if the faults and guards do not fit in ``n_samples - start`` rows."""
    cfg, x = FaultConfig() if config is None else config, np.array(clean, dtype=np.float64)
    n, d = x.shape
    if not 1 <= start < n:
        raise ValueError(f"start must be in [1, {n}), got {start}")
    rng = np.random.default_rng(seed)
    kinds = [k for k in KINDS for _ in range(cfg.counts.get(k, 0))]
    kinds = [kinds[i] for i in rng.permutation(len(kinds))]

    def draw_length(kind: str) -> int:  # drawn in the order of the faults
        if kind in ("short", "drift"):
            return 1 if kind == "short" else cfg.drift_length
        lo, hi = cfg.noise_length if kind == "noise" else cfg.stuck_length
        return int(rng.integers(lo, hi + 1))

    lengths = [draw_length(kind) for kind in kinds]
    need = sum(lengths) + cfg.guard * len(kinds)
    if need > n - start:
        raise ValueError(f"faults need {need} rows after start {start}, only {n - start} left")
    gaps = rng.multinomial(n - start - need, np.full(len(kinds) + 1, 1.0 / (len(kinds) + 1)))
    floor, rail = np.min(clean[:start], axis=0), np.max(clean, axis=0)
    faults, row = [], start
    for i, (kind, length) in enumerate(zip(kinds, lengths, strict=True)):
        row += int(gaps[i])
        j = int(rng.integers(d))
        span = slice(row, row + length)
        truth = clean[span, j]
        visible = np.arange(row, row + length)
        if kind == "short":
            size = float(rng.uniform(*cfg.short_size)) * sigma[j]
            if rng.random() < 0.5 and truth[0] - size >= floor[j]:
                size = -size
            x[row, j] += size
        elif kind == "noise":
            context = clean[max(0, row - cfg.noise_context) : row, j]
            size = float(rng.uniform(*cfg.noise_factor)) * local_sigma(context, sigma[j])
            x[span, j] += rng.normal(0.0, size, length)
        elif kind == "drift":
            size = float(rng.uniform(*cfg.drift_size)) * sigma[j] * rng.choice([-1.0, 1.0])
            x[span, j] += np.linspace(size / length, size, length)
        else:
            size = {"stuck_rail": rail[j], "stuck_zero": 0.0, "stuck_last": clean[row - 1, j]}[kind]
            x[span, j] = size
            visible = visible[np.abs(truth - size) > cfg.frozen_noise * sigma[j]]
        faults.append(Fault(kind, j, row, row + length, visible, float(size)))
        row += length + cfg.guard
    return Injected(x, faults)
