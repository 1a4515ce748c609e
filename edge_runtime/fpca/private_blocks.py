"""The differentially private block path of `FPCAEdge`: its settings and one block's release.

All of the estimator's privacy parameters pass through `check_privacy` (the budget
``(epsilon, delta)``, ``clip_norm``, ``mechanism``, ``horizon`` and the masks' generator)
and are held in one `PrivacySettings`, which `PrivateBlocksMixin._init_privacy` sets on
the estimator; a block is released by `PrivateBlocksMixin._apply_private`, through
`release_gaussian` or `release_eq8` after `clip_count` counted its clipped rows.

``mechanism="gaussian"`` (the default): each block of ``k`` samples (``block_size``,
fewer for a `FPCAEdge.flush`) is clipped to the unit ball (``x -> x / max(C, ||x||)``)
and released once as its Gram matrix plus symmetric Gaussian noise calibrated by the
analytic Gaussian mechanism at sensitivity ``sqrt(2)``
(`edge_runtime.fpca.gaussian_mechanism`); the raw block is zeroed. The state's basis and
singular values are the leading eigenpairs ``(u_i, lambda_i)`` of the released running
sum, ``sigma_i = C sqrt(max(lambda_i, 0))``. Each sample lies in one block, so all
releases together are one Gaussian mechanism and everything returned is post-processing
(the argument is written out in `edge_runtime.fpca.private_gram`). Memory with privacy:
``8 (3 d**2 + horizon)`` bytes more (three ``(d, d)`` matrices, 55 KiB at d = 48), at
most ``8 max(b d, 3 d**2)`` bytes of temporaries per block (tested under tracemalloc),
and ``O(horizon d**2)`` time per release.

``mechanism="fpca-eq8"``: streaming MOD-SuLQ of Grammenos et al. (2020), eq. (5)-(8):
each block of ``k`` samples (``k = block_size``, fewer for a flush) is clipped to the
unit ball (``x -> x / max(C, ||x||)``); its covariance ``A = (1/k) X^T X`` is built ``c``
columns at a time, each chunk plus a fresh non-symmetric Gaussian mask with i.i.d.
``N(0, omega**2)`` entries, ``omega = noise_std(epsilon, delta, d, k)`` (eq. (8)), and
the chunks are streamed through the block update to the ``t`` leading singular pairs
``(U_B, s)`` of ``A + N``. Conversion to the data's scale: ``s_i`` estimates an
eigenvalue of ``A``, and ``C**2 k A`` is the Gram matrix of the clipped block, so the
summary's singular values are ``sigma_i = C sqrt(k max(s_i, 0))`` and the block enters
the state as the columns ``U_B diag(sigma)`` in eq. (3). The raw block is zeroed after
its summary; `FPCAEdge.subspace` and `FPCAEdge.tracked_subspace` never fold in pending
rows (their ``n_samples`` counts summarised samples only), so everything the estimator
returns is post-processing of masked blocks. Each sample is in one block, so the whole
stream is ``(epsilon, delta)``-DP with respect to replacing one sample; sample counts
(``n_samples``) are not protected. Memory with privacy: ``2 n_features c`` more floats
for the chunk and its mask, plus ``O(n_features (t + c))`` temporaries per block. With a
huge ``epsilon`` the estimate matches the non-private one (error ratio within 1 % at
``epsilon = 1e6``, tested).

References
----------
A. Grammenos, R. Mendoza-Smith, J. Crowcroft, C. Mascolo. "Federated Principal
Component Analysis." NeurIPS 2020. arXiv:1907.08059.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from edge_runtime.fpca import privacy as _privacy
from edge_runtime.fpca._validation import check_int, check_positive
from edge_runtime.fpca.privacy import MECHANISMS
from edge_runtime.fpca.private_gram import PrivateGram, check_horizon, eigen_to_singular

if TYPE_CHECKING:
    from edge_runtime.fpca.streaming import FPCAEdge

__all__ = [
    "PrivacySettings",
    "PrivateBlocksMixin",
    "check_chunk_size",
    "check_privacy",
    "clip_count",
    "default_block_size",
    "release_eq8",
    "release_gaussian",
]

#: Block size without privacy when none is given.
PLAIN_BLOCK_SIZE = 50


@dataclass(frozen=True)
class PrivacySettings:
    """The checked privacy parameters of one estimator (all None/1 without privacy).

    Attributes
    ----------
    privacy : tuple of (float, float) or None
        ``(epsilon, delta)``, or None without privacy.
    clip_norm : float or None
        ``C`` (the data's units) with privacy, else None.
    mechanism : str or None
        One of `MECHANISMS` with privacy, else None.
    horizon : int
        Releases per segment of the continual release (1 unless ``"gaussian"``).
    rng : numpy.random.Generator or None
        The masks' source with privacy, else None.
    """

    privacy: tuple[float, float] | None
    clip_norm: float | None
    mechanism: str | None
    horizon: int
    rng: np.random.Generator | None

    @property
    def gram(self) -> bool:
        """True for ``mechanism="gaussian"`` with privacy: the state is a released Gram sum."""
        return self.privacy is not None and self.mechanism == "gaussian"


def check_privacy(
    privacy: tuple[float, float] | None,
    clip_norm: float | None,
    random_state: int | np.random.Generator | None,
    mechanism: str,
    horizon: int,
    center: bool,
) -> PrivacySettings:
    """Check the privacy parameters of `FPCAEdge` (as its constructor documents them).

    Parameters
    ----------
    privacy, clip_norm, random_state, mechanism, horizon, center
        As `FPCAEdge`.

    Returns
    -------
    PrivacySettings

    Raises
    ------
    ValueError
        One line naming the value: an unknown ``mechanism``; ``horizon`` out of range,
        or not 1 without privacy or with ``"fpca-eq8"``; ``clip_norm`` without privacy
        or missing or not > 0 with it; ``privacy`` not ``(epsilon, delta)`` in range
        (`privacy.check_budget`); ``center`` with privacy; a ``random_state`` that is not
        an int, a Generator or None.
    TypeError
        If ``horizon`` is not an integer (`check_horizon`).
    """
    if mechanism not in MECHANISMS:
        raise ValueError(
            f"mechanism must be one of {', '.join(map(repr, MECHANISMS))}, got {mechanism!r}"
        )
    checked_horizon = check_horizon(horizon)
    if checked_horizon != 1 and mechanism != "gaussian":
        raise ValueError(f"horizon {horizon!r} is only used with mechanism 'gaussian'")
    if privacy is None:
        if clip_norm is not None:
            raise ValueError(f"clip_norm {clip_norm!r} is only used with privacy")
        if checked_horizon != 1:
            raise ValueError(f"horizon {horizon!r} is only used with privacy")
        return PrivacySettings(None, None, None, checked_horizon, None)
    try:
        epsilon, delta = privacy
    except (TypeError, ValueError):
        raise ValueError(f"privacy must be (epsilon, delta), got {privacy!r}") from None
    budget = _privacy.check_budget(epsilon, delta)
    if clip_norm is None:
        raise ValueError("privacy needs clip_norm (the norm samples are clipped to)")
    clip = check_positive(clip_norm, "clip_norm")
    if center:
        raise ValueError(
            "center=True cannot be combined with privacy: the mean would be released without noise"
        )
    if isinstance(random_state, np.random.Generator):
        rng = random_state
    elif random_state is None or (
        isinstance(random_state, int | np.integer) and not isinstance(random_state, bool)
    ):
        rng = np.random.default_rng(random_state)
    else:
        raise ValueError(
            f"random_state must be an int seed, a numpy Generator or None, got {random_state!r}"
        )
    return PrivacySettings(budget, clip, mechanism, checked_horizon, rng)


def default_block_size(settings: PrivacySettings, n_features: int) -> int:
    """`FPCAEdge`'s block size when none is given: 50 without privacy, else the mechanism's.

    ``"gaussian"``: `privacy.gaussian_default_block_size`; ``"fpca-eq8"``:
    `privacy.default_block_size` (``T`` of Lemma 2.2). Raises their ValueError when the
    block would exceed `privacy.MAX_DEFAULT_BLOCK_BYTES`.
    """
    if settings.privacy is None:
        return PLAIN_BLOCK_SIZE
    if settings.mechanism == "gaussian":
        return _privacy.gaussian_default_block_size(*settings.privacy, n_features, settings.horizon)
    return _privacy.default_block_size(*settings.privacy, n_features)


def check_chunk_size(
    chunk_size: int | None, mechanism: str | None, n_features: int, block_size: int
) -> int | None:
    """Columns ``c`` of eq. (7) per chunk with ``"fpca-eq8"`` (None: ``min(d, b)``), else None.

    Raises
    ------
    ValueError
        If ``chunk_size`` is given for another mechanism (or without privacy), or < 1.
    TypeError
        If it is not an integer.
    """
    if mechanism != "fpca-eq8":
        if chunk_size is not None:
            raise ValueError(f"chunk_size {chunk_size!r} is only used with mechanism 'fpca-eq8'")
        return None
    return check_int(
        min(n_features, block_size) if chunk_size is None else chunk_size, "chunk_size", 1
    )


def new_gram(settings: PrivacySettings, n_features: int, forget: float) -> PrivateGram:
    """A fresh released Gram sum for ``mechanism="gaussian"`` (`PrivateGram`)."""
    assert settings.privacy is not None and settings.rng is not None
    return PrivateGram(
        n_features, *settings.privacy, horizon=settings.horizon, forget=forget, rng=settings.rng
    )


def clip_count(rows: np.ndarray, clip_norm: float) -> tuple[np.ndarray, int]:
    """Row norms of ``rows`` (shape ``(k,)``) and how many exceed ``clip_norm``."""
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    return norms, int(np.count_nonzero(norms > clip_norm))


def release_gaussian(
    gram: PrivateGram, rows: np.ndarray, norms: np.ndarray, clip_norm: float, rank: int
) -> tuple[np.ndarray, np.ndarray]:
    """Release one block into ``gram``; the leading ``rank`` eigenpairs in the data's units.

    Parameters
    ----------
    gram : PrivateGram
        The released running sum (updated).
    rows : ndarray of shape (k, n_features), float64
        The block; scaled to the unit ball in place (``x / max(||x||, C)``), released,
        then zeroed (the raw block is not kept past its release).
    norms : ndarray of shape (k,)
        The rows' norms (`clip_count`).
    clip_norm : float
        ``C``.
    rank : int
        Directions ``t`` to return.

    Returns
    -------
    basis : ndarray of shape (n_features, t)
    singular_values : ndarray of shape (t,)
        ``C sqrt(max(lambda_i, 0))`` of the sum's eigenvalues ``lambda_i``.
    """
    rows *= (1.0 / np.maximum(norms, clip_norm))[:, None]  # x / max(||x||, C)
    gram.release(rows)
    rows.fill(0.0)  # the raw (clipped) block is not kept past its release
    basis, eigenvalues = gram.top(rank)
    return basis, eigen_to_singular(eigenvalues, clip_norm)


def release_eq8(
    rows: np.ndarray,
    settings: PrivacySettings,
    rank: int,
    chunk_size: int,
    check_rank: int,
    chunk: np.ndarray,
    noise: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, float]:
    """One block's masked summary (eq. (7)), as columns to update the state with (eq. (3)).

    The rows are clipped to the unit ball in place, the block's masked covariance is
    reduced to ``t = rank`` directions (`privacy.private_block_summary`), and its singular
    values ``s_i`` (eigenvalue estimates of ``(1/k) X^T X`` of the unit-ball rows) are
    converted back to the data's scale as singular values of the clipped block, ``sigma_i
    = C sqrt(k max(s_i, 0))``: ``X = C X_unit`` and ``X_unit^T X_unit = k A``.

    Parameters
    ----------
    rows : ndarray of shape (k, n_features), float64
        The block (zeroed on return).
    settings : PrivacySettings
        With privacy (``"fpca-eq8"``).
    rank : int
        Directions ``t`` kept.
    chunk_size : int
        Columns ``c`` per chunk.
    check_rank : int
        Reported rank, for the update's conditioning check.
    chunk, noise : ndarray of shape (n_features, min(c, n_features))
        Work arrays.

    Returns
    -------
    cols : ndarray of shape (n_features, t)
        ``U_B diag(sigma)``.
    sigma : ndarray of shape (t,)
        Its column norms, in the data's units.
    omega : float
        The mask's entry std (eq. (8)).
    """
    assert settings.privacy is not None and settings.clip_norm is not None
    assert settings.rng is not None
    k = rows.shape[0]
    _privacy.clip_to_unit_ball(rows, settings.clip_norm, out=rows)
    basis_b, values, omega = _privacy.private_block_summary(
        rows,
        *settings.privacy,
        rank=rank,
        chunk_size=chunk_size,
        rng=settings.rng,
        check_rank=check_rank,
        chunk=chunk,
        noise=noise,
    )
    rows.fill(0.0)  # the raw (clipped) block is not kept past its summary
    sigma = np.sqrt(np.maximum(values, 0.0) * k) * settings.clip_norm
    return basis_b * sigma, sigma, omega


class PrivateBlocksMixin:
    """The private block path of `FPCAEdge`: its privacy attributes and one block's release.

    Holds no state of its own: `_init_privacy` sets `FPCAEdge`'s privacy attributes
    (``privacy``, ``clip_norm``, ``mechanism``, ``horizon``, ``last_noise_std_``,
    ``n_releases_``, ``n_clipped_``), and `_apply_private` updates its state through
    `FPCAEdge`'s ``_update``, ``_set_state`` and ``_end_block``.
    """

    __slots__ = ()

    def _init_privacy(self: FPCAEdge, settings: PrivacySettings) -> PrivacySettings:
        """Set the privacy attributes from checked ``settings``; return them."""
        self._privacy_settings = settings
        self.privacy = settings.privacy
        self.clip_norm = settings.clip_norm
        self.mechanism = settings.mechanism
        self.horizon = settings.horizon
        self.last_noise_std_: float | None = None
        self.n_releases_ = 0
        self.n_clipped_ = 0
        return settings

    def _apply_private(self: FPCAEdge, k: int) -> None:
        """Release the first ``k`` buffered rows as one block of the private mechanism."""
        assert self.clip_norm is not None
        rows = self._buffer[:k]
        norms, clipped = clip_count(rows, self.clip_norm)
        self.n_clipped_ += clipped
        self.n_releases_ += 1
        if self._gram is None:  # "fpca-eq8": a masked summary, folded in like a block
            cols, sigma, omega = release_eq8(
                rows,
                self._privacy_settings,
                self._n_target(),
                self.chunk_size or self.n_features,
                self.rank_,
                self._chunk,
                self._noise,
            )
            self._update(cols, sigma)
            self.last_noise_std_ = omega
        else:  # "gaussian": the state is the top of the released Gram sum
            t = self._n_target()
            self._set_state(*release_gaussian(self._gram, rows, norms, self.clip_norm, t))
            self.last_noise_std_ = self._gram.noise_std
        self._end_block(k)
