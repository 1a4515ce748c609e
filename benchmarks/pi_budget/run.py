"""The measurements and the report of `benchmarks.pi_budget`."""

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
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiomqtt
import numpy as np
import psutil

from benchmarks.reporting import prose
from benchmarks.schema import read_result, write_result
from edge_runtime.broker import LocalMosquitto
from edge_runtime.wire import encode_readings

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "topologies" / "minimal.toml"
NODE = "leaf-1"
TOPIC = f"sensors/{NODE}"
N_FEATURES = 48
IMPORT_RUNS = 7
LEAF_IMPORT = (
    "edge_runtime.cli.dispatch, edge_runtime.cli.parser, edge_runtime.cli.run, "
    "edge_runtime.agents.leaf.shell.agent"
)
"""What ``edge-runtime agent`` imports for a leaf before it connects: the dispatch, the
parser, its handler (``cli.run``) and the leaf's agent (`create_agent` imports the role's
module when the topology says which)."""
DEPS_IMPORT = "numpy, asyncio, aiomqtt, structlog, msgpack"
"""The leaf's third-party (and asyncio) imports alone: the floor under `LEAF_IMPORT`."""
LEAF_IMPORT_BEFORE = "edge_runtime.cli.dispatch, edge_runtime.cli.run"
"""What the import row measured before the role's module was imported lazily (it then
included the leaf's and the aggregator's agents), kept for comparison."""
NO_RICH = "import sys; sys.modules['rich'] = None; "
"""rich is no dependency of the project (import-linter, a dev tool, brings it), but
structlog imports it (and pygments) where it is installed: hidden, as on a Pi, when no lean
venv can be built (`device_python`)."""
LONG_RATE = 1000.0
"""Readings/s of the 10^5-reading run, `BATCH` per message: faster than 100/s to keep it
short (100 s), slow enough that the leaf keeps up. At 2000 single readings/s it fell
behind, and the backlog in aiomqtt's queue (up to ``max_queued_messages``) left 3-9 MB of
Python's memory pools behind once drained: a high-water mark, not growth per reading."""
N_LONG = 100_000

ARCHES = ("aarch64", "armhf")
"""The emulated columns, in order (`benchmarks.pi_budget.emulated`)."""

#: The stored results (`benchmarks.schema`) next to ``pi_budget.md``.
RESULT_FILE = "pi_budget.json"

BUDGETS = {
    "import": 0.15,  # s
    "rss_start": 40.0,  # MB
    "rss_growth": 5.0,  # MB
    "cpu_100": 0.1,  # ms per reading
}


def rss_mb(pid: int) -> float:
    """Resident set of ``pid`` now, MB (2^20 bytes)."""
    return psutil.Process(pid).memory_info().rss / 2**20


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds of ``pid`` so far."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


@dataclass(frozen=True)
class Python:
    """The interpreter a device would run the agent with, and how.

    ``executable`` in ``cwd`` with ``env``; ``prefix`` is code run before the measured code
    (`NO_RICH` without a lean venv); ``kind`` says which, for the report."""

    executable: str
    cwd: Path
    env: dict[str, str]
    prefix: str
    kind: str

    def run(self, code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.executable, "-c", self.prefix + code],
            check=True,
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
        )

    def agent_argv(self) -> list[str]:
        if not self.prefix:
            return [self.executable, "-m", "edge_runtime.cli"]
        main = "from edge_runtime.cli import main; sys.exit(main())"
        return [self.executable, "-c", self.prefix + main]


DEPLOYED_ENV = {"PYTHONOPTIMIZE": "2"}
"""What devices/edge-runtime-agent@.service sets for Python (-OO; tests/test_pi_budget.py
checks the two agree): every measurement runs the agent so, as the unit does."""


def device_env(deployed: bool = True) -> dict[str, str]:
    """This environment, but bytecode written as on a device (``PYTHONDONTWRITEBYTECODE``
    unset: a device caches ``.pyc`` files after its first start), with the unit's Python
    settings (`DEPLOYED_ENV`) unless ``deployed`` is False (plain ``python``)."""
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONDONTWRITEBYTECODE" and k not in DEPLOYED_ENV}  # fmt: skip
    return env | DEPLOYED_ENV if deployed else env


def _runtime_requirements() -> list[str]:
    """The installed versions of the project's dependencies (no extras), as constraints: the
    lean venv gets the same numpy, aiomqtt, ... as this one."""
    pins = []
    for requirement in importlib.metadata.requires("edge-runtime") or []:
        if "extra ==" in requirement:
            continue
        name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            pins.append(f"{name}=={importlib.metadata.version(name)}")
    return pins


