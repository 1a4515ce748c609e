"""Issue 25's fault model: seeded SHORT, NOISE, CONSTANT and DRIFT faults, one sensor at a time.

A *reading* is one row (one time step of all sensors), a *sensor* one column (feature).
Faults go into the rows after a clean warm-up; each is one `Fault` with its ground truth.

Noise scale of a sensor
    ``sigma_j`` is the robust sigma of the sensor's first differences over the warm-up,
    ``1.4826 * median(|diff|)`` taken over the *non-zero* differences. Zero differences are
    readings held at the converter's resolution: on Motes light 31-55 % of each mote's
    differences are exactly 0, and with them the MAD is 0 for 27 of the 48 motes, which
    would make every fault size 0. `noise_sigma` computes it.

Kinds (defaults in `FaultConfig`; sizes in units of ``sigma_j``)

- ``short``: one reading offset by ``U(5, 10) * sigma_j``, sign drawn at random (upwards
  when downwards would cross the sensor's lowest clean value).
- ``noise``: Gaussian noise of standard deviation ``U(2, 4)`` times the *local* sigma added
  over ``U(20, 60)`` readings. The local sigma is the robust sigma of the sensor's non-zero
  first differences over the 100 readings before the fault, floored at ``sigma_j`` (a
  dark, flat night would otherwise make the added noise smaller than the resolution).
- ``stuck_rail``, ``stuck_zero``, ``stuck_last``: the sensor reports its rail (the
  column's largest clean value: on Motes light mostly the 1847.36 lux saturation), 0, or
  its last value before the fault, for ``U(20, 80)`` readings. A CONSTANT reading is
  faulty only where the true signal is more than ``frozen_noise * sigma_j`` away from
  the reported constant (`Fault.visible`); a fault with no such reading is *invisible*:
  nothing is wrong to detect, it is excluded from recall, and alarms during it are
  neither true nor false.
- ``drift``: a linear offset from 0 to ``U(10, 20) * sigma_j`` (random sign) over 200
  readings.

Placement: the faults of one seed are shuffled and laid out in order over the rows
``[start, n)`` with at least ``guard`` clean readings after each, the free rows spread
at random between them (`numpy.random.default_rng(seed)`), each on a sensor drawn
uniformly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "CONSTANT_KINDS",
    "KINDS",
    "Fault",
    "FaultConfig",
    "Injected",
    "inject",
    "local_sigma",
    "noise_sigma",
]

#: Fault kinds, in table order.
KINDS = ("short", "noise", "stuck_rail", "stuck_zero", "stuck_last", "drift")
#: The CONSTANT kinds (the "truth moved away" rule applies to these).
CONSTANT_KINDS = ("stuck_rail", "stuck_zero", "stuck_last")

#: 1 / Phi^-1(3/4): MAD to standard deviation for Gaussian data.
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class FaultConfig:
    """How many faults of each kind per seed, and their sizes (units of ``sigma_j``).

    Attributes
    ----------
    counts : dict of str to int
        Faults per kind per seed (keys of `KINDS`).
    short_size : tuple of float
        Range of the spike's offset, ``sigma_j``.
    noise_factor : tuple of float
        Range of the added noise's standard deviation, in local sigmas.
    noise_length : tuple of int
        Range of the noise fault's length, readings (inclusive).
    noise_context : int
        Readings before the fault over which the local sigma is measured.
    stuck_length : tuple of int
        Range of a CONSTANT fault's length, readings (inclusive).
    frozen_noise : float
        A CONSTANT reading is faulty where ``|truth - constant| > frozen_noise * sigma_j``.
    drift_size : tuple of float
        Range of the drift's final offset, ``sigma_j``.
    drift_length : int
        Readings of a drift.
    guard : int
        Clean readings at least after each fault before the next one starts.
    """

    counts: dict[str, int] = field(
        default_factory=lambda: {
            "short": 8,
            "noise": 4,
            "stuck_rail": 2,
            "stuck_zero": 2,
            "stuck_last": 3,
            "drift": 1,
        }
    )
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
    """One injected fault and its ground truth (row indices of the full matrix).

    Attributes
    ----------
    kind : str
        One of `KINDS`.
    sensor : int
        The faulty column.
    start, end : int
        First and one-past-last faulty row written.
    visible : ndarray of shape (n_visible,), int
        Rows in ``[start, end)`` that are faulty to an observer: all of them except for
        CONSTANT kinds, where only rows whose truth is more than the sensor's noise away
        from the constant count. Empty: an invisible fault.
    size : float
        Spike offset, noise standard deviation, constant value or final drift offset
        (units of the readings).
    """

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
    """Each sensor's robust sigma of its non-zero first differences (see the module).

    Parameters
    ----------
    data : ndarray of shape (n_samples, n_features)
        Clean readings, ``n_samples >= 2``.

    Returns
    -------
    ndarray of shape (n_features,)
        ``1.4826 * median(|diff|)`` over the non-zero differences, units of the readings;
        a sensor that never changes gets the smallest positive value of the others (1.0
        if none).
    """
    diff = np.diff(np.asarray(data, dtype=np.float64), axis=0)
    out = np.array(
        [
            MAD_TO_SIGMA * float(np.median(np.abs(c[c != 0]))) if np.any(c != 0) else 0.0
            for c in diff.T
        ]
    )
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


def _draw_length(rng: np.random.Generator, bounds: tuple[int, int]) -> int:
    return int(rng.integers(bounds[0], bounds[1] + 1))


def inject(
    clean: np.ndarray,
    *,
    start: int,
    seed: int,
    sigma: np.ndarray,
    config: FaultConfig | None = None,
) -> Injected:
    """Inject one seed's faults into rows ``[start, n)`` of ``clean``.

    Parameters
    ----------
    clean : ndarray of shape (n_samples, n_features)
        Clean readings, finite; not modified.
    start : int
        First row that may be faulty (the end of the warm-up), ``>= 1``.
    seed : int
        Seed of `numpy.random.default_rng`: the same seed gives the same faults.
    sigma : ndarray of shape (n_features,)
        The sensors' noise scale (`noise_sigma` of the warm-up), units of the readings.
    config : FaultConfig or None, default=None
        None means ``FaultConfig()``.

    Returns
    -------
    Injected
        The faulty copy and its faults sorted by start row.

    Raises
    ------
    ValueError
        If the faults (at their longest) and guards do not fit in ``n_samples - start``.
    """
    cfg = FaultConfig() if config is None else config
    x = np.array(clean, dtype=np.float64, copy=True)
    n, d = x.shape
    if not 1 <= start < n:
        raise ValueError(f"start must be in [1, {n}), got {start}")
    rng = np.random.default_rng(seed)
    kinds = [k for k in KINDS for _ in range(cfg.counts.get(k, 0))]
    kinds = [kinds[i] for i in rng.permutation(len(kinds))]
    lengths = []
    for kind in kinds:
        if kind == "short":
            lengths.append(1)
        elif kind == "noise":
            lengths.append(_draw_length(rng, cfg.noise_length))
        elif kind == "drift":
            lengths.append(cfg.drift_length)
        else:
            lengths.append(_draw_length(rng, cfg.stuck_length))
    need = sum(lengths) + cfg.guard * len(kinds)
    if need > n - start:
        raise ValueError(f"faults need {need} rows after start {start}, only {n - start} left")
    gaps = rng.multinomial(n - start - need, np.full(len(kinds) + 1, 1.0 / (len(kinds) + 1)))
    floor = np.min(clean[:start], axis=0)
    rail = np.max(clean, axis=0)
    faults = []
    row = start
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
