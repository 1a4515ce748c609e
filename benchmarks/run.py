"""``python -m benchmarks suite``: the numerics benchmarks (a)-(f), (i), and on request the
fleet (g) and FedPower (h); writes ``REPORT.md``, ``results.json`` and the PNGs to ``--out``.

``--quick`` shrinks sizes (for smoke checks, not numbers); ``--only NAME ...`` runs some
benchmarks (``fleet`` names its five parts; fleet and fedpower run only when named); with
``--update`` the others keep their results from ``OUT/results.json``; ``python -m benchmarks
render suite`` measures nothing and redraws the report from it. See ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import accuracy, memory, plots, report, results, timing
from benchmarks.anomaly import section as anomaly_section
from benchmarks.fedpower import section as fedpower_section
from benchmarks.fleet import dtype, live, scaling
from benchmarks.measure import single_thread
from benchmarks.privacy import section as privacy_section
from benchmarks.registry import REPORT_DIR
from benchmarks.schema import cpu_model
from benchmarks.synth import SYNTH_ALPHAS, synth
from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import error_ratio

__all__ = [
    "BENCHMARKS", "DEFAULT_BENCHMARKS", "FLEET", "FULL", "GROUPS", "ON_REQUEST", "QUICK", "Sizes",
    "expand_names", "main", "render", "run_suite",
]  # fmt: skip



@dataclass(frozen=True)
class Sizes:
    """Problem sizes and repeat counts of one run of the suite."""

    name: str
    rank: int = 10
    block_size: int = 50
    motes_points: int = 40
    motes_rows: int | None = None  # None: all 7712 rows (fewer only for smoke tests)
    synth_shape: tuple[int, int] = (400, 4000)  # (d, n) of supplementary D.1
    synth_alphas: tuple[float, ...] = SYNTH_ALPHAS
    synth_points: int = 25
    grid_d: tuple[int, ...] = (48, 400, 1000)
    grid_r: tuple[int, ...] = (10, 50)
    grid_b: tuple[int, ...] = (25, 50, 200)
    grid_blocks: int = 40  # at least this many batches per stream ...
    grid_work: int = 480_000  # ... and at least this many values (samples x d)
    grid_repeats: int = 9
    merge_repeats: int = 15
    merge_sweep_d: tuple[int, ...] = (100, 200, 400, 800, 1600, 3200)
    merge_sweep_r: tuple[int, ...] = (12, 25, 50, 100, 200)
    merge_sweep_repeats: int = 7
    children: tuple[int, ...] = tuple(2**i for i in range(2, 11))
    child_updates: int = 201
    merge_many_repeats: int = 3
    memory_lengths: tuple[int, ...] = (10**3, 10**4, 10**5, 10**6)
    memory_ipca_max: int = 10**6
    privacy: privacy_section.PrivacySizes = privacy_section.FULL
    fleet: scaling.FleetSizes = scaling.FULL
    fedpower: fedpower_section.FedPowerSizes = fedpower_section.FULL


FULL = Sizes("full")
QUICK = Sizes(
    "quick", motes_points=12, synth_shape=(400, 1000), synth_alphas=(0.1, 1.0, 3.0),
    synth_points=8, grid_blocks=6, grid_work=96_000, grid_repeats=3, merge_repeats=3,
    merge_sweep_d=(200, 800), merge_sweep_r=(50, 100), merge_sweep_repeats=1,
    children=(4, 16, 64, 256), child_updates=31, merge_many_repeats=1,
    memory_lengths=(10**3, 10**4), memory_ipca_max=10**4, privacy=privacy_section.QUICK,
    fleet=scaling.QUICK, fedpower=fedpower_section.QUICK,
)  # fmt: skip


def _environment(sizes: Sizes) -> dict[str, str]:
    import scipy
    import sklearn
    from threadpoolctl import threadpool_info

    cpu = cpu_model() or "unknown"
    pools = {f"{i['internal_api']} {i.get('version') or ''}".strip() for i in threadpool_info()}
    return {
        "run": f"{sizes.name} ({dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')})",
        "machine": f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()}",
        "python": sys.version.split()[0],
        "numpy / scipy / scikit-learn": " / ".join(m.__version__ for m in (np, scipy, sklearn)),
        "BLAS/OpenMP pools": ", ".join(sorted(pools)) + " (limited to 1 thread for the whole run)",
    }


def _bench_accuracy(res: results.Results, sizes: Sizes, log: Callable[[str], None]) -> None:
    r, b = sizes.rank, sizes.block_size
    x = load_dataset("motes-light")[: sizes.motes_rows]
    res.motes_shape = (x.shape[0], x.shape[1])
    pts = accuracy.checkpoints(x.shape[0], sizes.motes_points, step=b)
    res.motes = accuracy.run_trajectories(x, r, accuracy.method_factories(x.shape[1], r, b), pts)
    log("  motes: " + ", ".join(f"{k} {t.final:.4f}" for k, t in res.motes.items()))
    layouts: dict[str, dict[str, Any]] = {
        accuracy.FPCA: {}, accuracy.FPCA_NO_OVERSAMPLE: {"oversample": 0},
        accuracy.FPCA_EQUAL_STATE: {"oversample": r},
        f"{accuracy.FPCA_CENTRED}, centred ratio": {"center": True},
    }  # fmt: skip
    res.federated = {
        name: error_ratio(x - x.mean(axis=0) if kw.get("center") else x,
                          accuracy.federated_basis(x, r, block_size=b, **kw))
        for name, kw in layouts.items()
    }  # fmt: skip
    log("  federated: " + ", ".join(f"{k} {v:.4f}" for k, v in res.federated.items()))
    d, n = sizes.synth_shape
    res.synth_shape = (d, n)
    for alpha in sizes.synth_alphas:
        xs = synth(alpha, d, n, seed=0)
        pts = accuracy.checkpoints(n, sizes.synth_points, step=b)
        res.synth[alpha] = accuracy.run_trajectories(xs, r, accuracy.method_factories(d, r, b), pts)
        log(f"  synth alpha={alpha:g}: FPCA-Edge {res.synth[alpha][accuracy.FPCA].final:.4f}")


def _bench_throughput(res: results.Results, sizes: Sizes, log: Callable[[str], None]) -> None:
    for d in sizes.grid_d:
        for r in sizes.grid_r:
            for b in sizes.grid_b:
                n_blocks = max(sizes.grid_blocks, math.ceil(sizes.grid_work / (d * b)))
                row = timing.throughput(d, r, b, n_blocks=n_blocks, repeats=sizes.grid_repeats)
                res.throughput.append(row)
                ratio = "n/a" if row.ratio is None else f"{row.ratio:.2f}x"
                fpca = "n/a" if row.fpca is None else f"{row.fpca:,.0f}"
                log(f"  d={d} r={r} b={b}: FPCA-Edge {fpca} samples/s, ratio {ratio} {row.note}")


def _bench_merge(res: results.Results, sizes: Sizes, log: Callable[[str], None]) -> None:
    res.merge = timing.merge_times(800, 100, repeats=sizes.merge_repeats)
    log(f"  d=800 r=100: {res.merge.speedup:.2f}x, angle {res.merge.max_angle:.1e}")
    reps = sizes.merge_sweep_repeats
    res.merge_sweep_d = [timing.merge_times(d, 100, repeats=reps) for d in sizes.merge_sweep_d]
    res.merge_sweep_r = [timing.merge_times(800, r, repeats=reps) for r in sizes.merge_sweep_r]


def _bench_aggregator(res: results.Results, sizes: Sizes, log: Callable[[str], None]) -> None:
    res.aggregator = timing.aggregator_times(
        sizes.children, 48, sizes.rank + res.oversample, n_updates=sizes.child_updates,
        repeats_many=sizes.merge_many_repeats,
    )  # fmt: skip
    for row in res.aggregator:
        log(f"  k={row.n_children}: update {row.update * 1e3:.3f} ms ({row.merges_per_update} "
            f"merges), merge_many {row.merge_many * 1e3:.2f} ms")  # fmt: skip
    res.growth = timing.growth_check(res.aggregator)


def _bench_memory(res: results.Results, sizes: Sizes, log: Callable[[str], None]) -> None:
    for n in sizes.memory_lengths:
        ipca = n <= sizes.memory_ipca_max
        row = memory.memory_row(n, rank=sizes.rank, block_size=sizes.block_size, with_ipca=ipca)
        res.memory.append(row)
        log(f"  n={n:,}: FPCA-Edge {row.fpca / 1024:.1f} KiB")


_Bench = Callable[[results.Results, Sizes, Callable[[str], None]], None]


def _store(field: str, run: Callable[[Sizes, Callable[[str], None]], Any]) -> _Bench:
    """A benchmark that stores what ``run(sizes, log)`` returns in ``Results.FIELD``."""
    return lambda res, sizes, log: setattr(res, field, run(sizes, log))


BENCHMARKS: dict[str, _Bench] = {
    "accuracy": _bench_accuracy,
    "throughput": _bench_throughput,
    "merge": _bench_merge,
    "aggregator": _bench_aggregator,
    "memory": _bench_memory,
    "privacy": _store("private_mode", lambda s, log: privacy_section.run_privacy(s.privacy, log)),
    "fleet-sweep": _store("fleet_sweep", lambda s, log: scaling.run_sweep(s.fleet, log)),
    "fleet-motes": _store("fleet_motes", lambda s, log: scaling.run_motes(s.fleet, log)),
    "fleet-latency": _store("fleet_latency", lambda s, log: live.measure_latency(s.fleet, log)),
    "fleet-agent": _store("fleet_agent", lambda s, log: live.measure_agent_cost(s.fleet, log)),
    "fleet-dtype": _store("fleet_dtype", lambda s, log: dtype.measure_dtypes(log)),
    "fedpower": _store(
        "fedpower", lambda s, log: fedpower_section.run_fedpower_benchmark(s.fedpower, log)
    ),
    "anomaly": _store("anomaly", lambda s, log: anomaly_section.run_anomaly_benchmark(log)),
}
#: The fleet benchmark (g): subprocesses and a broker, minutes at full size; run only on
#: request (``--only fleet`` or some of its parts).
FLEET: tuple[str, ...] = tuple(name for name in BENCHMARKS if name.startswith("fleet-"))
#: FPCA vs FedPower (h): run only on request (``--only fedpower``), like the fleet.
ON_REQUEST: tuple[str, ...] = (*FLEET, "fedpower")
#: What a run without ``only`` runs: the library benchmarks (a)-(f) and (i).
DEFAULT_BENCHMARKS: tuple[str, ...] = tuple(n for n in BENCHMARKS if n not in ON_REQUEST)
#: Names that stand for several benchmarks in ``only``.
GROUPS: dict[str, tuple[str, ...]] = {"fleet": FLEET}


def expand_names(only: Sequence[str] | None) -> list[str]:
    """The benchmarks ``only`` names, groups expanded, in `BENCHMARKS` order (None: all of
    `DEFAULT_BENCHMARKS`); ValueError for a name that is neither a benchmark nor a group."""
    if only is None:
        return list(DEFAULT_BENCHMARKS)
    unknown = [n for n in only if n not in BENCHMARKS and n not in GROUPS]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; choose from {[*BENCHMARKS, *GROUPS]}")
    wanted = {m for n in only for m in GROUPS.get(n, (n,))}
    return [name for name in BENCHMARKS if name in wanted]


def run_suite(
    sizes: Sizes,
    out_dir: Path,
    *,
    only: Sequence[str] | None = None,
    update: bool = False,
    log: Callable[[str], None] = print,
) -> results.Results:
    """Run the benchmarks ``only`` names (None: `DEFAULT_BENCHMARKS`) at ``sizes`` and write
    ``REPORT.md``, ``results.json`` and the PNGs to ``out_dir``; progress lines to ``log``.

    With ``update`` the run starts from ``out_dir/results.json`` (same mode): the benchmarks
    not named keep their results. ValueError for an unknown name, or with ``update`` for a
    missing results file or one of another mode.
    """
    names = expand_names(only)
    out_dir.mkdir(parents=True, exist_ok=True)
    environment = _environment(sizes)
    if update:
        res = results.load_results(out_dir / "results.json")
        if res.mode != sizes.name:
            stored = out_dir / "results.json"
            raise ValueError(f"--update: {stored} is a {res.mode!r} run, this is {sizes.name!r}")
        results.clear_results(res, names)
        # keep the original run and earlier re-runs of other benchmarks, drop this one's
        base, *reruns = res.environment.get("run", "").split("; re-ran ")
        kept = [r for r in reruns if not set(r.split(":")[0].split(", ")) <= set(names)]
        now = f"{', '.join(names)}: {environment['run']}"
        environment["run"] = "; re-ran ".join([base, *kept, now])
        res.environment = environment
    else:
        oversample = accuracy.default_oversample(48, sizes.rank, sizes.block_size)
        res = results.Results(sizes.name, sizes.rank, sizes.block_size, oversample, environment)
    total = time.perf_counter()
    # One BLAS thread throughout: the timed parts need it (see benchmarks.measure), and
    # the untimed set-up runs small problems that two threads only slow down.
    with single_thread():
        for name in names:
            log(f"[{name}]")
            t0 = time.perf_counter()
            BENCHMARKS[name](res, sizes, log)
            res.seconds[name] = time.perf_counter() - t0
    elapsed = time.perf_counter() - total
    res.seconds.pop("total", None)
    # with update: the total of the merged report (the kept benchmarks' times included)
    res.seconds["total"] = sum(res.seconds.values()) if update else elapsed
    plots.write_plots(res, out_dir)
    report.write_report(res, out_dir)
    results.save_results(res, out_dir / "results.json")
    log(f"wrote {out_dir / 'REPORT.md'} in {elapsed:.1f} s")
    return res


def render(out_dir: Path, *, log: Callable[[str], None] = print) -> results.Results:
    """Rewrite ``out_dir/REPORT.md`` and the PNGs from ``out_dir/results.json``, measuring
    nothing; ValueError if that file is missing or not a results file."""
    res = results.load_results(out_dir / "results.json")
    plots.write_plots(res, out_dir)
    report.write_report(res, out_dir)
    log(f"rendered {out_dir / 'REPORT.md'} from {out_dir / 'results.json'}")
    return res


def _at_least_one(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _leaf_counts(text: str) -> tuple[int, ...]:
    """``"8,32,128"`` -> ``(8, 32, 128)``."""
    if not all(p.strip().isdigit() and int(p) >= 1 for p in text.split(",")):
        raise argparse.ArgumentTypeError(
            f"expected leaf counts >= 1 separated by commas, got {text!r}"
        )
    return tuple(int(p) for p in text.split(","))


#: The fleet options: flag, `scaling.FleetSizes` fields, type, help.
_FLEET_OPTIONS = [
    ("--ks", ("ks",), _leaf_counts, "leaf counts of the sweep, e.g. 8,32,128"),
    ("--repeats", ("repeats", "large_repeats", "motes_repeats"), _at_least_one,
     "runs per k and of the Motes demo (medians)"),
    ("--readings-per-leaf", ("readings_per_leaf",), _at_least_one,
     "synthetic readings per leaf (200)"),
    ("--run-timeout", ("run_timeout_s",), float,
     "stop a run after this many seconds and report it as stalled"),
    ("--workers", ("workers",), _at_least_one, "--workers of edge-runtime run"),
]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns 0 (failed Done-when items are printed, not fatal:
    benchmarks report numbers, tests check correctness)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0]
    )
    add = parser.add_argument
    add("--quick", action="store_true", help="small sizes and repeats (< 60 s)")
    add("--out", type=Path, default=REPORT_DIR, help=f"output directory (default {REPORT_DIR})")
    add("--only", nargs="+", choices=[*BENCHMARKS, *GROUPS], help="run only these benchmarks "
        "(default: all but the fleet benchmark and fedpower; 'fleet' names its five parts)")
    add("--update", action="store_true", help="with --only: keep the other benchmarks' "
        "results from OUT/results.json (same mode) and rewrite the whole report")
    group = parser.add_argument_group("fleet benchmark (with --only fleet or its parts)")
    for flag, _, kind, text in _FLEET_OPTIONS:
        group.add_argument(flag, type=kind, help=text)
    args = parser.parse_args(argv)
    if args.update and not args.only:
        parser.error("--update needs --only")
    fleet = {f: v for flag, fs, _, _ in _FLEET_OPTIONS for f in fs
             if (v := getattr(args, flag[2:].replace("-", "_"))) is not None}  # fmt: skip
    sizes = QUICK if args.quick else FULL
    if fleet:
        if not set(expand_names(args.only)) & set(FLEET):
            parser.error(
                "--ks, --repeats, --readings-per-leaf, --run-timeout and --workers "
                "apply to the fleet benchmark: add --only fleet"
            )
        if args.run_timeout is not None and not args.run_timeout > 0:
            parser.error(f"--run-timeout must be > 0 seconds, got {args.run_timeout:g}")
        sizes = dataclasses.replace(sizes, fleet=dataclasses.replace(sizes.fleet, **fleet))
    res = run_suite(sizes, args.out, only=args.only, update=args.update)
    found = [*report.done_when(res), *report.privacy_done_when(res),
             *report.fleet_done_when(res), *report.fedpower_done_when(res)]  # fmt: skip
    for c in found:
        if c.passed is False:
            print(f"Done-when not met: {c.item}: {c.measured} (target {c.target})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
