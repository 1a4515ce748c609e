"""Every benchmark by name (`BENCHMARKS`): its command, the reports it writes and how they are
re-rendered. Functions are ``"module:function"`` strings imported only when used, so listing
the benchmarks imports none of them (nor numpy, matplotlib or the runtime)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["BENCHMARKS", "REPORT_DIR", "Benchmark", "render_all"]

#: Where the committed reports and their stored results live.
REPORT_DIR = Path(__file__).resolve().parent / "report"


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: ``entry`` takes the command's arguments and returns an exit status (None
    is 0); ``summary`` is its line in the listing; ``render`` rewrites its ``reports`` in a
    folder from the ``results`` stored there (None: it keeps none); paths relative to the folder.
    """

    entry: str
    summary: str
    render: str | None = None
    reports: tuple[str, ...] = ()
    results: tuple[str, ...] = ()


BENCHMARKS: dict[str, Benchmark] = {
    "suite": Benchmark(
        "benchmarks.run:main",
        "numerics (a)-(f), (i) and on request fleet (g), FedPower (h): REPORT.md, minutes",
        "benchmarks.run:render",
        ("REPORT.md",),
        ("results.json",),
    ),
    "acceptance": Benchmark(
        "benchmarks.acceptance:main",
        "the deployment as documented under seeded faults at three rates, about an hour",
        "benchmarks.acceptance:render",
        ("acceptance.md",),
        ("acceptance.json",),
    ),
    "anomaly-events": Benchmark(
        "benchmarks.anomaly.event_bench:main",
        "fault events: recall, delay, identification, NAB, about 4 minutes",
        "benchmarks.anomaly.event_bench:render_stored",
        ("anomaly_events.md", "anomaly_events.png"),
        ("anomaly_events.json",),
    ),
    "anomaly-oracle": Benchmark(
        "benchmarks.anomaly.event_oracle:main",
        "hindsight thresholds: how far any per-reading statistic can go, under a minute",
        "benchmarks.anomaly.event_oracle:render_stored",
        ("anomaly_oracle.md",),
        ("anomaly_oracle.json",),
    ),
    "anomaly-live": Benchmark(
        "benchmarks.anomaly.live_events:main",
        "the fault detector on a leaf through a real broker against offline",
        "benchmarks.anomaly.live_events:render_stored",
        ("anomaly_live.md",),
        ("anomaly_live.json",),
    ),
    "anomaly-demo": Benchmark(
        "benchmarks.anomaly.demo:main",
        "live replay of Motes light with injected faults, leaves scoring, ~10 s",
    ),
    "anomaly-flags": Benchmark(
        "benchmarks.anomaly.precision_recall:main",
        "print the per-reading precision / recall table of section (i)",
    ),
    "fleet-inputs": Benchmark(
        "benchmarks.fleet.inputs:main",
        "write the topology and CSV of the k-leaf fleet of section (g)",
    ),
    "churn": Benchmark(
        "benchmarks.fleet.churn:main",
        "1024 leaves with joins and retirements against the run without churn",
        "benchmarks.fleet.churn:render_stored",
        ("churn.md",),
        ("churn.json",),
    ),
    "membership": Benchmark(
        "benchmarks.fleet.membership:main",
        "enrol, retire and forget leaves as deployed against a dynsec Mosquitto",
        "benchmarks.fleet.membership:render_stored",
        ("membership.md",),
        ("membership.json",),
    ),
    "longevity": Benchmark(
        "benchmarks.longevity.cli:main",
        "a leaf and its aggregator over simulated days: fsync, bytes, memory",
        "benchmarks.longevity.report:render",
        ("longevity/LONGEVITY.md", "longevity/LONGEVITY-DAYS.md", "longevity/longevity.png"),
        ("longevity/longevity.json", "longevity/longevity-days.json"),
    ),
    "soak": Benchmark(
        "benchmarks.soak.cli:main",
        "processes under faults for minutes: RSS and open files (--io: /proc/PID/io)",
        "benchmarks.soak.report:render",
        ("longevity/SOAK.md",),
        ("longevity/soak.json",),
    ),
    "pi-budget": Benchmark(
        "benchmarks.pi_budget.run:main",
        "what a Pi pays: one leaf as deployed, CPU per reading, RSS, import time",
        "benchmarks.pi_budget.run:render",
        ("pi_budget.md",),
        ("pi_budget.json",),
    ),
    "pi-budget-emulated": Benchmark(
        "benchmarks.pi_budget.emulated:main",
        "the aarch64 and armhf columns of pi_budget.md under qemu user-mode emulation",
        reports=("pi_budget_emulated.json",),
    ),
    "secagg": Benchmark(
        "benchmarks.secagg.run:main",
        "secure sum per site on Motes light, offline, about a minute",
        "benchmarks.secagg.run:render",
        ("secagg.md", "secagg.png"),
        ("secagg.json",),
    ),
    "secagg-live": Benchmark(
        "benchmarks.secagg_live.run:main",
        "secure sum per site on Motes light, live against Mosquitto, about 20 minutes",
        "benchmarks.secagg_live.run:render",
        ("secagg_live.md", "secagg_live.png"),
        ("secagg_live.json",),
    ),
    "secagg-race": Benchmark(
        "benchmarks.secagg_live.provenance_race:cli",
        "reproduce a site snapshot counting readings of a slot not yet released",
    ),
    "render": Benchmark(
        "benchmarks.registry:render_all",
        "measure nothing: rewrite every report that keeps its results from them",
    ),
}


def _function(name: str) -> Callable[..., Any]:
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def render_all(argv: Sequence[str] = ()) -> int:
    """``python -m benchmarks render [--out DIR] [NAME ...]``: rewrite the reports of the named
    benchmarks (default: all with stored results; the others listed as not rendered) in ``DIR``
    (default `REPORT_DIR`) from their results there. FileNotFoundError for a named benchmark
    without them."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks render")
    parser.add_argument("names", nargs="*", metavar="NAME")
    parser.add_argument("--out", type=Path, default=REPORT_DIR)
    args = parser.parse_args(list(argv))
    known = [n for n, b in BENCHMARKS.items() if b.render]
    if set(args.names) - set(known):
        parser.error(f"NAME must be one of {', '.join(known)}")
    for name in args.names or known:
        bench = BENCHMARKS[name]
        missing = [f for f in bench.results if not (args.out / f).exists()]
        if missing and not args.names:  # a report made before its benchmark kept results
            print(f"not rendered {name}: no stored {', '.join(missing)}")
            continue
        if missing:
            raise FileNotFoundError(f"{name}: no stored {', '.join(missing)} in {args.out}")
        _function(bench.render)(args.out)  # type: ignore[arg-type]
        print(f"rendered {name} in {args.out}")
    return 0
