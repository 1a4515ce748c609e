"""How far any alpha = 0.01 limit could go: recall at a fixed clean false-alarm rate.

A reading is flagged when ``s = max(Q / Q_alpha, T^2 / T^2_alpha) > 1``; the *oracle* puts
the threshold on ``s`` where exactly a share ``rate`` of the clean readings exceeds it (a
perfectly calibrated limit) and reports the share of faulty readings above it: no limit of
the same model does better at that false-alarm rate. The model is the most favourable one,
``FPCAEdge`` fitted on all the clean readings. Each variant changes one mote in ``n_cases``
readings drawn at random (seeded), kept when the change is at least ``min_effect``. Precision
0.9 at recall ``R`` and false-alarm rate ``F`` needs a faulty share ``p / (1 - p) >= 9 F / R``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from benchmarks.anomaly.precision_recall import fit_scorer
from edge_runtime.fpca.scoring import AnomalyScorer

__all__ = ["FULL_SCALE", "VARIANTS", "OracleRow", "needed_share", "oracle", "scaled_score"]

#: The Motes light sensor's largest reading (lux): it saturates there.
FULL_SCALE = 1847.36

#: name -> how the variant changes the true value ``v`` of a mote, given the value ``past``
#: the mote had 1..50 steps earlier (``lux``).
VARIANTS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "spike +3000 lux": lambda v, past: v + 3000.0,
    "spike +1000 lux": lambda v, past: v + 1000.0,
    "stuck at last value": lambda v, past: past,
    "stuck at 0 lux": lambda v, past: np.zeros_like(v),
    "stuck at full scale": lambda v, past: np.full_like(v, FULL_SCALE),
    "drift +300 lux": lambda v, past: v + 300.0,
}


@dataclass(frozen=True)
class OracleRow:
    """Recall of one fault variant at the oracle threshold, by false-alarm rate."""

    variant: str
    cases: int
    recall: dict[float, float]


def scaled_score(scorer: AnomalyScorer, x: np.ndarray) -> np.ndarray:
    """``max(Q / Q_alpha, T^2 / T^2_alpha)`` per reading of ``x`` (n_samples, n_features):
    shape (n_samples,), dimensionless, > 1 exactly where the reading is flagged."""
    s = scorer.score(x)
    return np.maximum(s.q / scorer.q_limit_, s.t2 / scorer.t2_limit_)


def needed_share(recall: float, rate: float, precision: float = 0.9) -> float:
    """The share of faulty readings that ``precision`` needs at ``recall`` and false-alarm
    ``rate`` (1.0 when ``recall`` is 0)."""
    if recall <= 0.0:
        return 1.0
    odds = precision / (1.0 - precision) * rate / recall
    return odds / (1.0 + odds)


def oracle(
    data: np.ndarray, *, rates: tuple[float, ...] = (0.01, 0.001), rank: int = 10,
    oversample: int = 10, alpha: float = 0.01, n_cases: int = 2000, min_effect: float = 50.0,
    seed: int = 0,
) -> tuple[list[OracleRow], dict[str, np.ndarray], np.ndarray]:
    """Recall at each clean false-alarm rate in ``rates`` per `VARIANTS` entry on ``data``
    (n_samples > 50, n_features; lux), model and limits as `precision_recall.fit_scorer`.

    Returns the rows, the `scaled_score` of each variant's faulty readings (cases,) and of
    the clean readings (n_samples,).
    """
    n, d = data.shape
    scorer = fit_scorer(data, rank=rank, oversample=oversample, alpha=alpha)
    clean = scaled_score(scorer, data)
    rng = np.random.default_rng(seed)
    rows_at, motes = rng.integers(50, n, n_cases), rng.integers(0, d, n_cases)
    back = rng.integers(1, 51, n_cases)
    true, past = data[rows_at, motes], data[rows_at - back, motes]
    rows, faulty = [], {}
    for name, change in VARIANTS.items():
        value = change(true, past)
        keep = np.abs(value - true) >= min_effect
        x = data[rows_at[keep]].copy()
        x[np.arange(int(keep.sum())), motes[keep]] = value[keep]
        s = scaled_score(scorer, x)
        faulty[name] = s
        recall = {rate: float(np.mean(s > np.quantile(clean, 1.0 - rate))) for rate in rates}
        rows.append(OracleRow(name, int(keep.sum()), recall))
    return rows, faulty, clean
