"""Benchmark (f): the private mode measured, its defaults justified (issues 5 and 10).

`run_privacy` runs every table of section (f) and returns `PrivacyResults`;
`benchmarks.report` renders it with `benchmarks.privacy.report_section`, and `checks`
evaluates the Done-when items on it.

- Motes light tree (`motes_tree`): error ratio at the root of 8 private leaves, median
  and quartiles over seeds, at epsilon 1, delta 1e-5, rank 10, clip 8230 lux, for the
  Gaussian mechanism (one release per leaf, blocks, continual release, defaults), eq. (8),
  MOD-SuLQ, DPdisPCA, the central Analyze Gauss, a random subspace and no privacy; and
  against epsilon for the plot.
- The state a private leaf keeps (`state_choice`): the running noisy sum or merged
  per-block summaries, error and memory.
- The default horizon and block size (`horizon`): noise of the k-th release against H,
  the Motes error against H and against the block size.
- Synth(1) (`synth_table`): q_A against epsilon, the paper's Fig. 3 setting.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from benchmarks.privacy import horizon as hz
from benchmarks.privacy import motes_tree as mt
from benchmarks.privacy.dpdispca import dpdispca_noise_std
from benchmarks.privacy.leaves import fpca_leaf
from benchmarks.privacy.state_choice import measure_memory
from benchmarks.privacy.stats import Summary, summarise
from benchmarks.privacy.synth_table import SynthCurve, random_level, run_synth
from benchmarks.reporting import Check
from edge_runtime.fpca import error_ratio
from edge_runtime.fpca.privacy import (
    gaussian_default_block_size,
    mod_sulq_noise_std,
    noise_std,
)
from edge_runtime.fpca.private_gram import release_noise_std
from edge_runtime.topology import DEFAULT_RELEASE_HORIZON

__all__ = [
    "CURVE_METHODS",
    "DEFAULT_HORIZON",
    "FULL",
    "MOTES_METHODS",
    "QUICK",
    "TINY",
    "BlockRow",
    "Curve",
    "HorizonLine",
    "Precision",
    "PrivacyResults",
    "PrivacySizes",
    "StateRow",
    "TreeRow",
    "checks",
    "run_privacy",
]

#: The runtime's default ``release_horizon`` (topology key), the H a private leaf uses.
DEFAULT_HORIZON = DEFAULT_RELEASE_HORIZON
#: Done-when of issue 10 on the Motes tree: median root error ratio, one release per
#: leaf and blocks of 241.
MAX_ERROR_ONE_RELEASE = 3.0
MAX_ERROR_BLOCKS_241 = 3.7
#: Done-when of issue 10 on Synth(1): mean q_A of the Gaussian mechanism at epsilon 0.5.
MIN_SYNTH_Q = 0.99
SYNTH_Q_EPSILON = 0.5

_G, _EQ8 = mt.GAUSSIAN, mt.EQ8
ONE_RELEASE = mt.TreeMethod("gaussian, one release per leaf", _G, mt.ONE_RELEASE)
BLOCKS_241 = mt.TreeMethod("gaussian, blocks of 241 summed", _G, 241)
BLOCKS_31 = mt.TreeMethod("gaussian, blocks of 31 summed", _G, 31)
CONTINUAL_241 = mt.TreeMethod("continual, blocks of 241, H 4", _G, 241, 4)
CONTINUAL_31 = mt.TreeMethod("continual, blocks of 31, H 32", _G, 31, 32)
EQ8_241 = mt.TreeMethod("eq. (8), blocks of 241", _EQ8, 241)
DPDISPCA = mt.TreeMethod("DPdisPCA (S = 8), one round", mt.DPDISPCA)
CENTRAL = mt.TreeMethod("central Analyze Gauss (all rows, one release)", mt.CENTRAL)
RANDOM = mt.TreeMethod("random rank-10 subspace", mt.RANDOM)

#: The rows of the Motes table (at the table's epsilon).
MOTES_METHODS: tuple[mt.TreeMethod, ...] = (
    ONE_RELEASE,
    BLOCKS_241,
    BLOCKS_31,
    CONTINUAL_241,
    CONTINUAL_31,
    mt.TreeMethod("continual, blocks of 241, H 64 (default)", _G, 241, DEFAULT_HORIZON),
    mt.TreeMethod("continual, blocks of 31, H 64 (default)", _G, 31, DEFAULT_HORIZON),
    mt.TreeMethod("gaussian, default block size, H 1", _G, None, 1),
    mt.TreeMethod("runtime defaults: default block size at H 64, H 64", _G, None, DEFAULT_HORIZON),
    EQ8_241,
    mt.TreeMethod("MOD-SuLQ (symmetric), one release per leaf", mt.MOD_SULQ),
    DPDISPCA,
    CENTRAL,
    RANDOM,
    mt.TreeMethod("no privacy (FPCA-Edge leaves, same tree)", mt.PLAIN),
)
#: The curves of the plot (error ratio against epsilon).
CURVE_METHODS: tuple[mt.TreeMethod, ...] = (
    ONE_RELEASE,
    CONTINUAL_241,
    EQ8_241,
    DPDISPCA,
    CENTRAL,
    RANDOM,
)


@dataclass(frozen=True)
class PrivacySizes:
    """Settings of one run of benchmark (f)."""

    seeds: int = 20
    motes_rows: int | None = None  # None: all 7712 rows
    leaves: int = 8
    epsilon: float = 1.0
    delta: float = 1e-5
    rank: int = 10
    curve_epsilons: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    #: Seeds of the precision check of the Done-when medians (0: none): the median over
    #: all of them and the medians of its disjoint groups of `seeds`.
    precision_seeds: int = 200
    state_blocks: tuple[int, ...] = (241, 31)
    horizons: tuple[int, ...] = hz.HORIZONS
    releases: tuple[int, ...] = hz.RELEASES
    horizon_blocks: tuple[int, ...] = (241, 31)
    block_sizes: tuple[int, ...] = (31, 121, 241, 517, 799, 964)
    block_horizons: tuple[int, ...] = (1, DEFAULT_HORIZON)
    synth_shape: tuple[int, int] = (20, 5000)  # (d, n)
    synth_delta: float = 0.05
    synth_rank: int = 5
    synth_epsilons: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0)
    synth_trials: int = 100


FULL = PrivacySizes()
QUICK = PrivacySizes(
    seeds=5,
    precision_seeds=20,
    curve_epsilons=(0.5, 1.0, 4.0),
    horizons=(1, 4, 64),
    block_sizes=(31, 241, 517, 964),
    synth_trials=10,
)
#: A few seconds: the tests' configuration.
TINY = PrivacySizes(
    seeds=2,
    precision_seeds=0,
    curve_epsilons=(1.0, 4.0),
    state_blocks=(241,),
    horizons=(1, 4),
    releases=(1, 4, 16),
    horizon_blocks=(241,),
    block_sizes=(241, 964),
    block_horizons=(1,),
    synth_shape=(8, 400),
    synth_epsilons=(0.5, 4.0),
    synth_trials=3,
)


@dataclass
class TreeRow:
    """One row of the Motes table."""

    label: str
    kind: str
    #: Rows per release (0: not block-wise).
    block_size: int
    horizon: int
    #: Releases per leaf (the last block flushed).
    releases: int
    #: Noise std per diagonal entry of what the leaf publishes from, unit-ball Gram units
    #: (``sum x x^T`` of rows of norm <= 1); eq. (8): of each block. NaN: no noise.
    noise_std: float
    error: Summary


@dataclass
class Precision:
    """How much a median over `PrivacyResults.seeds` seeds moves with the seeds drawn."""

    label: str
    #: Over all the precision seeds.
    error: Summary
    #: Medians of disjoint groups of `PrivacyResults.seeds` consecutive seeds, sorted.
    group_medians: list[float] = field(default_factory=list)


@dataclass
class Curve:
    """Root error ratio of one method at each epsilon of the plot."""

    label: str
    errors: list[Summary] = field(default_factory=list)


@dataclass
class StateRow:
    """One row of the state-choice table."""

    state: str  # "a" (running noisy sum) or "b" (merged per-block summaries)
    block_size: int
    horizon: int
    error: Summary
    #: tracemalloc: largest state held between releases, and peak during the stream.
    retained_bytes: int
    peak_bytes: int
    #: State (b) only: per-seed root error of (b) minus that of (a) at H = 1 (the same
    #: noise matrices: a paired difference), and in how many seeds (b) is worse.
    paired: Summary | None = None
    b_worse: int = 0


@dataclass
class HorizonLine:
    """Motes root error at one block size for every horizon of the table."""

    block_size: int
    releases: int
    errors: list[Summary] = field(default_factory=list)


@dataclass
class BlockRow:
    """Motes at one block size: a leaf's first snapshot and the root, per horizon."""

    block_size: int
    releases: int
    #: Error ratio of a leaf's first release on the rows it has seen (all leaves x seeds).
    first_snapshot: list[Summary] = field(default_factory=list)
    root: list[Summary] = field(default_factory=list)


