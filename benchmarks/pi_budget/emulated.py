"""'What a Pi pays' under qemu user-mode emulation: the aarch64 and armhf columns
(``python -m benchmarks pi-budget-emulated [--arch ...] [--quick]``).

The rows of `benchmarks.pi_budget.run` with the agent's Python from the sysroots of
``scripts/arm/sysroot.sh`` (an arch without one is skipped with one line), broker and feeder
native; CPU windows count the work left after them and say whether the agent kept up
(`kept_up`); the long run's rate is lowered when 100/s is too much (`long_rate`). RSS and CPU are
qemu's. Writes ``<out>/pi_budget_emulated.json`` by arch (an arch not measured keeps its entry).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from benchmarks.pi_budget.run import (
    BATCH,
    LEAF_IMPORT,
    ROOT,
    Python,
    cpu_per_reading,
    cpu_s,
    device_env,
    feed,
    import_time,
    payloads,
    rss_after_import,
    rss_mb,
    start_leaf,
    wait_quiet,
)
from benchmarks.registry import REPORT_DIR

ARCHES = ("aarch64", "armhf")
JSON_NAME = "pi_budget_emulated.json"
IMPORT_RUNS = 5
WINDOW_S = 20.0
N_LONG = 10_000
#: Readings/s of the long run, lowered (`long_rate`) when the agent's CPU at 100/s extrapolates
#: above `LONG_CORE_SHARE` of a core.
LONG_RATE = 100.0
LONG_CORE_SHARE = 0.6
#: An agent did not keep up if it used this share of a core over a window, or had more CPU
#: work left after it than the larger of `KEPT_UP_LEFT_S` and this share of the window's.
KEPT_UP_CORE, KEPT_UP_LEFT_S, KEPT_UP_LEFT_SHARE = 0.9, 0.5, 0.05
ROUTES = {True: "PyPI wheels", False: "Debian bookworm packages"}
EMULATED_LABEL = "emulated: qemu's RSS/CPU, includes the translator"
#: The emulated rows (`emulated_columns`), in the report's order, with their terminal names.
ROWS = {
    "import": "import (s)", "rss_start": "RSS after start (MB)",
    "rss_long": "RSS after the long run (MB)", "cpu_1": "CPU per reading at 1/s (ms)",
    "cpu_10": "CPU per reading at 10/s (ms)", "cpu_100": "CPU per reading at 100/s (ms)",
    "cpu_100_batched": f"CPU per reading at 100/s, {BATCH} per message (ms)",
}
ROW_KEYS = tuple(ROWS)
PROBE = ("import json, sys, platform, numpy; print(json.dumps({'python': sys.version.split()[0], "
         "'numpy': numpy.__version__, 'numpy_file': numpy.__file__, "
         "'machine': platform.machine(), 'prefix': sys.prefix}))")


def kept_up(core_share: float, cpu_in: float, cpu_after: float) -> bool:
    """Whether an agent that used ``core_share`` of a core (``cpu_in`` s) while readings
    arrived, and ``cpu_after`` s after they stopped, kept up with them."""
    left = max(KEPT_UP_LEFT_S, KEPT_UP_LEFT_SHARE * cpu_in)
    return core_share < KEPT_UP_CORE and cpu_after <= left


def cache_dir() -> Path:
    """Where ``scripts/arm/sysroot.sh`` keeps its sysroots (the same rule as there)."""
    if "EDGE_ARM_CACHE" in os.environ:
        return Path(os.environ["EDGE_ARM_CACHE"])
    home = os.environ.get("HOME") or os.environ.get("TMPDIR") or "/tmp"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path(home, ".cache")) / "edge-runtime-arm"


def sysroot(arch: str, cache: Path | None = None) -> Path | None:
    """The newest complete sysroot of ``arch`` in the cache (None: none built)."""
    done = sorted((cache or cache_dir()).glob(f"{arch}-*/.complete"),
                  key=lambda p: p.stat().st_mtime)
    return next((m.parent for m in reversed(done) if (m.parent / "venv/bin/python").exists()), None)


def emulated_python(arch: str, root: Path) -> Python:
    """The sysroot's venv Python (the qemu wrapper) with the checkout on ``PYTHONPATH``, plain
    ``python`` with bytecode written, as ``scripts/test-arm.sh`` runs it."""
    env = device_env(deployed=False) | {"PYTHONPATH": str(ROOT)}
    env.pop("VIRTUAL_ENV", None)
    return Python(str(root / "venv" / "bin" / "python"), ROOT, env, "", f"{arch} under qemu")


def probe(python: Python) -> dict:
    """The emulated interpreter's versions and where numpy comes from."""
    info = json.loads(python.run(PROBE).stdout.strip().splitlines()[-1])
    info["route"] = ROUTES[info["numpy_file"].startswith(info["prefix"] + os.sep)]
    return info


