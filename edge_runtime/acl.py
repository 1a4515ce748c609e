"""Mosquitto access control list generated from a topology: each device writes only its topics.

`generate_acl` turns a `Topology` into the text of a Mosquitto ``acl_file``
(``mosquitto.conf(5)``, "acl_file"): one ``user <node id>`` section per node, granting exactly
what that node's agent does, and nothing else::

    leaf        readwrite  its sensor topic         (readings in; a sensor process on the
                                                    device may publish them too)
                readwrite  its subspace topic       (publishes it; reads it back: the echo that
                                                    proves delivery, and restoring after a
                                                    restart)
                write      its status, status/detail (online/offline and Last Will; JSON)
                write      its confirm topic        (reading confirmations, JSON)
                read       the model topic          (the global estimate)
                write      its scores topic         (only when its ``score`` is not "off")
    every node  read       <prefix>/config          (the deployed topology, `edge-runtime
                                                    deploy`; agents follow it)
                read       <prefix>/config/nodes/<id>  (its entry, written by ``enroll``)
    aggregator  read       <path>/+/subspace        (the children filter it subscribes to)
                read       <path>/+/status, <path>/+/status/detail (its children's liveness)
                readwrite  its subspace topic; write its status, status/detail
                read       the model topic; the root may also write it
    secagg leaf write      its secagg/keys, secagg/shares, secagg/masked, secagg/unmasked
                read       its parent's secagg/roster, secagg/unmask, secagg/outcome and
                           secagg/delivery/<its id> (no other leaf's delivery)
    secagg site read       <path>/<leaf>/secagg/+ of each of its secagg leaves
                write      its secagg/roster, secagg/delivery/+, secagg/unmask;
                           readwrite its secagg/outcome (read back on restart)

Optional extra users: an *operator* (``operator=``) that writes the configuration topics
``<prefix>/config`` and ``<prefix>/config/nodes/+`` (``edge-runtime deploy``), which no node
may write; a *replay* / sensor-gateway user (default ``"replay"``) that writes every
leaf's sensor topic and reads the leaves' status (to wait until they are online) and confirm
topics (to learn which readings are durable); *bridges* (``bridge-<node id>``,
`edge_runtime.bridge`) that connect a site broker to this one: write the bridge's ``out`` topics
(the site's snapshot, the subtree's status, the leaves' confirmations) and its connection state,
read its ``in`` topics (the model, the leaves' sensor topics); *readers* (a dashboard,
``edge-runtime watch``) that read everything under ``<prefix>/#`` (confirmations included) and,
when there are bridges, their connection state, and write nothing; they are denied
(``topic deny``, checked before the grants) every secure-aggregation leaf's shares, masked
input and unmask response and every share delivery: only the site's aggregator reads those.

With ``homeassistant`` (a discovery prefix ``P``, `edge_runtime.homeassistant`) every node may
also write exactly its own discovery config topics (``P/<component>/<unique id>/config``, which
``edge-runtime agent --homeassistant`` publishes retained, and ``--homeassistant-remove``
clears) and read ``P/status`` (Home Assistant's birth message, which asks for them again).

The user names must be the names in Mosquitto's ``password_file``; with
``use_username_as_clientid true`` (``broker_config/secured.conf``) the user name is also the MQTT
client id, so one device cannot take over another's session. Every topic not granted is denied:
a leaf's publish to another leaf's topic is dropped by the broker (MQTT 3.1.1: silently, the
publisher still gets its PUBACK; MQTT 5: PUBACK reason code 135, "not authorized", which aiomqtt
2.5 discards). Mosquitto 2.0's ``acl_file`` does not check SUBSCRIBE (every subscription is
granted) but checks read access on every message it delivers, retained ones included, and write
access on a Last Will when it is sent. ``broker_config/SECURITY.md`` has the whole set-up.

Several deployments on one broker: their ACLs concatenate (Mosquitto merges the sections of a
user named twice, such as the replay user or a reader); `check_shared_broker` refuses what
cannot be shared (a node id in two topologies, one model topic, one sensor topic).

Stdlib only, besides the topology and `edge_runtime.bridge` (the bridges' topics).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from edge_runtime.bridge import (
    BRIDGE_USER_PREFIX,
    BridgeError,
    bridge_topics,
    bridge_user,
    notification_topic,
)
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.homeassistant import discovery_messages
from edge_runtime.topology import Topology, topics
from edge_runtime.topology.topics import (
    SECAGG,
    SECAGG_KEYS,
    SECAGG_LEAF_KINDS,
    SECAGG_MASKED,
    SECAGG_OUTCOME,
    SECAGG_ROSTER,
    SECAGG_SHARES,
    SECAGG_UNMASK,
    SECAGG_UNMASKED,
    STATUS,
    STATUS_DETAIL,
    children_filter,
    config_node_topic,
    config_topic,
    everything_filter,
    secagg_delivery_kind,
)

__all__ = [
    "BRIDGE_USER_PREFIX",
    "DEFAULT_REPLAY_USER",
    "AclError",
    "bridge_user",
    "check_shared_broker",
    "generate_acl",
]

DEFAULT_REPLAY_USER = "replay"
"""User name of the replay / sensor gateway in the generated ACL."""

# Characters Mosquitto's password and ACL files cannot carry in a user name or topic: the
# files are split at whitespace, and ':' separates the user name from the hash in a
# password_file.
_BAD_USER = re.compile(r"[\s:]")
_BAD_TOPIC = re.compile(r"\s")
# Every bridge's connection state (`edge_runtime.bridge.notification_topic`).
_BRIDGE_STATES = "$SYS/broker/connection/+/state"


class AclError(EdgeRuntimeError, ValueError):
    """A user name or topic that cannot be written into a Mosquitto ACL or password file."""


def _check_user(user: str, what: str) -> str:
    if not isinstance(user, str) or not user:
        raise AclError(f"{what} must be a non-empty string, got {user!r}")
    if _BAD_USER.search(user):
        raise AclError(
            f"{what} {user!r} contains whitespace or ':', which Mosquitto's password and ACL "
            "files cannot hold"
        )
    return user


def _check_topic(topic: str, owner: str) -> str:
    if _BAD_TOPIC.search(topic):
        raise AclError(
            f"topic {topic!r} of {owner!r} contains whitespace, which a Mosquitto ACL line "
            "cannot hold; choose a prefix and sensor topics without spaces"
        )
    return topic


class _Section:
    """One ``user`` section: lines of ``# comment`` and ``topic <access> <topic>``."""

    def __init__(self, user: str, title: str) -> None:
        self.lines = [f"# {title}", f"user {user}"]
        self.user = user

    def topic(self, access: str, topic: str, why: str) -> None:
        self.lines.append(f"# {why}")
        self.lines.append(f"topic {access} {_check_topic(topic, self.user)}")


