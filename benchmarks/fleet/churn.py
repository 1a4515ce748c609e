"""Issue 23, Done-when 3: churn at scale, side by side with the run without churn.

``python -m benchmarks.fleet.churn [--leaves 1024 --join 100 --retire 50 --repeats N --out DIR]``

Each repeat runs the same depth-2 tree twice, each time on a fresh plain Mosquitto (the
order alternates between repeats): without churn, and with ``--join`` undeclared leaves
joining the open aggregators and ``--retire`` declared leaves retired with forgetting
while the replay goes, in waves at the same phases of the run as measured by the latest
run without churn (`benchmarks.fleet.churn_run` says how). `evaluate` turns the pairs
into the Done-when checks: coverage exact for the kept leaves and none of the retired,
root ``n_samples`` against the kept leaves' accepted readings, the error ratio against the
offline SVD of their rows, agent messages per reading (<= 0.05), and wall time churn /
no churn (<= 1.5; medians over the pairs). Wall time is from the first reading sent to the
first root model whose provenance is exactly the expected one (every kept leaf at its
accepted count, no other leaf). Writes ``<out>/churn.md`` (default ``benchmarks/report``)
and prints it; exit 0 when every check passes.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
from pathlib import Path

from benchmarks.fleet.churn_run import ChurnPlan, RunResult, build_fleet, run_once
from benchmarks.reporting import Check, checks_table, prose, table
from benchmarks.schema import read_result, revive, write_result
from edge_runtime.logs import configure_logging

__all__ = ["MAX_ERROR_RATIO", "MAX_MESSAGES_PER_READING", "MAX_WALL_RATIO", "evaluate", "render"]

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "benchmarks" / "report"
MAX_MESSAGES_PER_READING = 0.05  #: issue 23's bound on agent messages per reading
MAX_WALL_RATIO = 1.5  #: issue 23's bound on wall time, churn / no churn
MAX_ERROR_RATIO = 1.001  #: the bound Done-when 2 sets for the remaining leaves' error ratio


def _median(values: list[float]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(finite) if finite else None


def evaluate(plan: ChurnPlan, pairs: list[tuple[RunResult, RunResult]]) -> list[Check]:
    """Issue 23's churn item as `Check` rows, from ``(no churn, churn)`` pairs (medians
    over the pairs; coverage must hold in every churn run)."""
    churn = [c for _, c in pairs]
    quiet = [q for q, _ in pairs]
    kept = plan.leaves - plan.retire
    exact = all(c.exact and not c.retired_present for c in churn)
    coverage = "; ".join(_coverage(c) for c in churn)
    n_text = "; ".join(f"{c.n_samples} of {sum(c.expected.values())}" for c in churn)
    ratios = [c.error_ratio for c in churn]
    mpr = [c.messages_per_reading for c in churn]
    walls = [c.wall_s / q.wall_s if c.wall_s and q.wall_s else math.nan for q, c in pairs]
    cpus = [c.cpu_s / q.cpu_s if q.cpu_s else math.nan for q, c in pairs]
    m_ratio, m_mpr, m_wall = _median(ratios), _median(mpr), _median(walls)
    return [
        Check(
            f"coverage exact for the kept leaves: {kept} declared + {plan.join} joined, none "
            f"of the {plan.retire} retired",
            coverage or "no run",
            "root provenance == kept leaves' accepted readings",
            bool(churn) and exact,
        ),
        Check(
            "root n_samples vs expected (churn)",
            n_text or "no run",
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
            "n/a"
            if m_mpr is None
            else f"{m_mpr:.4f} ({_list(mpr, '.4f')}; no churn "
            f"{_list([q.messages_per_reading for q in quiet], '.4f')})",
            f"<= {MAX_MESSAGES_PER_READING}",
            None if m_mpr is None else m_mpr <= MAX_MESSAGES_PER_READING,
        ),
        Check(
            "wall time churn / no churn (first reading sent -> exact root model; median of pairs)",
            "n/a"
            if m_wall is None
            else f"{m_wall:.3f} ({_list(walls, '.3f')}); CPU time churn / no churn "
            f"{_fmt(_median(cpus), '.3f')} ({_list(cpus, '.3f')})",
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


def _coverage(run: RunResult) -> str:
    """The coverage cell of one churn run: kept leaves at their exact counts, joined and
    retired leaves the final model names."""
    at_count = sum(run.provenance.get(lf) == n for lf, n in run.expected.items())
    joined = sum(lf in run.provenance for lf in run.joined)
    head = "exact" if run.exact else f"NOT exact ({run.error or 'timeout'})"
    return (
        f"{head}: {at_count} of {len(run.expected)} kept leaves at their counts ({joined} of "
        f"{len(run.joined)} joined); retired named {len(run.retired_present)} of "
        f"{len(run.retired)} (named before the forget: {len(run.retired_seen)})"
    )


def _list(values: list[float], fmt: str) -> str:
    return ", ".join("n/a" if not math.isfinite(v) else format(v, fmt) for v in values)


def _fmt(value: float | None, fmt: str) -> str:
    return "n/a" if value is None or not math.isfinite(value) else format(value, fmt)


def render(plan: ChurnPlan, pairs: list[tuple[RunResult, RunResult]], command: str) -> str:
    """The Markdown of ``churn.md``: checks, one row per run, the last churn run's steps."""
    sites = math.isqrt(plan.leaves - 1) + 1 if plan.leaves > 1 else 1
    rows = []
    for i, pair in enumerate(pairs):
        for r in pair:
            rows.append([
                i + 1, "churn" if r.churn else "no churn", _fmt(r.wall_s, ".2f"),
                f"{r.total_s:.2f}", f"{r.cpu_s:.1f}", f"{r.readings:,}",
                _fmt(r.readings / r.wall_s if r.wall_s else None, ",.0f"),
                f"{r.messages:,} ({r.leaf_messages:,} + {r.messages - r.leaf_messages:,})",
                _fmt(r.messages_per_reading, ".4f"),
                f"{r.n_samples:,} / {sum(r.expected.values()):,}",
                f"{len(r.expected)}{'' if r.exact else ' (not exact)'}",
                f"{sum(lf in r.provenance for lf in r.joined)} / {len(r.joined)}",
                f"{len(r.retired_seen)} / {len(r.retired_present)} / {len(r.retired)}",
                _fmt(r.error_ratio, ".6f"), r.rejects, r.undelivered, r.error or "",
            ])  # fmt: skip
    header = [
        "repeat", "run", "wall s", "total s", "CPU s", "readings", "readings/s",
        "messages (leaves + aggregators)", "msg/reading", "root n_samples / expected",
        "leaves covered", "joined named", "retired named: ever / at end / of", "error ratio",
        "rejects", "undelivered", "error",
    ]  # fmt: skip
    lines = prose(
        "churn", "intro", plan=plan, aggregators=math.ceil(plan.leaves / sites), sites=sites,
        per_wave=plan.retire // max(1, plan.waves),
        checks=checks_table(evaluate(plan, pairs), item="Done-when"), table=table(header, rows),
    )  # fmt: skip
    last = next((c for _, c in reversed(pairs) if c.events), None)
    if last is not None:
        lines += ["Steps of the last churn run:", "", "```", *last.events, "```", ""]
    lines += ["Command:", "", "```", command, "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.fleet.churn``: run, print and write ``churn.md``; exit 0
    when every check passes."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fleet.churn", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--leaves", type=int, default=1024, help="declared leaves (default 1024)")
    parser.add_argument("--join", type=int, default=100, help="undeclared leaves joining (100)")
    parser.add_argument("--retire", type=int, default=50, help="declared leaves retiring (50)")
    parser.add_argument("--readings", type=int, default=200, help="readings per leaf (200)")
    parser.add_argument("--workers", type=int, default=2, help="agent host processes (2)")
    parser.add_argument("--waves", type=int, default=5, help="join and retire waves (5)")
    parser.add_argument(
        "--keepalive", type=int, default=30, help="MQTT keepalive of every client, s (30)"
    )
    parser.add_argument("--repeats", type=int, default=1, help="pairs of runs (medians)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="report folder")
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
    pairs: list[tuple[RunResult, RunResult]] = []
    reference_s = 0.0  # the latest run without churn's wall time (the first pair starts with one)
    for rep in range(args.repeats):
        order = (False, True) if rep % 2 == 0 else (True, False)
        done = {}
        for churn in order:
            done[churn] = asyncio.run(run_once(plan, fleet, churn=churn, reference_s=reference_s))
            if not churn:
                reference_s = done[churn].wall_s or done[churn].total_s
            r = done[churn]
            print(
                f"repeat {rep + 1}/{args.repeats} {'churn' if churn else 'no churn'}: wall "
                f"{_fmt(r.wall_s, '.2f')} s, {r.readings} readings, {r.messages_per_reading:.4f} "
                f"msg/reading, exact {r.exact}, error ratio {r.error_ratio:.6f} {r.error}",
                flush=True,
            )
        pairs.append((done[False], done[True]))
    argv_text = " ".join(sys.argv[1:] if argv is None else argv)
    write_result(
        args.out / "churn.json",
        "churn",
        {"plan": plan, "command": f"python -m benchmarks.fleet.churn {argv_text}".strip()},
        {"pairs": pairs},
        {"wall_s_churn": statistics.median([c.wall_s or math.nan for _, c in pairs])},
    )
    print(render_stored(args.out))
    return 0 if all(c.passed for c in evaluate(plan, pairs)) else 1


def render_stored(out: Path) -> str:
    """Rewrite ``out/churn.md`` from ``out/churn.json``, measuring nothing; the Markdown."""
    doc = read_result(out / "churn.json", "churn")
    plan = revive(ChurnPlan, doc["parameters"]["plan"])
    pairs = revive(list[tuple[RunResult, RunResult]], doc["rows"]["pairs"])
    text = render(plan, pairs, doc["parameters"]["command"])
    (out / "churn.md").write_text(text, encoding="utf-8")
    return text


if __name__ == "__main__":
    sys.exit(main())
