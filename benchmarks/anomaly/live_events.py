"""Issue 25's live check: the sensor-fault detector on a leaf, through a real broker, against
the same detector offline on the same stream.

``python -m benchmarks.anomaly.live_events [--seed 0] [--rate 500] [--out DIR] [--work DIR]``

1. Motes light (dropouts filled, `event_bench.motes`) and the same rows with seed ``S``'s
   faults injected after the warm-up (`inject.inject`, default `FaultConfig`, the offline
   benchmark's protocol) are written as CSV with 17 significant digits, so the replay reads
   exactly the values the offline run uses (both load them with
   `edge_runtime.datasets.load_dataset`).
2. For each of the two matrices, a private Mosquitto starts on a free loopback port, a
   listener subscribes to the leaf's ``scores`` topic, and ``edge-runtime run
   benchmarks/anomaly/live_faults.toml --data CSV --rate R`` replays the matrix: one leaf
   (``score = "reading"``, ``score_detector = "faults"``, ``score_warmup = 2787``) sees every
   row in order, so its warm-up is rows 0-2786, the offline benchmark's.
3. Each document maps back to its row (one leaf: ``seq`` is the row); ``anomaly`` and
   ``sensor`` give the alarm per row, rows without a document count as no alarm (and are
   reported).
4. Offline, `FaultDetector.from_warmup` of rows 0-2786 then `event_bench.run_stream` over
   the rest. Both runs go through the event metrics of `benchmarks.anomaly.events` (the
   per-seed body of `event_bench.evaluate`) and `event_bench.main_table`, side by side, with
   the per-reading agreement, into ``DIR/anomaly_live.md``; beside them the offline
   benchmark itself (`event_bench.evaluate`) pooled over ``--pool-seeds`` seeds, with its
   per-seed NAB spread.

One seed is one stream: its recall and NAB are one draw of the offline benchmark's 20-seed
pool (whose per-seed NAB spread the report quotes), so the comparison that matters is live
against offline on the same stream, which should agree reading for reading.
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
from pathlib import Path

import aiomqtt
import numpy as np

from benchmarks.anomaly.event_bench import (
    DAY_S,
    DetectorResult,
    _provenance,
    evaluate,
    main_table,
    motes,
    nab_stream,
    run_stream,
)
from benchmarks.anomaly.events import classify_events, match_faults, merge_alarms
from benchmarks.anomaly.inject import Fault, inject, noise_sigma
from benchmarks.anomaly.nab import nab_score
from benchmarks.reporting import prose, table
from benchmarks.schema import read_result, revive, write_result
from edge_runtime.broker import LocalMosquitto
from edge_runtime.cli.argtypes import positive_float
from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import FaultDetector
from edge_runtime.topology import load_topology

__all__ = ["TOPOLOGY", "alarms_from_documents", "main", "offline", "score_runs"]

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = Path(__file__).with_name("live_faults.toml")
SOURCE = re.compile(r"^replay:[^:]+:(?P<leaf>.+)$")
LEAF = "leaf"
#: The stored results (`benchmarks.schema`) next to ``anomaly_live.md``.
RESULT_FILE = "anomaly_live.json"
SETTLE_S = 2.0  # a quiet listener this long after the run ends: every document is in
MAX_SETTLE_S = 30.0


def offline(data: np.ndarray, warmup: int, epoch: float) -> tuple[np.ndarray, np.ndarray]:
    """The detector of the leaf, offline: warmed on rows ``[0, warmup)``, then row by row."""
    detector = FaultDetector.from_warmup(data[:warmup])
    return run_stream(detector, data, warmup, epoch)


def alarms_from_documents(
    docs: list[dict], rows: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-row alarm, suspected sensor and "has a document" from the leaf's documents.

    Parameters
    ----------
    docs : list of dict
        Decoded scores documents (``source`` ``replay:<run>:<leaf>``, ``seq`` the position
        in the leaf's rows); other documents are skipped.
    rows : ndarray of int
        The leaf's rows (`Topology.split_rows`).
    n : int
        Rows of the matrix.
    """
    alarms = np.zeros(n, dtype=bool)
    sensors = np.full(n, -1, dtype=np.int64)
    seen = np.zeros(n, dtype=bool)
    for doc in docs:
        m = SOURCE.match(str(doc.get("source")))
        seq = doc.get("seq")
        if m is None or m["leaf"] != LEAF or not isinstance(seq, int) or seq >= len(rows):
            continue
        row = int(rows[seq])
        seen[row] = True
        alarms[row] = bool(doc.get("anomaly"))
        sensor = doc.get("sensor")
        sensors[row] = int(sensor) if alarms[row] and isinstance(sensor, int) else -1
    return alarms, sensors, seen


