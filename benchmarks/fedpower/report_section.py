"""The Markdown of section (h) (FPCA vs FedPower) and its plot ``fedpower.png``."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.fedpower.data import MOTES, SYNTH
from benchmarks.fedpower.faults import DEAD, NONE, STRAGGLER, STRAGGLER_SLOWDOWN
from benchmarks.fedpower.section import Curve, FedPowerBenchResults, FPCAPoint
from benchmarks.reporting import figure, save_figure, table

__all__ = ["PLOT", "TARGET", "section", "write_plot"]

PLOT = "fedpower.png"
#: The error ratio the "rounds to" columns use (the runtime's Done-when bound).
TARGET = 1.01
_CHECKPOINTS = (1, 2, 5, 10, 20, 40)
_FLOOR = 1e-7


def _first(curve: Curve, bound: float) -> int | None:
    """First round (1-based) whose error ratio is <= ``bound`` and stays so after."""
    last = None
    for k in range(len(curve.errors), 0, -1):
        if curve.errors[k - 1] > bound:
            break
        last = k
    return last


def _kb(x: float) -> str:
    return f"{x / 1000:,.1f}"


def _fpca(res: FedPowerBenchResults, dataset: str, fault: str, private: bool) -> FPCAPoint:
    return next(
        p for p in res.fpca if p.dataset == dataset and p.fault == fault and p.private == private
    )


def _curves(res: FedPowerBenchResults, dataset: str, fault: str) -> list[Curve]:
    return [c for c in res.curves if c.dataset == dataset and c.fault == fault]


def _reach(curve: Curve, bound: float) -> tuple[str, str]:
    k = _first(curve, bound)
    return ("never", "-") if k is None else (str(k), _kb(curve.cum_bytes[k - 1]))


def _main_table(res: FedPowerBenchResults, dataset: str) -> list[str]:
    f = _fpca(res, dataset, NONE, False)
    rows = [
        [
            "FPCA (tree, block 50)",
            "-",
            f"{f.error:.5f}",
            "-",
            "-",
            f"{_kb(f.wire_bytes)} / {_kb(f.block_bytes)}",
            f"{f.messages} / {f.block_messages}",
            f"{f.seconds * 1e3:.1f}",
        ]
    ]
    for c in _curves(res, dataset, NONE):
        k, b = _reach(c, TARGET)
        kf, bf = _reach(c, f.error)
        rows.append(
            [
                c.method,
                len(c.errors),
                f"{c.errors[-1]:.5f}",
                f"{k} ({b})",
                f"{kf} ({bf})",
                _kb(c.cum_bytes[-1]),
                f"{c.messages:,.0f}",
                f"{c.seconds * 1e3:.1f}",
            ]
        )
    n, d = res.shapes[dataset]
    return [
        f"### {dataset} ({n} x {d}), no faults, no privacy",
        "",
        table(
            [
                "method",
                "rounds",
                "error ratio (end)",
                f"rounds (kB) to <= {TARGET}",
                "rounds (kB) to <= FPCA's",
                "kB on the wire (all rounds; FPCA: final / per block)",
                "messages",
                "numerics wall (ms)",
            ],
            rows,
        ),
        "",
    ]


def _convergence_table(res: FedPowerBenchResults) -> list[str]:
    points = [k for k in _CHECKPOINTS if k <= res.rounds]
    rows = []
    for dataset in (MOTES, SYNTH):
        f = _fpca(res, dataset, NONE, False)
        rows.append(
            [dataset, f"FPCA: {f.error:.5f} at {_kb(f.wire_bytes)} kB"] + [""] * len(points)
        )
        for c in _curves(res, dataset, NONE):
            cells = [f"{c.errors[k - 1]:.5f} ({_kb(c.cum_bytes[k - 1])})" for k in points]
            rows.append(["", c.method, *cells])
    return [
        "### Convergence: error ratio (kB on the wire) after round t",
        "",
        table(["data", "method", *[f"t = {k}" for k in points]], rows),
        "",
    ]


def _fault_table(res: FedPowerBenchResults) -> list[str]:
    rows = []
    for dataset in (MOTES, SYNTH):
        for fault in (NONE, STRAGGLER, DEAD):
            f = _fpca(res, dataset, fault, False)
            rows.append(
                [dataset, fault, "FPCA", f"{f.error:.5f}", "-", _kb(f.wire_bytes), f.messages]
            )
            for c in _curves(res, dataset, fault):
                if c.participation == 1.0 or c.local_steps == 1 or fault == NONE:
                    if fault == NONE and c.local_steps == 4 and not c.opt:
                        continue
                    rows.append(
                        [
                            "",
                            "",
                            c.method,
                            f"{c.errors[-1]:.5f}",
                            f"{c.timeouts:.0f}",
                            _kb(c.cum_bytes[-1]),
                            f"{c.messages:,.0f}",
                        ]
                    )
    return [
        f"### Faults: one straggler (1/{STRAGGLER_SLOWDOWN} the rate), one dead leaf",
        "",
        table(
            [
                "data",
                "fault",
                "method",
                "error ratio (end)",
                "rounds closed at the timeout",
                "kB on the wire (FPCA: final)",
                "messages",
            ],
            rows,
        ),
        "",
    ]


def _private_table(res: FedPowerBenchResults) -> list[str]:
    rows = []
    for dataset in (MOTES, SYNTH):
        f = _fpca(res, dataset, NONE, True)
        rows.append(
            [
                dataset,
                "FPCA, Gaussian, one release per leaf",
                "-",
                f"{f.error:.3f} ({f.error_p25:.3f}-{f.error_p75:.3f})",
                _kb(f.wire_bytes),
                "-",
            ]
        )
        for r in res.private:
            if r.dataset == dataset:
                rows.append(
                    [
                        "",
                        r.method,
                        r.rounds,
                        f"{r.error:.3f} ({r.error_p25:.3f}-{r.error_p75:.3f})",
                        _kb(r.wire_bytes),
                        f"{r.sigma:.3g}",
                    ]
                )
        if dataset in res.random_error:
            rows.append(
                ["", "a random rank-r subspace", "-", f"{res.random_error[dataset]:.3f}", "-", "-"]
            )
    clips = ", ".join(f"{k}: {v:g}" for k, v in res.clip_norms.items())
    return [
        f"### Private: (epsilon, delta) = ({res.epsilon:g}, {res.delta:g}) per reading, "
        f"same clip norm ({clips})",
        "",
        f"Medians (quartiles) over {res.seeds} seeds; error ratio on all rows (unclipped). "
        "FedPower's noise is calibrated for all of a run's T = rounds x p local iterations "
        "(RDP, Mironov conversion), so each row is its own run at that horizon; sigma is "
        "the noise std per entry of S Q (unit-ball Gram units).",
        "",
        table(
            [
                "data",
                "method",
                "rounds",
                "error ratio, median (IQR)",
                "kB on the wire",
                "sigma",
            ],
            rows,
        ),
        "",
    ]


def _get(res: FedPowerBenchResults, dataset: str, fault: str, steps: int, opt: bool, part: float):
    return next(
        c
        for c in _curves(res, dataset, fault)
        if c.local_steps == steps and c.opt == opt and c.participation == part
    )


def _verdict(res: FedPowerBenchResults) -> list[str]:
    """The "when to pick which" paragraph, its numbers taken from ``res``."""
    partial = [c for c in res.curves if c.participation < 1 and c.fault == NONE]
    if not partial or not any(c.local_steps == 4 for c in partial):
        return []
    mf = _fpca(res, MOTES, NONE, False)
    m1 = _get(res, MOTES, NONE, 1, True, 1.0)
    m4 = _get(res, MOTES, NONE, 4, True, 1.0)
    m4n = _get(res, MOTES, NONE, 4, False, 1.0)
    m1p = _get(res, MOTES, NONE, 1, True, 0.75)
    s4 = _get(res, SYNTH, NONE, 4, True, 1.0)
    s4n = _get(res, SYNTH, NONE, 4, False, 1.0)
    k, b = _reach(m1, mf.error)
    ratio = m1.cum_bytes[-1] / mf.wire_bytes
    md = _get(res, MOTES, DEAD, 1, True, 1.0)
    fpd = _fpca(res, MOTES, NONE, True)
    best_private = min(
        (r for r in res.private if r.dataset == MOTES), key=lambda r: r.error, default=None
    )
    ms = _get(res, MOTES, STRAGGLER, 1, True, 1.0)
    msf = _fpca(res, MOTES, STRAGGLER, False)
    s1 = _get(res, SYNTH, NONE, 1, True, 1.0)
    sd = _fpca(res, SYNTH, NONE, True)
    rand = res.random_error.get(SYNTH, math.nan)
    best_synth = min((r.error for r in res.private if r.dataset == SYNTH), default=math.nan)
    text = (
        f"**When to pick which.** On these data FPCA reaches its error ratio ({mf.error:.5f} "
        f"on Motes) in one pass with {mf.messages} snapshots ({_kb(mf.wire_bytes)} kB; "
        f"{_kb(mf.block_bytes)} kB if every leaf and aggregator published after every "
        f"block); FedPower (p = 1, all 8 leaves) needs {k} synchronous rounds and {b} kB to "
        f"match it on Motes, and {_kb(m1.cum_bytes[-1])} kB for {len(m1.errors)} rounds "
        f"({ratio:.0f}x FPCA's final snapshots) to end at {m1.errors[-1]:.6f}. Pick FedPower "
        "when the leaves hold a fixed data set, stay online for tens of rounds and the exact "
        "offline subspace is wanted (it converges to it, FPCA stops at its streaming error); "
        "pick FPCA when data stream in, bandwidth or connectivity is scarce, leaves come and "
        "go, or privacy is needed. Several local iterations per round cut the rounds "
        f"(Synth het.: {_reach(s4, TARGET)[0]} rounds to <= {TARGET} with p = 4 against "
        f"{_reach(s1, TARGET)[0]} with p = 1) but leave a floor that grows with how much the "
        "leaves differ, and need OPT: with p = 4 FedPower stalls at "
        f"{m4.errors[-1]:.4f} on Motes (time-contiguous leaves) with OPT and "
        f"{m4n.errors[-1]:.3f} without; on Synth het. at {s4.errors[-1]:.6f} with OPT against "
        f"{s4n.errors[-1]:.5f} without. Partial participation (6 of 8 drawn per round) does "
        f"not converge on heterogeneous leaves (Motes, p = 1: {m1p.errors[-1]:.4f} after "
        f"{len(m1p.errors)} rounds): the global basis follows each round's draw. Faults: "
        f"a straggler or a dead leaf barely moves either method's accuracy on the data that "
        f"reached it (Motes, straggler: FPCA {msf.error:.5f}, FedPower {ms.errors[-1]:.5f}; "
        f"dead: FedPower {md.errors[-1]:.5f}), but with full participation FedPower's rounds "
        f"wait for the timeout ({ms.timeouts:.0f} of {len(ms.errors)} rounds with the "
        f"straggler, {md.timeouts:.0f} of {len(md.errors)} with the dead leaf), which then "
        "sets its wall time on a real network; FPCA never waits."
    )
    if best_private is not None:
        text += (
            f" Under equal privacy ((epsilon, delta) = ({res.epsilon:g}, {res.delta:g}), same "
            f"clip norm) FPCA's single release per leaf gives {fpd.error:.3f} on Motes, "
            f"FedPower at best {best_private.error:.3f} ({best_private.method}, "
            f"{best_private.rounds} rounds; its noise grows with the square root of its "
            f"iterations); on Synth het. FPCA {sd.error:.3f} against FedPower at best "
            f"{best_synth:.3f} (a random rank-{res.rank} subspace: {rand:.3f})."
        )
    return [text, ""]


def section(res: FedPowerBenchResults) -> list[str]:
    """The Markdown lines of section (h)."""
    out = [
        "## (h) FPCA vs FedPower: error ratio, bytes on the wire, rounds, wall time",
        "",
        f"Both methods in one process on the same data, {res.n_leaves} contiguous leaves, "
        f"rank {res.rank} (`benchmarks/fedpower/`, `python -m benchmarks.run --only fedpower "
        "--update`). Motes light as the runtime replays it; Synth het. = Synth(1), d = 48, "
        "rows sorted by their angle in the plane of the two leading principal directions "
        "before the split, so every leaf sees a different sector (non-i.i.d. leaves). "
        f"**FPCA**: streaming leaves (`FPCAEdge`, block {res.block_size}, rank 10 + the "
        "default oversample 10), two aggregators keeping every direction, the root at rank "
        "10. **FedPower** (`edge_runtime.fedpower`): every leaf's d x d Gram, p local power "
        f"iterations per round from the global basis, aggregation with or without OPT, "
        f"{res.rounds} rounds, all 8 leaves or K = 6 of 8 drawn per round (Algorithm 3). "
        "Error ratio: residual of the rank-10 basis on the rows the fleet observed over "
        "that of their offline rank-10 SVD (1 is optimal). Non-private numbers are medians "
        f"of {res.repeats} runs (seeds of FedPower's start basis and draws; FPCA is "
        "deterministic).",
        "",
        "**Bytes on the wire (payload only, no MQTT headers).** FPCA: real encoded "
        "`SubspaceMessage`s (`encode_subspace`, float32), under two publish policies: "
        "*final* (each leaf once at the end of its stream, each aggregator once after its "
        "children: the least FPCA sends) and *per block* (each leaf after every block, each "
        "aggregator after every child snapshot: the most an unthrottled runtime sends); the "
        "runtime's rate limits land in between (section (g): 57 messages, status included, "
        "on Motes). The root's estimate is the same under both. FedPower: the runtime's "
        "round/reply messages do not exist yet, so its bytes are `msgpack.packb` of maps "
        "with their fields (round number, node id, d x r float32 basis, p or the sample "
        "count; a privacy map on private replies): per round one round message per "
        "subscribed leaf (MQTT delivers a copy to each) plus one reply per leaf that "
        "answered; replies straight to the root (no forwarding copies). **Wall time** is the "
        "numerics only (Grams, local iterations, aggregation; streaming and merges), median "
        f"of {res.repeats} runs, one BLAS thread: no network, no round timeouts.",
        "",
        f"**Faults** (the last leaf). Straggler: it produces readings at 1/"
        f"{STRAGGLER_SLOWDOWN} the rate, so it has seen the first tenth of its rows by the "
        "end, and its FedPower reply arrives in time only every "
        f"{STRAGGLER_SLOWDOWN}th round (the other rounds close at the timeout without it, "
        "or at K = 6 of 8 when it was not drawn); FPCA merges its smaller snapshot whenever "
        "it arrives. Dead: the leaf dies after the start, never replies, never publishes, "
        "receives nothing; FedPower closes the rounds that asked it at the timeout, FPCA's "
        "aggregator merges the other three. Error ratios under a fault are on the rows that "
        "reached the fleet.",
        "",
    ]
    out += _main_table(res, MOTES) + _main_table(res, SYNTH)
    out += [
        "FPCA's messages: final / per block. FedPower with p = 1 and the previous global basis "
        "as reference: OPT is the identity (the round is the exact centralised power step "
        'with all leaves). "Rounds (kB) to" = first round from which the error ratio '
        "stays at or below the bound.",
        "",
        f"![error ratio vs bytes]({PLOT})",
        "",
    ]
    out += _convergence_table(res) + _fault_table(res) + _private_table(res)
    out += _verdict(res)
    return out


def write_plot(res: FedPowerBenchResults | None, out_dir: Path) -> list[Path]:
    """``fedpower.png``: error ratio - 1 against cumulative bytes (log-log), one panel per
    dataset, no faults, no privacy; FPCA as two points (final, per block)."""
    if res is None or not res.curves:
        return []
    fig, axes = figure(1, 2, figsize=(12, 4.8))
    for ax, dataset in zip(axes, (MOTES, SYNTH), strict=True):
        for c in _curves(res, dataset, NONE):
            style = "-" if c.participation == 1.0 else "--"
            y = [max(e - 1.0, _FLOOR) for e in c.errors]
            ax.plot(c.cum_bytes, y, style, marker=".", markersize=3, label=c.method)
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
