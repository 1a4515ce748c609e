"""Baseline streaming detectors of the event benchmark.

Each is built from the clean warm-up readings (n_warmup, n_features) and has ``update(x, t)
-> (alarm, sensor)`` for one reading ``x`` (n_features,) at ``t`` seconds, ``sensor`` the
suspected column or -1.
"""

from __future__ import annotations

import numpy as np

from benchmarks.anomaly.inject import MAD_TO_SIGMA, noise_sigma
from benchmarks.anomaly.precision_recall import ALPHA, OVERSAMPLE, RANK, fit

__all__ = ["HalfSpaceTreesDetector", "RobustZ", "StaticLimits"]


class StaticLimits:
    """The static leaf rule, ``Q > Q_alpha or T^2 > T^2_alpha`` with a model fitted once on
    ``warmup`` (`precision_recall.fit_scorer`; with few features the rank is capped at
    ``n_features // 3``, the oversampling at ``n_features - rank``); the suspect is the
    largest per-feature contribution to Q (``e_j^2``, the contribution plot)."""

    def __init__(
        self, warmup: np.ndarray, rank: int = RANK, oversample: int = OVERSAMPLE,
        alpha: float = ALPHA,
    ) -> None:
        d = warmup.shape[1]
        rank = min(rank, max(1, d // 3))
        model, self.scorer = fit(warmup, rank, min(oversample, d - rank), alpha)
        self._basis = np.ascontiguousarray(model.basis[:, :rank])
        self._mean = np.asarray(model.mean)

    def update(self, x: np.ndarray, t: float) -> tuple[bool, int]:
        """Flag one reading ``x`` (n_features,); suspect = largest contribution to Q."""
        xc = x - self._mean
        resid = xc - self._basis @ (self._basis.T @ xc)
        scores = self._basis.T @ xc
        t2 = float(scores**2 @ (1.0 / self.scorer.eigenvalues_))
        alarm = float(resid @ resid) > self.scorer.q_limit_ or t2 > self.scorer.t2_limit_
        return alarm, int(np.argmax(resid * resid)) if alarm else -1


class RobustZ:
    """Per sensor, the robust z-score of the first difference against the median and MAD
    of the last ``window`` differences (120: an hour of Motes; the warm-up's fill it); alarm
    when some ``|z_j|`` exceeds ``threshold`` (3.5, Iglewicz & Hoaglin's cut-off), suspect
    ``argmax_j |z_j|``. The MAD is floored at `inject.noise_sigma` of the warm-up (held
    readings make it 0 on most motes)."""

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
    """river's ``HalfSpaceTrees`` (10 trees, height 8, window 250, per-feature limits from
    the warm-up's range, ``seed``) in a ``QuantileFilter(q)`` (0.999), learning every reading
    (the filter keeps alarmed ones out) starting with the warm-up; no suspect. river is the
    ``bench`` extra's dependency, imported here."""

    def __init__(self, warmup: np.ndarray, q: float = 0.999, seed: int = 0) -> None:
        from river import anomaly  # benchmark-only dependency

        w = np.asarray(warmup, dtype=np.float64)
        lo, hi = w.min(axis=0), w.max(axis=0)
        hi = np.where(hi > lo, hi, lo + 1.0)
        limits = {j: (float(lo[j]), float(hi[j])) for j in range(w.shape[1])}
        trees = anomaly.HalfSpaceTrees(
            n_trees=10, height=8, window_size=250, limits=limits, seed=seed)
        self._filter = anomaly.QuantileFilter(trees, q=q)
        for row in w:
            self.update(row, 0.0)

    def update(self, x: np.ndarray, t: float) -> tuple[bool, int]:
        """Flag one reading ``x`` (n_features,); no suspect (-1)."""
        features = dict(enumerate(np.asarray(x, dtype=np.float64).tolist()))
        alarm = bool(self._filter.classify(self._filter.score_one(features)))
        self._filter.learn_one(features)
        return alarm, -1
