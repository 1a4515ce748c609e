"""``fleet.png`` of section (g), from the sweep: agent messages per reading and payload / raw
bytes against k (dotted: issue 9's targets), and wall time against k beside a linear line."""

from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import NullFormatter

from benchmarks.fleet.report_section import MAX_MESSAGES_PER_READING, MAX_SWEEP_PAYLOAD, PLOT
from benchmarks.fleet.scaling import SweepResult
from benchmarks.reporting import figure, plain_log_axis, save_figure

__all__ = ["write_plot"]


def write_plot(sweep: SweepResult | None, out_dir: Path) -> list[Path]:
    """Draw ``fleet.png`` from the sweep (nothing without one); returns the paths written."""
    rows = [r for r in (sweep.rows if sweep else []) if r.medians.get("wall_s") is not None]
    if sweep is None or not rows:
        return []
    k = [r.n_leaves for r in rows]
    fig, axes = figure(1, 2, figsize=(11, 4.2))
    for key, style, label, target in (
        ("messages_per_reading", "o-", "agent messages / reading", MAX_MESSAGES_PER_READING),
        ("payload_ratio", "s-", "payload / raw bytes", MAX_SWEEP_PAYLOAD),
    ):
        if pts := [(r.n_leaves, r.medians[key]) for r in rows if r.medians.get(key) is not None]:
            line = axes[0].plot(*zip(*pts, strict=True), style, label=label)[0]
            axes[0].axhline(target, color=line.get_color(), linestyle=":", linewidth=1.0)
    axes[0].set(yscale="log", ylabel="per reading / per raw byte (dotted: targets)")
    axes[0].set_title("Traffic per reading")
    wall = [r.medians["wall_s"] for r in rows]
    axes[1].plot(k, wall, "o-", label="wall s (median)")
    axes[1].plot(k, [wall[0] * x / k[0] for x in k], ":", color="gray", label="linear in k")
    axes[1].set(yscale="log", ylabel="seconds")
    axes[1].set_title(f"Wall time, {sweep.readings_per_leaf} readings per leaf")
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
