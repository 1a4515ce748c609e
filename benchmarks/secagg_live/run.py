"""``python -m benchmarks.secagg_live``: the secure sum per site on Motes light, LIVE (issue 26).

The offline benchmark (`benchmarks.secagg`) computes the site sums in numpy; this one runs the
runtime: for every seed and row, a fresh Mosquitto on ``127.0.0.1`` (a free port above 20000,
anonymous, no ACL; stopped by its pid), the agents of the Motes light tree in this process
(`LeafAgent`, `AggregatorAgent`: root, two sites, eight leaves), every leaf's 964 readings
published over MQTT to its sensor topic, the root's model read from the broker and scored
with `error_ratio` on all 7712 rows; a client subscribed to ``<prefix>/#`` and the sensor
topics counts every payload by message kind. How one release and the blocks are arranged:
`benchmarks.secagg_live.live`.

Writes ``benchmarks/report/secagg_live.md`` (tables), ``secagg_live.png`` (plot) and
``secagg_live.json`` (every run); ``--render`` redraws the first two from the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.privacy import motes_tree as mt
from benchmarks.privacy.stats import Summary, summarise
from benchmarks.reporting import figure, prose, save_figure, table
from benchmarks.schema import environment, read_result, revive, write_result
from benchmarks.secagg.run import REPORTED, TARGET_CONTINUAL, TARGET_ONE
from benchmarks.secagg_live.live import SECAGG_KINDS, RunResult, Scenario, live_run

__all__ = ["OFFLINE", "SCENARIOS", "main", "markdown", "plot"]

SECAGG_TOPOLOGY = "topologies/motes-secagg.toml"
SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "one-t4", "secure sum, one release per leaf, t = 4 of 4", SECAGG_TOPOLOGY, threshold=4
    ),
    Scenario(
        "one-t3", "secure sum, one release per leaf, t = 3 of 4", SECAGG_TOPOLOGY, threshold=3
    ),
    Scenario(
        "cont-t4",
        "secure sum, continual: 4 blocks of 241, one per slot, H = 4, t = 4",
        SECAGG_TOPOLOGY,
        threshold=4,
        blocks=4,
        release_horizon=4,
    ),
    Scenario(
        "one-t4-r48",
        "variant: one release per leaf, t = 4, the sites at rank 48 (every direction)",
        SECAGG_TOPOLOGY,
        threshold=4,
        site_rank=48,
    ),
    Scenario(
        "cont-t4-r48",
        "variant: continual, H = 4, t = 4, the sites at rank 48 (every direction)",
        SECAGG_TOPOLOGY,
        threshold=4,
        blocks=4,
        release_horizon=4,
        site_rank=48,
    ),
    Scenario(
        "today-one",
        "today's private mode, one release per leaf (motes-light-dpdispca.toml)",
        "topologies/motes-light-dpdispca.toml",
        secagg=False,
    ),
    Scenario(
        "today-cont",
        "today's private mode, 4 blocks of 241, H = 4 (motes-light-private.toml)",
        "topologies/motes-light-private.toml",
        secagg=False,
    ),
)
#: Rows run only with ``--variants`` or ``--only``.
VARIANTS = ("cont-t4-r48",)
#: The offline medians over 20 seeds: benchmarks/report/secagg.md (secure sum, the
#: runtime's accounting: the smaller of the RDP and Gaussian-DP bounds, commit 17f9019) and
#: REPORT.md section (f) (today's private mode). The offline sites keep every direction.
OFFLINE = {
    "one-t4": 2.336,
    "one-t3": 2.480,
    "cont-t4": 2.716,
    "one-t4-r48": 2.336,
    "cont-t4-r48": 2.716,
    "today-one": REPORTED["one"],
    "today-cont": REPORTED["continual"],
}
TARGETS = {
    "one-t4": TARGET_ONE,
    "one-t3": TARGET_ONE,
    "cont-t4": TARGET_CONTINUAL,
    "one-t4-r48": TARGET_ONE,
    "cont-t4-r48": TARGET_CONTINUAL,
}
#: Releases per leaf of today's private rows (blocks of 964, of 241).
TODAY_RELEASES = {"today-one": 1, "today-cont": 4}
LEAVES = 8
#: Runs of one (row, seed) at most: an invalid run (a slot skipped on a loaded machine, ...)
#: is run again; every attempt is kept in the JSON and counted in the table.
ATTEMPTS = 3
FEDERATION = (*SECAGG_KINDS, "snapshot", "model", "status")


def _slots(r: RunResult) -> int:
    return r.slots_released or TODAY_RELEASES.get(r.scenario, 1)


def per_leaf_slot(r: RunResult, kinds: Sequence[str]) -> float:
    """Payload bytes of ``kinds`` per leaf and per slot (today: per release) of run ``r``."""
    return sum(r.bytes.get(k, 0) for k in kinds) / (LEAVES * _slots(r))


def _fmt(s: Summary, digits: int = 3) -> str:
    if s.n == 0:
        return "- | -"
    return f"**{s.median:.{digits}f}** | {s.p25:.{digits}f}-{s.p75:.{digits}f}"


def _mid(s: Summary, digits: int = 0) -> str:
    if s.n == 0:
        return "-"
    return f"{s.median:,.{digits}f} ({s.p25:,.{digits}f}-{s.p75:,.{digits}f})"


def markdown(
    results: Sequence[RunResult],
    seeds: int,
    seconds: float,
    slot_s: float,
    stamp: str,
    tree: str = "unknown",
    note: str = "",
    previous: dict[str, object] | None = None,
) -> str:
    """The Markdown of ``secagg_live.md``."""
    by = {s.key: [r for r in results if r.scenario == s.key] for s in SCENARIOS}
    shown = [s for s in SCENARIOS if by[s.key]]  # the rows run
    rows = []
    for s in shown:
        runs = by[s.key]
        ok = [r for r in runs if r.valid]
        err = summarise([r.error for r in ok])
        slot_t = summarise([t for r in ok for t in r.slot_seconds])
        sec = summarise([per_leaf_slot(r, SECAGG_KINDS) for r in ok])
        fed = summarise([per_leaf_slot(r, FEDERATION) for r in ok])
        lat = summarise([r.latency_s for r in ok])
        target = TARGETS.get(s.key)
        slots = (
            f"{ok[0].slots_released}" if ok and s.secagg else f"({TODAY_RELEASES[s.key]} rel./leaf)"
        )
        rows.append([
            s.label, f"{len(ok)}/{len(runs)}", _fmt(err), f"{OFFLINE[s.key]:.3f}",
            "<= " + format(target, "g") if target else "-", slots,
            _mid(slot_t, 2) if s.secagg else "-", _mid(sec) if s.secagg else "-", _mid(fed),
            _mid(lat, 2),
        ])  # fmt: skip
    header = [
        "row", "n", "median", "IQR", "offline median", "target", "slots per site",
        "time per slot, s (median, IQR)", "secagg bytes / leaf / slot",
        "federation bytes / leaf / slot", "last reading -> root model, s",
    ]  # fmt: skip
    checks = "; ".join(_check(s.key, by[s.key]) for s in shown if s.key in TARGETS)
    lines = prose(
        "secagg_live", "intro", seeds=seeds, stamp=stamp, minutes=seconds / 60, tree=tree,
        note="; " + note if note else "", slot_s=slot_s, phase=slot_s / 120, attempts=ATTEMPTS,
        table=table(header, rows), checks=checks,
    )  # fmt: skip
    kinds = sorted({k for r in results for k in r.bytes}, key=_kind_order)
    per_kind = []
    for s in shown:
        ok = [r for r in by[s.key] if r.valid]
        cells = [s.key]
        for k in kinds:
            b = [r.bytes.get(k, 0) for r in ok]
            m = [r.messages.get(k, 0) for r in ok]
            cells.append(f"{np.median(b):,.0f} ({np.median(m):.0f})" if ok and any(b) else "-")
        per_kind.append(cells)
    lines.append(table(["row", *kinds], per_kind))
    lines += prose("secagg_live", "kinds")
    per_seed = []
    for seed in sorted({r.seed for r in results}):
        cells = [seed]
        for s in shown:
            tries = [x for x in by[s.key] if x.seed == seed]
            ok = [f"{x.error:.3f}" for x in tries if x.valid]
            bad = [f"invalid ({x.note})" for x in tries if not x.valid]
            cells.append("; ".join(bad + ok))
        per_seed.append(cells)
    lines.append(table(["seed", *(s.key for s in shown)], per_seed))
    if previous:
        earlier = previous.get("rows", {}).items()  # type: ignore[attr-defined]
        rows = [[k, n, f"**{m:.3f}**", f"{p25:.3f}-{p75:.3f}"] for k, (n, m, p25, p75) in earlier]
        lines += prose(
            "secagg_live", "earlier", what=previous.get("what", ""),
            table=table(["row", "n", "median", "IQR"], rows),
        )  # fmt: skip
    walls = summarise([r.wall_s for r in results])
    lines += prose("secagg_live", "end", wall=walls.median)
    return "\n".join(lines)


def _check(key: str, runs: Sequence[RunResult]) -> str:
    errors = [r.error for r in runs if r.valid]
    if not errors:
        return f"{key}: no valid run"
    median = float(np.median(errors))
    verdict = "met" if median <= TARGETS[key] else "missed"
    return (
        f"{key} median {median:.3f} against <= {TARGETS[key]:g}: {verdict}"
        f" (offline {OFFLINE[key]:.3f}, n = {len(errors)})"
    )


def _kind_order(kind: str) -> tuple[int, str]:
    order = ["readings", *SECAGG_KINDS, "snapshot", "model", "status"]
    return (order.index(kind) if kind in order else len(order), kind)


def plot(results: Sequence[RunResult], path: Path) -> Path:
    """Error ratios per row (runs, median, offline median, targets) beside bytes per leaf
    and slot by kind."""
    fig, (ax, bx) = figure(1, 2, figsize=(13, 5.2))
    run = {r.scenario for r in results}
    scenarios = [s for s in SCENARIOS if s.key in run]
    keys = [s.key for s in scenarios]
    y = list(range(len(keys)))[::-1]
    for yy, s in zip(y, scenarios, strict=True):
        errs = [r.error for r in results if r.scenario == s.key and r.valid]
        jitter = np.linspace(-0.15, 0.15, len(errs)) if errs else []
        colour = "tab:blue" if s.secagg else "tab:gray"
        ax.scatter(errs, np.full(len(errs), yy) + jitter, s=12, color=colour, alpha=0.6)
        if errs:
            ax.plot([np.median(errs)] * 2, [yy - 0.3, yy + 0.3], color=colour, linewidth=2.5)
        ax.plot([OFFLINE[s.key]] * 2, [yy - 0.3, yy + 0.3], color="k", linestyle=":", linewidth=1.5)
    ax.axvline(TARGET_ONE, color="tab:red", linestyle="--", linewidth=1, label="target 2.4 (one)")
    ax.axvline(
        TARGET_CONTINUAL,
        color="tab:orange",
        linestyle="--",
        linewidth=1,
        label="target 3.0 (continual)",
    )
    ax.plot([], [], color="tab:blue", linewidth=2.5, label="live median (runs: dots)")
    ax.plot([], [], color="k", linestyle=":", label="offline median")
    ax.set_yticks(y, [s.label for s in scenarios], fontsize=7)
    ax.set_xlabel("root error ratio")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    ax.set_title("Motes light live, 2 sites of 4 leaves, eps 1, delta 1e-5, rank 10", fontsize=9)
    groups = {
        "secagg keys+roster": ("keys", "roster"),
        "secagg shares+delivery": ("shares", "delivery"),
        "secagg masked": ("masked",),
        "secagg unmask+unmasked": ("unmask", "unmasked"),
        "secagg outcome": ("outcome",),
        "snapshots+model": ("snapshot", "model"),
        "status": ("status",),
    }
    left = np.zeros(len(keys))
    colours = ["#9ecae1", "#6baed6", "#2171b5", "#08519c", "#c6dbef", "tab:gray", "#d9d9d9"]
    for (name, kinds), colour in zip(groups.items(), colours, strict=True):
        vals = []
        for s in scenarios:
            ok = [r for r in results if r.scenario == s.key and r.valid]
            vals.append(float(np.median([per_leaf_slot(r, kinds) for r in ok])) if ok else 0.0)
        bx.barh(y, vals, left=left, color=colour, label=name)
        left += np.asarray(vals)
    bx.set_yticks(y, keys, fontsize=8)
    bx.set_xlabel("payload bytes per leaf per slot (today: per release), median")
    bx.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3)
    bx.set_title("on the wire (readings not shown)", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path, tight=True)


def _load(path: Path) -> tuple[list[RunResult], dict[str, object]]:
    """The runs and the run's description (``parameters``) of a result file."""
    doc = read_result(path, "secagg-live")
    return revive(list[RunResult], doc["rows"]["runs"]), doc["parameters"]


