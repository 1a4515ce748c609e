"""A FedPower leaf's state: the running ``d x d`` second-moment sum of its readings.

FedPower (Guo, Li, Chang, Wang, Zhang) runs power iterations on each device's local
second-moment matrix ``A_l = (1/s_l) sum_i a_i a_i^T`` over its ``s_l`` samples; the
server's target is the weighted mean ``M = sum_l (s_l / n) A_l``, the second-moment matrix
of all ``n`` samples, whose top-``r`` eigenvectors are the (uncentred) principal
subspace. A streaming leaf keeps the unnormalised sum ``S = sum_i x_i x_i^T`` and the
count ``n``, so one reading costs ``O(d**2)`` time and the state never grows: ``d**2``
float64 (``8 d**2`` bytes, 18 KiB at ``d = 48``) and one int.

With ``clip_norm = C`` every row is first clipped and scaled to the unit ball (``x /
max(||x||, C)``, `edge_runtime.fpca.privacy.clip_to_unit_ball`), the precondition of the
differentially private power step (`edge_runtime.fedpower.accounting`); eigenvectors are
unchanged by the common scale ``1 / C``, only clipped rows change direction weight.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from edge_runtime.fedpower._checks import as_square, check_steps
from edge_runtime.fpca.privacy import clip_to_unit_ball

__all__ = ["LocalGram"]


class LocalGram:
    """Running second-moment sum ``S = sum x x^T`` of the rows a leaf has seen.

    Memory is constant: one ``(d, d)`` float64 matrix (``8 d**2`` bytes) and a count;
    `add` costs ``O(n d**2)`` for ``n`` rows (one BLAS ``syrk``-like product).

    Parameters
    ----------
    n_features : int
        ``d`` >= 1.
    clip_norm : float or None, default=None
        If given (``C`` > 0, in the readings' units), rows are clipped to norm ``C`` and
        divided by it before they are added, so the sum is of unit-ball rows (needed for
        the private power step). None adds the rows as they are.

    Attributes
    ----------
    gram : ndarray of shape (d, d), float64
        ``S``, the unnormalised sum (read-only view).
    n_samples : int
        ``n``, rows added so far.

    Raises
    ------
    ValueError
        One line naming a bad ``n_features`` or ``clip_norm``.

    Examples
    --------
    >>> import numpy as np
    >>> g = LocalGram(3)
    >>> g.add(np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]))
    >>> g.n_samples, g.matrix.diagonal().tolist()
    (2, [0.5, 2.0, 0.0])
    """

    def __init__(self, n_features: int, clip_norm: float | None = None) -> None:
        self.n_features = check_steps(n_features, "n_features")
        if clip_norm is not None:
            ok = isinstance(clip_norm, int | float | np.integer | np.floating) and not isinstance(
                clip_norm, bool
            )
            if not (ok and np.isfinite(clip_norm) and clip_norm > 0.0):
                raise ValueError(
                    f"clip_norm must be a finite number > 0 or None, got {clip_norm!r}"
                )
            clip_norm = float(clip_norm)
        self.clip_norm = clip_norm
        self._sum = np.zeros((self.n_features, self.n_features))
        self.n_samples = 0

    def add(self, rows: np.ndarray) -> None:
        """Add ``(n, d)`` finite rows (not modified); a 1-D ``(d,)`` array is one row.

        Raises
        ------
        ValueError
            If the shape is not ``(n, d)`` or a value is NaN or infinite (the message
            names the first offending row); the state is then unchanged.
        """
        x = np.asarray(rows, dtype=np.float64)
        if x.ndim == 1:
            x = x[None, :]
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"rows must have shape (n, {self.n_features}), got {np.shape(rows)}")
        if not np.isfinite(x).all():
            row = int(np.argwhere(~np.isfinite(x))[0][0])
            raise ValueError(f"rows contains NaN or infinity (first in row {row}); expected finite")
        if x.shape[0] == 0:
            return
        if self.clip_norm is not None:
            x = clip_to_unit_ball(x, self.clip_norm)
        self._sum += x.T @ x
        self.n_samples += x.shape[0]

    @property
    def gram(self) -> np.ndarray:
        """``S = sum x x^T``, ``(d, d)`` symmetric PSD (unit-ball units with ``clip_norm``)."""
        view = self._sum.view()
        view.setflags(write=False)
        return view

    @property
    def matrix(self) -> np.ndarray:
        """``A = S / n``, the local second-moment matrix of FedPower; zeros if ``n = 0``."""
        if self.n_samples == 0:
            return np.zeros_like(self._sum)
        return self._sum / self.n_samples

    def get_state(self) -> dict[str, object]:
        """The state as plain values: ``{"gram": (d, d) copy, "n_samples", "clip_norm"}``."""
        return {
            "gram": self._sum.copy(),
            "n_samples": self.n_samples,
            "clip_norm": self.clip_norm,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, object]) -> LocalGram:
        """Rebuild from `get_state` output; ValueError (one line) naming a bad field."""
        gram = as_square(state.get("gram"), "LocalGram state: gram")
        n = state.get("n_samples")
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or int(n) < 0:
            raise ValueError(f"LocalGram state: n_samples must be an int >= 0, got {n!r}")
        if not np.allclose(gram, gram.T, rtol=1e-12, atol=0.0):
            raise ValueError("LocalGram state: gram must be symmetric")
        if int(n) == 0 and np.any(gram):
            raise ValueError("LocalGram state: gram must be zero when n_samples is 0")
        clip = state.get("clip_norm")
        out = cls(gram.shape[0], clip_norm=clip)  # type: ignore[arg-type]
        out._sum = np.array(gram, dtype=np.float64, copy=True)
        out.n_samples = int(n)
        return out

    def __repr__(self) -> str:
        return f"LocalGram(n_features={self.n_features}, n_samples={self.n_samples})"
