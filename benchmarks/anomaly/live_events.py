"""The sensor-fault detector on a leaf through a real broker, against the same detector
offline on the same stream.

``python -m benchmarks anomaly-live [--seed 0] [--rate 500] [--out DIR] [--work DIR]``: Motes
light (`event_bench.motes`) clean and with seed ``S``'s faults after the warm-up (`inject`) is
written as CSV (17 significant digits: the replay reads exactly the offline values) and
replayed by ``edge-runtime run live_faults.toml`` against a private Mosquitto into one leaf
(``score_detector = "faults"``, warm-up rows 0-2786, the offline benchmark's); each scores
document maps back to its row (``seq``; rows without one count as no alarm and are reported).
Offline, `FaultDetector.from_warmup` then `event_bench.run_stream`. Both go through the event
metrics side by side, with the per-reading agreement and, beside them, the offline benchmark
(`event_bench.evaluate`) over ``--pool-seeds`` seeds: one seed is one draw of its spread.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import aiomqtt
import numpy as np

from benchmarks.anomaly import event_bench as bench
from benchmarks.anomaly.event_bench import DetectorResult
from benchmarks.anomaly.inject import Fault, inject, noise_sigma
from benchmarks.anomaly.nab import nab_score
from benchmarks.registry import REPORT_DIR
from benchmarks.reporting import prose, table
from benchmarks.schema import read_result, revive, write_result
from edge_runtime.broker import LocalMosquitto
from edge_runtime.cli.argtypes import positive_float
from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import FaultDetector
from edge_runtime.topology import load_topology

__all__ = ["TOPOLOGY", "alarms_from_documents", "document_rows", "main", "offline", "replay",
           "score_runs"]

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = Path(__file__).with_name("live_faults.toml")
SOURCE = re.compile(r"^replay:[^:]+:(?P<leaf>.+)$")
LEAF = "leaf"
RESULT_FILE = "anomaly_live.json"
SETTLE_S = 2.0  # a quiet listener this long after the run ends: every document is in
MAX_SETTLE_S = 30.0
Run = tuple[np.ndarray, np.ndarray]  # alarm (bool) and suspected sensor (int) per row


def offline(data: np.ndarray, warmup: int, epoch: float) -> Run:
    """The detector of the leaf, offline: warmed on rows ``[0, warmup)``, then row by row."""
    return bench.run_stream(FaultDetector.from_warmup(data[:warmup]), data, warmup, epoch)


def document_rows(docs: list[dict], rows_of: dict[str, np.ndarray]) -> Iterator[tuple[int, dict]]:
    """(row, document) of each scores document of a replay: ``source`` names the leaf
    (``replay:<run>:<leaf>``), ``seq`` the position in its rows (``rows_of``,
    `Topology.split_rows`); documents of other sources or leaves, or past the rows, are skipped."""
    for doc in docs:
        m, seq = SOURCE.match(str(doc.get("source"))), doc.get("seq")
        rows = rows_of.get(m["leaf"]) if m else None
        if rows is not None and isinstance(seq, int) and seq < len(rows):
            yield int(rows[seq]), doc


def alarms_from_documents(
    docs: list[dict], rows: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``n``: alarm, suspected sensor (-1: none) and "has a document", from the
    documents of the leaf whose rows are ``rows`` (int)."""
    alarms, sensors, seen = np.zeros(n, bool), np.full(n, -1, np.int64), np.zeros(n, bool)
    for row, doc in document_rows(docs, {LEAF: rows}):
        seen[row] = True
        alarms[row] = bool(doc.get("anomaly"))
        sensor = doc.get("sensor")
        sensors[row] = int(sensor) if alarms[row] and isinstance(sensor, int) else -1
    return alarms, sensors, seen


def score_runs(
    name: str, clean: Run, faulty: Run, faults: list[Fault], warmup: int, epoch: float
) -> DetectorResult:
    """The event metrics of one clean and one faulty run ((alarms, sensors) per row)."""
    res = DetectorResult(name)
    res.add_clean(clean[0], warmup, epoch)
    res.nab = nab_score([res.add_faulty(*faulty, faults, warmup)])
    res.nab_seeds = [res.nab]
    return res


