"""How a simulation ends up: every core's counters gathered, and the root's model compared
with the offline SVD (`edge_runtime.fpca.error_ratio`) and its provenance with every leaf's
row count, into a `SimulationResult`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import numpy as np

from edge_runtime.agents.aggregator.core.aggregator import AggregatorCore
from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.fpca import error_ratio
from edge_runtime.simulation.config import SimulationResult
from edge_runtime.simulation.events import SimNode

__all__ = ["Outcome"]


class Outcome:
    """The result of a simulation (a base of `edge_runtime.simulation.Simulation`).

    Reads the run's ``nodes``, ``leaves``, ``root``, ``data``, ``expected`` row counts and
    message, fault, counter and decision tallies.
    """

    now: float
    data: np.ndarray
    nodes: list[SimNode]
    leaves: list[int]
    root: int
    expected: dict[str, int]
    messages: Counter[str]
    faults: Counter[str]
    counters: Counter[str]
    decisions: Counter[str]
    sensor_messages: int
    resent: int
    converged_at: float | None
    _unconfirmed: Callable[[], int]  # ReplayModel._unconfirmed
    _unconfirmed_leaves: Callable[[], int]  # ReplayModel._unconfirmed_leaves

    def _absorb(self, core: LeafCore | AggregatorCore) -> None:
        """Add a core's counters to the run's (at a crash and at the end)."""
        self.decisions.update(core.decisions)
        if core.echo is not None:
            self.counters["undelivered"] += core.echo.undelivered
            self.counters["late"] += core.echo.late
        if isinstance(core, LeafCore):
            self.counters["duplicate_readings"] += core.sequencer.duplicates
            self.counters["gap_rows"] += core.sequencer.gap_rows
        else:
            self.counters["merges"] += core.merges

    def _gram_factor(self) -> np.ndarray:
        """``data``, or for many rows its triangular factor ``R`` (``R^T R = X^T X``): the
        same projection errors and offline subspace, so the same `error_ratio`, in a
        fraction of the time (one QR instead of an SVD and two projections of every row)."""
        n, d = self.data.shape
        if n <= 64 * d:
            return self.data
        return np.linalg.qr(self.data, mode="r")

    def _result(self, finished: bool, events: int) -> SimulationResult:
        for node in self.nodes:
            if node.core is not None:
                self._absorb(node.core)
        self.counters["unconfirmed"] = self._unconfirmed()
        self.counters["unconfirmed_leaves"] = self._unconfirmed_leaves()
        self.counters["checkpoint_pending"] = sum(
            1
            for i in self.leaves
            if isinstance(core := self.nodes[i].core, LeafCore) and core.checkpoint_news()
        )
        root: AggregatorCore | None = self.nodes[self.root].core
        readings = int(self.data.shape[0])
        if root is None or root.snapshot is None:
            basis = np.zeros((self.data.shape[1], 0))
            coverage: dict[str, int] = {}
            ratio = math.inf
            root_n = 0
        else:
            model = root.model()
            basis = np.array(model.subspace.basis)
            coverage = dict(root.snapshot.provenance)
            ratio = error_ratio(self._gram_factor(), basis)
            root_n = root.snapshot.n_samples
        missing = sum(abs(n - coverage.get(leaf, 0)) for leaf, n in self.expected.items())
        missing += sum(n for leaf, n in coverage.items() if leaf not in self.expected)
        agent_messages = sum(self.messages.values())
        return SimulationResult(
            finished=finished,
            leaves=len(self.leaves),
            aggregators=len(self.nodes) - len(self.leaves),
            readings=readings,
            messages=dict(sorted(self.messages.items())),
            agent_messages=agent_messages,
            messages_per_reading=agent_messages / readings,
            sensor_messages=self.sensor_messages,
            resent_readings=self.resent,
            error_ratio=ratio,
            coverage_exact=missing == 0,
            coverage_missing=missing,
            root_n_samples=root_n,
            model_basis=basis,
            virtual_s=self.now,
            converged_at_s=self.converged_at,
            events=events,
            faults=dict(sorted(self.faults.items())),
            counters=dict(sorted(self.counters.items())),
            decisions=dict(sorted(self.decisions.items())),
        )
