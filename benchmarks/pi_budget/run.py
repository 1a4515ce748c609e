"""``python -m benchmarks pi-budget``: what a Pi pays for one leaf agent as deployed (issue 24).

One ``edge-runtime agent`` process (leaf `NODE` of ``topologies/minimal.toml``, a state
directory, the unit's Python settings) against a private Mosquitto, in a lean venv as on a device
(``--no-lean``: this venv, rich hidden): import time, RSS after start and after `N_LONG` readings,
CPU per reading at 1, 10 and 100 readings/s, and the floor of a bare subscriber (`floor`); rows
and method in ``benchmarks/README.md`` (j). Writes ``pi_budget.md`` and ``.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import aiomqtt
import numpy as np
import psutil

from acceptance.scenario import unit_python_environment
from benchmarks.processes import sample_process
from benchmarks.registry import REPORT_DIR
from benchmarks.reporting import prose
from benchmarks.schema import cpu_model, read_result, write_result
from benchmarks.soak.agent_process import AgentProcess
from edge_runtime.broker import LocalMosquitto
from edge_runtime.wire import encode_readings

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "topologies" / "minimal.toml"
NODE = "leaf-1"
TOPIC = f"sensors/{NODE}"
N_FEATURES = 48
IMPORT_RUNS = 7
#: What ``edge-runtime agent`` imports for a leaf before it connects.
LEAF_IMPORT = ("edge_runtime.cli.dispatch, edge_runtime.cli.parser, edge_runtime.cli.run, "
               "edge_runtime.agents.leaf.shell.agent")
#: The leaf's third-party (and asyncio) imports alone: the floor under `LEAF_IMPORT`.
DEPS_IMPORT = "numpy, asyncio, aiomqtt, structlog, msgpack"
#: The import row before the role's module was imported lazily, for comparison.
LEAF_IMPORT_BEFORE = "edge_runtime.cli.dispatch, edge_runtime.cli.run"
#: rich is no dependency (import-linter brings it) but structlog imports it where installed.
NO_RICH = "import sys; sys.modules['rich'] = None; "
#: Readings/s of the `N_LONG` run, `BATCH` per message: short (100 s), and the leaf keeps up
#: (at 2000 single readings/s a backlog left 3-9 MB of Python's pools behind once drained).
LONG_RATE = 1000.0
N_LONG = 100_000
BATCH = 10  # readings per message of the batched 100/s row
FACTORS = (40.0, 30.0, 20.0, 10.0, 5.0)  # std of the readings' common factors (plus unit noise)
ARCHES = ("aarch64", "armhf")
RESULT_FILE = "pi_budget.json"
BUDGETS = {"import": 0.15, "rss_start": 40.0, "rss_growth": 5.0, "cpu_100": 0.1}  # s, MB, ms
#: What devices/edge-runtime-agent@.service sets for Python (-OO): every row runs the agent so.
DEPLOYED_ENV = unit_python_environment()


def rss_mb(pid: int) -> float:
    """Resident set of ``pid`` now, MB (2^20 bytes)."""
    return psutil.Process(pid).memory_info().rss / 2**20


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds of ``pid`` so far (0 if it is gone)."""
    sample = sample_process(pid)
    return 0.0 if sample is None else sample.cpu_s


@dataclass(frozen=True)
class Python:
    """The interpreter a device runs the agent with: ``executable`` in ``cwd`` with ``env``,
    ``prefix`` run before the measured code (`NO_RICH` without a lean venv), ``kind`` for the
    report."""

    executable: str
    cwd: Path
    env: dict[str, str]
    prefix: str
    kind: str

    def run(self, code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.executable, "-c", self.prefix + code], check=True,
                              cwd=self.cwd, env=self.env, capture_output=True, text=True)

    def agent_argv(self) -> list[str]:
        if not self.prefix:
            return [self.executable, "-m", "edge_runtime.cli"]
        main = "from edge_runtime.cli import main; sys.exit(main())"
        return [self.executable, "-c", self.prefix + main]


def device_env(deployed: bool = True) -> dict[str, str]:
    """This environment with bytecode written (``PYTHONDONTWRITEBYTECODE`` unset, as a device
    caches ``.pyc`` files) and `DEPLOYED_ENV` unless ``deployed`` is False (plain ``python``)."""
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONDONTWRITEBYTECODE" and k not in DEPLOYED_ENV}
    return env | DEPLOYED_ENV if deployed else env


