"""SPIRIT: PAST-based tracking of ``k = rank`` weight vectors with forgetting (baseline).

Source: Papadimitriou, Sun, Faloutsos, "Streaming pattern discovery in multiple time-series",
VLDB 2005, Alg. TrackW: the deflation form (PASTd) of Yang, "Projection approximation subspace
tracking", IEEE Trans. Signal Process. 43(1), 1995. From ``w_i = e_i``, ``d_i = d_0``, per
sample ``x_1 = x`` and ``i = 1 .. k``:

    y_i = w_i^T x_i,  d_i <- lambda d_i + y_i^2,  w_i <- w_i + (y_i / d_i)(x_i - y_i w_i),
    x_{i+1} = x_i - y_i w_i.

The weights follow about the last ``1 / (1 - lambda)`` samples; ``lambda = 1`` targets the
whole stream. They are only near orthonormal, so `SPIRIT.basis` is their Q factor. ``k`` is
fixed (the paper's energy thresholding of ``k`` was not stable enough here for a fair
baseline). Not centred.
"""

from __future__ import annotations

import math

import numpy as np

from benchmarks.baselines._common import Baseline, as_rows, orthonormalize

__all__ = ["SPIRIT"]


class SPIRIT(Baseline):
    """SPIRIT / PASTd: ``O(n_features rank)`` memory and time per sample. ``forget`` is
    ``lambda`` in (0, 1] (the paper's 0.96), ``init_energy`` > 0 is ``d_0`` (0.01, as the
    authors' code)."""

    name = "SPIRIT"
    _shown = ("forget",)

    def __init__(
        self, n_features: int, rank: int, *, forget: float = 0.96, init_energy: float = 0.01
    ) -> None:
        super().__init__(n_features, rank)
        self.forget = float(forget)
        if not 0.0 < self.forget <= 1.0:
            raise ValueError(f"forget must be in (0, 1], got {forget!r}")
        self.init_energy = float(init_energy)
        if not (self.init_energy > 0.0 and math.isfinite(self.init_energy)):
            raise ValueError(f"init_energy must be a finite number > 0, got {init_energy!r}")
        self.reset()

    def reset(self) -> SPIRIT:
        """Forget all samples: ``w_i = e_i`` and ``d_i = init_energy``."""
        self._w = np.eye(self.rank, self.n_features)  # rows w_1 .. w_k
        self._d = [self.init_energy] * self.rank
        self.n_samples_seen_ = 0
        return self

    def partial_fit(self, X: np.ndarray) -> SPIRIT:  # noqa: N803 (scikit-learn name)
        """One TrackW update per row of ``X`` ``(n_samples, n_features)``; any chunking."""
        x = as_rows(X, self.n_features)
        lam, energies = self.forget, self._d
        for row in x:  # TrackW, one sample at a time
            residual = row.copy()
            for i, w in enumerate(self._w):  # w is a view: row i of _w, updated in place
                y = float(w @ residual)
                energies[i] = lam * energies[i] + y * y
                w += (y / energies[i]) * (residual - y * w)
                residual -= y * w
        self.n_samples_seen_ += x.shape[0]
        return self

    @property
    def weights(self) -> np.ndarray:
        """Copy of the weight vectors as columns, ``(n_features, rank)`` (not orthonormal)."""
        return self._w.T.copy()

    @property
    def basis(self) -> np.ndarray:
        """Q factor of the weights, ``(n_features, rank)`` float64, orthonormal."""
        return orthonormalize(self._w.T)
