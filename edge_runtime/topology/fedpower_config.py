"""The settings of a FedPower deployment (`FedPowerConfig`) and what they impose on its leaves.

FedPower (the top-level ``algorithm = "fedpower"``) runs rounds of local power iterations
(`edge_runtime.fedpower`); its ``fedpower_*`` keys become a `FedPowerConfig`, and a private
leaf of such a topology runs FedPower's mechanism instead of FPCA's (`fedpower_private_leaf`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from edge_runtime.fedpower import MECHANISM as FEDPOWER_MECHANISM
from edge_runtime.fpca.privacy import MECHANISMS
from edge_runtime.topology.checks import TopologyError, check_kind, is_number, toml_repr, toml_type
from edge_runtime.topology.node import NodeConfig

__all__ = ["FedPowerConfig", "fedpower_private_leaf"]


def fedpower_private_leaf(node_id: str, node: NodeConfig, config: FedPowerConfig) -> NodeConfig:
    """A private leaf of a FedPower topology, with mechanism `FEDPOWER_MECHANISM`.

    Raises
    ------
    TopologyError
        One line: the schedule is unbounded (``fedpower_rounds = 0``), or the leaf names an
        FPCA mechanism or an FPCA-only key (``chunk_size``, ``forget``, ``center``).
    """
    where = f"leaf {node_id!r}"
    if config.rounds == 0:
        raise TopologyError(
            f'{where}: differential privacy with algorithm = "fedpower" needs a bounded '
            "schedule (fedpower_rounds > 0): the budget covers a known number of local "
            "iterations"
        )
    if node.mechanism not in (None, MECHANISMS[0], FEDPOWER_MECHANISM):
        raise TopologyError(
            f"{where}: mechanism {node.mechanism!r} is FPCA's; a FedPower leaf uses "
            f"{FEDPOWER_MECHANISM!r} (leave mechanism unset)"
        )
    if node.chunk_size is not None or node.forget != 1.0:
        key = "chunk_size" if node.chunk_size is not None else "forget"
        raise TopologyError(f"{where}: {key} is not used by a private FedPower leaf; remove it")
    return replace(node, mechanism=FEDPOWER_MECHANISM, release_horizon=None)


@dataclass(frozen=True)
class FedPowerConfig:
    """The round settings of a FedPower deployment (top-level ``fedpower_*`` keys).

    Defaults are chosen for a streaming deployment of a few to a few hundred leaves and
    measured on Motes light (topologies/README.md gives the reasons).

    Parameters
    ----------
    local_steps : int, default 4
        ``p``: local power iterations of the first round (`edge_runtime.fedpower.Schedule`).
    decay : {"exponential", "linear", "none"}, default "exponential"
        How ``p`` shrinks after each round; ``"exponential"`` halves it down to 1, so the
        estimate ends in the exact (centralised) power method, with no heterogeneity floor.
    rounds : int, default 0
        Rounds after which the root stops starting new ones; 0: open-ended (streaming).
        Private leaves need it > 0: their budget covers `total_iterations` local iterations.
    quorum : int or float, default 0
        ``K``: replies that close a round early. An integer ``K >= 1`` (at most the number
        of leaves), a fraction in (0, 1) of the leaves (rounded up), or 0: all leaves.
    round_timeout_s : float, default 5
        A round closes at the latest this long after it started, with the replies it has.
    round_interval_s : float, default 0.1
        Least time between the close of a round and the start of the next.
    idle_interval_s : float, default 5
        Time between rounds once the estimate settled (the last round moved the basis by
        less than ``tolerance_rad`` and no participant saw new readings).
    opt : bool, default True
        Align the replies by Orthogonal Procrustes (OPT) before averaging.
    tolerance_rad : float, default 1e-3
        Largest principal angle between two consecutive global bases below which the
        estimate counts as settled (the idle cadence above; ``edge-runtime run`` stops).
    seed : int, default 0
        Seed of the initial basis ``Z_0`` (a QR of a Gaussian ``(d, r)`` matrix), which
        every leaf derives identically before the root knows ``d``.

    Raises
    ------
    TopologyError
        One line naming a bad value.
    """

    local_steps: int = 4
    decay: str = "exponential"
    rounds: int = 0
    quorum: int | float = 0
    round_timeout_s: float = 5.0
    round_interval_s: float = 0.1
    idle_interval_s: float = 5.0
    opt: bool = True
    tolerance_rad: float = 1e-3
    seed: int = 0

    def __post_init__(self) -> None:
        where = "topology"
        for key in ("local_steps", "rounds", "seed"):
            value = check_kind(where, f"fedpower_{key}", getattr(self, key))
            low = 1 if key == "local_steps" else 0
            if value < low:  # type: ignore[operator]
                raise TopologyError(f"{where}: fedpower_{key} must be >= {low}, got {value}")
        for key in ("round_timeout_s", "round_interval_s", "idle_interval_s", "tolerance_rad"):
            value = check_kind(where, f"fedpower_{key}", getattr(self, key))
            positive = key == "round_timeout_s"
            if not math.isfinite(value) or value < 0 or (positive and value == 0):  # type: ignore[arg-type]
                bound = "> 0" if positive else ">= 0"
                raise TopologyError(
                    f"{where}: fedpower_{key} must be a finite number {bound}, got {value}"
                )
            object.__setattr__(self, key, value)
        check_kind(where, "fedpower_opt", self.opt)
        check_kind(where, "fedpower_decay", self.decay)
        if self.decay not in ("exponential", "linear", "none"):
            raise TopologyError(
                f"{where}: fedpower_decay must be 'exponential', 'linear' or 'none', "
                f"got {self.decay!r}"
            )
        q = self.quorum
        if isinstance(q, bool) or not is_number(q):
            raise TopologyError(
                f"{where}: fedpower_quorum must be an integer >= 0 or a fraction in (0, 1), "
                f"got {toml_type(q)} {toml_repr(q)}"
            )
        if isinstance(q, float) and not (0.0 < q < 1.0):
            raise TopologyError(
                f"{where}: fedpower_quorum must be an integer >= 0 or a fraction in (0, 1), got {q}"
            )
        if isinstance(q, int) and q < 0:
            raise TopologyError(f"{where}: fedpower_quorum must be >= 0, got {q}")

    @property
    def total_iterations(self) -> int | None:
        """``T``: local iterations of all ``rounds`` rounds (what a private leaf's budget
        covers), or None when the schedule is open-ended (``rounds = 0``)."""
        if self.rounds == 0:
            return None
        # here: an FPCA topology (no FedPower section) does not load the schedule (issue 24)
        from edge_runtime.fedpower.schedule import Schedule

        decay = None if self.decay == "none" else self.decay
        schedule = Schedule(self.local_steps, decay=decay)
        return sum(schedule.local_steps(k) for k in range(1, self.rounds + 1))

    def quorum_of(self, n_leaves: int) -> int:
        """``K`` for ``n_leaves`` leaves: 0 means all, a fraction is rounded up.

        Parameters
        ----------
        n_leaves : int
            Leaves of the topology, >= 1.

        Returns
        -------
        int
            Replies that close a round, in ``[1, n_leaves]`` for a valid quorum.
        """
        q = self.quorum
        if isinstance(q, float):
            return max(1, math.ceil(q * n_leaves))
        return n_leaves if q == 0 else int(q)
