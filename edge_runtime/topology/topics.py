"""The MQTT topic names of a topology: built and parsed here, and nowhere else.

Layout: every topic a node publishes or reads is ``<prefix>/<path>/<kind>``, where
``<prefix>`` is the topology's prefix (one or more levels, e.g. ``"fpca"``), ``<path>`` the
chain of node ids from the root, joined by ``/`` (e.g. ``"root/site-a/pi-01"``), and
``<kind>`` one of:

==================  ==========================================================  ===========
kind                payload                                                     retained
==================  ==========================================================  ===========
``subspace``        the node's latest snapshot (`edge_runtime.wire`)             yes, QoS 1
``status``          ``online`` / ``offline`` (and the node's Last Will)          yes
``status/detail``   the JSON status document                                     yes
``confirm``         a leaf's reading confirmations (JSON)                        yes
``scores``          a scoring leaf's anomaly scores (JSON)                       no
``reply``           a FedPower leaf's reply to a round                           no
``model``           the global estimate, under the root's path                   yes
``round``           FedPower's round message, under the root's path              yes
==================  ==========================================================  ===========

Secure aggregation (`edge_runtime.wire.secagg`): a leaf of mechanism
``"gaussian-secagg"`` and its parent, the aggregator that sums the site, exchange one slot's
messages under their own paths, all QoS 1, the slot in the payload only (one topic per kind
and node keeps subscriptions and ACLs static):

========================  ===================  ===========  ============================
kind                      payload              publisher    retained / readers
========================  ===================  ===========  ============================
``secagg/keys``           KeyAdvertisement     the leaf     yes; its parent
``secagg/shares``         ShareUpload          the leaf     no; its parent only
``secagg/masked``         MaskedInput          the leaf     no; its parent only
``secagg/unmasked``       UnmaskResponse       the leaf     no; its parent only
``secagg/roster``         KeyRoster            aggregator   yes; its secagg leaves
``secagg/delivery/<id>``  ShareDelivery        aggregator   no; leaf ``<id>`` only
``secagg/unmask``         UnmaskRequest        aggregator   no; its secagg leaves
``secagg/outcome``        SlotOutcome          aggregator   yes; its secagg leaves
========================  ===================  ===========  ============================

The aggregator subscribes to ``<prefix>/<path>/+/secagg/+`` (`secagg_children_filter`); a
leaf to its parent's ``roster``, ``unmask``, ``outcome`` and ``delivery/<its id>``.

Besides the nodes' topics, the operator's configuration: the deployed topology
file's text on ``<prefix>/config`` (`config_topic`, retained, QoS 1, written by ``edge-runtime
deploy``) and one JSON entry per enrolled device on ``<prefix>/config/nodes/<id>``
(`config_node_topic`, retained, written by ``edge-runtime enroll``). Only the operator writes
them; every node reads them (`edge_runtime.topology.deployed`).

An aggregator subscribes to ``<prefix>/<path>/+/subspace`` (`children_filter`) and reads the
child's id back from the level that ``+`` matched (`child_level`). A leaf's sensor readings
arrive on ``sensors/<id>`` unless the topology names another topic (`default_sensor_topic`).
Node ids are single topic levels and none of `RESERVED_IDS`, so a path never contains a kind.
"""

from __future__ import annotations

__all__ = [
    "CONFIG",
    "CONFIRM",
    "MODEL",
    "REPLY",
    "RESERVED_IDS",
    "ROUND",
    "SCORES",
    "SECAGG",
    "SECAGG_AGGREGATOR_KINDS",
    "SECAGG_DELIVERY",
    "SECAGG_KEYS",
    "SECAGG_LEAF_KINDS",
    "SECAGG_MASKED",
    "SECAGG_OUTCOME",
    "SECAGG_ROSTER",
    "SECAGG_SHARES",
    "SECAGG_UNMASK",
    "SECAGG_UNMASKED",
    "STATUS",
    "STATUS_DETAIL",
    "SUBSPACE",
    "child_level",
    "children_filter",
    "config_node_topic",
    "config_topic",
    "default_sensor_topic",
    "everything_filter",
    "node_topic",
    "secagg_children_filter",
    "secagg_delivery_kind",
    "topic_depth",
]

SUBSPACE = "subspace"
"""Kind of a node's snapshot topic."""
STATUS = "status"
"""Kind of a node's online/offline topic."""
STATUS_DETAIL = "status/detail"
"""Kind of a node's JSON status topic."""
CONFIRM = "confirm"
"""Kind of a leaf's reading-confirmation topic."""
SCORES = "scores"
"""Kind of a scoring leaf's anomaly-score topic."""
REPLY = "reply"
"""Kind of a FedPower leaf's reply topic."""
MODEL = "model"
"""Kind of the root's global-estimate topic."""
ROUND = "round"
"""Kind of the root's FedPower round topic."""

