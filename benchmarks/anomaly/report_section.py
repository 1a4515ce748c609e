"""Section (i) of REPORT.md as Markdown, its Done-when checks and plot ``anomaly-roc.png``."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.anomaly.faults import FaultConfig
from benchmarks.anomaly.oracle import needed_share
from benchmarks.anomaly.precision_recall import Row, markdown_table
from benchmarks.anomaly.section import SYNTH_CONFIG, AnomalyBenchResults
from benchmarks.reporting import Check, figure, prose, save_figure, table

__all__ = ["PLOT", "TARGET", "checks", "section", "write_plot"]

PLOT = "anomaly-roc.png"
#: Issue 13's precision and recall bound for spikes and stuck sensors.
TARGET = 0.9


def _row(rows: list[Row], setting: str, kind: str) -> Row | None:
    return next((r for r in rows if r.setting == setting and r.kind == kind), None)


def checks(res: AnomalyBenchResults | None) -> list[Check]:
    """Issue 13's first Done-when item on Motes light (filled dropouts), per kind."""
    if res is None:
        return []
    out = []
    for kind in ("spike", "stuck", "drift"):
        r = _row(res.motes, "Motes, filled", kind)
        if r is None:
            continue
        got = f"precision {r.precision:.3f}, recall {r.recall:.3f}"
        if kind == "drift":
            out.append(Check("drift reported", got, "reported", True))
        else:
            item = f"Motes light with injected faults, alpha = {res.alpha:g}: {kind}"
            ok = r.precision >= TARGET and r.recall >= TARGET
            out.append(Check(item, got, f">= {TARGET} both", ok))
    return out


def _oracle_table(res: AnomalyBenchResults) -> str:
    rates = sorted({rate for r in res.oracle for rate in r.recall}, reverse=True)
    header = ["fault (one mote)", "cases"]
    header += [f"recall at {100 * rate:g} % false alarms" for rate in rates]
    header += [f"faulty share for precision 0.9 at {100 * rates[0]:g} %"]
    rows = [[r.variant, r.cases, *(f"{r.recall[rate]:.3f}" for rate in rates),
             f"{100 * needed_share(r.recall[rates[0]], rates[0]):.0f} %"] for r in res.oracle]
    return table(header, rows)


def _config_line(cfg: FaultConfig, unit: str) -> str:
    stuck = "its last value" if cfg.stuck_value is None else f"{cfg.stuck_value:g} {unit}"
    return (
        f"{cfg.n_spikes} spikes of +{cfg.spike_offset:g} {unit}, {cfg.n_stuck} stuck stretches "
        f"of {cfg.stuck_length} readings (at {stuck}), {cfg.n_drift} drifts to "
        f"+{cfg.drift_total:g} {unit} over {cfg.drift_length} readings"
    )


def section(res: AnomalyBenchResults) -> list[str]:
    """Section (i) as Markdown lines."""
    clean = _row(res.motes, "Motes, filled", "clean")
    fa = math.nan if clean is None else clean.recall
    stuck = [r.recall[0.01] for r in res.oracle if r.variant.startswith("stuck")]
    return prose(
        "anomaly", "section", alpha=res.alpha, rank=res.rank, oversample=res.oversample,
        seed=res.seed, motes_faults=_config_line(FaultConfig(), "lux"),
        motes_table=markdown_table(res.motes), false_alarms=100 * fa,
        oracle_clean=100 * res.oracle_clean_flagged, oracle_table=_oracle_table(res),
        best_stuck=max(stuck, default=math.nan), synth_faults=_config_line(SYNTH_CONFIG, "units"),
        synth_table=markdown_table(res.synth), plot=PLOT,
    )  # fmt: skip


def write_plot(res: AnomalyBenchResults | None, out_dir: Path) -> list[Path]:
    """``anomaly-roc.png``: oracle recall against the clean false-alarm rate per fault
    variant on Motes light (log x), with alpha marked."""
    if res is None or not res.roc:
        return []
    fig, ax = figure(figsize=(7.5, 4.8))
    for name, (rates, recalls) in res.roc.items():
        ax.plot(rates, recalls, marker=".", markersize=3, label=name)
    ax.axvline(res.alpha, color="k", lw=0.8, ls=":", label=f"alpha = {res.alpha:g}")
    ax.axhline(TARGET, color="grey", lw=0.8, ls="--", label=f"recall {TARGET:g}")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("false-alarm rate on clean readings (oracle threshold)")
    ax.set_ylabel("recall (faulty readings flagged)")
    ax.set_title(f"Motes light, one faulty mote, Q / T^2 with rank {res.rank}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return [save_figure(fig, out_dir / PLOT)]
