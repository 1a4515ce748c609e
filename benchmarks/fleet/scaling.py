"""Benchmark (g), what ``edge-runtime run TOPO [--data FILE] --json`` measures as a user runs it.

- **sweep** (`run_sweep`): depth-2 trees of k leaves (fan-out ``ceil(sqrt(k))``,
  `benchmarks.fleet.inputs`), medians of `METRICS` over repeats; a run past its time limit
  is stopped and reported as stalled. With `FleetSizes.large`, one more run of 10,240
  leaves counting the ``publish_not_delivered`` lines it logs.
- **motes** (`run_motes`): ``topologies/motes-light.toml``.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.fleet.inputs import write_fleet_inputs
from benchmarks.measure import median_of
from benchmarks.processes import CommandResult, edge_runtime_command, run_command

__all__ = [
    "FULL", "METRICS", "MOTES_TOPOLOGY", "QUICK", "TINY", "FleetSizes", "MotesResult",
    "RunOutcome", "SweepResult", "SweepRow", "metrics_of", "run_motes", "run_sweep", "summarise",
]  # fmt: skip

MOTES_TOPOLOGY = Path(__file__).resolve().parents[2] / "topologies" / "motes-light.toml"
#: ``--timeout`` of the large run: 10,240 leaves on 2 cores took about 200 s from the last
#: reading sent to full coverage (the 60 s default covered 7,282).
LARGE_SETTLE_TIMEOUT_S = 900


@dataclass(frozen=True)
class FleetSizes:
    """Sizes, repeats and time limits (seconds) of the fleet benchmark's parts.

    ``ks``: leaf counts of the sweep, ``readings_per_leaf`` each (d = 48), ``repeats`` runs
    per k below ``large_k`` and ``large_repeats`` from it on; ``workers``: ``--workers`` of
    ``edge-runtime run`` (None: its default). ``latency_*``: first Motes rows and readings/s
    of `benchmarks.fleet.live.measure_latency`; ``agent_*``: leaves under one aggregator,
    readings/s each and seconds of `~benchmarks.fleet.live.measure_agent_cost`. ``large``:
    ``(leaves, fan-out, readings per leaf)`` of one more run (None: not run).
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
    name="quick", large=None, ks=(8, 32), repeats=1, run_timeout_s=300.0, motes_repeats=1,
    latency_readings=800, agent_seconds=5.0,
)  # fmt: skip
TINY = FleetSizes(
    name="tiny", large=None, ks=(4,), readings_per_leaf=60, repeats=1, run_timeout_s=120.0,
    motes_repeats=1, latency_readings=160, latency_rate=400.0, agent_leaves=1, agent_rate=50.0,
    agent_seconds=1.0,
)  # fmt: skip

#: Log events counted per run, by the metric that holds the count.
LOGGED = {
    "not_delivered_logged": "publish_not_delivered",
    "delivered_late_logged": "publish_delivered_late",
    "connection_lost_logged": "connection_lost",
}
#: Numbers of each run (`metrics_of`), median over runs (None: not reported).
METRICS: tuple[str, ...] = (
    "wall_s", "readings_per_s", "messages_per_reading", "payload_ratio", "resent",
    "undelivered", "peak_rss_bytes", "error_ratio", "latency_p50_s", "latency_p95_s", "workers",
    "process_wall_s", "process_cpu_s", "process_max_rss_bytes", "process_total_rss_bytes",
    *LOGGED,
)  # fmt: skip


@dataclass
class RunOutcome:
    """One ``edge-runtime run``: exit status (None: stopped at the time limit), seconds the
    process lived, CPU seconds with its broker (``wait4``), peak RSS of its largest process
    and the sum over its processes (``VmHWM``, bytes), its ``--json`` summary, the last
    stderr line when it failed, and its log lines by event (None: not counted, older
    results)."""

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
                error = f"stalled: stopped after {result.wall_s:.0f} s" + (error and f" ({error})")
        return cls(
            result.returncode, result.wall_s, result.cpu_s, result.max_rss_bytes,
            result.total_rss_bytes, summary, error, dict(result.log_events),
        )  # fmt: skip

    @property
    def covered(self) -> bool:
        """Exit 0 and the root covered every leaf."""
        return self.returncode == 0 and self.summary.get("covered") is True


