"""Benchmark (f): the private mode measured and its defaults justified.

`run_privacy` runs every table (`motes_tree`, `state_choice`, `horizon`, `synth_table`) into
`PrivacyResults`, rendered by `report_section`; `checks` evaluates its Done-when items.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from benchmarks.measure import Summary, summarise
from benchmarks.privacy import horizon as hz
from benchmarks.privacy import motes_tree as mt
from benchmarks.privacy.comparators import dpdispca_noise_std
from benchmarks.privacy.leaves import fpca_leaf
from benchmarks.privacy.state_choice import measure_memory
from benchmarks.privacy.synth_table import SynthCurve, random_level, run_synth
from benchmarks.reporting import Check
from edge_runtime.fpca import error_ratio
from edge_runtime.fpca.privacy import gaussian_default_block_size, mod_sulq_noise_std, noise_std
from edge_runtime.fpca.private_gram import release_noise_std
from edge_runtime.topology import DEFAULT_RELEASE_HORIZON

__all__ = [
    "CURVE_METHODS", "DEFAULT_HORIZON", "FULL", "MOTES_METHODS", "QUICK", "TINY", "BlockRow",
    "Curve", "HorizonLine", "Precision", "PrivacyResults", "PrivacySizes", "StateRow",
    "TreeRow", "checks", "run_privacy",
]  # fmt: skip

#: The runtime's default ``release_horizon`` (topology key), the H a private leaf uses.
DEFAULT_HORIZON = DEFAULT_RELEASE_HORIZON
#: Done-when on the Motes tree: median root error ratio, one release per leaf / blocks of 241.
MAX_ERROR_ONE_RELEASE, MAX_ERROR_BLOCKS_241 = 3.0, 3.7
#: Done-when on Synth(1): mean q_A of the Gaussian mechanism at epsilon 0.5.
MIN_SYNTH_Q, SYNTH_Q_EPSILON = 0.99, 0.5

_M, _G, _H = mt.TreeMethod, mt.GAUSSIAN, DEFAULT_HORIZON
ONE_RELEASE = _M("gaussian, one release per leaf", _G, mt.ONE_RELEASE)
BLOCKS_241 = _M("gaussian, blocks of 241 summed", _G, 241)
BLOCKS_31 = _M("gaussian, blocks of 31 summed", _G, 31)
CONTINUAL_241 = _M("continual, blocks of 241, H 4", _G, 241, 4)
CONTINUAL_31 = _M("continual, blocks of 31, H 32", _G, 31, 32)
EQ8_241 = _M("eq. (8), blocks of 241", mt.EQ8, 241)
DPDISPCA = _M("DPdisPCA (S = 8), one round", mt.DPDISPCA)
CENTRAL = _M("central Analyze Gauss (all rows, one release)", mt.CENTRAL)
RANDOM = _M("random rank-10 subspace", mt.RANDOM)

#: The rows of the Motes table (at the table's epsilon).
MOTES_METHODS: tuple[mt.TreeMethod, ...] = (
    ONE_RELEASE, BLOCKS_241, BLOCKS_31, CONTINUAL_241, CONTINUAL_31,
    _M("continual, blocks of 241, H 64 (default)", _G, 241, _H),
    _M("continual, blocks of 31, H 64 (default)", _G, 31, _H),
    _M("gaussian, default block size, H 1", _G, None, 1),
    _M("runtime defaults: default block size at H 64, H 64", _G, None, _H),
    EQ8_241, _M("MOD-SuLQ (symmetric), one release per leaf", mt.MOD_SULQ), DPDISPCA, CENTRAL,
    RANDOM, _M("no privacy (FPCA-Edge leaves, same tree)", mt.PLAIN),
)  # fmt: skip
#: The curves of the plot (error ratio against epsilon).
CURVE_METHODS = (ONE_RELEASE, CONTINUAL_241, EQ8_241, DPDISPCA, CENTRAL, RANDOM)


@dataclass(frozen=True)
class PrivacySizes:
    """Settings of one run of benchmark (f); ``synth_shape`` is ``(d, n)``, ``precision_seeds``
    the seeds of the precision check of the Done-when medians (0: none)."""

    seeds: int = 20
    motes_rows: int | None = None  # None: all 7712 rows
    leaves: int = 8
    epsilon: float = 1.0
    delta: float = 1e-5
    rank: int = 10
    curve_epsilons: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    precision_seeds: int = 200
    state_blocks: tuple[int, ...] = (241, 31)
    horizons: tuple[int, ...] = hz.HORIZONS
    releases: tuple[int, ...] = hz.RELEASES
    horizon_blocks: tuple[int, ...] = (241, 31)
    block_sizes: tuple[int, ...] = (31, 121, 241, 517, 799, 964)
    block_horizons: tuple[int, ...] = (1, DEFAULT_HORIZON)
    synth_shape: tuple[int, int] = (20, 5000)
    synth_delta: float = 0.05
    synth_rank: int = 5
    synth_epsilons: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0)
    synth_trials: int = 100


FULL = PrivacySizes()
QUICK = PrivacySizes(
    seeds=5, precision_seeds=20, curve_epsilons=(0.5, 1.0, 4.0), horizons=(1, 4, 64),
    block_sizes=(31, 241, 517, 964), synth_trials=10,
)  # fmt: skip
#: A few seconds: the tests' configuration.
TINY = PrivacySizes(
    seeds=2, precision_seeds=0, curve_epsilons=(1.0, 4.0), state_blocks=(241,), horizons=(1, 4),
    releases=(1, 4, 16), horizon_blocks=(241,), block_sizes=(241, 964), block_horizons=(1,),
    synth_shape=(8, 400), synth_epsilons=(0.5, 4.0), synth_trials=3,
)  # fmt: skip


@dataclass
class TreeRow:
    """One row of the Motes table: rows per release (0: not block-wise), releases per leaf,
    noise std per diagonal entry of what the leaf publishes from in unit-ball Gram units
    (eq. (8): of each block; NaN: no noise) and the root error."""

    label: str
    kind: str
    block_size: int
    horizon: int
    releases: int
    noise_std: float
    error: Summary


@dataclass
class Precision:
    """A median's spread: over all precision seeds, and the sorted medians of its disjoint
    groups of `PrivacyResults.seeds` seeds."""

    label: str
    error: Summary
    group_medians: list[float] = field(default_factory=list)


@dataclass
class Curve:
    """Root error ratio of one method at each epsilon of the plot."""

    label: str
    errors: list[Summary] = field(default_factory=list)


@dataclass
class StateRow:
    """One row of the state-choice table, ``state`` "a" or "b", bytes by tracemalloc; (b)
    only: per-seed error of (b) minus (a) at H = 1 (paired) and in how many seeds (b) is worse."""

    state: str
    block_size: int
    horizon: int
    error: Summary
    retained_bytes: int
    peak_bytes: int
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
    """Motes at one block size, per horizon: a leaf's first release on the rows it has seen
    (all leaves x seeds), and the root."""

    block_size: int
    releases: int
    first_snapshot: list[Summary] = field(default_factory=list)
    root: list[Summary] = field(default_factory=list)


@dataclass
class PrivacyResults:
    """Everything one run of benchmark (f) measured. ``leaf_*_eigenvalue``: (min, max) over
    the leaves of the largest and ``rank``-th eigenvalue of a leaf's unit-ball Gram matrix;
    ``default_blocks``: ``str(H)`` -> `gaussian_default_block_size`; ``noise_factors``:
    ``[H index][k index]`` of `horizon.noise_factor`."""

    motes_shape: tuple[int, int] = (0, 0)
    leaves: int = 0
    clip_norm: float = math.nan
    clipped_rows: int = 0
    epsilon: float = math.nan
    delta: float = math.nan
    rank: int = 0
    seeds: int = 0
    default_horizon: int = DEFAULT_HORIZON
    leaf_top_eigenvalue: tuple[float, float] = (math.nan, math.nan)
    leaf_rank_eigenvalue: tuple[float, float] = (math.nan, math.nan)
    default_blocks: dict[str, int] = field(default_factory=dict)
    motes: list[TreeRow] = field(default_factory=list)
    precision: list[Precision] = field(default_factory=list)
    curve_epsilons: list[float] = field(default_factory=list)
    curves: list[Curve] = field(default_factory=list)
    state_choice: list[StateRow] = field(default_factory=list)
    horizons: list[int] = field(default_factory=list)
    releases: list[int] = field(default_factory=list)
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
        self.n_leaf, self.d = self.data.parts[0].shape
        self._cache: dict[tuple[object, ...], list[float]] = {}

    def errors(self, method: mt.TreeMethod, eps: float, seeds: int | None = None) -> list[float]:
        """Root error ratios of seeds ``0 .. seeds - 1`` (default `PrivacySizes.seeds`)."""
        s = self.sizes
        block = mt.block_rows(method, self.n_leaf, self.d, eps, s.delta)  # the same run, one key
        done = self._cache.setdefault((method.kind, block, method.horizon, float(eps)), [])
        wanted = 1 if method.kind == mt.PLAIN else (s.seeds if seeds is None else seeds)
        done += [
            mt.root_error(self.data, method, rank=s.rank, epsilon=eps, delta=s.delta, seed=seed)
            for seed in range(len(done), wanted)
        ]
        return done[:wanted]

    def summary(self, method: mt.TreeMethod, epsilon: float | None = None) -> Summary:
        return summarise(self.errors(method, self.sizes.epsilon if epsilon is None else epsilon))

    def releases(self, method: mt.TreeMethod) -> int:
        s = self.sizes
        return mt.releases_per_leaf(method, self.n_leaf, self.d, s.epsilon, s.delta)

    def block(self, method: mt.TreeMethod) -> int:
        return mt.block_rows(method, self.n_leaf, self.d, self.sizes.epsilon, self.sizes.delta)

    def first_snapshot(self, block_size: int, horizon: int) -> Summary:
        """Error ratio of each leaf's first release on the rows it summarises."""
        s, values = self.sizes, []
        for seed, (i, part) in itertools.product(range(s.seeds), enumerate(self.data.parts)):
            rows = part[:block_size]
            sub = fpca_leaf(
                rows, s.rank, block_size=rows.shape[0], epsilon=s.epsilon, delta=s.delta,
                clip_norm=self.data.clip_norm, horizon=horizon, seed=seed * 100 + i,
            )  # fmt: skip
            values.append(error_ratio(rows, sub.basis[:, : s.rank]))
        return summarise(values)

    def noise(self, method: mt.TreeMethod) -> float:
        """`TreeRow.noise_std` of ``method`` at the table's budget."""
        eps, delta, d, n = self.sizes.epsilon, self.sizes.delta, self.d, self.n_leaf
        if method.kind == mt.GAUSSIAN:
            factor = hz.noise_factor(method.horizon, self.releases(method))
            return release_noise_std(eps, delta, 1) * factor
        if method.kind in (mt.CENTRAL, mt.MERGED_BLOCKS):
            return release_noise_std(eps, delta, 1)
        if method.kind == mt.EQ8:
            return noise_std(eps, delta, d, self.block(method)) * self.block(method)
        if method.kind == mt.MOD_SULQ:
            return mod_sulq_noise_std(eps, delta, d, n) * n
        if method.kind == mt.DPDISPCA:
            return dpdispca_noise_std(eps, delta, n) * n
        return math.nan