async def replay(
    topology: Path, args: list[str], topic: str, timeout_s: float
) -> tuple[list[dict], int, float]:
    """Run ``edge-runtime run TOPOLOGY --broker URL *args`` against a private Mosquitto,
    collecting the JSON documents of the ``.../scores`` topics under ``topic`` (a filter)
    until none came for `SETTLE_S`; returns them, the exit status and the run's seconds
    (the run is killed after ``timeout_s``)."""
    docs: list[dict] = []
    ready = asyncio.Event()

    async def listen(host: str, port: int) -> None:
        async with aiomqtt.Client(host, port, identifier="anomaly-replay") as client:
            await client.subscribe(topic, qos=1)
            ready.set()
            async for message in client.messages:
                if str(message.topic).endswith("/scores"):
                    with contextlib.suppress(ValueError):
                        docs.append(json.loads(bytes(message.payload)))  # type: ignore[arg-type]

    with LocalMosquitto() as broker:
        listener = asyncio.create_task(listen(broker.host, broker.port))
        await asyncio.wait_for(ready.wait(), 10)
        cmd = [sys.executable, "-m", "edge_runtime.cli", "run", str(topology), "--broker",
               broker.url, *args]
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(*cmd, cwd=REPO)
        try:
            code = await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            proc.kill()
            code = await proc.wait()
        seconds = time.perf_counter() - t0
        count, quiet_since, deadline = -1, time.monotonic(), time.monotonic() + MAX_SETTLE_S
        while time.monotonic() < deadline:  # the documents still in flight
            if len(docs) != count:
                count, quiet_since = len(docs), time.monotonic()
            elif time.monotonic() - quiet_since >= SETTLE_S:
                break
            await asyncio.sleep(0.2)
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
    return docs, code, seconds


def _agreement(name: str, live: Run, off: Run) -> list[str]:
    """Alarms offline, alarms live, rows whose alarm differs, common alarms naming another
    sensor."""
    (a_live, s_live), (a_off, s_off) = live, off
    both_other = a_live & a_off & (s_live != s_off)
    counts = (a_off.sum(), a_live.sum(), np.sum(a_live != a_off), np.sum(both_other))
    return [name, *(str(int(c)) for c in counts)]


def _spread(results: list[DetectorResult]) -> list[str]:
    """A sentence on the pooled row's per-seed NAB spread (lines, then a blank)."""
    pooled = [r.nab_seeds for r in results if len(r.nab_seeds) > 1]
    if not pooled:
        return []
    s = pooled[0]
    return [f"The pooled row is `event_bench.evaluate` (the offline benchmark) over {len(s)} "
            f"seeds: its NAB per seed is {np.median(s):.1f} median, [{np.min(s):.1f}, "
            f"{np.max(s):.1f}] (seeds 0..{len(s) - 1}: " + ", ".join(f"{v:.1f}" for v in s)
            + "); one seed's row above is one draw from that spread.", ""]


