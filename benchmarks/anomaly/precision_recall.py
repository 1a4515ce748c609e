"""Precision and recall of the runtime's Q / T^2 flags on a stream with injected faults.

Protocol (`score_faults`): the model is fitted on clean training readings by
``FPCAEdge(d, rank, oversample, center=True)`` (the runtime's model is such a subspace);
`AnomalyScorer` uses its tracked subspace (``rank + oversample`` directions) with ``rank``
model directions and the training ``total_energy`` (the untracked eigenvalues spread
evenly), at significance ``alpha`` -- the leaf's flag rule, ``Q > Q_alpha`` or
``T^2 > T^2_alpha``. Faults (`faults.inject_faults`) go into the stream from row
``start``; those rows are scored with the fixed model.

A flagged reading (row) counts as a detection of the fault covering it; false positives
are flags on clean readings. Per kind: ``recall = flagged / readings of that kind``,
``precision = flagged of that kind / (flagged of that kind + false positives)``, i.e.
every false alarm is charged to every kind (one mixed replay). The ``clean`` row gives
the false-alarm rate on clean readings: precision depends on it and on how many faulty
readings there are.

``python -m benchmarks.anomaly.precision_recall`` prints the Motes light table (model on
the clean first half, faults in the second, both dropout handlings).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.anomaly.faults import KINDS, FaultConfig, fill_dropouts, inject_faults
from benchmarks.reporting import table
from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import FPCAEdge
from edge_runtime.fpca.scoring import AnomalyScorer, total_energy

__all__ = [
    "ALPHA",
    "OVERSAMPLE",
    "RANK",
    "SEED",
    "Row",
    "fit_scorer",
    "main",
    "markdown_table",
    "motes",
    "run",
    "score_faults",
]

#: The runtime's defaults: topology rank 10, leaf oversampling 10, ``score_alpha`` 0.01.
RANK = 10
OVERSAMPLE = 10
ALPHA = 0.01
SEED = 0


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
    """Motes light (7712 x 48 lux), dropouts kept (``"raw"``) or filled (``"filled"``)."""
    if dropouts not in ("raw", "filled"):
        raise ValueError(f"dropouts must be 'raw' or 'filled', got {dropouts!r}")
    data = np.array(load_dataset("motes-light"), dtype=np.float64)
    return fill_dropouts(data) if dropouts == "filled" else data


def fit_scorer(
    train: np.ndarray,
    *,
    rank: int = RANK,
    oversample: int = OVERSAMPLE,
    alpha: float = ALPHA,
) -> AnomalyScorer:
    """The leaf's scorer for a model fitted on ``train`` (the protocol of the module).

    ``FPCAEdge(d, rank, oversample=oversample, center=True)`` fitted on ``train``; its
    tracked subspace (``rank + oversample`` directions) with ``rank`` model directions
    and ``total_energy(train, centered=True)``, so the Q limit (Jackson & Mudholkar 1979,
    `edge_runtime.fpca.scoring.q_limit`) and the T^2 limit (F-based,
    `edge_runtime.fpca.scoring.t2_limit`) are the library's, at significance ``alpha``.

    Parameters
    ----------
    train : ndarray of shape (n_train, n_features)
        Clean readings (lux, or any unit: Q is in its square), finite, ``n_train > rank``.
    rank : int, default=RANK
        Model directions ``r`` (scores, T^2).
    oversample : int, default=OVERSAMPLE
        Extra tracked directions ``p``, whose eigenvalues enter the Q limit.
    alpha : float, default=ALPHA
        Significance in (0, 1) of both limits.

    Returns
    -------
    AnomalyScorer
        ``flags(x)`` is the leaf's rule ``Q > Q_alpha or T^2 > T^2_alpha``.

    Raises
    ------
    ValueError
        As `FPCAEdge` and `AnomalyScorer` (too few rows, a rank above ``n_features``).
    """
    est = FPCAEdge(train.shape[1], rank, oversample=oversample, center=True).fit(train)
    return AnomalyScorer(
        est.tracked_subspace, alpha, rank=rank, total_energy=total_energy(train, centered=True)
    )


def score_faults(
    train: np.ndarray,
    stream: np.ndarray,
    *,
    start: int,
    setting: str,
    seed: int = SEED,
    config: FaultConfig | None = None,
    rank: int = RANK,
    oversample: int = OVERSAMPLE,
    alpha: float = ALPHA,
) -> list[Row]:
    """Fit on ``train``, inject faults into ``stream[start:]``, flag; one row per kind.

    Parameters
    ----------
    train : ndarray of shape (n_train, n_features)
        Clean readings the model is fitted on.
    stream : ndarray of shape (n_samples, n_features)
        Clean readings to inject faults into; rows ``[start, n_samples)`` are scored.
    start : int
        First scored (and possibly faulty) row of ``stream``.
    setting : str
        The ``setting`` column of the rows (e.g. ``"Motes, filled"``).
    seed : int, default=SEED
        Seed of the fault placement (`faults.inject_faults`).
    config : FaultConfig or None, default=None
        Fault magnitudes and counts; None means ``FaultConfig()`` (lux).
    rank, oversample, alpha
        As `fit_scorer`.

    Returns
    -------
    list of Row
        ``clean`` first (``recall`` = the false-alarm rate, ``precision`` NaN), then one
        row per fault kind of `faults.KINDS`.
    """
    scorer = fit_scorer(train, rank=rank, oversample=oversample, alpha=alpha)
    faulty = inject_faults(stream, start=start, seed=seed, config=config)
    flags = scorer.flags(faulty.data[start:])
    labels = faulty.labels[start:]
    false_pos = int(np.sum(flags & (labels == 0)))
    rows = []
    for k, kind in enumerate(KINDS):
        mask = labels == k
        hit = int(np.sum(flags & mask))
        total = int(mask.sum())
        if k == 0:
            rows.append(Row(setting, "clean", total, hit, hit / total, float("nan")))
            continue
        precision = hit / (hit + false_pos) if hit + false_pos else float("nan")
        rows.append(Row(setting, kind, total, hit, hit / total if total else 0.0, precision))
    return rows


def run(
    dropouts: str = "filled", *, seed: int = SEED, config: FaultConfig | None = None
) -> list[Row]:
    """Motes light: fit on the clean first half (3856 readings), faults in the second."""
    data = motes(dropouts)
    n_train = data.shape[0] // 2
    return score_faults(
        data[:n_train],
        data,
        start=n_train,
        setting=f"Motes, {dropouts}",
        seed=seed,
        config=config,
    )


def markdown_table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    cells = []
    for r in rows:
        recall = f"{r.recall:.3f}" + (" (false-alarm rate)" if r.kind == "clean" else "")
        precision = "" if r.kind == "clean" else f"{r.precision:.3f}"
        cells.append([r.setting, r.kind, r.readings, r.flagged, recall, precision])
    return table(
        ["setting", "kind", "readings", "flagged", "recall", "precision"], cells, align="llrrrr"
    )


def main(argv: list[str] | None = None) -> None:
    """Print the Motes table for both dropout handlings (alpha = 0.01, seed 0); ``argv`` is
    ignored (no options)."""
    rows = run("filled") + run("raw")
    print(
        f"Motes light, FPCAEdge(rank={RANK}, oversample={OVERSAMPLE}, center=True) on the "
        f"first half, alpha={ALPHA}, seed={SEED}, flags = Q > Q_lim or T^2 > T2_lim\n"
    )
    print(markdown_table(rows))


if __name__ == "__main__":
    main()