def score_runs(
    name: str,
    clean: tuple[np.ndarray, np.ndarray],
    faulty: tuple[np.ndarray, np.ndarray],
    faults: list[Fault],
    warmup: int,
    epoch: float,
) -> DetectorResult:
    """The event metrics of one clean and one faulty run (`event_bench.evaluate`'s body)."""
    res = DetectorResult(name)
    alarms, _ = clean
    n = len(alarms)
    res.clean_events = len(merge_alarms(alarms[warmup:], np.zeros(n - warmup, int)))
    res.clean_readings = n - warmup
    res.clean_days = res.clean_readings * epoch / DAY_S
    res.clean_share = float(alarms[warmup:].mean())
    alarms, sensors = faulty
    events = merge_alarms(alarms, sensors)
    for f in faults:
        res.injected[f.kind] = res.injected.get(f.kind, 0) + 1
    for m in match_faults(faults, events):
        k = m.fault.kind
        res.visible[k] = res.visible.get(k, 0) + 1
        if m.detected:
            res.detected[k] = res.detected.get(k, 0) + 1
            res.delays.setdefault(k, []).append(int(m.delay or 0))
            res.n_detected += 1
            res.identified += int(bool(m.identified))
    res.true_events, res.false_events, res.neutral_events = classify_events(events, faults)
    res.nab = nab_score([nab_stream(events, faults, n - warmup, n)])
    res.nab_seeds = [res.nab]
    return res


async def _listen(host: str, port: int, topic: str, docs: list[dict], ready: asyncio.Event) -> None:
    async with aiomqtt.Client(host, port, identifier="live-events") as client:
        await client.subscribe(topic, qos=1)
        ready.set()
        async for message in client.messages:
            with contextlib.suppress(ValueError):
                docs.append(json.loads(bytes(message.payload)))  # type: ignore[arg-type]


async def replay(data_path: Path, rate: float, timeout_s: float) -> tuple[list[dict], int, float]:
    """Run ``edge-runtime run`` on `TOPOLOGY` with ``--data data_path`` against a private
    Mosquitto; the leaf's scores documents, the exit status and the run's seconds."""
    topology = load_topology(TOPOLOGY)
    docs: list[dict] = []
    with LocalMosquitto() as broker:
        ready = asyncio.Event()
        listener = asyncio.create_task(
            _listen(broker.host, broker.port, topology.scores_topic(LEAF), docs, ready)
        )
        await asyncio.wait_for(ready.wait(), 10)
        cmd = [
            sys.executable,
            "-m",
            "edge_runtime.cli",
            "run",
            str(TOPOLOGY),
            "--data",
            str(data_path),
            "--broker",
            broker.url,
            "--rate",
            str(rate),
            "--log-level",
            "warning",
        ]
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


def _agreement(
    name: str, live: tuple[np.ndarray, np.ndarray], off: tuple[np.ndarray, np.ndarray]
) -> list[str]:
    a_live, s_live = live
    a_off, s_off = off
    both = a_live & a_off
    return [
        name,
        str(int(a_off.sum())),
        str(int(a_live.sum())),
        str(int(np.sum(a_live != a_off))),
        str(int(np.sum(both & (s_live != s_off)))),
    ]


def _spread(results: list[DetectorResult]) -> list[str]:
    """A sentence on the pooled row's per-seed NAB spread (lines, then a blank)."""
    pooled = [r for r in results if len(r.nab_seeds) > 1]
    if not pooled:
        return []
    seeds = pooled[0].nab_seeds
    return [
        f"The pooled row is `event_bench.evaluate` (the offline benchmark) over {len(seeds)} "
        f"seeds: its NAB per seed is {np.median(seeds):.1f} median, "
        f"[{np.min(seeds):.1f}, {np.max(seeds):.1f}] (seeds 0..{len(seeds) - 1}: "
        + ", ".join(f"{v:.1f}" for v in seeds)
        + "); one seed's row above is one draw from that spread.",
        "",
    ]