def _runtime_requirements() -> list[str]:
    """The installed versions of the project's dependencies (no extras), as constraints."""
    pins = []
    for requirement in importlib.metadata.requires("edge-runtime") or []:
        if "extra ==" not in requirement:
            name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                pins.append(f"{name}=={importlib.metadata.version(name)}")
    return pins


@contextlib.contextmanager
def device_python(lean: bool = True) -> Iterator[Python]:
    """A lean venv in a temporary folder (the project without extras, -OO bytecode compiled as
    devices/INSTALL.md step 3; pip's cache reused: ~15 s), or this interpreter with rich hidden
    when ``lean`` is False or the venv cannot be built. Commands run outside the checkout."""
    fallback = Python(sys.executable, ROOT, device_env(), NO_RICH, "this venv, rich hidden")
    if not lean:
        yield fallback
        return
    with tempfile.TemporaryDirectory(prefix="pi_budget-") as tmp:
        venv = Path(tmp) / "venv"
        python, constraints = venv / "bin" / "python", Path(tmp) / "constraints.txt"
        constraints.write_text("\n".join(_runtime_requirements()) + "\n")
        try:
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)],
                           check=True, capture_output=True)
            subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                            "-c", str(constraints), str(ROOT)], check=True, capture_output=True,
                           text=True, timeout=600, env=device_env(deployed=False))
            subprocess.run([str(python), "-OO", "-m", "compileall", "-q", str(venv / "lib")],
                           check=True, capture_output=True, text=True, timeout=600)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            detail = (getattr(exc, "stderr", "") or "")[-2000:]
            print(f"pi_budget: no lean venv ({exc}); rich hidden instead\n{detail}",
                  file=sys.stderr)
            yield fallback
            return
        kind = "lean venv (pip install ., no extras)"
        yield Python(str(python), Path(tmp), device_env(), "", kind)


def import_time(python: Python, module: str, runs: int = IMPORT_RUNS,
                code_before: str = "") -> tuple[float, float]:
    """Median wall and CPU seconds of ``python -c 'import module'`` minus ``python -c pass``,
    each after one warm-up run (it writes the ``.pyc`` files a device would have)."""

    def median(code: str) -> tuple[float, float]:
        python.run(code)
        walls, cpus = [], []
        for _ in range(runs):
            r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            python.run(code)
            t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            walls.append(t1 - t0)
            cpus.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        return statistics.median(walls), statistics.median(cpus)

    wall, cpu = median(f"{code_before}import {module}")
    wall0, cpu0 = median(f"{code_before}pass")
    return wall - wall0, cpu - cpu0


def rss_after_import(python: Python, module: str | None) -> float:
    """VmRSS (MB) of a process that imported ``module`` (None: nothing)."""
    code = "print([x for x in open('/proc/self/status') if x.startswith('VmRSS:')][0].split()[1])"
    out = python.run(("" if module is None else f"import {module}; ") + code).stdout
    return int(out.split()[-1]) / 1024


def start_leaf(broker: LocalMosquitto, python: Python, state_dir: Path | None = None
               ) -> AgentProcess:
    """An agent for `NODE` run by ``python``, connected and 0.5 s on (its log a temporary file).

    Raises RuntimeError if it does not connect within 60 s."""
    extra = ["--n-features", str(N_FEATURES)]
    if state_dir is not None:  # as deployed (devices/edge-runtime-agent@.service)
        extra += ["--state-dir", str(state_dir)]
    leaf = AgentProcess(TOPOLOGY, NODE, broker.url, None, extra, command=python.agent_argv(),
                        cwd=python.cwd, env=python.env)
    if not leaf.wait_connected(60):
        leaf.stop()
        raise RuntimeError("agent did not connect:\n" + leaf.text())
    time.sleep(0.5)
    return leaf


