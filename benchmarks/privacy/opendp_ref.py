"""OpenDP's differentially private PCA as an outside reference (optional, subprocess).

OpenDP (``pip install -e '.[privacy-ref]'``, i.e. ``opendp[scikit-learn]``) ships
``opendp.extras.sklearn.decomposition.PCA(epsilon=, row_norm=, n_samples=, n_features=,
n_components=)``, after Amin, Dick, Kulesza, Munoz Medina, Vassilvitskii, "Differentially
private covariance estimation", NeurIPS 2019: rows clipped to ``row_norm``, a privately
estimated mean subtracted, then eigenvalues and eigenvectors released one by one, each
eigenvector drawn by an exponential-mechanism sampler. Its guarantee is *pure*
epsilon-DP (delta = 0) under OpenDP's neighbouring relation (symmetric distance on a
dataset of declared size: a changed row counts as distance 2), with part of epsilon
spent on the mean and the eigenvalues, and it needs the ``contrib``,
``honest-but-curious`` and ``idealized-numerics`` features (the latter: the proof
assumes exact arithmetic). Its epsilon is therefore not the same number as the
(epsilon, delta) of MOD-SuLQ, DPdisPCA and FPCA-Edge; the report marks it so.

The sampler's running time grows steeply with epsilon (on Synth(1), d = 20,
n = 5000, rank 5, on the benchmark machine: under a second per fit up to epsilon
0.3, 5-20 s at 0.5, over 100 s from 0.75), so `run_pca` fits in a child process
under a hard timeout and returns whatever finished. Nothing here imports OpenDP in the calling
process; `available` only looks for the packages.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["FEATURES", "OpenDPRun", "available", "run_pca"]

#: OpenDP features its PCA needs (``dp.enable_features``).
FEATURES = ("contrib", "honest-but-curious", "idealized-numerics")


def available() -> bool:
    """True if ``opendp`` and its numpy / scikit-learn extras can be imported."""
    return all(importlib.util.find_spec(m) is not None for m in ("opendp", "randomgen", "sklearn"))


@dataclass
class OpenDPRun:
    """What one `run_pca` call produced."""

    epsilon: float
    #: First component (unit vector, ``(d,)``) of every fit that finished, in order.
    components: list[np.ndarray] = field(default_factory=list)
    seconds: float = 0.0
    timed_out: bool = False
    error: str = ""


def run_pca(
    datasets: np.ndarray,
    epsilon: float,
    rank: int,
    *,
    row_norm: float = 1.0,
    timeout: float = 60.0,
) -> OpenDPRun:
    """Fit OpenDP's PCA to each of ``datasets`` in one child process, within ``timeout``.

    Parameters
    ----------
    datasets : ndarray of shape (n_trials, n_samples, n_features)
        One dataset per fit.
    epsilon : float
        OpenDP's ``epsilon`` (pure DP, its own neighbouring relation).
    rank : int
        ``n_components``.
    row_norm : float, default=1.0
        OpenDP's clipping norm.
    timeout : float, default=60.0
        Seconds for all fits together; on expiry the child is killed and the fits that
        finished are returned with ``timed_out=True``.

    Returns
    -------
    OpenDPRun
        ``error`` holds the child's last stderr line if it failed.
    """
    data = np.ascontiguousarray(datasets, dtype=np.float64)
    if data.ndim != 3:
        raise ValueError(f"datasets must be 3-D (trials, n_samples, n_features), got {data.shape}")
    run = OpenDPRun(epsilon=float(epsilon))
    with tempfile.TemporaryDirectory(prefix="opendp_ref_") as tmp:
        path = Path(tmp) / "data.npy"
        np.save(path, data)
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            str(path),
            repr(float(epsilon)),
            str(int(rank)),
            repr(float(row_norm)),
        ]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            run.timed_out = True
        run.seconds = time.perf_counter() - t0
    for line in out.splitlines():
        if line.startswith("["):
            run.components.append(np.asarray(json.loads(line), dtype=np.float64))
    if not run.timed_out and proc.returncode != 0:
        lines = [s for s in err.splitlines() if s.strip()]
        run.error = lines[-1] if lines else f"exit status {proc.returncode}"
    return run


def _child(argv: list[str]) -> int:
    """Child process: fit every dataset, print each first component as one JSON line."""
    import warnings

    warnings.simplefilter("ignore")
    import opendp.prelude as dp

    dp.enable_features(*FEATURES)
    path, epsilon, rank, row_norm = argv[0], float(argv[1]), int(argv[2]), float(argv[3])
    data = np.load(path)
    for x in data:
        model = dp.sklearn.decomposition.PCA(
            epsilon=epsilon,
            row_norm=row_norm,
            n_samples=x.shape[0],
            n_features=x.shape[1],
            n_components=rank,
        )
        model.fit(x)
        first = np.asarray(model.components_[0], dtype=np.float64)
        print(json.dumps((first / np.linalg.norm(first)).tolist()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(_child(sys.argv[1:]))
