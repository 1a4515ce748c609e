"""Baseline streaming detectors for the event benchmark (issue 25), benchmark-only.

Every detector has ``update(x, t) -> (alarm, sensor)`` for one reading ``x`` of shape
``(n_features,)`` at time ``t`` (seconds), ``sensor`` being the suspected column or -1,
and is built by a factory from the clean warm-up readings (shape ``(n_warmup,
n_features)``):

- `StaticLimits`: today's leaf rule, ``Q > Q_alpha`` or ``T^2 > T^2_alpha`` with the
  Jackson-Mudholkar and F limits of `edge_runtime.fpca.scoring` (rank 10, oversampling
  10, alpha 0.01, model fitted once on the warm-up as `precision_recall.fit_scorer`; with
  fewer than 30 features the rank is ``n_features // 3``); the
  suspect is the largest per-feature contribution to Q (``e_j^2``, the contribution plot).
- `RobustZ`: per sensor, the robust z-score of the first difference against the rolling
  median and MAD of the last ``window`` (120) differences; alarm when ``max_j |z_j| >
  3.5`` (Iglewicz & Hoaglin's cut-off for the modified z-score), suspect ``argmax_j
  |z_j|``. The MAD is floored at the sensor's `inject.noise_sigma` of the warm-up: held
  readings make it 0 on most motes.
- `HalfSpaceTreesDetector`: river's ``HalfSpaceTrees`` (10 trees, height 8, window 250,
  per-feature limits from the warm-up's range) inside ``QuantileFilter(q=0.999)``,
  learning every reading (the filter keeps alarmed readings out of the trees); no suspect.
  river is the ``bench`` extra's dependency, imported lazily.
"""

from __future__ import annotations

import numpy as np

from benchmarks.anomaly.inject import MAD_TO_SIGMA, noise_sigma
from benchmarks.anomaly.precision_recall import ALPHA, OVERSAMPLE, RANK
from edge_runtime.fpca import FPCAEdge
from edge_runtime.fpca.scoring import AnomalyScorer, total_energy

__all__ = ["HalfSpaceTreesDetector", "RobustZ", "StaticLimits"]


class StaticLimits:
    """Q / T^2 over fixed limits from a model fitted once on the warm-up.

    Parameters
    ----------
    warmup : ndarray of shape (n_warmup, n_features)
        Clean readings, ``n_warmup > rank``.
    rank, oversample, alpha
        As `benchmarks.anomaly.precision_recall.fit_scorer`; with few features the rank
        is capped at ``n_features // 3`` (at least 1) and the oversampling at
        ``n_features - rank`` (Motes light: 10 and 10, as the leaves).
    """

    def __init__(
        self,
        warmup: np.ndarray,
        rank: int = RANK,
        oversample: int = OVERSAMPLE,
        alpha: float = ALPHA,
    ) -> None:
        d = warmup.shape[1]
        rank = min(rank, max(1, d // 3))
        oversample = min(oversample, d - rank)
        est = FPCAEdge(d, rank, oversample=oversample, center=True).fit(warmup)
        model = est.tracked_subspace
        self.scorer = AnomalyScorer(
            model, alpha, rank=rank, total_energy=total_energy(warmup, centered=True)
        )
        self._basis = np.ascontiguousarray(model.basis[:, :rank])
        self._mean = np.asarray(model.mean)

    def update(self, x: np.ndarray, t: float) -> tuple[bool, int]:
        """Flag one reading ``x`` (n_features,); suspect = largest contribution to Q."""
        xc = x - self._mean
        resid = xc - self._basis @ (self._basis.T @ xc)
        q = float(resid @ resid)
        scores = self._basis.T @ xc
        t2 = float(scores**2 @ (1.0 / self.scorer.eigenvalues_))
        alarm = q > self.scorer.q_limit_ or t2 > self.scorer.t2_limit_
        return alarm, int(np.argmax(resid * resid)) if alarm else -1


class RobustZ:
    """Per-sensor robust z-score of first differences over a rolling window.

    Parameters
    ----------
    warmup : ndarray of shape (n_warmup, n_features)
        Clean readings; its last ``window`` differences fill the window, its
        `noise_sigma` floors the MAD.
    window : int, default=120
        Differences in the rolling median / MAD (120 readings: an hour of Motes).
    threshold : float, default=3.5
        Alarm when some ``|z_j|`` exceeds it.
    """

    def __init__(self, warmup: np.ndarray, window: int = 120, threshold: float = 3.5) -> None:
        w = np.asarray(warmup, dtype=np.float64)
        self.threshold = threshold
        self._floor = noise_sigma(w)
        diff = np.diff(w, axis=0)[-window:]
        self._buf = np.zeros((window, w.shape[1]))
        self._buf[-len(diff) :] = diff
        self._i = 0
        self._last = w[-1].copy()

    def update(self, x: np.ndarray, t: float) -> tuple[bool, int]:
        """Flag one reading ``x`` (n_features,); suspect = largest ``|z|``."""
        d = x - self._last
        self._last = np.asarray(x, dtype=np.float64).copy()
        med = np.median(self._buf, axis=0)
        mad = MAD_TO_SIGMA * np.median(np.abs(self._buf - med), axis=0)
        z = np.abs(d - med) / np.maximum(mad, self._floor)
        self._buf[self._i] = d
        self._i = (self._i + 1) % len(self._buf)
        j = int(np.argmax(z))
        alarm = bool(z[j] > self.threshold)
        return alarm, j if alarm else -1


class HalfSpaceTreesDetector:
    """river's HalfSpaceTrees in a QuantileFilter, warmed on the warm-up.

    Parameters
    ----------
    warmup : ndarray of shape (n_warmup, n_features)
        Clean readings: learnt one by one, and their per-feature range sets the trees'
        limits.
    q : float, default=0.999
        Quantile of the filter: a reading is an alarm when its score reaches it.
    seed : int, default=0
        Seed of the trees.
    """

    def __init__(self, warmup: np.ndarray, q: float = 0.999, seed: int = 0) -> None:
        from river import anomaly  # benchmark-only dependency

        w = np.asarray(warmup, dtype=np.float64)
        lo, hi = w.min(axis=0), w.max(axis=0)
        hi = np.where(hi > lo, hi, lo + 1.0)
        limits = {j: (float(lo[j]), float(hi[j])) for j in range(w.shape[1])}
        self._filter = anomaly.QuantileFilter(
            anomaly.HalfSpaceTrees(n_trees=10, height=8, window_size=250, limits=limits, seed=seed),
            q=q,
        )
        for row in w:
            self._step(row)

    def _step(self, x: np.ndarray) -> bool:
        features = dict(enumerate(np.asarray(x, dtype=np.float64).tolist()))
        alarm = bool(self._filter.classify(self._filter.score_one(features)))
        self._filter.learn_one(features)
        return alarm

    def update(self, x: np.ndarray, t: float) -> tuple[bool, int]:
        """Flag one reading ``x`` (n_features,); no suspect (-1)."""
        return self._step(x), -1