def payloads(n: int, seed: int = 0, batch: int = 1) -> list[bytes]:
    """``n`` messages of ``batch`` readings (a flat array when 1): a stationary array of
    `N_FEATURES` sensors around 100, `FACTORS` common factors on a fixed random basis plus unit
    noise (unstructured or replayed data would move the subspace: measure publishes, not
    readings)."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(N_FEATURES, len(FACTORS))))[0]
    factors = rng.normal(size=(n * batch, len(FACTORS))) * np.array(FACTORS)
    rows = 100.0 + factors @ basis.T + rng.normal(size=(n * batch, N_FEATURES))
    if batch == 1:
        return [encode_readings(row) for row in rows]
    return [encode_readings(rows[i : i + batch]) for i in range(0, len(rows), batch)]


async def feed(port: int, pool: list[bytes], n: int, rate: float) -> float:
    """Publish ``n`` messages at ``rate``/s (cycling ``pool``); returns the elapsed seconds."""
    async with aiomqtt.Client("127.0.0.1", port) as client:
        t0 = time.perf_counter()
        for i in range(n):
            if (delay := t0 + i / rate - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            await client.publish(TOPIC, pool[i % len(pool)], qos=1)
        return time.perf_counter() - t0


def wait_quiet(pid: int, timeout: float = 120.0) -> None:
    """Until the process uses < 5 % of a core over 1 s (at most ``timeout`` s)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        c0 = cpu_s(pid)
        time.sleep(1.0)
        if cpu_s(pid) - c0 < 0.05:
            return


