"""The report: ``LONGEVITY.md``, ``longevity.json`` and ``longevity.png``; ``LONGEVITY-DAYS.md``
and ``longevity-days.json`` of a ``--only-days`` run."""

from __future__ import annotations

import math
import os
import platform
from pathlib import Path

import numpy as np

from benchmarks.longevity.stats import DayStats
from benchmarks.reporting import Check, checks_table, figure, prose, save_figure, table
from benchmarks.schema import environment, read_result, revive, write_result

# Done-when of issue 21 per device-day at 100 readings/s, default settings
MAX_BYTES_PER_DAY = 50e6
MAX_FSYNCS_PER_DAY = 3000


def _mb(x: float) -> str:
    return f"{x / 1e6:.2f}"


def summary(days: list[DayStats], skip_first: bool = True) -> dict[str, float]:
    """Per-day means (and maxima) over the steady days (the first day warms up)."""
    steady = [d for d in days if d.case == "steady"]
    steady = steady[1:] if skip_first and len(steady) > 1 else steady
    if not steady:
        return {}

    def mean(f) -> float:
        return float(np.mean([f(d) for d in steady]))

    return {
        "fsyncs_per_day": mean(lambda d: d.fsyncs),
        "bytes_per_day": mean(lambda d: d.bytes_written),
        "proc_bytes_per_day": mean(lambda d: d.proc_write_bytes or 0),
        "checkpoints_per_day": mean(lambda d: d.checkpoints),
        "state_bytes": float(max(d.state_bytes for d in steady)),
        "latency_p50": float(np.median([d.latency_p50 for d in steady])),
        "latency_p95": float(np.median([d.latency_p95 for d in steady])),
        "latency_max": float(max(d.latency_max for d in steady)),
        "log_lines_per_day": float(max(sum(d.log_lines.values()) for d in steady)),
    }


def _lines(d: DayStats) -> str:
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(d.log_lines.items())) or "0"
    return f"{sum(d.log_lines.values())} ({kinds})"


def _latency(d: DayStats) -> str:
    if math.isnan(d.latency_p50):
        return "-"
    return f"{d.latency_p50:.1f} / {d.latency_p95:.1f} / {d.latency_max:.1f}"


#: The per-day table: (header, cell of a day).
DAY_COLUMNS = (
    ("day", lambda d: d.day), ("case", lambda d: d.case),
    ("readings", lambda d: f"{d.readings:,}"), ("rejected", lambda d: f"{d.rejected:,}"),
    ("checkpoints", lambda d: f"{d.checkpoints:,}"), ("fsync", lambda d: f"{d.fsyncs:,}"),
    ("MB written", lambda d: _mb(d.bytes_written)),
    ("/proc write MB", lambda d: "n/a" if d.proc_write_bytes is None else _mb(d.proc_write_bytes)),
    ("state on disk (bytes)", lambda d: f"{d.state_bytes:,}"),
    ("leaf snapshots", lambda d: f"{d.leaf_snapshots:,}"),
    ("aggregator snapshots", lambda d: f"{d.aggregator_snapshots:,}"),
    ("confirmations", lambda d: f"{d.confirmations:,}"),
    ("status docs", lambda d: f"{d.status_documents:,}"), ("log lines (by kind)", _lines),
    ("tracemalloc current / peak (MB)", lambda d: f"{_mb(d.mem_current)} / {_mb(d.mem_peak)}"),
    ("edge_runtime live (MB)", lambda d: _mb(d.mem_runtime)), ("VmRSS (MB)", lambda d: _mb(d.rss)),
    ("gc objects", lambda d: f"{d.objects:,}"),
    ("durable latency p50 / p95 / max (s)", _latency),
    ("not durable at day end", lambda d: f"{d.durable_lag_end:,}"),
)