def generate_acl(
    topology: Topology,
    *,
    readers: Sequence[str] = (),
    replay: str | None = DEFAULT_REPLAY_USER,
    bridges: Sequence[str] = (),
    homeassistant: str | None = None,
    operator: str | None = None,
) -> str:
    """The text of a Mosquitto ``acl_file`` that lets each node use only its own topics.

    One ``user <node id>`` section per node, in the topology's file order, then the replay
    user's section (unless ``replay`` is None), one per bridge, then one per reader. Each
    ``topic`` line is preceded by a comment saying why the user needs it. The output is
    deterministic (no time stamp), so it can be diffed and kept under version control.

    Parameters
    ----------
    topology : Topology
        The aggregation tree; user names are its node ids.
    readers : sequence of str, default ()
        Extra users (dashboards, ``edge-runtime watch``) with read access to
        ``<prefix>/#`` and no write access.
    replay : str or None, default ``"replay"``
        User name of the replay / sensor gateway, which writes every leaf's sensor topic and
        reads the leaves' status and confirm topics; None leaves it out.
    bridges : sequence of str, default ()
        Ids of the aggregators (not the root) whose subtree lives behind a site broker bridged
        into this one (`edge_runtime.bridge.generate_bridge`). Each gets a user ``bridge-<id>``
        (`bridge_user`) that may write the bridge's ``out`` topics and read its ``in`` topics
        (`edge_runtime.bridge.bridge_topics`), and write its connection state
        (`edge_runtime.bridge.notification_topic`); readers may then read every bridge's
        connection state. The bridge's local side, on the site broker, is not subject to that
        broker's ACL (Mosquitto 2.0), so the site needs no such section.
    homeassistant : str or None, default None
        Home Assistant's discovery prefix: each node may then write its own discovery config
        topics (`edge_runtime.homeassistant.discovery_messages` with ``node_ids=[node]``)
        and read ``<homeassistant>/status``; None grants nothing of Home Assistant's.
    operator : str or None, default None
        User name of the operator, who alone may write the configuration topics
        (``<prefix>/config``: ``edge-runtime deploy``; ``<prefix>/config/nodes/+``); None
        leaves the user out (nobody may write them).

    Returns
    -------
    str
        The ACL, ending in a newline. Install it as the ``acl_file`` of
        ``broker_config/secured.conf`` (``/etc/mosquitto/acl``).

    Raises
    ------
    AclError
        If a user name contains whitespace or ``:``, a topic contains whitespace (neither can be
        written to Mosquitto's files), a user name is used twice (a reader or the replay user
        named like a node, or like each other), or a bridge names the root, a leaf or an
        unknown node.

    Examples
    --------
    >>> from edge_runtime.topology import parse_topology
    >>> topology = parse_topology('''
    ... name = "tiny"
    ... [defaults]
    ... rank = 2
    ... [[nodes]]
    ... id = "root"
    ... [[nodes]]
    ... id = "pi-01"
    ... parent = "root"
    ... ''')
    >>> header, root, leaf = generate_acl(topology, replay=None).split("\\n\\n")
    >>> print(leaf, end="")
    # leaf pi-01 (root/pi-01)
    user pi-01
    # its sensor readings (a sensor process on the device may publish them too)
    topic readwrite sensors/pi-01
    # its own snapshot: publishes it (retained); reads it back to restore after a restart
    topic readwrite fpca/root/pi-01/subspace
    # its online/offline status, and its Last Will (checked when the broker sends it)
    topic write fpca/root/pi-01/status
    # its JSON status document
    topic write fpca/root/pi-01/status/detail
    # its reading confirmations (the replay keeps each reading until it is durable)
    topic write fpca/root/pi-01/confirm
    # the global estimate, published by the root
    topic read fpca/root/model
    # the deployed topology (edge-runtime deploy): the agent applies its changes
    topic read fpca/config
    # its entry in the deployed topology (parent, sensor topic)
    topic read fpca/config/nodes/pi-01
    """
    prefix = _check_topic(topology.prefix, "the topology prefix")
    users: dict[str, str] = {}

    def claim(user: str, what: str) -> None:
        _check_user(user, what)
        if user in users:
            raise AclError(f"user name {user!r} is used twice ({users[user]} and {what})")
        users[user] = what

    sections: list[_Section] = []
    for node_id in topology.nodes:
        claim(node_id, f"node {node_id!r}")
        section = _node_section(topology, node_id)
        if homeassistant is not None:
            for topic, _ in discovery_messages(
                topology, discovery_prefix=homeassistant, node_ids=[node_id]
            ):
                section.topic("write", topic, "a Home Assistant discovery config (retained)")
            section.topic(
                "read", f"{homeassistant}/status", "Home Assistant's birth message ('online')"
            )
        sections.append(section)

    if operator is not None:
        claim(operator, "the operator")
        section = _Section(operator, f"operator {operator}: the deployed configuration")
        section.topic("readwrite", config_topic(prefix), "the deployed topology (deploy)")
        section.topic("readwrite", config_node_topic(prefix, "+"), "every device's entry (enroll)")
        sections.append(section)

    if replay is not None:
        claim(replay, "the replay user")
        section = _Section(replay, f"replay / sensor gateway {replay}: readings in, nothing else")
        for leaf in topology.leaves():
            sensor = topology.nodes[leaf].sensor_topic
            assert sensor is not None  # a leaf always has one (Topology checks)
            section.topic("write", sensor, f"readings for leaf {leaf}")
            section.topic(
                "read",
                topology.status_topic(leaf),
                f"whether {leaf} is online (the replay waits for it)",
            )
            section.topic(
                "read",
                topology.confirm_topic(leaf),
                f"which readings {leaf} has made durable (only lost ones are re-sent)",
            )
            section.topic(
                "read",
                topology.status_detail_topic(leaf),
                f"which readings {leaf} rejected (the replay's summary and exit code)",
            )
        sections.append(section)

    for node_id in bridges:
        try:
            topics = bridge_topics(topology, node_id)
        except BridgeError as exc:
            raise AclError(f"bridge: {exc}") from None
        user = bridge_user(node_id)
        claim(user, f"the bridge of {node_id!r}")
        section = _Section(
            user, f"bridge {user}: the site broker of {node_id} ({topology.path(node_id)})"
        )
        for topic in topics:
            access = "write" if topic.direction == "out" else "read"
            section.topic(access, topic.pattern, topic.why)
        section.topic(
            "write", notification_topic(node_id), "the bridge's connection state (1 up, 0 down)"
        )
        sections.append(section)

    for reader in readers:
        claim(reader, f"reader {reader!r}")
        section = _Section(reader, f"reader {reader}: dashboards and monitors, read-only")
        section.topic(
            "read",
            everything_filter(prefix),
            "every snapshot, status, confirmation and the model; no writes",
        )
        for topic in _secagg_denied(topology):
            section.topic("deny", topic, "secure aggregation: for the site's aggregator only")
        if bridges:
            section.topic(
                "read", _BRIDGE_STATES, "whether each site's bridge is up (1) or down (0)"
            )
        sections.append(section)

    source = f" ({topology.source_path.name})" if topology.source_path is not None else ""
    header = [
        "# Mosquitto acl_file generated by `edge-runtime acl` from topology "
        f"{topology.name!r}{source}.",
        "# Regenerate it whenever the topology changes; do not edit it by hand.",
        "#",
        "# One section per MQTT user; user names are node ids (and, with",
        "# use_username_as_clientid true, client ids too). Each 'topic ACCESS TOPIC' line",
        "# grants read, write or readwrite on a topic or filter; everything else is denied.",
        "# Lines before the first 'user' line would apply to anonymous clients: there are",
        "# none, and broker_config/secured.conf refuses anonymous clients anyway.",
    ]
    body = ["\n".join(section.lines) for section in sections]
    return "\n".join(header) + "\n\n" + "\n\n".join(body) + "\n"