@contextlib.contextmanager
def device_python(lean: bool = True) -> Iterator[Python]:
    """A lean venv in a temporary folder (``pip install`` of the project without extras, so
    no dev tools and no rich; pip's cache is reused: ~15 s), or this interpreter with rich
    hidden (`NO_RICH`) when ``lean`` is False or the venv cannot be built. Commands run
    outside the checkout, so the lean venv imports its installed copy."""
    env = device_env()
    if not lean:
        yield Python(sys.executable, ROOT, env, NO_RICH, "this venv, rich hidden")
        return
    with tempfile.TemporaryDirectory(prefix="pi_budget-") as tmp:
        venv = Path(tmp) / "venv"
        python = venv / "bin" / "python"
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text("\n".join(_runtime_requirements()) + "\n")
        try:
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)],
                           check=True, capture_output=True)  # fmt: skip
            subprocess.run(
                [sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                 "-c", str(constraints), str(ROOT)],
                check=True, capture_output=True, text=True, timeout=600,
                env=device_env(deployed=False),
            )  # fmt: skip
            subprocess.run(  # as devices/INSTALL.md step 3: the .opt-2.pyc files of -OO
                [str(python), "-OO", "-m", "compileall", "-q", str(venv / "lib")],
                check=True, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            detail = getattr(exc, "stderr", "") or ""
            print(f"pi_budget: no lean venv ({exc}); rich hidden instead\n{detail[-2000:]}",
                  file=sys.stderr)  # fmt: skip
            yield Python(sys.executable, ROOT, env, NO_RICH, "this venv, rich hidden")
            return
        yield Python(str(python), Path(tmp), env, "", "lean venv (pip install ., no extras)")


def import_time(
    python: Python, module: str, runs: int = IMPORT_RUNS, code_before: str = ""
) -> tuple[float, float]:
    """Median wall time of ``python -c 'import module'`` minus ``python -c pass``, after one
    warm-up run of each (it writes the ``.pyc`` files a device would have); and the same
    for the CPU time (user + system) of the process, which a loaded machine disturbs less."""

    def median(code: str) -> tuple[float, float]:
        python.run(code)  # warm-up: bytecode written
        walls, cpus = [], []
        for _ in range(runs):
            r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            python.run(code)
            t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            walls.append(t1 - t0)
            cpus.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        return statistics.median(walls), statistics.median(cpus)

    (wall, cpu), (wall0, cpu0) = (
        median(f"{code_before}import {module}"),
        median(f"{code_before}pass"),
    )
    return wall - wall0, cpu - cpu0


RSS_CODE = "print([x for x in open('/proc/self/status') if x.startswith('VmRSS:')][0].split()[1])"


def rss_after_import(python: Python, module: str | None) -> float:
    """VmRSS (MB) of a process that imported ``module`` (None: nothing)."""
    code = ("" if module is None else f"import {module}; ") + RSS_CODE
    return int(python.run(code).stdout.split()[-1]) / 1024


class Leaf:
    """One ``edge-runtime agent`` process for `NODE` against ``url``."""

    def __init__(
        self, url: str, python: Python | None = None, state_dir: Path | None = None
    ) -> None:
        command = (
            [sys.executable, "-m", "edge_runtime.cli"] if python is None else python.agent_argv()
        )
        argv = [*command, "agent", "--topology", str(TOPOLOGY), "--node", NODE, "--broker",
                url, "--n-features", str(N_FEATURES)]  # fmt: skip
        if state_dir is not None:  # as deployed (devices/edge-runtime-agent@.service)
            argv += ["--state-dir", str(state_dir)]
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT if python is None else python.cwd,
            env=None if python is None else python.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.connected = threading.Event()
        self.log: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            if '"connected"' in line:
                self.connected.set()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


BATCH = 10
"""Readings per message of the batched 100/s row (a 2-D msgpack array, README's wire table)."""


FACTORS = (40.0, 30.0, 20.0, 10.0, 5.0)
"""Standard deviations of the readings' common factors (plus unit noise per sensor)."""


def payloads(n: int, seed: int = 0, batch: int = 1) -> list[bytes]:
    """``n`` messages of ``batch`` readings each (a flat array when ``batch`` is 1).

    A stationary array of `N_FEATURES` sensors around 100: `FACTORS` common factors on a
    fixed random basis plus unit noise, the structure a leaf's PCA exists for. (Readings
    without structure -- independent sensors -- keep the leaf's subspace inside no deadband
    and make it publish at its rate limit; Motes rows at 100/s replay days in minutes and
    move it too: both would measure the publishes, not the cost of a reading.)"""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(N_FEATURES, len(FACTORS))))[0]
    factors = rng.normal(size=(n * batch, len(FACTORS))) * np.array(FACTORS)
    rows = 100.0 + factors @ basis.T + rng.normal(size=(n * batch, N_FEATURES))
    if batch == 1:
        return [encode_readings(row) for row in rows]
    return [encode_readings(rows[i : i + batch]) for i in range(0, len(rows), batch)]


