"""Live demo: replay Motes light with injected faults through the runtime, leaves scoring.

``python -m benchmarks.anomaly.demo [--out DIR] [--rate R] [--seed S]``:

1. writes ``DIR/motes-light-faults.csv`` (Motes light, dropouts filled, faults of
   `faults.FaultConfig` injected from row 0, seed ``S``) and ``DIR/labels.csv`` (per row:
   fault kind and mote, the ground truth);
2. writes ``DIR/motes-light-faults.toml``: ``topologies/motes-light.toml`` with
   ``score = "reading"`` and ``score_detector = "static"`` on every leaf, the CSV as its
   dataset and without its ``valid_range`` (the light sensors' [0, 2000] lux would reject
   the +3000 lux spikes before they are scored; the demo measures the scores);
3. starts a private Mosquitto on a free loopback port, listens to every leaf's
   ``<prefix>/<path>/scores``, and runs ``edge-runtime run`` on that topology at ``R``
   readings/s with ``--plot DIR/plots``;
4. maps each score document back to its row (the replay's source names the leaf, ``seq``
   is the position in the leaf's rows) and prints precision and recall per fault kind.

Readings that arrive before the leaf has the root's first model are not scored (counted
as "unscored"). The model the leaves score against is the live one, so the numbers
differ from benchmark (i)'s fixed-model ones; they show the same thing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import tempfile
from pathlib import Path

import aiomqtt
import numpy as np

from benchmarks.anomaly.faults import KINDS, fill_dropouts, inject_faults
from edge_runtime.broker import LocalMosquitto
from edge_runtime.datasets import load_dataset
from edge_runtime.topology import load_topology

__all__ = ["main", "prepare", "tally"]

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "topologies" / "motes-light.toml"
SOURCE = re.compile(r"^replay:[^:]+:(?P<leaf>.+)$")


def prepare(out: Path, seed: int) -> tuple[Path, np.ndarray]:
    """Write the faulty data, labels and topology into ``out``; return (topology, labels)."""
    out.mkdir(parents=True, exist_ok=True)
    clean = fill_dropouts(np.array(load_dataset("motes-light"), dtype=np.float64))
    faulty = inject_faults(clean, start=0, seed=seed)
    np.savetxt(out / "motes-light-faults.csv", faulty.data, delimiter=",", fmt="%.2f")
    labels = np.column_stack([faulty.labels, faulty.motes])
    np.savetxt(out / "labels.csv", labels, delimiter=",", fmt="%d", header="kind,mote")
    text = TOPOLOGY.read_text()
    text = text.replace('dataset = "motes-light"', 'dataset = "motes-light-faults.csv"', 1)
    # the static detector: the demo shows benchmark (i)'s Q/T^2 flags live (the "faults"
    # detector's warm-up, a device-day, is longer than a leaf's share of these rows)
    text = text.replace("[defaults]", '[defaults]\nscore = "reading"\nscore_detector = "static"', 1)
    text = re.sub(r"^valid_range = .*\n", "", text, flags=re.MULTILINE)  # score the spikes
    topo = out / "motes-light-faults.toml"
    topo.write_text(text)
    return topo, faulty.labels


def tally(docs: list[dict], topology_path: Path, labels: np.ndarray) -> dict[str, dict]:
    """Precision and recall per kind from score documents (one per reading).

    The rules of `precision_recall.score_faults` over the scored readings only: every
    false alarm is charged to every kind.

    Parameters
    ----------
    docs : list of dict
        Decoded ``<prefix>/<leaf>/scores`` documents (``source`` ``replay:<run>:<leaf>``,
        ``seq`` the reading's position in the leaf's rows, ``anomaly``); others are skipped.
    topology_path : Path
        The topology that was run: `Topology.split_rows` maps ``(leaf, seq)`` to a row.
    labels : ndarray of shape (n_samples,), int
        Index into `faults.KINDS` per row (`faults.FaultyData.labels`).

    Returns
    -------
    dict of str to dict
        Per kind (``clean`` first): ``scored``, ``unscored``, ``flagged`` (counts of
        readings), ``recall`` and ``precision`` (NaN where undefined; ``clean``'s recall
        is the false-alarm rate).
    """
    rows_of = load_topology(topology_path).split_rows(labels.shape[0])
    flagged = np.zeros(labels.shape[0], dtype=bool)
    scored = np.zeros(labels.shape[0], dtype=bool)
    for doc in docs:
        m = SOURCE.match(str(doc.get("source")))
        seq = doc.get("seq")
        if m is None or not isinstance(seq, int) or m["leaf"] not in rows_of:
            continue
        row = int(rows_of[m["leaf"]][seq])
        scored[row] = True
        flagged[row] = bool(doc.get("anomaly"))
    out: dict[str, dict] = {}
    false_pos = int(np.sum(flagged & scored & (labels == 0)))
    for k, kind in enumerate(KINDS):
        mask = scored & (labels == k)
        hit = int(np.sum(flagged & mask))
        total = int(mask.sum())
        precision = hit / (hit + false_pos) if k and hit + false_pos else float("nan")
        out["clean" if k == 0 else kind] = {
            "scored": total,
            "unscored": int(np.sum(~scored & (labels == k))),
            "flagged": hit,
            "recall": hit / total if total else float("nan"),
            "precision": precision,
        }
    return out


async def _listen(
    host: str, port: int, prefix: str, docs: list[dict], ready: asyncio.Event
) -> None:
    async with aiomqtt.Client(host, port, identifier="anomaly-demo") as client:
        await client.subscribe(f"{prefix}/#", qos=1)
        ready.set()
        async for message in client.messages:
            if str(message.topic).endswith("/scores"):
                try:
                    docs.append(json.loads(bytes(message.payload)))
                except ValueError:
                    continue


async def _run(topo: Path, rate: float, plots: Path) -> tuple[list[dict], int]:
    docs: list[dict] = []
    prefix = load_topology(topo).prefix
    with LocalMosquitto() as broker:
        ready = asyncio.Event()
        listener = asyncio.create_task(_listen(broker.host, broker.port, prefix, docs, ready))
        await asyncio.wait_for(ready.wait(), 10)
        cmd = [
            sys.executable,
            "-m",
            "edge_runtime.cli",
            "run",
            str(topo),
            "--broker",
            broker.url,
            "--rate",
            str(rate),
            "--plot",
            str(plots),
        ]
        proc = await asyncio.create_subprocess_exec(*cmd)
        code = await proc.wait()
        await asyncio.sleep(1.0)  # the last documents in flight
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
    return docs, code


def main(argv: list[str] | None = None) -> int:
    """Run the demo; print the table. Returns the exit status of ``edge-runtime run``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.anomaly.demo")
    parser.add_argument("--out", type=Path, default=None, help="folder (default: a new temp one)")
    parser.add_argument("--rate", type=float, default=4000.0, help="readings/s (default 4000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="anomaly-demo-"))
    topo, labels = prepare(out, args.seed)
    docs, code = asyncio.run(_run(topo, args.rate, out / "plots"))
    print(f"\n{len(docs)} score documents; files in {out}\n")
    print("| kind | scored | unscored | flagged | recall | precision |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind, t in tally(docs, topo, labels).items():
        precision = "" if kind == "clean" else f"{t['precision']:.3f}"
        print(
            f"| {kind} | {t['scored']} | {t['unscored']} | {t['flagged']} | "
            f"{t['recall']:.3f} | {precision} |"
        )
    return code


if __name__ == "__main__":
    raise SystemExit(main())