@dataclass
class PrivacyResults:
    """Everything one run of benchmark (f) measured."""

    motes_shape: tuple[int, int] = (0, 0)
    leaves: int = 0
    clip_norm: float = math.nan
    clipped_rows: int = 0
    epsilon: float = math.nan
    delta: float = math.nan
    rank: int = 0
    seeds: int = 0
    default_horizon: int = DEFAULT_HORIZON
    #: Over the leaves, (min, max) of the largest and of the ``rank``-th eigenvalue of a
    #: leaf's unit-ball Gram matrix ``sum x x^T`` (no noise).
    leaf_top_eigenvalue: tuple[float, float] = (math.nan, math.nan)
    leaf_rank_eigenvalue: tuple[float, float] = (math.nan, math.nan)
    #: ``str(H)`` -> `gaussian_default_block_size` at the table's budget and ``d``.
    default_blocks: dict[str, int] = field(default_factory=dict)
    motes: list[TreeRow] = field(default_factory=list)
    precision: list[Precision] = field(default_factory=list)
    curve_epsilons: list[float] = field(default_factory=list)
    curves: list[Curve] = field(default_factory=list)
    state_choice: list[StateRow] = field(default_factory=list)
    horizons: list[int] = field(default_factory=list)
    releases: list[int] = field(default_factory=list)
    #: ``[H index][k index]``: `horizon.noise_factor`.
    noise_factors: list[list[float]] = field(default_factory=list)
    horizon_lines: list[HorizonLine] = field(default_factory=list)
    block_horizons: list[int] = field(default_factory=list)
    blocks: list[BlockRow] = field(default_factory=list)
    synth_shape: tuple[int, int] = (0, 0)
    synth_delta: float = math.nan
    synth_rank: int = 0
    synth_trials: int = 0
    synth_epsilons: list[float] = field(default_factory=list)
    synth: list[SynthCurve] = field(default_factory=list)
    seconds: float = 0.0

    def row(self, label: str) -> TreeRow | None:
        """The Motes row named ``label``, or None."""
        return next((r for r in self.motes if r.label == label), None)

    def synth_curve(self, label: str) -> SynthCurve | None:
        """The Synth curve named ``label``, or None."""
        return next((c for c in self.synth if c.label == label), None)