def _write(out: Path, results: Sequence[RunResult], meta: dict[str, object]) -> None:
    medians = {
        s.key: float(np.median([r.error for r in results if r.scenario == s.key and r.valid]))
        for s in SCENARIOS
        if any(r.scenario == s.key and r.valid for r in results)
    }
    env = {**environment(), "time": meta["stamp"], "commit": meta["tree"]}
    write_result(out / "secagg_live.json", "secagg-live", meta, {"runs": results}, medians, env)


def render(out: Path) -> str:
    """Rewrite ``out/secagg_live.md`` and ``.png`` from ``out/secagg_live.json``; the Markdown."""
    return _render(out, *_load(out / "secagg_live.json"))


def _render(out: Path, results: Sequence[RunResult], meta: dict[str, object]) -> str:
    text = markdown(
        results,
        int(meta["seeds"]),  # type: ignore[call-overload]
        float(meta["seconds"]),  # type: ignore[arg-type]
        float(meta["slot_s"]),  # type: ignore[arg-type]
        str(meta["stamp"]),
        str(meta.get("tree", "unknown")),
        str(meta.get("note", "")),
        meta.get("previous"),  # type: ignore[arg-type]
    )
    (out / "secagg_live.md").write_text(text, encoding="utf-8")
    plot(results, out / "secagg_live.png")
    return text