def _node_section(topology: Topology, node_id: str) -> _Section:
    """The ``user <node id>`` section: what the node's agent reads and writes."""
    prefix = topology.prefix
    model = topology.model_topic()
    if topology.is_leaf(node_id):
        section = _Section(node_id, f"leaf {node_id} ({topology.path(node_id)})")
        sensor = topology.nodes[node_id].sensor_topic
        assert sensor is not None  # a leaf always has one (Topology checks)
        section.topic(
            "readwrite",
            sensor,
            "its sensor readings (a sensor process on the device may publish them too)",
        )
    else:
        role = "root aggregator" if node_id == topology.root else "aggregator"
        section = _Section(node_id, f"{role} {node_id} ({topology.path(node_id)})")
        section.topic(
            "read",
            topology.children_filter(node_id),
            "its children's snapshots: the filter it subscribes to",
        )
        children_status = children_filter(prefix, topology.path(node_id), STATUS)
        section.topic("read", children_status, "its children's online/offline status")
        children_detail = children_filter(prefix, topology.path(node_id), STATUS_DETAIL)
        section.topic("read", children_detail, "its children's JSON status documents")
    section.topic(
        "readwrite",
        topology.subspace_topic(node_id),
        "its own snapshot: publishes it (retained); reads it back to restore after a restart",
    )
    section.topic(
        "write",
        topology.status_topic(node_id),
        "its online/offline status, and its Last Will (checked when the broker sends it)",
    )
    section.topic("write", topology.status_detail_topic(node_id), "its JSON status document")
    if topology.is_leaf(node_id):
        section.topic(
            "write",
            topology.confirm_topic(node_id),
            "its reading confirmations (the replay keeps each reading until it is durable)",
        )
    if node_id == topology.root:
        section.topic("readwrite", model, "the global estimate: the root publishes it")
    else:
        section.topic("read", model, "the global estimate, published by the root")
    _secagg_topics(topology, node_id, section)
    if topology.is_leaf(node_id) and topology.nodes[node_id].score != "off":
        section.topic(
            "write", topology.scores_topic(node_id), "its anomaly scores (JSON, not retained)"
        )
    section.topic(
        "read",
        topology.config_topic(),
        "the deployed topology (edge-runtime deploy): the agent applies its changes",
    )
    section.topic(
        "read",
        topology.config_node_topic(node_id),
        "its entry in the deployed topology (parent, sensor topic)",
    )
    return section


