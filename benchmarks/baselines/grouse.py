"""GROUSE: stochastic gradient descent on the Grassmannian, one sample at a time (baseline).

Source: L. Balzano, R. Nowak, B. Recht, "Online identification and tracking of
subspaces from highly incomplete information", 48th Allerton Conference, 2010
(arXiv:1006.4046), Algorithm 1 ("GROUSE"), here with every entry observed.

For an orthonormal ``U`` of shape ``(n_features, rank)`` and a sample ``x`` (a row
here, a column in the paper), the weights are ``w = U^T x`` (the least-squares fit),
the prediction ``p = U w`` and the residual ``r = x - p``. The gradient of
``||x - U w||^2`` on the Grassmannian is ``-2 r w^T``; moving along the geodesic in
that direction by ``eta_t`` gives (Balzano et al. 2010, update of Alg. 1)

    sigma = ||r|| ||p||,   theta = sigma * eta_t,
    U <- U + ((cos(theta) - 1) p / ||p|| + sin(theta) r / ||r||) w^T / ||w||,

a rank-one update that keeps ``U`` orthonormal and rotates its span towards ``x`` by
the angle ``theta`` (``theta = arctan(||r|| / ||p||)`` would put ``x`` in the span).
The paper leaves the step sizes ``eta_t`` open. The authors' reference MATLAB code
(Recht and Balzano, 2010) uses the diminishing SGD rule ``eta_t = C / t`` (``C = 0.1``
on raw data) and skips steps with ``theta >= pi / 2``; this module does the same by
default (``schedule="inverse"``, steps with ``theta >= pi / 2`` are skipped, ``C = 100``
on normalised data, see below) and offers a constant step (``schedule="constant"``)
for tracking a drifting subspace.

Scale: ``theta`` is proportional to the squared scale of the data (``sigma`` is a
product of two norms), so a fixed ``C`` means different steps for data in lux and in
kilolux. With ``normalize=True`` (default) ``eta_t`` is divided by the running mean of
``||x||^2`` over the samples seen so far (this one included), which makes the
algorithm invariant to rescaling the data: ``theta ~ C / t * sin(phi) cos(phi)`` for a
typical sample at angle ``phi`` from the span. ``normalize=False`` is the paper's
update with the raw ``eta_t``.

Initialisation: a random orthonormal ``U`` (QR of a standard normal matrix, as the
reference code), from ``np.random.default_rng(seed)``. Data are not centred.
"""

from __future__ import annotations

import math

import numpy as np

from benchmarks.baselines._common import Baseline
from benchmarks.baselines._common import as_rows as _as_rows
from benchmarks.baselines._common import orthonormalize as _orthonormalize
from edge_runtime.fpca._validation import check_int

__all__ = ["GROUSE"]

SCHEDULES = ("inverse", "constant")


