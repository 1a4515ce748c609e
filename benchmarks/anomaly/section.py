"""Section (i) of REPORT.md: the leaf's anomaly flags against injected faults, at the
runtime's defaults (rank 10, oversampling 10, alpha 0.01): on Motes light
(`precision_recall.run`), the oracle's upper bound (`oracle.oracle`), and a synthetic
control where the limits' assumptions hold (`synthetic_control`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from benchmarks.anomaly import oracle as oracle_mod
from benchmarks.anomaly import precision_recall
from benchmarks.anomaly.faults import FaultConfig
from benchmarks.anomaly.oracle import OracleRow
from benchmarks.anomaly.precision_recall import Row

__all__ = ["SYNTH_CONFIG", "AnomalyBenchResults", "run_anomaly_benchmark", "synthetic_control",
           "synthetic_readings"]

#: Synthetic control: 48 features, a rank-5 Gaussian signal (standard deviations 10, 8,
#: 6, 4, 3 along random orthonormal directions) plus isotropic noise of standard deviation
#: 1, mean 100; 4000 training and 4000 test readings.
SYNTH_SHAPE = (4000, 48)
SYNTH_SIGNAL_SD = (10.0, 8.0, 6.0, 4.0, 3.0)
SYNTH_MEAN = 100.0
#: Faults in noise units: spikes +10, stuck at 115 (mean + 15), drift to +10; 600 spikes
#: and 12 stuck stretches of 50 (15 % of the test readings each), 2 drifts of 400.
SYNTH_CONFIG = FaultConfig(n_spikes=600, n_stuck=12, n_drift=2, spike_offset=10.0,
                           stuck_min_effect=5.0, stuck_value=SYNTH_MEAN + 15.0, drift_total=10.0)


@dataclass
class AnomalyBenchResults:
    """Everything benchmark (i) measured."""

    rank: int
    oversample: int
    alpha: float
    seed: int
    motes: list[Row] = field(default_factory=list)
    oracle: list[OracleRow] = field(default_factory=list)
    #: Clean share flagged by the runtime's limits under the oracle's (all-data) model.
    oracle_clean_flagged: float = float("nan")
    #: ROC points per variant: (false-alarm rates, recalls), for the plot.
    roc: dict[str, list[list[float]]] = field(default_factory=dict)
    synth: list[Row] = field(default_factory=list)


def synthetic_readings(n_samples: int, seed: int) -> np.ndarray:
    """Gaussian low-rank readings ``(n_samples, 48)`` as in `SYNTH_SHAPE`; seeded."""
    rng = np.random.default_rng(seed)
    d = SYNTH_SHAPE[1]
    basis = np.linalg.qr(np.random.default_rng(1234).normal(size=(d, len(SYNTH_SIGNAL_SD))))[0]
    signal = rng.normal(size=(n_samples, len(SYNTH_SIGNAL_SD))) * SYNTH_SIGNAL_SD
    return SYNTH_MEAN + signal @ basis.T + rng.normal(size=(n_samples, d))


def synthetic_control(seed: int = precision_recall.SEED) -> list[Row]:
    """`precision_recall.score_faults` on `synthetic_readings` with `SYNTH_CONFIG`."""
    train, test = (synthetic_readings(SYNTH_SHAPE[0], seed=s + seed) for s in (100, 200))
    return precision_recall.score_faults(
        train, test, start=0, setting="Synthetic", seed=seed, config=SYNTH_CONFIG
    )


def _roc(faulty: np.ndarray, clean: np.ndarray) -> list[list[float]]:
    rates = np.logspace(-4, 0, 41)
    return [rates.tolist(), [float(np.mean(faulty > t)) for t in np.quantile(clean, 1 - rates)]]


def run_anomaly_benchmark(log: Callable[[str], None] = print) -> AnomalyBenchResults:
    """Run the three measurements (about 10 s)."""
    pr = precision_recall
    res = AnomalyBenchResults(pr.RANK, pr.OVERSAMPLE, pr.ALPHA, pr.SEED)
    log("anomaly: Motes light with injected faults")
    res.motes = pr.run("filled") + pr.run("raw")
    log("anomaly: oracle thresholds")
    res.oracle, faulty, clean = oracle_mod.oracle(pr.motes("filled"))
    res.oracle_clean_flagged = float(np.mean(clean > 1.0))
    res.roc = {name: _roc(s, clean) for name, s in faulty.items()}
    log("anomaly: synthetic control")
    res.synth = synthetic_control()
    return res