SWEEP_COLUMNS = (
    ("checkpoint_interval_s", lambda r, m: f"{r['interval']:g}"),
    ("checkpoints/day", lambda r, m: f"{r['checkpoints_per_day']:,.0f}"),
    ("fsync/day", lambda r, m: f"{r['fsyncs_per_day']:,.0f}"),
    ("MB written/day", lambda r, m: _mb(r["bytes_per_day"])),
    ("/proc write_bytes MB/day", lambda r, m: _mb(r["proc_bytes_per_day"])),
    ("checkpoint file (bytes)", lambda r, m: f"{r['state_bytes']:,.0f}"),
    ("latency p50 (s)", lambda r, m: f"{r['latency_p50']:.1f}"),
    ("p95 (s)", lambda r, m: f"{r['latency_p95']:.1f}"),
    ("max (s)", lambda r, m: f"{r['latency_max']:.1f}"),
    ("readings a publisher holds at p95 (per leaf)",
     lambda r, m: f"{r['latency_p95'] * m['sweep_rate']:,.0f}"),
)

GAP_COLUMNS = (
    ("gap (s)", lambda r: f"{r['gap']:g}"), ("readings/s", lambda r: f"{64 / r['gap']:.2f}"),
    ("checkpoints/day", lambda r: f"{r['checkpoints_per_day']:,.0f}"),
    ("fsync/day", lambda r: f"{r['fsyncs_per_day']:,.0f}"),
    ("MB written/day", lambda r: _mb(r["bytes_per_day"])),
    ("latency p50 / p95 / max (s)",
     lambda r: f"{r['latency_p50']:.1f} / {r['latency_p95']:.1f} / {r['latency_max']:.1f}"),
    ("within 3,000 fsync",
     lambda r: "yes" if r["fsyncs_per_day"] <= MAX_FSYNCS_PER_DAY else "**no**"),
)


DAY_ALIGN = "rlrrrrrrrrrrrllllrlr"


def day_table(title: str, days: list[DayStats]) -> list[str]:
    rows = [[cell(d) for _, cell in DAY_COLUMNS] for d in days]
    return [f"#### {title}", "", table([h for h, _ in DAY_COLUMNS], rows, DAY_ALIGN), ""]


def _flat(days: list[DayStats], attr: str) -> str:
    vals = [getattr(d, attr) for d in days[1:]] or [getattr(d, attr) for d in days]
    return f"{min(vals) / 1e6:.3f}-{max(vals) / 1e6:.3f} MB"


def render(out: Path) -> None:
    """Rewrite ``out/longevity/LONGEVITY.md``, ``longevity.png`` and ``LONGEVITY-DAYS.md`` from
    the ``longevity.json`` and ``longevity-days.json`` stored there, measuring nothing."""
    folder = out / "longevity"
    doc = read_result(folder / "longevity.json", "longevity")
    rows = dict(doc["rows"])
    judgement = rows.pop("judgement")
    results = {"meta": doc["parameters"], **rows, **judgement}
    results["_days"] = {name: revive(list[DayStats], days) for name, days in rows["days"].items()}
    _write_markdown(results, folder)
    days = read_result(folder / "longevity-days.json", "longevity")
    text = day_table(days["parameters"]["run"], revive(list[DayStats], days["rows"]["days"]))
    (folder / "LONGEVITY-DAYS.md").write_text("\n".join(text))


def store_days(out: Path, run: str, days: list[DayStats], wall_s: float) -> None:
    """Write ``out/longevity-days.json`` (the result schema) of a ``--only-days`` run."""
    write_result(
        out / "longevity-days.json", "longevity", {"run": run, "only_days": True},
        {"days": [d.as_dict() for d in days]}, {}, {**environment(), "wall_s": wall_s},
    )


def write_report(results: dict, out: Path) -> Path:
    """Store ``results`` as ``out/longevity.json`` (``meta`` as parameters; days, sweep, gaps,
    checks and the judgement as rows) and write ``LONGEVITY.md`` and ``longevity.png``."""
    rows = {k: results.get(k, []) for k in ("days", "sweep", "gaps", "checks")}
    rows["judgement"] = {k: results.get(k) for k in ("recommendation", "notes")}
    env = {**environment(), "wall_s": results["meta"]["wall_s"]}
    write_result(out / "longevity.json", "longevity", results["meta"], rows, {}, env)
    return _write_markdown(results, out)