def cpu_row(pid: int, port: int, pool: list[bytes], rate: float, window: float,
            batch: int = 1) -> dict:
    """`cpu_per_reading` plus the CPU spent after the window until the agent was quiet."""
    row = cpu_per_reading(pid, port, pool, rate, window, batch)
    c0, t0 = cpu_s(pid), time.perf_counter()
    wait_quiet(pid)
    left, core = cpu_s(pid) - c0, row["cpu_s"] / row["window_s"]
    return row | {"cpu_window_s": row["cpu_s"], "cpu_after_s": left,
                  "quiet_after_s": time.perf_counter() - t0, "cpu_s": row["cpu_s"] + left,
                  "ms_per_reading": (row["cpu_s"] + left) / row["n"] * 1000, "core_share": core,
                  "kept_up": kept_up(core, row["cpu_s"], left)}


def long_rate(cpu: list[dict]) -> tuple[float, str]:
    """`LONG_RATE`, or lower when the 100/s row (one reading per message) extrapolates above
    `LONG_CORE_SHARE` of a core (rounded down to 1, 2 or 5 x 10^k), with why."""
    row = next(c for c in cpu if c["rate"] == 100.0 and c["batch"] == 1)
    sustainable = LONG_CORE_SHARE / (row["ms_per_reading"] / 1000)
    if sustainable >= LONG_RATE and row["kept_up"]:
        return LONG_RATE, f"{LONG_RATE:g}/s (the 100/s row kept up)"
    top = max(sustainable, 1.0)
    exp = 10 ** math.floor(math.log10(top))
    rate = min(max(m * exp for m in (1, 2, 5) if m * exp <= top), LONG_RATE / 2)
    return rate, (f"{rate:g}/s: at 100/s the agent used {row['core_share']:.0%} of a core over the "
                  f"window and had {row['cpu_after_s']:.2f} s of CPU work left after it "
                  f"({row['ms_per_reading']:.2f} ms per reading): it did not keep up with 100/s on "
                  "this shared machine")


def measure_arch(arch: str, root: Path, quick: bool) -> dict:
    from edge_runtime.broker import LocalMosquitto

    python, t_start = emulated_python(arch, root), time.perf_counter()
    versions = root / "versions.txt"
    lines = versions.read_text().splitlines() if versions.exists() else []
    qemu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("qemu:")), "")
    if os.environ.get("EDGE_ARM_CPU"):
        qemu += f" (EDGE_ARM_CPU={os.environ['EDGE_ARM_CPU']})"
    info, runs = probe(python), 2 if quick else IMPORT_RUNS
    res: dict = {"arch": arch, "sysroot": str(root), "qemu": qemu,
                 **{k: info[k] for k in ("python", "numpy", "route", "machine")},
                 "load": Path("/proc/loadavg").read_text().split()[:3], "import_runs": runs,
                 "leaf_import": LEAF_IMPORT}
    print(f"pi_budget.emulated: {arch}: import times ({runs} runs)", file=sys.stderr)
    res["import_s"], res["import_cpu_s"] = import_time(python, LEAF_IMPORT, runs)
    res["import_numpy_s"], res["import_numpy_cpu_s"] = import_time(python, "numpy", runs)
    res["rss_python_mb"] = rss_after_import(python, None)
    res["rss_import_mb"] = rss_after_import(python, LEAF_IMPORT)
    window, n_long = (10.0, 2_000) if quick else (WINDOW_S, N_LONG)
    with LocalMosquitto() as broker:
        assert broker.port is not None
        print(f"pi_budget.emulated: {arch}: the agent", file=sys.stderr)
        t0 = time.perf_counter()
        leaf = start_leaf(broker, python)
        try:
            pid, port = leaf.pid, broker.port
            res["start_s"] = time.perf_counter() - t0 - 0.5
            res["rss_start_mb"] = rss_mb(pid)
            res["threads_start"] = psutil.Process(pid).num_threads()
            pool = payloads(1000)
            cpu = [cpu_row(pid, port, pool, r, window) for r in (1.0, 10.0, 100.0)]
            cpu.append(cpu_row(pid, port, payloads(100, batch=BATCH), 100.0, window, BATCH))
            res |= {"cpu": cpu, "window_s": window}
            rate, why = long_rate(cpu)
            print(f"pi_budget.emulated: {arch}: {n_long} readings at {rate:g}/s", file=sys.stderr)
            res["rss_before_long_mb"] = rss_mb(pid)
            c0 = cpu_s(pid)
            elapsed = asyncio.run(feed(port, pool, n_long, rate))
            c1, t1 = cpu_s(pid), time.perf_counter()
            wait_quiet(pid)
            left = cpu_s(pid) - c1
            res["n_long"] = n_long
            res["long"] = {"n": n_long, "rate": rate, "rate_why": why, "elapsed_s": elapsed,
                           "core_share": (c1 - c0) / elapsed, "cpu_after_s": left,
                           "quiet_after_s": time.perf_counter() - t1,
                           "kept_up": kept_up((c1 - c0) / elapsed, c1 - c0, left)}
            res["rss_long_mb"] = rss_mb(pid)
            if leaf.proc.poll() is not None:
                raise RuntimeError("agent exited:\n" + leaf.text()[-3000:])
        finally:
            leaf.stop()
    res["measure_s"] = time.perf_counter() - t_start
    return res


