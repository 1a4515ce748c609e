"""scikit-learn's IncrementalPCA (Ross, Lim, Lin, Yang, IJCV 77, 2008: sequential
Karhunen-Loeve with a mean update) fed fixed batches, with the baselines' interface.

It always centres: its basis is the principal subspace of the covariance, not of the raw
second moments the others (and the FPCA paper's offline SVD) estimate, hence ``centers``.
scikit-learn is imported when one is created, not with the package.
"""

from __future__ import annotations

import numpy as np

from benchmarks.baselines._common import Baseline, as_rows, pieces
from edge_runtime.fpca._validation import check_int

__all__ = ["IncrementalPCA"]


class IncrementalPCA(Baseline):
    """``sklearn.decomposition.IncrementalPCA(n_components=rank)`` (``estimator_``) fitted per
    full batch of ``batch_size`` >= ``rank`` rows (default ``max(rank, 50)``, FPCA-Edge's block)
    whatever the chunking. ImportError without scikit-learn."""

    name = "IncrementalPCA"
    centers = True
    _shown = ("batch_size",)

    def __init__(self, n_features: int, rank: int, batch_size: int | None = None) -> None:
        try:
            from sklearn.decomposition import IncrementalPCA as Sklearn
        except ImportError as exc:
            raise ImportError(
                "the IncrementalPCA baseline needs scikit-learn, an optional benchmark "
                "extra: pip install 'edge-runtime[bench]'"
            ) from exc
        self._estimator_class = Sklearn
        super().__init__(n_features, rank)
        self.batch_size = (
            max(self.rank, 50) if batch_size is None else check_int(batch_size, "batch_size", 1)
        )
        if self.batch_size < self.rank:
            raise ValueError(f"batch_size must be >= rank {self.rank}, got {self.batch_size}")
        self.reset()

    def reset(self) -> IncrementalPCA:
        """Forget all samples: a new, unfitted scikit-learn estimator."""
        self.estimator_ = self._estimator_class(n_components=self.rank, batch_size=self.batch_size)
        self._buffer = np.empty((self.batch_size, self.n_features))
        self._n_pending = 0
        self.n_samples_seen_ = 0
        return self

    def partial_fit(self, X: np.ndarray) -> IncrementalPCA:  # noqa: N803 (scikit-learn name)
        """Buffer the rows of ``X`` ``(n_samples, n_features)``; fit each full batch."""
        x = as_rows(X, self.n_features)
        for piece in pieces(x, lambda: self.batch_size - self._n_pending):
            self._buffer[self._n_pending : self._n_pending + len(piece)] = piece
            self._n_pending += len(piece)
            if self._n_pending == self.batch_size:
                self.estimator_.partial_fit(self._buffer)
                self._n_pending = 0
        self.n_samples_seen_ += x.shape[0]
        return self

    @property
    def basis(self) -> np.ndarray:
        """``components_.T`` ``(n_features, rank)`` float64 after the last full batch (the
        first ``rank`` columns of the identity before one)."""
        components = getattr(self.estimator_, "components_", None)
        if components is None:
            return np.eye(self.n_features, self.rank)
        return np.array(components.T, dtype=np.float64)
