"""Benchmark (h): FPCA against FedPower, side by side (numerics in one process).

`run_fedpower_benchmark` fills `FedPowerBenchResults` on each dataset (`data`) and fault
(`faults`): FPCA's tree (`fpca_tree`) and FedPower (`fedpower_runs`) in the `METHODS`
configurations, then both private at the same budget; `report_section` writes section (h),
whose template says how each number is measured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from benchmarks.fedpower import data as datasets
from benchmarks.fedpower.faults import FAULTS, NONE, Fault
from benchmarks.fedpower.fedpower_runs import simulate
from benchmarks.fedpower.fpca_tree import fpca_run, per_block_traffic
from edge_runtime.fpca import error_ratio

__all__ = [
    "FULL", "METHODS", "QUICK", "TINY", "Curve", "FPCAPoint", "FedPowerBenchResults",
    "FedPowerSizes", "Method", "PrivateRow", "run_fedpower_benchmark",
]  # fmt: skip


@dataclass(frozen=True)
class Method:
    """One FedPower configuration: ``p`` local iterations, OPT or not, ``K`` of ``M``."""

    local_steps: int
    opt: bool
    participation: float

    def label(self, n_leaves: int) -> str:
        """E.g. ``"FedPower p=4, OPT, 6/8"`` (OPT unnamed at ``p = 1``: it is the identity)."""
        k = max(1, round(self.participation * n_leaves))
        opt = "" if self.local_steps == 1 else ", OPT" if self.opt else ", no OPT"
        return f"FedPower p={self.local_steps}{opt}, {k}/{n_leaves}"


#: The FedPower configurations of every table (full and partial participation K = 6 of 8),
#: those also run under faults, and those run with privacy.
METHODS: tuple[Method, ...] = (
    Method(1, True, 1.0), Method(1, True, 0.75), Method(4, True, 1.0), Method(4, False, 1.0),
    Method(4, True, 0.75), Method(4, False, 0.75),
)  # fmt: skip
FAULT_METHODS: tuple[Method, ...] = METHODS[:3]
PRIVATE_METHODS: tuple[Method, ...] = (METHODS[0], METHODS[2])


@dataclass(frozen=True)
class FedPowerSizes:
    """Settings of one run of benchmark (h); ``synth_shape`` is ``(d, n)``."""

    rank: int = 10
    block_size: int = 50
    n_leaves: int = 8
    rounds: int = 40
    repeats: int = 3
    seeds: int = 9
    motes_rows: int | None = None  # None: all 7712 rows
    synth_shape: tuple[int, int] = (48, 8000)
    synth_alpha: float = 1.0
    epsilon: float = 1.0
    delta: float = 1e-5
    private_rounds: tuple[int, ...] = (1, 2, 3, 5, 10, 20)


FULL = FedPowerSizes()
QUICK = FedPowerSizes(rounds=20, repeats=1, seeds=3, private_rounds=(1, 3, 10))
#: A few seconds: the tests' configuration.
TINY = FedPowerSizes(rank=3, block_size=20, rounds=12, repeats=1, seeds=2, motes_rows=400,
                     synth_shape=(12, 800), private_rounds=(1, 4))  # fmt: skip


@dataclass
class Curve:
    """FedPower's error and cumulative bytes after each round (medians over the repeats)."""

    dataset: str
    method: str
    fault: str
    local_steps: int
    opt: bool
    participation: float
    errors: list[float]
    cum_bytes: list[float]
    messages: float
    timeouts: float
    seconds: float


@dataclass
class FPCAPoint:
    """FPCA's root estimate on one dataset and fault (private: medians over seeds); messages
    and bytes under the final and the per-block policy."""

    dataset: str
    fault: str
    private: bool
    error: float
    error_p25: float
    error_p75: float
    messages: int
    wire_bytes: int
    block_messages: int
    block_bytes: int
    seconds: float


@dataclass
class PrivateRow:
    """Private FedPower calibrated for ``rounds`` rounds: error quartiles over the seeds."""

    dataset: str
    method: str
    rounds: int
    error: float
    error_p25: float
    error_p75: float
    wire_bytes: float
    sigma: float


@dataclass
class FedPowerBenchResults:
    """Everything benchmark (h) measured; ``random_error``: median error ratio of a random
    rank-r subspace per dataset, for scale."""

    rank: int
    n_leaves: int
    block_size: int
    rounds: int
    repeats: int
    seeds: int
    epsilon: float
    delta: float
    shapes: dict[str, list[int]] = field(default_factory=dict)
    clip_norms: dict[str, float] = field(default_factory=dict)
    fpca: list[FPCAPoint] = field(default_factory=list)
    curves: list[Curve] = field(default_factory=list)
    private: list[PrivateRow] = field(default_factory=list)
    random_error: dict[str, float] = field(default_factory=dict)


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    """Median, 25th and 75th percentile."""
    return _med(values), float(np.percentile(values, 25)), float(np.percentile(values, 75))


def _med(values: object) -> float:
    return float(np.median(values))


