"""Asyncio agents over MQTT: leaves run FPCA-Edge, aggregators merge their children.

Internal to the runtime (the command line composes the agents), so ``__all__`` is empty.
Agents are grouped by role (``leaf``, ``aggregator``, ``fedpower``, and what they share in
``common``), each a synchronous core and an asyncio shell; import a name from the module
that defines it (`edge_runtime.agents.leaf.shell.agent.LeafAgent`,
`edge_runtime.agents.aggregator.shell.agent.AggregatorAgent`,
`edge_runtime.agents.common.shell.agent.Agent`). `create_agent`, here, imports only the
role it creates: a leaf does not load the aggregator's modules, nor an FPCA node FedPower's,
so a leaf's import time and RSS stay low.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edge_runtime.agents.common.shell.agent import Agent
from edge_runtime.settings import AgentSettings

if TYPE_CHECKING:
    from pathlib import Path

    from edge_runtime.topology import Topology

__all__: list[str] = []


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

