"""The plot of section (g), ``fleet.png``, from the sweep: agent messages per reading and
payload / raw bytes against the fleet size k (dotted: issue 9's targets), and wall time
against k beside a line linear in k."""

from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import NullFormatter

from benchmarks.fleet.report_section import MAX_MESSAGES_PER_READING, MAX_SWEEP_PAYLOAD, PLOT
from benchmarks.fleet.scaling import SweepResult
from benchmarks.reporting import figure, plain_log_axis, save_figure

__all__ = ["write_plot"]


def write_plot(sweep: SweepResult | None, out_dir: Path) -> list[Path]:
    """Draw ``fleet.png`` from the sweep (nothing without one); returns the paths written."""
    if sweep is None:
        return []
    rows = [r for r in sweep.rows if r.medians.get("wall_s") is not None]
    if not rows:
        return []
    k = [r.n_leaves for r in rows]
    fig, axes = figure(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    for key, style, label, target in (
        ("messages_per_reading", "o-", "agent messages / reading", MAX_MESSAGES_PER_READING),
        ("payload_ratio", "s-", "payload / raw bytes", MAX_SWEEP_PAYLOAD),
    ):
        pts = [(r.n_leaves, r.medians[key]) for r in rows if r.medians.get(key) is not None]
        if not pts:
            continue
        line = ax.plot(*zip(*pts, strict=True), style, label=label)[0]
        ax.axhline(target, color=line.get_color(), linestyle=":", linewidth=1.0)
    ax.set_yscale("log")
    ax.set_ylabel("per reading / per raw byte (dotted: targets)")
    ax.set_title("Traffic per reading")
    ax = axes[1]
    wall = [r.medians["wall_s"] for r in rows]
    ax.plot(k, wall, "o-", label="wall s (median)")
    ax.plot(k, [wall[0] * x / k[0] for x in k], ":", color="gray", label="linear in k")
    ax.set_yscale("log")
    ax.set_ylabel("seconds")
    ax.set_title(f"Wall time, {sweep.readings_per_leaf} readings per leaf")
    for ax in axes:
        plain_log_axis(ax.yaxis)
        ax.set_xscale("log", base=2)
        ax.set_xticks(k, [str(v) for v in k])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("leaves k (one edge-runtime run)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Fleet sweep: edge-runtime run, depth 2, fan-out ceil(sqrt(k))")
    return [save_figure(fig, out_dir / PLOT, tight=True)]
