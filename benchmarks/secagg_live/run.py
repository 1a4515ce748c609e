"""``python -m benchmarks secagg-live``: the secure sum per site on Motes light, LIVE (issue 26).

`benchmarks.secagg` computes the site sums in numpy; this runs the runtime: for every seed and
row a fresh Mosquitto on 127.0.0.1 (a free port above 20000), the 11 agents of the Motes light
tree in this process, every leaf's 964 readings published over MQTT, the root's model read from
the broker and scored with `error_ratio` on all 7712 rows, every payload counted by kind
(`benchmarks.secagg_live.live`). Writes ``secagg_live.md``, ``.png`` and ``.json`` (every run)
into ``--out``; ``python -m benchmarks render secagg-live`` redraws the first two from the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.measure import Summary, summarise
from benchmarks.privacy import motes_tree as mt
from benchmarks.registry import REPORT_DIR
from benchmarks.reporting import figure, prose, save_figure, table
from benchmarks.schema import environment, read_result, revive, write_result
from benchmarks.secagg.run import REPORTED, TARGET_CONTINUAL, TARGET_ONE
from benchmarks.secagg_live.live import SECAGG_KINDS, RunResult, Scenario, live_run

_SECAGG = "topologies/motes-secagg.toml"
_CONT = {"blocks": 4, "release_horizon": 4}
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("one-t4", "secure sum, one release per leaf, t = 4 of 4", _SECAGG, threshold=4),
    Scenario("one-t3", "secure sum, one release per leaf, t = 3 of 4", _SECAGG, threshold=3),
    Scenario("cont-t4", "secure sum, continual: 4 blocks of 241, one per slot, H = 4, t = 4",
             _SECAGG, threshold=4, **_CONT),
    Scenario("one-t4-r48", "variant: one release per leaf, t = 4, the sites at rank 48 (every "
             "direction)", _SECAGG, threshold=4, site_rank=48),
    Scenario("cont-t4-r48", "variant: continual, H = 4, t = 4, the sites at rank 48 (every "
             "direction)", _SECAGG, threshold=4, site_rank=48, **_CONT),
    Scenario("today-one", "today's private mode, one release per leaf (motes-light-dpdispca.toml)",
             "topologies/motes-light-dpdispca.toml", secagg=False),
    Scenario("today-cont", "today's private mode, 4 blocks of 241, H = 4 "
             "(motes-light-private.toml)", "topologies/motes-light-private.toml", secagg=False),
)
#: Rows run only with ``--variants`` or ``--only``.
VARIANTS = ("cont-t4-r48",)
#: Offline medians over 20 seeds: secagg.md (the sites keep every direction) and REPORT.md (f).
OFFLINE = {"one-t4": 2.336, "one-t3": 2.480, "cont-t4": 2.716, "one-t4-r48": 2.336,
           "cont-t4-r48": 2.716, "today-one": REPORTED["one"], "today-cont": REPORTED["continual"]}
TARGETS = {"one-t4": TARGET_ONE, "one-t3": TARGET_ONE, "cont-t4": TARGET_CONTINUAL,
           "one-t4-r48": TARGET_ONE, "cont-t4-r48": TARGET_CONTINUAL}
TODAY_RELEASES = {"today-one": 1, "today-cont": 4}  # releases per leaf of today's rows
LEAVES = 8
#: Runs of one (row, seed) at most: an invalid run is run again; every attempt is kept.
ATTEMPTS = 3
FEDERATION = (*SECAGG_KINDS, "snapshot", "model", "status")
KIND_ORDER = ["readings", *FEDERATION]


def per_leaf_slot(r: RunResult, kinds: Sequence[str]) -> float:
    """Payload bytes of ``kinds`` per leaf and per slot (today: per release) of run ``r``."""
    slots = r.slots_released or TODAY_RELEASES.get(r.scenario, 1)
    return sum(r.bytes.get(k, 0) for k in kinds) / (LEAVES * slots)


def _fmt(s: Summary, digits: int = 3) -> str:
    if s.n == 0:
        return "- | -"
    return f"**{s.median:.{digits}f}** | {s.p25:.{digits}f}-{s.p75:.{digits}f}"


def _mid(s: Summary, digits: int = 0) -> str:
    return "-" if s.n == 0 else f"{s.median:,.{digits}f} ({s.p25:,.{digits}f}-{s.p75:,.{digits}f})"


def _check(key: str, ok: Sequence[RunResult]) -> str:
    if not ok:
        return f"{key}: no valid run"
    median = float(np.median([r.error for r in ok]))
    verdict = "met" if median <= TARGETS[key] else "missed"
    return (f"{key} median {median:.3f} against <= {TARGETS[key]:g}: {verdict}"
            f" (offline {OFFLINE[key]:.3f}, n = {len(ok)})")


def markdown(results: Sequence[RunResult], meta: dict) -> str:
    """The Markdown of ``secagg_live.md``; ``meta``: the run's parameters."""
    by = {s.key: [r for r in results if r.scenario == s.key] for s in SCENARIOS}
    shown = [s for s in SCENARIOS if by[s.key]]
    valid = {s.key: [r for r in by[s.key] if r.valid] for s in shown}
    rows = []
    for s in shown:
        ok = valid[s.key]
        target = TARGETS.get(s.key)
        slots = f"({TODAY_RELEASES.get(s.key)} rel./leaf)"
        if s.secagg:
            slots = str(ok[0].slots_released) if ok else "-"
        rows.append([
            s.label, f"{len(ok)}/{len(by[s.key])}", _fmt(summarise([r.error for r in ok])),
            f"{OFFLINE[s.key]:.3f}", "<= " + format(target, "g") if target else "-", slots,
            _mid(summarise([t for r in ok for t in r.slot_seconds]), 2) if s.secagg else "-",
            _mid(summarise([per_leaf_slot(r, SECAGG_KINDS) for r in ok])) if s.secagg else "-",
            _mid(summarise([per_leaf_slot(r, FEDERATION) for r in ok])),
            _mid(summarise([r.latency_s for r in ok]), 2),
        ])
    header = ["row", "n", "median", "IQR", "offline median", "target", "slots per site",
              "time per slot, s (median, IQR)", "secagg bytes / leaf / slot",
              "federation bytes / leaf / slot", "last reading -> root model, s"]
    slot_s, note = float(meta["slot_s"]), meta.get("note", "")
    lines = prose(
        "secagg_live", "intro", seeds=meta["seeds"], stamp=meta["stamp"],
        minutes=float(meta["seconds"]) / 60, tree=meta.get("tree", "unknown"),
        note="; " + note if note else "", slot_s=slot_s, phase=slot_s / 120, attempts=ATTEMPTS,
        table=table(header, rows), checks="; ".join(_check(s.key, valid[s.key]) for s in shown
                                                     if s.key in TARGETS),
    )
    kinds = sorted({k for r in results for k in r.bytes},
                   key=lambda k: (KIND_ORDER.index(k) if k in KIND_ORDER else len(KIND_ORDER), k))

    def cell(ok: list[RunResult], k: str) -> str:
        b = [r.bytes.get(k, 0) for r in ok]
        m = [r.messages.get(k, 0) for r in ok]
        return f"{np.median(b):,.0f} ({np.median(m):.0f})" if ok and any(b) else "-"

    lines.append(table(["row", *kinds], [[s.key, *(cell(valid[s.key], k) for k in kinds)]
                                         for s in shown]))
    lines += prose("secagg_live", "kinds")

    def tries(key: str, seed: int) -> str:
        runs = [x for x in by[key] if x.seed == seed]
        return "; ".join([f"invalid ({x.note})" for x in runs if not x.valid]
                         + [f"{x.error:.3f}" for x in runs if x.valid])

    per_seed = [[seed, *(tries(s.key, seed) for s in shown)]
                for seed in sorted({r.seed for r in results})]
    lines.append(table(["seed", *(s.key for s in shown)], per_seed))
    if previous := meta.get("previous"):
        earlier = [[k, n, f"**{m:.3f}**", f"{p25:.3f}-{p75:.3f}"]
                   for k, (n, m, p25, p75) in previous.get("rows", {}).items()]
        lines += prose("secagg_live", "earlier", what=previous.get("what", ""),
                       table=table(["row", "n", "median", "IQR"], earlier))
    lines += prose("secagg_live", "end", wall=summarise([r.wall_s for r in results]).median)
    return "\n".join(lines)


