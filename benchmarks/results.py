"""`Results`: what one run of the suite measured, a field per benchmark (`BENCHMARK_FIELDS`),
stored as ``results.json`` in the result schema (`save_results`) and read back (`load_results`)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.accuracy import Trajectory
from benchmarks.anomaly.section import AnomalyBenchResults
from benchmarks.fedpower.section import FedPowerBenchResults
from benchmarks.fleet.dtype import DtypeResult
from benchmarks.fleet.live import AgentCostResult, LatencyResult
from benchmarks.fleet.scaling import MotesResult, SweepResult
from benchmarks.memory import MemoryRow
from benchmarks.privacy import section as privacy_section
from benchmarks.schema import revive, write_result
from benchmarks.timing import AggregatorRow, MergeRow, ThroughputRow

__all__ = [
    "BENCHMARK_FIELDS", "DERIVED_PROPERTIES", "PARAMETERS", "Results", "clear_results",
    "load_results", "save_results",
]  # fmt: skip

#: Properties of the result rows that ``results.json`` also records (not read back).
DERIVED_PROPERTIES = (
    "ratio", "speedup", "naive", "update_per_log2k", "covered", "cpu_per_reading_s", "cpu_share",
    "bound_s",
)  # fmt: skip


@dataclass
class Results:
    """Everything one run of the suite measured (see `benchmarks.run`)."""

    mode: str
    rank: int
    block_size: int
    oversample: int
    environment: dict[str, str]
    motes: dict[str, Trajectory] = field(default_factory=dict)
    motes_shape: tuple[int, int] = (0, 0)
    federated: dict[str, float] = field(default_factory=dict)
    synth: dict[float, dict[str, Trajectory]] = field(default_factory=dict)
    synth_shape: tuple[int, int] = (0, 0)
    throughput: list[ThroughputRow] = field(default_factory=list)
    merge: MergeRow | None = None
    merge_sweep_d: list[MergeRow] = field(default_factory=list)
    merge_sweep_r: list[MergeRow] = field(default_factory=list)
    aggregator: list[AggregatorRow] = field(default_factory=list)
    growth: tuple[float, float] = (math.nan, math.nan)
    memory: list[MemoryRow] = field(default_factory=list)
    private_mode: privacy_section.PrivacyResults | None = None
    fleet_sweep: SweepResult | None = None
    fleet_motes: MotesResult | None = None
    fleet_latency: LatencyResult | None = None
    fleet_agent: AgentCostResult | None = None
    fleet_dtype: DtypeResult | None = None
    fedpower: FedPowerBenchResults | None = None
    anomaly: AnomalyBenchResults | None = None
    seconds: dict[str, float] = field(default_factory=dict)


#: The `Results` fields each benchmark of `benchmarks.run` fills.
BENCHMARK_FIELDS: dict[str, tuple[str, ...]] = {
    "accuracy": ("motes", "motes_shape", "federated", "synth", "synth_shape"),
    "throughput": ("throughput",),
    "merge": ("merge", "merge_sweep_d", "merge_sweep_r"),
    "aggregator": ("aggregator", "growth"),
    "memory": ("memory",),
    "privacy": ("private_mode",),
    "fleet-sweep": ("fleet_sweep",),
    "fleet-motes": ("fleet_motes",),
    "fleet-latency": ("fleet_latency",),
    "fleet-agent": ("fleet_agent",),
    "fleet-dtype": ("fleet_dtype",),
    "fedpower": ("fedpower",),
    "anomaly": ("anomaly",),
}


def clear_results(res: Results, names: Sequence[str]) -> None:
    """Reset the fields of the benchmarks ``names`` (and their times) to a fresh run's."""
    fresh = Results(res.mode, res.rank, res.block_size, res.oversample, {})
    for name in names:
        for f in BENCHMARK_FIELDS[name]:
            setattr(res, f, getattr(fresh, f))
        res.seconds.pop(name, None)


#: The `Results` fields stored as the result file's parameters (the rest are rows, but for
#: ``environment`` and ``seconds``, stored as its environment).
PARAMETERS = ("mode", "rank", "block_size", "oversample")


def save_results(res: Results, path: Path) -> None:
    """Write ``res`` to ``path`` in the result schema: `PARAMETERS` as parameters, the
    benchmarks' fields as rows (with `DERIVED_PROPERTIES`), environment and seconds as the
    environment."""
    fields = [f.name for f in dataclasses.fields(res)]
    parameters = {k: getattr(res, k) for k in PARAMETERS}
    kept = (*PARAMETERS, "environment", "seconds")
    rows = {k: getattr(res, k) for k in fields if k not in kept}
    env = {**res.environment, "seconds": res.seconds}
    write_result(path, "suite", parameters, rows, {}, env, DERIVED_PROPERTIES)


def load_results(path: Path) -> Results:
    """``results.json`` (the schema of `save_results`, or the flat layout before it) back as
    `Results`; ValueError if the file is missing or not a results file."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read benchmark results {path}: {exc}") from None
    if isinstance(data, dict) and data.get("name") == "suite":
        env = dict(data["environment"])
        seconds = env.pop("seconds", {})
        data = {**data["parameters"], **data["rows"], "environment": env, "seconds": seconds}
    if not isinstance(data, dict) or "mode" not in data:
        raise ValueError(f"{path} is not a benchmarks.run results file")
    return revive(Results, data)
