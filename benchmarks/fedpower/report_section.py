"""The Markdown of section (h) (FPCA vs FedPower; prose in ``templates/fedpower.md``) and its
plot ``fedpower.png``."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.fedpower.data import MOTES, SYNTH
from benchmarks.fedpower.faults import DEAD, NONE, STRAGGLER, STRAGGLER_SLOWDOWN
from benchmarks.fedpower.section import Curve, FedPowerBenchResults, FPCAPoint, PrivateRow
from benchmarks.reporting import figure, prose, save_figure, table

__all__ = ["PLOT", "TARGET", "section", "write_plot"]

PLOT = "fedpower.png"
#: The error ratio the "rounds to" columns use (the runtime's Done-when bound).
TARGET = 1.01
_CHECKPOINTS = (1, 2, 5, 10, 20, 40)
_FLOOR = 1e-7


def _kb(x: float) -> str:
    return f"{x / 1000:,.1f}"


def _iqr(r: FPCAPoint | PrivateRow) -> str:
    return f"{r.error:.3f} ({r.error_p25:.3f}-{r.error_p75:.3f})"


def _fpca(res: FedPowerBenchResults, dataset: str, fault: str, private: bool) -> FPCAPoint:
    return next(p for p in res.fpca if (p.dataset, p.fault, p.private) == (dataset, fault, private))


def _curves(res: FedPowerBenchResults, dataset: str, fault: str) -> list[Curve]:
    return [c for c in res.curves if c.dataset == dataset and c.fault == fault]


def _get(res: FedPowerBenchResults, dataset: str, fault: str, steps: int, opt: bool,
         part: float) -> Curve:  # fmt: skip
    return next(c for c in _curves(res, dataset, fault)
                if (c.local_steps, c.opt, c.participation) == (steps, opt, part))  # fmt: skip


def _reach(curve: Curve, bound: float) -> tuple[str, str]:
    """First round (1-based) from which the error ratio stays <= ``bound``, and its kB."""
    k = len(curve.errors)
    while k > 0 and curve.errors[k - 1] <= bound:
        k -= 1
    return ("never", "-") if k == len(curve.errors) else (str(k + 1), _kb(curve.cum_bytes[k]))


def _main_table(res: FedPowerBenchResults, dataset: str) -> list[str]:
    f = _fpca(res, dataset, NONE, False)
    rows = [["FPCA (tree, block 50)", "-", f"{f.error:.5f}", "-", "-",
             f"{_kb(f.wire_bytes)} / {_kb(f.block_bytes)}", f"{f.messages} / {f.block_messages}",
             f"{f.seconds * 1e3:.1f}"]]  # fmt: skip
    for c in _curves(res, dataset, NONE):
        (k, b), (kf, bf) = _reach(c, TARGET), _reach(c, f.error)
        rows.append([c.method, len(c.errors), f"{c.errors[-1]:.5f}", f"{k} ({b})",
                     f"{kf} ({bf})", _kb(c.cum_bytes[-1]), f"{c.messages:,.0f}",
                     f"{c.seconds * 1e3:.1f}"])  # fmt: skip
    header = ["method", "rounds", "error ratio (end)", f"rounds (kB) to <= {TARGET}",
              "rounds (kB) to <= FPCA's", "kB on the wire (all rounds; FPCA: final / per block)",
              "messages", "numerics wall (ms)"]  # fmt: skip
    n, d = res.shapes[dataset]
    return prose("fedpower", "main", dataset=dataset, n=n, d=d, table=table(header, rows))


def _convergence_table(res: FedPowerBenchResults) -> list[str]:
    points = [k for k in _CHECKPOINTS if k <= res.rounds]
    rows = []
    for dataset in (MOTES, SYNTH):
        f = _fpca(res, dataset, NONE, False)
        rows.append([dataset, f"FPCA: {f.error:.5f} at {_kb(f.wire_bytes)} kB"]
                    + [""] * len(points))  # fmt: skip
        rows += [["", c.method, *[f"{c.errors[k - 1]:.5f} ({_kb(c.cum_bytes[k - 1])})"
                                  for k in points]]
                 for c in _curves(res, dataset, NONE)]  # fmt: skip
    header = ["data", "method", *[f"t = {k}" for k in points]]
    return prose("fedpower", "convergence", table=table(header, rows))


def _fault_table(res: FedPowerBenchResults) -> list[str]:
    rows = []
    for dataset in (MOTES, SYNTH):
        for fault in (NONE, STRAGGLER, DEAD):
            f = _fpca(res, dataset, fault, False)
            rows.append([dataset, fault, "FPCA", f"{f.error:.5f}", "-", _kb(f.wire_bytes),
                         f.messages])  # fmt: skip
            rows += [
                ["", "", c.method, f"{c.errors[-1]:.5f}", f"{c.timeouts:.0f}",
                 _kb(c.cum_bytes[-1]), f"{c.messages:,.0f}"]
                for c in _curves(res, dataset, fault)
                if (c.participation == 1.0 or c.local_steps == 1 or fault == NONE)
                and not (fault == NONE and c.local_steps == 4 and not c.opt)
            ]  # fmt: skip
    header = ["data", "fault", "method", "error ratio (end)", "rounds closed at the timeout",
              "kB on the wire (FPCA: final)", "messages"]  # fmt: skip
    return prose("fedpower", "faults", slowdown=STRAGGLER_SLOWDOWN, table=table(header, rows))


def _private_table(res: FedPowerBenchResults) -> list[str]:
    rows = []
    for dataset in (MOTES, SYNTH):
        f = _fpca(res, dataset, NONE, True)
        rows.append([dataset, "FPCA, Gaussian, one release per leaf", "-", _iqr(f),
                     _kb(f.wire_bytes), "-"])  # fmt: skip
        rows += [["", r.method, r.rounds, _iqr(r), _kb(r.wire_bytes), f"{r.sigma:.3g}"]
                 for r in res.private if r.dataset == dataset]  # fmt: skip
        if dataset in res.random_error:
            rand = f"{res.random_error[dataset]:.3f}"
            rows.append(["", "a random rank-r subspace", "-", rand, "-", "-"])
    clips = ", ".join(f"{k}: {v:g}" for k, v in res.clip_norms.items())
    header = ["data", "method", "rounds", "error ratio, median (IQR)", "kB on the wire", "sigma"]
    return prose("fedpower", "private", epsilon=res.epsilon, delta=res.delta, clips=clips,
                 seeds=res.seeds, table=table(header, rows))  # fmt: skip


def _verdict(res: FedPowerBenchResults) -> list[str]:
    """The "when to pick which" paragraph, its numbers taken from ``res``."""
    partial = [c for c in res.curves if c.participation < 1 and c.fault == NONE]
    if not any(c.local_steps == 4 for c in partial):
        return []
    mf, m1 = _fpca(res, MOTES, NONE, False), _get(res, MOTES, NONE, 1, True, 1.0)
    m4, m4n = _get(res, MOTES, NONE, 4, True, 1.0), _get(res, MOTES, NONE, 4, False, 1.0)
    s4, s4n = _get(res, SYNTH, NONE, 4, True, 1.0), _get(res, SYNTH, NONE, 4, False, 1.0)
    m1p, s1 = _get(res, MOTES, NONE, 1, True, 0.75), _get(res, SYNTH, NONE, 1, True, 1.0)
    ms, md = _get(res, MOTES, STRAGGLER, 1, True, 1.0), _get(res, MOTES, DEAD, 1, True, 1.0)
    k, b = _reach(m1, mf.error)
    best = min((r for r in res.private if r.dataset == MOTES), key=lambda r: r.error, default=None)
    private = "" if best is None else prose(
        "fedpower", "verdict-private", epsilon=res.epsilon, delta=res.delta,
        fpd=_fpca(res, MOTES, NONE, True), best=best, sd=_fpca(res, SYNTH, NONE, True),
        best_synth=min((r.error for r in res.private if r.dataset == SYNTH), default=math.nan),
        rank=res.rank, rand=res.random_error.get(SYNTH, math.nan),
    )[0]  # fmt: skip
    text = prose(
        "fedpower", "verdict", mf=mf, mf_kb=_kb(mf.wire_bytes), mf_block_kb=_kb(mf.block_bytes),
        k=k, b=b, m1_kb=_kb(m1.cum_bytes[-1]), m1_rounds=len(m1.errors),
        ratio=m1.cum_bytes[-1] / mf.wire_bytes, m1_end=m1.errors[-1],
        s4_rounds=_reach(s4, TARGET)[0], target=TARGET, s1_rounds=_reach(s1, TARGET)[0],
        m4_end=m4.errors[-1], m4n_end=m4n.errors[-1], s4_end=s4.errors[-1],
        s4n_end=s4n.errors[-1], m1p_end=m1p.errors[-1], m1p_rounds=len(m1p.errors),
        msf=_fpca(res, MOTES, STRAGGLER, False), ms_end=ms.errors[-1], md_end=md.errors[-1],
        ms=ms, ms_rounds=len(ms.errors), md=md, md_rounds=len(md.errors), private=private,
    )[0]  # fmt: skip
    return [text, ""]


def section(res: FedPowerBenchResults) -> list[str]:
    """The Markdown lines of section (h)."""
    out = prose(
        "fedpower", "intro", n_leaves=res.n_leaves, rank=res.rank, block_size=res.block_size,
        rounds=res.rounds, repeats=res.repeats, slowdown=STRAGGLER_SLOWDOWN,
    )  # fmt: skip
    out += _main_table(res, MOTES) + _main_table(res, SYNTH)
    out += prose("fedpower", "after-main", plot=PLOT)
    out += _convergence_table(res) + _fault_table(res) + _private_table(res)
    return out + _verdict(res)


def write_plot(res: FedPowerBenchResults | None, out_dir: Path) -> list[Path]:
    """``fedpower.png``: error ratio - 1 against cumulative bytes (log-log), one panel per
    dataset, no faults, no privacy; FPCA as two points (final, per block)."""
    if res is None or not res.curves:
        return []
    fig, axes = figure(1, 2, figsize=(12, 4.8))
    for ax, dataset in zip(axes, (MOTES, SYNTH), strict=True):
        for c in _curves(res, dataset, NONE):
            ax.plot(c.cum_bytes, [max(e - 1.0, _FLOOR) for e in c.errors],
                    "-" if c.participation == 1.0 else "--", marker=".", markersize=3,
                    label=c.method)  # fmt: skip
        f = _fpca(res, dataset, NONE, False)
        y = max(f.error - 1.0, _FLOOR)
        ax.plot([f.wire_bytes], [y], "k*", markersize=14, label="FPCA, final snapshots")
        ax.plot([f.block_bytes], [y], "kX", markersize=10, label="FPCA, per-block snapshots")
        ax.axhline(y, color="k", lw=0.6, ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("bytes on the wire (cumulative, payload)")
        ax.set_ylabel(f"error ratio - 1 (floor {_FLOOR:g})")
        n, d = res.shapes[dataset]
        ax.set_title(f"{dataset} ({n} x {d}), {res.n_leaves} leaves, rank {res.rank}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return [save_figure(fig, out_dir / PLOT)]
