"""Thin wrapper of scikit-learn's IncrementalPCA with the baselines' interface.

Source: ``sklearn.decomposition.IncrementalPCA`` (scikit-learn), which implements
D. A. Ross, J. Lim, R.-S. Lin, M.-H. Yang, "Incremental learning for robust visual
tracking", IJCV 77, 2008 (sequential Karhunen-Loeve with a mean update): each batch
updates the components by the SVD of the previous ``S V^T`` stacked with the centred
batch and a mean-correction row.

It always centres: the components are those of the data minus the running mean, so
its basis is the principal subspace of the *covariance*, not of the raw second
moments that FPCA-Edge and the other baselines (and `edge_runtime.fpca.offline_subspace`,
uncentred as in the FPCA paper) estimate. Its error ratio against the uncentred
offline SVD is therefore not like-for-like; `IncrementalPCA.centers` is True so that
reports can say so (compare with ``FPCAEdge(center=True)``, or against a centred
offline SVD).

scikit-learn is an optional benchmark extra: it is imported when an
`IncrementalPCA` is created, not when `benchmarks.baselines` is imported.
"""

from __future__ import annotations

import numpy as np

from benchmarks.baselines._common import Baseline
from benchmarks.baselines._common import as_rows as _as_rows
from edge_runtime.fpca._validation import check_int

__all__ = ["IncrementalPCA"]

#: Default batch size: ``max(rank, DEFAULT_BATCH_SIZE)``, FPCAEdge's default block size.
DEFAULT_BATCH_SIZE = 50


class IncrementalPCA(Baseline):
    """scikit-learn ``IncrementalPCA(n_components=rank)`` fed by fixed-size batches.

    Samples are buffered into batches of ``batch_size`` rows; each full batch is one
    ``partial_fit`` call of the wrapped estimator, whatever the chunking of the
    calls to this class's `partial_fit`. Memory: the ``(batch_size, n_features)``
    buffer plus scikit-learn's state (components, mean, variances: ``O(n_features *
    rank)``). Time per batch: scikit-learn's, an SVD of a ``(rank + batch_size + 1,
    n_features)`` matrix.

    Parameters
    ----------
    n_features : int
        Dimension ``d`` of each sample, >= 1.
    rank : int
        ``n_components``, ``1 <= rank <= n_features``.
    batch_size : int or None, default=None
        Rows per ``partial_fit`` of the wrapped estimator, ``>= rank`` (scikit-learn
        requires each batch to have at least ``n_components`` rows); None means
        ``max(rank, 50)`` (FPCA-Edge's default block size, for side-by-side runs).

    Attributes
    ----------
    estimator_ : sklearn.decomposition.IncrementalPCA
        The wrapped estimator.
    n_samples_seen_ : int
        Samples passed to `partial_fit` since the last reset, including those pending
        in the incomplete batch.

    Raises
    ------
    ImportError
        If scikit-learn is not installed (``pip install edge-runtime[bench]``).
    TypeError
        If an integer parameter is not an integer.
    ValueError
        If ``rank > n_features`` or ``batch_size < rank``.

    Examples
    --------
    >>> import numpy as np
    >>> from benchmarks.baselines import IncrementalPCA
    >>> x = np.random.default_rng(0).normal(size=(200, 6))
    >>> ipca = IncrementalPCA(6, rank=2, batch_size=50).fit(x)
    >>> ipca.basis.shape, int(ipca.estimator_.n_samples_seen_)
    ((6, 2), 200)
    """

    name = "IncrementalPCA"
    #: Whether the estimate is of centred data: yes, always (see the module docstring).
    centers = True

    def __init__(self, n_features: int, rank: int, batch_size: int | None = None) -> None:
        try:
            from sklearn.decomposition import IncrementalPCA as _SklearnIncrementalPCA
        except ImportError as exc:
            raise ImportError(
                "the IncrementalPCA baseline needs scikit-learn, an optional benchmark "
                "extra: pip install 'edge-runtime[bench]'"
            ) from exc

        self._estimator_class = _SklearnIncrementalPCA
        self._set_dimensions(n_features, rank)
        self.batch_size = (
            max(self.rank, DEFAULT_BATCH_SIZE)
            if batch_size is None
            else check_int(batch_size, "batch_size", 1)
        )
        if self.batch_size < self.rank:
            raise ValueError(f"batch_size must be >= rank {self.rank}, got {self.batch_size}")
        self.reset()

    @property
    def n_tracked(self) -> int:
        """Directions of state: ``rank`` components (plus the mean and variances)."""
        return self.rank

    def reset(self) -> IncrementalPCA:
        """Forget all samples: a new, unfitted scikit-learn estimator."""
        self.estimator_ = self._estimator_class(n_components=self.rank, batch_size=self.batch_size)
        self._buffer = np.empty((self.batch_size, self.n_features))
        self._n_pending = 0
        self.n_samples_seen_ = 0
        return self

    def partial_fit(self, X: np.ndarray) -> IncrementalPCA:  # noqa: N803 (scikit-learn name)
        """Buffer rows of ``X`` ``(n_samples, n_features)``; each full batch is fitted.

        Raises
        ------
        TypeError
            If ``X`` is not numeric.
        ValueError
            If ``X`` has the wrong number of features or contains NaN or infinity.
        """
        x = _as_rows(X, self.n_features)
        n = x.shape[0]
        start = 0
        while start < n:  # one iteration per batch touched: <= n / batch_size + 1
            take = min(self.batch_size - self._n_pending, n - start)
            self._buffer[self._n_pending : self._n_pending + take] = x[start : start + take]
            self._n_pending += take
            start += take
            if self._n_pending == self.batch_size:
                self.estimator_.partial_fit(self._buffer)
                self._n_pending = 0
        self.n_samples_seen_ += n
        return self

    @property
    def basis(self) -> np.ndarray:
        """``components_.T`` after the last full batch, ``(n_features, rank)`` float64.

        Orthonormal columns (scikit-learn's signs). Before the first full batch, when
        the estimator has no components, the first ``rank`` columns of the identity.
        Samples of an incomplete batch are not yet included.
        """
        components = getattr(self.estimator_, "components_", None)
        if components is None:
            return np.eye(self.n_features, self.rank)
        return np.array(components.T, dtype=np.float64)

    def __repr__(self) -> str:
        return (
            f"IncrementalPCA(n_features={self.n_features}, rank={self.rank}, "
            f"batch_size={self.batch_size}, n_samples_seen_={self.n_samples_seen_})"
        )
