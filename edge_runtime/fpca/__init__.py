"""FPCA numerics: streaming subspaces (FPCA-Edge), merges and accuracy metrics.

numpy/scipy only (no asyncio, MQTT or logging setup), usable alone as a library::

    from edge_runtime.fpca import FPCAEdge, merge_subspaces

Samples are rows, ``(n_samples, n_features)``; a `Subspace` is an orthonormal ``basis``
``(n_features, rank)``, its ``singular_values`` ``(rank,)`` and ``n_samples``.
Algorithms are from Grammenos, Mendoza-Smith, Crowcroft, Mascolo, "Federated Principal
Component Analysis", NeurIPS 2020: the block update, eq. (3), and adaptive rank, eq.
(4), in `FPCAEdge`; Merge_r, Alg. 2, in `merge_subspaces`; the federation of Alg. 1 as a
balanced tree of merges in `merge_many` and, updated one child at a time in O(log k)
merges, `MergeTree`. Differential privacy is ``FPCAEdge(..., privacy=(epsilon, delta),
clip_norm=C)``: the analytic Gaussian mechanism by default, streaming MOD-SuLQ (eq.
(5)-(8)) as ``mechanism="fpca-eq8"``; `edge_runtime.fpca.privacy` has the noise scales.
Anomaly scores of readings against a model (Q/SPE, Hotelling's T^2 and their control
limits) are `AnomalyScorer`; sensor faults (SHORT, NOISE, CONSTANT) with adaptive limits,
naming the suspected sensor, are `FaultDetector` (`edge_runtime.fpca.faults`).

The names below are imported on first use (PEP 562, `edge_runtime.lazy`): a leaf loads the
streaming estimator without the merges, and the scores and fault detector only when it
scores, which keeps a leaf's import time and RSS low on a small board.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_runtime.lazy import lazy_names

if TYPE_CHECKING:
    from edge_runtime.fpca.faults import FaultDetector, FaultVerdict
    from edge_runtime.fpca.merge import merge_many, merge_subspaces
    from edge_runtime.fpca.merge_tree import MergeTree
    from edge_runtime.fpca.metrics import (
        error_ratio,
        offline_subspace,
        principal_angles,
        projection_error,
    )
    from edge_runtime.fpca.scoring import AnomalyScorer, q_limit, t2_limit, total_energy
    from edge_runtime.fpca.streaming import FPCAEdge
    from edge_runtime.fpca.subspace import Subspace

__all__ = [
    "AnomalyScorer",
    "FPCAEdge",
    "FaultDetector",
    "FaultVerdict",
    "MergeTree",
    "Subspace",
    "error_ratio",
    "merge_many",
    "merge_subspaces",
    "offline_subspace",
    "principal_angles",
    "projection_error",
    "q_limit",
    "t2_limit",
    "total_energy",
]

_MODULE_OF = {
    name: f"edge_runtime.fpca.{module}"
    for module, names in {
        "faults": ("FaultDetector", "FaultVerdict"),
        "merge": ("merge_many", "merge_subspaces"),
        "merge_tree": ("MergeTree",),
        "metrics": ("error_ratio", "offline_subspace", "principal_angles", "projection_error"),
        "scoring": ("AnomalyScorer", "q_limit", "t2_limit", "total_energy"),
        "streaming": ("FPCAEdge",),
        "subspace": ("Subspace",),
    }.items()
    for name in names
}
"""The module of each public name (imported on first use by `__getattr__`)."""

__getattr__, __dir__ = lazy_names(globals(), _MODULE_OF, __all__)