class _Motes:
    """Runs tree methods on the Motes data, each (method, epsilon) once."""

    def __init__(self, sizes: PrivacySizes) -> None:
        self.sizes = sizes
        self.data = mt.load_motes(sizes.motes_rows, sizes.leaves)
        self._cache: dict[tuple[object, ...], list[float]] = {}

    def errors(
        self, method: mt.TreeMethod, epsilon: float, seeds: int | None = None
    ) -> list[float]:
        """Root error ratios of seeds ``0 .. seeds - 1`` (default `PrivacySizes.seeds`)."""
        s = self.sizes
        n_leaf, d = self.data.parts[0].shape
        block = mt.block_rows(method, n_leaf, d, epsilon, s.delta)  # the same run, one key
        key = (method.kind, block, method.horizon, float(epsilon))
        wanted = 1 if method.kind == mt.PLAIN else (s.seeds if seeds is None else seeds)
        done = self._cache.setdefault(key, [])
        done += [
            mt.root_error(self.data, method, rank=s.rank, epsilon=epsilon, delta=s.delta, seed=seed)
            for seed in range(len(done), wanted)
        ]
        return done[:wanted]

    def summary(self, method: mt.TreeMethod, epsilon: float | None = None) -> Summary:
        return summarise(self.errors(method, self.sizes.epsilon if epsilon is None else epsilon))

    def releases(self, method: mt.TreeMethod) -> int:
        s = self.sizes
        return mt.releases_per_leaf(
            method, self.data.parts[0].shape[0], self.data.n_features, s.epsilon, s.delta
        )

    def block(self, method: mt.TreeMethod) -> int:
        s = self.sizes
        return mt.block_rows(
            method, self.data.parts[0].shape[0], self.data.n_features, s.epsilon, s.delta
        )

    def first_snapshot(self, block_size: int, horizon: int) -> Summary:
        """Error ratio of each leaf's first release on the rows it summarises."""
        s = self.sizes
        values = []
        for seed, (i, part) in itertools.product(range(s.seeds), enumerate(self.data.parts)):
            rows = part[:block_size]
            sub = fpca_leaf(
                rows,
                s.rank,
                block_size=rows.shape[0],
                epsilon=s.epsilon,
                delta=s.delta,
                clip_norm=self.data.clip_norm,
                horizon=horizon,
                seed=seed * 100 + i,
            )
            values.append(error_ratio(rows, sub.basis[:, : s.rank]))
        return summarise(values)