def _write_markdown(results: dict, out: Path) -> Path:
    runs: dict[str, list[DayStats]] = results["_days"]
    sweep, meta, gaps = results["sweep"], results["meta"], results.get("gaps", [])
    md = prose("longevity", "intro", argv=" ".join(str(a) for a in meta["argv"]))
    if results.get("checks"):
        found = [Check(c["check"], c["measured"], c["target"], bool(c["ok"]))
                 for c in results["checks"]]
        md += ["## Done when (issue 21)", "", checks_table(found, item="check"), ""]
    if sweep:
        rows = [[cell(r, meta) for _, cell in SWEEP_COLUMNS] for r in sweep]
        md += prose("longevity", "sweep", rate=meta["sweep_rate"], hours=meta["sweep_hours"],
                    table=table([h for h, _ in SWEEP_COLUMNS], rows, "r" * 10))
        if gaps:
            rows = [[cell(r) for _, cell in GAP_COLUMNS] for r in gaps]
            md += prose(
                "longevity", "gaps", interval=meta["checkpoint_interval_s_default"],
                idle=meta["idle_checkpoint_gap_s"],
                table=table([h for h, _ in GAP_COLUMNS], rows, "rrrrrll"),
            )
        if results.get("recommendation"):
            md += [f"**Recommendation.** {results['recommendation']}", ""]
    md += ["## Per day", ""]
    for name, days in runs.items():
        md += day_table(name, days)
        if len(days) > 2 and all(d.mem_current for d in days):
            md += [f"Memory over days 2-{len(days)}: tracemalloc current "
                   f"{_flat(days, 'mem_current')}, peak {_flat(days, 'mem_peak')}.", ""]
    for note in results.get("notes", []):
        md += [note, ""]
    md += ["## Environment", "",
           f"Python {meta.get('python', platform.python_version())}, numpy "
           f"{meta.get('numpy', np.__version__)}, {meta.get('machine', platform.machine())}, "
           f"{meta.get('cpus', os.cpu_count())} CPUs; run took {meta['wall_s']:.0f} s.",
           ""]
    path = out / "LONGEVITY.md"
    path.write_text("\n".join(md))
    _plot(runs, sweep, out)
    return path


def _plot(runs: dict[str, list[DayStats]], sweep: list[dict], out: Path) -> None:
    fig, axes = figure(1, 3, figsize=(15, 4))
    for name, days in runs.items():
        if len(days) >= 3 and all(d.mem_current for d in days):
            x = [d.day for d in days]
            axes[0].plot(x, [d.mem_current / 1e6 for d in days], marker=".",
                         label=f"{name} current")
            axes[0].plot(x, [d.mem_peak / 1e6 for d in days], ls="--", label=f"{name} peak")
    axes[0].set(xlabel="simulated day", ylabel="tracemalloc (MB)", title="memory per day")
    axes[0].legend(fontsize=6)
    if sweep:
        xs = [r["interval"] for r in sweep]
        axes[1].plot(xs, [r["fsyncs_per_day"] for r in sweep], marker="o", label="fsync/day")
        axes[1].plot(xs, [r["bytes_per_day"] / 1e4 for r in sweep], marker="s",
                     label="bytes/day / 1e4")
        axes[1].axhline(MAX_FSYNCS_PER_DAY, color="r", ls=":", label="3,000 fsync")
        axes[1].axhline(MAX_BYTES_PER_DAY / 1e4, color="m", ls=":", label="50 MB")
        axes[1].set(xscale="log", yscale="log", xlabel="checkpoint_interval_s",
                    title="SD-card wear per device-day")
        axes[1].legend(fontsize=7)
        for key in ("p50", "p95", "max"):
            axes[2].plot(xs, [r[f"latency_{key}"] for r in sweep], marker="o", label=key)
        axes[2].set(xscale="log", yscale="log", xlabel="checkpoint_interval_s", ylabel="s",
                    title="reading -> confirmed durable")
        axes[2].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, out / "longevity.png", dpi=90)
