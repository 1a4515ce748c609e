"""Synth(1) table of section (f): q_A against epsilon, the paper's Fig. 3 setting.

``q_A = |<v1, v1_hat>|`` (``v1`` the top eigenvector of ``(1/n) X^T X``, ``v1_hat`` a method's
first direction; 1 is perfect, a random direction gives `random_level`) for the
`SYNTH_METHODS` on `benchmarks.synth.synth` rows (largest norm 1: clip norm 1 clips nothing).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from benchmarks.measure import Summary, rng_for, seed_for, summarise
from benchmarks.privacy.comparators import dpdispca, mod_sulq
from benchmarks.privacy.leaves import streamed
from benchmarks.synth import synth
from edge_runtime.fpca import FPCAEdge

__all__ = [
    "SYNTH_METHODS", "SynthCurve", "SynthMethod", "fpca_first_direction", "q_a",
    "random_level", "run_synth",
]  # fmt: skip


@dataclass(frozen=True)
class SynthMethod:
    """One column: ``kind`` ``"gaussian"``, ``"fpca-eq8"`` (`FPCAEdge`, ``blocks`` releases of
    ``ceil(n / blocks)`` rows, continual ``horizon``), ``"mod-sulq"`` or ``"dpdispca"``."""

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
    """q_A of one method at each epsilon of the table; rows per release (0: not block-wise)."""

    label: str
    block_size: int = 0
    horizon: int = 1
    q: list[Summary] = field(default_factory=list)


def random_level(n_features: int) -> float:
    """``E |<v1, u>|``, ``u`` uniform on the sphere: ``Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2))``,
    about ``sqrt(2 / (pi d))``; 0.181 at d = 20."""
    d = n_features
    return math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)


def q_a(v1: np.ndarray, direction: np.ndarray) -> float:
    """``|<v1, v>|`` for unit vectors (clipped to [0, 1] against rounding)."""
    return min(1.0, abs(float(np.dot(v1, direction))))


def fpca_first_direction(
    x: np.ndarray, rank: int, epsilon: float, delta: float, *, block_size: int,
    mechanism: str = "gaussian", horizon: int = 1, clip_norm: float = 1.0, seed: int,
) -> np.ndarray:  # fmt: skip
    """First column, ``(d,)``, of `FPCAEdge`'s reported basis after one pass and a flush."""
    est = FPCAEdge(
        x.shape[1], rank, block_size, privacy=(epsilon, delta), clip_norm=clip_norm,
        mechanism=mechanism, horizon=horizon, random_state=seed,
    )  # fmt: skip
    return streamed(est, x).subspace.basis[:, 0]


def _direction(method: SynthMethod, x: np.ndarray, rank: int, eps: float, delta: float,
               key: tuple[int, ...]) -> np.ndarray:  # fmt: skip
    if method.kind == "mod-sulq":
        return mod_sulq(x, rank, eps, delta, rng_for(*key))[:, 0]
    if method.kind == "dpdispca":
        return dpdispca([x], rank, eps, delta, rng_for(*key))[:, 0]
    return fpca_first_direction(
        x, rank, eps, delta, block_size=math.ceil(x.shape[0] / method.blocks),
        mechanism=method.kind, horizon=method.horizon, seed=seed_for(*key),
    )  # fmt: skip


def run_synth(
    *, n_features: int, n_samples: int, delta: float, rank: int, epsilons: Sequence[float],
    trials: int, methods: Sequence[SynthMethod] = SYNTH_METHODS, alpha: float = 1.0,
    log: Callable[[str], None] = print,
) -> list[SynthCurve]:  # fmt: skip
    """One `SynthCurve` per method (in order) over ``trials`` trials: trial ``t`` on
    ``synth(alpha, d, n, seed=t)``, method ``m`` at epsilon index ``e`` seeded by
    ``SeedSequence((5, t, e, m))``."""
    qs = [[[] for _ in epsilons] for _ in methods]  # [method][epsilon] -> trials
    for t in range(trials):
        x = synth(alpha, n_features, n_samples, seed=t)
        v1 = np.linalg.eigh(x.T @ x / n_samples)[1][:, -1]
        for ei, eps in enumerate(epsilons):
            for mi, method in enumerate(methods):
                qs[mi][ei].append(q_a(v1, _direction(method, x, rank, eps, delta, (5, t, ei, mi))))
    curves = [
        SynthCurve(
            m.label, math.ceil(n_samples / m.blocks) if m.kind in ("gaussian", "fpca-eq8") else 0,
            m.horizon, [summarise(v) for v in per_eps],
        )
        for m, per_eps in zip(methods, qs, strict=True)
    ]
    q = ", ".join(f"eps={e:g} {s.mean:.4f}" for e, s in zip(epsilons, curves[0].q, strict=True))
    log(f"  synth: {curves[0].label} mean q_A {q}")
    return curves
