"""The measurements and the report of `benchmarks.pi_budget`."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiomqtt
import numpy as np

from edge_runtime.broker import LocalMosquitto
from edge_runtime.wire import encode_readings

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "topologies" / "minimal.toml"
NODE = "leaf-1"
TOPIC = f"sensors/{NODE}"
N_FEATURES = 48
IMPORT_RUNS = 7
LEAF_IMPORT = "edge_runtime.cli.dispatch, edge_runtime.cli.run"
"""What ``edge-runtime agent`` imports before it runs (its handler is in ``cli.run``)."""
NO_RICH = "import sys; sys.modules['rich'] = None; "
"""rich is no dependency of the project (import-linter, a dev tool, brings it), but
structlog imports it (and pygments) where it is installed: hidden, as on a Pi."""
FAST_RATE = 2000.0
"""Readings/s for the 10^5-reading run (faster than 100/s, to keep it short)."""
N_LONG = 100_000
CLK_TCK = os.sysconf("SC_CLK_TCK")

BUDGETS = {
    "import": 0.15,  # s
    "rss_start": 40.0,  # MB
    "rss_growth": 5.0,  # MB
    "cpu_100": 0.1,  # ms per reading
}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def cpu_s(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def import_time(module: str, runs: int = IMPORT_RUNS, prefix: str = "") -> float:
    """Median wall time of ``python -c 'import module'`` minus ``python -c pass``."""

    def median(code: str) -> float:
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return median(f"{prefix}import {module}") - median(f"{prefix}pass")


class Leaf:
    """One ``edge-runtime agent`` process for `NODE` against ``url``."""

    def __init__(self, url: str) -> None:
        argv = [sys.executable, "-m", "edge_runtime.cli", "agent", "--topology", str(TOPOLOGY),
                "--node", NODE, "--broker", url, "--n-features", str(N_FEATURES)]  # fmt: skip
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
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


def payloads(n: int, seed: int = 0, batch: int = 1) -> list[bytes]:
    """``n`` messages of ``batch`` readings each (a flat array when ``batch`` is 1)."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(100.0, 10.0, size=(n * batch, N_FEATURES))
    rows = rows @ np.diag(np.linspace(1, 3, N_FEATURES))
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


def measure(quick: bool = False) -> dict:
    res: dict = {"python": sys.version.split()[0], "machine": platform.machine(),
                 "cpu_model": _cpu_model(), "leaf_import": LEAF_IMPORT}  # fmt: skip
    res["import_s"] = import_time(LEAF_IMPORT, 3 if quick else IMPORT_RUNS)
    res["import_norich_s"] = import_time(LEAF_IMPORT, 3 if quick else IMPORT_RUNS, NO_RICH)
    res["import_agents_s"] = import_time("edge_runtime.agents", 3 if quick else IMPORT_RUNS)
    res["import_numpy_s"] = import_time("numpy", 3 if quick else IMPORT_RUNS)
    res["load"] = Path("/proc/loadavg").read_text().split()[:3]
    pool = payloads(1000)
    windows = {1.0: 60.0, 10.0: 30.0, 100.0: 30.0}
    if quick:
        windows = dict.fromkeys(windows, 10.0)
    n_long = 10_000 if quick else N_LONG
    with LocalMosquitto() as broker:
        assert broker.port is not None
        leaf = Leaf(broker.url)
        try:
            if not leaf.connected.wait(60):
                raise RuntimeError("agent did not connect:\n" + "".join(leaf.log))
            time.sleep(0.5)
            res["rss_start_mb"] = rss_mb(leaf.pid)
            res["cpu"] = [
                cpu_per_reading(leaf, broker.port, pool, rate, window)
                for rate, window in windows.items()
            ]
            res["cpu_batched"] = cpu_per_reading(
                leaf, broker.port, payloads(100, batch=BATCH), 100.0, windows[100.0], BATCH
            )
            res["rss_before_long_mb"] = rss_mb(leaf.pid)
            t = asyncio.run(feed(broker.port, pool, n_long, FAST_RATE))
            wait_quiet(leaf.pid)
            res["long"] = {"n": n_long, "rate": FAST_RATE, "elapsed_s": t}
            res["rss_long_mb"] = rss_mb(leaf.pid)
            if leaf.proc.poll() is not None:
                raise RuntimeError("agent exited:\n" + "".join(leaf.log[-20:]))
        finally:
            leaf.stop()
    return res


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def _ok(value: float, budget: float) -> str:
    return "pass" if value <= budget else "FAIL"


def report(res: dict) -> str:
    emu = "see scripts/test-arm.sh"
    cpu = {c["rate"]: c for c in res["cpu"]}
    growth = res["rss_long_mb"] - res["rss_start_mb"]
    imp, start = res["import_s"], res["rss_start_mb"]
    rows = [
        ("import (s)", f"{imp:.3f}", "<= 0.15", _ok(imp, BUDGETS["import"])),
        ("RSS after start (MB)", f"{start:.1f}", "<= 40", _ok(start, BUDGETS["rss_start"])),
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
    lines = [
        "# What a Pi pays: one leaf agent",
        "",
        f"`python -m benchmarks.pi_budget`: one `edge-runtime agent` process (leaf `{NODE}` of "
        f"`topologies/minimal.toml`, {N_FEATURES} features) against a local Mosquitto, readings "
        f"as msgpack arrays on `{TOPIC}` at QoS 1. Native: {res['machine']}, {res['cpu_model']}, "
        f"Python {res['python']}.",
        "",
        "| budget | native x86 | budget | pass/fail | aarch64 (emulated) | armhf (emulated) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} | {d} | {emu} | {emu} |" for a, b, c, d in rows]
    lines += [
        "",
        f"- import: median of `python -c 'import {res['leaf_import']}'` (everything "
        "`edge-runtime agent` imports before it runs) minus `python -c pass`; "
        f"`import edge_runtime.agents` alone: {res['import_agents_s']:.3f} s; with `rich` "
        f"hidden (no dependency of the project: the dev tool import-linter brings it, and "
        f"structlog then imports it and pygments), as on a Pi: {res['import_norich_s']:.3f} s. "
        f"`python -c 'import numpy'` for scale: {res['import_numpy_s']:.3f} s. The machine "
        f"is shared (load average at the start: {' '.join(res['load'])}), so these vary "
        "between runs.",
        "- RSS after start: VmRSS 0.5 s after the agent logged `connected`.",
        "- CPU per reading: the agent's utime + stime over the window divided by the readings "
        "sent in it; idle work (keepalive, timers) counts. One reading per message unless "
        "the row says otherwise (a 2-D array per message, as the sensor topic accepts).",
        f"- RSS after {res['long']['n']:,} readings: sent at {res['long']['rate']:g}/s (faster "
        f"than 100/s, {res['long']['elapsed_s']:.0f} s), read once the agent went quiet; the "
        f"difference is to RSS after start (before the long run, after the CPU windows: "
        f"{res['rss_before_long_mb']:.1f} MB).",
        "- No timing claims for real Raspberry Pi hardware.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pi_budget")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "report")
    parser.add_argument("--quick", action="store_true", help="short windows, 10^4 readings")
    args = parser.parse_args(argv)
    res = measure(args.quick)
    text = report(res)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pi_budget.md").write_text(text)
    print(text)
    return 0
