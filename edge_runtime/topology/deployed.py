"""A topology deployed through the broker: devices that do not carry the tree.

``edge-runtime deploy TOPOLOGY`` publishes the topology file's text, retained, on
``<prefix>/config`` (`edge_runtime.topology.topics.config_topic`); ``edge-runtime enroll``
publishes a device's place, ``{"parent": ..., "sensor_topic": ...}`` as JSON, on
``<prefix>/config/nodes/<id>`` (`NodeEntry`). A device started with only its broker URL,
credentials and node id reads both and runs as the node the text declares, or as a leaf its
open parent admits (`Topology.admitted_leaf`, with the entry's sensor topic).

The version of a deployed text is the first `VERSION_CHARS` hex digits of its SHA-256
(`config_version`): the status documents show the version each node applied.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json

from edge_runtime.topology.checks import TopologyError, check_node_id
from edge_runtime.topology.loading import parse_topology
from edge_runtime.topology.node import NodeConfig
from edge_runtime.topology.topics import default_sensor_topic
from edge_runtime.topology.tree import Topology

__all__ = [
    "VERSION_CHARS",
    "NodeEntry",
    "config_version",
    "node_config",
    "parse_deployed",
    "with_node",
]

VERSION_CHARS = 16
"""Hex digits of SHA-256 in a configuration version (64 bits)."""


def config_version(payload: bytes) -> str:
    """The version of a deployed topology: its SHA-256, first `VERSION_CHARS` hex digits.

    Parameters
    ----------
    payload : bytes
        The retained message on ``<prefix>/config`` (the file's UTF-8 text).
    """
    return hashlib.sha256(payload).hexdigest()[:VERSION_CHARS]


@functools.lru_cache(maxsize=8)  # agents of one process share a payload's parse
def parse_deployed(payload: bytes, prefix: str) -> Topology:
    """Parse a deployed topology (`parse_topology` of the UTF-8 text) and check its prefix.

    Parameters
    ----------
    payload : bytes
        The retained message on ``<prefix>/config``.
    prefix : str
        The prefix it was read under.

    Returns
    -------
    Topology
        Without ``source_path`` (relative paths in the file mean nothing on a device).

    Raises
    ------
    TopologyError
        If the payload is not UTF-8 TOML of a valid topology, or declares another prefix.
    """
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TopologyError(f"deployed topology: not UTF-8 text (byte {exc.start})") from None
    topology = parse_topology(text)
    if topology.prefix != prefix:
        raise TopologyError(
            f"deployed topology {topology.name!r} declares prefix {topology.prefix!r} but was "
            f"read under {prefix!r}"
        )
    return topology


@dataclasses.dataclass(frozen=True)
class NodeEntry:
    """An enrolled device's place: its parent and sensor topic (``<prefix>/config/nodes/<id>``).

    Parameters
    ----------
    parent : str
        The aggregator it reports to (an open one when the topology does not declare it).
    sensor_topic : str or None, default None
        Its sensor topic; None: ``sensors/<id>``.
    """

    parent: str
    sensor_topic: str | None = None

    def encode(self) -> bytes:
        """The JSON payload, ``{"parent": ..., "sensor_topic": ...}``."""
        return json.dumps({"parent": self.parent, "sensor_topic": self.sensor_topic}).encode()

    @classmethod
    def decode(cls, payload: bytes) -> NodeEntry:
        """Read an entry back.

        Raises
        ------
        TopologyError
            If the payload is not such a JSON object (a string ``parent`` that is a valid
            node id, a string or null ``sensor_topic``).
        """
        try:
            doc = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            raise TopologyError("node entry: not JSON") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("parent"), str):
            raise TopologyError('node entry: expected {"parent": "<id>", "sensor_topic": ...}')
        sensor = doc.get("sensor_topic")
        if sensor is not None and (not isinstance(sensor, str) or not sensor):
            raise TopologyError(f"node entry: sensor_topic must be a topic, got {sensor!r}")
        check_node_id(doc["parent"])
        return cls(doc["parent"], sensor)


def node_config(topology: Topology, node_id: str, entry: NodeEntry | None) -> NodeConfig:
    """The settings of ``node_id`` in a deployed topology: declared, else admitted.

    Parameters
    ----------
    topology : Topology
        The deployed topology.
    node_id : str
        The device's node id.
    entry : NodeEntry or None
        Its entry (`NodeEntry`), for a node the topology does not declare.

    Returns
    -------
    NodeConfig
        The declared node's; else `Topology.admitted_leaf` under ``entry.parent`` with the
        entry's sensor topic.

    Raises
    ------
    TopologyError
        If the topology does not declare the node and there is no entry, or the entry's
        parent is not an open aggregator of it.
    """
    if node_id in topology.nodes:
        return topology.nodes[node_id]
    if entry is None:
        raise TopologyError(
            f"node {node_id!r} is not in the deployed topology {topology.name!r} and has no "
            "entry (edge-runtime enroll publishes one)"
        )
    if entry.parent not in topology.nodes:
        raise TopologyError(
            f"node {node_id!r}: its parent {entry.parent!r} is not in the deployed topology "
            f"{topology.name!r}"
        )
    leaf = topology.admitted_leaf(entry.parent, node_id)
    return dataclasses.replace(
        leaf, sensor_topic=entry.sensor_topic or default_sensor_topic(node_id)
    )


def with_node(topology: Topology, config: NodeConfig) -> Topology:
    """``topology`` with ``config`` among its nodes (an admitted leaf, for its own agent).

    Raises
    ------
    TopologyError
        As `Topology` (e.g. the node's parent is not in it).
    """
    if topology.nodes.get(config.id) == config:
        return topology
    nodes = {**topology.nodes, config.id: config}
    return dataclasses.replace(topology, nodes=nodes)
