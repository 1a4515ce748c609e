"""Benchmark (f): utility of private PCA against epsilon (the paper's Fig. 3 setting).

Utility is ``q_A = |<v1, v1_hat>|``: ``v1`` is the top eigenvector of the second-moment
matrix ``(1/n) X^T X`` of the data (offline, no privacy; rows are samples), ``v1_hat``
a method's first direction; 1 is perfect, and a direction drawn at random in ``d``
dimensions gives about ``sqrt(2 / (pi d))`` (0.18 at d = 20).

Panels (`PrivacyResults.panels`):

- ``Synth(alpha)``: ``d = 20``, ``n = 5000`` rows of `benchmarks.synth.synth` (spectrum
  ``i^-alpha`` in a random orthonormal basis, scaled so that the largest row has norm 1,
  so every method gets the same unit-ball data and nothing is clipped: clipping norm 1).
  Fresh data and fresh noise in every trial; all methods see the same data in a trial.
  Methods: FPCA-DP with one block (``block_size = n``: streaming MOD-SuLQ over column
  chunks, comparable to MOD-SuLQ at equal ``n``), FPCA-DP streaming (``block_size =
  ceil(n / 5)``, each block masked for its own samples), symmetric MOD-SuLQ, DPdisPCA
  with one site and, on one alpha, OpenDP's PCA when installed (a different guarantee).
- ``Synth(1), 8 leaves``: the same data split into 8 contiguous parts of ``n / 8`` rows.
  FPCA-DP on every leaf (one block of its ``n / 8`` rows, its mask calibrated to them),
  leaves publish their ``tracked_subspace`` and `edge_runtime.fpca.merge_many` merges
  them (Alg. 1); DPdisPCA with ``S = 8``; MOD-SuLQ on all ``n`` rows as the centralised
  reference.
- ``Motes light``: the 7712 x 48 matrix, uncentred, clipped at the 95th percentile of
  its row norms (the top 5 % of rows are scaled down to that norm); ``v1`` comes from
  the unclipped data, and the clip's own effect is the ``q_A`` of the clipped data
  without noise. Fixed data, fresh noise per trial.

All FPCA-DP runs use rank 5 (the authors' setting) with the runtime's default
oversample, ``.flush()`` the final partial block and read ``.subspace.basis[:, 0]``.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from benchmarks.privacy import opendp_ref
from benchmarks.privacy.dpdispca import dpdispca, dpdispca_noise_std
from benchmarks.privacy.mod_sulq import mod_sulq
from benchmarks.synth import synth
from edge_runtime.fpca import FPCAEdge, merge_many
from edge_runtime.fpca.privacy import clip_to_unit_ball, mod_sulq_noise_std, noise_std

__all__ = [
    "CLIPPED",
    "DPDIS",
    "FEDERATED",
    "FED_DPDIS",
    "FED_FPCA",
    "FED_MODSULQ",
    "FPCA_ONE",
    "FPCA_STREAM",
    "FULL",
    "MODSULQ",
    "MOTES",
    "OPENDP",
    "QUICK",
    "TINY",
    "Check",
    "Curve",
    "PrivacyResults",
    "PrivacySizes",
    "checks",
    "fpca_dp_basis",
    "q_a",
    "random_level",
    "run_utility",
    "synth_panel",
]

FPCA_ONE = "FPCA-DP (b = n, one block)"
FPCA_STREAM = "FPCA-DP (b = n/5, streaming)"
MODSULQ = "MOD-SuLQ (symmetric)"
DPDIS = "DPdisPCA (S = 1)"
OPENDP = "OpenDP PCA (pure eps-DP, other neighbours: eps not comparable)"
FED_FPCA = "FPCA-DP, 8 leaves + merge_many"
FED_DPDIS = "DPdisPCA (S = 8)"
FED_MODSULQ = "MOD-SuLQ centralised (reference)"
CLIPPED = "clipped data, no noise"

FEDERATED = "Synth(1), 8 leaves"
MOTES = "Motes light"

#: The epsilon range of the paper's Fig. 3; larger values in the grid are extra.
PAPER_EPSILON_MAX = 4.0


def synth_panel(alpha: float) -> str:
    """Panel name of Synth(alpha)."""
    return f"Synth({alpha:g})"


@dataclass(frozen=True)
class PrivacySizes:
    """Settings of one run of the utility benchmark."""

    n_features: int = 20
    n_samples: int = 5000
    alphas: tuple[float, ...] = (0.5, 1.0, 2.0)
    epsilons: tuple[float, ...] = (0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 8.0, 16.0)
    delta: float = 0.05
    rank: int = 5
    trials: int = 100
    stream_blocks: int = 5
    leaves: int = 8
    federated_alpha: float | None = 1.0  # None: no federated panel
    motes: bool = True
    motes_rows: int | None = None  # None: all rows
    motes_trials: int = 50
    motes_clip_percentile: float = 95.0
    opendp: bool = True
    opendp_alpha: float = 1.0
    opendp_trials: int = 20
    opendp_timeout: float = 60.0


FULL = PrivacySizes()
QUICK = PrivacySizes(
    epsilons=(0.1, 0.5, 1.0, 2.0, 4.0),
    trials=10,
    motes_trials=5,
    opendp_trials=2,
    opendp_timeout=8.0,
)
#: A few seconds: the tests' configuration (no OpenDP).
TINY = PrivacySizes(
    n_features=8,
    n_samples=400,
    alphas=(1.0,),
    epsilons=(0.5, 4.0),
    trials=3,
    leaves=4,
    motes_rows=600,
    motes_trials=2,
    opendp=False,
)


@dataclass
class Curve:
    """q_A of one method at each epsilon: summary over trials (NaN where not run)."""

    method: str
    epsilons: list[float] = field(default_factory=list)
    mean: list[float] = field(default_factory=list)
    std: list[float] = field(default_factory=list)
    median: list[float] = field(default_factory=list)
    p25: list[float] = field(default_factory=list)
    p75: list[float] = field(default_factory=list)
    trials: list[int] = field(default_factory=list)
    note: str = ""

    def add(self, epsilon: float, values: Sequence[float]) -> None:
        """Append the summary of ``values`` (may be empty: NaN, 0 trials) at ``epsilon``."""
        v = np.asarray(values, dtype=np.float64)
        self.epsilons.append(float(epsilon))
        self.trials.append(int(v.size))
        if v.size == 0:
            for column in (self.mean, self.std, self.median, self.p25, self.p75):
                column.append(math.nan)
            return
        self.mean.append(float(v.mean()))
        self.std.append(float(v.std(ddof=1)) if v.size > 1 else 0.0)
        self.median.append(float(np.median(v)))
        self.p25.append(float(np.percentile(v, 25)))
        self.p75.append(float(np.percentile(v, 75)))

    def at(self, epsilon: float) -> int:
        """Index of ``epsilon`` in this curve."""
        return self.epsilons.index(float(epsilon))


@dataclass
class Check:
    """One Done-when item of issue 5 (same shape as `benchmarks.report.Check`)."""

    item: str
    measured: str
    target: str
    passed: bool | None


@dataclass
class PrivacyResults:
    """Everything one run of the utility benchmark measured."""

    n_features: int
    n_samples: int
    delta: float
    rank: int
    trials: int
    epsilons: list[float]
    alphas: list[float]
    stream_block_size: int
    leaves: int
    #: Panel name -> one curve per method.
    panels: dict[str, list[Curve]] = field(default_factory=dict)
    #: Panel name -> paired differences "FPCA-DP config - MOD-SuLQ" (mean, std over trials).
    differences: dict[str, list[Curve]] = field(default_factory=dict)
    #: Per-entry noise std at each epsilon: omega (FPCA-DP, eq. 8), beta (MOD-SuLQ),
    #: tau (DPdisPCA), for the sample counts named in the key.
    noise: dict[str, list[float]] = field(default_factory=dict)
    motes_shape: tuple[int, int] = (0, 0)
    motes_clip_norm: float = math.nan
    motes_clip_percentile: float = math.nan
    motes_clipped_rows: int = 0
    motes_clip_q: float = math.nan
    #: ``|cos|`` between the Motes data's ``v1`` and its mean (uncentred data).
    motes_mean_cos: float = math.nan
    motes_trials: int = 0
    motes_stream_block_size: int = 0
    opendp_status: str = "not run"
    seconds: float = 0.0

    def curve(self, panel: str, method: str) -> Curve | None:
        """The curve of ``method`` in ``panel``, or None."""
        return next((c for c in self.panels.get(panel, []) if c.method == method), None)


def _curves(
    methods: Sequence[str], epsilons: Sequence[float], qs: dict[str, list[list[float]]]
) -> list[Curve]:
    """One `Curve` per method from ``qs[method][epsilon index]`` (the trials' q_A)."""
    curves = []
    for method in methods:
        curve = Curve(method)
        for ei, eps in enumerate(epsilons):
            curve.add(eps, qs[method][ei])
        curves.append(curve)
    return curves


def random_level(n_features: int) -> float:
    """``E |<v1, u>|`` for ``u`` uniform on the unit sphere: q_A of a random direction.

    ``Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2))``, about ``sqrt(2 / (pi d))``; 0.181 at d = 20.
    """
    d = n_features
    return math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)


