"""The `Subspace` value type: what every node summarises and publishes.

A subspace is the rank-``r`` truncated SVD summary of everything a node has seen:
an orthonormal ``basis`` of shape ``(n_features, rank)``, its non-increasing
``singular_values`` of shape ``(rank,)``, the number of samples ``n_samples``
it summarises and, for centred summaries only, their ``mean``. Samples are rows
(scikit-learn convention); the paper (Grammenos et al., NeurIPS 2020) writes them as
columns, so its ``U`` is our ``basis`` and its ``Sigma`` our ``singular_values``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BasisShape", "Subspace", "flip_signs"]


def flip_signs(basis: np.ndarray, *, copy: bool = True) -> np.ndarray:
    """Return ``basis`` with each column's sign chosen so its largest-|.| entry is positive.

    Parameters
    ----------
    basis : ndarray of shape (n_features, rank)
    copy : bool, default=True
        If False and ``basis`` is a writeable float64 array, flip it in place and
        return it (for freshly computed results); otherwise work on a copy.

    Returns
    -------
    ndarray of shape (n_features, rank)
        A new array, or ``basis`` itself when ``copy=False`` allowed it.

    Deterministic signs make results compare across runs and nodes (as scikit-learn's
    ``svd_flip``).
    """
    if copy or not (
        isinstance(basis, np.ndarray) and basis.dtype == np.float64 and basis.flags.writeable
    ):
        basis = np.array(basis, dtype=np.float64, copy=True)
    if basis.size == 0:
        return basis
    rows = np.argmax(np.abs(basis), axis=0)
    negative = basis[rows, np.arange(basis.shape[1])] < 0
    if negative.any():
        basis[:, negative] *= -1.0
    return basis


class BasisShape:
    """Mixin: ``n_features`` and ``rank`` read off an orthonormal ``basis`` attribute.

    For any class holding a ``basis`` ndarray of shape ``(n_features, rank)``: a
    `Subspace`, or the current global basis of a FedPower server.
    """

    __slots__ = ()
    basis: np.ndarray

    @property
    def n_features(self) -> int:
        """Dimension ``d`` of the ambient space (rows of ``basis``)."""
        return int(self.basis.shape[0])

    @property
    def rank(self) -> int:
        """Number of basis vectors ``r`` (columns of ``basis``)."""
        return int(self.basis.shape[1])


@dataclass(frozen=True, eq=False)
class Subspace(BasisShape):
    """A rank-``r`` subspace summary: ``basis``, ``singular_values``, ``n_samples``, ``mean``.

    Parameters
    ----------
    basis : ndarray of shape (n_features, rank), float64
        Orthonormal columns (not checked here; `edge_runtime.wire` checks it on decode).
    singular_values : ndarray of shape (rank,), float64
        Non-negative, non-increasing.
    n_samples : int
        Number of samples (rows) the subspace summarises, >= 0.
    mean : ndarray of shape (n_features,), float64, or None, default=None
        None (the paper's default) for an uncentred summary: ``basis`` and
        ``singular_values`` are the truncated SVD of the samples themselves. For a
        centred summary (``FPCAEdge(center=True)``), the mean of the samples, and
        ``basis``/``singular_values`` summarise the samples minus this mean.

    Raises
    ------
    ValueError
        If the shapes disagree, ``rank > n_features`` or ``n_samples < 0``.

    A subspace of rank 0 (``basis`` of shape ``(n_features, 0)``) is the summary of
    no data; `Subspace.empty` builds one.
    """

    basis: np.ndarray
    singular_values: np.ndarray
    n_samples: int
    mean: np.ndarray | None = None

    def __post_init__(self) -> None:
        basis = np.asarray(self.basis, dtype=np.float64)
        sv = np.asarray(self.singular_values, dtype=np.float64).reshape(-1)
        if basis.ndim != 2:
            raise ValueError(f"basis must be 2-D (n_features, rank), got shape {basis.shape}")
        if sv.shape[0] != basis.shape[1]:
            raise ValueError(
                f"singular_values has {sv.shape[0]} entries but basis has rank {basis.shape[1]}"
            )
        if basis.shape[1] > basis.shape[0]:
            raise ValueError(f"rank {basis.shape[1]} exceeds n_features {basis.shape[0]}")
        if int(self.n_samples) < 0:
            raise ValueError(f"n_samples must be >= 0, got {self.n_samples}")
        if self.mean is not None:
            mean = np.asarray(self.mean, dtype=np.float64)
            if mean.shape != (basis.shape[0],):
                raise ValueError(
                    f"mean must have shape ({basis.shape[0]},) (n_features), got {mean.shape}"
                )
            mean.setflags(write=False)
            object.__setattr__(self, "mean", mean)
        basis.setflags(write=False)
        sv.setflags(write=False)
        object.__setattr__(self, "basis", basis)
        object.__setattr__(self, "singular_values", sv)
        object.__setattr__(self, "n_samples", int(self.n_samples))

    @classmethod
    def empty(cls, n_features: int) -> Subspace:
        """The rank-0 subspace of ``n_features`` dimensions summarising no samples."""
        return cls(np.zeros((n_features, 0)), np.zeros(0), 0)

    @property
    def centered(self) -> bool:
        """True if the summary is of mean-centred samples (``mean`` is not None)."""
        return self.mean is not None

    def truncate(self, rank: int) -> Subspace:
        """The leading ``min(rank, self.rank)`` directions of this subspace (same ``mean``)."""
        rank = max(0, min(int(rank), self.rank))
        return Subspace(
            self.basis[:, :rank], self.singular_values[:rank], self.n_samples, self.mean
        )

    def reorthonormalised(self) -> Subspace:
        """This subspace with its basis made orthonormal to float64 precision again.

        A basis rounded to float32 on the wire is orthonormal to about ``1e-7`` only; a
        thin QR ``basis = Q R`` with the signs of ``diag(R)`` moved into ``Q`` returns the
        orthonormal basis closest column by column (each ``q_j`` spans the same leading
        ``j`` directions). Singular values, ``n_samples`` and ``mean`` are kept; the
        change is of the order of the rounding (Golub & Van Loan, Matrix Computations,
        sec. 5.2, Householder QR).

        Returns
        -------
        Subspace
            ``basis`` of shape ``(n_features, rank)``, float64, ``max |B^T B - I|`` ~ 1e-16.
        """
        if self.rank == 0:
            return self
        q, r = np.linalg.qr(self.basis)
        signs = np.where(np.diag(r) < 0, -1.0, 1.0)
        return Subspace(q * signs, self.singular_values, self.n_samples, self.mean)

    def __repr__(self) -> str:
        centred = ", centered=True" if self.mean is not None else ""
        return (
            f"Subspace(n_features={self.n_features}, rank={self.rank}, "
            f"n_samples={self.n_samples}{centred})"
        )
