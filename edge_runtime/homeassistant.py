"""Home Assistant MQTT discovery: retained config messages that make each node a device.

Pure message building, no I/O: `discovery_messages` returns ``(topic, payload)`` pairs that
the caller publishes **retained** (QoS 1), `discovery_removals` the empty retained payloads
that delete them again. Home Assistant then shows every node of a topology as a device,
linked to its parent with ``via_device`` (leaf -> site aggregator -> root), with entities:

=================  =============  ==============================================================
entity             component      state (from the node's topics, `edge_runtime.topology`)
=================  =============  ==============================================================
Online             binary_sensor  ``<prefix>/<path>/status`` = ``online`` / ``offline`` (the
                                  Last Will), device class ``connectivity``
Samples            sensor         ``n_samples`` of the JSON status document
                                  ``<prefix>/<path>/status/detail``
                                  (`edge_runtime.wire.StatusDetail`)
Rank               sensor         ``rank`` of the status document (diagnostic)
Anomaly rate       sensor         ``extra.anomaly_rate`` of the status document, in %
Last Q             sensor         ``extra.last_q`` of the status document (squared prediction error)
Sensor fault       binary_sensor  device class ``problem``: on while ``extra.suspect`` of the
                                  status document is set (a recent alarm of the leaf's
                                  sensor-fault detector), off when it is null; the suspect as
                                  attributes
Suspected sensor   sensor         ``extra.suspect.sensor``: the column index of the suspected
                                  sensor, ``none`` without a recent alarm; the suspect as
                                  attributes
Privacy            sensor         ``privacy.mechanism`` of the status document, ``off`` without
                                  noise; the whole ``privacy`` ledger as attributes (diagnostic)
=================  =============  ==============================================================

Every entity but Online is *available* while the node's status topic says ``online``
(``availability``), so a node that died shows its sensors as unavailable instead of stale
numbers; Online itself has no availability so that it shows "Disconnected", not
"Unavailable".

Contract with the scoring code: ``extra.anomaly_rate`` is the *fraction*
(0..1) of the node's recent scored readings that were flagged, ``extra.last_q`` the Q (SPE)
of the latest scored reading; both may be absent or null (a node that does not score, or has
not scored yet), and the templates then render ``None``, which Home Assistant's MQTT sensor
turns into the state "unknown" (``PAYLOAD_NONE``), rather than a misleading 0.

Suspected sensor: the leaf's fault detector
(`edge_runtime.agents.leaf.core.fault_scoring`, ``score_detector = "faults"``) names the
sensor of its latest alarm in ``extra.suspect`` (``{"sensor", "fault", "seq", "ts"}``, null
again after 100 scored readings without an alarm). One problem binary sensor and one text
sensor per node rather than one problem entity per sensor: the topology does not know a
leaf's number of sensors (discovery is built from it before any reading), a leaf may have
hundreds, and one entity whose state is the sensor is what an automation needs ("notify
when Sensor fault turns on, naming Suspected sensor"); the history of the text sensor shows
which sensors failed when. A node without the fault detector renders ``None`` (unknown).

``state_class`` choices (long-term statistics,
https://developers.home-assistant.io/docs/core/entity/sensor#available-state-classes):

- Samples: ``total``. ``n_samples`` is a count, so ``measurement`` (min/mean/max of the value)
  would be meaningless, but it is not monotone: it restarts with a new state epoch, can step
  back after a restore from a checkpoint older than the last status, and on an aggregator it
  is the merged count of the children's latest snapshots, which falls when a stale child is
  dropped. ``total_increasing`` reads every decrease as a meter reset and would then count
  the samples again on recovery; ``total`` records growth and decline as they are, so the
  statistics' net change always equals the change of the value.
- Rank, Anomaly rate, Last Q: ``measurement`` (present-time values; min/mean/max are useful).
- Online, Sensor fault, Suspected sensor, Privacy: none (binary sensors; text states).

Schema source: the Home Assistant MQTT docs, https://www.home-assistant.io/integrations/mqtt/
("Discovery messages": topic ``<discovery_prefix>/<component>/[<node_id>/]<object_id>/config``,
ids of the character class ``[a-zA-Z0-9_-]``, best practice ``<object_id>`` = ``unique_id``
without ``<node_id>``; an empty retained payload removes the entity; ``origin`` recommended),
https://www.home-assistant.io/integrations/sensor.mqtt/ and
https://www.home-assistant.io/integrations/binary_sensor.mqtt/ (``state_topic`` required;
``device`` needs ``unique_id`` and at least one of ``identifiers`` / ``connections``;
``availability`` entries need ``topic``; ``entity_category`` must be ``diagnostic``). Full
key names are used, no abbreviations; single-component discovery (one message per entity)
is used rather than device-based discovery (``<prefix>/device/...``), which older Home
Assistant versions do not understand.

Ids: every unique id and device identifier starts with ``edge_runtime_``, then the
deployment (topology name, prefix and a 6-hex-digit hash of the exact pair, so that two
deployments never collide even when their names differ only in characters the id cannot
hold), then the node id (characters outside ``[a-zA-Z0-9_-]`` replaced by ``_``, followed by
a hash of the exact id when anything was replaced). They depend only on the name, the
prefix and the node id, so they are stable across restarts and survive moving a node to
another parent.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from edge_runtime import __version__
from edge_runtime.topology import Topology

__all__ = [
    "DEFAULT_DISCOVERY_PREFIX",
    "ENTITY_KEYS",
    "ORIGIN_NAME",
    "device_identifier",
    "discovery_messages",
    "discovery_removals",
    "unique_id",
]

DEFAULT_DISCOVERY_PREFIX = "homeassistant"
"""Home Assistant's default discovery prefix (configurable in its MQTT options)."""

