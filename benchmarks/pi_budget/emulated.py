"""'What a Pi pays' under qemu user-mode emulation: the aarch64 and armhf columns.

``python -m benchmarks.pi_budget.emulated [--arch aarch64 armhf] [--quick] [--out DIR]``
measures what `benchmarks.pi_budget.run` measures natively, with the leaf agent's Python
emulated: the sysroots of ``scripts/arm/sysroot.sh`` (bookworm's python3.11 under
``qemu-ARCH-static``; aarch64 with numpy/msgpack as PyPI's manylinux wheels in a venv, armhf
with Debian's python3-numpy and python3-msgpack, as ``scripts/test-arm.sh`` runs them), the
package from this checkout on ``PYTHONPATH``. The broker (`LocalMosquitto`) and the feeder
are native. An arch whose sysroot is not in the cache is skipped with one line
(``scripts/arm/sysroot.sh ARCH`` builds it; nothing is built or downloaded here). The arches
run one after the other.

Measured per arch, with run.py's functions (`import_time`, `rss_after_import`, `Leaf`,
`payloads`, `feed`, `cpu_per_reading`, `rss_mb`, `cpu_s`, `wait_quiet`):

- import time: median of ``python -c 'import <run.LEAF_IMPORT>'`` minus ``python -c pass``
  (5 runs, 2 with ``--quick``, one warm-up each), wall and CPU time; numpy alone beside it;
- RSS after start: VmRSS of the agent 0.5 s after it logged ``connected``;
- CPU per reading at 1, 10 and 100 readings/s (and 100/s as 10 readings per message):
  CPU over a 20 s window (10 s with ``--quick``) plus any work left after it (until the
  agent is quiet), divided by the readings sent; whether the agent kept up is recorded
  (its CPU over the window below 90 % of a core, and the work left after it under 0.5 s of
  CPU or 5 % of the window's, whichever is more: a bounded backlog, not a growing one);
- RSS after 10^4 readings (2,000 with ``--quick``), not 10^5: one reading per message at
  `long_rate` (100/s unless the 100/s window showed the agent could not sustain it), read
  once the agent is quiet; the run records whether the agent kept up.

Under user-mode emulation the agent's process is qemu's: its VmRSS includes the emulator and
its translated-code cache, its utime + stime the translation. These are emulated numbers:
no timing claims for real Raspberry Pi hardware, and the machine is shared.

Writes ``<out>/pi_budget_emulated.json`` (default ``benchmarks/report``), an object keyed by
arch (an arch measured before and not now keeps its entry), each with ``import_s``,
``import_numpy_s``, ``rss_start_mb``, ``rss_long_mb``, ``n_long``, ``cpu`` (a list of
``{"rate", "batch", "n", "ms_per_reading", ...}``), ``python``, ``numpy`` and ``route``
(``"PyPI wheels"`` or ``"Debian bookworm packages"``), and more. `emulated_columns` formats
one arch's entry as the report's cells, `emulated_notes` the lines under the table.
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

from benchmarks.pi_budget.run import (
    BATCH,
    LEAF_IMPORT,
    ROOT,
    Leaf,
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
    threads,
    wait_quiet,
)

ARCHES = ("aarch64", "armhf")
JSON_NAME = "pi_budget_emulated.json"
IMPORT_RUNS = 5
WINDOW_S = 20.0
N_LONG = 10_000
LONG_RATE = 100.0
"""Readings/s of the long run: the fastest CPU row's rate; lowered (`long_rate`) when the
agent's CPU at 100/s extrapolates above `LONG_CORE_SHARE` of a core."""
LONG_CORE_SHARE = 0.6
KEPT_UP_CORE = 0.9
"""An agent whose CPU over a window is at least this share of a core did not keep up."""
KEPT_UP_LEFT_S = 0.5
KEPT_UP_LEFT_SHARE = 0.05
"""... nor one that still had more CPU time of work after the window than the larger of
`KEPT_UP_LEFT_S` and this share of the CPU time in the window (a growing backlog)."""


def kept_up(core_share: float, cpu_in: float, cpu_after: float) -> bool:
    """Whether an agent that used ``core_share`` of a core (``cpu_in`` seconds) while readings
    arrived, and ``cpu_after`` seconds after they stopped, kept up with them."""
    return core_share < KEPT_UP_CORE and cpu_after <= max(
        KEPT_UP_LEFT_S, KEPT_UP_LEFT_SHARE * cpu_in
    )


