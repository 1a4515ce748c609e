"""The settings of a FedPower deployment (`FedPowerConfig`) and what they impose on its leaves.

FedPower (the top-level ``algorithm = "fedpower"``) runs rounds of local power iterations
(`edge_runtime.fedpower`); its ``fedpower_*`` keys become a `FedPowerConfig`, and a private
leaf of such a topology runs FedPower's mechanism instead of FPCA's (`fedpower_private_leaf`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from edge_runtime.declaration import declared
from edge_runtime.fedpower import MECHANISM as FEDPOWER_MECHANISM
from edge_runtime.fpca.privacy import MECHANISMS
from edge_runtime.topology.checks import TopologyError
from edge_runtime.topology.keys import keys_where
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


def _check_fedpower(values: dict[str, Any]) -> dict[str, Any]:
    """The round settings checked against `FEDPOWER_KEYS`' declarations, normalised."""
    where = "topology"
    checked = {}
    for key in _FIELDS:
        checked[key.attribute] = key.check(where, values[key.attribute], TopologyError)
    q = checked["quorum"]
    if isinstance(q, float) and not (0.0 < q < 1.0):
        raise TopologyError(
            f"{where}: fedpower_quorum must be an integer >= 0 or a fraction in (0, 1), got {q}"
        )
    if isinstance(q, int) and q < 0:
        raise TopologyError(f"{where}: fedpower_quorum must be >= 0, got {q}")
    return checked


_FIELDS = keys_where(group="fedpower")


@declared(_FIELDS, _check_fedpower)
class FedPowerConfig:
    """The round settings of a FedPower deployment (top-level ``fedpower_*`` keys).

    The fields are the keys of `edge_runtime.topology.keys.FEDPOWER_KEYS` without their
    ``fedpower_`` prefix, declared there with their defaults, chosen for a streaming
    deployment of a few to a few hundred leaves and measured on Motes light
    (topologies/README.md gives the reasons).

    Parameters
    ----------
    {parameters}

    Raises
    ------
    TopologyError
        One line naming a bad value (``"topology: fedpower_<key> must be ..."``).
    """

    @property
    def total_iterations(self) -> int | None:
        """``T``: local iterations of all ``rounds`` rounds (what a private leaf's budget
        covers), or None when the schedule is open-ended (``rounds = 0``)."""
        if self.rounds == 0:
            return None
        # here: an FPCA topology (no FedPower section) does not load the schedule
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