def q_a(v1: np.ndarray, direction: np.ndarray) -> float:
    """``|<v1, v>|`` for unit vectors (clipped to [0, 1] against rounding)."""
    return min(1.0, abs(float(np.dot(v1, direction))))


def _top_direction(x: np.ndarray) -> np.ndarray:
    _, vectors = np.linalg.eigh(x.T @ x / x.shape[0])
    return vectors[:, -1]


def fpca_dp_basis(
    x: np.ndarray,
    rank: int,
    epsilon: float,
    delta: float,
    *,
    block_size: int,
    clip_norm: float,
    seed: int,
) -> np.ndarray:
    """FPCA-DP's reported basis after one pass over ``x`` and a final `flush`."""
    est = FPCAEdge(
        x.shape[1],
        rank,
        block_size=block_size,
        privacy=(epsilon, delta),
        clip_norm=clip_norm,
        random_state=seed,
    )
    est.partial_fit(x)
    est.flush()
    return est.subspace.basis


def _federated_fpca(
    parts: Sequence[np.ndarray], rank: int, epsilon: float, delta: float, seed: int
) -> np.ndarray:
    """Alg. 1: one private FPCA-Edge per leaf (one block each), merged by `merge_many`."""
    subspaces = []
    for i, part in enumerate(parts):
        est = FPCAEdge(
            part.shape[1],
            rank,
            block_size=part.shape[0],
            privacy=(epsilon, delta),
            clip_norm=1.0,
            random_state=_seed(seed, i),
        )
        est.partial_fit(part)
        est.flush()
        subspaces.append(est.tracked_subspace)
    return merge_many(subspaces, rank=subspaces[0].rank).basis


