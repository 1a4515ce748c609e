"""``privacy_utility.png`` of section (f): the Motes root error ratio against epsilon (log y,
median and 25-75 % band per method) beside the noise of the k-th release against H."""

from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from benchmarks.privacy import horizon as hz
from benchmarks.privacy import section as sec
from benchmarks.privacy.report_section import PLOT
from benchmarks.reporting import figure, save_figure

__all__ = ["write_plot"]

#: Colour and style of the curves, by position in `section.CURVE_METHODS`.
_STYLES = (("tab:blue", "o-"), ("tab:cyan", "v-"), ("tab:red", "s--"), ("tab:green", "^-"),
           ("k", "D:"), ("tab:gray", "--"))  # fmt: skip


def _axes(ax, x_label: str, y_label: str, title: str) -> None:
    """Plain tick labels on a log y axis, labels, title and grid."""
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)


def write_plot(p: sec.PrivacyResults, out_dir: Path) -> Path | None:
    """Write ``out_dir/privacy_utility.png`` (None if nothing to draw)."""
    if not p.curves:
        return None
    fig, (ax, bx) = figure(1, 2, figsize=(13, 4.8))
    eps = p.curve_epsilons
    for (colour, style), curve in zip(_STYLES, p.curves, strict=False):
        e = curve.errors
        ax.plot(eps, [s.median for s in e], style, color=colour, label=curve.label,
                markersize=4, linewidth=1.5)  # fmt: skip
        ax.fill_between(eps, [s.p25 for s in e], [s.p75 for s in e], color=colour, alpha=0.15,
                        linewidth=0)  # fmt: skip
    ax.axhline(1.0, color="k", linewidth=0.8, label="no noise (offline SVD)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(eps, [f"{e:g}" for e in eps])
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    n, d = p.motes_shape
    title = f"Motes light {n} x {d}, {p.leaves} leaves, rank {p.rank}, C = {p.clip_norm:g}"
    _axes(ax, f"epsilon (delta = {p.delta:g})", "root error ratio (median, 25-75 % band)", title)
    ax.legend(fontsize=7, loc="center right")
    ks = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    for h in p.horizons or hz.HORIZONS:
        default = h == sec.DEFAULT_HORIZON
        bx.plot(ks, [hz.noise_factor(h, k) for k in ks], marker="o", markersize=3,
                linewidth=2.4 if default else 1.2,
                label=f"H = {h}" + (" (runtime default)" if default else ""))  # fmt: skip
    bx.set_xscale("log", base=2)
    bx.set_yscale("log")
    bx.set_xticks(ks, [str(k) for k in ks], fontsize=7)
    _axes(bx, "release k", "noise std / one release at H = 1",
          "Noise of the k-th release (continual release, horizon H)")  # fmt: skip
    bx.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, out_dir / PLOT, tight=True)
