"""The PNG plots of ``REPORT.md``: (a)-(e) drawn here, the others by their sections' modules,
on `benchmarks.reporting.figure` (the Agg canvas)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from matplotlib import colormaps
from matplotlib.ticker import FuncFormatter, NullFormatter

from benchmarks.accuracy import FPCA, Trajectory
from benchmarks.anomaly import report_section as anomaly_report
from benchmarks.fedpower import report_section as fedpower_report
from benchmarks.fleet import plot as fleet_plot
from benchmarks.privacy import plot as privacy_plot
from benchmarks.report import MAX_RATIO
from benchmarks.reporting import figure, plain_log_axis, save_figure
from benchmarks.results import Results

__all__ = ["write_plots"]

_FLOOR = 1e-7  # error ratio - 1 below this is drawn at the floor (log axis)


def _plot_trajectories(ax: Any, trajs: dict[str, Trajectory], title: str) -> None:
    """One curve per method (a colour per position in ``trajs``), centred ratios dotted;
    identical curves drawn once, labelled "A = B"."""
    colours = colormaps["tab10"].colors
    curves: dict[tuple[float, ...], tuple[list[str], int, Trajectory]] = {}
    for i, t in enumerate(trajs.values()):
        key = tuple(t.ratios)
        if key in curves:
            curves[key][0].append(t.name)
        else:
            curves[key] = ([t.name], i, t)
    for names, i, t in curves.values():
        colour = colours[i % len(colours)]
        y = [max(v - 1.0, _FLOOR) for v in t.ratios]
        style = "-" if t.name.startswith("FPCA") else "--"
        width = 2.0 if t.name == FPCA else 1.2
        ax.plot(t.samples, y, style, color=colour, label=" = ".join(names), linewidth=width)
        if t.ratios_centred:
            yc = [max(v - 1.0, _FLOOR) for v in t.ratios_centred]
            ax.plot(t.samples, yc, ":", color=colour, label=f"{t.name} (centred)", linewidth=1.2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(_ratio_label))
    ax.set(title=title, xlabel="samples seen", ylabel="error ratio (log scale of ratio - 1)")
    ax.grid(True, which="major", alpha=0.3)


def _ratio_label(y: float, _pos: object = None) -> str:
    """Tick label of ``ratio - 1 = y`` as the ratio itself: 1e-3 -> "1.001", 10 -> "11"."""
    if y <= 0:
        return ""
    k = round(math.log10(y))
    if abs(math.log10(y) - k) > 1e-9:
        return ""  # minor positions: unlabelled
    return "1." + "0" * (-k - 1) + "1" if k < 0 else f"{1 + 10**k:g}"


def write_plots(res: Results, out_dir: Path) -> list[Path]:
    """Write the PNG plots for ``res`` into ``out_dir``; returns their paths."""
    paths: list[Path] = []

    def save(fig: Any, name: str) -> None:
        paths.append(save_figure(fig, out_dir / name, tight=True))

    if res.motes:
        fig, ax = figure(figsize=(8, 5))
        _plot_trajectories(ax, res.motes, f"Motes light (d=48), rank {res.rank}")
        ax.axhline(MAX_RATIO - 1.0, color="k", linewidth=0.8, linestyle="-.", label="1.01 bound")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        save(fig, "accuracy_motes.png")
    if res.synth:
        alphas = list(res.synth)
        nrow = math.ceil(len(alphas) / 3)
        fig, axes = figure(nrow, 3, figsize=(14, 4 * nrow), squeeze=False)
        for ax, a in zip(axes.flat, alphas, strict=False):
            _plot_trajectories(ax, res.synth[a], f"Synth(alpha={a:g})")
        for ax in list(axes.flat)[len(alphas) :]:
            ax.set_visible(False)
        legend: dict[str, Any] = {}
        for ax in axes.flat:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                legend.setdefault(label, handle)
        fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=4, fontsize=8)
        legend_inches = 0.3 + 0.2 * math.ceil(len(legend) / 4)
        fig.tight_layout(rect=(0, legend_inches / fig.get_figheight(), 1, 1))
        save(fig, "accuracy_synth.png")
    if res.throughput:
        fig, ax = figure(figsize=(12, 4.5))
        shown = [r for r in res.throughput if r.fpca is not None or r.ipca is not None]
        xs = range(len(shown))
        ax.bar([x - 0.2 for x in xs], [r.fpca or 0.0 for r in shown], 0.4, label="FPCA-Edge")
        ax.bar([x + 0.2 for x in xs], [r.ipca or 0.0 for r in shown], 0.4, label="IncrementalPCA")
        for x, r in zip(xs, shown, strict=True):
            top = max(r.fpca or 0.0, r.ipca or 0.0)
            ax.text(x, top * 1.1, "n/a" if r.ratio is None else f"{r.ratio:.1f}x", ha="center")
        labels = [f"d={r.n_features}\nr={r.rank}\nb={r.block_size}" for r in shown]
        ax.set_xticks(list(xs), labels, fontsize=7)
        ax.set_yscale("log")
        plain_log_axis(ax.yaxis)
        ax.set_ylim(top=2.0 * max(max(r.fpca or 0.0, r.ipca or 0.0) for r in shown))
        ax.set_ylabel("samples/s (one BLAS thread)")
        ax.set_title("Ingest throughput (label: FPCA-Edge / IncrementalPCA)")
        ax.legend()
        save(fig, "throughput.png")
    if res.merge_sweep_d or res.merge_sweep_r:
        fig, axes = figure(1, 2, figsize=(11, 4.2))
        for ax, rows, key, label in (
            (axes[0], res.merge_sweep_d, "n_features", f"d (r = {res.merge_sweep_d[0].rank})"),
            (axes[1], res.merge_sweep_r, "rank", f"r (d = {res.merge_sweep_r[0].n_features})"),
        ):
            x = [getattr(m, key) for m in rows]
            ax.plot(x, [m.merge * 1e3 for m in rows], "o-", label="Alg. 2 (merge_subspaces)")
            ax.plot(x, [m.naive * 1e3 for m in rows], "s--", label="naive SVD of [U1 S1, U2 S2]")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            plain_log_axis(ax.yaxis)
            ax.set_xticks(x, [str(v) for v in x])
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set(xlabel=label, ylabel="ms per merge")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle("Merge time (one BLAS thread)")
        save(fig, "merge.png")
    if res.aggregator:
        rows = res.aggregator
        k = [r.n_children for r in rows]
        fig, axes = figure(1, 2, figsize=(11, 4.2))
        axes[0].plot(k, [r.update * 1e3 for r in rows], "o-", label="MergeTree.update (1 child)")
        axes[0].plot(k, [r.merge_many * 1e3 for r in rows], "s--", label="merge_many (all k)")
        axes[0].set_yscale("log")
        plain_log_axis(axes[0].yaxis)
        axes[0].set_ylabel("ms per arrival")
        axes[1].plot(k, [r.update_per_log2k * 1e3 for r in rows], "o-")
        axes[1].set_ylabel("update time / log2 k (ms)")
        axes[1].set_ylim(0, 1.3 * max(r.update_per_log2k * 1e3 for r in rows))
        for ax in axes:
            ax.set_xscale("log", base=2)
            ax.set_xlabel("children k")
            ax.grid(True, alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.suptitle("Aggregator update cost")
        save(fig, "aggregator.png")
    if res.memory:
        fig, ax = figure(figsize=(7, 4.2))
        n = [r.n_samples for r in res.memory]
        ax.plot(n, [r.fpca / 1024 for r in res.memory], "o-", label="FPCA-Edge")
        ipca = [(r.n_samples, r.ipca / 1024) for r in res.memory if r.ipca is not None]
        if ipca:
            ax.plot(*zip(*ipca, strict=True), "s--", label="IncrementalPCA")
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.set(xlabel="stream length (samples)", ylabel="peak allocated (KiB, tracemalloc)",
               title=f"Peak memory, d = 48, r = {res.rank}")  # fmt: skip
        ax.grid(True, alpha=0.3)
        ax.legend()
        save(fig, "memory.png")
    if res.private_mode is not None:
        plot = privacy_plot.write_plot(res.private_mode, out_dir)
        paths += [] if plot is None else [plot]
    paths += fleet_plot.write_plot(res.fleet_sweep, out_dir)
    paths += fedpower_report.write_plot(res.fedpower, out_dir)
    paths += anomaly_report.write_plot(res.anomaly, out_dir)
    return paths
