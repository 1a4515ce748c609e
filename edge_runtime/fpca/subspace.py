"""The `Subspace` value type: what every node summarises and publishes.

A subspace is the rank-``r`` truncated SVD summary of everything a node has seen:
an orthonormal ``basis`` of shape ``(n_features, rank)``, its non-increasing
``singular_values`` of shape ``(rank,)`` and the number of samples ``n_samples``
it summarises. Samples are rows (scikit-learn convention); the paper
(Grammenos et al., NeurIPS 2020) writes them as columns, so its ``U`` is our
``basis`` and its ``Sigma`` our ``singular_values``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Subspace", "flip_signs"]


def flip_signs(basis: np.ndarray) -> np.ndarray:
    """Return ``basis`` with each column's sign chosen so its largest-|.| entry is positive.

    Parameters
    ----------
    basis : ndarray of shape (n_features, rank)

    Returns
    -------
    ndarray of shape (n_features, rank), a new array (the input is not modified).

    Deterministic signs make results compare across runs and nodes (as scikit-learn's
    ``svd_flip``).
    """
    basis = np.array(basis, dtype=np.float64, copy=True)
    if basis.size == 0:
        return basis
    rows = np.argmax(np.abs(basis), axis=0)
    signs = np.sign(basis[rows, np.arange(basis.shape[1])])
    signs[signs == 0] = 1.0
    basis *= signs
    return basis


@dataclass(frozen=True, eq=False)
class Subspace:
    """A rank-``r`` subspace summary: ``basis``, ``singular_values`` and ``n_samples``.

    Parameters
    ----------
    basis : ndarray of shape (n_features, rank), float64
        Orthonormal columns (not checked here; `edge_runtime.wire` checks it on decode).
    singular_values : ndarray of shape (rank,), float64
        Non-negative, non-increasing.
    n_samples : int
        Number of samples (rows) the subspace summarises, >= 0.

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
    def n_features(self) -> int:
        """Dimension ``d`` of the ambient space."""
        return int(self.basis.shape[0])

    @property
    def rank(self) -> int:
        """Number of basis vectors ``r``."""
        return int(self.basis.shape[1])

    def truncate(self, rank: int) -> Subspace:
        """The leading ``min(rank, self.rank)`` directions of this subspace."""
        rank = max(0, min(int(rank), self.rank))
        return Subspace(self.basis[:, :rank], self.singular_values[:rank], self.n_samples)

    def __repr__(self) -> str:
        return (
            f"Subspace(n_features={self.n_features}, rank={self.rank}, n_samples={self.n_samples})"
        )
