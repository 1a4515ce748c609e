"""FPCA-Edge: streaming, block-based truncated SVD with bounded memory (eq. (3), (4))."""

from __future__ import annotations

import numpy as np

from edge_runtime.fpca._linalg import svd_update
from edge_runtime.fpca._validation import check_finite_2d, check_forget, check_int
from edge_runtime.fpca.subspace import Subspace

__all__ = ["FPCAEdge"]


class FPCAEdge:
    """Streaming rank-``r`` subspace of a sample stream, updated one block at a time.

    Samples are buffered into blocks of ``block_size`` rows; each full block ``B``
    updates the subspace by the truncated SVD of ``[forget * U S, B^T]`` (eq. (3)),
    computed from the current basis and the block only. Memory is constant, on the
    order of ``n_features * (rank + block_size)`` floats: the basis, the singular
    values and one preallocated ``(block_size, n_features)`` block buffer. Each block
    costs ``O(n_features * (rank + block_size)**2 + (rank + block_size)**3)`` time,
    i.e. ``O(n_features * (rank + block_size))`` per sample for fixed sizes.

    The result depends only on the sequence of samples, not on how it is chunked
    across `partial_fit` calls: any chunking gives bitwise-identical state.

    Parameters
    ----------
    n_features : int
        Dimension ``d`` of each sample, >= 1.
    rank : int
        Initial (and, unless ``adaptive``, fixed) rank ``r`` of the subspace, with
        ``1 <= rank <= min(n_features, block_size)`` (and ``<= max_rank`` if given).
    block_size : int, default=50
        Number of samples ``b`` per block update, >= 1. Larger blocks are more
        accurate and cost more memory and time per update.
    adaptive : bool, default=False
        If True, adjust the rank after each block by eq. (4) (see Notes).
    rank_bounds : tuple of (float, float), default=(0.01, 0.10)
        ``(lower, upper)`` bounds on the relative weight of the last singular value,
        ``0 < lower < upper < 1``; only used when ``adaptive``.
    holdoff : int, default=1
        Minimum number of blocks between two adaptive rank changes, >= 1.
    max_rank : int or None, default=None
        Upper limit of the adaptive rank, >= ``rank``; None means no limit beyond
        ``min(n_features, block_size)``.
    forget : float, default=1.0
        Forgetting factor ``lambda`` in (0, 1] applied to the current singular values
        before each block update; 1.0 weighs all samples equally.

    Attributes
    ----------
    n_features_ : int
        Number of features, equal to ``n_features``.
    rank_ : int
        Current rank: the rank the next block update keeps. After an adaptive
        increase the current subspace still has ``rank_ - 1`` directions until the
        next block arrives.
    n_samples_seen_ : int
        Number of samples passed to `partial_fit` since the last reset, including
        those pending in the partially filled block.
    n_blocks_ : int
        Number of full blocks applied since the last reset.
    block_size : int
        The block size ``b``.

    Raises
    ------
    TypeError
        If an integer parameter is not an integer.
    ValueError
        If a parameter is out of the ranges above; the message names the value.

    Notes
    -----
    Block update, eq. (3) of Grammenos et al. (2020): ``[U, S] = SVD_r([lambda U S,
    B])`` with ``B`` the ``(d, b)`` block whose columns are samples (our rows, so
    ``B`` is the transposed buffer). It is computed exactly as Merge_r (Alg. 2), with
    ``B`` in place of ``U2 S2``, never forming the ``d x (r + b)`` concatenation.

    Adaptive rank, eq. (4): after each block, ``w = s_r / sum_{i <= r} s_i``. If
    ``w > upper`` the rank grows by one (the next block update keeps one more of its
    ``r + b`` directions); if ``w < lower`` it shrinks by one (the last direction is
    dropped at once). The rank stays in ``[1, min(block_size, n_features,
    max_rank)]`` and changes at most once per ``holdoff`` blocks.

    Singular vectors get deterministic signs after every SVD (the largest-|.| entry
    of each basis column is positive).

    References
    ----------
    A. Grammenos, R. Mendoza-Smith, J. Crowcroft, C. Mascolo. "Federated Principal
    Component Analysis." NeurIPS 2020. arXiv:1907.08059.

    Examples
    --------
    >>> import numpy as np
    >>> from edge_runtime.fpca import FPCAEdge, error_ratio
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(500, 3)) @ rng.normal(size=(3, 12))
    >>> X += 0.01 * rng.normal(size=X.shape)
    >>> edge = FPCAEdge(n_features=12, rank=3, block_size=20).partial_fit(X[:333])
    >>> edge = edge.partial_fit(X[333:])
    >>> edge.n_samples_seen_, edge.n_blocks_, edge.subspace.rank
    (500, 25, 3)
    >>> error_ratio(X, edge.subspace.basis) < 1.001
    True
    """

    def __init__(
        self,
        n_features: int,
        rank: int,
        block_size: int = 50,
        *,
        adaptive: bool = False,
        rank_bounds: tuple[float, float] = (0.01, 0.10),
        holdoff: int = 1,
        max_rank: int | None = None,
        forget: float = 1.0,
    ) -> None:
        self.n_features = check_int(n_features, "n_features", 1)
        self.rank = check_int(rank, "rank", 1)
        self.block_size = check_int(block_size, "block_size", 1)
        self.adaptive = bool(adaptive)
        self.holdoff = check_int(holdoff, "holdoff", 1)
        self.max_rank = None if max_rank is None else check_int(max_rank, "max_rank", 1)
        self.forget = check_forget(forget)
        try:
            lower, upper = (float(v) for v in rank_bounds)
        except (TypeError, ValueError):
            raise ValueError(
                f"rank_bounds must be two numbers (lower, upper), got {rank_bounds!r}"
            ) from None
        if not 0.0 < lower < upper < 1.0:
            raise ValueError(f"rank_bounds must satisfy 0 < lower < upper < 1, got {rank_bounds!r}")
        self.rank_bounds = (lower, upper)
        if self.rank > self.n_features:
            raise ValueError(f"rank {self.rank} exceeds n_features {self.n_features}")
        if self.rank > self.block_size:
            raise ValueError(f"rank {self.rank} exceeds block_size {self.block_size}")
        if self.max_rank is not None and self.rank > self.max_rank:
            raise ValueError(f"rank {self.rank} exceeds max_rank {self.max_rank}")
        self.n_features_ = self.n_features
        self._rank_cap = min(self.n_features, self.block_size, self.max_rank or self.n_features)
        # Preallocated (block_size, n_features) buffer; never reallocated.
        self._buffer = np.empty((self.block_size, self.n_features))
        self.reset()

    def reset(self) -> FPCAEdge:
        """Forget all samples: rank back to ``rank``, no blocks, empty subspace.

        Returns
        -------
        self
        """
        self.rank_ = self.rank
        self.n_samples_seen_ = 0
        self.n_blocks_ = 0
        self._n_pending = 0
        self._basis = np.zeros((self.n_features, 0))
        self._singular_values = np.zeros(0)
        self._last_rank_change: int | None = None
        return self

    def _check_samples(self, samples: object) -> np.ndarray:
        if isinstance(samples, np.ndarray) and samples.dtype.kind not in "biuf":
            raise TypeError(f"X must have a real numeric dtype, got {samples.dtype}")
        try:
            x = np.asarray(samples, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"X must be a numeric array, got {type(samples).__name__}") from None
        if x.ndim == 1:
            x = x.reshape(1, -1)
        elif x.ndim != 2:
            raise ValueError(
                f"X must be 1-D (one sample) or 2-D (n_samples, n_features), got "
                f"{x.ndim}-D with shape {x.shape}"
            )
        if x.shape[1] != self.n_features:
            raise ValueError(f"X has {x.shape[1]} features, expected {self.n_features}")
        check_finite_2d(x, "X")
        return x

    def partial_fit(self, X: np.ndarray) -> FPCAEdge:  # noqa: N803 (scikit-learn name)
        """Add samples to the stream; every completed block updates the subspace.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_features,)
            New samples as rows; a 1-D array is one sample; zero rows is a no-op.
            Copied into the block buffer, never modified or kept.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            If ``X`` has the wrong number of features (``"X has 46 features,
            expected 48"``), is not 1-D or 2-D, or contains NaN or infinity. The
            state is unchanged then (``X`` is checked before any sample is used).
        TypeError
            If ``X`` is not numeric.
        """
        return self._consume(self._check_samples(X))

    def fit(self, X: np.ndarray) -> FPCAEdge:  # noqa: N803 (scikit-learn name)
        """`reset`, then `partial_fit` ``X``: the subspace of ``X`` alone.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        self

        Raises
        ------
        ValueError, TypeError
            As `partial_fit`; ``X`` is checked before the state is reset.
        """
        x = self._check_samples(X)
        return self.reset()._consume(x)

    def _consume(self, x: np.ndarray) -> FPCAEdge:
        """Copy checked samples ``x`` into the block buffer, applying each full block."""
        n = x.shape[0]
        start = 0
        while start < n:  # one iteration per block touched: <= n / block_size + 1
            take = min(self.block_size - self._n_pending, n - start)
            self._buffer[self._n_pending : self._n_pending + take] = x[start : start + take]
            self._n_pending += take
            start += take
            if self._n_pending == self.block_size:
                self._apply_block()
        self.n_samples_seen_ += n
        return self

    def _apply_block(self) -> None:
        self._basis, self._singular_values = svd_update(
            self._basis, self._singular_values, self._buffer.T, self.rank_, self.forget
        )
        self._n_pending = 0
        self.n_blocks_ += 1
        if self.adaptive:
            self._adapt_rank()

    def _adapt_rank(self) -> None:
        """Eq. (4): move ``rank_`` by one if the last singular value's weight is out of bounds."""
        if (
            self._last_rank_change is not None
            and self.n_blocks_ - self._last_rank_change < self.holdoff
        ):
            return
        sv = self._singular_values
        total = float(sv.sum())
        if sv.shape[0] == 0 or total <= 0.0:
            return
        weight = float(sv[-1]) / total
        lower, upper = self.rank_bounds
        if weight > upper and self.rank_ < self._rank_cap:
            self.rank_ += 1
        elif weight < lower and self.rank_ > 1:
            self.rank_ -= 1
            self._basis = self._basis[:, : self.rank_]
            self._singular_values = self._singular_values[: self.rank_]
        else:
            return
        self._last_rank_change = self.n_blocks_

    @property
    def subspace(self) -> Subspace:
        """Subspace of all samples seen, including the pending partial block.

        The pending rows are folded in by the same update as a full block (eq. (3))
        on a copy: the state is not changed, so reading this property any number of
        times does not affect later results.

        Returns
        -------
        Subspace
            ``basis`` of shape ``(n_features, r)`` with ``r <= rank_``,
            ``singular_values`` of shape ``(r,)``, ``n_samples = n_samples_seen_``.
            Rank 0 before any sample.
        """
        if self._n_pending:
            basis, sv = svd_update(
                self._basis,
                self._singular_values,
                self._buffer[: self._n_pending].T,
                self.rank_,
                self.forget,
            )
        else:
            basis, sv = self._basis, self._singular_values
        return Subspace(basis, sv, self.n_samples_seen_)

    def __repr__(self) -> str:
        return (
            f"FPCAEdge(n_features={self.n_features}, rank={self.rank}, "
            f"block_size={self.block_size}, adaptive={self.adaptive}, rank_={self.rank_}, "
            f"n_samples_seen_={self.n_samples_seen_})"
        )
