"""Benchmark (a): error ratio over time against the offline SVD, single node and federated.

Every method sees the same stream in the same chunks; at each checkpoint ``t`` the
error ratio of its current rank-``r`` basis on the first ``t`` samples is taken against
the offline rank-``r`` SVD of those ``t`` samples (`GramTracker`), giving the curves of
the paper's Fig. 9. The final ratios in the tables are recomputed exactly with
`edge_runtime.fpca.error_ratio` on the whole stream.

IncrementalPCA always centres its data (its components are principal axes of the
centred samples), so besides the uncentred ratio used for everyone else it also gets
its ratio on the centred stream against the offline rank-``r`` SVD of the centred
stream: the number that judges it by its own objective.
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
    "FEDERATED_FANOUT",
    "FEDERATED_LEAVES",
    "Trajectory",
    "checkpoints",
    "default_oversample",
    "federated_basis",
    "method_factories",
    "run_trajectories",
]

#: Federated layout of the Done-when check: 8 leaves, aggregators of 4, one root.
FEDERATED_LEAVES = 8
FEDERATED_FANOUT = 4

FPCA = "FPCA-Edge"
FPCA_NO_OVERSAMPLE = "FPCA-Edge (oversample 0, paper)"
FPCA_EQUAL_STATE = "FPCA-Edge (2r tracked)"
FPCA_CENTRED = "FPCA-Edge (center=True)"


@dataclass
class Trajectory:
    """Error ratio of one method at each checkpoint of one stream.

    Attributes
    ----------
    name : str
        Method name.
    samples : list of int
        Checkpoints: number of samples seen.
    ratios : list of float
        Uncentred error ratio at each checkpoint (1.0 is the offline SVD).
    ratios_centred : list of float
        Ratio on the centred prefix against its centred offline SVD (only for methods
        that centre; empty for the others).
    final : float
        Exact final uncentred ratio on the whole stream (`error_ratio`).
    final_centred : float or None
        Exact final centred ratio, only for methods that centre.
    n_tracked : int
        Directions of state the method keeps.
    seconds : float
        Wall time spent in the method's ``partial_fit`` and basis reads (one run,
        indicative only; benchmark (b) is the throughput measurement).
    """

    name: str
    samples: list[int] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    ratios_centred: list[float] = field(default_factory=list)
    final: float = float("nan")
    final_centred: float | None = None
    n_tracked: int = 0
    seconds: float = 0.0


def checkpoints(n_samples: int, n_points: int, *, start: int = 100, step: int = 50) -> list[int]:
    """About ``n_points`` log-spaced checkpoints in ``[start, n_samples]``, ending at ``n_samples``.

    Checkpoints other than the last are multiples of ``step`` (the block size), so
    block-based methods are compared right after a block update.

    Examples
    --------
    >>> checkpoints(1000, 5)
    [100, 200, 300, 550, 1000]
    """
    raw = np.geomspace(start, n_samples, n_points)
    pts = sorted({round(float(v) / step) * step for v in raw[:-1]} | {n_samples})
    return [p for p in pts if 0 < p <= n_samples]


def default_oversample(n_features: int, rank: int, block_size: int = 50) -> int:
    """The oversample FPCAEdge uses by default for this shape (0 if it has none)."""
    est = FPCAEdge(n_features, rank, block_size)
    if hasattr(est, "oversample_"):
        return int(est.oversample_)
    param = inspect.signature(FPCAEdge).parameters.get("oversample")
    return 0 if param is None or not isinstance(param.default, int) else int(param.default)


def _has_param(name: str) -> bool:
    return name in inspect.signature(FPCAEdge).parameters


def _fpca(n_features: int, rank: int, block_size: int, oversample: int | None) -> FPCAEdge:
    if oversample is None or not _has_param("oversample"):
        return FPCAEdge(n_features, rank, block_size)
    return FPCAEdge(n_features, rank, block_size, oversample=oversample)


def _n_tracked(est: Any, rank: int) -> int:
    if hasattr(est, "n_tracked"):
        return int(est.n_tracked)
    if hasattr(est, "oversample_"):
        return min(rank + int(est.oversample_), est.n_features)
    return rank


def method_factories(
    n_features: int, rank: int, block_size: int = 50
) -> dict[str, Callable[[], Any]]:
    """Constructors of every method compared in (a), by display name.

    FPCA-Edge with its default oversample, without oversampling (the paper's algorithm)
    and with ``2 * rank`` tracked directions (the equal-state partner of Frequent
    Directions with ``ell = 2 * rank``), with ``center=True`` (the like-for-like partner
    of IncrementalPCA, judged on centred data), then every baseline with its defaults
    (those with a ``batch_size``, i.e. IncrementalPCA, get ``batch_size = block_size``).
    """
    from benchmarks.baselines import ALL_BASELINES

    factories: dict[str, Callable[[], Any]] = {
        FPCA: lambda: _fpca(n_features, rank, block_size, None)
    }
    if _has_param("oversample"):
        factories[FPCA_NO_OVERSAMPLE] = lambda: _fpca(n_features, rank, block_size, 0)
        factories[FPCA_EQUAL_STATE] = lambda: _fpca(n_features, rank, block_size, rank)
    if _has_param("center"):
        factories[FPCA_CENTRED] = lambda: FPCAEdge(n_features, rank, block_size, center=True)
    for cls in ALL_BASELINES:
        factories[cls.name] = _baseline_factory(cls, n_features, rank, block_size)
    return factories


def _baseline_factory(cls: type, n_features: int, rank: int, block_size: int) -> Callable[[], Any]:
    params = inspect.signature(cls).parameters
    kwargs: dict[str, Any] = {}
    if "batch_size" in params:
        kwargs["batch_size"] = block_size
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
    """Stream ``X`` through every method, recording error ratios at ``points``.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        The stream, rows in order.
    rank : int
        Rank ``r`` every method reports.
    factories : dict of str to callable
        Zero-argument constructors, e.g. `method_factories`.
    points : sequence of int
        Increasing checkpoints in ``[1, n_samples]``; the chunk between two
        consecutive checkpoints is one ``partial_fit`` call for every method.

    Returns
    -------
    dict of str to Trajectory
        By method name, in the order of ``factories``. Methods that centre
        (IncrementalPCA, whose class says it ``centers``, and FPCAEdge with
        ``center=True``) also get the centred ratios.
    """
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
    """Basis of the federated FPCA-Edge run: leaves, aggregators, root (depth 2).

    ``X`` is split into ``n_leaves`` contiguous parts; each leaf streams its part
    through `FPCAEdge` and publishes its ``tracked_subspace`` (``rank + oversample``
    directions); each aggregator merges ``fanout`` consecutive leaves with `merge_many`
    at that rank, the root merges the aggregators likewise, and the result is
    truncated to ``rank``. With ``center=True`` the leaves centre (`FPCAEdge` option) and
    the merges combine their means; the basis is then that of the centred data.

    Returns
    -------
    ndarray of shape (n_features, rank)
    """
    leaves = []
    tracked = rank
    for part in np.array_split(X, n_leaves):
        est = (
            FPCAEdge(X.shape[1], rank, block_size, center=True)
            if center
            else _fpca(X.shape[1], rank, block_size, oversample)
        ).partial_fit(part)
        sub = est.tracked_subspace if hasattr(est, "tracked_subspace") else est.subspace
        tracked = max(tracked, sub.rank)
        leaves.append(sub)
    aggregators = [
        merge_many(leaves[i : i + fanout], rank=tracked) for i in range(0, n_leaves, fanout)
    ]
    return merge_many(aggregators, rank=tracked).truncate(rank).basis