def _secagg_topics(topology: Topology, node_id: str, section: _Section) -> None:
    """A secure-aggregation site's topics (`edge_runtime.topology.topics`): a secagg
    leaf writes its four kinds and reads its parent's roster, unmask request, outcome and its
    own share delivery only; the site reads each of its secagg leaves' kinds and writes its
    own. Nobody else is granted any of them (readers are denied the private ones)."""
    parent = topology.nodes[node_id].parent
    if parent is not None and node_id in topology.secagg_leaves(parent):
        for kind, why in (
            (SECAGG_KEYS, "its public keys for the next slot (retained)"),
            (SECAGG_SHARES, "its encrypted shares, for its aggregator only"),
            (SECAGG_MASKED, "its masked input, for its aggregator only"),
            (SECAGG_UNMASKED, "its unmask response, for its aggregator only"),
        ):
            section.topic("write", topology.secagg_topic(node_id, kind), why)
        for kind, why in (
            (SECAGG_ROSTER, "its aggregator's key roster (retained)"),
            (SECAGG_UNMASK, "its aggregator's unmask request"),
            (SECAGG_OUTCOME, "its aggregator's slot outcome (retained)"),
            (secagg_delivery_kind(node_id), "the shares sent to it, and to nobody else"),
        ):
            section.topic("read", topology.secagg_topic(parent, kind), why)
    site = topology.secagg_leaves(node_id)
    for leaf in site:
        section.topic(
            "read",
            topics.node_topic(topology.prefix, topology.path(leaf), f"{SECAGG}/+"),
            f"secagg leaf {leaf}'s keys, shares, masked input and unmask response",
        )
    if site:
        for kind, why in (
            (SECAGG_ROSTER, "its key roster (retained)"),
            (secagg_delivery_kind("+"), "its share delivery to each secagg leaf"),
            (SECAGG_UNMASK, "its unmask requests"),
            (SECAGG_OUTCOME, "its slot outcomes (retained; read back to resume after them)"),
        ):
            access = "readwrite" if kind == SECAGG_OUTCOME else "write"
            section.topic(access, topology.secagg_topic(node_id, kind), why)


