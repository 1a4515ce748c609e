"""Asyncio agents over MQTT: leaves run FPCA-Edge, aggregators merge their children.

`LeafAgent` and `AggregatorAgent` are imported on first use (PEP 562), and `create_agent`
imports only the role it creates: a leaf does not load the aggregator's modules, nor an
FPCA node FedPower's, so a leaf's import time and RSS stay low.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edge_runtime.agents.common.shell.agent import Agent, AgentState, AgentStats
from edge_runtime.lazy import lazy_names
from edge_runtime.settings import AgentSettings

if TYPE_CHECKING:
    from pathlib import Path

    from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
    from edge_runtime.agents.leaf.shell.agent import LeafAgent
    from edge_runtime.topology import Topology

__all__ = [
    "Agent",
    "AgentSettings",
    "AgentState",
    "AgentStats",
    "AggregatorAgent",
    "LeafAgent",
    "create_agent",
]


def create_agent(
    topology: Topology,
    node_id: str,
    settings: AgentSettings | None = None,
    *,
    n_features: int | None = None,
    state_dir: Path | None = None,
    **leaf_options: Any,
) -> Agent:
    """The agent for ``node_id``: a `LeafAgent` for a leaf, else an `AggregatorAgent`
    (with ``algorithm = "fedpower"``: `FedPowerLeafAgent`, `FedPowerRootAgent`,
    `FedPowerAggregatorAgent`, `edge_runtime.agents.fedpower.shell.agents`).

    ``state_dir`` (the node's state directory, None: none) goes to a leaf (its checkpoint)
    and to an `AggregatorAgent` (a secure-aggregation site's running sum; others ignore it);
    ``leaf_options`` (``checkpoint_every``, ``restore_from_broker``, ...) go to the leaf and
    are ignored for aggregators.

    Raises
    ------
    KeyError
        If ``node_id`` is not in ``topology``.
    """
    if node_id not in topology.nodes:
        raise KeyError(f"node {node_id!r} is not in topology {topology.name!r}")
    if topology.algorithm == "fedpower":
        from edge_runtime.agents.fedpower.shell.agents import (
            FedPowerAggregatorAgent,
            FedPowerLeafAgent,
            FedPowerRootAgent,
        )

        if topology.is_leaf(node_id):
            return FedPowerLeafAgent(
                topology,
                node_id,
                settings,
                n_features=n_features,
                state_dir=state_dir,
                **leaf_options,
            )
        if node_id == topology.root:
            return FedPowerRootAgent(topology, node_id, settings)
        return FedPowerAggregatorAgent(topology, node_id, settings)
    if topology.is_leaf(node_id):
        from edge_runtime.agents.leaf.shell.agent import LeafAgent

        return LeafAgent(
            topology, node_id, settings, n_features=n_features, state_dir=state_dir, **leaf_options
        )
    from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent

    return AggregatorAgent(topology, node_id, settings, n_features=n_features, state_dir=state_dir)


_MODULE_OF = {
    "AggregatorAgent": "edge_runtime.agents.aggregator.shell.agent",
    "LeafAgent": "edge_runtime.agents.leaf.shell.agent",
}
"""The module of each name imported on first use (by `__getattr__`)."""


__getattr__, __dir__ = lazy_names(globals(), _MODULE_OF, __all__)
