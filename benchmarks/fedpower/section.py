"""Benchmark (h): FPCA against FedPower, side by side (numerics in one process).

`run_fedpower_benchmark` fills `FedPowerBenchResults`; ``python -m benchmarks.run --only
fedpower --update`` calls it and `benchmarks.fedpower.report_section` writes section (h).
On each dataset (`benchmarks.fedpower.data`: Motes light, heterogeneous Synth; 8
contiguous leaves) and each fault (`benchmarks.fedpower.faults`):

- FPCA (`benchmarks.fedpower.fpca_tree`): streaming leaves (block 50, rank 10 + the
  default oversample), the tree merge; error, messages and bytes of both publish policies.
- FedPower (`benchmarks.fedpower.fedpower_runs`) in the `METHODS` configurations, ``rounds``
  rounds each: the error ratio and the cumulative bytes after every round.
- Private, without faults: FPCA (Gaussian mechanism, one release per leaf) and FedPower
  (RDP-calibrated noise on every local iteration, calibrated for the run's ``T = rounds
  p`` iterations, so one run per horizon) at the same ``(epsilon, delta)`` and clip norm.

Error ratio (`edge_runtime.fpca.error_ratio`, rank 10): mean squared residual of the basis
on the rows the fleet observed over that of their offline rank-10 SVD (1 is optimal).
Non-private numbers are medians over ``repeats`` runs (seeds 0..; FedPower's start basis
and participant draws), private ones medians (and quartiles) over ``seeds`` seeds. Wall
time: the numerics only (no network, no serialisation), median of the ``repeats`` runs.
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
    "FULL",
    "METHODS",
    "QUICK",
    "TINY",
    "Curve",
    "FPCAPoint",
    "FedPowerBenchResults",
    "FedPowerSizes",
    "Method",
    "PrivateRow",
    "run_fedpower_benchmark",
]


@dataclass(frozen=True)
class Method:
    """One FedPower configuration: ``p`` local iterations, OPT or not, ``K`` of ``M``."""

    local_steps: int
    opt: bool
    participation: float

    def label(self, n_leaves: int) -> str:
        """E.g. ``"FedPower p=4, OPT, 6/8"`` (no OPT mention at ``p = 1``, where the
        alignment to the previous basis is the identity)."""
        k = max(1, round(self.participation * n_leaves))
        if self.local_steps == 1:
            return f"FedPower p=1, {k}/{n_leaves}"
        opt = "OPT" if self.opt else "no OPT"
        return f"FedPower p={self.local_steps}, {opt}, {k}/{n_leaves}"


#: The FedPower configurations of every table (full and partial participation K = 6 of 8).
METHODS: tuple[Method, ...] = (
    Method(1, True, 1.0),
    Method(1, True, 0.75),
    Method(4, True, 1.0),
    Method(4, False, 1.0),
    Method(4, True, 0.75),
    Method(4, False, 0.75),
)
#: The configurations also run under faults and with privacy.
FAULT_METHODS: tuple[Method, ...] = (Method(1, True, 1.0), Method(1, True, 0.75), METHODS[2])
PRIVATE_METHODS: tuple[Method, ...] = (Method(1, True, 1.0), Method(4, True, 1.0))


@dataclass(frozen=True)
class FedPowerSizes:
    """Settings of one run of benchmark (h)."""

    rank: int = 10
    block_size: int = 50
    n_leaves: int = 8
    rounds: int = 40
    repeats: int = 3
    seeds: int = 9
    motes_rows: int | None = None  # None: all 7712 rows
    synth_shape: tuple[int, int] = (48, 8000)  # (d, n)
    synth_alpha: float = 1.0
    epsilon: float = 1.0
    delta: float = 1e-5
    private_rounds: tuple[int, ...] = (1, 2, 3, 5, 10, 20)


FULL = FedPowerSizes()
QUICK = FedPowerSizes(rounds=20, repeats=1, seeds=3, private_rounds=(1, 3, 10))
#: A few seconds: the tests' configuration.
TINY = FedPowerSizes(
    rank=3,
    block_size=20,
    rounds=12,
    repeats=1,
    seeds=2,
    motes_rows=400,
    synth_shape=(12, 800),
    private_rounds=(1, 4),
)


@dataclass
class Curve:
    """FedPower's error and bytes after each round (medians over the repeats)."""

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
    """FPCA's root estimate on one dataset and fault (private: medians over seeds)."""

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
    """Everything benchmark (h) measured."""

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
    #: Error ratio of a random rank-r subspace (median over the seeds), for scale.
    random_error: dict[str, float] = field(default_factory=dict)


def _observed(ds: datasets.Dataset, fault: Fault) -> np.ndarray:
    m = len(ds.parts)
    return np.concatenate([fault.rows(i, p, m) for i, p in enumerate(ds.parts)])


