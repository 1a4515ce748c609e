"""The plot of section (f), ``privacy_utility.png``: the root error ratio on Motes light
against epsilon (log y, median and 25-75 % band per method) beside the noise of the k-th
release against the continual-release horizon H."""

from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from benchmarks.privacy import horizon as hz
from benchmarks.privacy import section as sec
from benchmarks.privacy.report_section import PLOT
from benchmarks.reporting import figure, save_figure

__all__ = ["write_plot"]


#: Colour and style of the plot's curves, by position in `section.CURVE_METHODS`.
_STYLES = (
    ("tab:blue", "o-"),
    ("tab:cyan", "v-"),
    ("tab:red", "s--"),
    ("tab:green", "^-"),
    ("k", "D:"),
    ("tab:gray", "--"),
)


def write_plot(p: sec.PrivacyResults, out_dir: Path) -> Path | None:
    """Write ``out_dir/privacy_utility.png`` (None if nothing to draw)."""
    if not p.curves:
        return None
    fig, (ax, bx) = figure(1, 2, figsize=(13, 4.8))
    eps = p.curve_epsilons
    for (colour, style), curve in zip(_STYLES, p.curves, strict=False):
        med = [s.median for s in curve.errors]
        ax.plot(eps, med, style, color=colour, label=curve.label, markersize=4, linewidth=1.5)
        ax.fill_between(
            eps,
            [s.p25 for s in curve.errors],
            [s.p75 for s in curve.errors],
            color=colour,
            alpha=0.15,
            linewidth=0,
        )
    ax.axhline(1.0, color="k", linewidth=0.8, label="no noise (offline SVD)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(eps, [f"{e:g}" for e in eps])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(f"epsilon (delta = {p.delta:g})")
    ax.set_ylabel("root error ratio (median, 25-75 % band)")
    n, d = p.motes_shape
    ax.set_title(
        f"Motes light {n} x {d}, {p.leaves} leaves, rank {p.rank}, C = {p.clip_norm:g}",
        fontsize=10,
    )
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="center right")
    ks = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    for h in p.horizons or hz.HORIZONS:
        default = h == sec.DEFAULT_HORIZON
        bx.plot(
            ks,
            [hz.noise_factor(h, k) for k in ks],
            marker="o",
            markersize=3,
            linewidth=2.4 if default else 1.2,
            label=f"H = {h}" + (" (runtime default)" if default else ""),
        )
    bx.set_xscale("log", base=2)
    bx.set_yscale("log")
    bx.set_xticks(ks, [str(k) for k in ks], fontsize=7)
    bx.xaxis.set_minor_formatter(NullFormatter())
    bx.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    bx.yaxis.set_minor_formatter(NullFormatter())
    bx.set_xlabel("release k")
    bx.set_ylabel("noise std / one release at H = 1")
    bx.set_title("Noise of the k-th release (continual release, horizon H)", fontsize=10)
    bx.grid(True, which="major", alpha=0.3)
    bx.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, out_dir / PLOT, tight=True)