ORIGIN_NAME = "edge_runtime"
"""``origin.name`` and ``device.manufacturer`` of every message."""

PAYLOAD_ONLINE = "online"
PAYLOAD_OFFLINE = "offline"
# The agents' retained status / Last Will payloads
# (edge_runtime.agents.common.shell.agent.ONLINE / OFFLINE).

_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")

# Jinja fragments. ``value_json`` is the parsed status document. ``dict.get`` and the type
# tests make a missing or null field (or a document without ``extra`` / ``privacy``) render
# None, i.e. the state "unknown", without Home Assistant's undefined-variable warnings.
_EXTRA = "{% set x = value_json.get('extra') %}{% set x = x if x is mapping else {} %}"
_PRIVACY = "{% set p = value_json.get('privacy') %}{% set p = p if p is mapping else {} %}"
_SUSPECT = _EXTRA + "{% set s = x.get('suspect') %}{% set s = s if s is mapping else {} %}"


@dataclass(frozen=True)
class _Entity:
    key: str
    component: str
    name: str
    config: dict[str, Any]
    detail: bool  # state from the status document (else from the plain status topic)


_ENTITIES: tuple[_Entity, ...] = (
    _Entity(
        "online",
        "binary_sensor",
        "Online",
        {
            "device_class": "connectivity",
            "payload_on": PAYLOAD_ONLINE,
            "payload_off": PAYLOAD_OFFLINE,
        },
        detail=False,
    ),
    _Entity(
        "samples",
        "sensor",
        "Samples",
        {
            "value_template": "{{ value_json.n_samples }}",
            "state_class": "total",
            "unit_of_measurement": "samples",
            "icon": "mdi:counter",
        },
        detail=True,
    ),
    _Entity(
        "rank",
        "sensor",
        "Rank",
        {
            "value_template": "{{ value_json.rank }}",
            "state_class": "measurement",
            "entity_category": "diagnostic",
            "icon": "mdi:matrix",
        },
        detail=True,
    ),
    _Entity(
        "anomaly_rate",
        "sensor",
        "Anomaly rate",
        {
            "value_template": _EXTRA
            + "{% set r = x.get('anomaly_rate') %}"
            + "{{ (r * 100) | round(4) if r is number else None }}",
            "state_class": "measurement",
            "unit_of_measurement": "%",
            "suggested_display_precision": 2,
            "icon": "mdi:alert-decagram",
        },
        detail=True,
    ),
    _Entity(
        "last_q",
        "sensor",
        "Last Q",
        {
            "value_template": _EXTRA
            + "{% set q = x.get('last_q') %}"
            + "{{ q if q is number else None }}",
            "state_class": "measurement",
            "suggested_display_precision": 4,
            "icon": "mdi:sigma",
        },
        detail=True,
    ),
    _Entity(
        "sensor_fault",
        "binary_sensor",
        "Sensor fault",
        {
            "value_template": _EXTRA
            + "{% set s = x.get('suspect') %}"
            + "{{ 'ON' if s is mapping else ('OFF' if 'suspect' in x else None) }}",
            "json_attributes_template": _SUSPECT + "{{ s | tojson }}",
            "device_class": "problem",
        },
        detail=True,
    ),
    _Entity(
        "suspected_sensor",
        "sensor",
        "Suspected sensor",
        {
            "value_template": _SUSPECT
            + "{{ s.get('sensor') if s else ('none' if 'suspect' in x else None) }}",
            "json_attributes_template": _SUSPECT + "{{ s | tojson }}",
            "icon": "mdi:thermometer-alert",
        },
        detail=True,
    ),
    _Entity(
        "privacy",
        "sensor",
        "Privacy",
        {
            "value_template": _PRIVACY + "{{ p.get('mechanism', 'off') if p else 'off' }}",
            "json_attributes_template": _PRIVACY + "{{ p | tojson }}",
            "entity_category": "diagnostic",
            "icon": "mdi:shield-lock",
        },
        detail=True,
    ),
)