def _fpca_point(ds: datasets.Dataset, sizes: FedPowerSizes, fault: Fault) -> FPCAPoint:
    x = _observed(ds, fault)
    runs = [
        fpca_run(ds.parts, sizes.rank, sizes.block_size, fault=fault, seed=s)
        for s in range(sizes.repeats)
    ]
    err = error_ratio(x, runs[0].basis)  # deterministic without privacy
    msgs, nbytes = per_block_traffic(ds.parts, sizes.rank, sizes.block_size, fault)
    return FPCAPoint(
        ds.name,
        fault.kind,
        False,
        err,
        err,
        err,
        runs[0].messages,
        runs[0].wire_bytes,
        msgs,
        nbytes,
        float(np.median([r.seconds for r in runs])),
    )


def _curve(ds: datasets.Dataset, sizes: FedPowerSizes, method: Method, fault: Fault) -> Curve:
    x = _observed(ds, fault)
    runs = [
        simulate(
            ds.parts,
            sizes.rank,
            sizes.rounds,
            method.local_steps,
            opt=method.opt,
            participation=method.participation,
            fault=fault,
            seed=s,
        )
        for s in range(sizes.repeats)
    ]
    errors = np.median([[error_ratio(x, b) for b in r.history] for r in runs], axis=0)
    cum = np.median([np.cumsum(r.bytes_per_round) for r in runs], axis=0)
    return Curve(
        ds.name,
        method.label(sizes.n_leaves),
        fault.kind,
        method.local_steps,
        method.opt,
        method.participation,
        [float(e) for e in errors],
        [float(b) for b in cum],
        float(np.median([sum(r.messages_per_round) for r in runs])),
        float(np.median([r.timeouts for r in runs])),
        float(np.median([r.seconds for r in runs])),
    )


def _private(
    ds: datasets.Dataset, sizes: FedPowerSizes, log: Callable[[str], None]
) -> tuple[FPCAPoint, list[PrivateRow], float]:
    budget = (sizes.epsilon, sizes.delta)
    x = ds.x
    fp = [
        fpca_run(ds.parts, sizes.rank, privacy=budget, clip_norm=ds.clip_norm, seed=s)
        for s in range(sizes.seeds)
    ]
    e = np.array([error_ratio(x, r.basis) for r in fp])
    point = FPCAPoint(
        ds.name,
        NONE,
        True,
        float(np.median(e)),
        float(np.percentile(e, 25)),
        float(np.percentile(e, 75)),
        fp[0].messages,
        fp[0].wire_bytes,
        fp[0].messages,
        fp[0].wire_bytes,
        float(np.median([r.seconds for r in fp])),
    )
    log(f"  {ds.name}: private FPCA {point.error:.3f}")
    d = ds.n_features
    rand = [
        error_ratio(x, np.linalg.qr(np.random.default_rng(s).standard_normal((d, sizes.rank)))[0])
        for s in range(sizes.seeds)
    ]
    rows = []
    for method in PRIVATE_METHODS:
        for t in sizes.private_rounds:
            runs = [
                simulate(
                    ds.parts,
                    sizes.rank,
                    t,
                    method.local_steps,
                    opt=method.opt,
                    privacy=budget,
                    clip_norm=ds.clip_norm,
                    seed=s,
                )
                for s in range(sizes.seeds)
            ]
            e = np.array([error_ratio(x, r.history[-1]) for r in runs])
            assert runs[0].budget is not None
            rows.append(
                PrivateRow(
                    ds.name,
                    method.label(sizes.n_leaves),
                    t,
                    float(np.median(e)),
                    float(np.percentile(e, 25)),
                    float(np.percentile(e, 75)),
                    float(sum(runs[0].bytes_per_round)),
                    runs[0].budget.sigma,
                )
            )
            log(f"  {ds.name}: private {rows[-1].method} T={t} rounds: {rows[-1].error:.3f}")
    return point, rows, float(np.median(rand))


def run_fedpower_benchmark(
    sizes: FedPowerSizes, log: Callable[[str], None] = print
) -> FedPowerBenchResults:
    """Every table of section (h) (module docstring)."""
    res = FedPowerBenchResults(
        sizes.rank,
        sizes.n_leaves,
        sizes.block_size,
        sizes.rounds,
        sizes.repeats,
        sizes.seeds,
        sizes.epsilon,
        sizes.delta,
    )
    for name in (datasets.MOTES, datasets.SYNTH):
        ds = datasets.load(
            name,
            n_leaves=sizes.n_leaves,
            motes_rows=sizes.motes_rows,
            synth_shape=sizes.synth_shape,
            synth_alpha=sizes.synth_alpha,
        )
        res.shapes[name] = list(ds.x.shape)
        res.clip_norms[name] = ds.clip_norm
        for kind in FAULTS:
            fault = Fault(kind)
            point = _fpca_point(ds, sizes, fault)
            res.fpca.append(point)
            log(f"  {name}, {kind}: FPCA {point.error:.5f}, {point.wire_bytes:,} B")
            for method in METHODS if kind == NONE else FAULT_METHODS:
                c = _curve(ds, sizes, method, fault)
                res.curves.append(c)
                log(f"  {name}, {kind}: {c.method} {c.errors[-1]:.5f}, {c.cum_bytes[-1]:,.0f} B")
        point, rows, res.random_error[name] = _private(ds, sizes, log)
        res.fpca.append(point)
        res.private += rows
    return res