#: Bytes per leaf and slot by kind in the plot: (label, kinds, colour).
GROUPS = (
    ("secagg keys+roster", ("keys", "roster"), "#9ecae1"),
    ("secagg shares+delivery", ("shares", "delivery"), "#6baed6"),
    ("secagg masked", ("masked",), "#2171b5"),
    ("secagg unmask+unmasked", ("unmask", "unmasked"), "#08519c"),
    ("secagg outcome", ("outcome",), "#c6dbef"),
    ("snapshots+model", ("snapshot", "model"), "tab:gray"),
    ("status", ("status",), "#d9d9d9"),
)


def plot(results: Sequence[RunResult], path: Path) -> Path:
    """Error ratios per row (runs, median, offline median, targets) beside bytes per leaf
    and slot by kind."""
    fig, (ax, bx) = figure(1, 2, figsize=(13, 5.2))
    scenarios = [s for s in SCENARIOS if s.key in {r.scenario for r in results}]
    y = list(range(len(scenarios)))[::-1]
    valid = {s.key: [r for r in results if r.scenario == s.key and r.valid] for s in scenarios}
    for yy, s in zip(y, scenarios, strict=True):
        errs = [r.error for r in valid[s.key]]
        colour = "tab:blue" if s.secagg else "tab:gray"
        jitter = np.linspace(-0.15, 0.15, len(errs)) if errs else []
        ax.scatter(errs, np.full(len(errs), yy) + jitter, s=12, color=colour, alpha=0.6)
        if errs:
            ax.plot([np.median(errs)] * 2, [yy - 0.3, yy + 0.3], color=colour, linewidth=2.5)
        ax.plot([OFFLINE[s.key]] * 2, [yy - 0.3, yy + 0.3], color="k", linestyle=":", linewidth=1.5)
    ax.axvline(TARGET_ONE, color="tab:red", linestyle="--", linewidth=1, label="target 2.4 (one)")
    ax.axvline(TARGET_CONTINUAL, color="tab:orange", linestyle="--", linewidth=1,
               label="target 3.0 (continual)")
    ax.plot([], [], color="tab:blue", linewidth=2.5, label="live median (runs: dots)")
    ax.plot([], [], color="k", linestyle=":", label="offline median")
    ax.set_yticks(y, [s.label for s in scenarios], fontsize=7)
    ax.set_xlabel("root error ratio")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    ax.set_title("Motes light live, 2 sites of 4 leaves, eps 1, delta 1e-5, rank 10", fontsize=9)
    left = np.zeros(len(scenarios))
    for name, kinds, colour in GROUPS:
        vals = [float(np.median([per_leaf_slot(r, kinds) for r in valid[s.key]]))
                if valid[s.key] else 0.0 for s in scenarios]
        bx.barh(y, vals, left=left, color=colour, label=name)
        left += np.asarray(vals)
    bx.set_yticks(y, [s.key for s in scenarios], fontsize=8)
    bx.set_xlabel("payload bytes per leaf per slot (today: per release), median")
    bx.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3)
    bx.set_title("on the wire (readings not shown)", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path, tight=True)