def _noise(motes: _Motes, method: mt.TreeMethod) -> float:
    """`TreeRow.noise_std` of ``method`` at the table's budget."""
    s = motes.sizes
    eps, delta, d = s.epsilon, s.delta, motes.data.n_features
    n_leaf = motes.data.parts[0].shape[0]
    one = release_noise_std(eps, delta, 1)
    if method.kind == mt.GAUSSIAN:
        return one * hz.noise_factor(method.horizon, motes.releases(method))
    if method.kind in (mt.CENTRAL, mt.MERGED_BLOCKS):
        return one
    if method.kind == mt.EQ8:
        block = motes.block(method)
        return noise_std(eps, delta, d, block) * block
    if method.kind == mt.MOD_SULQ:
        return mod_sulq_noise_std(eps, delta, d, n_leaf) * n_leaf
    if method.kind == mt.DPDISPCA:
        return dpdispca_noise_std(eps, delta, n_leaf) * n_leaf
    return math.nan


def _motes_tables(res: PrivacyResults, motes: _Motes, log: Callable[[str], None]) -> None:
    s = motes.sizes
    for method in MOTES_METHODS:
        row = TreeRow(
            label=method.label,
            kind=method.kind,
            block_size=motes.block(method),
            horizon=method.horizon,
            releases=motes.releases(method),
            noise_std=_noise(motes, method),
            error=motes.summary(method),
        )
        res.motes.append(row)
        log(f"  motes {row.label}: median {row.error.median:.3f}")
    if s.precision_seeds > s.seeds:
        for method in (ONE_RELEASE, BLOCKS_241):
            values = motes.errors(method, s.epsilon, s.precision_seeds)
            groups = len(values) // s.seeds
            medians = [
                float(np.median(values[g * s.seeds : (g + 1) * s.seeds])) for g in range(groups)
            ]
            res.precision.append(Precision(method.label, summarise(values), sorted(medians)))
            log(
                f"  precision {method.label}: median of {len(values)} seeds "
                f"{np.median(values):.3f}, {s.seeds}-seed medians {min(medians):.3f}-"
                f"{max(medians):.3f}"
            )
    res.curves = [
        Curve(m.label, [motes.summary(m, e) for e in s.curve_epsilons]) for m in CURVE_METHODS
    ]


