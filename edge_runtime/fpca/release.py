"""How a block of samples enters an `FPCAEdge`: the release mechanism, a strategy object.

`FPCAEdge` picks one `Release` in its constructor (`make_release`) and hands it every
block; the release returns what the block does to the state, `Fold` (columns folded in by
the block update, eq. (3)) or `Replace` (a new basis). Each keeps its own state and
counters; nothing else in the estimator depends on the mechanism.

- `NoRelease` (``privacy=None``): the block itself, folded in by eq. (3).
- `GaussianRelease` (``mechanism="gaussian"``, the default with privacy): each block of
  ``k`` rows (``block_size``, fewer for `FPCAEdge.flush`) is clipped to the unit ball
  (``x -> x / max(C, ||x||)``) and released once as its Gram matrix plus symmetric Gaussian
  noise calibrated by the analytic Gaussian mechanism at sensitivity ``sqrt(2)``
  (`edge_runtime.fpca.gaussian_mechanism`, Balle & Wang 2018), kept as a running noisy
  sum (`edge_runtime.fpca.private_gram.PrivateGram`; horizon ``H``: the square-root
  factorisation of `edge_runtime.fpca.continual`). The state becomes the sum's leading
  eigenpairs ``(u_i, lambda_i)``, ``sigma_i = C sqrt(max(lambda_i, 0))``. Memory: ``8 (3
  d**2 + H)`` bytes (three ``(d, d)`` matrices, 55 KiB at d = 48), at most ``8 max(b d, 3
  d**2)`` bytes of temporaries per block, ``O(H d**2)`` time per release.
- `Eq8Release` (``mechanism="fpca-eq8"``): streaming MOD-SuLQ as printed in Grammenos et
  al. (2020), eq. (5)-(8): the clipped block's covariance ``A = (1/k) X^T X`` is built
  ``c`` columns at a time, each chunk plus a fresh non-symmetric Gaussian mask with
  i.i.d. ``N(0, omega**2)`` entries, ``omega = noise_std(epsilon, delta, d, k)`` (eq.
  (8)); its ``t`` leading singular pairs ``(U_B, s)`` enter the state as the columns ``U_B
  diag(sigma)``, ``sigma_i = C sqrt(k max(s_i, 0))`` (``C**2 k A`` is the Gram matrix of
  the clipped block). Extra memory ``2 d c`` floats plus ``O(d (t + c))`` temporaries.

Privacy argument (both mechanisms): each sample lies in exactly one released block and
the raw block is zeroed after its release, so the whole stream is ``(epsilon,
delta)``-DP per sample under replace-one neighbours; everything the estimator returns is
post-processing (its snapshots never fold in pending rows). Sample counts are not
protected.

References
----------
A. Grammenos, R. Mendoza-Smith, J. Crowcroft, C. Mascolo. "Federated Principal
Component Analysis." NeurIPS 2020. arXiv:1907.08059.
B. Balle, Y.-X. Wang. "Improving the Gaussian Mechanism for Differential Privacy:
Analytical Calibration and Optimal Denoising." ICML 2018.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol

import numpy as np

from edge_runtime.fpca import privacy as _privacy
from edge_runtime.fpca.parameters import Params
from edge_runtime.fpca.private_gram import PrivateGram, eigen_to_singular

__all__ = [
    "Eq8Release",
    "Fold",
    "GaussianRelease",
    "NoRelease",
    "Release",
    "Replace",
    "make_release",
]


class Fold(NamedTuple):
    """Fold ``cols`` ``(d, k)`` into the state by the block update (eq. (3)).

    ``singular_values`` ``(k,)``: the columns' norms when known (eq. (8)'s summary), so
    the update can skip computing them; None for raw samples.
    """

    cols: np.ndarray
    singular_values: np.ndarray | None


class Replace(NamedTuple):
    """Make ``basis`` ``(d, t)`` and ``singular_values`` ``(t,)`` the state (the Gram sum's top)."""

    basis: np.ndarray
    singular_values: np.ndarray


class Release(Protocol):
    """What `FPCAEdge` asks of its release mechanism.

    Attributes
    ----------
    privacy : tuple of (float, float) or None
        ``(epsilon, delta)``; None for `NoRelease`.
    mechanism : str or None
        ``"gaussian"``, ``"fpca-eq8"`` or None.
    gram : PrivateGram or None
        The released running sum (`GaussianRelease` only).
    n_releases, n_clipped : int
        Blocks released and samples clipped, since construction (not reset by `reset`).
    last_noise_std : float or None
        Noise std of the last release (unit-ball units), None before the first.
    """

    privacy: tuple[float, float] | None
    mechanism: str | None
    gram: PrivateGram | None
    n_releases: int
    n_clipped: int
    last_noise_std: float | None

    def reset(self) -> None:
        """Forget the samples released so far (a new running sum); counters stay."""

    def release(self, rows: np.ndarray, n_target: int, check_rank: int) -> Fold | Replace:
        """The effect of the block ``rows`` ``(k, d)`` on a state of ``n_target`` directions.

        A private release clips ``rows`` in place and zeroes them after use.
        """
        ...

    def get_state(self) -> dict[str, object]:
        """Checkpoint keys of the mechanism's own state (``gram_*``), else empty."""
        ...

    def set_state(self, state: Mapping[str, object]) -> None:
        """Restore from a checkpoint (`get_state` keys and the counters)."""

    def resume(self, basis: np.ndarray, singular_values: np.ndarray) -> None:
        """Restart from a published snapshot's basis and singular values."""


class NoRelease:
    """``privacy=None``: blocks are folded in as they are."""

    privacy = None
    mechanism = None
    gram = None

    def __init__(self) -> None:
        self.n_releases = 0
        self.n_clipped = 0
        self.last_noise_std: float | None = None

    def reset(self) -> None:
        pass

    def release(self, rows: np.ndarray, n_target: int, check_rank: int) -> Fold:
        return Fold(rows.T, None)

    def get_state(self) -> dict[str, object]:
        return {}

    def set_state(self, state: Mapping[str, object]) -> None:
        _restore_counters(self, state)

    def resume(self, basis: np.ndarray, singular_values: np.ndarray) -> None:
        pass


class GaussianRelease:
    """``mechanism="gaussian"``: the state is the top of a released noisy Gram sum.

    Parameters
    ----------
    params : Params
        With ``privacy`` and ``clip_norm``.
    rng : numpy.random.Generator
        Source of the noise keys.
    """

    mechanism = "gaussian"

    def __init__(self, params: Params, rng: np.random.Generator) -> None:
        assert params.privacy is not None and params.clip_norm is not None
        self.privacy = params.privacy
        self._clip_norm = params.clip_norm
        self._params = params
        self._rng = rng
        self.gram: PrivateGram | None = None  # made by `reset`, which the estimator calls
        self.n_releases = 0
        self.n_clipped = 0
        self.last_noise_std: float | None = None

    def _new_gram(self) -> PrivateGram:
        params = self._params
        assert params.privacy is not None
        return PrivateGram(
            params.n_features,
            *params.privacy,
            horizon=params.horizon,
            forget=params.forget,
            rng=self._rng,
        )

    def reset(self) -> None:
        self.gram = self._new_gram()  # a fresh released sum: the old one is of old samples

    def release(self, rows: np.ndarray, n_target: int, check_rank: int) -> Replace:
        assert self.gram is not None
        norms = _count_clipped(self, rows, self._clip_norm)
        rows *= (1.0 / np.maximum(norms, self._clip_norm))[:, None]  # x / max(||x||, C)
        self.gram.release(rows)
        rows.fill(0.0)  # the raw (clipped) block is not kept past its release
        basis, eigenvalues = self.gram.top(n_target)
        self.last_noise_std = self.gram.noise_std
        return Replace(basis, eigen_to_singular(eigenvalues, self._clip_norm))

    def get_state(self) -> dict[str, object]:
        assert self.gram is not None
        return dict(self.gram.get_state())

    def set_state(self, state: Mapping[str, object]) -> None:
        assert self.gram is not None
        self.gram.set_state(state)
        self.gram.close_segment()  # never reuse the saved key (see close_segment)
        _restore_counters(self, state)

    def resume(self, basis: np.ndarray, singular_values: np.ndarray) -> None:
        assert self.gram is not None
        scaled = basis * (singular_values / self._clip_norm)
        self.gram.set_released(scaled @ scaled.T)


class Eq8Release:
    """``mechanism="fpca-eq8"``: each block's masked covariance summary is folded in (eq. (7)-(8)).

    Parameters
    ----------
    params : Params
        With ``privacy``, ``clip_norm`` and ``chunk_size``.
    rng : numpy.random.Generator
        Source of the masks.
    """

    mechanism = "fpca-eq8"
    gram = None

    def __init__(self, params: Params, rng: np.random.Generator) -> None:
        assert params.privacy is not None and params.clip_norm is not None
        assert params.chunk_size is not None
        self.privacy = params.privacy
        self._clip_norm = params.clip_norm
        self._chunk_size = params.chunk_size
        self._rng = rng
        d = params.n_features
        width = min(params.chunk_size, d)
        self._chunk = np.empty((d, width), order="F")  # work arrays of eq. (7)
        self._noise = np.empty((d, width))
        self.n_releases = 0
        self.n_clipped = 0
        self.last_noise_std: float | None = None

    def reset(self) -> None:
        pass

    def release(self, rows: np.ndarray, n_target: int, check_rank: int) -> Fold:
        _count_clipped(self, rows, self._clip_norm)
        assert self.privacy is not None
        k = rows.shape[0]
        _privacy.clip_to_unit_ball(rows, self._clip_norm, out=rows)
        basis_b, values, omega = _privacy.private_block_summary(
            rows,
            *self.privacy,
            rank=n_target,
            chunk_size=self._chunk_size,
            rng=self._rng,
            check_rank=check_rank,
            chunk=self._chunk,
            noise=self._noise,
        )
        rows.fill(0.0)  # the raw (clipped) block is not kept past its summary
        # s_i estimates an eigenvalue of (1/k) X_unit^T X_unit, and X = C X_unit
        sigma = np.sqrt(np.maximum(values, 0.0) * k) * self._clip_norm
        self.last_noise_std = omega
        return Fold(basis_b * sigma, sigma)

    def get_state(self) -> dict[str, object]:
        return {}

    def set_state(self, state: Mapping[str, object]) -> None:
        _restore_counters(self, state)

    def resume(self, basis: np.ndarray, singular_values: np.ndarray) -> None:
        pass


def make_release(params: Params, rng: np.random.Generator | None) -> Release:
    """The release of ``params.mechanism`` (`NoRelease` without privacy)."""
    if params.privacy is None:
        return NoRelease()
    assert rng is not None
    if params.mechanism == "gaussian":
        return GaussianRelease(params, rng)
    return Eq8Release(params, rng)


def _count_clipped(release: Release, rows: np.ndarray, clip_norm: float) -> np.ndarray:
    """Row norms of ``rows`` ``(k,)``; counts the block and the rows above ``clip_norm``."""
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    release.n_clipped += int(np.count_nonzero(norms > clip_norm))
    release.n_releases += 1
    return norms


def _restore_counters(release: Release, state: Mapping[str, object]) -> None:
    """``n_releases_`` and ``n_clipped_`` of a checkpoint (0 if absent); ValueError if invalid."""
    for key in ("n_releases_", "n_clipped_"):
        count = state.get(key, 0)
        if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 0:
            raise ValueError(f"FPCAEdge state: {key} must be an integer >= 0, got {count!r}")
        setattr(release, key[:-1], int(count))