def _seed(*key: int) -> int:
    """A 63-bit seed derived from ``key`` (independent streams per key)."""
    state = np.random.SeedSequence([abs(int(k)) for k in key]).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([abs(int(k)) for k in key]))


def _stream_block(n: int, blocks: int) -> int:
    """``ceil(n / blocks)``: ``blocks - 1`` full blocks and one flushed block of similar size."""
    return max(1, math.ceil(n / blocks))


def _add_differences(
    res: PrivacyResults,
    panel: str,
    qs: dict[str, list[list[float]]],
    configs: Sequence[str],
    reference: str,
) -> None:
    out = []
    for config in configs:
        diff = Curve(f"{config} - {reference}")
        for ei, eps in enumerate(res.epsilons):
            a, b = np.asarray(qs[config][ei]), np.asarray(qs[reference][ei])
            diff.add(eps, a - b if a.size == b.size else [])
        out.append(diff)
    res.differences[panel] = out


def _synth_panel(
    res: PrivacyResults, sizes: PrivacySizes, ai: int, alpha: float, log: Callable[[str], None]
) -> None:
    d, n, r, delta = sizes.n_features, sizes.n_samples, sizes.rank, sizes.delta
    methods = [FPCA_ONE, FPCA_STREAM, MODSULQ, DPDIS]
    qs: dict[str, list[list[float]]] = {m: [[] for _ in res.epsilons] for m in methods}
    for t in range(sizes.trials):
        x = synth(alpha, d, n, seed=t)
        v1 = _top_direction(x)
        for ei, eps in enumerate(res.epsilons):
            key = (1, ai, t, ei)
            qs[FPCA_ONE][ei].append(
                q_a(
                    v1,
                    fpca_dp_basis(
                        x, r, eps, delta, block_size=n, clip_norm=1.0, seed=_seed(*key, 0)
                    )[:, 0],
                )
            )
            qs[FPCA_STREAM][ei].append(
                q_a(
                    v1,
                    fpca_dp_basis(
                        x,
                        r,
                        eps,
                        delta,
                        block_size=res.stream_block_size,
                        clip_norm=1.0,
                        seed=_seed(*key, 1),
                    )[:, 0],
                )
            )
            qs[MODSULQ][ei].append(q_a(v1, mod_sulq(x, r, eps, delta, _rng(*key, 2))[:, 0]))
            qs[DPDIS][ei].append(q_a(v1, dpdispca([x], r, eps, delta, _rng(*key, 3))[:, 0]))
    panel = synth_panel(alpha)
    curves = _curves(methods, res.epsilons, qs)
    res.panels[panel] = curves
    _add_differences(res, panel, qs, [FPCA_ONE, FPCA_STREAM], MODSULQ)
    one = curves[0]
    log(
        f"  {panel}: FPCA-DP one block q_A "
        + ", ".join(f"eps={e:g} {m:.3f}" for e, m in zip(one.epsilons, one.mean, strict=True))
    )
    if sizes.opendp and alpha == sizes.opendp_alpha:
        _opendp_curve(res, sizes, alpha, log)


