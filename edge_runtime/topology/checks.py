"""The field checks shared by parsing a topology file and building one directly, and its error.

Each check raises `TopologyError` with a one-line message naming the place (``where``, e.g.
``"node 'pi-01'"`` or ``"[defaults]"``), the key and the offending value as TOML writes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from edge_runtime.declaration import unknown_key_message
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.topology.keys import KEYS
from edge_runtime.topology.topics import RESERVED_IDS

__all__ = [
    "MAX_ID_LENGTH",
    "TopologyError",
    "aggregator_privacy_message",
    "aggregator_sensor_message",
    "aggregator_sensor_topic_message",
    "aggregator_source_message",
    "check_keys",
    "check_kind",
    "check_n_features",
    "check_node_id",
    "prefix_problem",
    "topic_filter_problem",
    "unknown_key_message",
]

MAX_ID_LENGTH = 64
"""Longest node id, in characters."""

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


class TopologyError(EdgeRuntimeError, ValueError):
    """A topology file is missing, not valid TOML, or does not describe a valid tree."""


def check_kind(where: str, key: str, value: object) -> Any:
    """Check a value's TOML type against the kind `TOPOLOGY_KEYS` declares for ``key`` and
    return it normalised (`edge_runtime.declaration.Key.check_kind`).

    Parameters
    ----------
    where : str
        The place, for the message, e.g. ``"node 'pi-01'"`` or ``"[defaults]"``.
    key : str
        A key of `edge_runtime.topology.keys.KEYS`.
    value : object
        The value as parsed from TOML or given to a constructor.

    Returns
    -------
    object
        ``value``, with a "float" as float, "bounds" as a tuple of two floats and "range" as
        ``(lo, hi)`` floats or ``((lo_1, ...), (hi_1, ...))`` tuples of floats.

    Raises
    ------
    TopologyError
        ``"<where>: <key> must be <kind>, got <TOML type> <value>"``.
    """
    return KEYS[key].check_kind(where, value, TopologyError)


def check_n_features(n_features: object) -> None:
    """Raise `ValueError` unless ``n_features`` is an integer >= 1 (a reading's width)."""
    if isinstance(n_features, bool) or not isinstance(n_features, int) or n_features < 1:
        raise ValueError(f"n_features must be an integer >= 1, got {n_features!r}")


def check_keys(where: str, table: Mapping[str, object], allowed: Iterable[str]) -> None:
    """Raise `TopologyError` (`unknown_key_message`) for the first key of ``table`` not in
    ``allowed``."""
    allowed = tuple(allowed)
    for key in table:
        if key not in allowed:
            raise TopologyError(unknown_key_message(where, key, allowed))


def _node_id_problem(node_id: str) -> str | None:
    """Why ``node_id`` is not a valid single MQTT topic level for a node, or ``None``."""
    if node_id == "":
        return "is empty"
    if len(node_id) > MAX_ID_LENGTH:
        return f"is {len(node_id)} characters long, at most {MAX_ID_LENGTH} are allowed"
    for char in ("/", "+", "#"):
        if char in node_id:
            return f"contains {char!r}; an id must be a single MQTT topic level without wildcards"
    if "\x00" in node_id:
        return "contains a NUL character"
    if _CONTROL_CHARS.search(node_id):
        return "contains a control character"
    if node_id in RESERVED_IDS:
        return f"is reserved for topic names ({', '.join(sorted(RESERVED_IDS))})"
    return None


def check_node_id(node_id: str, where: str = "") -> None:
    """Check that ``node_id`` is one MQTT topic level: non-empty, at most `MAX_ID_LENGTH`
    characters, without ``/``, ``+``, ``#`` or control characters, not a reserved id.

    Raises
    ------
    TopologyError
        ``"<where>node id <id> <problem>"``.
    """
    problem = _node_id_problem(node_id)
    if problem is not None:
        raise TopologyError(f"{where}node id {node_id!r} {problem}")


def prefix_problem(prefix: str) -> str | None:
    """Why ``prefix`` is not a valid topic prefix, or ``None``."""
    if prefix == "":
        return "is empty"
    if "+" in prefix or "#" in prefix:
        return "contains an MQTT wildcard ('+' or '#')"
    if "\x00" in prefix:
        return "contains a NUL character"
    if prefix.startswith("/") or prefix.endswith("/"):
        return "starts or ends with '/'"
    if "//" in prefix:
        return "has an empty topic level ('//')"
    if prefix.startswith("$"):
        return "starts with '$' (reserved for broker topics such as $SYS)"
    return None


def topic_filter_problem(topic: str) -> str | None:
    """Why ``topic`` is not a valid MQTT topic filter (MQTT 3.1.1 section 4.7), or ``None``."""
    if topic == "":
        return "is empty"
    if "\x00" in topic:
        return "contains a NUL character"
    if len(topic.encode("utf-8")) > 65535:
        return "is longer than 65535 bytes"
    levels = topic.split("/")
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != len(levels) - 1):
            return "uses '#' other than as the whole last level"
        if "+" in level and level != "+":
            return "uses '+' other than as a whole level"
    return None


def aggregator_privacy_message(node_id: str, key: str) -> str:
    """The message for a privacy key set on aggregator ``node_id``."""
    return (
        f"node {node_id!r} has children, so it is an aggregator: {key} applies to leaves only "
        "(an aggregator reports the weakest guarantee of its children)"
    )


def aggregator_sensor_message(node_id: str, key: str) -> str:
    """The message for a sensor key (``valid_range``, ...) set on aggregator ``node_id``."""
    return (
        f"node {node_id!r} has children, so it is an aggregator and reads no sensor: "
        f"remove {key} (a leaf's setting)"
    )


def aggregator_sensor_topic_message(node_id: str, topic: object) -> str:
    """The message for a ``sensor_topic`` (``topic``) set on aggregator ``node_id``."""
    return (
        f"node {node_id!r} has children, so it is an aggregator and must not have "
        f"a sensor_topic (got {topic!r})"
    )


def aggregator_source_message(node_id: str) -> str:
    """The message for a ``source`` set on aggregator ``node_id``."""
    return (
        f"node {node_id!r} has children, so it is an aggregator and must not have a source "
        "(only leaves read sensor readings)"
    )
