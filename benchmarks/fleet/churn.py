"""Churn at scale against the same run without churn, each on a fresh plain Mosquitto.

``python -m benchmarks.fleet.churn [--leaves 1024 --join 100 --retire 50 --repeats N --out DIR]``

Each repeat runs the tree without churn and with (`benchmarks.fleet.churn_run`), the order
alternating; `evaluate` makes the checks (medians over the pairs): coverage exact for the
kept leaves and none of the retired, root ``n_samples``, the error ratio against the offline
SVD of their rows, agent messages per reading and wall time churn / no churn (first reading
sent -> first exact root model). Writes ``<out>/churn.json`` and ``churn.md``; exit 0 when
every check passes.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
from pathlib import Path

from benchmarks.fleet.churn_run import ChurnPlan, RunResult, build_fleet, run_once
from benchmarks.measure import median_of
from benchmarks.registry import REPORT_DIR
from benchmarks.reporting import Check, checks_table, number, prose, table
from benchmarks.schema import read_result, revive, write_result
from edge_runtime.logs import configure_logging

__all__ = ["MAX_ERROR_RATIO", "MAX_MESSAGES_PER_READING", "MAX_WALL_RATIO", "evaluate", "render"]

MAX_MESSAGES_PER_READING = 0.05  #: bound on agent messages per reading
MAX_WALL_RATIO = 1.5  #: bound on wall time, churn / no churn
MAX_ERROR_RATIO = 1.001  #: bound on the kept leaves' error ratio
Pairs = list[tuple[RunResult, RunResult]]  # (no churn, churn)


def _list(values: list[float], fmt: str) -> str:
    return ", ".join(number(v, fmt) for v in values)


def _coverage(run: RunResult) -> str:
    """Kept leaves at their exact counts, joined and retired leaves the final model names."""
    at_count = sum(run.provenance.get(lf) == n for lf, n in run.expected.items())
    joined = sum(lf in run.provenance for lf in run.joined)
    head = "exact" if run.exact else f"NOT exact ({run.error or 'timeout'})"
    return (
        f"{head}: {at_count} of {len(run.expected)} kept leaves at their counts ({joined} of "
        f"{len(run.joined)} joined); retired named {len(run.retired_present)} of "
        f"{len(run.retired)} (named before the forget: {len(run.retired_seen)})"
    )


def evaluate(plan: ChurnPlan, pairs: Pairs) -> list[Check]:
    """The churn Done-when items from ``(no churn, churn)`` pairs (medians over the pairs;
    coverage must hold in every churn run)."""
    quiet, churn = [q for q, _ in pairs], [c for _, c in pairs]
    ratios, mpr = [c.error_ratio for c in churn], [c.messages_per_reading for c in churn]
    walls = [c.wall_s / q.wall_s if c.wall_s and q.wall_s else math.nan for q, c in pairs]
    cpus = [c.cpu_s / q.cpu_s if q.cpu_s else math.nan for q, c in pairs]
    m_ratio, m_mpr, m_wall = median_of(ratios), median_of(mpr), median_of(walls)
    quiet_mpr = _list([q.messages_per_reading for q in quiet], ".4f")
    return [
        Check(
            f"coverage exact for the kept leaves: {plan.leaves - plan.retire} declared + "
            f"{plan.join} joined, none of the {plan.retire} retired",
            "; ".join(_coverage(c) for c in churn) or "no run",
            "root provenance == kept leaves' accepted readings",
            bool(churn) and all(c.exact and not c.retired_present for c in churn),
        ),
        Check(
            "root n_samples vs expected (churn)",
            "; ".join(f"{c.n_samples} of {sum(c.expected.values())}" for c in churn) or "no run",
            "equal",
            bool(churn) and all(c.n_samples == sum(c.expected.values()) for c in churn),
        ),
        Check(
            "error ratio vs offline SVD of the kept rows (churn; median)",
            "n/a" if m_ratio is None else f"{m_ratio:.6f} ({_list(ratios, '.6f')})",
            f"<= {MAX_ERROR_RATIO}",
            None if m_ratio is None else m_ratio <= MAX_ERROR_RATIO,
        ),
        Check(
            "agent messages per reading (churn; median)",
            "n/a" if m_mpr is None else f"{m_mpr:.4f} ({_list(mpr, '.4f')}; no churn {quiet_mpr})",
            f"<= {MAX_MESSAGES_PER_READING}",
            None if m_mpr is None else m_mpr <= MAX_MESSAGES_PER_READING,
        ),
        Check(
            "wall time churn / no churn (first reading sent -> exact root model; median of pairs)",
            "n/a" if m_wall is None else f"{m_wall:.3f} ({_list(walls, '.3f')}); CPU time churn "
            f"/ no churn {number(median_of(cpus), '.3f')} ({_list(cpus, '.3f')})",
            f"<= {MAX_WALL_RATIO}",
            None if m_wall is None else m_wall <= MAX_WALL_RATIO,
        ),
        Check(
            "control: the run without churn covers its 1 x k leaves exactly",
            "; ".join("exact" if q.exact else f"not exact ({q.error or 'timeout'})" for q in quiet),
            "exact",
            bool(quiet) and all(q.exact for q in quiet),
        ),
    ]


#: (header, cell) of the table of runs.
COLUMNS = [
    ("run", lambda r: "churn" if r.churn else "no churn"),
    ("wall s", lambda r: number(r.wall_s, ".2f")),
    ("total s", lambda r: f"{r.total_s:.2f}"),
    ("CPU s", lambda r: f"{r.cpu_s:.1f}"),
    ("readings", lambda r: f"{r.readings:,}"),
    ("readings/s", lambda r: number(r.readings / r.wall_s if r.wall_s else None, ",.0f")),
    ("messages (leaves + aggregators)",
     lambda r: f"{r.messages:,} ({r.leaf_messages:,} + {r.messages - r.leaf_messages:,})"),
    ("msg/reading", lambda r: number(r.messages_per_reading, ".4f")),
    ("root n_samples / expected", lambda r: f"{r.n_samples:,} / {sum(r.expected.values()):,}"),
    ("leaves covered", lambda r: f"{len(r.expected)}{'' if r.exact else ' (not exact)'}"),
    ("joined named", lambda r: f"{sum(lf in r.provenance for lf in r.joined)} / {len(r.joined)}"),
    ("retired named: ever / at end / of",
     lambda r: f"{len(r.retired_seen)} / {len(r.retired_present)} / {len(r.retired)}"),
    ("error ratio", lambda r: number(r.error_ratio, ".6f")),
    ("rejects", lambda r: r.rejects),
    ("undelivered", lambda r: r.undelivered),
    ("error", lambda r: r.error or ""),
]  # fmt: skip


def render(plan: ChurnPlan, pairs: Pairs, command: str) -> str:
    """The Markdown of ``churn.md``: checks, one row per run, the last churn run's steps."""
    sites = math.isqrt(plan.leaves - 1) + 1 if plan.leaves > 1 else 1
    rows = [[i + 1, *(cell(r) for _, cell in COLUMNS)] for i, p in enumerate(pairs) for r in p]
    lines = prose(
        "churn", "intro", plan=plan, aggregators=math.ceil(plan.leaves / sites), sites=sites,
        per_wave=plan.retire // max(1, plan.waves),
        checks=checks_table(evaluate(plan, pairs), item="Done-when"),
        table=table(["repeat", *(h for h, _ in COLUMNS)], rows),
    )  # fmt: skip
    if (last := next((c for _, c in reversed(pairs) if c.events), None)) is not None:
        lines += ["Steps of the last churn run:", "", "```", *last.events, "```", ""]
    return "\n".join([*lines, "Command:", "", "```", command, "```", ""])


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.fleet.churn``: run, print and write ``churn.md``; exit 0
    when every check passes."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet.churn")
    for flag, default, text in (
        ("leaves", 1024, "declared leaves"), ("join", 100, "undeclared leaves joining"),
        ("retire", 50, "declared leaves retiring"), ("readings", 200, "readings per leaf"),
        ("workers", 2, "agent host processes"), ("waves", 5, "join and retire waves"),
        ("keepalive", 30, "MQTT keepalive of every client, s"),
        ("repeats", 1, "pairs of runs (medians)"),
    ):  # fmt: skip
        parser.add_argument(f"--{flag}", type=int, default=default, help=f"{text} ({default})")
    parser.add_argument("--out", type=Path, default=REPORT_DIR, help="report folder")
    args = parser.parse_args(argv)
    try:
        plan = ChurnPlan(
            leaves=args.leaves, join=args.join, retire=args.retire,
            readings_per_leaf=args.readings, workers=args.workers, waves=args.waves,
            keepalive_s=args.keepalive,
        )  # fmt: skip
        fleet = build_fleet(plan)
    except ValueError as exc:
        parser.error(str(exc))  # one line, exit 2
    configure_logging("warning")
    pairs: Pairs = []
    reference_s = 0.0  # the latest run without churn's wall time (the first pair starts with one)
    for rep in range(args.repeats):
        done = {}
        for churn in (False, True) if rep % 2 == 0 else (True, False):
            run = run_once(plan, fleet, churn=churn, reference_s=reference_s)
            r = done[churn] = asyncio.run(run)
            reference_s = reference_s if churn else r.wall_s or r.total_s
            print(
                f"repeat {rep + 1}/{args.repeats} {'churn' if churn else 'no churn'}: wall "
                f"{number(r.wall_s, '.2f')} s, {r.readings} readings, {r.messages_per_reading:.4f} "
                f"msg/reading, exact {r.exact}, error ratio {r.error_ratio:.6f} {r.error}",
                flush=True,
            )
        pairs.append((done[False], done[True]))
    argv_text = " ".join(sys.argv[1:] if argv is None else argv)
    command = f"python -m benchmarks.fleet.churn {argv_text}".strip()
    wall = statistics.median([c.wall_s or math.nan for _, c in pairs])
    write_result(args.out / "churn.json", "churn", {"plan": plan, "command": command},
                 {"pairs": pairs}, {"wall_s_churn": wall})  # fmt: skip
    print(render_stored(args.out))
    return 0 if all(c.passed for c in evaluate(plan, pairs)) else 1


def render_stored(out: Path) -> str:
    """Rewrite ``out/churn.md`` from ``out/churn.json``, measuring nothing; the Markdown."""
    doc = read_result(out / "churn.json", "churn")
    plan = revive(ChurnPlan, doc["parameters"]["plan"])
    pairs = revive(Pairs, doc["rows"]["pairs"])
    text = render(plan, pairs, doc["parameters"]["command"])
    (out / "churn.md").write_text(text, encoding="utf-8")
    return text


if __name__ == "__main__":
    sys.exit(main())
