"""Local power iterations: what a FedPower device computes between two synchronisations.

Starting from the global basis ``Z`` (``(d, r)``) a device runs ``p`` power steps on its
local second-moment matrix ``A_l`` (`edge_runtime.fedpower.local_gram`):
``Y = A_l Q (+ G)``, ``Q = orth(Y)``, and replies with the last product ``Y`` *before* it is
orthonormalised, as in FedPower and its predecessor LocalPower (Li, Wang, Chen, Zhang,
ICML 2021; the authors' ``pm.py`` returns the last ``A^T A q`` unnormalised). Keeping the
last product unnormalised is what makes one local step (``p = 1``) with sample-count
weights *exactly* the centralised power method: ``sum_l (s_l / n) A_l Z = M Z``.

Cost: ``p`` products ``(d, d) x (d, r)`` and ``p`` thin QRs, ``O(p (d**2 r + d r**2))``
time, ``O(d r)`` extra memory.
"""

from __future__ import annotations

import numpy as np

from edge_runtime.fedpower._checks import as_basis, as_square, check_steps

__all__ = ["initial_basis", "local_iterations", "orthonormalise"]


def orthonormalise(y: np.ndarray) -> np.ndarray:
    """Thin QR ``Y = Q R`` with the signs of ``diag(R)`` moved into ``Q`` (``diag(R) >= 0``).

    Parameters
    ----------
    y : ndarray of shape (d, r), r <= d

    Returns
    -------
    ndarray of shape (d, r)
        Orthonormal columns; ``q_j`` spans the same leading ``j`` directions as ``y``, and an
        already orthonormal ``y`` is returned unchanged up to rounding.
    """
    q, r = np.linalg.qr(y)
    signs = np.where(np.diag(r) < 0.0, -1.0, 1.0)
    return q * signs


def initial_basis(seed: int, n_features: int, rank: int) -> np.ndarray:
    """``Z_0``: the orthonormalised ``(n_features, rank)`` Gaussian matrix of ``seed``.

    The start of FedPower (Algorithm 3) when a round carries no basis: every leaf draws the
    same ``G`` from ``numpy.random.default_rng(seed)`` (standard normal entries) and
    orthonormalises it (`orthonormalise`), so all start from one ``Z_0``.

    Parameters
    ----------
    seed : int
        Seed of the round (`edge_runtime.wire.fedpower.RoundMessage.seed`), ``>= 0``.
    n_features : int
        ``d``, rows.
    rank : int
        ``r``, columns, ``1 <= rank <= n_features``.

    Returns
    -------
    ndarray of shape (n_features, rank), float64
        Orthonormal columns.

    Raises
    ------
    ValueError
        From numpy, for a negative ``seed`` or a negative dimension.
    """
    g = np.random.default_rng(seed).standard_normal((n_features, rank))
    return orthonormalise(g)


def local_iterations(
    A: np.ndarray,  # noqa: N803 (the paper's name)
    Z: np.ndarray,  # noqa: N803
    steps: int,
    rng: np.random.Generator | None = None,
    noise_std: float = 0.0,
) -> np.ndarray:
    """``steps`` local power iterations of FedPower from ``Z``; the last product ``Y``.

    ``Q_0 = orth(Z)``; for ``k = 1..steps``: ``Y_k = A Q_{k-1} + G_k``,
    ``Q_k = orth(Y_k)`` (thin QR, `orthonormalise`); returns ``Y_steps``.

    Parameters
    ----------
    A : ndarray of shape (d, d)
        Symmetric PSD local matrix: `LocalGram.matrix` (``S / n``), or `LocalGram.gram`
        (``S``) for the private step, whose sensitivity is stated for ``S``.
    Z : ndarray of shape (d, r), 1 <= r <= d
        Start basis (the global basis of the round). It is orthonormalised first, so the
        sensitivity bound of the private step (``||Q||_2 = 1``) holds for any full-rank
        ``Z``, including one rounded to float32 on the wire.
    steps : int
        ``p`` >= 1, the local iterations of this round (`Schedule.local_steps`).
    rng : numpy.random.Generator or None, default=None
        Source of the noise; required when ``noise_std > 0``.
    noise_std : float, default=0.0
        ``sigma`` of the i.i.d. Gaussian entries of each ``G_k`` (``(d, r)``), in the units
        of ``A``. 0 is the non-private power step. For ``A = S`` of unit-ball rows the
        step is the Gaussian mechanism of L2 sensitivity `power_step_sensitivity(r)`
        (``sqrt(2)`` for ``r >= 2``); use `fedpower_noise_std` to calibrate it, and
        ``sigma / n`` when iterating on ``A = S / n`` instead.

    Returns
    -------
    ndarray of shape (d, r), float64
        ``Y_steps = A Q_{steps-1} (+ G)``, not orthonormalised (see the module docstring).

    Raises
    ------
    ValueError
        One line naming a bad shape, a non-finite value, ``steps < 1``, a negative or
        non-finite ``noise_std``, or ``noise_std > 0`` without ``rng``.

    Notes
    -----
    The noisy step ``Y = A Z + G`` is the noisy power method of Hardt & Price (NeurIPS
    2014), which FedPower runs on every device at every local iteration. Hardt & Price
    calibrate for entry-wise neighbouring matrices (sensitivity ``||Z||_max``); we calibrate
    for the runtime's replace-one neighbouring readings, as FPCA's budget is, so the two
    methods compare at equal ``(epsilon, delta)``.

    Examples
    --------
    >>> import numpy as np
    >>> a = np.diag([3.0, 2.0, 1.0])
    >>> y = local_iterations(a, np.ones((3, 1)), steps=40)
    >>> bool(abs(orthonormalise(y)[0, 0] - 1.0) < 1e-6)
    True
    """
    a = as_square(A, "A")
    z = as_basis(Z, "Z", n_features=a.shape[0])
    steps = check_steps(steps, "steps")
    noisy = _check_noise(noise_std, rng)
    q = orthonormalise(z)
    y = q
    for k in range(steps):
        y = a @ q
        if noisy:
            assert rng is not None
            y += rng.normal(0.0, float(noise_std), size=y.shape)
        if k < steps - 1:
            q = orthonormalise(y)
    return y


def _check_noise(noise_std: object, rng: object) -> bool:
    if isinstance(noise_std, bool) or not isinstance(
        noise_std, int | float | np.integer | np.floating
    ):
        raise ValueError(f"noise_std must be a finite number >= 0, got {noise_std!r}")
    if not (np.isfinite(noise_std) and noise_std >= 0.0):
        raise ValueError(f"noise_std must be a finite number >= 0, got {noise_std!r}")
    if noise_std > 0.0 and not isinstance(rng, np.random.Generator):
        raise ValueError(f"noise_std {noise_std!r} > 0 needs rng, a numpy Generator")
    return bool(noise_std > 0.0)