ROUTES = {True: "PyPI wheels", False: "Debian bookworm packages"}
EMULATED_LABEL = "emulated: qemu's RSS/CPU, includes the translator"

ROW_KEYS = ("import", "rss_start", "rss_long", "cpu_1", "cpu_10", "cpu_100", "cpu_100_batched")
"""The keys of `emulated_columns`: run.py's report rows, in its order."""


def cache_dir() -> Path:
    """Where ``scripts/arm/sysroot.sh`` keeps its sysroots (the same rule as there)."""
    if "EDGE_ARM_CACHE" in os.environ:
        return Path(os.environ["EDGE_ARM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path(
        os.environ.get("HOME") or os.environ.get("TMPDIR") or "/tmp", ".cache"
    )
    return Path(base) / "edge-runtime-arm"


def sysroot(arch: str, cache: Path | None = None) -> Path | None:
    """The newest complete sysroot of ``arch`` in the cache (None: none built)."""
    done = sorted(
        (cache or cache_dir()).glob(f"{arch}-*/.complete"), key=lambda p: p.stat().st_mtime
    )
    for marker in reversed(done):
        if (marker.parent / "venv" / "bin" / "python").exists():
            return marker.parent
    return None


def emulated_python(arch: str, root: Path) -> Python:
    """The sysroot's venv Python (the qemu wrapper; ``sys.executable`` stays the venv's, so
    children start emulated too) with the checkout on ``PYTHONPATH``, as test-arm.sh runs it;
    bytecode written as on a device (`device_env`)."""
    env = device_env(deployed=False) | {"PYTHONPATH": str(ROOT)}  # plain python, as measured
    env.pop("VIRTUAL_ENV", None)
    return Python(str(root / "venv" / "bin" / "python"), ROOT, env, "", f"{arch} under qemu")


PROBE = (
    "import json, sys, platform, numpy; print(json.dumps({'python': sys.version.split()[0], "
    "'numpy': numpy.__version__, 'numpy_file': numpy.__file__, "
    "'machine': platform.machine(), 'prefix': sys.prefix}))"
)


def probe(python: Python) -> dict:
    """The emulated interpreter's versions and where numpy comes from."""
    info = json.loads(python.run(PROBE).stdout.strip().splitlines()[-1])
    info["route"] = ROUTES[info["numpy_file"].startswith(info["prefix"] + os.sep)]
    return info


def _sysroot_versions(root: Path) -> dict:
    lines = (
        (root / "versions.txt").read_text().splitlines() if (root / "versions.txt").exists() else []
    )
    qemu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("qemu:")), "")
    if os.environ.get("EDGE_ARM_CPU"):
        qemu += f" (EDGE_ARM_CPU={os.environ['EDGE_ARM_CPU']})"
    return {"sysroot": str(root), "qemu": qemu}


def cpu_row(
    leaf: Leaf, port: int, pool: list[bytes], rate: float, window: float, batch: int = 1
) -> dict:
    """`cpu_per_reading`, plus the CPU the agent spent after the window until it was quiet
    (an emulated agent may lag): ``ms_per_reading`` counts both; ``kept_up`` says whether
    the agent's CPU over the window stayed under `KEPT_UP_CORE` of a core and little work
    was left after it."""
    row = cpu_per_reading(leaf, port, pool, rate, window, batch)
    c0, t0 = cpu_s(leaf.pid), time.perf_counter()
    wait_quiet(leaf.pid)
    left = cpu_s(leaf.pid) - c0
    core = row["cpu_s"] / row["window_s"]
    return row | {
        "cpu_window_s": row["cpu_s"],
        "cpu_after_s": left,
        "quiet_after_s": time.perf_counter() - t0,
        "cpu_s": row["cpu_s"] + left,
        "ms_per_reading": (row["cpu_s"] + left) / row["n"] * 1000,
        "core_share": core,
        "kept_up": kept_up(core, row["cpu_s"], left),
    }