ENTITY_KEYS: tuple[str, ...] = tuple(entity.key for entity in _ENTITIES)
"""The entities of every node, in message order."""


def _short_hash(*parts: str) -> str:
    digest = hashlib.blake2s("\x00".join(parts).encode("utf-8"), digest_size=3)
    return digest.hexdigest()


def _slug(text: str) -> str:
    """``text`` as ``[a-zA-Z0-9_-]+``; lossy replacements get a hash of the exact text."""
    slug = _ID_CHARS.sub("_", text)
    return slug if slug == text else f"{slug}_{_short_hash(text)}"


def _deployment_slug(topology: Topology) -> str:
    name = _ID_CHARS.sub("_", topology.name)
    prefix = _ID_CHARS.sub("_", topology.prefix)
    return f"{name}_{prefix}_{_short_hash(topology.name, topology.prefix)}"


def device_identifier(topology: Topology, node_id: str) -> str:
    """The Home Assistant device identifier of ``node_id`` (also the stem of its unique ids).

    ``edge_runtime_<name>_<prefix>_<hash of name and prefix>_<node id>``, all of
    ``[a-zA-Z0-9_-]``.

    Raises
    ------
    ValueError
        If ``node_id`` is not a node of ``topology``.
    """
    _check_node(topology, node_id)
    return f"{ORIGIN_NAME}_{_deployment_slug(topology)}_{_slug(node_id)}"


def unique_id(topology: Topology, node_id: str, key: str) -> str:
    """The ``unique_id`` (and discovery ``<object_id>``) of entity ``key`` of ``node_id``.

    Raises
    ------
    ValueError
        If ``node_id`` is not a node of ``topology`` or ``key`` not one of `ENTITY_KEYS`.
    """
    if key not in ENTITY_KEYS:
        raise ValueError(f"unknown entity {key!r}, expected one of: {', '.join(ENTITY_KEYS)}")
    return f"{device_identifier(topology, node_id)}_{key}"


