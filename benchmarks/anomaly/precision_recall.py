"""Precision and recall of Q / T^2 flags on Motes light with injected faults (issue 13).

Protocol (``main()``; ``python -m benchmarks.anomaly.precision_recall``):

1. Motes light (7712 x 48 lux). Dropouts (zeros) are either kept (``dropouts="raw"``)
   or replaced by each mote's last non-zero reading (``"filled"``, causal,
   `faults.fill_dropouts`); both are reported.
2. The model is fitted on the clean first half (3856 readings) by ``FPCAEdge(48,
   rank=10, oversample=10, center=True)`` (the runtime's model is such a subspace);
   `AnomalyScorer` uses its tracked subspace (20 directions) with ``rank=10`` and the
   training ``total_energy`` (the 28 untracked eigenvalues spread evenly), alpha = 0.01.
3. Faults (`faults.FaultConfig` defaults, seed 0) are injected into the second half,
   which is then scored with the fixed model.

A flagged reading (row) counts as a detection of the fault covering it; false positives
are flags on clean readings. Per kind: ``recall = flagged / readings of that kind``,
``precision = flagged of that kind / (flagged of that kind + false positives)``, i.e.
every false alarm is charged to every kind (one mixed replay). The false-alarm rate on
clean readings is printed too: precision depends on it and on how many faulty readings
there are (100 spikes, 400 stuck, 800 drift of 3856).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.anomaly.faults import KINDS, FaultConfig, fill_dropouts, inject_faults
from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import FPCAEdge
from edge_runtime.fpca.scoring import AnomalyScorer, total_energy

__all__ = ["Row", "main", "markdown_table", "run"]

RANK = 10
OVERSAMPLE = 10
ALPHA = 0.01
SEED = 0


@dataclass(frozen=True)
class Row:
    """One line of the table: a fault kind (or ``clean``) under one dropout handling."""

    dropouts: str
    kind: str
    readings: int
    flagged: int
    recall: float
    precision: float


def run(
    dropouts: str = "filled", *, seed: int = SEED, config: FaultConfig | None = None
) -> list[Row]:
    """Fit on the clean first half, inject faults into the second, score; one row per kind.

    The ``clean`` row has ``recall`` = the false-alarm rate on clean readings and
    ``precision`` NaN.
    """
    if dropouts not in ("raw", "filled"):
        raise ValueError(f"dropouts must be 'raw' or 'filled', got {dropouts!r}")
    data = np.array(load_dataset("motes-light"), dtype=np.float64)
    if dropouts == "filled":
        data = fill_dropouts(data)
    n_train = data.shape[0] // 2
    train = data[:n_train]
    est = FPCAEdge(data.shape[1], RANK, oversample=OVERSAMPLE, center=True).fit(train)
    scorer = AnomalyScorer(
        est.tracked_subspace, ALPHA, rank=RANK, total_energy=total_energy(train, centered=True)
    )
    faulty = inject_faults(data, start=n_train, seed=seed, config=config)
    flags = scorer.flags(faulty.data[n_train:])
    labels = faulty.labels[n_train:]
    false_pos = int(np.sum(flags & (labels == 0)))
    rows = []
    for k, kind in enumerate(KINDS):
        mask = labels == k
        hit = int(np.sum(flags & mask))
        total = int(mask.sum())
        if k == 0:
            rows.append(Row(dropouts, "clean", total, hit, hit / total, float("nan")))
            continue
        precision = hit / (hit + false_pos) if hit + false_pos else float("nan")
        rows.append(Row(dropouts, kind, total, hit, hit / total if total else 0.0, precision))
    return rows


def markdown_table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| dropouts | kind | readings | flagged | recall | precision |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        recall = f"{r.recall:.3f}" + (" (false-alarm rate)" if r.kind == "clean" else "")
        precision = "" if r.kind == "clean" else f"{r.precision:.3f}"
        lines.append(
            f"| {r.dropouts} | {r.kind} | {r.readings} | {r.flagged} | {recall} | {precision} |"
        )
    return "\n".join(lines)


def main() -> None:
    """Print the table for both dropout handlings (Motes light, alpha = 0.01, seed 0)."""
    rows = run("filled") + run("raw")
    print(
        f"Motes light, FPCAEdge(rank={RANK}, oversample={OVERSAMPLE}, center=True) on the "
        f"first half, alpha={ALPHA}, seed={SEED}, flags = Q > Q_lim or T^2 > T2_lim\n"
    )
    print(markdown_table(rows))


if __name__ == "__main__":
    main()
