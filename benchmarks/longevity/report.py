"""The report: ``LONGEVITY.md``, ``longevity.json`` and ``longevity.png``."""

from __future__ import annotations

import math
import os
import platform
from pathlib import Path

import numpy as np

from benchmarks.longevity.constants import MAX_BYTES_PER_DAY, MAX_FSYNCS_PER_DAY
from benchmarks.longevity.stats import DayStats
from benchmarks.reporting import Check, checks_table, figure, prose, save_figure, table
from benchmarks.schema import environment, read_result, revive, write_result


def _summary(days: list[DayStats], skip_first: bool = True) -> dict[str, float]:
    """Per-day means (and maxima) over the steady days (the first day warms up)."""
    steady = [d for d in days if d.case == "steady"]
    if skip_first and len(steady) > 1:
        steady = steady[1:]
    if not steady:
        return {}
    return {
        "fsyncs_per_day": float(np.mean([d.fsyncs for d in steady])),
        "bytes_per_day": float(np.mean([d.bytes_written for d in steady])),
        "proc_bytes_per_day": float(np.mean([d.proc_write_bytes or 0 for d in steady])),
        "checkpoints_per_day": float(np.mean([d.checkpoints for d in steady])),
        "state_bytes": float(max(d.state_bytes for d in steady)),
        "latency_p50": float(np.median([d.latency_p50 for d in steady])),
        "latency_p95": float(np.median([d.latency_p95 for d in steady])),
        "latency_max": float(max(d.latency_max for d in steady)),
        "log_lines_per_day": float(max(sum(d.log_lines.values()) for d in steady)),
    }


def _mb(x: float) -> str:
    return f"{x / 1e6:.2f}"


def _day_table(title: str, days: list[DayStats]) -> list[str]:
    header = [
        "day", "case", "readings", "rejected", "checkpoints", "fsync", "MB written",
        "/proc write MB", "state on disk (bytes)", "leaf snapshots", "aggregator snapshots",
        "confirmations", "status docs", "log lines (by kind)", "tracemalloc current / peak (MB)",
        "edge_runtime live (MB)", "VmRSS (MB)", "gc objects",
        "durable latency p50 / p95 / max (s)", "not durable at day end",
    ]  # fmt: skip
    rows = []
    for d in days:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(d.log_lines.items())) or "0"
        proc = "n/a" if d.proc_write_bytes is None else _mb(d.proc_write_bytes)
        lat = (
            "-"
            if math.isnan(d.latency_p50)
            else f"{d.latency_p50:.1f} / {d.latency_p95:.1f} / {d.latency_max:.1f}"
        )
        rows.append([
            d.day, d.case, f"{d.readings:,}", f"{d.rejected:,}", f"{d.checkpoints:,}",
            f"{d.fsyncs:,}", _mb(d.bytes_written), proc, f"{d.state_bytes:,}",
            f"{d.leaf_snapshots:,}", f"{d.aggregator_snapshots:,}", f"{d.confirmations:,}",
            f"{d.status_documents:,}", f"{sum(d.log_lines.values())} ({kinds})",
            f"{_mb(d.mem_current)} / {_mb(d.mem_peak)}", _mb(d.mem_runtime), _mb(d.rss),
            f"{d.objects:,}", lat, f"{d.durable_lag_end:,}",
        ])  # fmt: skip
    lines = [f"#### {title}", "", table(header, rows, "rlrrrrrrrrrrrllllrlr")]
    lines.append("")
    return lines


def _flat(days: list[DayStats], attr: str) -> str:
    vals = [getattr(d, attr) for d in days[1:]] or [getattr(d, attr) for d in days]
    lo, hi = min(vals), max(vals)
    return f"{lo / 1e6:.3f}-{hi / 1e6:.3f} MB"


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
    run, stats = days["parameters"]["run"], revive(list[DayStats], days["rows"]["days"])
    text = "\n".join(_day_table(run, stats))
    (folder / "LONGEVITY-DAYS.md").write_text(text)


def store_days(out: Path, run: str, days: list[DayStats], wall_s: float) -> None:
    """Write ``out/longevity-days.json`` (the result schema) of a ``--only-days`` run."""
    write_result(
        out / "longevity-days.json", "longevity", {"run": run, "only_days": True},
        {"days": [d.as_dict() for d in days]}, {}, {**environment(), "wall_s": wall_s},
    )  # fmt: skip


def write_report(results: dict[str, object], out: Path) -> Path:
    """Store ``results`` as ``out/longevity.json`` (the result schema: ``meta`` as parameters,
    days, sweep, gaps and checks as rows) and write ``LONGEVITY.md`` and ``longevity.png``."""
    meta: dict[str, object] = results["meta"]  # type: ignore[assignment]
    rows = {k: results.get(k, []) for k in ("days", "sweep", "gaps", "checks")}
    rows["judgement"] = {k: results.get(k) for k in ("recommendation", "notes")}
    env = {**environment(), "wall_s": meta["wall_s"]}
    write_result(out / "longevity.json", "longevity", meta, rows, {}, env)
    return _write_markdown(results, out)


