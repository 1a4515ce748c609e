"""A private leaf's state under the Gaussian mechanism: a running noisy ``d x d`` Gram matrix.

Each block of readings, clipped and scaled to the unit ball, is released once as its Gram
matrix plus symmetric Gaussian noise (`gaussian_mechanism`), with the noise of successive
releases correlated by the square-root factorisation (`continual`, horizon ``H``; ``H = 1``
is independent noise per block). The leaf keeps the released running sum; what it
publishes (the top eigenpairs, a rank-``r`` subspace) is computed from it.

Why the whole stream is ``(epsilon, delta)``-DP. Each reading lies in exactly one block of
one leaf. Replacing it changes one block's Gram matrix by at most ``Delta = sqrt(2)`` in
Frobenius norm and no other block's, so the releases of all blocks of a segment together
are one Gaussian mechanism on the vector ``R (G_1, ..., G_H)`` of sensitivity ``Delta *
continual_multiplier(H)``, calibrated with the analytic Gaussian mechanism; distinct
segments cover disjoint readings (parallel composition). Everything after the releases
(the running sum, its eigendecomposition, the forgetting factor, publishing after every
block, merges at aggregators, restarts from a published snapshot) is post-processing.
Sample counts are published, hence replace-one neighbours (see `gaussian_mechanism`).

Memory: three ``(d, d)`` float64 matrices (the released sum of the closed segments, the
exact sum of the open one, the latest release) and ``H`` coefficients: ``8 (3 d**2 + H)``
bytes, 55 KiB at ``d = 48``; during a release three ``(d, d)`` temporaries (``24 d**2``
bytes); nothing grows with the number of readings or releases (tests/test_private_memory.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from edge_runtime.fpca.continual import (
    MAX_HORIZON,
    continual_multiplier,
    prefix_noise,
    sqrt_factorisation_coefficients,
)
from edge_runtime.fpca.gaussian_mechanism import REPLACE_ONE_SENSITIVITY, analytic_gaussian_sigma

__all__ = ["PrivateGram", "check_horizon", "release_noise_std"]

_KEY_WORDS = 4  # 128 bits of entropy per segment key


def check_horizon(horizon: object) -> int:
    """``horizon`` as an int in ``[1, MAX_HORIZON]``; ValueError (one line) otherwise."""
    if isinstance(horizon, bool) or not isinstance(horizon, int | np.integer):
        raise ValueError(f"horizon must be an int in [1, {MAX_HORIZON}], got {horizon!r}")
    if not 1 <= int(horizon) <= MAX_HORIZON:
        raise ValueError(f"horizon must be in [1, {MAX_HORIZON}], got {horizon!r}")
    return int(horizon)


def release_noise_std(epsilon: float, delta: float, horizon: int = 1) -> float:
    """Std ``sigma`` of the entries of each release's ``W`` (unit-ball Gram units).

    ``sigma = sqrt(2) * continual_multiplier(H) * analytic_gaussian_sigma(epsilon, delta)``.

    Parameters
    ----------
    epsilon, delta : float
        The budget of every reading.
    horizon : int, default=1
        Releases per segment of the square-root factorisation.

    Returns
    -------
    float
    """
    factor = REPLACE_ONE_SENSITIVITY * continual_multiplier(check_horizon(horizon))
    return analytic_gaussian_sigma(epsilon, delta, factor)


class PrivateGram:
    """Running sum of Gaussian-mechanism releases of block Gram matrices (Analyze Gauss).

    Parameters
    ----------
    n_features : int
        ``d``.
    epsilon, delta : float
        Budget per reading, replace-one neighbours.
    horizon : int, default=1
        ``H``: releases per segment of the square-root factorisation (`continual`).
    forget : float, default=1.0
        Forgetting factor ``f`` in (0, 1]: the released sum is multiplied by ``f**2``
        before each block is added (``H = 1`` only).
    rng : numpy.random.Generator
        Source of the segment keys.

    Attributes
    ----------
    noise_std : float
        `release_noise_std`.
    releases : int
        Blocks released so far.
    """

    def __init__(
        self,
        n_features: int,
        epsilon: float,
        delta: float,
        *,
        horizon: int = 1,
        forget: float = 1.0,
        rng: np.random.Generator,
    ) -> None:
        self.n_features = int(n_features)
        self.horizon = check_horizon(horizon)
        if forget != 1.0 and self.horizon != 1:
            raise ValueError(
                f"forget {forget!r} needs horizon 1 (the factorisation releases plain prefix sums)"
            )
        self.forget = float(forget)
        self.noise_std = release_noise_std(epsilon, delta, self.horizon)
        self._coefficients = sqrt_factorisation_coefficients(self.horizon)
        self._rng = rng
        d = self.n_features
        self._closed = np.zeros((d, d))  # released: sum of the closed segments' outputs
        self._open = np.zeros((d, d))  # exact (secret): Gram sum of the open segment
        self._step = 0  # releases in the open segment
        self._key = self._new_key()
        self._released = np.zeros((d, d))  # the latest output (post-processing)
        self.releases = 0

    def _new_key(self) -> np.ndarray:
        return self._rng.integers(0, 2**32, size=_KEY_WORDS, dtype=np.uint32)

    def release(self, unit_rows: np.ndarray) -> None:
        """Release one block: ``(k, d)`` rows of norm <= 1 (not modified)."""
        if self.forget != 1.0:  # H = 1: the closed sum is the latest release
            self._closed = self._closed * self.forget**2
        self._open += unit_rows.T @ unit_rows
        self._step += 1
        self.releases += 1
        noise = prefix_noise(
            self._step, self.n_features, self.noise_std, self._key, self._coefficients
        )
        self._released = self._closed + self._open + noise
        if self._step == self.horizon:  # close the segment
            self._closed = self._released
            self._open = np.zeros_like(self._open)
            self._step = 0
            self._key = self._new_key()

    @property
    def released(self) -> np.ndarray:
        """The latest released running sum, ``(d, d)`` symmetric (unit-ball Gram units)."""
        return self._released

    def top(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``count`` largest eigenpairs of `released`, largest first.

        Returns
        -------
        basis : ndarray of shape (d, count)
        eigenvalues : ndarray of shape (count,)
            May be negative (noise).
        """
        d = self.n_features
        values, vectors = np.linalg.eigh(self._released)  # all d: numpy has no subset
        return vectors[:, d - count :][:, ::-1], values[d - count :][::-1]

    def set_released(self, matrix: np.ndarray) -> None:
        """Start from an already released sum (a published snapshot); a new segment."""
        self._released = np.array(matrix, dtype=np.float64)
        self._closed = self._released
        self._open = np.zeros_like(self._open)
        self._step = 0
        self._key = self._new_key()

    def close_segment(self) -> None:
        """End the open segment at its latest release; the next block starts a new one.

        The released sum becomes the constant of the closed segments (post-processing) and
        a fresh key is drawn, so no noise of the old key is ever used again. What a restore
        from a checkpoint does: the process that wrote it may have released further blocks
        with the old key afterwards, and releasing other readings with that key's noise
        would let the noise cancel in the difference of two published snapshots.
        """
        self.set_released(self._released)

    def get_state(self) -> dict[str, np.ndarray | int]:
        """The state as arrays and ints (keys ``gram_*``; the open sum and key are secret)."""
        return {
            "gram_released": self._released.copy(),
            "gram_closed": self._closed.copy(),
            "gram_open": self._open.copy(),
            "gram_step": self._step,
            "gram_key": self._key.astype(np.int64),
            "gram_releases": self.releases,
        }

    def set_state(self, state: Mapping[str, object]) -> None:
        """Restore `get_state` output; ValueError (one line) naming a bad field."""
        d = self.n_features
        for name in ("gram_released", "gram_closed", "gram_open"):
            value = np.asarray(state.get(name))
            if value.shape != (d, d) or value.dtype != np.float64 or not np.isfinite(value).all():
                raise ValueError(f"PrivateGram state: {name} must be finite float64 ({d}, {d})")
        step, releases = state.get("gram_step"), state.get("gram_releases")
        if not isinstance(step, int) or not 0 <= step < self.horizon:
            raise ValueError(f"PrivateGram state: gram_step {step!r} outside [0, {self.horizon})")
        if not isinstance(releases, int) or releases < step:
            raise ValueError(f"PrivateGram state: gram_releases {releases!r} below gram_step")
        key = np.asarray(state.get("gram_key"))
        if key.shape != (_KEY_WORDS,) or not ((key >= 0) & (key < 2**32)).all():
            raise ValueError(f"PrivateGram state: gram_key must be {_KEY_WORDS} 32-bit words")
        self._released = np.array(state["gram_released"], dtype=np.float64)
        self._closed = np.array(state["gram_closed"], dtype=np.float64)
        self._open = np.array(state["gram_open"], dtype=np.float64)
        self._step = step
        self._key = key.astype(np.uint32)
        self.releases = releases


def eigen_to_singular(eigenvalues: np.ndarray, clip_norm: float) -> np.ndarray:
    """Singular values in the data's units, ``C sqrt(max(lambda, 0))``, of unit-ball eigenvalues."""
    return clip_norm * np.sqrt(np.maximum(eigenvalues, 0.0))