def discovery_messages(
    topology: Topology,
    *,
    discovery_prefix: str = DEFAULT_DISCOVERY_PREFIX,
    node_ids: Iterable[str] | None = None,
) -> list[tuple[str, bytes]]:
    """Home Assistant discovery config messages for the nodes of ``topology``.

    Publish each one **retained** (QoS 1), so that Home Assistant finds them when it (re)starts;
    publishing them again is harmless (Home Assistant treats it as a config update).

    Parameters
    ----------
    topology : Topology
    discovery_prefix : str, default "homeassistant"
        Home Assistant's discovery prefix: one or more topic levels, without wildcards.
    node_ids : iterable of str or None, default None
        The nodes to describe (e.g. an agent's own node); None for all of them.

    Returns
    -------
    list of (str, bytes)
        ``(<discovery_prefix>/<component>/<unique_id>/config, UTF-8 JSON)``, one per entity
        (`ENTITY_KEYS`) of each node; nodes root first, parents before their children, so
        that a child's ``via_device`` names a device Home Assistant already knows. (Retained
        messages reach Home Assistant in the broker's order, not this one; Home Assistant
        creates a ``via_device`` it does not know yet since home-assistant/core PR 131588,
        2024-11, which fixed home-assistant/core#131551, where such a link was lost.)

    Raises
    ------
    ValueError
        If ``discovery_prefix`` is not a valid topic prefix or a node id is unknown.
    """
    _topic(discovery_prefix, "sensor", "check")  # the prefix is checked even for no nodes
    messages = []
    for node_id in _selected_nodes(topology, node_ids):
        device = _device(topology, node_id)
        status = topology.status_topic(node_id)
        availability = [
            {
                "topic": status,
                "payload_available": PAYLOAD_ONLINE,
                "payload_not_available": PAYLOAD_OFFLINE,
            }
        ]
        for entity in _ENTITIES:
            uid = unique_id(topology, node_id, entity.key)
            config: dict[str, Any] = {
                "name": entity.name,
                "unique_id": uid,
                "state_topic": topology.status_detail_topic(node_id) if entity.detail else status,
            }
            if "json_attributes_template" in entity.config:
                config["json_attributes_topic"] = topology.status_detail_topic(node_id)
            config.update(entity.config)
            if entity.detail:
                config["availability"] = availability
            config["qos"] = 1
            config["device"] = device
            config["origin"] = _origin()
            payload = json.dumps(config, ensure_ascii=False, separators=(",", ":"))
            messages.append(
                (_topic(discovery_prefix, entity.component, uid), payload.encode("utf-8"))
            )
    return messages


def discovery_removals(
    topology: Topology,
    *,
    discovery_prefix: str = DEFAULT_DISCOVERY_PREFIX,
    node_ids: Iterable[str] | None = None,
) -> list[tuple[str, bytes]]:
    """Empty payloads for the topics of `discovery_messages`: publish them **retained** to
    remove the entities (and, once unreferenced, the devices) from Home Assistant and to clear
    the retained configs on the broker.

    Parameters and errors as `discovery_messages`.
    """
    return [
        (topic, b"")
        for topic, _ in discovery_messages(
            topology, discovery_prefix=discovery_prefix, node_ids=node_ids
        )
    ]


# --------------------------------------------------------------------------------------------


def _check_node(topology: Topology, node_id: object) -> None:
    if not isinstance(node_id, str) or node_id not in topology.nodes:
        raise ValueError(f"unknown node {node_id!r} in topology {topology.name!r}")


def _selected_nodes(topology: Topology, node_ids: Iterable[str] | None) -> list[str]:
    """The requested nodes in tree order (root first, breadth first, file order within)."""
    order = [topology.root]
    for node_id in order:
        order.extend(topology.children(node_id))
    if node_ids is None:
        return order
    if isinstance(node_ids, str | bytes):
        raise ValueError(f"node_ids must be an iterable of node ids, not {node_ids!r}")
    wanted = set()
    for node_id in node_ids:
        _check_node(topology, node_id)
        wanted.add(node_id)
    return [node_id for node_id in order if node_id in wanted]


def _topic(discovery_prefix: str, component: str, object_id: str) -> str:
    if (
        not isinstance(discovery_prefix, str)
        or discovery_prefix == ""
        or any(c in discovery_prefix for c in "+#\x00")
        or "" in discovery_prefix.split("/")
    ):
        raise ValueError(
            f"discovery_prefix {discovery_prefix!r} is not a topic prefix "
            "(non-empty levels, no '+', '#' or NUL)"
        )
    return f"{discovery_prefix}/{component}/{object_id}/config"


def _role(topology: Topology, node_id: str) -> str:
    if node_id == topology.root:
        return "root"
    return "leaf" if topology.is_leaf(node_id) else "aggregator"


def _device(topology: Topology, node_id: str) -> dict[str, Any]:
    device: dict[str, Any] = {
        "identifiers": [device_identifier(topology, node_id)],
        "name": f"{topology.name} {node_id}",
        "manufacturer": ORIGIN_NAME,
        "model": f"federated PCA {_role(topology, node_id)}",
        "sw_version": __version__,
    }
    parent = topology.nodes[node_id].parent
    if parent is not None:
        device["via_device"] = device_identifier(topology, parent)
    return device


def _origin() -> dict[str, str]:
    return {"name": ORIGIN_NAME, "sw_version": __version__}
