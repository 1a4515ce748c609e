"""How far any alpha = 0.01 limit could go: recall at a fixed clean false-alarm rate.

The runtime flags a reading when ``Q > Q_alpha`` or ``T^2 > T^2_alpha``, i.e. when
``s = max(Q / Q_alpha, T^2 / T^2_alpha) > 1``. A better calibrated limit for the same
model is a threshold ``c`` on ``s`` other than 1; the *oracle* picks ``c`` from the clean
readings themselves so that exactly a fraction ``rate`` of them is flagged (``rate =
alpha`` is what a perfectly calibrated alpha-level limit would give), and reports the
fraction of faulty readings above that ``c``. No limit computed from the model, however
good, can do better at that false-alarm rate: the oracle is an upper bound on recall.

The model is the most favourable one: ``FPCAEdge`` fitted on *all* the clean readings
(the root's model at the end of a replay). Each fault variant changes one mote in
``n_cases`` readings drawn at random (seeded), one reading at a time, and a case counts
only when it changes the reading by at least ``min_effect`` (a stuck mote that happens
to sit at its true value is no fault).

From the recall ``R`` at false-alarm rate ``F``, the share ``p`` of faulty readings that
precision 0.9 needs is ``p / (1 - p) >= 9 F / R`` (precision ``= p R / (p R + (1 - p) F)``).
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
    """Recall of one fault variant at the oracle threshold for each false-alarm rate."""

    variant: str
    cases: int
    recall: dict[float, float]


def scaled_score(scorer: AnomalyScorer, x: np.ndarray) -> np.ndarray:
    """``max(Q / Q_alpha, T^2 / T^2_alpha)`` per reading: > 1 exactly where it is flagged.

    Parameters
    ----------
    scorer : AnomalyScorer
        Its limits ``q_limit_`` (Jackson-Mudholkar) and ``t2_limit_`` (F) scale the scores.
    x : ndarray of shape (n_samples, n_features)
        Readings in the model's units.

    Returns
    -------
    ndarray of shape (n_samples,)
        Dimensionless, >= 0.
    """
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
    data: np.ndarray,
    *,
    rates: tuple[float, ...] = (0.01, 0.001),
    rank: int = 10,
    oversample: int = 10,
    alpha: float = 0.01,
    n_cases: int = 2000,
    min_effect: float = 50.0,
    seed: int = 0,
) -> tuple[list[OracleRow], dict[str, np.ndarray], np.ndarray]:
    """Recall at each clean false-alarm rate per `VARIANTS` entry, and the raw scores.

    Parameters
    ----------
    data : ndarray of shape (n_samples, n_features)
        Clean readings (lux), ``n_samples > 50``.
    rates : tuple of float, default=(0.01, 0.001)
        Clean false-alarm rates in (0, 1) at which the recall is measured.
    rank, oversample, alpha : int, int, float
        The model and limits (`precision_recall.fit_scorer`).
    n_cases : int, default=2000
        Readings drawn per variant (rows 50 onwards, seeded) before ``min_effect``.
    min_effect : float, default=50.0
        Least change (lux) of the faulty mote's reading for a case to count.
    seed : int, default=0
        Seed of `numpy.random.default_rng` for the cases.

    Returns
    -------
    rows : list of OracleRow
    faulty : dict of str to ndarray of shape (cases,)
        `scaled_score` of the faulty readings per variant (for ROC curves).
    clean : ndarray of shape (n_samples,)
        `scaled_score` of the clean readings.
    """
    n, d = data.shape
    scorer = fit_scorer(data, rank=rank, oversample=oversample, alpha=alpha)
    clean = scaled_score(scorer, data)
    rng = np.random.default_rng(seed)
    rows_at = rng.integers(50, n, n_cases)
    motes = rng.integers(0, d, n_cases)
    back = rng.integers(1, 51, n_cases)
    true = data[rows_at, motes]
    past = data[rows_at - back, motes]
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
