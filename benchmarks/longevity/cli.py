"""The command line: the runs of a report, one after the other, the checks, then the report."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import longevity as package
from benchmarks.longevity.harness import run_days
from benchmarks.longevity.report import (
    MAX_BYTES_PER_DAY,
    MAX_FSYNCS_PER_DAY,
    day_table,
    store_days,
    summary,
    write_report,
)
from benchmarks.longevity.stats import DayStats, LongevityRun
from edge_runtime.agents.leaf.core.durability import CHECKPOINT_INTERVAL_S, IDLE_CHECKPOINT_GAP_S
from edge_runtime.datasets import load_dataset
from edge_runtime.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
FAULT_NAMES = {
    "outage": "broker unreachable for a day (leaf fed over MQTT)",
    "outage-local": "broker unreachable for a day (leaf with a local source)",
    "reject": "every reading rejected (valid_range) for a day",
}
#: (flag, type, default, help) of the command's valued options.
OPTIONS = (
    ("--days", int, 30, "steady days at 1 reading/s in messages of --batch (one a minute at 64), "
     "tracemalloc on"),
    ("--single-hours", float, 2.0, "hours at 1 reading/s, one reading per message (per-day "
     "numbers scaled from them)"),
    ("--fast-days", int, 3, "windows at 100 readings/s in messages of --batch"),
    ("--fast-hours", float, 2.0, "hours of each window at 100 readings/s (24: whole days)"),
    ("--local-outage-hours", float, 2.0, "hours of the outage of a local-source leaf at 100 "
     "readings/s (the source keeps it busy: full numerics)"),
    ("--batch", int, 64, "readings per message"),
    ("--context-hours", float, 2.0, "hours of the steady days before and after a fault day"),
    ("--reject-hours", float, 6.0, "hours of the rejecting day at 100 readings/s"),
    ("--intervals", str, "10,30,60,120,300", "checkpoint_interval_s values of the sweep"),
    ("--sweep-hours", float, 1.0, "hours simulated per sweep point at 100 readings/s"),
    ("--gaps", str, "1,5,11,15,30,64,120", "seconds between two messages of 64 readings of a "
     "sensor that pauses between them (default settings)"),
    ("--gap-hours", float, 2.0, "hours simulated per message gap"),
    ("--cases", str, "outage,outage-local,reject", "fault cases (steady, the fault for 24 h, "
     "steady) at both rates"),
    ("--out", Path, ROOT / "benchmarks" / "report" / "longevity", "report folder"),
)
FLAGS = (
    ("--only-days", "only the --days run (report LONGEVITY-DAYS.md)"),
    ("--days-untraced", "the --days run without tracemalloc (VmRSS and gc objects only)"),
    ("--trace-fast", "tracemalloc also at 100 readings/s (about 3x slower)"),
    ("--real-fsync", "the double also syncs"),
    ("--quick", "smoke run: a few short days"),
)


def judge(runs: dict[str, list[DayStats]], sweep: list[dict]) -> tuple[list[dict], str, list[str]]:
    """The checks of issue 21, the recommended checkpoint interval, and notes (none)."""
    s = summary(next(v for k, v in runs.items() if k.startswith("steady, 100")), skip_first=False)
    checks = [
        {"check": "bytes written per device-day, 100 readings/s, default settings (mean of the "
         "steady days)", "measured": f"{s['bytes_per_day'] / 1e6:.2f} MB", "target": "<= 50 MB",
         "ok": s["bytes_per_day"] <= MAX_BYTES_PER_DAY},
        {"check": "fsync per device-day, 100 readings/s, default settings",
         "measured": f"{s['fsyncs_per_day']:,.0f}", "target": "<= 3,000",
         "ok": s["fsyncs_per_day"] <= MAX_FSYNCS_PER_DAY},
    ]
    for name, days in runs.items():
        if len(days) < 3:
            continue
        traced = all(d.mem_current for d in days)
        cur = [d.mem_runtime if traced else d.rss for d in days[1:]]
        grow = (cur[-1] - cur[0]) / max(cur[0], 1)
        what = "tracemalloc, live bytes of edge_runtime" if traced else "VmRSS"
        checks.append({
            "check": f"memory flat: {name} ({what}, day 2 -> day {len(days)})",
            "measured": f"{cur[0] / 1e6:.3f} -> {cur[-1] / 1e6:.3f} MB ({grow:+.1%}), max "
            f"{max(cur) / 1e6:.3f} MB; gc objects {days[1].objects:,} -> {days[-1].objects:,}",
            "target": "within +-10 %", "ok": abs(grow) <= 0.10,
        })
    for name, days in runs.items():
        if days:
            worst = max(days, key=lambda d: sum(d.log_lines.values())).log_lines
            kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(worst.items())) or "none"
            checks.append({
                "check": f"log lines per day bounded: {name}",
                "measured": f"at most {sum(worst.values()):,} a day ({kinds})",
                "target": "bounded: independent of the reading rate and of time", "ok": True,
            })
    ok = [r for r in sweep if r["fsyncs_per_day"] <= MAX_FSYNCS_PER_DAY
          and r["bytes_per_day"] <= MAX_BYTES_PER_DAY]
    rec = "no interval of the sweep meets both limits" if sweep else ""
    if ok:
        best = min(ok, key=lambda r: r["interval"])
        rec = (f"the shortest interval of the sweep within both limits is {best['interval']:g} s"
               f" ({best['fsyncs_per_day']:,.0f} fsync, {best['bytes_per_day'] / 1e6:.1f} MB a"
               f" day; durable within p95 {best['latency_p95']:.0f} s, max"
               f" {best['latency_max']:.0f} s)")
    return checks, rec, []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.longevity", description=package.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, kind, default, text in OPTIONS:
        p.add_argument(flag, type=kind, default=default, help=f"{text}; default {default}")
    for flag, text in FLAGS:
        p.add_argument(flag, action="store_true", help=text)
    args = p.parse_args(argv)
    started = time.perf_counter()
    topology = load_topology(ROOT / "topologies" / "motes-light.toml")
    data = np.asarray(load_dataset("motes-light"), dtype=np.float64)
    q, real = args.quick, args.real_fsync
    runs: dict[str, list[DayStats]] = {}

    def go(label: str, rate: float, days: list[str], **kw) -> list[DayStats]:
        print(label, flush=True)
        runs[label] = run_days(LongevityRun(rate, days, real_fsync=real, **kw), data, topology)
        return runs[label]

    if n := 3 if q else args.days:
        go(f"steady, 1 reading/s in messages of {args.batch}, {n} days", 1.0, ["steady"] * n,
           batch=args.batch, single_below=0.0, hours_per_day=2.0 if q else 24.0,
           trace_memory=not args.days_untraced)
    if args.only_days:
        args.out.mkdir(parents=True, exist_ok=True)
        name = next(iter(runs))
        store_days(args.out, name, runs[name], time.perf_counter() - started)
        (args.out / "LONGEVITY-DAYS.md").write_text("\n".join(day_table(name, runs[name])))
        print(f"report: {args.out / 'LONGEVITY-DAYS.md'}")
        return 0
    if h := 0.5 if q else args.single_hours:
        go(f"steady, 1 reading/s, one reading per message, {h:g} h", 1.0, ["steady"],
           trace_memory=False, hours_per_day=h)
    n, h = (2, 0.25) if q else (args.fast_days, args.fast_hours)
    go(f"steady, 100 readings/s in messages of {args.batch}, {n} windows of {h:g} h", 100.0,
       ["steady"] * n, batch=args.batch, trace_memory=args.trace_fast, hours_per_day=h)

    def sweep_of(values: str, key: str, what: str, make) -> list[dict]:
        rows = []
        for x in [float(v) for v in values.split(",") if v.strip()]:
            print(what.format(x), flush=True)
            rows.append({**summary(run_days(make(x), data, topology), skip_first=False), key: x})
        return rows

    sweep_hours = 0.25 if q else args.sweep_hours
    sweep = sweep_of(args.intervals, "interval", "sweep: checkpoint_interval_s {:g}",
                     lambda x: LongevityRun(100.0, ["steady"], checkpoint_interval_s=x,
                                            batch=args.batch, trace_memory=False,
                                            real_fsync=real, hours_per_day=sweep_hours))
    gaps = sweep_of(args.gaps, "gap", "gap sweep: a message of 64 readings every {:g} s",
                    lambda x: LongevityRun(64.0 / x, ["steady"], batch=64, single_below=0.0,
                                           trace_memory=False, real_fsync=real,
                                           hours_per_day=0.25 if q else args.gap_hours))
    ctx, fault_h = (0.25, 1.0) if q else (args.context_hours, 24.0)
    for rate in (1.0, 100.0):
        for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
            hours = [ctx, fault_h, ctx]
            if rate > 1 and case in ("outage-local", "reject") and not q:
                hours[1] = args.local_outage_hours if case == "outage-local" else args.reject_hours
            fault = "outage" if case.startswith("outage") else case
            go(f"{FAULT_NAMES[case]}, {rate:g} readings/s", rate, ["steady", fault, "steady"],
               batch=args.batch, single_below=0.0, trace_memory=rate <= 1 or args.trace_fast,
               local_source=case == "outage-local", hours=hours)
    meta = {
        "argv": argv if argv is not None else sys.argv[1:], "sweep_rate": 100.0,
        "sweep_hours": sweep_hours, "checkpoint_interval_s_default": CHECKPOINT_INTERVAL_S,
        "idle_checkpoint_gap_s": IDLE_CHECKPOINT_GAP_S, "wall_s": time.perf_counter() - started,
        "python": platform.python_version(), "numpy": np.__version__,
        "machine": platform.machine(), "cpus": os.cpu_count(),
    }
    checks, rec, notes = judge(runs, sweep)
    results = {"gaps": gaps, "meta": meta, "days": {k: [d.as_dict() for d in v] for k, v in
               runs.items()}, "sweep": sweep, "_days": runs, "checks": checks,
               "recommendation": rec, "notes": notes}
    print(f"report: {write_report(results, args.out)}")
    for c in checks:
        print(f"  {'pass' if c['ok'] else 'FAIL'}: {c['check']}: {c['measured']}")
    return 0