async def _run_all(
    seeds: int,
    rows: Sequence[Scenario],
    out: Path,
    meta: dict[str, object],
    kept: Sequence[RunResult] = (),
) -> list[RunResult]:
    """Every (seed, row), seeds outer; ``kept``: earlier runs written with them."""
    data = mt.load_motes()
    root = Path(__file__).resolve().parents[2]
    results: list[RunResult] = list(kept)
    base = float(meta["seconds"])  # type: ignore[arg-type]
    start = time.monotonic()
    for seed in range(seeds):
        for scenario in rows:
            for attempt in range(1, ATTEMPTS + 1):
                r = await live_run(scenario, seed, data.x, data.parts, root)
                r.attempt = attempt
                results.append(r)
                _report(r, start)
                meta["seconds"] = base + time.monotonic() - start
                _write(out, results, meta)  # every run: a stopped benchmark keeps its runs
                if r.valid:
                    break
    return results


def _report(r: RunResult, start: float) -> None:
    state = f"{r.error:.3f}" if r.valid else f"INVALID ({r.note})"
    print(
        f"[{time.monotonic() - start:6.0f} s] seed {r.seed:2d} {r.scenario:10s} {state}"
        f"  slots {r.slots_released}  wall {r.wall_s:.1f} s  attempt {r.attempt}",
        file=sys.stderr,
        flush=True,
    )