def cpu_per_reading(pid: int, port: int, pool: list[bytes], rate: float, window: float,
                    batch: int = 1) -> dict:
    """CPU per reading of ``pid`` while ``rate`` readings/s arrive for ``window`` seconds,
    ``batch`` per message (``pool`` holds such messages)."""
    n = int(rate * window)
    c0, t0 = cpu_s(pid), time.perf_counter()
    asyncio.run(feed(port, pool, n // batch, rate / batch))
    time.sleep(max(0.0, t0 + window - time.perf_counter()) + batch / rate)
    c1, t1 = cpu_s(pid), time.perf_counter()
    return {"rate": rate, "batch": batch, "n": n, "window_s": t1 - t0, "cpu_s": c1 - c0,
            "ms_per_reading": (c1 - c0) / n * 1000}


def floor_cpu(port: int, window: float) -> list[dict]:
    """CPU per reading of `benchmarks.pi_budget.floor` fed as the leaf at 100/s, one and
    `BATCH` per message."""
    out = []
    for batch in (1, BATCH):
        proc = subprocess.Popen([sys.executable, "-m", "benchmarks.pi_budget.floor", str(port)],
                                cwd=ROOT, stdout=subprocess.PIPE, text=True)
        try:
            if proc.stdout is None or proc.stdout.readline().strip() != "ready":
                raise RuntimeError("the floor subscriber did not start")
            time.sleep(0.5)
            n = int(100.0 * window)
            c0 = cpu_s(proc.pid)
            asyncio.run(feed(port, payloads(100, batch=batch), n // batch, 100.0 / batch))
            time.sleep(batch / 100.0 + 0.5)
            out.append({"rate": 100.0, "batch": batch, "n": n,
                        "ms_per_reading": (cpu_s(proc.pid) - c0) / n * 1000})
        finally:
            proc.kill()
            proc.wait()
    return out


#: The start rows (`measure_start`): key, module imported, code before it, its line.
IMPORTS = (
    ("import", LEAF_IMPORT, "", f"{LEAF_IMPORT} (budget 0.15)"),
    ("import_numpy", "numpy", "", "numpy"),
    ("import_after_numpy", LEAF_IMPORT, "import numpy; ", "the same after import numpy"),
    ("import_deps", DEPS_IMPORT, "", DEPS_IMPORT),
    ("import_before", LEAF_IMPORT_BEFORE, "", LEAF_IMPORT_BEFORE),
    ("import_agents", "edge_runtime.agents", "", "edge_runtime.agents"),
)


def measure_start(python: Python, runs: int) -> dict:
    """Import times (`IMPORTS`) and the RSS of a process after imports, with ``python``."""
    res: dict = {"python_kind": python.kind, "leaf_import": LEAF_IMPORT,
                 "leaf_import_before": LEAF_IMPORT_BEFORE}
    for key, module, before, _ in IMPORTS:
        res[f"{key}_s"], res[f"{key}_cpu_s"] = import_time(python, module, runs, before)
    for key, module in (("python", None), ("numpy", "numpy"), ("deps", DEPS_IMPORT),
                        ("import", LEAF_IMPORT)):
        res[f"rss_{key}_mb"] = rss_after_import(python, module)
    return res


def measure(quick: bool = False, lean: bool = True, start_only: bool = False) -> dict:
    """Every row natively (`measure_start`, the agent after start, `measure_running`, the
    floor); ``quick``: 3 import runs, 10 s windows, 10^4 readings."""
    res: dict = {"python": sys.version.split()[0], "machine": platform.machine(),
                 "cpu_model": cpu_model()}
    with device_python(lean) as python:
        res |= measure_start(python, 3 if quick else IMPORT_RUNS)
        res["load"] = Path("/proc/loadavg").read_text().split()[:3]
        with LocalMosquitto() as broker, tempfile.TemporaryDirectory() as state:
            assert broker.port is not None
            leaf = start_leaf(broker, python, Path(state))
            try:
                res["rss_start_mb"] = rss_mb(leaf.pid)
                res["threads_start"] = psutil.Process(leaf.pid).num_threads()
                plain = replace(python, env=device_env(deployed=False))  # for comparison
                with tempfile.TemporaryDirectory() as state2:
                    other = start_leaf(broker, plain, Path(state2))
                    res["rss_start_plain_mb"] = rss_mb(other.pid)
                    other.stop()
                if not start_only:
                    res |= measure_running(leaf, broker.port, quick)
            finally:
                leaf.stop()
            if not start_only:
                res["floor"] = floor_cpu(broker.port, 10.0 if quick else 30.0)
    return res


def measure_running(leaf: AgentProcess, port: int, quick: bool) -> dict:
    """CPU per reading, and RSS after `N_LONG` readings (10^4 when ``quick``)."""
    pool, windows = payloads(1000), {1.0: 60.0, 10.0: 30.0, 100.0: 30.0}
    if quick:
        windows = dict.fromkeys(windows, 10.0)
    n_long = 10_000 if quick else N_LONG
    res: dict = {"cpu": [cpu_per_reading(leaf.pid, port, pool, r, w) for r, w in windows.items()]}
    res["cpu_batched"] = cpu_per_reading(leaf.pid, port, payloads(100, batch=BATCH), 100.0,
                                         windows[100.0], BATCH)
    res["rss_before_long_mb"] = rss_mb(leaf.pid)
    t = asyncio.run(feed(port, payloads(100, seed=1, batch=BATCH), n_long // BATCH,
                         LONG_RATE / BATCH))
    t_quiet = time.perf_counter()
    wait_quiet(leaf.pid)
    res["long"] = {"n": n_long, "rate": LONG_RATE, "batch": BATCH, "elapsed_s": t,
                   "drain_s": time.perf_counter() - t_quiet}
    res["rss_long_mb"] = rss_mb(leaf.pid)
    if leaf.proc.poll() is not None:
        raise RuntimeError("agent exited:\n" + leaf.text()[-3000:])
    return res


def _ok(value: float, budget: float) -> str:
    return "pass" if value <= budget else "FAIL"


def report(res: dict, emulated: dict | None = None) -> str:
    """The Markdown report of `measure`'s ``res``; ``emulated`` (the JSON of
    `benchmarks.pi_budget.emulated`, by arch) fills the aarch64 and armhf columns."""
    from benchmarks.pi_budget.emulated import emulated_columns, emulated_notes

    emulated = emulated or {}
    columns = {arch: emulated_columns(emulated[arch]) for arch in ARCHES if arch in emulated}
    growth = res["rss_long_mb"] - res["rss_start_mb"]
    imp, start, plain = res["import_s"], res["rss_start_mb"], res.get("rss_start_plain_mb")
    rows = [  # (emulated column key, label, native, budget, verdict)
        ("import", "import (s)", f"{imp:.3f}", "<= 0.15", _ok(imp, BUDGETS["import"])),
        ("rss_start", "RSS after start (MB)", f"{start:.1f}", "<= 40",
         _ok(start, BUDGETS["rss_start"])),
        (None, "RSS after start, plain `python` (no -OO) (MB)",
         "-" if plain is None else f"{plain:.1f}", "-", "-"),
        ("rss_long", f"RSS after {res['long']['n']:,} readings (MB)",
         f"{res['rss_long_mb']:.1f} ({growth:+.1f})", "start + 5",
         _ok(growth, BUDGETS["rss_growth"])),
    ]
    for c in [*res["cpu"], res["cpu_batched"]]:
        ms, rate = c["ms_per_reading"], c["rate"]
        per = f", {c['batch']} readings per message" if c is res["cpu_batched"] else ""
        rows.append(("cpu_100_batched" if per else f"cpu_{rate:g}",
                     f"CPU per reading at {rate:g}/s{per} (ms; {c['window_s']:.0f} s window, "
                     f"{c['n']} readings)", f"{ms:.3f}", *(("<= 0.1", _ok(ms, BUDGETS["cpu_100"]))
                                                          if rate == 100 else ("-", "-"))))
    for f in res.get("floor", []):
        rows.append((None, f"floor: a bare MQTT subscriber (decode + QoS 1 ack) at 100/s, "
                     f"{f['batch']} per message (ms; {f['n']} readings)",
                     f"{f['ms_per_reading']:.3f}", "-", "-"))
    lines = prose("pi_budget", "intro", node=NODE, n_features=N_FEATURES, topic=TOPIC, res=res)
    for key, *cells in rows:
        arch = [columns[a].get(key, "-") if a in columns and key else "-" for a in ARCHES]
        lines.append("| " + " | ".join([*cells, *arch]) + " |")
    long = res["long"]
    lines += prose("pi_budget", "notes", res=res, deps=DEPS_IMPORT, load=" ".join(res["load"]),
                   long=long, batch=long.get("batch", 1), drain=long.get("drain_s", float("nan")))
    if emulated:
        lines += emulated_notes(emulated)
    else:
        lines.append("- aarch64 / armhf: not measured (`python -m benchmarks.pi_budget.emulated`).")
    return "\n".join(lines) + "\n"


def start_summary(res: dict) -> str:
    """The import and start rows, one line each (``--start-only``)."""
    return "\n".join([
        f"python: {res['python_kind']}; load average {' '.join(res['load'])}",
        "import times, wall s (CPU s):",
        *(f"  {what}: {res[k + '_s']:.3f} ({res[k + '_cpu_s']:.3f})" for k, _, _, what in IMPORTS),
        f"RSS after start: {res['rss_start_mb']:.1f} MB (budget 40), "
        f"{res['threads_start']} threads; plain python (no -OO): "
        f"{res['rss_start_plain_mb']:.1f} MB",
        f"RSS of python -c pass: {res['rss_python_mb']:.1f} MB, after numpy: "
        f"{res['rss_numpy_mb']:.1f} MB, after {DEPS_IMPORT}: {res['rss_deps_mb']:.1f} MB, "
        f"after the leaf's imports: {res['rss_import_mb']:.1f} MB",
    ])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.pi_budget", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=REPORT_DIR)
    p.add_argument("--quick", action="store_true", help="short windows, 10^4 readings")
    p.add_argument("--no-lean", action="store_true", help="this venv with rich hidden")
    p.add_argument("--start-only", action="store_true",
                   help="import times and RSS after start only, printed; no report")
    args = p.parse_args(argv)
    res = measure(args.quick, lean=not args.no_lean, start_only=args.start_only)
    if args.start_only:
        print(start_summary(res))
        return 0
    parameters = {"quick": args.quick, "lean": not args.no_lean}
    write_result(args.out / RESULT_FILE, "pi-budget", parameters,
                 {"native": res}, {k: res[k] for k in ("import_s", "rss_start_mb", "rss_long_mb")})
    print(render(args.out))
    return 0


def render(out: Path) -> str:
    """Rewrite ``out/pi_budget.md`` from ``out/pi_budget.json`` and the emulated columns of
    ``benchmarks/report/pi_budget_emulated.json``, measuring nothing; the Markdown."""
    from benchmarks.pi_budget.emulated import load

    text = report(read_result(out / RESULT_FILE, "pi-budget")["rows"]["native"], load())
    (out / "pi_budget.md").write_text(text)
    return text