def _state_table(res: PrivacyResults, motes: _Motes, log: Callable[[str], None]) -> None:
    s = motes.sizes
    count = s.rank + mt.LEAF_OVERSAMPLE
    unit = motes.data.unit_parts[0]
    continual = {241: 4, 31: 32}
    for block in s.state_blocks:
        variants = [("a", 1), ("a", continual.get(block, 1)), ("b", 1)]
        for state, horizon in dict.fromkeys(variants):
            kind = mt.RUNNING_SUM if state == "a" else mt.MERGED_BLOCKS
            method = mt.TreeMethod(f"({state})", kind, block, horizon)
            memory = measure_memory(state, unit, block, count, horizon=horizon)
            row = StateRow(
                state, block, horizon, motes.summary(method), memory.retained, memory.peak
            )
            if state == "b":
                a = motes.errors(mt.TreeMethod("(a)", mt.RUNNING_SUM, block, 1), s.epsilon)
                diff = np.subtract(motes.errors(method, s.epsilon), a)
                row.paired, row.b_worse = summarise(diff), int(np.count_nonzero(diff > 0))
            res.state_choice.append(row)
            log(
                f"  state ({state}) b={block} H={horizon}: median {row.error.median:.3f}, "
                f"{memory.retained} B retained"
            )


def _horizon_tables(res: PrivacyResults, motes: _Motes, log: Callable[[str], None]) -> None:
    s = motes.sizes
    res.horizons, res.releases = list(s.horizons), list(s.releases)
    res.noise_factors = hz.noise_table(s.horizons, s.releases)
    for block in s.horizon_blocks:
        line = HorizonLine(block, motes.releases(mt.TreeMethod("", mt.GAUSSIAN, block)))
        for h in s.horizons:
            line.errors.append(motes.summary(mt.TreeMethod("", mt.GAUSSIAN, block, h)))
        res.horizon_lines.append(line)
        log(
            f"  horizon, blocks of {block}: "
            + ", ".join(
                f"H={h} {e.median:.3f}" for h, e in zip(s.horizons, line.errors, strict=True)
            )
        )
    res.block_horizons = list(s.block_horizons)
    n_leaf = motes.data.parts[0].shape[0]
    for block in s.block_sizes:
        size = min(block, n_leaf)
        row = BlockRow(size, motes.releases(mt.TreeMethod("", mt.GAUSSIAN, size)))
        for h in s.block_horizons:
            row.first_snapshot.append(motes.first_snapshot(size, h))
            row.root.append(motes.summary(mt.TreeMethod("", mt.GAUSSIAN, size, h)))
        res.blocks.append(row)
        log(
            f"  block {size}: first snapshot "
            + ", ".join(f"{f.median:.3f}" for f in row.first_snapshot)
            + "; root "
            + ", ".join(f"{r.median:.3f}" for r in row.root)
        )


def run_privacy(sizes: PrivacySizes = FULL, log: Callable[[str], None] = print) -> PrivacyResults:
    """Run every table of benchmark (f).

    Parameters
    ----------
    sizes : PrivacySizes
        `FULL`, `QUICK`, `TINY` or a custom set.
    log : callable
        Progress lines go here.

    Returns
    -------
    PrivacyResults
    """
    t0 = time.perf_counter()
    motes = _Motes(sizes)
    x = motes.data.x
    res = PrivacyResults(
        motes_shape=(int(x.shape[0]), int(x.shape[1])),
        leaves=sizes.leaves,
        clip_norm=motes.data.clip_norm,
        clipped_rows=int(np.count_nonzero(np.linalg.norm(x, axis=1) > motes.data.clip_norm)),
        epsilon=sizes.epsilon,
        delta=sizes.delta,
        rank=sizes.rank,
        seeds=sizes.seeds,
        default_blocks={
            str(h): gaussian_default_block_size(sizes.epsilon, sizes.delta, x.shape[1], h)
            for h in sorted({1, *sizes.horizons, *sizes.block_horizons})
        },
        curve_epsilons=[float(e) for e in sizes.curve_epsilons],
    )
    spectra = np.array([np.linalg.eigvalsh(u.T @ u)[::-1] for u in motes.data.unit_parts])
    res.leaf_top_eigenvalue = (float(spectra[:, 0].min()), float(spectra[:, 0].max()))
    r = sizes.rank - 1
    res.leaf_rank_eigenvalue = (float(spectra[:, r].min()), float(spectra[:, r].max()))
    _motes_tables(res, motes, log)
    _state_table(res, motes, log)
    _horizon_tables(res, motes, log)
    d, n = sizes.synth_shape
    res.synth_shape = (d, n)
    res.synth_delta, res.synth_rank = sizes.synth_delta, sizes.synth_rank
    res.synth_trials = sizes.synth_trials
    res.synth_epsilons = [float(e) for e in sizes.synth_epsilons]
    res.synth = run_synth(
        n_features=d,
        n_samples=n,
        delta=sizes.synth_delta,
        rank=sizes.synth_rank,
        epsilons=sizes.synth_epsilons,
        trials=sizes.synth_trials,
        log=log,
    )
    res.seconds = time.perf_counter() - t0
    return res


