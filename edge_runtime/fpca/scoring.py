"""Anomaly scores from a subspace model: projection scores, Q (SPE), Hotelling's T^2, limits.

A rank-``r`` model (a `Subspace`: ``basis`` ``U`` of shape ``(n_features, r')``,
``singular_values`` ``s``, ``n_samples`` ``n``, ``mean`` ``mu`` or None) splits each
reading ``x`` (centred, ``x - mu``, for a centred model) into its projection scores
``t = U_r^T x`` on the leading ``r`` directions and a residual ``e = x - U_r t``. Two
statistics follow, as in multivariate statistical process control and network-wide
anomaly detection (Lakhina, Crovella, Diot, SIGCOMM 2004):

- ``Q = ||e||^2``, the squared prediction error (SPE): how far the reading is from the
  model's subspace. Its limit at significance ``alpha`` is Jackson & Mudholkar's (1979)
  from the eigenvalues the model discards, ``lambda_j`` for ``j > r``.
- ``T^2 = sum_i t_i^2 / lambda_i``, Hotelling's statistic: how unusual the reading is
  inside the subspace. Its limit is F-based (Hotelling 1931; Tracy, Young, Mason 1992).

Eigenvalues are the model's covariance eigenvalues ``lambda_i = s_i^2 / (n - 1)`` for a
centred model (the unbiased sample covariance of the readings) and ``s_i^2 / n`` for an
uncentred one (the second-moment matrix ``X^T X / n``, which is the covariance only for
zero-mean readings: use a centred model for readings with an offset, e.g. lux).

With differential privacy, scoring is post-processing of the released (private) model:
it reads only the released subspace (and a released or public ``total_energy``), so it
costs no privacy budget; the readings being scored are the device's own.

numpy/scipy only. `AnomalyScorer` is the class; `q_limit` and `t2_limit` are the limits
alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edge_runtime.fpca._validation import as_float, as_float_array, check_finite_2d, check_int
from edge_runtime.fpca.subspace import Subspace

__all__ = ["AnomalyScorer", "RunningEnergy", "Scores", "q_limit", "t2_limit", "total_energy"]

#: A negative remainder ``total_energy - sum(tracked eigenvalues)`` down to this fraction
#: of ``total_energy`` is rounding (the tracked spectrum went through float32 on the wire
#: or an approximate update) and is clipped to 0; a larger deficit is an error.
ENERGY_RTOL = 1e-6


def _check_alpha(alpha: object) -> float:
    value = as_float(alpha, f"alpha must be a number in (0, 1), got {alpha!r}")
    if not 0.0 < value < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return value


def q_limit(discarded_eigenvalues: np.ndarray, alpha: float = 0.01) -> float:
    """Jackson & Mudholkar's (1979) upper control limit of Q at significance ``alpha``.

    Parameters
    ----------
    discarded_eigenvalues : array-like of shape (m,)
        The covariance eigenvalues ``lambda_j`` of the directions the model leaves in the
        residual (``j > r``), finite and >= 0, in squared units of the readings. ``m = 0``
        (or all zero) gives 0.0: the residual is then identically zero.
    alpha : float, default=0.01
        Significance in (0, 1): the probability that a reading from the model's
        distribution exceeds the limit.

    Returns
    -------
    float
        ``Q_alpha`` in squared units of the readings, >= 0.

    Raises
    ------
    ValueError
        If ``alpha`` is not in (0, 1) or an eigenvalue is negative or not finite.

    Notes
    -----
    With ``theta_k = sum_j lambda_j^k``, ``h0 = 1 - 2 theta1 theta3 / (3 theta2^2)`` and
    ``c_alpha`` the upper-``alpha`` standard normal quantile, Jackson & Mudholkar (1979),
    eq. (3.6), give ``Q_alpha = theta1 [c_alpha sqrt(2 theta2 h0^2) / theta1 + 1 + theta2
    h0 (h0 - 1) / theta1^2]^(1 / h0)``, from the normal approximation of ``(Q /
    theta1)^h0`` for a Gaussian residual. ``h0 <= 1/3`` always, and ``h0 <= 0`` when one
    discarded eigenvalue dominates the others (``theta1 theta3 >= 1.5 theta2^2``); the
    formula is then undefined and the moment-matched scaled chi-square ``g chi2_h`` with
    ``g = theta2 / theta1``, ``h = theta1^2 / theta2`` (Box 1954; Nomikos & MacGregor
    1995, eq. (13)) is used instead.

    References
    ----------
    J. E. Jackson, G. S. Mudholkar, "Control procedures for residuals associated with
    principal component analysis", Technometrics 21(3), 341-349, 1979.
    doi:10.1080/00401706.1979.10489779

    Examples
    --------
    >>> round(q_limit([1.0, 1.0, 1.0, 1.0], alpha=0.05), 2)  # ~ chi2_4 quantile 9.49
    9.46
    """
    a = _check_alpha(alpha)
    lam = np.asarray(discarded_eigenvalues, dtype=np.float64).reshape(-1)
    if not np.isfinite(lam).all() or (lam < 0).any():
        raise ValueError("discarded_eigenvalues must be finite and >= 0")
    theta1, theta2, theta3 = (float(np.sum(lam**k)) for k in (1, 2, 3))
    if theta1 <= 0.0:
        return 0.0
    h0 = 1.0 - 2.0 * theta1 * theta3 / (3.0 * theta2 * theta2)
    # Lazily, and scipy.special rather than scipy.stats: +25 MB of RSS instead of +70 MB
    # (numpy has no normal, chi-square or F quantiles).
    from scipy.special import chdtri, ndtri

    c = -float(ndtri(a))  # upper-alpha normal quantile (scipy.stats.norm.isf)
    if h0 <= 0.0:
        g, h = theta2 / theta1, theta1 * theta1 / theta2
        return float(g * chdtri(h, a))  # upper-alpha chi2_h quantile (chi2.isf)
    bracket = (
        c * math.sqrt(2.0 * theta2 * h0 * h0) / theta1
        + 1.0
        + theta2 * h0 * (h0 - 1.0) / (theta1 * theta1)
    )
    return float(theta1 * math.exp(math.log(bracket) / h0))


def t2_limit(rank: int, n_samples: int, alpha: float = 0.01, *, centered: bool = True) -> float:
    """F-based upper control limit of Hotelling's T^2 for a new reading, at ``alpha``.

    Parameters
    ----------
    rank : int
        Number ``r >= 1`` of scores in T^2.
    n_samples : int
        Number ``n`` of samples the model's eigenvalues were estimated from; ``n > r``
        (centred) or ``n >= r`` (uncentred).
    alpha : float, default=0.01
        Significance in (0, 1).
    centered : bool, default=True
        Whether the model estimated a mean (``lambda = s^2 / (n - 1)``) or not
        (``lambda = s^2 / n``, zero-mean readings).

    Returns
    -------
    float
        ``T^2_alpha``, dimensionless.

    Raises
    ------
    ValueError
        If ``alpha`` is not in (0, 1), ``rank < 1`` or ``n_samples`` is too small.

    Notes
    -----
    Centred: a new reading independent of the ``n`` training samples has ``T^2 ~ r (n - 1)
    (n + 1) / (n (n - r)) F_{r, n - r}`` (Tracy, Young, Mason, J. Quality Technology
    24(2), 1992, eq. (5)), so ``T^2_alpha = r (n - 1) (n + 1) / (n (n - r)) F_{r, n -
    r}(1 - alpha)``. Uncentred (known zero mean, ``n S ~ Wishart_r(n, Sigma)``):
    ``T^2 ~ n r / (n - r + 1) F_{r, n - r + 1}`` (Hotelling's ``T^2(r, n)``, Anderson,
    An Introduction to Multivariate Statistical Analysis, 3rd ed., sec. 5.2), so
    ``T^2_alpha = n r / (n - r + 1) F_{r, n - r + 1}(1 - alpha)``. Both assume Gaussian
    readings and directions fixed in advance; chosen by PCA on the same samples, the
    leading eigenvalues are biased up slightly (small for ``n >> d``). As ``n`` grows
    both tend to the ``chi2_r(1 - alpha)`` quantile.

    Examples
    --------
    >>> round(t2_limit(2, 1_000_000, alpha=0.05), 3)  # chi2_2 quantile 5.991
    5.991
    """
    from scipy.special import fdtri  # lazily, as in q_limit

    a = _check_alpha(alpha)
    r = check_int(rank, "rank", 1)
    n = check_int(n_samples, "n_samples", 1)
    if centered:
        if n <= r:
            raise ValueError(f"n_samples must exceed rank {r} for a centred model, got {n}")
        return float(r * (n - 1) * (n + 1) / (n * (n - r)) * fdtri(r, n - r, 1.0 - a))
    if n < r:
        raise ValueError(f"n_samples must be >= rank {r} for an uncentred model, got {n}")
    return float(n * r / (n - r + 1) * fdtri(r, n - r + 1, 1.0 - a))


def total_energy(X: np.ndarray, *, centered: bool) -> float:  # noqa: N803 (scikit-learn name)
    """The trace of the covariance of ``X`` in the normalisation `AnomalyScorer` uses.

    ``sum_j ||x_j - mean||^2 / (n - 1)`` if ``centered``, else ``sum_j ||x_j||^2 / n``:
    the sum of all ``n_features`` eigenvalues. A device computes it in a stream from
    ``n``, ``sum_j ||x_j||^2`` and the mean (``sum ||x_j||^2 - n ||mean||^2`` is the
    centred sum of squares), one float of state beyond the model.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The samples the model summarises, finite; ``n_samples >= 2`` if ``centered``.
    centered : bool
        As the model (``Subspace.centered``).

    Returns
    -------
    float
        In squared units of ``X``, >= 0.

    Raises
    ------
    ValueError
        If ``X`` is not 2-D, has too few rows or is not finite.

    Examples
    --------
    >>> total_energy([[1.0, 0.0], [-1.0, 0.0]], centered=True)
    2.0
    """
    x = np.asarray(X, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features), got shape {x.shape}")
    check_finite_2d(x, "X")
    n = x.shape[0]
    if centered:
        if n < 2:
            raise ValueError(f"X must have at least 2 samples for a centred energy, got {n}")
        xc = x - x.mean(axis=0)
        return float(np.einsum("ij,ij->", xc, xc) / (n - 1))
    if n < 1:
        raise ValueError("X must have at least 1 sample, got 0")
    return float(np.einsum("ij,ij->", x, x) / n)


class RunningEnergy:
    """`total_energy` of a stream, updated block by block in ``O(n_features)`` state.

    Keeps ``n``, ``sum_j ||x_j||^2``, the mean and ``sum_j ||x_j - mean||^2`` (Welford's
    update, batched as Chan et al.), so that `trace` equals ``total_energy`` of all the rows
    seen so far (up to rounding) for either normalisation. No input checks: the caller
    passes finite float64 blocks of one width.

    Attributes
    ----------
    n : int
        Rows seen.
    sum_sq : float
        ``sum_j ||x_j||^2``, squared units.
    mean : ndarray of shape (n_features,) or None
        Mean of the rows seen, float64; None before the first row.
    m2 : float
        ``sum_j ||x_j - mean||^2``, squared units.
    """

    def __init__(self) -> None:
        self.n = 0
        self.sum_sq = 0.0  # sum ||x||^2
        self.mean: np.ndarray | None = None
        self.m2 = 0.0  # sum ||x - mean||^2

    def update(self, x: np.ndarray) -> None:
        """Add the rows of ``x``, float64 of shape (n_rows, n_features); 0 rows is a no-op."""
        if len(x) == 0:
            return
        m = len(x)
        batch_mean = x.mean(axis=0)
        dev = x - batch_mean
        batch_m2 = float(np.einsum("ij,ij->", dev, dev))
        self.sum_sq += float(np.einsum("ij,ij->", x, x))
        if self.mean is None:
            self.mean, self.m2, self.n = batch_mean, batch_m2, m
            return
        n = self.n + m
        delta = batch_mean - self.mean
        self.m2 += batch_m2 + float(delta @ delta) * self.n * m / n
        self.mean = self.mean + delta * (m / n)
        self.n = n

    def trace(self, centered: bool) -> float | None:
        """`total_energy` of the rows seen, squared units; None below 2 rows (centred) or 1."""
        if centered:
            return None if self.n < 2 else self.m2 / (self.n - 1)
        return None if self.n < 1 else self.sum_sq / self.n


@dataclass(frozen=True)
class Scores:
    """Everything `AnomalyScorer.score` computes for a batch, in one pass.

    Attributes
    ----------
    scores : ndarray of shape (n_samples, rank)
        Projection scores ``t`` (`AnomalyScorer.transform`), units of the readings.
    q : ndarray of shape (n_samples,)
        Q (SPE), squared units of the readings.
    t2 : ndarray of shape (n_samples,)
        Hotelling's T^2, dimensionless.
    flags : ndarray of shape (n_samples,), bool
        ``(q > q_limit) | (t2 > t2_limit)``.
    """

    scores: np.ndarray
    q: np.ndarray
    t2: np.ndarray
    flags: np.ndarray


class AnomalyScorer:
    """Scores readings against a subspace model: projection scores, Q, T^2 and their limits.

    Construction reads the model once and computes both limits (one normal, one F and,
    rarely, one chi-square quantile: ``O(n_features)``). **Time** per batch of ``n``
    readings is ``O(n * n_features * rank)`` (two matrix products with the ``(d, r)``
    basis); **memory** is the model plus ``O(n * n_features)`` temporaries for the
    residual, nothing that grows with the stream. One reading at a time costs ``O(d r)``.

    Parameters
    ----------
    model : Subspace
        The released model, centred (``mean`` not None) or uncentred, ``rank >= 1``,
        finite. For the Q limit it must carry some of the discarded spectrum: pass an
        ``FPCAEdge.tracked_subspace`` (``r + p`` directions) with ``rank=r``, and/or
        ``total_energy``.
    alpha : float, default=0.01
        Significance in (0, 1) of both limits.
    rank : int or None, default=None
        Number ``r`` of leading directions in the model part (scores, T^2);
        ``1 <= rank <= model.rank``. None means ``model.rank``. The directions of
        ``model`` beyond ``rank`` are residual directions: their eigenvalues are the
        tracked part of the discarded spectrum.
    total_energy : float or None, default=None
        The trace of the training covariance in the model's normalisation (the sum of
        all ``n_features`` eigenvalues: `total_energy`), squared units, >= 0. If given,
        the energy beyond the ``t = model.rank`` tracked directions, ``total_energy -
        sum_{j <= t} lambda_j``, is spread evenly over the ``n_features - t`` untracked
        directions (see Notes). If None, only the tracked discarded directions enter the
        Q limit (an underestimate of it when the untracked ones carry energy).

    Attributes
    ----------
    rank_ : int
        ``r``.
    n_features_ : int
        ``d``.
    centered_ : bool
        Whether the model has a mean.
    eigenvalues_ : ndarray of shape (rank,)
        ``lambda_i`` of the model part: ``s_i^2 / (n - 1)`` centred, ``s_i^2 / n`` uncentred.
    discarded_eigenvalues_ : ndarray of shape (n_features - rank,) or (model.rank - rank,)
        The residual spectrum used by the Q limit: the tracked ones beyond ``rank``, then,
        with ``total_energy``, ``n_features - model.rank`` equal values.
    q_limit_ : float
        Jackson-Mudholkar ``Q_alpha`` (`q_limit`), squared units of the readings.
    t2_limit_ : float
        F-based ``T^2_alpha`` (`t2_limit`).
    alpha : float
        As the parameter.

    Raises
    ------
    TypeError
        If ``model`` is not a `Subspace` or ``rank`` not an integer.
    ValueError
        If ``alpha`` is out of range, ``rank`` exceeds ``model.rank``, the model has a
        zero eigenvalue among the first ``rank`` (T^2 undefined) or too few samples for
        the F limit, ``total_energy`` is negative or below the tracked energy, or the
        model carries no discarded spectrum at all (``rank == model.rank <
        n_features`` without ``total_energy``). Messages name the value.

    Notes
    -----
    The untracked spectrum: a streaming model keeps ``t = r + p`` directions, so of the
    ``d - r`` discarded eigenvalues it knows ``p`` (and those slightly low: each block
    update truncates). Spreading the rest of ``total_energy`` evenly keeps ``theta1``
    (hence the mean of Q) exact and underestimates ``theta2``, ``theta3`` when the
    untracked spectrum is uneven (the even spread has the smallest sum of powers for a
    given sum); ``tests/test_fpca_scoring.py`` measures the resulting Q limit against
    the one from the exact spectrum. Flags: a reading is flagged when ``Q > q_limit_``
    or ``T^2 > t2_limit_``, so the false-alarm rate of the flag is at most ``2 alpha``
    (about ``2 alpha - alpha^2`` as Q and T^2 are independent for Gaussian readings).

    Examples
    --------
    >>> import numpy as np
    >>> from edge_runtime.fpca import FPCAEdge
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(2000, 6)) * [5.0, 3.0, 1.0, 1.0, 1.0, 1.0]
    >>> model = FPCAEdge(6, 2, oversample=4, center=True).fit(x).tracked_subspace
    >>> scorer = AnomalyScorer(model, alpha=0.01, rank=2)
    >>> scorer.transform(x[:3]).shape, scorer.q(x[:3]).shape
    ((3, 2), (3,))
    >>> bool(scorer.flags(np.array([[0.0, 0.0, 20.0, 0.0, 0.0, 0.0]]))[0])
    True
    """

    def __init__(
        self,
        model: Subspace,
        alpha: float = 0.01,
        rank: int | None = None,
        total_energy: float | None = None,
    ) -> None:
        if not isinstance(model, Subspace):
            raise TypeError(f"model must be a Subspace, got {type(model).__name__}")
        self.alpha = _check_alpha(alpha)
        if model.rank < 1:
            raise ValueError("model has rank 0; expected at least one direction")
        if not (np.isfinite(model.basis).all() and np.isfinite(model.singular_values).all()):
            raise ValueError("model has non-finite basis or singular values; expected finite")
        if model.mean is not None and not np.isfinite(model.mean).all():
            raise ValueError("model has a non-finite mean; expected finite")
        r = model.rank if rank is None else check_int(rank, "rank", 1)
        if r > model.rank:
            raise ValueError(f"rank must be <= model.rank {model.rank}, got {r}")
        d, t, n = model.n_features, model.rank, model.n_samples
        centred = model.mean is not None
        dof = n - 1 if centred else n
        self.t2_limit_ = t2_limit(r, n, self.alpha, centered=centred)  # checks n
        lam = np.asarray(model.singular_values, dtype=np.float64) ** 2 / dof
        if lam[r - 1] <= 0.0:
            raise ValueError(
                f"model singular value {r - 1} is 0, so T^2 is undefined; pass rank < {r}"
            )
        discarded = lam[r:]
        if total_energy is not None:
            energy = float(total_energy)
            if not (math.isfinite(energy) and energy >= 0.0):
                raise ValueError(f"total_energy must be finite and >= 0, got {total_energy!r}")
            tracked = float(np.sum(lam))
            rest = energy - tracked
            if rest < -ENERGY_RTOL * max(energy, tracked):
                raise ValueError(
                    f"total_energy {energy:.6g} is below the model's tracked energy "
                    f"{tracked:.6g}; expected the trace of the training covariance"
                )
            if d > t:
                discarded = np.concatenate([discarded, np.full(d - t, max(rest, 0.0) / (d - t))])
        elif r == t and t < d:
            raise ValueError(
                f"model carries no discarded eigenvalues (rank {r} == model.rank, "
                f"n_features {d}); pass rank < model.rank or total_energy"
            )
        self.rank_ = r
        self.n_features_ = d
        self.centered_ = centred
        self.eigenvalues_ = lam[:r].copy()
        self.discarded_eigenvalues_ = discarded
        self.q_limit_ = q_limit(discarded, self.alpha)
        self._basis = np.ascontiguousarray(model.basis[:, :r])
        self._mean = None if model.mean is None else np.asarray(model.mean)
        self._inv_lam = 1.0 / self.eigenvalues_

    @property
    def q_limit(self) -> float:
        """``Q_alpha``, squared units of the readings (same as ``q_limit_``)."""
        return self.q_limit_

    @property
    def t2_limit(self) -> float:
        """``T^2_alpha``, dimensionless (same as ``t2_limit_``)."""
        return self.t2_limit_

    def _centre(self, X: object) -> np.ndarray:  # noqa: N803 (scikit-learn name)
        x = as_float_array(X, "X")
        if x.ndim == 1:
            x = x.reshape(1, -1)
        if x.ndim != 2 or x.shape[1] != self.n_features_:
            raise ValueError(
                f"X must have shape (n_samples, {self.n_features_}) (n_features), got {x.shape}"
            )
        check_finite_2d(x, "X")
        return x - self._mean if self._mean is not None else x

    def transform(self, X: np.ndarray) -> np.ndarray:  # noqa: N803 (scikit-learn name)
        """Projection scores ``t = (x - mean) U_r`` (``x U_r`` uncentred).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_features,)
            Readings as rows (one reading may be 1-D), finite.

        Returns
        -------
        ndarray of shape (n_samples, rank)
            Units of the readings.

        Raises
        ------
        ValueError
            If the number of features differs from the model's or ``X`` is not finite.
        """
        return self._centre(X) @ self._basis

    def score(self, X: np.ndarray) -> Scores:  # noqa: N803 (scikit-learn name)
        """Scores, Q, T^2 and flags of a batch in one pass (``O(n d r)``); see `Scores`.

        Raises
        ------
        ValueError
            As `transform`.
        """
        xc = self._centre(X)
        t = xc @ self._basis
        resid = xc - t @ self._basis.T
        q = np.einsum("ij,ij->i", resid, resid)
        t2 = (t * t) @ self._inv_lam
        flags = (q > self.q_limit_) | (t2 > self.t2_limit_)
        return Scores(t, q, t2, flags)

    def q(self, X: np.ndarray) -> np.ndarray:  # noqa: N803 (scikit-learn name)
        """Q (SPE) ``||(x - mean) - U_r U_r^T (x - mean)||^2`` per reading.

        Returns
        -------
        ndarray of shape (n_samples,)
            Squared units of the readings, >= 0.
        """
        return self.score(X).q

    def t2(self, X: np.ndarray) -> np.ndarray:  # noqa: N803 (scikit-learn name)
        """Hotelling's ``T^2 = sum_i t_i^2 / lambda_i`` per reading.

        Returns
        -------
        ndarray of shape (n_samples,)
            Dimensionless, >= 0.
        """
        return self.score(X).t2

    def flags(self, X: np.ndarray) -> np.ndarray:  # noqa: N803 (scikit-learn name)
        """True where ``Q > q_limit_`` or ``T^2 > t2_limit_`` (strict inequalities).

        Returns
        -------
        ndarray of shape (n_samples,), bool
        """
        return self.score(X).flags

    def __repr__(self) -> str:
        return (
            f"AnomalyScorer(n_features={self.n_features_}, rank={self.rank_}, "
            f"alpha={self.alpha}, centered={self.centered_}, "
            f"q_limit={self.q_limit_:.6g}, t2_limit={self.t2_limit_:.6g})"
        )
