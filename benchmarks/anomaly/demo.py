"""Live demo: Motes light with injected faults replayed through the runtime, leaves scoring.

``python -m benchmarks anomaly-demo [--out DIR] [--rate R] [--seed S]`` writes into ``DIR``
the faulty CSV (dropouts filled, `faults.FaultConfig` faults from row 0, seed ``S``), its
labels (``labels.csv``: kind and mote per row) and ``topologies/motes-light.toml`` with
``score = "reading"``, ``score_detector = "static"`` and no ``valid_range`` (it would reject
the +3000 lux spikes before they are scored); runs it at ``R`` readings/s against a private
Mosquitto (``--plot DIR/plots``), maps each scores document back to its row and prints
precision and recall per fault kind. Readings scored before a leaf has the root's first model
count as "unscored"; the model is the live one, so the numbers differ from section (i)'s.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.anomaly.faults import KINDS, fill_dropouts, inject_faults
from benchmarks.anomaly.live_events import document_rows, replay
from benchmarks.anomaly.precision_recall import per_kind
from benchmarks.reporting import table
from edge_runtime.datasets import load_dataset
from edge_runtime.topology import load_topology

__all__ = ["main", "prepare", "tally"]

TOPOLOGY = Path(__file__).resolve().parents[2] / "topologies" / "motes-light.toml"


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
    # the static detector: section (i)'s Q/T^2 flags live (the "faults" detector's warm-up,
    # a device-day, is longer than a leaf's share of these rows)
    text = text.replace("[defaults]", '[defaults]\nscore = "reading"\nscore_detector = "static"', 1)
    text = re.sub(r"^valid_range = .*\n", "", text, flags=re.MULTILINE)  # score the spikes
    topo = out / "motes-light-faults.toml"
    topo.write_text(text)
    return topo, faulty.labels


def tally(docs: list[dict], topology_path: Path, labels: np.ndarray) -> dict[str, dict]:
    """Per kind (``clean`` first): ``scored``, ``unscored``, ``flagged`` (readings),
    ``recall`` and ``precision`` (NaN where undefined; ``clean``'s recall is the false-alarm
    rate) from the scores documents of a run of ``topology_path``, with ``labels`` (n,) the
    index into `faults.KINDS` per row; every false alarm is charged to every kind."""
    n = labels.shape[0]
    flagged, scored = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    for row, doc in document_rows(docs, load_topology(topology_path).split_rows(n)):
        scored[row], flagged[row] = True, bool(doc.get("anomaly"))
    out = {}
    for k, (total, hit, precision) in enumerate(per_kind(flagged[scored], labels[scored])):
        out["clean" if k == 0 else KINDS[k]] = {
            "scored": total, "unscored": int(np.sum(~scored & (labels == k))), "flagged": hit,
            "recall": hit / total if total else float("nan"), "precision": precision}
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the demo; print the table. Returns the exit status of ``edge-runtime run``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks anomaly-demo")
    parser.add_argument("--out", type=Path, default=None, help="folder (default: a new temp one)")
    parser.add_argument("--rate", type=float, default=4000.0, help="readings/s (default 4000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="anomaly-demo-"))
    topo, labels = prepare(out, args.seed)
    run_args = ["--rate", str(args.rate), "--plot", str(out / "plots")]
    topic = f"{load_topology(topo).prefix}/#"
    docs, code, _ = asyncio.run(replay(topo, run_args, topic, timeout_s=3600.0))
    print(f"\n{len(docs)} score documents; files in {out}\n")
    rows = [[kind, t["scored"], t["unscored"], t["flagged"], f"{t['recall']:.3f}",
             "" if kind == "clean" else f"{t['precision']:.3f}"]
            for kind, t in tally(docs, topo, labels).items()]
    header = ["kind", "scored", "unscored", "flagged", "recall", "precision"]
    print(table(header, rows, align="lrrrrr"))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