def _tree() -> str:
    """The commit run, and whether ``edge_runtime/`` had uncommitted changes."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "edge_runtime"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{head}" + (" with uncommitted changes under edge_runtime/" if dirty else "")


def main(argv: Sequence[str] | None = None) -> int:
    """Run, write ``secagg_live.md``, ``.png`` and ``.json`` into ``--out``, print the Markdown."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.secagg_live", description=__doc__)
    parser.add_argument("--seeds", type=int, default=20, help="live runs per row (default 20)")
    parser.add_argument("--quick", action="store_true", help="2 seeds (a smoke run, about 2 min)")
    parser.add_argument(
        "--slot-s", type=float, default=5.0, help="secagg_slot_s of the sites (default 5)"
    )
    parser.add_argument("--only", nargs="+", choices=[s.key for s in SCENARIOS], help="some rows")
    parser.add_argument(
        "--render",
        action="store_true",
        help="measure nothing: redraw from --out's secagg_live.json",
    )
    parser.add_argument(
        "--variants",
        action="store_true",
        help=f"also the variant rows {', '.join(VARIANTS)} (about 8 more minutes)",
    )
    parser.add_argument(
        "--append",
        action="store_true",
        help="keep --out's secagg_live.json runs of the rows not run now (with --only)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/report"), help="directory of the report"
    )
    args = parser.parse_args(argv)
    from edge_runtime.logs import configure_logging

    configure_logging("error")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.render:
        sys.stdout.write(render(args.out))
        return 0
    seeds = 2 if args.quick else args.seeds
    if seeds < 1 or args.slot_s <= 0:
        parser.error("--seeds and --slot-s must be positive")
    from dataclasses import replace

    chosen = args.only or [s.key for s in SCENARIOS if args.variants or s.key not in VARIANTS]
    rows = [replace(s, slot_s=args.slot_s) for s in SCENARIOS if s.key in chosen]
    meta: dict[str, object] = {
        "seeds": seeds,
        "slot_s": args.slot_s,
        "stamp": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seconds": 0.0,
        "tree": _tree(),
    }
    kept: list[RunResult] = []
    if args.append and (args.out / "secagg_live.json").exists():
        old, old_meta = _load(args.out / "secagg_live.json")
        keys = {s.key for s in rows}
        kept = [r for r in old if r.scenario not in keys]
        appended = f"rows {', '.join(sorted(keys))} run later ({meta['stamp']}, --append)"
        meta = {**old_meta, "note": appended}
    import signal

    # SIGTERM as Ctrl-C: the running broker is stopped in `live_run`'s finally
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    results = asyncio.run(_run_all(seeds, rows, args.out, meta, kept))
    sys.stdout.write(_render(args.out, results, meta))
    return 0
