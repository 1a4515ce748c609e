"""FedPower numerics: federated power iterations with periodic synchronisation.

numpy/scipy only (no asyncio, MQTT or logging setup), beside `edge_runtime.fpca`::

    from edge_runtime.fedpower import FedPowerServer, LocalGram, local_iterations

Samples are rows, ``(n_samples, n_features)``; a basis is ``(n_features, rank)``. The
method is FedPower (Guo, Li, Chang, Wang, Zhang, "FedPower: Privacy-Preserving
Distributed Eigenspace Estimation", arXiv:2103.00704, Machine Learning 2024), built on
LocalPower (Li, Wang, Chen, Zhang, "Communication-Efficient Distributed SVD via Local Power
Iterations", ICML 2021): every device keeps its second-moment matrix (`LocalGram`), runs
``p`` power iterations on it from the global basis (`local_iterations`), and the server
aligns the replies by Orthogonal Procrustes Transformation, averages them weighted by
sample counts and orthonormalises (`aggregate`), on the schedule ``I_T^p`` (`Schedule`,
optionally decaying ``p``). The server loop with partial participation (Algorithm 3) is
`FedPowerServer`, time passed in; `run_fedpower` drives it in one process. Differential
privacy: Gaussian noise on every local product, accounted with Renyi DP
(`edge_runtime.fedpower.accounting`).

The names below are imported on first use (PEP 562): a leaf of an FPCA topology, which reads
only `MECHANISM` (through `edge_runtime.topology`), does not load the server, the
simulation or the schedule (a leaf's import time and RSS stay those of an FPCA leaf).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_runtime.lazy import lazy_names

if TYPE_CHECKING:
    from edge_runtime.fedpower.accounting import (
        FedPowerBudget,
        fedpower_noise_std,
        power_step_sensitivity,
        rdp_epsilon,
    )
    from edge_runtime.fedpower.aggregation import aggregate, procrustes_rotation
    from edge_runtime.fedpower.local_gram import LocalGram
    from edge_runtime.fedpower.power import local_iterations, orthonormalise
    from edge_runtime.fedpower.schedule import Schedule
    from edge_runtime.fedpower.server import FedPowerServer, RoundRecord, RoundStart
    from edge_runtime.fedpower.simulation import FedPowerResult, run_fedpower

MECHANISM = "fedpower-gaussian-rdp"
"""The mechanism name a private FedPower leaf reports (``[a-z0-9+-]``, as the wire wants);
defined here, not in `edge_runtime.fedpower.accounting` (which re-exports it), so that
`edge_runtime.topology`, which reads only this name, does not load the accounting."""

__all__ = [
    "MECHANISM",
    "FedPowerBudget",
    "FedPowerResult",
    "FedPowerServer",
    "LocalGram",
    "RoundRecord",
    "RoundStart",
    "Schedule",
    "aggregate",
    "fedpower_noise_std",
    "local_iterations",
    "orthonormalise",
    "power_step_sensitivity",
    "procrustes_rotation",
    "rdp_epsilon",
    "run_fedpower",
]

_MODULE_OF = {
    name: f"edge_runtime.fedpower.{module}"
    for module, names in {
        "accounting": (
            "FedPowerBudget",
            "fedpower_noise_std",
            "power_step_sensitivity",
            "rdp_epsilon",
        ),
        "aggregation": ("aggregate", "procrustes_rotation"),
        "local_gram": ("LocalGram",),
        "power": ("local_iterations", "orthonormalise"),
        "schedule": ("Schedule",),
        "server": ("FedPowerServer", "RoundRecord", "RoundStart"),
        "simulation": ("FedPowerResult", "run_fedpower"),
    }.items()
    for name in names
}
"""The module of each public name (imported on first use by `__getattr__`)."""


__getattr__, __dir__ = lazy_names(globals(), _MODULE_OF, __all__)
