"""How a simulation ends up: every core's counters gathered, and the root's model compared
with the offline SVD (`edge_runtime.fpca.error_ratio`) and its provenance with every leaf's
row count, into a `SimulationResult`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from edge_runtime.agents.aggregator.core.aggregator import AggregatorCore
from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.fpca import error_ratio
from edge_runtime.simulation.config import SimulationResult
from edge_runtime.simulation.replay_model import ReplayModel

__all__ = ["Outcome", "gram_factor"]


class Outcome:
    """The tallies of a simulation and its result.

    Counts agent messages by kind (`message`), faults (`fault`), other counters
    (`count`) and, from every core it absorbs (at a crash and at the end), the cores'
    decisions, echo and intake counters; `result` adds the replay's and the broker's
    figures and compares the root's model with the offline SVD.
    """

    def __init__(self) -> None:
        self._messages: Counter[str] = Counter()
        self._faults: Counter[str] = Counter()
        self._counters: Counter[str] = Counter()
        self._decisions: Counter[str] = Counter()

    def message(self, kind: str) -> None:
        """One agent publish of ``kind`` (``leaf_snapshot``, ``model``, ``status``, ...)."""
        self._messages[kind] += 1

    def fault(self, name: str) -> None:
        """One fault (``leaf_crashes``, ``reconnects``, ``lost_to_crash``, ...)."""
        self._faults[name] += 1

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the counter ``name`` (``checkpoints``, ``spins``, ``wire_bytes``, ...)."""
        self._counters[name] += n

    def absorb(self, core: LeafCore | AggregatorCore) -> None:
        """Add a core's counters to the run's (at a crash and at the end)."""
        self._decisions.update(core.decisions)
        if core.echo is not None:
            self._counters["undelivered"] += core.echo.undelivered
            self._counters["late"] += core.echo.late
        if isinstance(core, LeafCore):
            self._counters["duplicate_readings"] += core.sequencer.duplicates
            self._counters["gap_rows"] += core.sequencer.gap_rows
        else:
            self._counters["merges"] += core.merges

    def result(
        self,
        *,
        finished: bool,
        events: int,
        virtual_s: float,
        converged_at: float | None,
        data: np.ndarray,
        cores: Sequence[LeafCore | AggregatorCore | None],
        leaves: int,
        root: AggregatorCore | None,
        expected: Mapping[str, int],
        replay: ReplayModel,
        broker_faults: Mapping[str, int],
    ) -> SimulationResult:
        """The run's `SimulationResult`, once: absorbs every live core of ``cores``.

        ``data`` is the run's (n_samples, n_features) rows, ``leaves`` the number of leaf
        nodes, ``root`` the root's live core (None while down), ``expected`` each leaf's
        row count, ``replay`` the replay's part (sent, re-sent, unconfirmed) and
        ``broker_faults`` the broker's losses and duplicates; times in virtual seconds.
        """
        for core in cores:
            if core is not None:
                self.absorb(core)
        counters = self._counters
        counters["unconfirmed"] = replay.unconfirmed()
        counters["unconfirmed_leaves"] = replay.unconfirmed_leaves()
        counters["checkpoint_pending"] = sum(
            1 for core in cores if isinstance(core, LeafCore) and core.checkpoint_news()
        )
        faults = self._faults
        faults.update(broker_faults)
        readings = int(data.shape[0])
        if root is None or root.snapshot is None:
            basis = np.zeros((data.shape[1], 0))
            coverage: dict[str, int] = {}
            ratio = math.inf
            root_n = 0
        else:
            model = root.model()
            basis = np.array(model.subspace.basis)
            coverage = dict(root.snapshot.provenance)
            ratio = error_ratio(gram_factor(data), basis)
            root_n = root.snapshot.n_samples
        missing = sum(abs(n - coverage.get(leaf, 0)) for leaf, n in expected.items())
        missing += sum(n for leaf, n in coverage.items() if leaf not in expected)
        agent_messages = sum(self._messages.values())
        return SimulationResult(
            finished=finished,
            leaves=leaves,
            aggregators=len(cores) - leaves,
            readings=readings,
            messages=dict(sorted(self._messages.items())),
            agent_messages=agent_messages,
            messages_per_reading=agent_messages / readings,
            sensor_messages=replay.sensor_messages,
            resent_readings=replay.resent,
            error_ratio=ratio,
            coverage_exact=missing == 0,
            coverage_missing=missing,
            root_n_samples=root_n,
            model_basis=basis,
            virtual_s=virtual_s,
            converged_at_s=converged_at,
            events=events,
            faults=dict(sorted(faults.items())),
            counters=dict(sorted(counters.items())),
            decisions=dict(sorted(self._decisions.items())),
        )


def gram_factor(data: np.ndarray) -> np.ndarray:
    """``data`` (n_samples, n_features), or for many rows its triangular factor ``R``
    (``R^T R = X^T X``, (n_features, n_features)): the same projection errors and offline
    subspace, so the same `error_ratio`, in a fraction of the time (one QR instead of an
    SVD and two projections of every row)."""
    n, d = data.shape
    if n <= 64 * d:
        return data
    return np.linalg.qr(data, mode="r")