def _write_markdown(results: dict[str, object], out: Path) -> Path:
    runs: dict[str, list[DayStats]] = results["_days"]  # type: ignore[assignment]
    sweep: list[dict[str, float]] = results["sweep"]  # type: ignore[assignment]
    meta: dict[str, object] = results["meta"]  # type: ignore[assignment]
    argv = " ".join(str(a) for a in meta["argv"])  # type: ignore[union-attr]
    md = prose("longevity", "intro", argv=argv)
    checks = results.get("checks", [])
    if checks:
        found = [
            Check(c["check"], c["measured"], c["target"], bool(c["ok"]))
            for c in checks  # type: ignore[union-attr]
        ]
        md += ["## Done when (issue 21)", "", checks_table(found, item="check"), ""]
    if sweep:
        md += prose(
            "longevity", "sweep", rate=meta["sweep_rate"], hours=meta["sweep_hours"],
            table=table(
                [
                    "checkpoint_interval_s", "checkpoints/day", "fsync/day", "MB written/day",
                    "/proc write_bytes MB/day", "checkpoint file (bytes)", "latency p50 (s)",
                    "p95 (s)", "max (s)", "readings a publisher holds at p95 (per leaf)",
                ],
                [
                    [
                        f"{row['interval']:g}", f"{row['checkpoints_per_day']:,.0f}",
                        f"{row['fsyncs_per_day']:,.0f}", _mb(row["bytes_per_day"]),
                        _mb(row["proc_bytes_per_day"]), f"{row['state_bytes']:,.0f}",
                        f"{row['latency_p50']:.1f}", f"{row['latency_p95']:.1f}",
                        f"{row['latency_max']:.1f}",
                        f"{row['latency_p95'] * meta['sweep_rate']:,.0f}",  # type: ignore[operator]
                    ]
                    for row in sweep
                ],
                "r" * 10,
            ),
        )  # fmt: skip
        gaps: list[dict[str, float]] = results.get("gaps", [])  # type: ignore[assignment]
        if gaps:
            md += prose(
                "longevity", "gaps", interval=meta["checkpoint_interval_s_default"],
                idle=meta["idle_checkpoint_gap_s"],
                table=table(
                    [
                        "gap (s)", "readings/s", "checkpoints/day", "fsync/day", "MB written/day",
                        "latency p50 / p95 / max (s)", "within 3,000 fsync",
                    ],
                    [
                        [
                            f"{row['gap']:g}", f"{64 / row['gap']:.2f}",
                            f"{row['checkpoints_per_day']:,.0f}", f"{row['fsyncs_per_day']:,.0f}",
                            _mb(row["bytes_per_day"]),
                            f"{row['latency_p50']:.1f} / {row['latency_p95']:.1f} / "
                            f"{row['latency_max']:.1f}",
                            "yes" if row["fsyncs_per_day"] <= MAX_FSYNCS_PER_DAY else "**no**",
                        ]
                        for row in gaps
                    ],
                    "rrrrrll",
                ),
            )  # fmt: skip
        rec = results.get("recommendation")
        if rec:
            md += [f"**Recommendation.** {rec}", ""]
    md += ["## Per day", ""]
    for name, days in runs.items():
        md += _day_table(name, days)
        if len(days) > 2 and all(d.mem_current for d in days):
            md += [
                f"Memory over days 2-{len(days)}: tracemalloc current "
                f"{_flat(days, 'mem_current')}, peak {_flat(days, 'mem_peak')}.",
                "",
            ]
    for note in results.get("notes", []):  # type: ignore[union-attr]
        md += [note, ""]
    md += [
        "## Environment",
        "",
        f"Python {meta.get('python', platform.python_version())}, numpy "
        f"{meta.get('numpy', np.__version__)}, {meta.get('machine', platform.machine())}, "
        f"{meta.get('cpus', os.cpu_count())} CPUs; run took {meta['wall_s']:.0f} s.",
        "",
    ]
    path = out / "LONGEVITY.md"
    path.write_text("\n".join(md))
    _plot(runs, sweep, out)
    return path


def _plot(runs: dict[str, list[DayStats]], sweep: list[dict[str, float]], out: Path) -> None:
    try:
        fig, axes = figure(1, 3, figsize=(15, 4))
    except ImportError:
        return
    for name, days in runs.items():
        if len(days) < 3 or not all(d.mem_current for d in days):
            continue
        x = [d.day for d in days]
        axes[0].plot(x, [d.mem_current / 1e6 for d in days], marker=".", label=f"{name} current")
        axes[0].plot(x, [d.mem_peak / 1e6 for d in days], ls="--", label=f"{name} peak")
    axes[0].set(xlabel="simulated day", ylabel="tracemalloc (MB)", title="memory per day")
    axes[0].legend(fontsize=6)
    if sweep:
        xs = [r["interval"] for r in sweep]
        axes[1].plot(xs, [r["fsyncs_per_day"] for r in sweep], marker="o", label="fsync/day")
        axes[1].plot(
            xs, [r["bytes_per_day"] / 1e4 for r in sweep], marker="s", label="bytes/day / 1e4"
        )
        axes[1].axhline(MAX_FSYNCS_PER_DAY, color="r", ls=":", label="3,000 fsync")
        axes[1].axhline(MAX_BYTES_PER_DAY / 1e4, color="m", ls=":", label="50 MB")
        axes[1].set(
            xscale="log",
            yscale="log",
            xlabel="checkpoint_interval_s",
            title="SD-card wear per device-day",
        )
        axes[1].legend(fontsize=7)
        axes[2].plot(xs, [r["latency_p50"] for r in sweep], marker="o", label="p50")
        axes[2].plot(xs, [r["latency_p95"] for r in sweep], marker="o", label="p95")
        axes[2].plot(xs, [r["latency_max"] for r in sweep], marker="o", label="max")
        axes[2].set(
            xscale="log",
            yscale="log",
            xlabel="checkpoint_interval_s",
            ylabel="s",
            title="reading -> confirmed durable",
        )
        axes[2].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, out / "longevity.png", dpi=90)