def _number(summary: Mapping[str, object], key: str) -> float | None:
    value = summary.get(key)
    return None if isinstance(value, bool) or not isinstance(value, int | float) else float(value)


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def metrics_of(run: RunOutcome) -> dict[str, float | None]:
    """`METRICS` of one run: JSON keys as they are, ratios derived, None if missing;
    ``readings_per_s`` falls back to ``samples / wall_s``."""
    s = run.summary
    out = {key: _number(s, key) for key in METRICS}
    out["messages_per_reading"] = _ratio(_number(s, "messages"), _number(s, "samples"))
    out["payload_ratio"] = _ratio(_number(s, "payload_bytes"), _number(s, "raw_bytes"))
    if out["readings_per_s"] is None:
        out["readings_per_s"] = _ratio(_number(s, "samples"), out["wall_s"])
    for key, value in (
        ("process_wall_s", run.wall_s), ("process_cpu_s", run.cpu_s),
        ("process_max_rss_bytes", run.max_rss_bytes),
        ("process_total_rss_bytes", run.total_rss_bytes),
    ):  # fmt: skip
        out[key] = None if value is None else float(value)
    for key, event in LOGGED.items():
        out[key] = None if run.logged is None else float(run.logged.get(event, 0))
    return out


def summarise(runs: Sequence[RunOutcome]) -> dict[str, float | None]:
    """Median of each of `METRICS` over the covered runs (over all runs with a summary if
    none covered); None where no run reports it. NaN values count as missing."""
    chosen = [r for r in runs if r.covered] or [r for r in runs if r.summary]
    per_run = [metrics_of(r) for r in chosen]
    return {key: median_of(m[key] for m in per_run) for key in METRICS}


def _run(
    topology: Path, data: Path | None, workers: int | None, limit_s: float, settle_s: float = 0
) -> RunOutcome:
    args = [*edge_runtime_command(), "run", str(topology), "--json"]
    args += ["--timeout", str(settle_s)] if settle_s else []
    args += [] if data is None else ["--data", str(data)]
    args += [] if workers is None else ["--workers", str(workers)]
    return RunOutcome.from_command(run_command(args, limit_s))


def _describe(run: RunOutcome) -> str:
    if run.returncode is None:
        return run.error
    m = metrics_of(run)
    show = {k: "n/a" if m[k] is None else format(m[k], f) for k, f in (
        ("wall_s", ".2f"), ("readings_per_s", ",.0f"), ("messages_per_reading", ".4f"),
        ("payload_ratio", ".3f"), ("error_ratio", ".6f"))}  # fmt: skip
    return (
        f"exit {run.returncode}, wall {show['wall_s']} s, {show['readings_per_s']} readings/s, "
        f"{show['messages_per_reading']} msg/reading, payload/raw {show['payload_ratio']}, "
        f"ratio {show['error_ratio']}" + (run.error and f" -- {run.error}")
    )


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
    """``edge-runtime run`` at every k of ``sizes.ks``, repeats interleaved over k, inputs in
    a temporary folder."""
    rows: dict[int, SweepRow] = {}
    with tempfile.TemporaryDirectory(prefix="fleet-sweep-") as tmp:
        inputs: dict[int, tuple[Path, Path]] = {}
        for k in sizes.ks:
            fan = math.isqrt(k - 1) + 1  # ceil(sqrt(k))
            inputs[k] = write_fleet_inputs(k, Path(tmp) / str(k), sizes.readings_per_leaf, fan)
            rows[k] = SweepRow(k, fan, math.ceil(k / fan), sizes.readings_per_leaf)
        for rep in range(max(sizes.repeats_for(k) for k in sizes.ks)):
            for k in [k for k in sizes.ks if rep < sizes.repeats_for(k)]:
                run = _run(*inputs[k], sizes.workers, sizes.run_timeout_s)
                rows[k].runs.append(run)
                log(f"  k={k} run {rep + 1}/{sizes.repeats_for(k)}: {_describe(run)}")
        large = None if sizes.large is None else _run_large(sizes, Path(tmp) / "large", log)
    for row in rows.values():
        row.medians = summarise(row.runs)
    return SweepResult(
        [rows[k] for k in sizes.ks], sizes.readings_per_leaf, 48, sizes.workers,
        sizes.run_timeout_s, large,
    )  # fmt: skip


def _run_large(sizes: FleetSizes, folder: Path, log: Callable[[str], None]) -> SweepRow:
    """One run at ``sizes.large`` = (leaves, fan-out, readings per leaf)."""
    assert sizes.large is not None
    k, fan, per_leaf = sizes.large
    topology, data = write_fleet_inputs(k, folder, per_leaf, fan)
    limit_s = max(sizes.run_timeout_s, LARGE_SETTLE_TIMEOUT_S + 300)
    run = _run(topology, data, sizes.workers, limit_s, LARGE_SETTLE_TIMEOUT_S)
    data.unlink()  # hundreds of MB: gone before the next part runs
    counts = ", ".join(f"{e} {(run.logged or {}).get(e, 0)}" for e in LOGGED.values())
    log(f"  large k={k} (fan-out {fan}, {per_leaf} readings per leaf): {_describe(run)}; {counts}")
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
        runs.append(_run(MOTES_TOPOLOGY, None, sizes.workers, sizes.run_timeout_s))
        log(f"  motes run {rep + 1}/{sizes.motes_repeats}: {_describe(runs[-1])}")
    return MotesResult(runs, summarise(runs), sizes.workers)
