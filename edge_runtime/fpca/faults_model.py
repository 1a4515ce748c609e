"""A lagged, exponentially weighted PCA model with leave-one-out residuals (fault detection).

`LaggedPCA` tracks the exponentially weighted mean and covariance of the vectors it
learns (recursive PCA, Li, Yue, Valle-Cervantes, Qin, J. Process Control 10(5), 2000)
and scores new vectors against a rank-``r`` basis that *lags*: the basis in use is
recomputed every ``refresh`` vectors from the covariance as it was at the previous
refresh, an N-step-ahead model (Wang, Kruger, Irwin, Ind. Eng. Chem. Res. 44(15), 2005)
so that a slow fault is scored before it is learned.

The score of coordinate ``j`` is its leave-one-out residual, the part of ``y_j`` the other
coordinates do not predict: with the residual ``e = y - V V^T y`` and the leverage ``h_j =
||V_j||^2``, ``loo_j = e_j / (1 - h_j)`` (the PRESS residual; it equals ``y_j`` minus the
prediction of ``y_j`` from the scores fitted to the other coordinates, since ``V^T V =
I``).

Pure numpy. Memory: two ``(d, d)`` float64 matrices, the ``(d, r)`` basis and three ``(d,)``
vectors: ``8 (2 d^2 + d r + 3 d)`` bytes. `learn` is ``O(d^2)``; `loo` is ``O(d r)``;
every ``refresh`` learned vectors one ``O(d^3)`` eigendecomposition.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MIN_1MH", "LaggedPCA"]

#: Floor of ``1 - h_j``: a sensor the basis almost spans alone (leverage near 1) would
#: have its leave-one-out residual amplified without bound (``1 / (1 - h)``), and the
#: detector's imputation of a flagged sensor from it diverged on 9 accelerometer axes
#: with rank 8 (Daphnet); 0.1 caps the amplification at 10.
MIN_1MH = 0.1


class LaggedPCA:
    """Exponentially weighted PCA whose scoring basis lags by one refresh period.

    Parameters
    ----------
    n_features : int
        Dimension ``d``.
    rank : int
        Basis directions ``r``, ``0 <= r < d`` (0: ``loo = y - mean``).
    forget : float
        Weight ``f`` in (0, 1) of the past per learned vector (half-life ``log 0.5 / log
        f`` vectors).
    refresh : int
        Calls of `tick` between basis refreshes, >= 1.
    centered : bool
        Track a mean (levels) or not (changes, whose mean is ~0).

    Attributes
    ----------
    mean : ndarray of shape (d,)
        Zero if not ``centered``.
    basis : ndarray of shape (d, r)
        The basis in use (orthonormal columns).
    """

    def __init__(
        self, n_features: int, rank: int, forget: float, refresh: int, centered: bool
    ) -> None:
        d = int(n_features)
        self.rank = int(rank)
        self.forget = float(forget)
        self.refresh = int(refresh)
        self.centered = bool(centered)
        self.mean = np.zeros(d)
        self._cov = np.zeros((d, d))
        self._snapshot = np.zeros((d, d))
        self.basis = np.zeros((d, self.rank))
        self._inv1mh = np.ones(d)
        self._ticks = 0

    def fit(self, Y: np.ndarray) -> None:  # noqa: N803
        """Initialise mean, covariance and basis from a batch ``Y`` of shape (n, d)."""
        self.mean = Y.mean(axis=0) if self.centered else np.zeros(Y.shape[1])
        yc = Y - self.mean
        self._cov = yc.T @ yc / max(len(Y), 1)
        self._snapshot = self._cov.copy()
        self._activate(self._cov)

    def _activate(self, cov: np.ndarray) -> None:
        if self.rank == 0:
            return
        _, vecs = np.linalg.eigh(cov)
        self.basis = np.ascontiguousarray(vecs[:, ::-1][:, : self.rank])
        h = np.einsum("ij,ij->i", self.basis, self.basis)
        self._inv1mh = 1.0 / np.maximum(1.0 - h, MIN_1MH)

    def loo(self, y: np.ndarray, exclude: int = -1) -> np.ndarray:
        """Leave-one-out residuals of ``y`` (shape (d,)) against the lagged basis.

        With ``exclude = j >= 0`` the scores are fitted without coordinate ``j`` (a rank-
        one downdate of ``V^T V = I``), so a fault on ``j`` does not leak into the others'
        residuals; ``j``'s own entry is then ``y_j`` minus its prediction from the others.

        Returns
        -------
        ndarray of shape (d,)
            Units of ``y``.
        """
        yc = y - self.mean
        if self.rank == 0:
            return yc
        v = self.basis
        t = v.T @ yc
        if exclude < 0:
            return (yc - v @ t) * self._inv1mh
        u = v[exclude]
        t = t - u * yc[exclude]
        t += u * (float(u @ t) / max(1.0 - float(u @ u), MIN_1MH))
        fit = v @ t
        out = (yc - fit) * self._inv1mh
        out[exclude] = yc[exclude] - fit[exclude]
        return out

    def learn(self, y: np.ndarray) -> None:
        """Add ``y`` (shape (d,)) to the weighted mean and covariance."""
        f = self.forget
        if self.centered:
            self.mean += (1.0 - f) * (y - self.mean)
        yc = y - self.mean
        self._cov *= f
        self._cov += (1.0 - f) * np.outer(yc, yc)

    def tick(self) -> None:
        """Count one vector; every ``refresh`` ticks the lagged covariance becomes the basis."""
        self._ticks += 1
        if self._ticks >= self.refresh:
            self._ticks = 0
            self._activate(self._snapshot)
            self._snapshot = self._cov.copy()

    @property
    def nbytes(self) -> int:
        """Bytes of array state (fixed)."""
        arrays = (self.mean, self._cov, self._snapshot, self.basis, self._inv1mh)
        return int(sum(a.nbytes for a in arrays))
