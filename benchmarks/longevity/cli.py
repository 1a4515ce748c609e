"""The command line: the runs of a report, one after the other, then the report."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import longevity as package
from benchmarks.longevity.constants import DEFAULT_OUT, TOPOLOGY
from benchmarks.longevity.judge import _judge
from benchmarks.longevity.report import _day_table, _summary, store_days, write_report
from benchmarks.longevity.simulation import run_days
from benchmarks.longevity.stats import DayStats, LongevityRun
from edge_runtime.agents.leaf.core.durability import CHECKPOINT_INTERVAL_S, IDLE_CHECKPOINT_GAP_S
from edge_runtime.datasets import load_dataset
from edge_runtime.topology import load_topology

FAULT_NAMES = {
    "outage": "broker unreachable for a day (leaf fed over MQTT)",
    "outage-local": "broker unreachable for a day (leaf with a local source)",
    "reject": "every reading rejected (valid_range) for a day",
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.longevity",
        description=package.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--days",
        type=int,
        default=30,
        help="steady days at 1 reading/s in messages of --batch (one a minute "
        "at 64), tracemalloc on; default 30",
    )
    p.add_argument(
        "--only-days", action="store_true", help="only the --days run (report LONGEVITY-DAYS.md)"
    )
    p.add_argument(
        "--days-untraced",
        action="store_true",
        help="the --days run without tracemalloc (VmRSS and gc objects only)",
    )
    p.add_argument(
        "--single-hours",
        type=float,
        default=2.0,
        help="hours at 1 reading/s, one reading per message (per-day numbers "
        "scaled from them); default 2",
    )
    p.add_argument(
        "--fast-days",
        type=int,
        default=3,
        help="windows at 100 readings/s in messages of --batch; default 3",
    )
    p.add_argument(
        "--fast-hours",
        type=float,
        default=2.0,
        help="hours of each window at 100 readings/s (per-day numbers scaled "
        "from it; 24: whole days); default 2",
    )
    p.add_argument(
        "--local-outage-hours",
        type=float,
        default=2.0,
        help="hours of the outage of a local-source leaf at 100 readings/s "
        "(the source keeps it busy: full numerics); default 2",
    )
    p.add_argument(
        "--trace-fast",
        action="store_true",
        help="tracemalloc also at 100 readings/s (about 3x slower)",
    )
    p.add_argument("--batch", type=int, default=64, help="readings per message; default 64")
    p.add_argument(
        "--context-hours",
        type=float,
        default=2.0,
        help="hours of the steady days before and after a fault day",
    )
    p.add_argument(
        "--reject-hours",
        type=float,
        default=6.0,
        help="hours of the rejecting day at 100 readings/s; default 6",
    )
    p.add_argument(
        "--intervals",
        default="10,30,60,120,300",
        help="checkpoint_interval_s values of the sweep (comma-separated)",
    )
    p.add_argument(
        "--sweep-hours",
        type=float,
        default=1.0,
        help="hours simulated per sweep point at 100 readings/s; default 1",
    )
    p.add_argument(
        "--gaps",
        default="1,5,11,15,30,64,120",
        help="seconds between two messages of 64 readings of a sensor that "
        "pauses between them (default settings); comma-separated",
    )
    p.add_argument(
        "--gap-hours", type=float, default=2.0, help="hours simulated per message gap; default 2"
    )
    p.add_argument(
        "--cases",
        default="outage,outage-local,reject",
        help="fault cases (steady, the fault for 24 h, steady) at both rates",
    )
    p.add_argument("--real-fsync", action="store_true", help="the double also syncs")
    p.add_argument("--quick", action="store_true", help="smoke run: a few short days")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    started = time.perf_counter()
    topology = load_topology(TOPOLOGY)
    data = np.asarray(load_dataset("motes-light"), dtype=np.float64)
    q = args.quick
    real = args.real_fsync
    ctx = 0.25 if q else args.context_hours
    fault_h = 1.0 if q else 24.0
    runs: dict[str, list[DayStats]] = {}

    def go(label: str, run: LongevityRun) -> None:
        print(label, flush=True)
        runs[label] = run_days(run, data, topology)

    n = 3 if q else args.days
    if n:
        go(
            f"steady, 1 reading/s in messages of {args.batch}, {n} days",
            LongevityRun(
                1.0,
                ["steady"] * n,
                batch=args.batch,
                single_below=0.0,
                real_fsync=real,
                hours_per_day=2.0 if q else 24.0,
                trace_memory=not args.days_untraced,
            ),
        )
    if args.only_days:
        args.out.mkdir(parents=True, exist_ok=True)
        name = next(iter(runs))
        store_days(args.out, name, runs[name], time.perf_counter() - started)
        (args.out / "LONGEVITY-DAYS.md").write_text("\n".join(_day_table(name, runs[name])))
        print(f"report: {args.out / 'LONGEVITY-DAYS.md'}")
        return 0
    h = 0.5 if q else args.single_hours
    if h:
        go(
            f"steady, 1 reading/s, one reading per message, {h:g} h",
            LongevityRun(1.0, ["steady"], real_fsync=real, trace_memory=False, hours_per_day=h),
        )
    n = 2 if q else args.fast_days
    h = 0.25 if q else args.fast_hours
    go(
        f"steady, 100 readings/s in messages of {args.batch}, {n} windows of {h:g} h",
        LongevityRun(
            100.0,
            ["steady"] * n,
            batch=args.batch,
            real_fsync=real,
            trace_memory=args.trace_fast,
            hours_per_day=h,
        ),
    )
    sweep: list[dict[str, float]] = []
    sweep_hours = 0.25 if q else args.sweep_hours
    for interval in [float(x) for x in args.intervals.split(",") if x.strip()]:
        print(f"sweep: checkpoint_interval_s {interval:g}", flush=True)
        days = run_days(
            LongevityRun(
                100.0,
                ["steady"],
                checkpoint_interval_s=interval,
                batch=args.batch,
                trace_memory=False,
                real_fsync=real,
                hours_per_day=sweep_hours,
            ),
            data,
            topology,
        )
        row = _summary(days, skip_first=False)
        row["interval"] = interval
        sweep.append(row)
    gaps: list[dict[str, float]] = []
    for gap in [float(x) for x in args.gaps.split(",") if x.strip()]:
        print(f"gap sweep: a message of 64 readings every {gap:g} s", flush=True)
        days = run_days(
            LongevityRun(
                64.0 / gap,
                ["steady"],
                batch=64,
                single_below=0.0,
                trace_memory=False,
                real_fsync=real,
                hours_per_day=0.25 if q else args.gap_hours,
            ),
            data,
            topology,
        )
        row = _summary(days, skip_first=False)
        row["gap"] = gap
        gaps.append(row)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for rate in (1.0, 100.0):
        for case in cases:
            fault = "outage" if case.startswith("outage") else case
            hours = [ctx, fault_h, ctx]
            if rate > 1 and case == "outage-local":
                hours[1] = fault_h if q else args.local_outage_hours
            if rate > 1 and case == "reject":
                hours[1] = fault_h if q else args.reject_hours
            go(
                f"{FAULT_NAMES[case]}, {rate:g} readings/s",
                LongevityRun(
                    rate,
                    ["steady", fault, "steady"],
                    batch=args.batch,
                    single_below=0.0,
                    real_fsync=real,
                    trace_memory=rate <= 1 or args.trace_fast,
                    local_source=case == "outage-local",
                    hours=hours,
                ),
            )
    results: dict[str, object] = {
        "gaps": gaps,
        "meta": {
            "argv": argv if argv is not None else sys.argv[1:],
            "sweep_rate": 100.0,
            "sweep_hours": sweep_hours,
            "checkpoint_interval_s_default": CHECKPOINT_INTERVAL_S,
            "idle_checkpoint_gap_s": IDLE_CHECKPOINT_GAP_S,
            "wall_s": time.perf_counter() - started,
            "python": platform.python_version(),
            "numpy": np.__version__,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "days": {k: [d.as_dict() for d in v] for k, v in runs.items()},
        "sweep": sweep,
        "_days": runs,
    }
    results["checks"], results["recommendation"], results["notes"] = _judge(runs, sweep)
    path = write_report(results, args.out)
    print(f"report: {path}")
    for c in results["checks"]:  # type: ignore[union-attr]
        print(f"  {'pass' if c['ok'] else 'FAIL'}: {c['check']}: {c['measured']}")
    return 0
