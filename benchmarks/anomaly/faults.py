"""Section (i)'s seeded fault injection, with ground-truth labels per reading (row): spikes
(+3000 lux, outside Motes light's range), stuck motes (the last value, or ``stuck_value``:
a stuck-at fault, Sharma, Golubchik & Govindan, ACM TOSN 2010; drawn among the motes whose
mean absolute change over the stretch is at least ``stuck_min_effect``) and linear drifts,
one mote per event, at non-overlapping random times in rows ``[start, n)``; every step of an
event is labelled. Everything is drawn from ``numpy.random.default_rng(seed)``.
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
    """Fault counts and sizes (lux, steps; ``stuck_value`` None: the last value)."""

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
    """``data`` (n_samples, n_features) float64, a faulty copy; ``labels`` (n_samples,) int8,
    index into `KINDS` per row (0: none); ``motes`` (n_samples,) the faulty mote or -1."""

    data: np.ndarray
    labels: np.ndarray
    motes: np.ndarray


def fill_dropouts(data: np.ndarray) -> np.ndarray:
    """A float64 copy of ``data`` (n_samples, n_features) with each zero (a Motes light
    dropout) replaced by the mote's last non-zero reading (leading zeros: its first; a mote
    never non-zero stays 0). Causal, as a device can do it. Raises ValueError if not 2-D."""
    x = _matrix(data)
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
    """Inject ``config``'s events (None: ``FaultConfig()``) into rows ``[start, n)`` of a
    copy of ``data`` (n_samples, n_features, lux); the same ``seed``, the same faults.

    Raises ValueError if ``data`` is not 2-D, ``start`` is out of range, the events do not
    fit, or no placement in `MAX_LAYOUTS` draws finds a changing mote for every stuck stretch.
    """
    cfg, x = FaultConfig() if config is None else config, _matrix(data)
    n = x.shape[0]
    if not 0 <= start < n:
        raise ValueError(f"start must be in [0, {n}), got {start}")
    rng = np.random.default_rng(seed)
    # One slot per event, long enough for the event plus a clean step after it.
    lengths = [1] * cfg.n_spikes + [cfg.stuck_length] * cfg.n_stuck
    lengths += [cfg.drift_length] * cfg.n_drift
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


def _matrix(data: np.ndarray) -> np.ndarray:
    x = np.array(data, dtype=np.float64, copy=True)
    if x.ndim != 2:
        raise ValueError(f"data must be 2-D (n_samples, n_features), got shape {x.shape}")
    return x


def _try_layout(
    clean: np.ndarray, start: int, lengths: list[int], kinds: list[int], cfg: FaultConfig,
    rng: np.random.Generator,
) -> FaultyData | None:
    """One random placement of the events, or None if a stuck stretch has no visible mote."""
    x = clean.copy()
    n, d = x.shape
    need = sum(length + 1 for length in lengths)
    order = rng.permutation(len(lengths))
    # Spread the free rows at random between the slots.
    gaps = rng.multinomial(n - start - need, np.full(len(lengths) + 1, 1.0 / (len(lengths) + 1)))
    labels, motes, row = np.zeros(n, dtype=np.int8), np.full(n, -1, dtype=np.int64), start
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
        labels[span], motes[span] = kind, mote
        row += length + 1
    return FaultyData(x, labels, motes)
