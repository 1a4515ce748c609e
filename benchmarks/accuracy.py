"""Benchmark (a): error ratio over time against the offline SVD, single node and federated.

Every method sees the same stream in the same chunks; at each checkpoint ``t`` its rank-``r``
basis is judged on the first ``t`` samples against their offline rank-``r`` SVD (`GramTracker`),
the curves of the paper's Fig. 9; final ratios are exact (`error_ratio`). Methods that centre
(IncrementalPCA, ``center=True``) also get the ratio on the centred stream, their own objective.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.measure import GramTracker, basis_of
from edge_runtime.fpca import FPCAEdge, error_ratio, merge_many

__all__ = [
    "FEDERATED_FANOUT", "FEDERATED_LEAVES", "Trajectory", "checkpoints", "default_oversample",
    "federated_basis", "method_factories", "run_trajectories",
]  # fmt: skip

#: Federated layout of the Done-when check: 8 leaves, aggregators of 4, one root.
FEDERATED_LEAVES = 8
FEDERATED_FANOUT = 4

FPCA = "FPCA-Edge"
FPCA_NO_OVERSAMPLE = "FPCA-Edge (oversample 0, paper)"
FPCA_EQUAL_STATE = "FPCA-Edge (2r tracked)"
FPCA_CENTRED = "FPCA-Edge (center=True)"


@dataclass
class Trajectory:
    """Error ratio of one method at each checkpoint (``samples`` seen) of one stream: uncentred
    ``ratios`` (1.0 is the offline SVD), ``ratios_centred`` (methods that centre, else empty),
    the exact ``final`` ratios, ``n_tracked`` directions of state, and ``seconds`` spent in
    ``partial_fit`` and basis reads (one run, indicative: (b) measures throughput)."""

    name: str
    samples: list[int] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    ratios_centred: list[float] = field(default_factory=list)
    final: float = float("nan")
    final_centred: float | None = None
    n_tracked: int = 0
    seconds: float = 0.0


def checkpoints(n_samples: int, n_points: int, *, start: int = 100, step: int = 50) -> list[int]:
    """About ``n_points`` log-spaced checkpoints in ``[start, n_samples]``, ending at
    ``n_samples``, the others multiples of ``step`` (right after a block update).

    >>> checkpoints(1000, 5)
    [100, 200, 300, 550, 1000]
    """
    raw = np.geomspace(start, n_samples, n_points)
    pts = sorted({round(float(v) / step) * step for v in raw[:-1]} | {n_samples})
    return [p for p in pts if 0 < p <= n_samples]


def default_oversample(n_features: int, rank: int, block_size: int = 50) -> int:
    """The oversample FPCAEdge uses by default for this shape."""
    return int(FPCAEdge(n_features, rank, block_size).oversample_)


def _n_tracked(est: Any, rank: int) -> int:
    if hasattr(est, "n_tracked"):
        return int(est.n_tracked)
    return min(rank + int(est.oversample_), est.n_features)


def method_factories(
    n_features: int, rank: int, block_size: int = 50
) -> dict[str, Callable[[], Any]]:
    """Constructors of the methods of (a) by name: FPCA-Edge at its default oversample, at 0
    (the paper), at ``2 rank`` tracked (FD's equal-state partner), centred (IncrementalPCA's
    partner), then every baseline at its defaults (``batch_size = block_size`` where it has one)."""
    from benchmarks.baselines import ALL_BASELINES

    def fpca(**kwargs: Any) -> Callable[[], FPCAEdge]:
        return lambda: FPCAEdge(n_features, rank, block_size, **kwargs)

    factories = {
        FPCA: fpca(), FPCA_NO_OVERSAMPLE: fpca(oversample=0),
        FPCA_EQUAL_STATE: fpca(oversample=rank), FPCA_CENTRED: fpca(center=True),
    }  # fmt: skip
    for cls in ALL_BASELINES:
        factories[cls.name] = _baseline_factory(cls, n_features, rank, block_size)
    return factories


def _baseline_factory(cls: type, n_features: int, rank: int, block_size: int) -> Callable[[], Any]:
    batched = "batch_size" in inspect.signature(cls).parameters
    kwargs: dict[str, Any] = {"batch_size": block_size} if batched else {}
    return lambda: cls(n_features, rank, **kwargs)


def _centres(est: Any) -> bool:
    """Whether ``est`` estimates the subspace of centred data (IncrementalPCA, center=True)."""
    return bool(getattr(est, "centers", False)) or getattr(est, "center", False) is True


def run_trajectories(
    X: np.ndarray,  # noqa: N803 (scikit-learn name)
    rank: int,
    factories: dict[str, Callable[[], Any]],
    points: Sequence[int],
) -> dict[str, Trajectory]:
    """`Trajectory` of each method of ``factories`` (zero-argument constructors, by name) on the
    stream ``X`` ``(n_samples, n_features)``, at rank ``rank``; the rows between two of the
    increasing ``points`` are one ``partial_fit`` call of every method."""
    import time

    tracker = GramTracker(X.shape[1])
    estimators = {name: make() for name, make in factories.items()}
    centred_for = {name for name, est in estimators.items() if _centres(est)}
    out = {name: Trajectory(name) for name in factories}
    prev = 0
    for t in points:  # len(points) iterations
        chunk = X[prev:t]
        prev = t
        tracker.add(chunk)
        for name, est in estimators.items():
            t0 = time.perf_counter()
            est.partial_fit(chunk)
            basis = basis_of(est)
            out[name].seconds += time.perf_counter() - t0
            out[name].samples.append(t)
            out[name].ratios.append(tracker.ratio(basis))
            if name in centred_for:
                out[name].ratios_centred.append(tracker.ratio(basis, centred=True))
    seen = X[:prev]
    centred = seen - seen.mean(axis=0)
    for name, est in estimators.items():
        basis = basis_of(est)
        out[name].final = error_ratio(seen, basis)
        out[name].n_tracked = _n_tracked(est, rank)
        if name in centred_for:
            out[name].final_centred = error_ratio(centred, basis)
    return out


def federated_basis(
    X: np.ndarray,  # noqa: N803 (scikit-learn name)
    rank: int,
    *,
    oversample: int | None = None,
    center: bool = False,
    block_size: int = 50,
    n_leaves: int = FEDERATED_LEAVES,
    fanout: int = FEDERATED_FANOUT,
) -> np.ndarray:
    """Basis ``(n_features, rank)`` of federated FPCA-Edge: ``X`` split into ``n_leaves``
    contiguous parts, each leaf's ``tracked_subspace`` merged by ``fanout`` with `merge_many`
    at the tracked rank, the aggregators merged at the root, truncated to ``rank``. With
    ``center`` the leaves centre and the basis is that of the centred data."""
    leaves = []
    tracked = rank
    for part in np.array_split(X, n_leaves):
        est = FPCAEdge(X.shape[1], rank, block_size, oversample=oversample, center=center)
        sub = est.partial_fit(part).tracked_subspace
        tracked = max(tracked, sub.rank)
        leaves.append(sub)
    aggregators = [
        merge_many(leaves[i : i + fanout], rank=tracked) for i in range(0, n_leaves, fanout)
    ]
    return merge_many(aggregators, rank=tracked).truncate(rank).basis