def long_rate(cpu: list[dict]) -> tuple[float, str]:
    """`LONG_RATE`, or lower when the 100/s row (one reading per message) extrapolates above
    `LONG_CORE_SHARE` of a core there (rounded down to 1, 2 or 5 x 10^k), with why."""
    row = next(c for c in cpu if c["rate"] == 100.0 and c["batch"] == 1)
    sustainable = LONG_CORE_SHARE / (row["ms_per_reading"] / 1000)
    if sustainable >= LONG_RATE and row["kept_up"]:
        return LONG_RATE, f"{LONG_RATE:g}/s (the 100/s row kept up)"
    exp = 10 ** math.floor(math.log10(max(sustainable, 1.0)))
    rate = max(m * exp for m in (1, 2, 5) if m * exp <= max(sustainable, 1.0))
    rate = min(rate, LONG_RATE / 2)
    return rate, (
        f"{rate:g}/s: at 100/s the agent used {row['core_share']:.0%} of a core over the "
        f"window and had {row['cpu_after_s']:.2f} s of CPU work left after it "
        f"({row['ms_per_reading']:.2f} ms per reading): it did not keep up with 100/s on "
        "this shared machine"
    )


def measure_arch(arch: str, root: Path, quick: bool) -> dict:
    from edge_runtime.broker import LocalMosquitto

    python = emulated_python(arch, root)
    t_start = time.perf_counter()
    res: dict = {"arch": arch, **_sysroot_versions(root)}
    info = probe(python)
    res |= {k: info[k] for k in ("python", "numpy", "route", "machine")}
    res["load"] = Path("/proc/loadavg").read_text().split()[:3]
    runs = 2 if quick else IMPORT_RUNS
    res["import_runs"] = runs
    res["leaf_import"] = LEAF_IMPORT
    print(f"pi_budget.emulated: {arch}: import times ({runs} runs)", file=sys.stderr)
    res["import_s"], res["import_cpu_s"] = import_time(python, LEAF_IMPORT, runs)
    res["import_numpy_s"], res["import_numpy_cpu_s"] = import_time(python, "numpy", runs)
    res["rss_python_mb"] = rss_after_import(python, None)
    res["rss_import_mb"] = rss_after_import(python, LEAF_IMPORT)
    window = 10.0 if quick else WINDOW_S
    n_long = 2_000 if quick else N_LONG
    with LocalMosquitto() as broker:
        assert broker.port is not None
        print(f"pi_budget.emulated: {arch}: the agent", file=sys.stderr)
        t0 = time.perf_counter()
        leaf = start_leaf(broker, python)
        try:
            res["start_s"] = time.perf_counter() - t0 - 0.5
            res["rss_start_mb"] = rss_mb(leaf.pid)
            res["threads_start"] = threads(leaf.pid)
            pool = payloads(1000)
            cpu = [cpu_row(leaf, broker.port, pool, r, window) for r in (1.0, 10.0, 100.0)]
            batched = payloads(100, batch=BATCH)
            cpu.append(cpu_row(leaf, broker.port, batched, 100.0, window, BATCH))
            res["cpu"] = cpu
            res["window_s"] = window
            rate, why = long_rate(cpu)
            print(f"pi_budget.emulated: {arch}: {n_long} readings at {rate:g}/s", file=sys.stderr)
            res["rss_before_long_mb"] = rss_mb(leaf.pid)
            c0 = cpu_s(leaf.pid)
            elapsed = asyncio.run(feed(broker.port, pool, n_long, rate))
            c1, t1 = cpu_s(leaf.pid), time.perf_counter()
            wait_quiet(leaf.pid)
            left = cpu_s(leaf.pid) - c1
            res["n_long"] = n_long
            res["long"] = {
                "n": n_long,
                "rate": rate,
                "rate_why": why,
                "elapsed_s": elapsed,
                "core_share": (c1 - c0) / elapsed,
                "cpu_after_s": left,
                "quiet_after_s": time.perf_counter() - t1,
                "kept_up": kept_up((c1 - c0) / elapsed, c1 - c0, left),
            }
            res["rss_long_mb"] = rss_mb(leaf.pid)
            if leaf.proc.poll() is not None:
                raise RuntimeError("agent exited:\n" + "".join(leaf.log[-20:]))
        finally:
            leaf.stop()
    res["measure_s"] = time.perf_counter() - t_start
    return res