def _opendp_curve(
    res: PrivacyResults, sizes: PrivacySizes, alpha: float, log: Callable[[str], None]
) -> None:
    if not opendp_ref.available():
        res.opendp_status = (
            "not installed (optional extra privacy-ref: pip install -e '.[privacy-ref]')"
        )
        log(f"  OpenDP: {res.opendp_status}")
        return
    d, n = sizes.n_features, sizes.n_samples
    trials = min(sizes.opendp_trials, sizes.trials)
    data = np.stack([synth(alpha, d, n, seed=t) for t in range(trials)])
    v1s = [_top_direction(x) for x in data]
    curve = Curve(OPENDP)
    notes = []
    stop = False
    for eps in res.epsilons:
        if stop:
            curve.add(eps, [])
            continue
        run = opendp_ref.run_pca(data, eps, sizes.rank, row_norm=1.0, timeout=sizes.opendp_timeout)
        curve.add(eps, [q_a(v, c) for v, c in zip(v1s, run.components, strict=False)])
        if run.error:
            notes.append(f"eps={eps:g}: failed ({run.error})")
            stop = True
        elif run.timed_out:
            notes.append(
                f"eps={eps:g}: {len(run.components)} of {trials} fits within the "
                f"{sizes.opendp_timeout:g} s limit; larger eps skipped (the sampler slows "
                "down as eps grows)"
            )
            stop = True
        log(
            f"  OpenDP eps={eps:g}: {len(run.components)}/{trials} fits in {run.seconds:.1f} s"
            + (" (timeout)" if run.timed_out else "")
        )
    curve.note = "; ".join(notes)
    res.panels[synth_panel(alpha)].append(curve)
    res.opendp_status = (
        f"run on {synth_panel(alpha)} with up to {trials} trials per epsilon, one child "
        f"process per epsilon with a hard {sizes.opendp_timeout:g} s timeout"
        + (f"; {curve.note}" if curve.note else "")
    )


def _federated_panel(
    res: PrivacyResults, sizes: PrivacySizes, alpha: float, log: Callable[[str], None]
) -> None:
    d, n, r, delta = sizes.n_features, sizes.n_samples, sizes.rank, sizes.delta
    methods = [FED_FPCA, FED_DPDIS, FED_MODSULQ]
    qs: dict[str, list[list[float]]] = {m: [[] for _ in res.epsilons] for m in methods}
    for t in range(sizes.trials):
        x = synth(alpha, d, n, seed=t)
        v1 = _top_direction(x)
        parts = np.array_split(x, sizes.leaves)
        for ei, eps in enumerate(res.epsilons):
            key = (2, t, ei)
            qs[FED_FPCA][ei].append(
                q_a(v1, _federated_fpca(parts, r, eps, delta, _seed(*key, 0))[:, 0])
            )
            qs[FED_DPDIS][ei].append(q_a(v1, dpdispca(parts, r, eps, delta, _rng(*key, 1))[:, 0]))
            qs[FED_MODSULQ][ei].append(q_a(v1, mod_sulq(x, r, eps, delta, _rng(*key, 2))[:, 0]))
    curves = _curves(methods, res.epsilons, qs)
    res.panels[FEDERATED] = curves
    log(
        "  federated: FPCA-DP q_A "
        + ", ".join(
            f"eps={e:g} {m:.3f}" for e, m in zip(curves[0].epsilons, curves[0].mean, strict=True)
        )
    )


