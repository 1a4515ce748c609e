"""What the baselines share: input checks, orthonormalisation, ``fit`` and buffered blocks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Self

import numpy as np

from edge_runtime.fpca._validation import check_int

__all__ = ["Baseline", "as_rows", "orthonormalize", "pieces"]


def as_rows(x: object, n_features: int) -> np.ndarray:
    """``x`` as finite float64 ``(n_samples, n_features)`` (1-D: one sample); TypeError if not
    numeric, ValueError for another width or NaN / infinity."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"X must be a numeric array, got {type(x).__name__}") from None
    arr = arr.reshape(1, -1) if arr.ndim == 1 else arr
    if arr.ndim != 2 or arr.shape[1] != n_features:
        raise ValueError(f"X must have shape (n_samples, {n_features}), got {arr.shape}")
    if not np.isfinite(arr).all():
        row = int(np.argwhere(~np.isfinite(arr))[0][0])
        raise ValueError(f"X contains NaN or infinity (first in row {row}); expected finite")
    return arr


def orthonormalize(a: np.ndarray) -> np.ndarray:
    """Q factor of ``a`` with ``diag(R) >= 0`` (an orthonormal ``a`` comes back as is)."""
    q, r = np.linalg.qr(a)
    signs = np.sign(np.diag(r))
    signs[signs == 0] = 1.0
    return q * signs


def pieces(x: np.ndarray, room: Callable[[], int]) -> Iterator[np.ndarray]:
    """Consecutive rows of ``x``, each piece as long as ``room()`` (rows left in the caller's
    buffer, asked again after each piece) or the rest of ``x``."""
    start = 0
    while start < x.shape[0]:  # one piece per buffer fill: <= len(x) / room + 1
        take = min(room(), x.shape[0] - start)
        yield x[start : start + take]
        start += take


class Baseline:
    """Dimensions (``n_features >= 1``, ``1 <= rank <= n_features``: TypeError / ValueError),
    ``fit`` = ``reset`` + ``partial_fit``, ``n_tracked`` = ``rank`` and the repr. A subclass
    writes ``reset``, ``partial_fit`` and ``basis``; its repr shows `_shown` attributes."""

    name: str = "baseline"
    centers: bool = False
    _shown: tuple[str, ...] = ()

    def __init__(self, n_features: int, rank: int) -> None:
        self.n_features = check_int(n_features, "n_features", 1)
        self.rank = check_int(rank, "rank", 1)
        if self.rank > self.n_features:
            raise ValueError(f"rank {self.rank} exceeds n_features {self.n_features}")
        self.n_samples_seen_ = 0

    @property
    def n_tracked(self) -> int:
        """Directions held as state."""
        return self.rank

    def reset(self) -> Self:
        raise NotImplementedError

    def partial_fit(self, X: np.ndarray) -> Self:  # noqa: N803 (scikit-learn name)
        raise NotImplementedError

    def fit(self, X: np.ndarray) -> Self:  # noqa: N803 (scikit-learn name)
        """`reset`, then `partial_fit` ``X`` ``(n_samples, n_features)``."""
        return self.reset().partial_fit(as_rows(X, self.n_features))

    def __repr__(self) -> str:
        shown = "".join(f"{k}={getattr(self, k)!r}, " for k in self._shown)
        return (
            f"{type(self).__name__}(n_features={self.n_features}, rank={self.rank}, "
            f"{shown}n_samples_seen_={self.n_samples_seen_})"
        )