SECAGG = "secagg"
"""First level of the secure-aggregation kinds (a reserved id)."""
SECAGG_KEYS = "secagg/keys"
"""Kind of a secagg leaf's key advertisement (retained)."""
SECAGG_SHARES = "secagg/shares"
"""Kind of a secagg leaf's encrypted shares (its parent reads it, nobody else)."""
SECAGG_MASKED = "secagg/masked"
"""Kind of a secagg leaf's masked input (its parent reads it, nobody else)."""
SECAGG_UNMASKED = "secagg/unmasked"
"""Kind of a secagg leaf's unmask response (its parent reads it, nobody else)."""
SECAGG_ROSTER = "secagg/roster"
"""Kind of a secagg aggregator's key roster (retained)."""
SECAGG_DELIVERY = "secagg/delivery"
"""Kind prefix of a secagg aggregator's share delivery to one leaf (`secagg_delivery_kind`)."""
SECAGG_UNMASK = "secagg/unmask"
"""Kind of a secagg aggregator's unmask request."""
SECAGG_OUTCOME = "secagg/outcome"
"""Kind of a secagg aggregator's slot outcome (retained)."""
SECAGG_LEAF_KINDS: tuple[str, ...] = (SECAGG_KEYS, SECAGG_SHARES, SECAGG_MASKED, SECAGG_UNMASKED)
"""What a secagg leaf publishes under its path."""
SECAGG_AGGREGATOR_KINDS: tuple[str, ...] = (SECAGG_ROSTER, SECAGG_UNMASK, SECAGG_OUTCOME)
"""What a secagg aggregator publishes under its path for all its leaves (besides deliveries)."""

CONFIG = "config"
"""Level under the prefix of the operator's configuration topics (`config_topic`)."""

RESERVED_IDS: frozenset[str] = frozenset(
    {"subspace", "status", "model", "confirm", "scores", "round", "reply", "secagg"}
)
"""Ids that would collide with the topic names a node publishes under its path."""


def node_topic(prefix: str, path: str, kind: str) -> str:
    """The topic ``<prefix>/<path>/<kind>`` of one node.

    Parameters
    ----------
    prefix : str
        The topology's topic prefix, e.g. ``"fpca"`` (may hold several levels).
    path : str
        The node's chain of ids from the root, e.g. ``"root/site-a/pi-01"``.
    kind : str
        One of the kinds of the module docstring, e.g. `SUBSPACE` or `STATUS_DETAIL`.

    Returns
    -------
    str
        E.g. ``"fpca/root/site-a/pi-01/subspace"``. Nothing is validated here; `Topology`
        validates the prefix and ids.
    """
    return f"{prefix}/{path}/{kind}"


def children_filter(prefix: str, path: str, kind: str = SUBSPACE) -> str:
    """The filter ``<prefix>/<path>/+/<kind>`` matching that topic of every child of a node.

    Parameters
    ----------
    prefix, path : str
        As for `node_topic`, of the parent.
    kind : str, default `SUBSPACE`
        The children's topic kind, e.g. `STATUS`.

    Returns
    -------
    str
        An MQTT topic filter with one ``+`` level (matching nothing under a leaf).
    """
    return f"{prefix}/{path}/+/{kind}"


def secagg_children_filter(prefix: str, path: str) -> str:
    """``<prefix>/<path>/+/secagg/+``: every secagg kind a child publishes (`SECAGG_LEAF_KINDS`).

    Node ids are never ``secagg`` (`RESERVED_IDS`), so it matches no topic of the node itself.
    """
    return f"{prefix}/{path}/+/{SECAGG}/+"


def secagg_delivery_kind(leaf_id: str) -> str:
    """``secagg/delivery/<leaf id>``: the kind of an aggregator's share delivery to one leaf."""
    return f"{SECAGG_DELIVERY}/{leaf_id}"


def everything_filter(prefix: str) -> str:
    """The filter ``<prefix>/#`` matching every topic of a topology (its readers' view)."""
    return f"{prefix}/#"


def config_topic(prefix: str) -> str:
    """``<prefix>/config``: the deployed topology's TOML text (retained, operator-only).

    Parameters
    ----------
    prefix : str
        The topology's topic prefix.
    """
    return f"{prefix}/{CONFIG}"


def config_node_topic(prefix: str, node_id: str) -> str:
    """``<prefix>/config/nodes/<id>``: an enrolled device's place (retained JSON, operator-only).

    Parameters
    ----------
    prefix : str
        The topology's topic prefix.
    node_id : str
        The device's node id.
    """
    return f"{prefix}/{CONFIG}/nodes/{node_id}"


def default_sensor_topic(node_id: str) -> str:
    """``sensors/<id>``: where a leaf reads its readings when the topology names no topic."""
    return f"sensors/{node_id}"


def topic_depth(prefix: str, path: str) -> int:
    """Levels of ``<prefix>/<path>``: the index, in ``topic.split("/")``, of a child's id.

    Parameters
    ----------
    prefix, path : str
        As for `node_topic`, of the parent.

    Returns
    -------
    int
        Levels of the prefix plus levels of the path, >= 2.
    """
    return len(node_topic(prefix, path, SUBSPACE).split("/")) - 1


def child_level(topic: str, depth: int) -> str:
    """The level of ``topic`` at index ``depth``: the child id in a `children_filter` match.

    Parameters
    ----------
    topic : str
        A topic received on ``children_filter(prefix, path)``.
    depth : int
        ``topic_depth(prefix, path)`` of the parent, >= 0.

    Returns
    -------
    str
        The level after ``<prefix>/<path>``, or ``""`` when ``topic`` has no level there (a
        topic that did not come through the filter; the caller rejects it as an unknown
        child). The other levels are not checked.
    """
    levels = topic.split("/")
    return levels[depth] if len(levels) > depth else ""
