"""Precision and recall of the leaf's Q / T^2 flags on a stream with injected faults.

`score_faults`: ``FPCAEdge(d, rank, oversample, center=True)`` fitted on clean readings gives
the leaf's rule (`AnomalyScorer`: ``Q > Q_alpha or T^2 > T^2_alpha``); faults
(`faults.inject_faults`) go into the stream from row ``start``, scored with the fixed model.
Per kind: recall = flagged / readings of that kind, precision = flagged of that kind /
(flagged of that kind + flagged clean readings): every false alarm is charged to every kind
(one mixed replay). ``python -m benchmarks anomaly-flags`` prints the Motes light table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.anomaly.faults import KINDS, FaultConfig, fill_dropouts, inject_faults
from benchmarks.reporting import table
from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import FPCAEdge, Subspace
from edge_runtime.fpca.scoring import AnomalyScorer, total_energy

__all__ = ["ALPHA", "OVERSAMPLE", "RANK", "SEED", "Row", "fit", "fit_scorer", "main",
           "markdown_table", "motes", "per_kind", "run", "score_faults"]

#: The runtime's defaults: topology rank 10, leaf oversampling 10, ``score_alpha`` 0.01.
RANK, OVERSAMPLE, ALPHA, SEED = 10, 10, 0.01, 0


@dataclass(frozen=True)
class Row:
    """One line of the table: a fault kind (or ``clean``) in one setting."""

    setting: str
    kind: str
    readings: int
    flagged: int
    recall: float
    precision: float


def motes(dropouts: str) -> np.ndarray:
    """Motes light (7712 x 48 lux), dropouts kept (``"raw"``) or filled (``"filled"``);
    raises ValueError for another value."""
    if dropouts not in ("raw", "filled"):
        raise ValueError(f"dropouts must be 'raw' or 'filled', got {dropouts!r}")
    data = np.array(load_dataset("motes-light"), dtype=np.float64)
    return fill_dropouts(data) if dropouts == "filled" else data


def fit_scorer(
    train: np.ndarray, *, rank: int = RANK, oversample: int = OVERSAMPLE, alpha: float = ALPHA
) -> AnomalyScorer:
    """The leaf's scorer for a model fitted on ``train`` (n_train > rank, n_features): the
    tracked subspace (``rank + oversample`` directions) with ``rank`` model directions and
    ``total_energy(train, centered=True)``, Q (Jackson-Mudholkar) and T^2 (F) limits at
    ``alpha``. Raises ValueError as `FPCAEdge` and `AnomalyScorer` do."""
    return fit(train, rank, oversample, alpha)[1]


def fit(
    train: np.ndarray, rank: int, oversample: int, alpha: float
) -> tuple[Subspace, AnomalyScorer]:
    """The tracked subspace fitted on ``train`` and `fit_scorer`'s scorer of it."""
    model = FPCAEdge(train.shape[1], rank, oversample=oversample, center=True).fit(train)
    model = model.tracked_subspace
    energy = total_energy(train, centered=True)
    return model, AnomalyScorer(model, alpha, rank=rank, total_energy=energy)


def per_kind(flags: np.ndarray, labels: np.ndarray) -> list[tuple[int, int, float]]:
    """Per index of `faults.KINDS` (0: clean): readings, flagged readings and precision
    (NaN for clean or with no flag), from ``flags`` (n,) bool and ``labels`` (n,) int."""
    false_pos = int(np.sum(flags & (labels == 0)))
    out = []
    for k in range(len(KINDS)):
        hit, total = int(np.sum(flags & (labels == k))), int(np.sum(labels == k))
        out.append((total, hit, hit / (hit + false_pos) if k and hit + false_pos else np.nan))
    return out


def score_faults(
    train: np.ndarray, stream: np.ndarray, *, start: int, setting: str, seed: int = SEED,
    config: FaultConfig | None = None, rank: int = RANK, oversample: int = OVERSAMPLE,
    alpha: float = ALPHA,
) -> list[Row]:
    """Fit on ``train`` (n_train, d), inject faults (seeded, ``config`` or the lux
    defaults) into rows ``[start, n)`` of ``stream`` (n, d) and flag them: one `Row` per
    kind, ``clean`` first (its recall is the false-alarm rate, its precision NaN)."""
    scorer = fit_scorer(train, rank=rank, oversample=oversample, alpha=alpha)
    faulty = inject_faults(stream, start=start, seed=seed, config=config)
    counts = per_kind(scorer.flags(faulty.data[start:]), faulty.labels[start:])
    return [Row(setting, "clean" if k == 0 else KINDS[k], total, hit,
                hit / total if total or k == 0 else 0.0, precision)
            for k, (total, hit, precision) in enumerate(counts)]


def run(
    dropouts: str = "filled", *, seed: int = SEED, config: FaultConfig | None = None
) -> list[Row]:
    """Motes light: fit on the clean first half (3856 readings), faults in the second."""
    data = motes(dropouts)
    n_train = data.shape[0] // 2
    return score_faults(data[:n_train], data, start=n_train, setting=f"Motes, {dropouts}",
                        seed=seed, config=config)


def markdown_table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    cells = [[r.setting, r.kind, r.readings, r.flagged,
              f"{r.recall:.3f}" + (" (false-alarm rate)" if r.kind == "clean" else ""),
              "" if r.kind == "clean" else f"{r.precision:.3f}"] for r in rows]
    header = ["setting", "kind", "readings", "flagged", "recall", "precision"]
    return table(header, cells, align="llrrrr")


def main(argv: list[str] | None = None) -> None:
    """Print the Motes table for both dropout handlings; ``argv`` is ignored (no options)."""
    rows = run("filled") + run("raw")
    print(f"Motes light, FPCAEdge(rank={RANK}, oversample={OVERSAMPLE}, center=True) on the "
          f"first half, alpha={ALPHA}, seed={SEED}, flags = Q > Q_lim or T^2 > T2_lim\n")
    print(markdown_table(rows))


if __name__ == "__main__":
    main()
