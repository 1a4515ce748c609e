"""Input checks and orthonormalisation shared by the baselines (not part of any paper)."""

from __future__ import annotations

from typing import Self

import numpy as np

from edge_runtime.fpca._validation import check_finite_2d, check_int

__all__ = ["Baseline", "as_rows", "orthonormalize"]


def as_rows(x: object, n_features: int) -> np.ndarray:
    """``x`` as a finite float64 ``(n_samples, n_features)`` array; 1-D is one sample."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"X must be a numeric array, got {type(x).__name__}") from None
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or arr.shape[1] != n_features:
        raise ValueError(f"X must have shape (n_samples, {n_features}), got {arr.shape}")
    check_finite_2d(arr, "X")
    return arr


def orthonormalize(a: np.ndarray) -> np.ndarray:
    """Q factor of ``a`` with ``diag(R) >= 0`` (so an orthonormal ``a`` is returned as is)."""
    q, r = np.linalg.qr(a)
    signs = np.sign(np.diag(r))
    signs[signs == 0] = 1.0
    return q * signs


class Baseline:
    """What every baseline shares: its dimensions and ``fit`` = ``reset`` + ``partial_fit``.

    Subclasses implement ``reset() -> self``, ``partial_fit(X) -> self`` on
    ``(n_samples, n_features)`` float64 rows, ``basis`` ``(n_features, rank)`` and
    ``n_tracked``.
    """

    name: str = "baseline"
    centers: bool = False

    def _set_dimensions(self, n_features: int, rank: int) -> None:
        """Check and store ``n_features >= 1`` and ``1 <= rank <= n_features``.

        Raises
        ------
        TypeError
            If either is not an integer.
        ValueError
            If either is out of range.
        """
        self.n_features = check_int(n_features, "n_features", 1)
        self.rank = check_int(rank, "rank", 1)
        if self.rank > self.n_features:
            raise ValueError(f"rank {self.rank} exceeds n_features {self.n_features}")

    def reset(self) -> Self:
        raise NotImplementedError

    def partial_fit(self, X: np.ndarray) -> Self:  # noqa: N803 (scikit-learn name)
        raise NotImplementedError

    def fit(self, X: np.ndarray) -> Self:  # noqa: N803 (scikit-learn name)
        """`reset`, then `partial_fit` ``X`` ``(n_samples, n_features)``."""
        x = as_rows(X, self.n_features)
        return self.reset().partial_fit(x)