def _medians(values: Sequence[Summary | float]) -> str:
    """Progress lines: medians (or numbers) with 3 decimals."""
    return ", ".join(f"{getattr(v, 'median', v):.3f}" for v in values)


def _motes_tables(res: PrivacyResults, motes: _Motes, log: Callable[[str], None]) -> None:
    s = motes.sizes
    for m in MOTES_METHODS:
        row = TreeRow(
            m.label, m.kind, motes.block(m), m.horizon, motes.releases(m), motes.noise(m),
            motes.summary(m),
        )  # fmt: skip
        res.motes.append(row)
        log(f"  motes {row.label}: median {_medians([row.error])}")
    for m in (ONE_RELEASE, BLOCKS_241) if s.precision_seeds > s.seeds else ():
        values = motes.errors(m, s.epsilon, s.precision_seeds)
        groups = [values[g * s.seeds : (g + 1) * s.seeds] for g in range(len(values) // s.seeds)]
        medians = [float(np.median(g)) for g in groups]
        res.precision.append(Precision(m.label, summarise(values), sorted(medians)))
        log(f"  precision {m.label}: {s.seeds}-seed medians {_medians(sorted(medians))}")
    res.curves = [Curve(m.label, [motes.summary(m, e) for e in s.curve_epsilons])
                  for m in CURVE_METHODS]


def _state_table(res: PrivacyResults, motes: _Motes, log: Callable[[str], None]) -> None:
    count, unit = motes.sizes.rank + mt.LEAF_OVERSAMPLE, motes.data.unit_parts[0]
    for block in motes.sizes.state_blocks:
        variants = [("a", 1), ("a", {241: 4, 31: 32}.get(block, 1)), ("b", 1)]
        for state, horizon in dict.fromkeys(variants):
            kind = mt.RUNNING_SUM if state == "a" else mt.MERGED_BLOCKS
            method = mt.TreeMethod(f"({state})", kind, block, horizon)
            memory = measure_memory(state, unit, block, count, horizon=horizon)
            error = motes.summary(method)
            row = StateRow(state, block, horizon, error, memory.retained, memory.peak)
            if state == "b":
                eps = motes.sizes.epsilon
                a = motes.errors(mt.TreeMethod("(a)", mt.RUNNING_SUM, block, 1), eps)
                diff = np.subtract(motes.errors(method, eps), a)
                row.paired, row.b_worse = summarise(diff), int(np.count_nonzero(diff > 0))
            res.state_choice.append(row)
            log(f"  state ({state}) b={block} H={horizon}: median {_medians([error])}")


def _horizon_tables(res: PrivacyResults, motes: _Motes, log: Callable[[str], None]) -> None:
    s = motes.sizes
    res.horizons, res.releases = list(s.horizons), list(s.releases)
    res.noise_factors = hz.noise_table(s.horizons, s.releases)
    for block in s.horizon_blocks:
        line = HorizonLine(block, motes.releases(mt.TreeMethod("", _G, block)))
        line.errors = [motes.summary(mt.TreeMethod("", _G, block, h)) for h in s.horizons]
        res.horizon_lines.append(line)
        log(f"  horizon, blocks of {block}, H = {s.horizons}: {_medians(line.errors)}")
    res.block_horizons = list(s.block_horizons)
    for block in s.block_sizes:
        size = min(block, motes.n_leaf)
        row = BlockRow(size, motes.releases(mt.TreeMethod("", _G, size)))
        for h in s.block_horizons:
            row.first_snapshot.append(motes.first_snapshot(size, h))
            row.root.append(motes.summary(mt.TreeMethod("", _G, size, h)))
        res.blocks.append(row)
        log(f"  block {size}: first snapshot {_medians(row.first_snapshot)}; root "
            + _medians(row.root))


def run_privacy(sizes: PrivacySizes = FULL, log: Callable[[str], None] = print) -> PrivacyResults:
    """Run every table of benchmark (f) at ``sizes`` (`FULL`, `QUICK`, `TINY` or custom),
    progress lines to ``log``."""
    t0 = time.perf_counter()
    motes = _Motes(sizes)
    x, s = motes.data.x, sizes
    spectra = np.array([np.linalg.eigvalsh(u.T @ u)[::-1] for u in motes.data.unit_parts])
    horizons, r = sorted({1, *s.horizons, *s.block_horizons}), s.rank - 1
    res = PrivacyResults(
        motes_shape=(int(x.shape[0]), int(x.shape[1])), leaves=s.leaves,
        clip_norm=motes.data.clip_norm,
        clipped_rows=int(np.count_nonzero(np.linalg.norm(x, axis=1) > motes.data.clip_norm)),
        epsilon=s.epsilon, delta=s.delta, rank=s.rank, seeds=s.seeds,
        leaf_top_eigenvalue=(float(spectra[:, 0].min()), float(spectra[:, 0].max())),
        leaf_rank_eigenvalue=(float(spectra[:, r].min()), float(spectra[:, r].max())),
        default_blocks={
            str(h): gaussian_default_block_size(s.epsilon, s.delta, x.shape[1], h) for h in horizons
        },
        curve_epsilons=[float(e) for e in s.curve_epsilons], synth_shape=s.synth_shape,
        synth_delta=s.synth_delta, synth_rank=s.synth_rank, synth_trials=s.synth_trials,
        synth_epsilons=[float(e) for e in s.synth_epsilons],
    )  # fmt: skip
    _motes_tables(res, motes, log)
    _state_table(res, motes, log)
    _horizon_tables(res, motes, log)
    res.synth = run_synth(
        n_features=s.synth_shape[0], n_samples=s.synth_shape[1], delta=s.synth_delta,
        rank=s.synth_rank, epsilons=s.synth_epsilons, trials=s.synth_trials, log=log,
    )  # fmt: skip
    res.seconds = time.perf_counter() - t0
    return res


def _fmt(s: Summary) -> str:
    return f"{s.median:.3f} (IQR {s.p25:.3f}-{s.p75:.3f})"


def _rises(curve: SynthCurve, epsilons: Sequence[float]) -> Check:
    """q_A rises with epsilon (rise > 2 SE, no step down > 3 SE)."""
    q = curve.q
    se = [c.std / math.sqrt(max(c.n, 1)) for c in q]
    rises = q[-1].mean - q[0].mean > 2.0 * math.hypot(se[0], se[-1])
    drops = [
        f"{epsilons[i]:g}->{epsilons[j]:g} ({q[j].mean - q[i].mean:+.4f})"
        for i, j in itertools.pairwise(range(len(q)))
        if q[j].mean - q[i].mean < -3.0 * math.hypot(se[i], se[j])
    ]
    return Check(
        f"q_A rises with epsilon on Synth(1) for the private mode ({curve.label}, mean of "
        f"{q[0].n} trials)",
        f"{q[0].mean:.4f} at eps={epsilons[0]:g} -> {q[-1].mean:.4f} at eps={epsilons[-1]:g}; "
        f"significant drops: {', '.join(drops) or 'none'}",
        "rise > 2 SE, no step down > 3 SE",
        rises and not drops,
    )


def checks(res: PrivacyResults) -> list[Check]:
    """The Done-when items of the private mode on ``res`` (those whose numbers were run)."""
    out: list[Check] = []
    gauss = res.synth[0] if res.synth else None
    if gauss is not None and len(res.synth_epsilons) > 1:
        out.append(_rises(gauss, res.synth_epsilons))
    one, b241 = res.row(ONE_RELEASE.label), res.row(BLOCKS_241.label)
    if one is not None and b241 is not None:
        measured = f"{_fmt(one.error)} / {_fmt(b241.error)}"
        precision = {p.label: p for p in res.precision if p.group_medians}
        spread = [precision[m.label] for m in (ONE_RELEASE, BLOCKS_241) if m.label in precision]
        if len(spread) == 2:
            medians = " / ".join(f"{p.error.median:.3f}" for p in spread)
            ranges = " / ".join(f"{min(p.group_medians):.3f}-{max(p.group_medians):.3f}"
                                for p in spread)
            measured += (f"; over {spread[0].error.n} seeds: {medians}, its {res.seeds}-seed "
                         f"medians {ranges}")
        (n_m, d_m), target = res.motes_shape, (MAX_ERROR_ONE_RELEASE, MAX_ERROR_BLOCKS_241)
        out.append(Check(
            f"Motes light ({n_m} x {d_m}), {res.leaves} leaves, eps {res.epsilon:g}, delta "
            f"{res.delta:g}, rank {res.rank}, clip {res.clip_norm:g}: median root error "
            f"ratio over {res.seeds} seeds, one release per leaf / blocks of 241",
            measured, f"<= {target[0]:g} / <= {target[1]:g}",
            one.error.median <= target[0] and b241.error.median <= target[1],
        ))  # fmt: skip
    if gauss is not None and SYNTH_Q_EPSILON in res.synth_epsilons:
        q, d = gauss.q[res.synth_epsilons.index(SYNTH_Q_EPSILON)], res.synth_shape[0]
        out.append(Check(
            f"Synth(1) d={d} n={res.synth_shape[1]} delta={res.synth_delta:g}: mean q_A at "
            f"eps {SYNTH_Q_EPSILON:g} ({gauss.label}, {q.n} trials)",
            f"{q.mean:.4f} (std {q.std:.4f}; random direction {random_level(d):.3f})",
            f">= {MIN_SYNTH_Q:g}", q.mean >= MIN_SYNTH_Q,
        ))  # fmt: skip
    return out
