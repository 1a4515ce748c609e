"""Seeded fault injection into a sensor matrix, with ground-truth labels per reading.

A *reading* is one row (one time step of the whole fleet, ``n_features`` motes). Three
fault kinds, each on one mote chosen at random per event, at non-overlapping times:

- **spike**: a single reading of one mote offset by ``spike_offset`` lux (default +3000
  lux: a glitch well outside the Motes light range, whose maximum is 1847 lux, the
  sensor's saturation).
- **stuck**: one mote repeats its last value (the reading just before the stretch), or
  with ``stuck_value`` set reports that constant (a stuck-at fault, the CONSTANT fault of
  Sharma, Golubchik & Govindan, ACM TOSN 2010), for ``stuck_length`` steps (default 50,
  about 25 minutes at the Intel Lab's 31 s epoch).
  A stretch where the mote's true readings stay near that value is no fault anyone
  could see, so the stuck mote is drawn (seeded) among those whose mean absolute change
  over the stretch is at least ``stuck_min_effect`` lux (default 50), and a placement of
  the events where some stuck stretch has no such mote (a dark night) is redrawn; the
  whole stretch is labelled, including steps where the change happens to be small.
- **drift**: a linear offset from 0 to ``drift_total`` lux (default +300, i.e. 0.75
  lux per step) added to one mote over ``drift_length`` steps (default 400), a
  slowly decalibrating sensor; the whole stretch is labelled, including its first steps
  where the offset is a few lux.

Events are placed in rows ``[start, n_samples)`` on a grid of slots so they never
overlap; everything is drawn from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["KINDS", "FaultConfig", "FaultyData", "fill_dropouts", "inject_faults"]

#: Label values: ``labels == KINDS.index("spike")`` marks spike readings, etc.
KINDS = ("none", "spike", "stuck", "drift")

#: Random placements tried before `inject_faults` gives up on the stuck-effect condition.
MAX_LAYOUTS = 1000


@dataclass(frozen=True)
class FaultConfig:
    """Fault magnitudes and counts (lux and steps); defaults as in the module docstring.

    Attributes
    ----------
    n_spikes, n_stuck, n_drift : int
        Number of events of each kind, >= 0.
    spike_offset : float
        Lux added to a spiked reading.
    stuck_length : int
        Steps a stuck mote repeats its last value.
    stuck_min_effect : float
        Minimum mean absolute change (lux) over a stuck stretch for a mote to be chosen.
    drift_length : int
        Steps of a drift.
    drift_total : float
        Offset (lux) reached at the last step of a drift.
    stuck_value : float or None
        None: a stuck mote repeats its last value; a number: it reports this constant.
    """

    n_spikes: int = 100
    n_stuck: int = 8
    n_drift: int = 2
    spike_offset: float = 3000.0
    stuck_length: int = 50
    stuck_min_effect: float = 50.0
    drift_length: int = 400
    drift_total: float = 300.0
    stuck_value: float | None = None


@dataclass(frozen=True)
class FaultyData:
    """The faulty matrix and its ground truth.

    Attributes
    ----------
    data : ndarray of shape (n_samples, n_features), float64
        The input with faults injected (a copy).
    labels : ndarray of shape (n_samples,), int8
        Index into `KINDS` per reading (row): 0 = none.
    motes : ndarray of shape (n_samples,), int
        The faulty mote per reading, -1 where none.
    """

    data: np.ndarray
    labels: np.ndarray
    motes: np.ndarray


def fill_dropouts(data: np.ndarray) -> np.ndarray:
    """Replace zeros (dropouts in Motes light) by the mote's last non-zero reading.

    Causal (a device can do it as readings arrive); leading zeros take the mote's first
    non-zero reading. A mote with no non-zero reading is left at 0.

    Parameters
    ----------
    data : array-like of shape (n_samples, n_features)

    Returns
    -------
    ndarray of shape (n_samples, n_features), float64
        A new array.
    """
    x = np.array(data, dtype=np.float64, copy=True)
    if x.ndim != 2:
        raise ValueError(f"data must be 2-D (n_samples, n_features), got shape {x.shape}")
    steps = np.arange(x.shape[0])
    for j in range(x.shape[1]):
        col = x[:, j]
        nonzero = np.flatnonzero(col)
        if nonzero.size == 0:
            continue
        last = np.maximum.accumulate(np.where(col != 0, steps, nonzero[0]))
        x[:, j] = col[last]
    return x


def inject_faults(
    data: np.ndarray, *, start: int = 0, seed: int = 0, config: FaultConfig | None = None
) -> FaultyData:
    """Inject ``config``'s spikes, stuck stretches and drifts into rows ``[start, n)``.

    Parameters
    ----------
    data : array-like of shape (n_samples, n_features)
        Clean readings (lux), finite; not modified.
    start : int, default=0
        First row that may be faulty (e.g. the end of a training prefix).
    seed : int, default=0
        Seed of `numpy.random.default_rng`; the same seed gives the same faults.
    config : FaultConfig or None, default=None
        None means ``FaultConfig()``.

    Returns
    -------
    FaultyData

    Raises
    ------
    ValueError
        If ``data`` is not 2-D, ``start`` is out of range or the events do not fit in
        ``n_samples - start`` rows, or no mote changes enough over a stuck stretch.
    """
    cfg = FaultConfig() if config is None else config
    x = np.array(data, dtype=np.float64, copy=True)
    if x.ndim != 2:
        raise ValueError(f"data must be 2-D (n_samples, n_features), got shape {x.shape}")
    n = x.shape[0]
    if not 0 <= start < n:
        raise ValueError(f"start must be in [0, {n}), got {start}")
    rng = np.random.default_rng(seed)
    # One slot per event, long enough for the event plus a clean step after it.
    lengths = (
        [1] * cfg.n_spikes + [cfg.stuck_length] * cfg.n_stuck + [cfg.drift_length] * cfg.n_drift
    )
    kinds = [1] * cfg.n_spikes + [2] * cfg.n_stuck + [3] * cfg.n_drift
    need = sum(length + 1 for length in lengths)
    if need > n - start:
        raise ValueError(f"faults need {need} rows after start {start}, only {n - start} left")
    for _ in range(MAX_LAYOUTS):
        out = _try_layout(x, start, lengths, kinds, cfg, rng)
        if out is not None:
            return out
    raise ValueError(
        f"no layout in {MAX_LAYOUTS} draws puts every stuck stretch where a mote changes by "
        f"{cfg.stuck_min_effect} lux; lower stuck_min_effect or n_stuck"
    )


def _try_layout(
    clean: np.ndarray,
    start: int,
    lengths: list[int],
    kinds: list[int],
    cfg: FaultConfig,
    rng: np.random.Generator,
) -> FaultyData | None:
    """One random placement of the events, or None if a stuck stretch has no visible mote."""
    x = clean.copy()
    n, d = x.shape
    need = sum(length + 1 for length in lengths)
    order = rng.permutation(len(lengths))
    # Spread the free rows at random between the slots.
    gaps = rng.multinomial(n - start - need, np.full(len(lengths) + 1, 1.0 / (len(lengths) + 1)))
    labels = np.zeros(n, dtype=np.int8)
    motes = np.full(n, -1, dtype=np.int64)
    row = start
    for slot, event in enumerate(order):
        row += int(gaps[slot])
        kind, length = kinds[event], lengths[event]
        span = slice(row, row + length)
        if kind == 1:
            mote = int(rng.integers(d))
            x[row, mote] += cfg.spike_offset
        elif kind == 2:
            last = clean[max(row - 1, 0)].copy()
            if cfg.stuck_value is not None:
                last[:] = cfg.stuck_value
            effect = np.abs(clean[span] - last).mean(axis=0)
            candidates = np.flatnonzero(effect >= cfg.stuck_min_effect)
            if candidates.size == 0:
                return None
            mote = int(rng.choice(candidates))
            x[span, mote] = last[mote]
        else:
            mote = int(rng.integers(d))
            x[span, mote] += np.linspace(cfg.drift_total / length, cfg.drift_total, length)
        labels[span] = kind
        motes[span] = mote
        row += length + 1
    return FaultyData(x, labels, motes)
