"""FedPower aggregation: Orthogonal Procrustes alignment, weighted mean, orthonormalisation.

Every device replies with ``Y_l`` (``(d, r)``), the last product of its local power
iterations. Their spans agree near convergence, but their bases need not: after many
local iterations each device's columns follow *its own* eigenvectors, in its own order
and with its own signs, so a plain average can cancel or merge directions. FedPower
weights each reply with an orthogonal ``D_l`` that best aligns it to a common reference
(Orthogonal Procrustes Transformation, OPT):

    D_l = argmin_{D^T D = I} ||Y_l D - Y_ref||_F = U V^T,  U S V^T = svd(Y_l^T Y_ref)

(Schönemann 1966; `scipy.linalg.orthogonal_procrustes`), then ``Z = orth(sum_l w_l Y_l
D_l)`` with ``w_l = s_l / sum s`` (sample counts). Without OPT, ``D_l = I``.

The reference. LocalPower's code aligns every device to device 1's basis. We default to the
*previous global basis* ``Z_{t-1}``, the start of every device's iterations, because (i) it
needs no device to be present (partial participation) and does not depend on arrival
order, and (ii) with one local step ``Y_l^T Z_{t-1} = Z_{t-1}^T A_l Z_{t-1}`` is symmetric
PSD, whose polar factor is ``I``: OPT then changes nothing and the round is the exact
centralised power step, as in the authors' code (where ``D = I`` at ``p = 1``). Passing
``reference=None`` aligns to the reply of largest weight (the paper's one-device choice).

Cost: per reply an ``r x r`` SVD and a ``(d, r) x (r, r)`` product, then one thin QR:
``O(m (d r**2 + r**3))`` time for ``m`` replies, ``O(d r)`` extra memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from edge_runtime.fedpower._checks import as_basis
from edge_runtime.fedpower.power import orthonormalise
from edge_runtime.fpca.subspace import flip_signs

__all__ = ["aggregate", "procrustes_rotation"]


def procrustes_rotation(y: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``D = argmin ||y D - reference||_F`` over orthogonal ``(r, r)`` ``D`` (OPT).

    Parameters
    ----------
    y, reference : ndarray of shape (d, r)

    Returns
    -------
    ndarray of shape (r, r)
        Orthogonal. Positive rescaling of either argument does not change it.

    Raises
    ------
    ValueError
        If the shapes differ or a value is not finite (one line).

    Examples
    --------
    >>> import numpy as np
    >>> b = np.eye(3)[:, :2]
    >>> procrustes_rotation(b @ np.array([[0.0, 1.0], [1.0, 0.0]]), b).round(12).tolist()
    [[0.0, 1.0], [1.0, 0.0]]
    """
    y = as_basis(y, "y")
    ref = as_basis(reference, "reference", n_features=y.shape[0], rank=y.shape[1])
    from scipy.linalg import orthogonal_procrustes  # lazily: a leaf's import needs no scipy

    rotation, _ = orthogonal_procrustes(y, ref, check_finite=False)
    return rotation


def aggregate(
    bases: Sequence[np.ndarray],
    weights: Sequence[float],
    reference: np.ndarray | None = None,
    opt: bool = True,
) -> np.ndarray:
    """FedPower's global basis from the devices' replies: ``orth(sum_l w_l Y_l D_l)``.

    Parameters
    ----------
    bases : sequence of ndarray of shape (d, r)
        The replies ``Y_l`` (`local_iterations`), at least one; need not be orthonormal.
    weights : sequence of float
        One per reply, finite and >= 0, not all 0: the devices' sample counts ``s_l``
        (normalised here to sum to 1).
    reference : ndarray of shape (d, r) or None, default=None
        ``Y_ref`` for OPT: the previous global basis (what `FedPowerServer` passes), or
        None for the reply of largest weight (the first among equals). Ignored without OPT.
    opt : bool, default=True
        Align each reply by `procrustes_rotation` before averaging; False is the plain
        weighted average.

    Returns
    -------
    ndarray of shape (d, r), float64
        Orthonormal (thin QR), signs deterministic (`flip_signs`: the largest-|.| entry of
        each column positive).

    Raises
    ------
    ValueError
        One line naming the bad value: no replies, shapes that differ, non-finite values,
        a weight count that differs from the replies', a negative or non-finite weight, or
        all weights 0.

    Examples
    --------
    >>> import numpy as np
    >>> b = np.eye(4)[:, :2]
    >>> z = aggregate([b, -b[:, ::-1]], [1.0, 1.0])  # the same span, misaligned
    >>> bool(np.allclose(z @ z.T, b @ b.T))
    True
    >>> aggregate([b, -b], [1.0, 1.0], opt=False)  # plain averaging cancels
    Traceback (most recent call last):
    ...
    ValueError: the weighted average of the bases is zero; nothing to orthonormalise
    """
    items = list(bases)
    if not items:
        raise ValueError("aggregate needs at least one basis, got an empty sequence")
    first = as_basis(items[0], "bases[0]")
    ys = [first] + [
        as_basis(b, f"bases[{i}]", n_features=first.shape[0], rank=first.shape[1])
        for i, b in enumerate(items[1:], start=1)
    ]
    w = _check_weights(weights, len(ys))
    if opt:
        ref = ys[int(np.argmax(w))] if reference is None else reference
        ref = as_basis(ref, "reference", n_features=first.shape[0], rank=first.shape[1])
        from scipy.linalg import orthogonal_procrustes  # lazily, as above

        ys = [y @ orthogonal_procrustes(y, ref, check_finite=False)[0] for y in ys]
    total = np.zeros_like(first)
    for wi, y in zip(w, ys, strict=True):
        if wi:
            total += wi * y
    if not np.any(total):
        raise ValueError("the weighted average of the bases is zero; nothing to orthonormalise")
    return flip_signs(orthonormalise(total), copy=False)


def _check_weights(weights: Sequence[float], count: int) -> np.ndarray:
    try:
        w = np.asarray(list(weights), dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"weights must be numbers, got {weights!r}") from None
    if w.shape != (count,):
        raise ValueError(f"weights must have one entry per basis ({count}), got {w.shape[0]}")
    if not np.isfinite(w).all() or (w < 0.0).any():
        raise ValueError(f"weights must be finite and >= 0, got {w.tolist()}")
    s = float(w.sum())
    if not (s > 0.0 and math.isfinite(s)):
        raise ValueError(f"weights must not all be 0, got {w.tolist()}")
    return w / s