def _motes_panel(res: PrivacyResults, sizes: PrivacySizes, log: Callable[[str], None]) -> None:
    from edge_runtime.datasets import load_dataset

    x = load_dataset("motes-light")[: sizes.motes_rows]
    n, d = x.shape
    r, delta = sizes.rank, sizes.delta
    norms = np.linalg.norm(x, axis=1)
    c = float(np.percentile(norms, sizes.motes_clip_percentile))
    unit = clip_to_unit_ball(x, c)
    v1 = _top_direction(x)
    res.motes_shape = (n, d)
    res.motes_clip_norm = c
    res.motes_clip_percentile = sizes.motes_clip_percentile
    res.motes_clipped_rows = int(np.count_nonzero(norms > c))
    res.motes_clip_q = q_a(v1, _top_direction(unit))
    mean = x.mean(axis=0)
    res.motes_mean_cos = q_a(v1, mean / np.linalg.norm(mean))
    res.motes_trials = sizes.motes_trials
    block = _stream_block(n, sizes.stream_blocks)
    res.motes_stream_block_size = block
    methods = [FPCA_ONE, FPCA_STREAM, MODSULQ, DPDIS]
    qs: dict[str, list[list[float]]] = {m: [[] for _ in res.epsilons] for m in methods}
    for t in range(sizes.motes_trials):
        for ei, eps in enumerate(res.epsilons):
            key = (3, t, ei)
            qs[FPCA_ONE][ei].append(
                q_a(
                    v1,
                    fpca_dp_basis(x, r, eps, delta, block_size=n, clip_norm=c, seed=_seed(*key, 0))[
                        :, 0
                    ],
                )
            )
            qs[FPCA_STREAM][ei].append(
                q_a(
                    v1,
                    fpca_dp_basis(
                        x, r, eps, delta, block_size=block, clip_norm=c, seed=_seed(*key, 1)
                    )[:, 0],
                )
            )
            qs[MODSULQ][ei].append(q_a(v1, mod_sulq(unit, r, eps, delta, _rng(*key, 2))[:, 0]))
            qs[DPDIS][ei].append(q_a(v1, dpdispca([unit], r, eps, delta, _rng(*key, 3))[:, 0]))
    curves = _curves(methods, res.epsilons, qs)
    clipped = Curve(CLIPPED)
    for eps in res.epsilons:
        clipped.add(eps, [res.motes_clip_q])
    curves.append(clipped)
    res.panels[MOTES] = curves
    _add_differences(res, MOTES, qs, [FPCA_ONE, FPCA_STREAM], MODSULQ)
    log(
        f"  motes: clip norm {c:.4g} ({res.motes_clipped_rows} of {n} rows clipped), "
        f"clipped q_A {res.motes_clip_q:.5f}; FPCA-DP one block q_A "
        + ", ".join(
            f"eps={e:g} {m:.3f}" for e, m in zip(curves[0].epsilons, curves[0].mean, strict=True)
        )
    )


def run_utility(sizes: PrivacySizes = FULL, log: Callable[[str], None] = print) -> PrivacyResults:
    """Run every panel of the utility benchmark.

    Parameters
    ----------
    sizes : PrivacySizes
        `FULL`, `QUICK` or a custom set.
    log : callable
        Progress lines go here.

    Returns
    -------
    PrivacyResults
    """
    t0 = time.perf_counter()
    d, n, delta = sizes.n_features, sizes.n_samples, sizes.delta
    res = PrivacyResults(
        n_features=d,
        n_samples=n,
        delta=delta,
        rank=sizes.rank,
        trials=sizes.trials,
        epsilons=[float(e) for e in sizes.epsilons],
        alphas=[float(a) for a in sizes.alphas],
        stream_block_size=_stream_block(n, sizes.stream_blocks),
        leaves=sizes.leaves,
    )
    leaf = n // sizes.leaves
    b = res.stream_block_size
    res.noise = {
        f"omega, n = {n}": [noise_std(e, delta, d, n) for e in res.epsilons],
        f"omega, n = {b}": [noise_std(e, delta, d, b) for e in res.epsilons],
        f"omega, n = {leaf}": [noise_std(e, delta, d, leaf) for e in res.epsilons],
        f"beta, n = {n}": [mod_sulq_noise_std(e, delta, d, n) for e in res.epsilons],
        f"tau, n = {n}": [dpdispca_noise_std(e, delta, n) for e in res.epsilons],
        f"tau, n = {leaf}": [dpdispca_noise_std(e, delta, leaf) for e in res.epsilons],
    }
    if sizes.opendp and sizes.opendp_alpha not in sizes.alphas:
        res.opendp_status = f"not run (alpha {sizes.opendp_alpha:g} not among the panels)"
    elif not sizes.opendp:
        res.opendp_status = "not run (disabled in this configuration)"
    for ai, alpha in enumerate(sizes.alphas):
        _synth_panel(res, sizes, ai, alpha, log)
    if sizes.federated_alpha is not None:
        _federated_panel(res, sizes, sizes.federated_alpha, log)
    if sizes.motes:
        _motes_panel(res, sizes, log)
    res.seconds = time.perf_counter() - t0
    return res


