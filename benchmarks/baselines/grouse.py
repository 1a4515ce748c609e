"""GROUSE: geodesic gradient steps on the Grassmannian, one sample at a time (baseline).

Source: Balzano, Nowak, Recht, "Online identification and tracking of subspaces from highly
incomplete information", Allerton 2010 (arXiv:1006.4046), Alg. 1 with every entry observed.
For orthonormal ``U`` ``(n_features, rank)`` and a sample ``x``: ``w = U^T x``, ``p = U w``,
``r = x - p``, ``theta = eta_t ||r|| ||p||`` and

    U <- U + ((cos(theta) - 1) p / ||p|| + sin(theta) r / ||r||) w^T / ||w||,

which keeps ``U`` orthonormal and turns its span towards ``x`` by ``theta``. As the authors'
MATLAB code: ``eta_t = C / t`` (``schedule="inverse"``) and steps with ``theta >= pi / 2``
skipped; ``"constant"`` (``eta_t = C``) tracks a drifting subspace. ``theta`` scales with the
square of the data, so ``normalize=True`` divides ``eta_t`` by the running mean of ``||x||^2``
(scale invariant). Random orthonormal start from ``default_rng(seed)``; not centred.
"""

from __future__ import annotations

import math

import numpy as np

from benchmarks.baselines._common import Baseline, as_rows, orthonormalize
from edge_runtime.fpca._validation import check_int

__all__ = ["GROUSE"]

SCHEDULES = ("inverse", "constant")


class GROUSE(Baseline):
    """GROUSE: ``O(n_features rank)`` memory and time per sample. ``eta`` > 0 is ``C`` (100 with
    ``normalize`` recovers static subspaces in one pass; drifting streams favour small ``C``,
    about 0.1 with ``"constant"``); ``n_skipped_`` counts samples that gave no step."""

    name = "GROUSE"
    _shown = ("eta", "schedule")

    def __init__(
        self, n_features: int, rank: int, *, eta: float = 100.0, schedule: str = "inverse",
        normalize: bool = True, seed: int = 0,
    ) -> None:  # fmt: skip
        super().__init__(n_features, rank)
        self.eta = float(eta)
        if not (self.eta > 0.0 and math.isfinite(self.eta)):
            raise ValueError(f"eta must be a finite number > 0, got {eta!r}")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        self.schedule = schedule
        self.normalize = bool(normalize)
        self.seed = check_int(seed, "seed", 0)
        self.reset()

    def reset(self) -> GROUSE:
        """Forget all samples: a new random basis from ``default_rng(seed)``."""
        rng = np.random.default_rng(self.seed)
        self._u = orthonormalize(rng.standard_normal((self.n_features, self.rank)))
        self._sum_sq_norm = 0.0
        self.n_samples_seen_ = 0
        self.n_skipped_ = 0
        return self

    def partial_fit(self, X: np.ndarray) -> GROUSE:  # noqa: N803 (scikit-learn name)
        """One step per row of ``X`` ``(n_samples, n_features)``; any chunking, same basis."""
        x = as_rows(X, self.n_features)
        u = self._u
        for row in x:  # one step per sample
            self.n_samples_seen_ += 1
            t = self.n_samples_seen_
            self._sum_sq_norm += float(row @ row)
            eta = self.eta / t if self.schedule == "inverse" else self.eta
            if self.normalize:
                eta /= max(self._sum_sq_norm / t, np.finfo(float).tiny)
            w = u.T @ row
            p = u @ w
            r = row - p
            norm_w = math.sqrt(float(w @ w))  # = ||p|| as u is orthonormal
            norm_r = math.sqrt(float(r @ r))
            theta = eta * norm_r * norm_w
            if norm_w == 0.0 or norm_r == 0.0 or not theta < math.pi / 2:
                self.n_skipped_ += 1
                continue
            step = (math.cos(theta) - 1.0) / norm_w * p + math.sin(theta) / norm_r * r
            u += np.outer(step, w / norm_w)
        return self

    @property
    def basis(self) -> np.ndarray:
        """``U`` re-orthonormalised by a QR (rounding drift), ``(n_features, rank)`` float64."""
        return orthonormalize(self._u)
