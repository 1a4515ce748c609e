"""``python -m benchmarks acceptance --seeds 20``: the deployment as documented
(`acceptance.scenario`: secured Mosquitto, one ``edge-runtime agent`` process per node, ``replay``
of Motes light) under seeded fault schedules, seeds ``0 .. N-1`` interleaved over three replay
rates, plus one run without faults per rate. After every run it rewrites ``acceptance.md`` and
``acceptance.json`` in ``--out``; a failing run's directory is kept in ``acceptance-failures/``.
Exit status 0 when every run passed.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import acceptance.scenario as acc
from benchmarks.measure import median_of
from benchmarks.reporting import number, prose
from benchmarks.schema import read_result, write_result

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_OUT = ROOT / "benchmarks" / "report"
HARNESS = (
    "acceptance/__init__.py", "acceptance/faults.py", "acceptance/scenario.py",
    "benchmarks/acceptance.py", "benchmarks/reporting.py", "benchmarks/templates/acceptance.md",
)  # fmt: skip
"""Copied from the working tree into the archive of ``--commit``: the harness that runs."""
DEFAULT_RATES = "max,1000,100"


def parse_rates(text: str) -> list[float | None]:
    words = [w.strip().lower() for w in text.split(",")]
    return [None if w in ("max", "fast", "none") else float(w) for w in words]


def rate_label(rate: float | None) -> str:
    return "max" if rate is None else f"{rate:g}/s"


def _fmt(x: float | None, nd: int = 1) -> str:
    return number(x, f".{nd}f", missing="-")


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.rstrip("\n")
    except (OSError, subprocess.SubprocessError):
        return "?"


def environment(args: argparse.Namespace) -> dict[str, str]:
    dirty = [line[3:] for line in _git("status", "--porcelain").splitlines() if line[:2] != "??"]
    try:
        mosquitto = subprocess.run(
            [acc.find_mosquitto(), "-h"], capture_output=True, text=True, timeout=10
        ).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        mosquitto = "?"
    return {
        "started": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m benchmarks.acceptance " + " ".join(sys.argv[1:]),
        "runtime": (
            f"commit {snapshot[:10]} (a git archive of it, with this harness: "
            f"{', '.join(HARNESS)}; the working tree is not used)"
            if (snapshot := os.environ.get("EDGE_ACCEPTANCE_COMMIT"))
            else f"working tree at {_git('rev-parse', '--short', 'HEAD')}, uncommitted "
            f"changes in: {', '.join(dirty) or 'none'}"
        ),
        "machine": f"{os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "broker": mosquitto,
    }


def kinds_of(run: dict) -> list[str]:
    return sorted({f["kind"] for f in run["faults"]})


SCENARIO = "acceptance/scenario.py"
"""Where the scenario lives; a stored run without a ``scenario`` parameter was made before it
moved there, by ``tests/acceptance.py``."""


def write_report(out: Path, env: dict[str, str], runs: list[dict], parameters: dict) -> None:
    """Write ``out/acceptance.json`` and ``out/acceptance.md``; ``parameters`` holds
    ``planned_runs`` and (runs made since the scenario moved) ``scenario``."""
    planned = int(parameters["planned_runs"])
    rates = list(dict.fromkeys(r["rate_label"] for r in runs))
    medians = {
        f"passed at {rate}": sum(r["passed"] for r in at) / len(at)
        for rate in rates
        if (at := [r for r in runs if r["rate_label"] == rate])
    }
    write_result(out / "acceptance.json", "acceptance", parameters, {"runs": runs}, medians, env)
    scenario = parameters.get("scenario", "tests/acceptance.py")
    faulted = [r for r in runs if r["faults"]]
    baseline = [r for r in runs if not r["faults"]]
    lines = prose(
        "acceptance", "intro", scenario=scenario, angle=acc.SAME_ANGLE_RAD,
        rtol=acc.SAME_ERROR_RTOL, done=len(runs), planned=planned,
        environment="\n".join(f"| {k} | {v} |" for k, v in env.items()),
    )  # fmt: skip
    for rate in rates:
        rs = [r for r in faulted if r["rate_label"] == rate]
        base = [r for r in baseline if r["rate_label"] == rate]
        passes = sum(r["passed"] for r in rs)
        replay = [r["replay_s"] for r in rs]
        resent = [r["replay_summary"].get("resent") for r in rs]
        base_text = (
            ", ".join(f"{'yes' if b['passed'] else 'NO'}, {_fmt(b['replay_s'])}" for b in base)
            or "-"
        )
        lines.append(
            f"| {rate} | **{passes} / {len(rs)}** | {_fmt(median_of(replay))} / "
            f"{_fmt(max((x for x in replay if x is not None), default=None))} | "
            f"{_fmt(median_of([r['model_s'] for r in rs]))} | "
            f"{_fmt(median_of([r['total_s'] for r in rs]))} | {_fmt(median_of(resent), 0)} | "
            f"{base_text} |"
        )
    kinds = [k for k in acc.KINDS if any(k in kinds_of(r) for r in faulted)]
    lines += [
        *prose("acceptance", "kinds"),
        "| fault kind | " + " | ".join(rates) + " |",
        "| --- | " + " | ".join("---" for _ in rates) + " |",
    ]
    for kind in kinds:
        cells = []
        for rate in rates:
            rs = [r for r in faulted if r["rate_label"] == rate and kind in kinds_of(r)]
            replay = _fmt(median_of([r["replay_s"] for r in rs]))
            cells.append(f"{sum(r['passed'] for r in rs)} / {len(rs)} ({replay})" if rs else "-")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    noop = [r for r in faulted if any("already exited" in n for n in r.get("notes", []))]
    failed = [r for r in runs if not r["passed"]]
    model = ("model differs", "error ratio")
    model_only = [r for r in failed if all(f.startswith(model) for f in r["failures"])]
    worst = max((r["angle_rad"] or 0.0 for r in model_only), default=0.0)
    ratio = max(
        (abs(r["error_ratio"] / r["reference_error_ratio"] - 1) for r in model_only),
        default=0.0,
    )
    lines += prose(
        "acceptance", "noop", noop=len(noop),
        rates=", ".join(sorted({r["rate_label"] for r in noop})) or "none",
        failed=len(failed), model_only=len(model_only), worst=worst, ratio=ratio,
    )  # fmt: skip
    if not failed:
        lines.append("None.")
    for r in failed:
        faults = ", ".join(
            f"{f['kind']}{'(' + f['node'] + ')' if f['node'] else ''}@{f['at_s']:.1f}s"
            for f in r["faults"]
        )
        why = " | ".join(r["failures"])[:1500].replace("\n", " ")
        restored = "; ".join(r.get("restores", [])) or "not recorded"
        lines.append(
            f"- seed {r['seed']}, rate {r['rate_label']}, faults [{faults}]: {why} "
            f"(restores: {restored}; logs: `{r['kept'] or r['work']}`)"
        )
    (out / "acceptance.md").write_text("\n".join(lines) + "\n")


async def main_async(args: argparse.Namespace) -> int:
    out = Path(args.out)
    rates = parse_rates(args.rates)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    scratch = Path(tempfile.mkdtemp(prefix="edge-acceptance-"))
    env = environment(args)
    deployment = acc.motes_deployment(scratch / "deployment")
    plan = [*([] if args.no_baseline else [(None, r) for r in rates]),
            *[(seed, r) for seed in seeds for r in rates]]  # fmt: skip
    runs: list[dict] = []
    planned = len(plan)
    if args.append and (previous := out / "acceptance.json").exists():  # more seeds
        earlier = read_result(previous, "acceptance")
        runs = list(earlier["rows"]["runs"])
        planned += int(earlier["parameters"]["planned_runs"])
        env = {**earlier["environment"], f"appended ({env['started']})": env["command"]}
    t_start = time.monotonic()
    try:
        for i, (seed, rate) in enumerate(plan):
            if args.deadline_s and time.monotonic() - t_start > args.deadline_s:
                print(f"deadline of {args.deadline_s:g} s reached: {len(plan) - i} runs not done")
                break
            window = acc.expected_window_s(deployment, rate)
            faults = [] if seed is None else acc.schedule(
                seed, deployment.topology, window, n_faults=args.faults_per_run
            )  # fmt: skip
            work = scratch / f"run-{i:03d}"
            result = await acc.run_scenario(deployment, work, rate=rate, faults=faults, seed=seed)
            row = {**result.to_json(), "rate_label": rate_label(rate), "kept": None}
            if result.passed:
                shutil.rmtree(work, ignore_errors=True)
            else:
                name = f"seed{seed}-{rate_label(rate).replace('/', '')}-{i:03d}"
                dest = out / "acceptance-failures" / name
                shutil.rmtree(dest, ignore_errors=True)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(work), dest)
                row["kept"] = str(dest)
            runs.append(row)
            print(f"[{i + 1}/{len(plan)}] {acc.describe(result)}", flush=True)
            write_report(out, env, runs, {"planned_runs": planned, "scenario": SCENARIO})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0 if runs and all(r["passed"] for r in runs) else 1


def in_snapshot(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Run this benchmark again in a ``git archive`` of ``--commit`` (default HEAD), with
    ``PYTHONPATH`` pointing there, so every agent process of every run imports one fixed
    version of the runtime even while the working tree changes."""
    commit = _git("rev-parse", args.commit).strip()
    snapshot = Path(tempfile.mkdtemp(prefix="edge-acceptance-src-"))
    try:
        archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True,
                                 check=True, timeout=120).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(snapshot)], input=archive, check=True)
        for harness in HARNESS:  # this version of the harness, whatever the commit's
            (snapshot / harness).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / harness, snapshot / harness)
        env = {**os.environ, "PYTHONPATH": str(snapshot), "EDGE_ACCEPTANCE_COMMIT": commit}
        command = [sys.executable, "-m", "benchmarks.acceptance", *argv, "--in-place"]
        child = subprocess.Popen(command, cwd=snapshot, env=env)
        try:
            return child.wait()
        except BaseException:  # Ctrl-C / SIGTERM: let the child stop its processes first
            child.send_signal(signal.SIGINT)
            child.wait(60)
            raise
    finally:
        shutil.rmtree(snapshot, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.acceptance", description=__doc__)
    add = parser.add_argument
    add("--seeds", type=int, default=20, help="fault schedules per rate")
    add("--first-seed", type=int, default=0)
    add("--rates", default=DEFAULT_RATES,
        help="comma-separated readings/s, 'max' = no --rate (default %(default)s)")
    add("--faults-per-run", type=int, default=2)
    add("--no-baseline", action="store_true", help="no run without faults")
    add("--deadline-s", type=float, default=0.0, help="start no run after this many seconds")
    add("--out", default=str(DEFAULT_OUT))
    add("--append", action="store_true",
        help="add these runs to <out>/acceptance.json's (e.g. more seeds: --first-seed)")
    add("--commit", default="HEAD", help="the committed runtime to run (default %(default)s)")
    add("--in-place", action="store_true",
        help="run the working tree as it is instead of a git archive of --commit")
    args = parser.parse_args(argv)
    if args.seeds < 0 or args.faults_per_run < 1:
        parser.error("--seeds must be >= 0 and --faults-per-run >= 1")
    args.out = str(Path(args.out).resolve())
    if not args.in_place:
        argv = [a for a in argv if a != "--in-place"]
        return in_snapshot(args, [*argv, "--out", args.out])
    signal.signal(signal.SIGTERM, _interrupt)
    return asyncio.run(main_async(args))


def render(out: Path) -> None:
    """Rewrite ``out/acceptance.md`` from ``out/acceptance.json``, measuring nothing."""
    doc = read_result(out / "acceptance.json", "acceptance")
    write_report(out, doc["environment"], doc["rows"]["runs"], doc["parameters"])


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: the current run's processes are stopped in its ``finally``."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    raise SystemExit(main())