def checks(res: PrivacyResults) -> list[Check]:
    """The Done-when items of issue 5 on ``res`` (empty if Synth(1) was not run).

    Over the paper's range ``epsilon <= 4`` on Synth(1): q_A of FPCA-DP (one block)
    rises with epsilon (its mean at the largest epsilon exceeds that at the smallest by
    more than two standard errors, and no step between neighbouring epsilons falls by
    more than three standard errors: below the noise floor q_A is flat at the level of a
    random direction, and a 3-sigma bar keeps false alarms over ~10 pairs near 2 %),
    and FPCA-DP is at or above symmetric MOD-SuLQ for
    most epsilon ("at or above": the mean paired difference, same data in every trial,
    is above ``-2`` standard errors).
    """
    panel = synth_panel(1.0)
    one, ms = res.curve(panel, FPCA_ONE), res.curve(panel, MODSULQ)
    if one is None or ms is None:
        return []
    idx = [i for i, e in enumerate(one.epsilons) if e <= PAPER_EPSILON_MAX + 1e-12]
    se = [one.std[i] / math.sqrt(max(one.trials[i], 1)) for i in range(len(one.epsilons))]
    first, last = idx[0], idx[-1]
    rise = one.mean[last] - one.mean[first]
    rises = rise > 2.0 * math.hypot(se[first], se[last])
    drops = [
        (one.epsilons[i], one.epsilons[j], one.mean[j] - one.mean[i])
        for i, j in itertools.pairwise(idx)
        if one.mean[j] - one.mean[i] < -3.0 * math.hypot(se[i], se[j])
    ]
    stream = res.curve(panel, FPCA_STREAM)
    measured = (
        f"one block: {one.mean[first]:.3f} at eps={one.epsilons[first]:g} -> "
        f"{one.mean[last]:.3f} at eps={one.epsilons[last]:g}"
    )
    if stream is not None:
        measured += (
            f"; streaming b={res.stream_block_size}: {stream.mean[first]:.3f} -> "
            f"{stream.mean[last]:.3f}"
        )
    measured += "; significant drops: " + (
        ", ".join(f"{a:g}->{b:g} ({v:+.3f})" for a, b, v in drops) if drops else "none"
    )
    floor = random_level(res.n_features)
    flat = [one.epsilons[i] for i in idx if one.mean[i] < floor + 0.05]
    if flat:
        measured += f"; at the random-direction level ({floor:.3f} + 0.05) at eps " + ", ".join(
            f"{e:g}" for e in flat
        )
    out = [
        Check(
            f"q_A rises with epsilon for FPCA-DP on {panel} (eps {one.epsilons[first]:g} .. "
            f"{one.epsilons[last]:g}, mean of {one.trials[first]} trials)",
            measured,
            "rise > 2 SE, no step down > 3 SE",
            rises and not drops,
        )
    ]
    diff = next((c for c in res.differences.get(panel, []) if c.method.startswith(FPCA_ONE)), None)
    if diff is not None:
        below = []
        for i in idx:
            d_se = diff.std[i] / math.sqrt(max(diff.trials[i], 1))
            if diff.mean[i] < -2.0 * d_se:
                below.append(i)
        at_or_above = len(idx) - len(below)
        measured = f"{at_or_above} of {len(idx)} epsilons"
        if below:
            measured += "; below at " + ", ".join(
                f"eps={one.epsilons[i]:g} ({one.mean[i]:.3f} vs {ms.mean[i]:.3f})" for i in below
            )
        out.append(
            Check(
                f"FPCA-DP (one block) at or above symmetric MOD-SuLQ on {panel} for most epsilon "
                "(the paper's claim)",
                measured,
                "more than half of the epsilons",
                at_or_above * 2 > len(idx),
            )
        )
    return out
