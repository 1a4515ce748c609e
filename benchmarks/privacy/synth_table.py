"""Synth(1) table of section (f): q_A against epsilon, the paper's Fig. 3 setting.

Utility is ``q_A = |<v1, v1_hat>|``: ``v1`` the top eigenvector of the second-moment
matrix ``(1/n) X^T X`` of the data (offline, no privacy; rows are samples), ``v1_hat``
a method's first direction; 1 is perfect, a direction drawn at random in ``d``
dimensions gives `random_level` (0.181 at d = 20).

Data: ``d = 20``, ``n = 5000`` rows of `benchmarks.synth.synth` (alpha = 1: spectrum
``i^-1`` in a random orthonormal basis, scaled so that the largest row has norm 1: every
method gets the same unit-ball data, clipping norm 1, nothing clipped), fresh data and
fresh noise in every trial, all methods on the same data in a trial; delta = 0.05.

Methods (`SynthMethod`): `edge_runtime.fpca.FPCAEdge` (rank 5, the authors' setting,
default oversample; one pass, ``flush()``, ``subspace.basis[:, 0]``) with
``mechanism="gaussian"`` in one block or in blocks of ``n / 5`` (``H = 1`` or ``H = 5``),
with ``mechanism="fpca-eq8"`` in one block; symmetric MOD-SuLQ and DPdisPCA (``S = 1``)
on all rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from benchmarks.privacy.dpdispca import dpdispca
from benchmarks.privacy.mod_sulq import mod_sulq
from benchmarks.privacy.stats import Summary, rng_for, seed_for, summarise
from benchmarks.synth import synth
from edge_runtime.fpca import FPCAEdge

__all__ = [
    "SYNTH_METHODS",
    "SynthCurve",
    "SynthMethod",
    "fpca_first_direction",
    "q_a",
    "random_level",
    "run_synth",
]


@dataclass(frozen=True)
class SynthMethod:
    """One column of the Synth table.

    Attributes
    ----------
    label : str
    kind : str
        ``"gaussian"`` or ``"fpca-eq8"`` (`FPCAEdge`), ``"mod-sulq"`` or ``"dpdispca"``.
    blocks : int
        `FPCAEdge` kinds: releases over the stream, block size ``ceil(n / blocks)``.
    horizon : int
        ``H`` of the continual release (gaussian only).
    """

    label: str
    kind: str
    blocks: int = 1
    horizon: int = 1


SYNTH_METHODS: tuple[SynthMethod, ...] = (
    SynthMethod("gaussian, one block", "gaussian"),
    SynthMethod("gaussian, blocks of n/5, H 1", "gaussian", blocks=5),
    SynthMethod("gaussian, blocks of n/5, H 5", "gaussian", blocks=5, horizon=5),
    SynthMethod("eq. (8), one block", "fpca-eq8"),
    SynthMethod("MOD-SuLQ (symmetric)", "mod-sulq"),
    SynthMethod("DPdisPCA (S = 1)", "dpdispca"),
)


@dataclass
class SynthCurve:
    """q_A of one method at each epsilon of the table."""

    label: str
    #: Rows per release (0: not block-wise).
    block_size: int = 0
    horizon: int = 1
    q: list[Summary] = field(default_factory=list)


def random_level(n_features: int) -> float:
    """``E |<v1, u>|`` for ``u`` uniform on the unit sphere: q_A of a random direction.

    ``Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2))``, about ``sqrt(2 / (pi d))``; 0.181 at d = 20.
    """
    d = n_features
    return math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)


def q_a(v1: np.ndarray, direction: np.ndarray) -> float:
    """``|<v1, v>|`` for unit vectors (clipped to [0, 1] against rounding)."""
    return min(1.0, abs(float(np.dot(v1, direction))))


def fpca_first_direction(
    x: np.ndarray,
    rank: int,
    epsilon: float,
    delta: float,
    *,
    block_size: int,
    mechanism: str = "gaussian",
    horizon: int = 1,
    clip_norm: float = 1.0,
    seed: int,
) -> np.ndarray:
    """First column, ``(d,)``, of `FPCAEdge`'s reported basis after one pass and a flush."""
    est = FPCAEdge(
        x.shape[1],
        rank,
        block_size,
        privacy=(epsilon, delta),
        clip_norm=clip_norm,
        mechanism=mechanism,
        horizon=horizon,
        random_state=seed,
    )
    est.partial_fit(x)
    est.flush()
    return est.subspace.basis[:, 0]


def _direction(
    method: SynthMethod,
    x: np.ndarray,
    rank: int,
    epsilon: float,
    delta: float,
    key: tuple[int, ...],
) -> np.ndarray:
    if method.kind == "mod-sulq":
        return mod_sulq(x, rank, epsilon, delta, rng_for(*key))[:, 0]
    if method.kind == "dpdispca":
        return dpdispca([x], rank, epsilon, delta, rng_for(*key))[:, 0]
    return fpca_first_direction(
        x,
        rank,
        epsilon,
        delta,
        block_size=math.ceil(x.shape[0] / method.blocks),
        mechanism=method.kind,
        horizon=method.horizon,
        seed=seed_for(*key),
    )


def run_synth(
    *,
    n_features: int,
    n_samples: int,
    delta: float,
    rank: int,
    epsilons: Sequence[float],
    trials: int,
    methods: Sequence[SynthMethod] = SYNTH_METHODS,
    alpha: float = 1.0,
    log: Callable[[str], None] = print,
) -> list[SynthCurve]:
    """q_A of every method at every epsilon, summarised over ``trials`` trials.

    Trial ``t`` uses ``synth(alpha, d, n, seed=t)``; method ``m`` at epsilon ``e`` draws its
    noise from ``SeedSequence((5, t, e index, m index))``.

    Returns
    -------
    list of SynthCurve
        One per method, in ``methods`` order.
    """
    qs = [[[] for _ in epsilons] for _ in methods]  # [method][epsilon] -> trials
    for t in range(trials):
        x = synth(alpha, n_features, n_samples, seed=t)
        v1 = np.linalg.eigh(x.T @ x / n_samples)[1][:, -1]
        for ei, eps in enumerate(epsilons):
            for mi, method in enumerate(methods):
                direction = _direction(method, x, rank, eps, delta, (5, t, ei, mi))
                qs[mi][ei].append(q_a(v1, direction))
    curves = []
    for method, per_eps in zip(methods, qs, strict=True):
        block = (
            math.ceil(n_samples / method.blocks) if method.kind in ("gaussian", "fpca-eq8") else 0
        )
        curves.append(
            SynthCurve(method.label, block, method.horizon, [summarise(v) for v in per_eps])
        )
    first = curves[0]
    log(
        f"  synth: {first.label} mean q_A "
        + ", ".join(f"eps={e:g} {s.mean:.4f}" for e, s in zip(epsilons, first.q, strict=True))
    )
    return curves
