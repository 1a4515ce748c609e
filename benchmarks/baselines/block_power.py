"""Block (stochastic) power method for streaming PCA (comparison baseline).

Source: I. Mitliagkas, C. Caramanis, P. Jain, "Memory limited, streaming PCA",
NeurIPS 2013 (arXiv:1307.0032), Algorithm 1 ("Block-Stochastic Power Method").

Samples are rows here (columns in the paper). Starting from a random orthonormal
``Q_0`` of shape ``(n_features, rank)``, every block of ``B`` consecutive samples
``x_t`` performs one power iteration with the block's sample covariance:

    S_{tau+1} = (1 / B) * sum_{t in block tau+1} x_t x_t^T Q_tau,
    Q_{tau+1} = QR(S_{tau+1})            (the Q factor),

so the method never forms a ``d x d`` matrix: ``S`` is accumulated sample by sample
(here chunk by chunk, as ``X_chunk^T (X_chunk Q_tau)``) in ``O(n_features * rank)``
memory. The estimate (`BlockPower.basis`) is ``Q`` after the last complete block;
samples of an incomplete block are accumulated but not yet used. The paper's
analysis (Theorem 1, spiked covariance model) takes ``B`` large enough for each
block's sample covariance to concentrate, of order ``d`` up to logarithmic factors
and the noise level; in practice ``B`` trades the noise of each iteration (small
``B``) against the number of iterations a stream of fixed length allows (large
``B``). The data are not centred: the method estimates the top eigenvectors of
``E[x x^T]``, like the uncentred SVD.

Signs: the R factor of each QR is made to have a non-negative diagonal, so ``Q`` does
not flip sign from block to block.
"""

from __future__ import annotations

import numpy as np

from benchmarks.baselines._common import Baseline
from benchmarks.baselines._common import as_rows as _as_rows
from benchmarks.baselines._common import orthonormalize as _orthonormalize
from edge_runtime.fpca._validation import check_int

__all__ = ["BlockPower"]


class BlockPower(Baseline):
    """Block-stochastic power method (Mitliagkas et al. 2013, Alg. 1).

    Memory: ``Q`` and the accumulator ``S``, two ``(n_features, rank)`` arrays, flat in
    the stream length and the block size. Time: ``O(n_features * rank)`` per sample
    plus one ``O(n_features * rank**2)`` QR per block.

    Parameters
    ----------
    n_features : int
        Dimension ``d`` of each sample, >= 1.
    rank : int
        Subspace dimension ``r``, ``1 <= rank <= n_features``.
    block_size : int or None, default=None
        Samples per power iteration ``B``, >= 1; None means ``max(rank, n_features)``:
        the sample covariance of a block concentrates only once ``B`` is of the order
        of ``n_features`` (see the module docstring), and it is the
        block size of the FPCA paper's own comparison (Grammenos et al. 2020, code
        ``mitliag_pm.m``: ``B = d``, "block size must be at least n"). Larger blocks
        are more accurate per iteration but leave fewer iterations in a stream of
        given length (see `benchmarks.baselines`).
    seed : int, default=0
        Seed of the random initial ``Q_0`` (``np.random.default_rng(seed)``).

    Attributes
    ----------
    n_samples_seen_ : int
        Samples passed to `partial_fit` since the last reset, including those of the
        incomplete block.
    n_blocks_ : int
        Power iterations (complete blocks) done.

    Raises
    ------
    TypeError
        If an integer parameter is not an integer.
    ValueError
        If ``rank > n_features`` or ``block_size < 1``.

    Examples
    --------
    >>> import numpy as np
    >>> from benchmarks.baselines import BlockPower
    >>> x = np.random.default_rng(0).normal(size=(1000, 5)) * [5.0, 4.0, 1.0, 1.0, 1.0]
    >>> bp = BlockPower(5, rank=2, block_size=100).fit(x)
    >>> bp.n_blocks_, bp.basis.shape
    (10, (5, 2))
    """

    name = "BlockPower"
    #: Whether the estimate is of centred data (no).
    centers = False

    def __init__(
        self, n_features: int, rank: int, block_size: int | None = None, *, seed: int = 0
    ) -> None:
        self._set_dimensions(n_features, rank)
        self.block_size = (
            max(self.rank, self.n_features)
            if block_size is None
            else check_int(block_size, "block_size", 1)
        )
        self.seed = check_int(seed, "seed", 0)
        self.reset()

    @property
    def n_tracked(self) -> int:
        """Directions of state: ``rank`` (plus the ``rank``-column accumulator ``S``)."""
        return self.rank

    def reset(self) -> BlockPower:
        """Forget all samples: a new random ``Q_0`` from ``default_rng(seed)``."""
        rng = np.random.default_rng(self.seed)
        self._q = _orthonormalize(rng.standard_normal((self.n_features, self.rank)))
        self._s = np.zeros((self.n_features, self.rank))
        self._n_pending = 0
        self.n_samples_seen_ = 0
        self.n_blocks_ = 0
        return self

    def partial_fit(self, X: np.ndarray) -> BlockPower:  # noqa: N803 (scikit-learn name)
        """Accumulate rows of ``X`` ``(n_samples, n_features)``; each full block iterates.

        Different chunkings of the same rows give the same basis up to rounding (the
        block sums are accumulated per chunk).

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
        while start < n:  # one iteration per block touched: <= n / block_size + 1
            take = min(self.block_size - self._n_pending, n - start)
            chunk = x[start : start + take]
            self._s += chunk.T @ (chunk @ self._q)
            self._n_pending += take
            start += take
            if self._n_pending == self.block_size:
                self._q = _orthonormalize(self._s / self.block_size)
                self._s[:] = 0.0
                self._n_pending = 0
                self.n_blocks_ += 1
        self.n_samples_seen_ += n
        return self

    @property
    def basis(self) -> np.ndarray:
        """``Q`` after the last complete block, ``(n_features, rank)`` float64, orthonormal.

        Before the first complete block this is the random ``Q_0``.
        """
        return self._q.copy()

    def __repr__(self) -> str:
        return (
            f"BlockPower(n_features={self.n_features}, rank={self.rank}, "
            f"block_size={self.block_size}, n_samples_seen_={self.n_samples_seen_})"
        )