def _fmt(s: Summary) -> str:
    return f"{s.median:.3f} (IQR {s.p25:.3f}-{s.p75:.3f})"


def _rises(curve: SynthCurve, epsilons: Sequence[float]) -> Check:
    """Issue 5: q_A rises with epsilon (rise > 2 SE, no step down > 3 SE)."""
    q = curve.q
    se = [c.std / math.sqrt(max(c.n, 1)) for c in q]
    rise = q[-1].mean - q[0].mean
    rises = rise > 2.0 * math.hypot(se[0], se[-1])
    drops = [
        (epsilons[i], epsilons[j], q[j].mean - q[i].mean)
        for i, j in itertools.pairwise(range(len(q)))
        if q[j].mean - q[i].mean < -3.0 * math.hypot(se[i], se[j])
    ]
    measured = (
        f"{q[0].mean:.4f} at eps={epsilons[0]:g} -> {q[-1].mean:.4f} at eps={epsilons[-1]:g}; "
        "significant drops: "
        + (", ".join(f"{a:g}->{b:g} ({v:+.4f})" for a, b, v in drops) if drops else "none")
    )
    return Check(
        f"q_A rises with epsilon on Synth(1) for the private mode ({curve.label}, mean of "
        f"{q[0].n} trials)",
        measured,
        "rise > 2 SE, no step down > 3 SE",
        rises and not drops,
    )


def checks(res: PrivacyResults) -> list[Check]:
    """The Done-when items of issues 5 and 10 on ``res`` (those whose numbers were run)."""
    out: list[Check] = []
    d, n = res.synth_shape
    gauss = res.synth[0] if res.synth else None
    if gauss is not None and len(res.synth_epsilons) > 1:
        out.append(_rises(gauss, res.synth_epsilons))
    one, b241 = res.row(ONE_RELEASE.label), res.row(BLOCKS_241.label)
    if one is not None and b241 is not None:
        n_m, d_m = res.motes_shape
        measured = f"{_fmt(one.error)} / {_fmt(b241.error)}"
        precision = {p.label: p for p in res.precision if p.group_medians}
        spread = [precision[m.label] for m in (ONE_RELEASE, BLOCKS_241) if m.label in precision]
        if len(spread) == 2:
            measured += (
                f"; over {spread[0].error.n} seeds: "
                + " / ".join(f"{p.error.median:.3f}" for p in spread)
                + f", its {res.seeds}-seed medians "
                + " / ".join(
                    f"{min(p.group_medians):.3f}-{max(p.group_medians):.3f}" for p in spread
                )
            )
        out.append(
            Check(
                f"Motes light ({n_m} x {d_m}), {res.leaves} leaves, eps {res.epsilon:g}, delta "
                f"{res.delta:g}, rank {res.rank}, clip {res.clip_norm:g}: median root error "
                f"ratio over {res.seeds} seeds, one release per leaf / blocks of 241",
                measured,
                f"<= {MAX_ERROR_ONE_RELEASE:g} / <= {MAX_ERROR_BLOCKS_241:g}",
                one.error.median <= MAX_ERROR_ONE_RELEASE
                and b241.error.median <= MAX_ERROR_BLOCKS_241,
            )
        )
    if gauss is not None and SYNTH_Q_EPSILON in res.synth_epsilons:
        q = gauss.q[res.synth_epsilons.index(SYNTH_Q_EPSILON)]
        out.append(
            Check(
                f"Synth(1) d={d} n={n} delta={res.synth_delta:g}: mean q_A at eps "
                f"{SYNTH_Q_EPSILON:g} ({gauss.label}, {q.n} trials)",
                f"{q.mean:.4f} (std {q.std:.4f}; random direction {random_level(d):.3f})",
                f">= {MIN_SYNTH_Q:g}",
                q.mean >= MIN_SYNTH_Q,
            )
        )
    return out
