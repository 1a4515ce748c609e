"""An agent follows the deployed topology: ``<prefix>/config`` while it runs.

Every agent subscribes to its topology's `config_topic` (retained: a new connection gets the
current one). A payload it has not handled yet (by version, `config_version`) is parsed
(`parse_deployed`); the node's new settings (declared, or, for a leaf its open parent
admitted, the parent's admit settings with the leaf's own sensor topic) go to the core's
`NodeCore.apply_config`, which applies the live keys at once and refuses the rest whole
(`edge_runtime.agents.common.core.reconfigure`). One log line per version handled:
``config_applied`` (info) or ``config_refused`` (warning, with the reason and the fields);
a payload that is no valid topology is a reject ``config_invalid``. The core's lock is held
while the change is applied, so no numerics in a worker thread see half of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from edge_runtime.topology import NodeConfig, Topology, TopologyError
from edge_runtime.topology.deployed import (
    NodeEntry,
    config_version,
    node_config,
    parse_deployed,
    with_node,
)

__all__ = ["ConfigWatch", "tree_changes"]


def tree_changes(current: Topology, new: Topology, node_id: str, config: NodeConfig) -> list[str]:
    """What differs for ``node_id`` outside its own settings: ``"name"`` (the deployment's,
    in every client id), ``"algorithm"``, ``"path"`` (its chain of ids from the root: its
    topics), each applied only by a restart.

    Raises
    ------
    TopologyError
        If ``config`` does not fit into ``new`` (`with_node`).
    """
    changes = [k for k in ("name", "algorithm") if getattr(current, k) != getattr(new, k)]
    if with_node(new, config).path(node_id) != current.path(node_id):
        changes.append("path")
    return changes


class ConfigWatch:
    """The deployed topology, as one agent follows it.

    Parameters
    ----------
    topic : str
        The topology's ``<prefix>/config`` (`Topology.config_topic`).

    Attributes
    ----------
    seen : str or None
        Version of the last payload handled (applied, refused or invalid); None before any.
    """

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.seen: str | None = None

    def started_from(self, agent: Any, version: str) -> None:
        """The agent was built from the deployed topology of ``version`` (``edge-runtime
        agent`` without ``--topology``): its retained copy is not news, and the status
        document shows the version."""
        self.seen = version
        agent.core.config_version = version

    async def receive(self, agent: Any, payload: object) -> None:
        """Handle a message on `topic` for ``agent`` (module docstring); never raises for
        bad input. An empty payload (the configuration cleared) changes nothing."""
        if not isinstance(payload, bytes | bytearray) or not payload:
            return
        payload = bytes(payload)
        version = config_version(payload)
        if version == self.seen:
            return
        self.seen = version
        node = agent.node_id
        try:
            topology = parse_deployed(payload, agent.topology.prefix)
            current = agent.config
            entry = NodeEntry(current.parent, current.sensor_topic) if current.parent else None
            new = node_config(topology, node, entry)
            tree = tree_changes(agent.topology, topology, node, new)
        except TopologyError as exc:
            agent.reject("config_invalid", self.topic, f"version {version}: {exc}")
            return
        lock = getattr(agent, "_lock", None)
        async with lock if isinstance(lock, asyncio.Lock) else contextlib.nullcontext():
            change = agent.core.apply_config(
                current, new, version, time.monotonic(), tree_changes=tuple(tree)
            )
            if change.applied:
                agent.config = new
        if change.refused is not None:
            agent.log.warning(
                "config_refused",
                reason=change.refused,
                version=version,
                fields=list(change.blocking),
                count=agent.core.rejects[change.refused],
                running=agent.core.config_version,
                hint="a privacy change never mixes with readings released under the old "
                "guarantee: restart the node with a fresh state (README, 'Configuration from "
                "the broker')"
                if change.refused == "config_privacy_change"
                else "restart the node to apply these (a new epoch)",
            )
        elif change.applied:
            agent.log.info("config_applied", version=version, fields=list(change.changed))
        agent.wake()