def emulated_columns(res: dict) -> dict[str, str]:
    """One arch's entry as the report's cells, keyed by `ROW_KEYS` (s, MB, ms per reading)."""
    cpu = {(c["rate"], c["batch"]): c for c in res["cpu"]}
    long = res.get("long", {})
    at = f" at {long['rate']:g}/s" if "rate" in long else ""
    cells = {
        "import": f"{res['import_s']:.2f} (CPU {res['import_cpu_s']:.2f}; numpy alone "
                  f"{res['import_numpy_s']:.2f}, CPU {res['import_numpy_cpu_s']:.2f})",
        "rss_start": f"{res['rss_start_mb']:.1f} (qemu's)",
        "rss_long": f"{res['rss_long_mb']:.1f} ({res['rss_long_mb'] - res['rss_start_mb']:+.1f}; "
                    f"{res['n_long']:,} readings{at}"
                    f"{'' if long.get('kept_up', True) else ', did not keep up'}; qemu's)",
    }
    for key, rate, batch in [("cpu_1", 1.0, 1), ("cpu_10", 10.0, 1), ("cpu_100", 100.0, 1),
                             ("cpu_100_batched", 100.0, BATCH)]:
        if (c := cpu.get((rate, batch))) is None:
            cells[key] = "-"
            continue
        lag = "" if c.get("kept_up", True) else ", did not keep up"
        window = f"{c['window_s']:.0f} s, " if "window_s" in c else ""
        cells[key] = f"{c['ms_per_reading']:.2f} ({window}{c['n']:,} readings{lag}; qemu's)"
    return cells


def emulated_notes(data: dict) -> list[str]:
    """Lines (Markdown bullets) under the report's table for the emulated columns."""
    lines = [
        "- aarch64 / armhf columns: `python -m benchmarks.pi_budget.emulated` (JSON: "
        f"`benchmarks/report/{JSON_NAME}`), the agent's Python under qemu user-mode emulation, "
        f"broker and feeder native. {EMULATED_LABEL}: VmRSS counts the emulator and its "
        "translated-code cache, utime + stime the translation. No timing claims for real "
        "Raspberry Pi hardware.",
    ]
    for arch, res in data.items():
        long, before = res.get("long", {}), res.get("rss_before_long_mb", math.nan)
        lines.append(
            f"- {arch} (emulated): Python {res['python']}, numpy {res['numpy']} ({res['route']}), "
            f"{res.get('qemu', 'qemu')}; import: median of {res.get('import_runs', '?')} runs, CPU "
            f"time {res.get('import_cpu_s', math.nan):.2f} s; CPU windows of "
            f"{res.get('window_s', math.nan):g} s plus the work left after them; the long run: "
            f"{res['n_long']:,} readings (not 10^5) at {long.get('rate_why', '?')}, "
            f"{'kept up' if long.get('kept_up') else 'did not keep up'}; VmRSS before it (after "
            f"the CPU windows): {before:.1f} MB, so the long run itself added "
            f"{res['rss_long_mb'] - before:+.1f} MB; VmRSS of `python -c pass` under qemu: "
            f"{res.get('rss_python_mb', math.nan):.1f} MB. Load average at the start: "
            f"{' '.join(res.get('load', ['?']))} on a shared machine: the import row varies "
            "between runs."
        )
    return lines


def load(path: Path | None = None) -> dict:
    """The JSON (an empty object when it was never written)."""
    path = path or REPORT_DIR / JSON_NAME
    return json.loads(path.read_text()) if path.exists() else {}


def summary(data: dict) -> str:
    """A Markdown table, quantity x arch, for the terminal."""
    cols = {arch: emulated_columns(res) for arch, res in data.items()}
    lines = ["| quantity | " + " | ".join(f"{a} (emulated)" for a in data) + " |",
             "|---" * (len(data) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(cols[a][k] for a in data) + " |"
              for k, name in ROWS.items()]
    return "\n".join([*lines, "", *emulated_notes(data)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.pi_budget.emulated", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", nargs="+", choices=ARCHES, default=list(ARCHES))
    p.add_argument("--out", type=Path, default=REPORT_DIR)
    p.add_argument("--quick", action="store_true", help="10 s windows, 2,000 readings, 2 imports")
    args = p.parse_args(argv)
    path = args.out / JSON_NAME
    data, measured = load(path), False
    for arch in args.arch:
        if (root := sysroot(arch)) is None:
            print(f"pi_budget.emulated: {arch} skipped: no sysroot in {cache_dir()} "
                  f"(scripts/arm/sysroot.sh {arch} builds it)")
            continue
        try:
            emulated_python(arch, root).run("pass")
        except (OSError, subprocess.CalledProcessError) as exc:  # noexec cache, seccomp, ...
            print(f"pi_budget.emulated: {arch} skipped: its Python does not start ({exc})")
            continue
        data[arch], measured = measure_arch(arch, root, args.quick), True
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    data = {arch: data[arch] for arch in (*ARCHES, *data) if arch in data}
    if data:
        print(summary(data))
    if measured:
        print(f"\nwritten: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
