"""An agent's Home Assistant discovery: its config messages, Home Assistant's birth message
that asks for them again, and their removal (`edge_runtime.homeassistant` builds them)."""

from __future__ import annotations

import aiomqtt

from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology

__all__ = ["AgentDiscovery", "remove_discovery"]

HA_ONLINE = b"online"
"""Home Assistant's birth payload on ``<discovery prefix>/status``."""


class AgentDiscovery:
    """What one agent publishes for Home Assistant, and when (no I/O).

    Parameters
    ----------
    topology : Topology
    node_id : str
        The agent's node.
    discovery_prefix : str or None
        Home Assistant's discovery prefix (``AgentSettings.discovery_prefix``); None: no
        discovery (no messages, no topic to follow).

    Attributes
    ----------
    messages : list of (str, bytes)
        The retained config messages, topic and payload
        (`edge_runtime.homeassistant.discovery_messages`).
    status_topic : str or None
        ``<discovery prefix>/status``, where Home Assistant announces itself.
    due : bool
        Home Assistant came online: the configs are to be published again.
    published : int
        Times the configs were published.
    """

    def __init__(self, topology: Topology, node_id: str, discovery_prefix: str | None) -> None:
        if discovery_prefix is not None:  # Home Assistant's module only with discovery
            from edge_runtime.homeassistant import discovery_messages

        self.messages: list[tuple[str, bytes]] = (
            []
            if discovery_prefix is None
            else discovery_messages(topology, discovery_prefix=discovery_prefix, node_ids=[node_id])
        )
        self.status_topic = None if discovery_prefix is None else f"{discovery_prefix}/status"
        self.due = False
        self.published = 0

    def on_status(self, payload: object) -> bool:
        """Take a message on `status_topic`; True (and `due`) when it is Home Assistant's
        birth message ``online`` (surrounding whitespace ignored)."""
        if isinstance(payload, bytes | bytearray) and bytes(payload).strip() == HA_ONLINE:
            self.due = True
            return True
        return False


async def remove_discovery(
    topology: Topology, node_id: str, settings: AgentSettings, discovery_prefix: str
) -> int:
    """Remove ``node_id``'s Home Assistant entities: publish the empty retained payloads of
    `edge_runtime.homeassistant.discovery_removals` (QoS 1, each within
    ``settings.timeout_s`` seconds) on a fresh connection, then disconnect.

    Returns
    -------
    int
        Messages published.

    Raises
    ------
    ValueError
        If ``node_id`` is unknown or ``discovery_prefix`` is not a topic prefix.
    aiomqtt.MqttError
        If the broker cannot be reached or a publish times out.
    """
    from edge_runtime.homeassistant import discovery_removals

    removals = discovery_removals(topology, discovery_prefix=discovery_prefix, node_ids=[node_id])
    async with aiomqtt.Client(**settings.client_kwargs()) as client:
        for topic, payload in removals:
            await client.publish(topic, payload, qos=1, retain=True, timeout=settings.timeout_s)
    return len(removals)