def _load(path: Path) -> tuple[list[RunResult], dict]:
    """The runs and the run's description (``parameters``) of a result file."""
    doc = read_result(path, "secagg-live")
    return revive(list[RunResult], doc["rows"]["runs"]), doc["parameters"]


def _write(out: Path, results: Sequence[RunResult], meta: dict) -> None:
    medians = {s.key: float(np.median(errs)) for s in SCENARIOS
               if (errs := [r.error for r in results if r.scenario == s.key and r.valid])}
    env = {**environment(), "time": meta["stamp"], "commit": meta["tree"]}
    write_result(out / "secagg_live.json", "secagg-live", meta, {"runs": results}, medians, env)


def _render(out: Path, results: Sequence[RunResult], meta: dict) -> str:
    text = markdown(results, meta)
    (out / "secagg_live.md").write_text(text, encoding="utf-8")
    plot(results, out / "secagg_live.png")
    return text


def render(out: Path) -> str:
    """Rewrite ``out/secagg_live.md`` and ``.png`` from ``out/secagg_live.json``; the Markdown."""
    return _render(out, *_load(out / "secagg_live.json"))


async def _run_all(seeds: int, rows: Sequence[Scenario], out: Path, meta: dict,
                   kept: Sequence[RunResult] = ()) -> list[RunResult]:
    """Every (seed, row), seeds outer, written after every run; ``kept``: earlier runs."""
    data = mt.load_motes()
    root = Path(__file__).resolve().parents[2]
    results, base, start = list(kept), float(meta["seconds"]), time.monotonic()
    for seed in range(seeds):
        for scenario in rows:
            for attempt in range(1, ATTEMPTS + 1):
                r = await live_run(scenario, seed, data.x, data.parts, root)
                r.attempt = attempt
                results.append(r)
                state = f"{r.error:.3f}" if r.valid else f"INVALID ({r.note})"
                print(f"[{time.monotonic() - start:6.0f} s] seed {r.seed:2d} {r.scenario:10s} "
                      f"{state}  slots {r.slots_released}  wall {r.wall_s:.1f} s  attempt "
                      f"{r.attempt}", file=sys.stderr, flush=True)
                meta["seconds"] = base + time.monotonic() - start
                _write(out, results, meta)  # a stopped benchmark keeps its runs
                if r.valid:
                    break
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Run, write ``secagg_live.md``, ``.png`` and ``.json`` into ``--out``, print the Markdown."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.secagg_live", description=__doc__)
    p.add_argument("--seeds", type=int, default=20, help="live runs per row (default 20)")
    p.add_argument("--quick", action="store_true", help="2 seeds (a smoke run, about 2 min)")
    p.add_argument("--slot-s", type=float, default=5.0, help="the sites' secagg_slot_s (default 5)")
    p.add_argument("--only", nargs="+", choices=[s.key for s in SCENARIOS], help="some rows")
    p.add_argument("--variants", action="store_true",
                   help=f"also the variant rows {', '.join(VARIANTS)} (about 8 more minutes)")
    p.add_argument("--append", action="store_true",
                   help="keep --out's secagg_live.json runs of the rows not run now (with --only)")
    p.add_argument("--out", type=Path, default=REPORT_DIR, help="report folder")
    args = p.parse_args(argv)
    from edge_runtime.logs import configure_logging

    configure_logging("error")
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = 2 if args.quick else args.seeds
    if seeds < 1 or args.slot_s <= 0:
        p.error("--seeds and --slot-s must be positive")
    chosen = args.only or [s.key for s in SCENARIOS if args.variants or s.key not in VARIANTS]
    rows = [replace(s, slot_s=args.slot_s) for s in SCENARIOS if s.key in chosen]
    commit = environment()["commit"]
    tree = commit.rstrip("+") + (" with uncommitted changes under edge_runtime/"
                                 if commit.endswith("+") else "")
    meta: dict = {"seeds": seeds, "slot_s": args.slot_s, "seconds": 0.0, "tree": tree,
                  "stamp": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    kept: list[RunResult] = []
    if args.append and (args.out / "secagg_live.json").exists():
        old, old_meta = _load(args.out / "secagg_live.json")
        keys = {s.key for s in rows}
        kept = [r for r in old if r.scenario not in keys]
        meta = {**old_meta, "note": f"rows {', '.join(sorted(keys))} run later ({meta['stamp']}, "
                "--append)"}
    # SIGTERM as Ctrl-C: the running broker is stopped in `live_run`'s finally
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    results = asyncio.run(_run_all(seeds, rows, args.out, meta, kept))
    sys.stdout.write(_render(args.out, results, meta))
    return 0