def _secagg_denied(topology: Topology) -> list[str]:
    """The secure-aggregation topics only a site's aggregator or one leaf may read: every
    leaf's shares, masked input and unmask response, every share delivery."""
    denied = []
    for site in topology.aggregators():
        for leaf in topology.secagg_leaves(site):
            denied += [topology.secagg_topic(leaf, k) for k in SECAGG_LEAF_KINDS[1:]]
        if topology.secagg_leaves(site):
            denied.append(topology.secagg_topic(site, secagg_delivery_kind("+")))
    return denied


def check_shared_broker(
    topologies: Sequence[Topology],
    *,
    readers: Sequence[str] = (),
    replay: str | None = DEFAULT_REPLAY_USER,
    bridges: Sequence[str] = (),
) -> None:
    """Check that several deployments can share one broker, their ACLs concatenated.

    Mosquitto merges the sections of a user name that appears more than once in an
    ``acl_file`` (measured with Mosquitto 2.0.11: ``tests/test_cli.py``), so the ACLs of two
    topologies, each from `generate_acl`, may simply be concatenated; the replay user and the
    readers then get the topics of both. What cannot be shared is a node id: the user name
    of a node is its id, so two nodes with one id would log in as one user, each with the
    other's topics, and with ``use_username_as_clientid`` take each other's connection over.

    Parameters
    ----------
    topologies : sequence of Topology
        The deployments of the broker.
    readers, replay, bridges
        As for `generate_acl` (the same for every topology).

    Raises
    ------
    AclError
        If a node id is in two topologies, or is the replay user, a reader or a bridge user
        of another; if two topologies have the same model topic (prefix and root: their
        topics would mix); or if two leaves of different topologies read one sensor topic.
    """
    shared = {*readers, *(() if replay is None else (replay,))}
    owner: dict[str, str] = {}
    models: dict[str, str] = {}
    sensors: dict[str, str] = {}
    for topology in topologies:
        users = set(topology.nodes)
        users |= {bridge_user(node) for node in bridges if node in topology.nodes}
        for user in sorted(users):
            if user in owner:
                raise AclError(
                    f"node id {user!r} is in topology {owner[user]!r} and in {topology.name!r}: "
                    "user names are node ids, so one broker needs each id once; rename one"
                )
            if user in shared:
                raise AclError(
                    f"node id {user!r} of topology {topology.name!r} is also the replay user or "
                    "a reader: rename one"
                )
            owner[user] = topology.name
        model = topology.model_topic()
        if model in models:
            raise AclError(
                f"topologies {models[model]!r} and {topology.name!r} share the model topic "
                f"{model!r}: give each deployment its own prefix"
            )
        models[model] = topology.name
        for leaf in topology.leaves():
            sensor = str(topology.nodes[leaf].sensor_topic)
            if sensor in sensors:
                raise AclError(
                    f"sensor topic {sensor!r} is read by {sensors[sensor]} and by leaf {leaf!r} "
                    f"of {topology.name!r}: two deployments must not share sensor topics"
                )
            sensors[sensor] = f"leaf {leaf!r} of {topology.name!r}"
