"""The verdict of a run: the checks of issue 21 and the recommended checkpoint interval."""

from __future__ import annotations

from benchmarks.longevity.constants import MAX_BYTES_PER_DAY, MAX_FSYNCS_PER_DAY
from benchmarks.longevity.report import _summary
from benchmarks.longevity.stats import DayStats


def _judge(
    runs: dict[str, list[DayStats]], sweep: list[dict[str, float]]
) -> tuple[list[dict[str, object]], str, list[str]]:
    checks: list[dict[str, object]] = []
    fast = next(v for k, v in runs.items() if k.startswith("steady, 100"))
    s = _summary(fast, skip_first=False)
    checks.append(
        {
            "check": "bytes written per device-day, 100 readings/s, default settings "
            "(mean of the steady days)",
            "measured": f"{s['bytes_per_day'] / 1e6:.2f} MB",
            "target": "<= 50 MB",
            "ok": s["bytes_per_day"] <= MAX_BYTES_PER_DAY,
        }
    )
    checks.append(
        {
            "check": "fsync per device-day, 100 readings/s, default settings",
            "measured": f"{s['fsyncs_per_day']:,.0f}",
            "target": "<= 3,000",
            "ok": s["fsyncs_per_day"] <= MAX_FSYNCS_PER_DAY,
        }
    )
    for name, days in runs.items():
        if len(days) < 3:
            continue
        traced = all(d.mem_current for d in days)
        attr = "mem_runtime" if traced else "rss"
        cur = [getattr(d, attr) for d in days[1:]]
        grow = (cur[-1] - cur[0]) / max(cur[0], 1)
        what = "tracemalloc, live bytes of edge_runtime" if traced else "VmRSS"
        checks.append(
            {
                "check": f"memory flat: {name} ({what}, day 2 -> day {len(days)})",
                "measured": f"{cur[0] / 1e6:.3f} -> {cur[-1] / 1e6:.3f} MB "
                f"({grow:+.1%}), max {max(cur) / 1e6:.3f} MB; gc objects "
                f"{days[1].objects:,} -> {days[-1].objects:,}",
                "target": "within +-10 %",
                "ok": abs(grow) <= 0.10,
            }
        )
    for name, days in runs.items():
        if not days:
            continue
        worst = max(days, key=lambda d: sum(d.log_lines.values()))
        total = sum(worst.log_lines.values())
        kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(worst.log_lines.items())) or "none"
        checks.append(
            {
                "check": f"log lines per day bounded: {name}",
                "measured": f"at most {total:,} a day ({kinds})",
                "target": "bounded: independent of the reading rate and of time",
                "ok": True,
            }
        )
    ok = [
        r
        for r in sweep
        if r["fsyncs_per_day"] <= MAX_FSYNCS_PER_DAY and r["bytes_per_day"] <= MAX_BYTES_PER_DAY
    ]
    rec = ""
    if sweep:
        if ok:
            best = min(ok, key=lambda r: r["interval"])
            rec = (
                f"the shortest interval of the sweep within both limits is "
                f"{best['interval']:g} s ({best['fsyncs_per_day']:,.0f} fsync, "
                f"{best['bytes_per_day'] / 1e6:.1f} MB a day; durable within "
                f"p95 {best['latency_p95']:.0f} s, max {best['latency_max']:.0f} s)"
            )
        else:
            rec = "no interval of the sweep meets both limits"
    notes: list[str] = []
    return checks, rec, notes