def render(
    seed: int,
    rate: float,
    results: list[DetectorResult],
    agreement: list[list[str]],
    coverage: list[list[str]],
    warmup: int,
    n: int,
    provenance: str,
) -> str:
    """The Markdown report; ``provenance`` is its last line (when, at which commit)."""
    agreement_header = [
        "stream", "alarms offline", "alarms live", "rows whose alarm differs",
        "alarms naming another sensor",
    ]  # fmt: skip
    coverage_header = [
        "stream", "rows after the warm-up", "scores documents", "rows without a document",
        "run (s)", "exit",
    ]  # fmt: skip
    lines = prose(
        "anomaly_live", "report", n=n, last_warm=warmup - 1, seed=seed, rate=rate,
        warmup=warmup, main_table=main_table(results),
    )  # fmt: skip
    lines += _spread(results)
    lines += prose(
        "anomaly_live", "tables", provenance=provenance,
        agreement=table(agreement_header, agreement, align="lrrrr"),
        coverage=table(coverage_header, coverage, align="lrrrrr"),
    )  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring. Returns 0 if both runs exited 0."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.anomaly.live_events")
    parser.add_argument("--seed", type=int, default=0, help="fault seed (default 0)")
    parser.add_argument(
        "--rate", type=positive_float, default=500.0, help="readings/s (default 500)"
    )
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "report")
    parser.add_argument("--work", type=Path, default=None, help="folder for the CSVs")
    parser.add_argument("--timeout", type=positive_float, default=600.0, help="seconds per run")
    parser.add_argument(
        "--pool-seeds",
        type=int,
        default=5,
        help="also run the offline benchmark over seeds 0..N-1 for its spread (default 5; 0: no)",
    )
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="live-events-"))
    work.mkdir(parents=True, exist_ok=True)
    ds = motes()
    warmup = int(load_topology(TOPOLOGY).nodes[LEAF].score_warmup)
    assert warmup == ds.warmup, "the leaf's warm-up must be the offline benchmark's"
    sigma = noise_sigma(ds.data[:warmup])
    inj = inject(ds.data, start=warmup, seed=args.seed, sigma=sigma)
    matrices = {"clean": ds.data, "faulty": inj.data}
    n = ds.data.shape[0]
    rows = load_topology(TOPOLOGY).split_rows(n)[LEAF]
    live, off, agreement, coverage = {}, {}, [], []
    for name, matrix in matrices.items():
        path = work / f"motes-light-{name}.csv"
        np.savetxt(path, matrix, delimiter=",", fmt="%.17g")
        data = load_dataset(path)  # the values the replay sends
        print(f"{name}: offline", flush=True)
        off[name] = offline(data, warmup, ds.epoch)
        print(f"{name}: live at {args.rate:g} readings/s", flush=True)
        docs, code, seconds = asyncio.run(replay(path, args.rate, args.timeout))
        alarms, sensors, seen = alarms_from_documents(docs, rows, n)
        live[name] = (alarms, sensors)
        scored = slice(warmup, n)
        agreement.append(
            _agreement(name, (alarms[scored], sensors[scored]), tuple(a[scored] for a in off[name]))
        )
        coverage.append(
            [
                name,
                str(n - warmup),
                str(len(docs)),
                str(int(np.sum(~seen[scored]))),
                f"{seconds:.0f}",
                str(code),
            ]
        )
        print(f"  {len(docs)} documents, exit {code}, {seconds:.0f} s", flush=True)
    results = [
        score_runs(
            f"{label} (seed {args.seed})",
            runs["clean"],
            runs["faulty"],
            inj.faults,
            warmup,
            ds.epoch,
        )
        for label, runs in (("offline", off), ("live, through the broker", live))
    ]
    if args.pool_seeds > 0:
        print(f"offline benchmark, {args.pool_seeds} seeds", flush=True)
        pooled = evaluate(
            f"offline benchmark, seeds 0-{args.pool_seeds - 1} pooled",
            FaultDetector.from_warmup,
            ds,
            args.pool_seeds,
        )
        results.append(pooled)
    provenance = _provenance(args.pool_seeds).replace(
        f", {args.pool_seeds} seeds,", f", fault seed {args.seed}, {args.pool_seeds} pooled seeds,"
    )
    write_result(
        args.out / RESULT_FILE,
        "anomaly-live",
        {"seed": args.seed, "rate": args.rate, "warmup": warmup, "readings": n,
         "provenance": provenance},
        {"detectors": results, "agreement": agreement, "coverage": coverage},
        {r.name: r.nab for r in results},
    )  # fmt: skip
    print(render_stored(args.out))
    print(f"wrote {args.out / 'anomaly_live.md'}")
    return 0 if all(row[-1] == "0" for row in coverage) else 1


def render_stored(out: Path) -> str:
    """Rewrite ``out/anomaly_live.md`` from ``out/anomaly_live.json``, measuring nothing."""
    doc = read_result(out / RESULT_FILE, "anomaly-live")
    p, rows = doc["parameters"], doc["rows"]
    text = render(
        p["seed"], p["rate"], revive(list[DetectorResult], rows["detectors"]), rows["agreement"],
        rows["coverage"], p["warmup"], p["readings"], p["provenance"],
    )  # fmt: skip
    (out / "anomaly_live.md").write_text(text)
    return text


if __name__ == "__main__":
    raise SystemExit(main())