class GROUSE(Baseline):
    """GROUSE subspace tracking (full observations): one geodesic step per sample.

    Memory: the ``(n_features, rank)`` basis. Time: ``O(n_features * rank)`` per sample
    (two matrix-vector products and a rank-one update); the samples are processed one
    by one in Python, so throughput is bounded by interpreter overhead for small
    ``n_features``.

    Parameters
    ----------
    n_features : int
        Dimension ``d`` of each sample, >= 1.
    rank : int
        Subspace dimension ``r``, ``1 <= rank <= n_features``.
    eta : float, default=100.0
        Step size constant ``C`` > 0: ``eta_t = C / t`` (``"inverse"``, ``t`` = 1, 2,
        ... counts samples since the last reset) or ``eta_t = C`` (``"constant"``),
        divided by the running mean squared norm when ``normalize``. With
        ``normalize``, ``C / t`` steps converge on a static subspace only if ``C`` is
        large against ``1 / gap`` (the eigengap of the normalised second moments,
        as for Oja's rule); 100 recovers planted subspaces and Synth(0.5), Synth(1)
        in one pass and is the default, while drifting streams (e.g. the
        Motes data) favour small ``C`` (see `benchmarks.baselines`). With
        ``schedule="constant"``, values around 0.1 are sensible.
    schedule : {"inverse", "constant"}, default="inverse"
        Step size rule; ``"inverse"`` is the reference code's ``C / t`` (a static
        subspace), ``"constant"`` tracks a drifting one.
    normalize : bool, default=True
        Divide ``eta_t`` by the running mean of ``||x||^2`` (scale invariance).
    seed : int, default=0
        Seed of the random initial basis.

    Attributes
    ----------
    n_samples_seen_ : int
        Samples passed to `partial_fit` since the last reset.
    n_skipped_ : int
        Samples that gave no step: ``x`` in the span or orthogonal to it (no
        gradient), or ``theta >= pi / 2``.

    Raises
    ------
    TypeError
        If an integer parameter is not an integer.
    ValueError
        If ``rank > n_features``, ``eta <= 0`` or ``schedule`` is unknown.

    Examples
    --------
    >>> import numpy as np
    >>> from benchmarks.baselines import GROUSE
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(2000, 2)) @ rng.normal(size=(2, 8))
    >>> g = GROUSE(8, rank=2).fit(x)
    >>> g.basis.shape
    (8, 2)
    """

    name = "GROUSE"
    #: Whether the estimate is of centred data (no).
    centers = False

    def __init__(
        self,
        n_features: int,
        rank: int,
        *,
        eta: float = 100.0,
        schedule: str = "inverse",
        normalize: bool = True,
        seed: int = 0,
    ) -> None:
        self._set_dimensions(n_features, rank)
        self.eta = float(eta)
        if not (self.eta > 0.0 and math.isfinite(self.eta)):
            raise ValueError(f"eta must be a finite number > 0, got {eta!r}")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        self.schedule = schedule
        self.normalize = bool(normalize)
        self.seed = check_int(seed, "seed", 0)
        self.reset()

    @property
    def n_tracked(self) -> int:
        """Directions of state: ``rank``."""
        return self.rank

    def reset(self) -> GROUSE:
        """Forget all samples: a new random basis from ``default_rng(seed)``."""
        rng = np.random.default_rng(self.seed)
        self._u = _orthonormalize(rng.standard_normal((self.n_features, self.rank)))
        self._sum_sq_norm = 0.0
        self.n_samples_seen_ = 0
        self.n_skipped_ = 0
        return self

    def partial_fit(self, X: np.ndarray) -> GROUSE:  # noqa: N803 (scikit-learn name)
        """One GROUSE step per row of ``X`` ``(n_samples, n_features)`` (1-D: one row).

        Any chunking of the same rows gives the same basis (bitwise).

        Raises
        ------
        TypeError
            If ``X`` is not numeric.
        ValueError
            If ``X`` has the wrong number of features or contains NaN or infinity.
        """
        x = _as_rows(X, self.n_features)
        u = self._u
        for row in x:  # one step per sample
            self.n_samples_seen_ += 1
            t = self.n_samples_seen_
            self._sum_sq_norm += float(row @ row)
            eta = self.eta / t if self.schedule == "inverse" else self.eta
            if self.normalize:
                eta /= max(self._sum_sq_norm / t, np.finfo(float).tiny)
            w = u.T @ row
            p = u @ w
            r = row - p
            norm_w = math.sqrt(float(w @ w))  # = ||p|| as u is orthonormal
            norm_r = math.sqrt(float(r @ r))
            theta = eta * norm_r * norm_w
            if norm_w == 0.0 or norm_r == 0.0 or not theta < math.pi / 2:
                self.n_skipped_ += 1
                continue
            step = (math.cos(theta) - 1.0) / norm_w * p + math.sin(theta) / norm_r * r
            u += np.outer(step, w / norm_w)
        return self

    @property
    def basis(self) -> np.ndarray:
        """Current subspace estimate ``U``, ``(n_features, rank)`` float64, orthonormal.

        The geodesic steps keep ``U`` orthonormal in exact arithmetic; the returned copy
        is re-orthonormalised by a QR to remove rounding drift (span unchanged).
        """
        return _orthonormalize(self._u)

    def __repr__(self) -> str:
        return (
            f"GROUSE(n_features={self.n_features}, rank={self.rank}, eta={self.eta}, "
            f"schedule={self.schedule!r}, n_samples_seen_={self.n_samples_seen_})"
        )