def emulated_columns(res: dict) -> dict[str, str]:
    """One arch's entry of the JSON as the report's cells, keyed by `ROW_KEYS` (the units
    are the rows': s, MB, ms per reading). RSS and CPU are qemu's, marked so."""
    cpu = {(c["rate"], c["batch"]): c for c in res["cpu"]}
    growth = res["rss_long_mb"] - res["rss_start_mb"]
    long = res.get("long", {})
    lag = "" if long.get("kept_up", True) else ", did not keep up"
    cells = {
        "import": (
            f"{res['import_s']:.2f} (CPU {res['import_cpu_s']:.2f}; numpy alone "
            f"{res['import_numpy_s']:.2f}, CPU {res['import_numpy_cpu_s']:.2f})"
        ),
        "rss_start": f"{res['rss_start_mb']:.1f} (qemu's)",
        "rss_long": (
            f"{res['rss_long_mb']:.1f} ({growth:+.1f}; {res['n_long']:,} readings"
            + (f" at {long['rate']:g}/s" if "rate" in long else "")
            + f"{lag}; qemu's)"
        ),
    }
    for key, rate, batch in [("cpu_1", 1.0, 1), ("cpu_10", 10.0, 1), ("cpu_100", 100.0, 1),
                             ("cpu_100_batched", 100.0, BATCH)]:  # fmt: skip
        c = cpu.get((rate, batch))
        if c is None:
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
        f"`benchmarks/report/{JSON_NAME}`), the agent's Python under qemu user-mode "
        f"emulation, broker and feeder native. {EMULATED_LABEL}: VmRSS counts the emulator "
        "and its translated-code cache, utime + stime the translation. No timing claims "
        "for real Raspberry Pi hardware.",
    ]
    for arch, res in data.items():
        long = res.get("long", {})
        before = res.get("rss_before_long_mb", math.nan)
        lag = "kept up" if long.get("kept_up") else "did not keep up"
        lines.append(
            f"- {arch} (emulated): Python {res['python']}, numpy {res['numpy']} "
            f"({res['route']}), {res.get('qemu', 'qemu')}; import: median of "
            f"{res.get('import_runs', '?')} runs, CPU time "
            f"{res.get('import_cpu_s', math.nan):.2f} s; "
            f"CPU windows of {res.get('window_s', math.nan):g} s plus the work left after "
            f"them; the long run: {res['n_long']:,} readings (not 10^5) at "
            f"{long.get('rate_why', '?')}, {lag}; VmRSS before it (after the CPU windows): "
            f"{before:.1f} MB, so the long run "
            f"itself added {res['rss_long_mb'] - before:+.1f} MB; VmRSS of `python -c pass` "
            f"under qemu: {res.get('rss_python_mb', math.nan):.1f} MB. Load average at the "
            f"start: {' '.join(res.get('load', ['?']))} on a shared machine: the import row "
            "varies between runs."
        )
    return lines


def load(path: Path | None = None) -> dict:
    """The JSON (an empty object when it was never written)."""
    path = path or ROOT / "benchmarks" / "report" / JSON_NAME
    return json.loads(path.read_text()) if path.exists() else {}


def summary(data: dict) -> str:
    """A Markdown table, quantity x arch, for the terminal."""
    arches = list(data)
    cols = {arch: emulated_columns(res) for arch, res in data.items()}
    names = {
        "import": "import (s)",
        "rss_start": "RSS after start (MB)",
        "rss_long": "RSS after the long run (MB)",
        "cpu_1": "CPU per reading at 1/s (ms)",
        "cpu_10": "CPU per reading at 10/s (ms)",
        "cpu_100": "CPU per reading at 100/s (ms)",
        "cpu_100_batched": f"CPU per reading at 100/s, {BATCH} per message (ms)",
    }
    lines = [
        "| quantity | " + " | ".join(f"{a} (emulated)" for a in arches) + " |",
        "|---" * (len(arches) + 1) + "|",
    ]
    lines += [f"| {names[k]} | " + " | ".join(cols[a][k] for a in arches) + " |" for k in ROW_KEYS]
    return "\n".join([*lines, "", *emulated_notes(data)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pi_budget.emulated")
    parser.add_argument("--arch", nargs="+", choices=ARCHES, default=list(ARCHES))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "report")
    parser.add_argument(
        "--quick", action="store_true", help="10 s windows, 2,000 readings, 2 import runs"
    )
    args = parser.parse_args(argv)
    path = args.out / JSON_NAME
    data = load(path)
    measured = False
    for arch in args.arch:
        root = sysroot(arch)
        if root is None:
            print(f"pi_budget.emulated: {arch} skipped: no sysroot in {cache_dir()} "
                  f"(scripts/arm/sysroot.sh {arch} builds it)")  # fmt: skip
            continue
        try:
            emulated_python(arch, root).run("pass")
        except (OSError, subprocess.CalledProcessError) as exc:  # noexec cache, seccomp, ...
            print(f"pi_budget.emulated: {arch} skipped: its Python does not start ({exc})")
            continue
        data[arch] = measure_arch(arch, root, args.quick)
        measured = True
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
