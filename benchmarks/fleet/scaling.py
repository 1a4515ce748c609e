"""Benchmark (g): the runtime at fleet sizes, as a user runs it (issue 9, item 6).

Every number comes from a subprocess running the shipped command line, so it is what a
user gets, start-up excluded where the runtime reports its own times:

- **sweep** (`run_sweep`): ``edge-runtime run TOPO --data FILE --json [--workers N]`` on a
  depth-2 tree of k leaves (fan-out ``ceil(sqrt(k))``, `benchmarks.fleet.inputs`; k =
  1024 is 32 x 32, the Done-when topology), 200 synthetic d = 48 readings per leaf. Per k:
  wall, readings/s, agent messages per reading, payload / raw bytes, re-sent readings,
  peak RSS, error ratio, p50 / p95 latency from a reading to the root (the run's JSON;
  "n/a" where a key is missing), medians over repeats; a run past its time limit is
  stopped and reported as stalled.
- **large** (`run_sweep`, `FleetSizes.large`): one ``edge-runtime run`` of 10,240 leaves
  under fan-out 64 with 50 readings each (issue 21), counting the ``publish_not_delivered``
  lines it logs (the echo check must not report a snapshot the broker delivered).
- **motes** (`run_motes`): ``edge-runtime run topologies/motes-light.toml --json``.
- **latency** and **agent** (`benchmarks.fleet.live`): every node its own ``edge-runtime
  agent`` process.
- **dtype** (`benchmarks.fleet.dtype`): float32 against float64 snapshots, offline.

`FleetSizes` holds the sizes (`FULL`, `QUICK`, `TINY` for the smoke test);
`benchmarks.fleet.report_section` evaluates issue 9's Done-when items and renders section (g).
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.fleet.inputs import write_fleet_inputs
from benchmarks.processes import CommandResult, edge_runtime_command, run_command

__all__ = [
    "FULL",
    "METRICS",
    "MOTES_TOPOLOGY",
    "QUICK",
    "TINY",
    "FleetSizes",
    "MotesResult",
    "RunOutcome",
    "SweepResult",
    "SweepRow",
    "metrics_of",
    "run_motes",
    "run_sweep",
    "summarise",
]

MOTES_TOPOLOGY = Path(__file__).resolve().parents[2] / "topologies" / "motes-light.toml"


@dataclass(frozen=True)
class FleetSizes:
    """Sizes, repeats and time limits of the fleet benchmark.

    Attributes
    ----------
    ks : tuple of int
        Leaf counts of the sweep.
    readings_per_leaf : int
        Synthetic readings each leaf gets in the sweep (d = 48).
    repeats : int
        Runs per k below ``large_k`` (medians are reported).
    large_k, large_repeats : int
        From ``large_k`` leaves on, ``large_repeats`` runs per k (minutes each).
    run_timeout_s : float
        A run still going after this many seconds is stopped and reported as stalled.
    workers : int or None
        ``--workers`` of ``edge-runtime run``; None leaves the runtime's default.
    motes_repeats : int
        Runs of the Motes demo.
    latency_readings, latency_rate : int, float
        Readings (the first rows of Motes light) and readings/s of the latency part.
    agent_leaves, agent_rate, agent_seconds : int, float, float
        The agent-cost part: leaves under one aggregator, readings/s each, seconds.
    large : (int, int, int) or None
        ``(leaves, fan-out, readings per leaf)`` of one more run after the sweep (its
        ``publish_not_delivered`` count is issue 21's Done-when item); None: not run.
    """

    name: str = "full"
    ks: tuple[int, ...] = (8, 32, 128, 512, 1024)
    readings_per_leaf: int = 200
    repeats: int = 3
    large_k: int = 512
    large_repeats: int = 1
    run_timeout_s: float = 900.0
    workers: int | None = None
    motes_repeats: int = 5
    latency_readings: int = 4000
    latency_rate: float = 200.0
    agent_leaves: int = 4
    agent_rate: float = 100.0
    agent_seconds: float = 20.0
    large: tuple[int, int, int] | None = (10_240, 64, 50)

    def repeats_for(self, n_leaves: int) -> int:
        """Runs of the sweep at ``n_leaves``."""
        return self.large_repeats if n_leaves >= self.large_k else self.repeats


FULL = FleetSizes()
QUICK = FleetSizes(
    name="quick",
    large=None,
    ks=(8, 32),
    repeats=1,
    run_timeout_s=300.0,
    motes_repeats=1,
    latency_readings=800,
    agent_seconds=5.0,
)
TINY = FleetSizes(
    name="tiny",
    large=None,
    ks=(4,),
    readings_per_leaf=60,
    repeats=1,
    run_timeout_s=120.0,
    motes_repeats=1,
    latency_readings=160,
    latency_rate=400.0,
    agent_leaves=1,
    agent_rate=50.0,
    agent_seconds=1.0,
)

#: Numbers taken from each run's JSON summary, median over runs (None: not reported).
METRICS: tuple[str, ...] = (
    "wall_s",
    "readings_per_s",
    "messages_per_reading",
    "payload_ratio",
    "resent",
    "undelivered",
    "peak_rss_bytes",
    "error_ratio",
    "latency_p50_s",
    "latency_p95_s",
    "workers",
    "process_wall_s",
    "process_cpu_s",
    "process_max_rss_bytes",
    "process_total_rss_bytes",
    "not_delivered_logged",
    "delivered_late_logged",
    "connection_lost_logged",
)


@dataclass
class RunOutcome:
    """One ``edge-runtime run``: its exit, cost and JSON summary.

    Attributes
    ----------
    returncode : int or None
        Exit status; None when it was stopped at the time limit (stalled).
    wall_s : float
        Seconds the process lived, start-up and data loading included.
    cpu_s : float or None
        CPU seconds of the process and its broker (``wait4``).
    max_rss_bytes : int or None
        Peak resident set of the run's largest process (``VmHWM``, polled).
    total_rss_bytes : int or None
        Sum of the peak resident sets of the run's processes (the run, its broker, its
        workers): an upper bound of the memory it needed.
    summary : dict
        The ``--json`` object; empty when none was printed.
    error : str
        The last line of stderr when the run failed.
    logged : dict of str to int, optional
        Structured log lines by event (`CommandResult.log_events`); None when not
        counted (results of an older harness).
    """

    returncode: int | None
    wall_s: float
    cpu_s: float | None
    max_rss_bytes: int | None
    total_rss_bytes: int | None = None
    summary: dict[str, object] = field(default_factory=dict)
    error: str = ""
    logged: dict[str, int] | None = None

    @classmethod
    def from_command(cls, result: CommandResult) -> RunOutcome:
        """Parse a `run_command` result of ``edge-runtime run --json``."""
        summary: dict[str, object] = {}
        for line in reversed(result.stdout.strip().splitlines()):
            try:
                parsed = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(parsed, dict):
                summary = parsed
                break
        error = ""
        if result.returncode != 0:
            lines = [ln for ln in result.stderr_tail.splitlines() if ln.strip()]
            error = lines[-1][:300] if lines else ""
            if result.stalled:
                error = f"stalled: stopped after {result.wall_s:.0f} s" + (
                    f" ({error})" if error else ""
                )
        return cls(
            returncode=result.returncode,
            wall_s=result.wall_s,
            cpu_s=result.cpu_s,
            max_rss_bytes=result.max_rss_bytes,
            total_rss_bytes=result.total_rss_bytes,
            summary=summary,
            error=error,
            logged=dict(result.log_events),
        )

    @property
    def covered(self) -> bool:
        """Exit 0 and the root covered every leaf."""
        return self.returncode == 0 and self.summary.get("covered") is True


def _number(summary: Mapping[str, object], key: str) -> float | None:
    value = summary.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def metrics_of(run: RunOutcome) -> dict[str, float | None]:
    """`METRICS` of one run: JSON keys as they are, ratios derived, None if missing.

    ``readings_per_s`` falls back to ``samples / wall_s`` when the run does not report it.
    """
    s = run.summary
    samples = _number(s, "samples")
    out: dict[str, float | None] = {
        "wall_s": _number(s, "wall_s"),
        "readings_per_s": _number(s, "readings_per_s"),
        "messages_per_reading": _ratio(_number(s, "messages"), samples),
        "payload_ratio": _ratio(_number(s, "payload_bytes"), _number(s, "raw_bytes")),
        "process_wall_s": run.wall_s,
        "process_cpu_s": run.cpu_s,
        "process_max_rss_bytes": None if run.max_rss_bytes is None else float(run.max_rss_bytes),
        "process_total_rss_bytes": (
            None if run.total_rss_bytes is None else float(run.total_rss_bytes)
        ),
    }
    if out["readings_per_s"] is None:
        out["readings_per_s"] = _ratio(samples, out["wall_s"])
    for key, event in (
        ("not_delivered_logged", "publish_not_delivered"),
        ("delivered_late_logged", "publish_delivered_late"),
        ("connection_lost_logged", "connection_lost"),
    ):
        out[key] = None if run.logged is None else float(run.logged.get(event, 0))
    for key in METRICS:
        if key not in out:
            out[key] = _number(s, key)
    return out


def summarise(runs: Sequence[RunOutcome]) -> dict[str, float | None]:
    """Median of each of `METRICS` over the covered runs (over all runs with a summary if
    none covered); None where no run reports it. NaN values count as missing."""
    chosen = [r for r in runs if r.covered] or [r for r in runs if r.summary]
    per_run = [metrics_of(r) for r in chosen]
    out: dict[str, float | None] = {}
    for key in METRICS:
        values = [m[key] for m in per_run if m[key] is not None and math.isfinite(m[key])]
        out[key] = statistics.median(values) if values else None
    return out


LARGE_SETTLE_TIMEOUT_S = 900
"""``--timeout`` of the large run: 10,240 leaves on 2 cores took about 200 s from the last
reading sent to the root covering every reading (the 60 s default covered 7,282)."""


def _run_args(
    topology: Path, data: Path | None, workers: int | None, settle_timeout_s: float | None = None
) -> list[str]:
    args = [*edge_runtime_command(), "run", str(topology), "--json"]
    if settle_timeout_s is not None:
        args += ["--timeout", str(settle_timeout_s)]
    if data is not None:
        args += ["--data", str(data)]
    if workers is not None:
        args += ["--workers", str(workers)]
    return args


def _describe(run: RunOutcome) -> str:
    m = metrics_of(run)
    if run.returncode is None:
        return run.error

    def show(key: str, fmt: str) -> str:
        return "n/a" if m[key] is None else format(m[key], fmt)

    text = (
        f"exit {run.returncode}, wall {show('wall_s', '.2f')} s, "
        f"{show('readings_per_s', ',.0f')} readings/s, "
        f"{show('messages_per_reading', '.4f')} msg/reading, "
        f"payload/raw {show('payload_ratio', '.3f')}, ratio {show('error_ratio', '.6f')}"
    )
    return text + (f" -- {run.error}" if run.error else "")


@dataclass
class SweepRow:
    """The runs at one leaf count ``n_leaves`` and their medians (`summarise`)."""

    n_leaves: int
    fan_out: int
    n_sites: int
    readings_per_leaf: int
    runs: list[RunOutcome] = field(default_factory=list)
    medians: dict[str, float | None] = field(default_factory=dict)


@dataclass
class SweepResult:
    """The sweep over k: one `SweepRow` per k, and how it was run."""

    rows: list[SweepRow]
    readings_per_leaf: int
    n_features: int
    workers: int | None
    run_timeout_s: float
    large: SweepRow | None = None


def run_sweep(sizes: FleetSizes, log: Callable[[str], None] = print) -> SweepResult:
    """Run ``edge-runtime run`` at every k of ``sizes.ks`` (repeats interleaved over k).

    Inputs are written to a temporary folder (topology and data per k, reused by the
    repeats) and removed afterwards.
    """
    rows: dict[int, SweepRow] = {}
    with tempfile.TemporaryDirectory(prefix="fleet-sweep-") as tmp:
        inputs: dict[int, tuple[Path, Path]] = {}
        for k in sizes.ks:
            fan = math.isqrt(k - 1) + 1  # ceil(sqrt(k))
            inputs[k] = write_fleet_inputs(
                k, Path(tmp) / str(k), readings_per_leaf=sizes.readings_per_leaf, fan_out=fan
            )
            rows[k] = SweepRow(k, fan, math.ceil(k / fan), sizes.readings_per_leaf)
        for rep in range(max(sizes.repeats_for(k) for k in sizes.ks)):
            for k in sizes.ks:
                if rep >= sizes.repeats_for(k):
                    continue
                topology, data = inputs[k]
                result = run_command(_run_args(topology, data, sizes.workers), sizes.run_timeout_s)
                run = RunOutcome.from_command(result)
                rows[k].runs.append(run)
                log(f"  k={k} run {rep + 1}/{sizes.repeats_for(k)}: {_describe(run)}")
        large = None if sizes.large is None else _run_large(sizes, Path(tmp) / "large", log)
    for row in rows.values():
        row.medians = summarise(row.runs)
    return SweepResult(
        rows=[rows[k] for k in sizes.ks],
        readings_per_leaf=sizes.readings_per_leaf,
        n_features=48,
        workers=sizes.workers,
        run_timeout_s=sizes.run_timeout_s,
        large=large,
    )


def _run_large(sizes: FleetSizes, folder: Path, log: Callable[[str], None]) -> SweepRow:
    """One run at ``sizes.large`` = (leaves, fan-out, readings per leaf)."""
    assert sizes.large is not None
    k, fan, per_leaf = sizes.large
    topology, data = write_fleet_inputs(k, folder, readings_per_leaf=per_leaf, fan_out=fan)
    args = _run_args(topology, data, sizes.workers, LARGE_SETTLE_TIMEOUT_S)
    result = run_command(args, max(sizes.run_timeout_s, LARGE_SETTLE_TIMEOUT_S + 300))
    data.unlink()  # hundreds of MB: gone before the next part runs
    run = RunOutcome.from_command(result)
    logged = run.logged or {}
    log(
        f"  large k={k} (fan-out {fan}, {per_leaf} readings per leaf): {_describe(run)}; "
        f"publish_not_delivered {logged.get('publish_not_delivered', 0)}, "
        f"publish_delivered_late {logged.get('publish_delivered_late', 0)}, "
        f"connection_lost {logged.get('connection_lost', 0)}"
    )
    return SweepRow(k, fan, math.ceil(k / fan), per_leaf, [run], summarise([run]))


@dataclass
class MotesResult:
    """Runs of the Motes demo (``topologies/motes-light.toml``) and their medians."""

    runs: list[RunOutcome]
    medians: dict[str, float | None]
    workers: int | None


def run_motes(sizes: FleetSizes, log: Callable[[str], None] = print) -> MotesResult:
    """Run ``edge-runtime run topologies/motes-light.toml --json`` ``motes_repeats`` times."""
    runs = []
    for rep in range(sizes.motes_repeats):
        result = run_command(_run_args(MOTES_TOPOLOGY, None, sizes.workers), sizes.run_timeout_s)
        runs.append(RunOutcome.from_command(result))
        log(f"  motes run {rep + 1}/{sizes.motes_repeats}: {_describe(runs[-1])}")
    return MotesResult(runs=runs, medians=summarise(runs), workers=sizes.workers)