async def feed(url_port: int, pool: list[bytes], n: int, rate: float) -> float:
    """Publish ``n`` readings at ``rate``/s (cycling ``pool``); returns the elapsed seconds."""
    async with aiomqtt.Client("127.0.0.1", url_port) as client:
        t0 = time.perf_counter()
        for i in range(n):
            due = t0 + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await client.publish(TOPIC, pool[i % len(pool)], qos=1)
        return time.perf_counter() - t0


def wait_quiet(pid: int, timeout: float = 120.0) -> None:
    """Until the process uses < 5 % of a core over 1 s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        c0 = cpu_s(pid)
        time.sleep(1.0)
        if cpu_s(pid) - c0 < 0.05:
            return


def cpu_per_reading(
    leaf: Leaf, port: int, pool: list[bytes], rate: float, window: float, batch: int = 1
) -> dict:
    """The agent's CPU per reading while ``rate`` readings/s arrive for ``window`` seconds,
    ``batch`` readings per message (``pool`` holds such messages)."""
    n = int(rate * window)
    c0, t0 = cpu_s(leaf.pid), time.perf_counter()
    asyncio.run(feed(port, pool, n // batch, rate / batch))
    time.sleep(max(0.0, t0 + window - time.perf_counter()) + batch / rate)
    c1, t1 = cpu_s(leaf.pid), time.perf_counter()
    return {"rate": rate, "batch": batch, "n": n, "window_s": t1 - t0, "cpu_s": c1 - c0,
            "ms_per_reading": (c1 - c0) / n * 1000}  # fmt: skip


def floor_cpu(port: int, window: float) -> list[dict]:
    """CPU per reading of `benchmarks.pi_budget.floor` (an aiomqtt subscriber that only
    decodes and acknowledges) fed as `measure_running` feeds the leaf at 100 readings/s,
    one and `BATCH` per message."""
    out = []
    for batch in (1, BATCH):
        proc = subprocess.Popen([sys.executable, "-m", "benchmarks.pi_budget.floor", str(port)],
                                cwd=ROOT, stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("the floor subscriber did not start")
            time.sleep(0.5)
            n = int(100.0 * window)
            c0 = cpu_s(proc.pid)
            asyncio.run(feed(port, payloads(100, batch=batch), n // batch, 100.0 / batch))
            time.sleep(batch / 100.0 + 0.5)
            out.append({"rate": 100.0, "batch": batch, "n": n,
                        "ms_per_reading": (cpu_s(proc.pid) - c0) / n * 1000})  # fmt: skip
        finally:
            proc.kill()
            proc.wait()
    return out


def measure_start(python: Python, runs: int) -> dict:
    """Import times (the leaf's, numpy's, ``edge_runtime.agents``'s) and the RSS of a
    process after the leaf's imports, with ``python`` (`device_python`)."""
    res: dict = {"python_kind": python.kind, "leaf_import": LEAF_IMPORT,
                 "leaf_import_before": LEAF_IMPORT_BEFORE}  # fmt: skip
    for key, module, before in [
        ("import", LEAF_IMPORT, ""),
        ("import_numpy", "numpy", ""),
        ("import_after_numpy", LEAF_IMPORT, "import numpy; "),
        ("import_deps", DEPS_IMPORT, ""),
        ("import_before", LEAF_IMPORT_BEFORE, ""),
        ("import_agents", "edge_runtime.agents", ""),
    ]:
        res[f"{key}_s"], res[f"{key}_cpu_s"] = import_time(python, module, runs, before)
    res["rss_python_mb"] = rss_after_import(python, None)
    res["rss_numpy_mb"] = rss_after_import(python, "numpy")
    res["rss_deps_mb"] = rss_after_import(python, DEPS_IMPORT)
    res["rss_import_mb"] = rss_after_import(python, LEAF_IMPORT)
    return res


def start_leaf(broker: LocalMosquitto, python: Python, state_dir: Path | None = None) -> Leaf:
    """An agent for `NODE`, connected; raises if it does not connect within 60 s."""
    leaf = Leaf(broker.url, python, state_dir)
    if not leaf.connected.wait(60):
        leaf.stop()
        raise RuntimeError("agent did not connect:\n" + "".join(leaf.log))
    time.sleep(0.5)
    return leaf


def rss_start_plain(broker: LocalMosquitto, python: Python) -> float:
    """RSS after start of the same leaf run by plain ``python`` (without `DEPLOYED_ENV`),
    for comparison; its own state directory."""
    plain = Python(python.executable, python.cwd, device_env(deployed=False), python.prefix,
                   python.kind)  # fmt: skip
    with tempfile.TemporaryDirectory() as state:
        leaf = start_leaf(broker, plain, Path(state))
        try:
            return rss_mb(leaf.pid)
        finally:
            leaf.stop()


def threads(pid: int) -> int:
    return psutil.Process(pid).num_threads()


def measure(quick: bool = False, lean: bool = True, start_only: bool = False) -> dict:
    res: dict = {"python": sys.version.split()[0], "machine": platform.machine(),
                 "cpu_model": _cpu_model()}  # fmt: skip
    with device_python(lean) as python:
        res |= measure_start(python, 3 if quick else IMPORT_RUNS)
        res["load"] = Path("/proc/loadavg").read_text().split()[:3]
        with LocalMosquitto() as broker, tempfile.TemporaryDirectory() as state:
            assert broker.port is not None
            leaf = start_leaf(broker, python, Path(state))
            try:
                res["rss_start_mb"] = rss_mb(leaf.pid)
                res["threads_start"] = threads(leaf.pid)
                res["rss_start_plain_mb"] = rss_start_plain(broker, python)
                if not start_only:
                    res |= measure_running(leaf, broker.port, quick)
            finally:
                leaf.stop()
            if not start_only:
                res["floor"] = floor_cpu(broker.port, 10.0 if quick else 30.0)
    return res


def measure_running(leaf: Leaf, port: int, quick: bool) -> dict:
    """CPU per reading, and RSS after 10^5 readings (10^4 when ``quick``)."""
    res: dict = {}
    pool = payloads(1000)
    windows = {1.0: 60.0, 10.0: 30.0, 100.0: 30.0}
    if quick:
        windows = dict.fromkeys(windows, 10.0)
    n_long = 10_000 if quick else N_LONG
    res["cpu"] = [
        cpu_per_reading(leaf, port, pool, rate, window) for rate, window in windows.items()
    ]
    res["cpu_batched"] = cpu_per_reading(
        leaf, port, payloads(100, batch=BATCH), 100.0, windows[100.0], BATCH
    )
    res["rss_before_long_mb"] = rss_mb(leaf.pid)
    long_pool = payloads(100, seed=1, batch=BATCH)
    t = asyncio.run(feed(port, long_pool, n_long // BATCH, LONG_RATE / BATCH))
    t_quiet = time.perf_counter()
    wait_quiet(leaf.pid)
    res["long"] = {"n": n_long, "rate": LONG_RATE, "batch": BATCH, "elapsed_s": t,
                   "drain_s": time.perf_counter() - t_quiet}  # fmt: skip
    res["rss_long_mb"] = rss_mb(leaf.pid)
    if leaf.proc.poll() is not None:
        raise RuntimeError("agent exited:\n" + "".join(leaf.log[-20:]))
    return res


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def _ok(value: float, budget: float) -> str:
    return "pass" if value <= budget else "FAIL"


def report(res: dict, emulated: dict | None = None) -> str:
    """The Markdown report of `measure`'s ``res``; ``emulated`` (the JSON of
    `benchmarks.pi_budget.emulated`, by arch) fills the aarch64 and armhf columns."""
    from benchmarks.pi_budget.emulated import emulated_columns, emulated_notes

    emulated = emulated or {}
    columns = {arch: emulated_columns(emulated[arch]) for arch in ARCHES if arch in emulated}
    keys = [
        "import",
        "rss_start",
        "rss_start_plain",
        "rss_long",
        "cpu_1",
        "cpu_10",
        "cpu_100",
        "cpu_100_batched",
    ]
    cpu = {c["rate"]: c for c in res["cpu"]}
    growth = res["rss_long_mb"] - res["rss_start_mb"]
    imp, start = res["import_s"], res["rss_start_mb"]
    rows = [
        ("import (s)", f"{imp:.3f}", "<= 0.15", _ok(imp, BUDGETS["import"])),
        ("RSS after start (MB)", f"{start:.1f}", "<= 40", _ok(start, BUDGETS["rss_start"])),
        (
            "RSS after start, plain `python` (no -OO) (MB)",
            f"{res['rss_start_plain_mb']:.1f}" if "rss_start_plain_mb" in res else "-",
            "-",
            "-",
        ),
        (
            f"RSS after {res['long']['n']:,} readings (MB)",
            f"{res['rss_long_mb']:.1f} ({growth:+.1f})",
            "start + 5",
            _ok(growth, BUDGETS["rss_growth"]),
        ),
    ]
    for rate in (1.0, 10.0, 100.0):
        c = cpu[rate]
        ms = c["ms_per_reading"]
        budget, verdict = ("<= 0.1", _ok(ms, BUDGETS["cpu_100"])) if rate == 100 else ("-", "-")
        label = (
            f"CPU per reading at {rate:g}/s (ms; {c['window_s']:.0f} s window, {c['n']} readings)"
        )
        rows.append((label, f"{ms:.3f}", budget, verdict))
    c = res["cpu_batched"]
    label = (
        f"CPU per reading at 100/s, {c['batch']} readings per message (ms; "
        f"{c['window_s']:.0f} s window, {c['n']} readings)"
    )
    ms = c["ms_per_reading"]
    rows.append((label, f"{ms:.3f}", "<= 0.1", _ok(ms, BUDGETS["cpu_100"])))
    for f in res.get("floor", []):
        label = (
            f"floor: a bare MQTT subscriber (decode + QoS 1 ack) at 100/s, {f['batch']} "
            f"per message (ms; {f['n']} readings)"
        )
        rows.append((label, f"{f['ms_per_reading']:.3f}", "-", "-"))
    lines = prose("pi_budget", "intro", node=NODE, n_features=N_FEATURES, topic=TOPIC, res=res)
    for i, (a, b, c, d) in enumerate(rows):
        key = keys[i] if i < len(keys) else None
        cells = [columns[arch].get(key, "-") if arch in columns and key else "-"
                 for arch in ARCHES]  # fmt: skip
        lines.append(f"| {a} | {b} | {c} | {d} | {cells[0]} | {cells[1]} |")
    long = res["long"]
    lines += prose(
        "pi_budget", "notes", res=res, deps=DEPS_IMPORT, load=" ".join(res["load"]), long=long,
        batch=long.get("batch", 1), drain=long.get("drain_s", float("nan")),
    )  # fmt: skip
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
        *(f"  {what}: {res[k + '_s']:.3f} ({res[k + '_cpu_s']:.3f})" for k, what in [
            ("import", f"{res['leaf_import']} (budget 0.15)"),
            ("import_numpy", "numpy"),
            ("import_after_numpy", "the same after import numpy"),
            ("import_deps", DEPS_IMPORT),
            ("import_before", res["leaf_import_before"]),
            ("import_agents", "edge_runtime.agents"),
        ]),
        f"RSS after start: {res['rss_start_mb']:.1f} MB (budget 40), "
        f"{res['threads_start']} threads; plain python (no -OO): "
        f"{res['rss_start_plain_mb']:.1f} MB",
        f"RSS of python -c pass: {res['rss_python_mb']:.1f} MB, after numpy: "
        f"{res['rss_numpy_mb']:.1f} MB, after {DEPS_IMPORT}: {res['rss_deps_mb']:.1f} MB, "
        f"after the leaf's imports: {res['rss_import_mb']:.1f} MB",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pi_budget")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "report")
    parser.add_argument("--quick", action="store_true", help="short windows, 10^4 readings")
    parser.add_argument(
        "--no-lean",
        action="store_true",
        help="this venv with rich hidden, not a lean venv (pip install . without extras)",
    )
    parser.add_argument(
        "--start-only",
        action="store_true",
        help="import times and RSS after start only, printed; no CPU or long run, no report",
    )
    args = parser.parse_args(argv)
    res = measure(args.quick, lean=not args.no_lean, start_only=args.start_only)
    if args.start_only:
        print(start_summary(res))
        return 0
    write_result(
        args.out / RESULT_FILE,
        "pi-budget",
        {"quick": args.quick, "lean": not args.no_lean},
        {"native": res},
        {k: res[k] for k in ("import_s", "rss_start_mb", "rss_long_mb") if k in res},
    )
    print(render(args.out))
    return 0


def render(out: Path) -> str:
    """Rewrite ``out/pi_budget.md`` from ``out/pi_budget.json`` and the emulated columns of
    ``benchmarks/report/pi_budget_emulated.json``, measuring nothing; the Markdown."""
    from benchmarks.pi_budget.emulated import load

    text = report(read_result(out / RESULT_FILE, "pi-budget")["rows"]["native"], load())
    (out / "pi_budget.md").write_text(text)
    return text