def render(
    seed: int, rate: float, results: list[DetectorResult], agreement: list[list[str]],
    coverage: list[list[str]], warmup: int, n: int, provenance: str,
) -> str:
    """The Markdown report; ``provenance`` is its last line (when, at which commit)."""
    agreement_header = ["stream", "alarms offline", "alarms live", "rows whose alarm differs",
                        "alarms naming another sensor"]
    coverage_header = ["stream", "rows after the warm-up", "scores documents",
                       "rows without a document", "run (s)", "exit"]
    lines = prose("anomaly_live", "report", n=n, last_warm=warmup - 1, seed=seed, rate=rate,
                  warmup=warmup, main_table=bench.main_table(results))
    lines += _spread(results)
    lines += prose("anomaly_live", "tables", provenance=provenance,
                   agreement=table(agreement_header, agreement, align="lrrrr"),
                   coverage=table(coverage_header, coverage, align="lrrrrr"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring. Returns 0 if both runs exited 0."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks anomaly-live")
    add = parser.add_argument
    add("--seed", type=int, default=0, help="fault seed (default 0)")
    add("--rate", type=positive_float, default=500.0, help="readings/s (default 500)")
    add("--out", type=Path, default=REPORT_DIR)
    add("--work", type=Path, default=None, help="folder for the CSVs")
    add("--timeout", type=positive_float, default=600.0, help="seconds per run")
    add("--pool-seeds", type=int, default=5,
        help="also run the offline benchmark over seeds 0..N-1 for its spread (default 5; 0: no)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="live-events-"))
    work.mkdir(parents=True, exist_ok=True)
    ds, topology = bench.motes(), load_topology(TOPOLOGY)
    warmup, n = int(topology.nodes[LEAF].score_warmup), ds.data.shape[0]
    assert warmup == ds.warmup, "the leaf's warm-up must be the offline benchmark's"
    inj = inject(ds.data, start=warmup, seed=args.seed, sigma=noise_sigma(ds.data[:warmup]))
    rows, scored = topology.split_rows(n)[LEAF], slice(warmup, n)
    live, off, agreement, coverage = {}, {}, [], []
    for name, matrix in {"clean": ds.data, "faulty": inj.data}.items():
        path = work / f"motes-light-{name}.csv"
        np.savetxt(path, matrix, delimiter=",", fmt="%.17g")
        print(f"{name}: offline", flush=True)
        off[name] = offline(load_dataset(path), warmup, ds.epoch)  # the values the replay sends
        print(f"{name}: live at {args.rate:g} readings/s", flush=True)
        run_args = ["--data", str(path), "--rate", str(args.rate), "--log-level", "warning"]
        docs, code, seconds = asyncio.run(
            replay(TOPOLOGY, run_args, topology.scores_topic(LEAF), args.timeout))
        alarms, sensors, seen = alarms_from_documents(docs, rows, n)
        live[name] = (alarms, sensors)
        off_scored = (off[name][0][scored], off[name][1][scored])
        agreement.append(_agreement(name, (alarms[scored], sensors[scored]), off_scored))
        coverage.append([name, str(n - warmup), str(len(docs)), str(int(np.sum(~seen[scored]))),
                         f"{seconds:.0f}", str(code)])
        print(f"  {len(docs)} documents, exit {code}, {seconds:.0f} s", flush=True)
    results = [score_runs(f"{label} (seed {args.seed})", runs["clean"], runs["faulty"],
                          inj.faults, warmup, ds.epoch)
               for label, runs in (("offline", off), ("live, through the broker", live))]
    if args.pool_seeds > 0:
        print(f"offline benchmark, {args.pool_seeds} seeds", flush=True)
        pooled = f"offline benchmark, seeds 0-{args.pool_seeds - 1} pooled"
        results.append(bench.evaluate(pooled, FaultDetector.from_warmup, ds, args.pool_seeds))
    provenance = bench.provenance(args.pool_seeds).replace(
        f", {args.pool_seeds} seeds,", f", fault seed {args.seed}, {args.pool_seeds} pooled seeds,")
    write_result(
        args.out / RESULT_FILE, "anomaly-live",
        {"seed": args.seed, "rate": args.rate, "warmup": warmup, "readings": n,
         "provenance": provenance},
        {"detectors": results, "agreement": agreement, "coverage": coverage},
        {r.name: r.nab for r in results},
    )
    print(render_stored(args.out))
    print(f"wrote {args.out / 'anomaly_live.md'}")
    return 0 if all(row[-1] == "0" for row in coverage) else 1


def render_stored(out: Path) -> str:
    """Rewrite ``out/anomaly_live.md`` from ``out/anomaly_live.json``, measuring nothing."""
    doc = read_result(out / RESULT_FILE, "anomaly-live")
    p, rows = doc["parameters"], doc["rows"]
    text = render(p["seed"], p["rate"], revive(list[DetectorResult], rows["detectors"]),
                  rows["agreement"], rows["coverage"], p["warmup"], p["readings"], p["provenance"])
    (out / "anomaly_live.md").write_text(text)
    return text


if __name__ == "__main__":
    raise SystemExit(main())
