"""Frequent Directions: a deterministic streaming sketch of ``A^T A`` (baseline).

Sources: Liberty, "Simple and deterministic matrix sketching", KDD 2013; Ghashami, Liberty,
Phillips, Woodruff, "Frequent Directions", SIAM J. Comput. 45(5), 2016 (arXiv:1501.01711).
Rows go into the zero rows of a sketch ``B`` of ``m`` rows; when it is full it is shrunk,
``B <- diag(sqrt(max(s^2 - s_ell^2, 0))) V^T`` from the SVD ``B = U diag(s) V^T``, which
zeroes the rows from the ``ell``-th on. ``"fast"``: ``m = 2 ell`` (Ghashami Alg. 3.2, Liberty
Alg. 1), ``O(n_features ell)`` amortised per row; ``"exact"``: ``m = ell`` (Alg. 3.1),
``O(n_features ell^2)`` per row. Both give (Thm. 3.1), for any ``k < ell``,
``||A^T A - B^T B||_2 <= ||A - A_k||_F^2 / (ell - k)`` and
``||A - A pi_{B_k}||_F^2 <= ell / (ell - k) ||A - A_k||_F^2``: with ``ell = 2 rank`` an error
ratio of at most 2. The basis is the top ``rank`` right singular vectors of ``B``; not centred.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from benchmarks.baselines._common import Baseline, as_rows, pieces
from edge_runtime.fpca._validation import check_int
from edge_runtime.fpca.subspace import flip_signs

__all__ = ["FrequentDirections"]

VARIANTS = ("fast", "exact")


def _svd(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Singular values and ``V^T`` of ``a`` (``gesdd``, ``gesvd`` if it fails to converge)."""
    try:
        _, s, vt = np.linalg.svd(a, full_matrices=False)
    except np.linalg.LinAlgError:
        _, s, vt = sla.svd(a, full_matrices=False, lapack_driver="gesvd")
    return s, vt


class FrequentDirections(Baseline):
    """Frequent Directions: memory the ``(m, n_features)`` sketch. ``ell`` >= ``rank`` (default
    ``2 rank``, equal state), ``variant`` ``"fast"`` or ``"exact"``; ``n_shrinks_`` counts SVDs."""

    name = "FD"
    _shown = ("ell", "variant")

    def __init__(
        self, n_features: int, rank: int, ell: int | None = None, *, variant: str = "fast"
    ) -> None:
        super().__init__(n_features, rank)
        self.ell = 2 * self.rank if ell is None else check_int(ell, "ell", 1)
        if self.ell < self.rank:
            raise ValueError(f"ell must be >= rank {self.rank}, got {self.ell}")
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        self.variant = variant
        self._capacity = 2 * self.ell if variant == "fast" else self.ell
        self.reset()

    @property
    def n_tracked(self) -> int:
        """``ell``, the rows kept after a shrink (``"fast"`` buffers ``ell`` more between)."""
        return self.ell

    def reset(self) -> FrequentDirections:
        """Forget all samples: the sketch becomes all zeros."""
        self._sketch = np.zeros((self._capacity, self.n_features))
        self._n_rows = 0  # rows in use; rows from _n_rows on are zero
        self.n_samples_seen_ = 0
        self.n_shrinks_ = 0
        return self

    def partial_fit(self, X: np.ndarray) -> FrequentDirections:  # noqa: N803 (scikit-learn name)
        """Add the rows of ``X`` ``(n_samples, n_features)``; any chunking, same sketch."""
        x = as_rows(X, self.n_features)
        for piece in pieces(x, lambda: self._capacity - self._n_rows):
            self._sketch[self._n_rows : self._n_rows + len(piece)] = piece
            self._n_rows += len(piece)
            if self._n_rows == self._capacity:
                self._shrink()
        self.n_samples_seen_ += x.shape[0]
        return self

    def _shrink(self) -> None:
        s, vt = _svd(self._sketch)
        delta = s[self.ell - 1] ** 2 if self.ell <= s.shape[0] else 0.0
        shrunk = np.sqrt(np.maximum(s**2 - delta, 0.0))
        kept = int(np.count_nonzero(shrunk))  # < ell when delta > 0; <= n_features always
        self._sketch[:kept] = shrunk[:kept, None] * vt[:kept]
        self._sketch[kept:] = 0.0
        self._n_rows = kept
        self.n_shrinks_ += 1

    @property
    def sketch(self) -> np.ndarray:
        """Copy of the rows of ``B`` in use, ``(n_rows, n_features)``, ``n_rows <= m``."""
        return self._sketch[: self._n_rows].copy()

    @property
    def basis(self) -> np.ndarray:
        """Top ``rank`` right singular vectors of ``B``, ``(n_features, rank)``, signs fixed
        (an arbitrary orthonormal completion where ``B`` has fewer rows)."""
        _, vt = _svd(self._sketch[: max(self._n_rows, self.rank)])  # zero rows pad to rank
        return flip_signs(vt[: self.rank].T)