def _fpca_point(ds: datasets.Dataset, sizes: FedPowerSizes, fault: Fault) -> FPCAPoint:
    m = len(ds.parts)
    x = np.concatenate([fault.rows(i, p, m) for i, p in enumerate(ds.parts)])
    runs = [fpca_run(ds.parts, sizes.rank, sizes.block_size, fault=fault, seed=s)
            for s in range(sizes.repeats)]  # fmt: skip
    err = error_ratio(x, runs[0].basis)  # deterministic without privacy
    block = per_block_traffic(ds.parts, sizes.rank, sizes.block_size, fault)
    return FPCAPoint(ds.name, fault.kind, False, err, err, err, runs[0].messages,
                     runs[0].wire_bytes, *block, _med([r.seconds for r in runs]))  # fmt: skip


def _curve(ds: datasets.Dataset, sizes: FedPowerSizes, method: Method, fault: Fault) -> Curve:
    m = len(ds.parts)
    x = np.concatenate([fault.rows(i, p, m) for i, p in enumerate(ds.parts)])
    runs = [
        simulate(ds.parts, sizes.rank, sizes.rounds, method.local_steps, opt=method.opt,
                 participation=method.participation, fault=fault, seed=s)
        for s in range(sizes.repeats)
    ]  # fmt: skip
    errors = np.median([[error_ratio(x, b) for b in r.history] for r in runs], axis=0)
    cum = np.median([np.cumsum(r.bytes_per_round) for r in runs], axis=0)
    return Curve(
        ds.name, method.label(sizes.n_leaves), fault.kind, method.local_steps, method.opt,
        method.participation, [float(e) for e in errors], [float(b) for b in cum],
        _med([sum(r.messages_per_round) for r in runs]), _med([r.timeouts for r in runs]),
        _med([r.seconds for r in runs]),
    )  # fmt: skip


def _private(
    ds: datasets.Dataset, sizes: FedPowerSizes, log: Callable[[str], None]
) -> tuple[FPCAPoint, list[PrivateRow], float]:
    budget, x, seeds = (sizes.epsilon, sizes.delta), ds.x, range(sizes.seeds)
    fp = [fpca_run(ds.parts, sizes.rank, privacy=budget, clip_norm=ds.clip_norm, seed=s)
          for s in seeds]  # fmt: skip
    point = FPCAPoint(ds.name, NONE, True, *_quartiles([error_ratio(x, r.basis) for r in fp]),
                      fp[0].messages, fp[0].wire_bytes, fp[0].messages, fp[0].wire_bytes,
                      _med([r.seconds for r in fp]))  # fmt: skip
    log(f"  {ds.name}: private FPCA {point.error:.3f}")
    d, rows = ds.n_features, []
    for method in PRIVATE_METHODS:
        for t in sizes.private_rounds:
            runs = [
                simulate(ds.parts, sizes.rank, t, method.local_steps, opt=method.opt,
                         privacy=budget, clip_norm=ds.clip_norm, seed=s) for s in seeds
            ]  # fmt: skip
            assert runs[0].budget is not None
            rows.append(PrivateRow(
                ds.name, method.label(sizes.n_leaves), t,
                *_quartiles([error_ratio(x, r.history[-1]) for r in runs]),
                float(sum(runs[0].bytes_per_round)), runs[0].budget.sigma,
            ))  # fmt: skip
            log(f"  {ds.name}: private {rows[-1].method} T={t} rounds: {rows[-1].error:.3f}")
    rand = [np.linalg.qr(np.random.default_rng(s).standard_normal((d, sizes.rank)))[0]
            for s in seeds]  # fmt: skip
    return point, rows, _med([error_ratio(x, q) for q in rand])


def run_fedpower_benchmark(
    sizes: FedPowerSizes, log: Callable[[str], None] = print
) -> FedPowerBenchResults:
    """Every table of section (h) (module docstring)."""
    s = sizes
    res = FedPowerBenchResults(s.rank, s.n_leaves, s.block_size, s.rounds, s.repeats, s.seeds,
                               s.epsilon, s.delta)  # fmt: skip
    for name in (datasets.MOTES, datasets.SYNTH):
        ds = datasets.load(name, n_leaves=s.n_leaves, motes_rows=s.motes_rows,
                           synth_shape=s.synth_shape, synth_alpha=s.synth_alpha)  # fmt: skip
        res.shapes[name], res.clip_norms[name] = list(ds.x.shape), ds.clip_norm
        for kind in FAULTS:
            fault = Fault(kind)
            res.fpca.append(point := _fpca_point(ds, s, fault))
            log(f"  {name}, {kind}: FPCA {point.error:.5f}, {point.wire_bytes:,} B")
            for method in METHODS if kind == NONE else FAULT_METHODS:
                res.curves.append(c := _curve(ds, s, method, fault))
                log(f"  {name}, {kind}: {c.method} {c.errors[-1]:.5f}, {c.cum_bytes[-1]:,.0f} B")
        point, rows, res.random_error[name] = _private(ds, s, log)
        res.fpca.append(point)
        res.private += rows
    return res
