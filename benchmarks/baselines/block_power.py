"""Block-stochastic power method for streaming PCA (baseline).

Source: Mitliagkas, Caramanis, Jain, "Memory limited, streaming PCA", NeurIPS 2013
(arXiv:1307.0032), Alg. 1. From a random orthonormal ``Q_0`` ``(n_features, rank)``, each block
of ``B`` samples is one power iteration, ``Q <- QR((1 / B) sum_t x_t x_t^T Q)``, accumulated
chunk by chunk as ``X^T (X Q)`` (never a ``d x d`` matrix). The basis is ``Q`` after the last
complete block; QR signs make ``diag(R) >= 0``. The analysis wants ``B`` of order ``d``; larger
``B`` means less noise per iteration but fewer iterations. Not centred.
"""

from __future__ import annotations

import numpy as np

from benchmarks.baselines._common import Baseline, as_rows, orthonormalize, pieces
from edge_runtime.fpca._validation import check_int

__all__ = ["BlockPower"]


class BlockPower(Baseline):
    """Block power method: memory two ``(n_features, rank)`` arrays. ``block_size`` ``B`` >= 1,
    default ``max(rank, n_features)`` as the FPCA paper's comparison (``mitliag_pm.m``: ``B =
    d``); ``seed`` seeds ``Q_0``; ``n_blocks_`` counts the iterations."""

    name = "BlockPower"
    _shown = ("block_size",)

    def __init__(
        self, n_features: int, rank: int, block_size: int | None = None, *, seed: int = 0
    ) -> None:
        super().__init__(n_features, rank)
        self.block_size = (
            max(self.rank, self.n_features)
            if block_size is None
            else check_int(block_size, "block_size", 1)
        )
        self.seed = check_int(seed, "seed", 0)
        self.reset()

    def reset(self) -> BlockPower:
        """Forget all samples: a new random ``Q_0`` from ``default_rng(seed)``."""
        rng = np.random.default_rng(self.seed)
        self._q = orthonormalize(rng.standard_normal((self.n_features, self.rank)))
        self._s = np.zeros((self.n_features, self.rank))
        self._n_pending = 0
        self.n_samples_seen_ = 0
        self.n_blocks_ = 0
        return self

    def partial_fit(self, X: np.ndarray) -> BlockPower:  # noqa: N803 (scikit-learn name)
        """Accumulate the rows of ``X`` ``(n_samples, n_features)``; iterate per full block
        (chunkings agree up to rounding: the sums are per chunk)."""
        x = as_rows(X, self.n_features)
        for chunk in pieces(x, lambda: self.block_size - self._n_pending):
            self._s += chunk.T @ (chunk @ self._q)
            self._n_pending += len(chunk)
            if self._n_pending == self.block_size:
                self._q = orthonormalize(self._s / self.block_size)
                self._s[:] = 0.0
                self._n_pending = 0
                self.n_blocks_ += 1
        self.n_samples_seen_ += x.shape[0]
        return self

    @property
    def basis(self) -> np.ndarray:
        """``Q`` after the last complete block (``Q_0`` before), ``(n_features, rank)``."""
        return self._q.copy()
