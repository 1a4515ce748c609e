"""Mosquitto bridges from site brokers to a central broker, generated from the topology.

Past one broker, each *site* (an aggregator whose parent runs on the central broker) gets its
own Mosquitto: the site aggregator and the leaves below it connect there, and a bridge on the
site broker carries exactly what crosses the site boundary in the tree (QoS 1 everywhere)::

    out (site -> central)  the site's snapshot <prefix>/<site path>/subspace (the parent
                           merges it); every status and status/detail topic of the subtree
                           (dashboards, `edge-runtime watch`); every leaf's confirm topic
                           (the replay's reading confirmations)
    in  (central -> site)  the global model <prefix>/<root>/model (leaves use it); every
                           leaf's sensor topic (a replay or gateway at the centre reaches
                           the devices)

The leaves' snapshots, the bulk of the federation's traffic, stay on site: only the site
aggregator reads them. `generate_bridge` writes the Mosquitto 2.0 configuration snippet
(``mosquitto.conf(5)``, "Bridges") for the site broker; `bridge_topics` is the same list as
data, from which `edge_runtime.acl.generate_acl` grants the bridge's user on the central broker
exactly these topics (out: write, in: read) and its connection-state topic
(`notification_topic`).

Measured with Mosquitto 2.0.11: ``try_private true`` (the remote broker knows the client is a
bridge) keeps retained flags across the bridge, so the central broker keeps the site's retained
snapshot; its ``address`` option cannot hold an IPv6 literal (``[::1]`` does not resolve,
``::1:PORT`` is split at the first colon), so a host name is required for IPv6.

Stdlib only, besides the topology.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import Literal

from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.topology import Topology

__all__ = [
    "BRIDGE_QOS",
    "BRIDGE_USER_PREFIX",
    "DEFAULT_KEEPALIVE_S",
    "DEFAULT_RESTART_TIMEOUT_S",
    "BridgeError",
    "BridgeTopic",
    "bridge_topics",
    "bridge_user",
    "generate_bridge",
    "notification_topic",
]

BRIDGE_QOS = 1
"""QoS of every bridged topic: at-least-once, as the runtime publishes them."""

BRIDGE_USER_PREFIX = "bridge-"
"""The bridge of site ``X`` is user and client ``bridge-X`` on the central broker
(`bridge_user`)."""

DEFAULT_KEEPALIVE_S = 30
"""Seconds between pings on an idle uplink; a dead link is noticed within about 1.5x this."""

DEFAULT_RESTART_TIMEOUT_S = (2, 30)
"""Reconnect back-off of the bridge: jittered, from 2 up to 30 seconds."""

_MIN_KEEPALIVE_S = 5  # Mosquitto refuses a bridge keepalive_interval below 5 seconds
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_WHITESPACE = re.compile(r"\s")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class BridgeError(EdgeRuntimeError, ValueError):
    """A site that cannot be bridged, or a value that cannot go into a Mosquitto config."""


@dataclass(frozen=True)
class BridgeTopic:
    """One bridged topic: ``pattern`` (a topic or filter), ``direction``, ``kind`` and ``why``.

    ``direction`` ``"out"`` goes from the site broker to the central one, ``"in"`` the other
    way. ``kind`` is what the topic carries: ``"subspace"``, ``"status"`` (status and
    status/detail), ``"confirm"``, ``"model"`` or ``"sensor"``. ``why`` is a phrase for
    comments (the generated ACL's).
    """

    pattern: str
    direction: Literal["out", "in"]
    kind: Literal["subspace", "status", "confirm", "model", "sensor"]
    why: str


def bridge_user(site: str) -> str:
    """User name and client id on the central broker of the bridge of ``site``."""
    return f"{BRIDGE_USER_PREFIX}{site}"


def notification_topic(site: str) -> str:
    """``$SYS/broker/connection/bridge-<site>/state``: ``1`` while the bridge is up, else ``0``.

    Mosquitto's default notification topic for the client id `bridge_user` (stated in the
    generated config). The bridge publishes it retained on both brokers and leaves ``0`` as
    its Last Will on the central one, so a dashboard at the centre sees a site drop off.
    """
    return f"$SYS/broker/connection/{bridge_user(site)}/state"


def _check_site(topology: Topology, site: object) -> str:
    aggregators = [n for n in topology.aggregators() if n != topology.root]
    shown = ", ".join(aggregators[:10]) + (", ..." if len(aggregators) > 10 else "")
    choose = f"bridges are per aggregator below the root ({shown or 'none in this topology'})"
    if not isinstance(site, str) or site not in topology.nodes:
        raise BridgeError(f"site {site!r} is not a node of topology {topology.name!r}; {choose}")
    if site == topology.root:
        raise BridgeError(
            f"site {site!r} is the root of topology {topology.name!r}, which runs on the central "
            f"broker; {choose}"
        )
    if topology.is_leaf(site):
        raise BridgeError(
            f"site {site!r} is a leaf of topology {topology.name!r}, not an aggregator; {choose}"
        )
    return site


def bridge_topics(topology: Topology, site: str) -> list[BridgeTopic]:
    """The topics the bridge of ``site`` carries, out topics first, without duplicates.

    Parameters
    ----------
    topology : Topology
    site : str
        An aggregator other than the root: its subtree runs on the site broker, its parent
        on the central one.

    Returns
    -------
    list of BridgeTopic
        Out: the site's ``subspace``; ``status`` and ``status/detail`` of every node of the
        subtree (site first, then file order); ``confirm`` of every leaf below the site.
        In: the root's ``model``; every leaf's sensor topic (file order).

    Raises
    ------
    BridgeError
        If ``site`` is not a node of ``topology``, or is its root or a leaf.
    """
    _check_site(topology, site)
    nodes = topology.subtree(site)
    leaves = topology.leaves_under(site)
    topics = [
        BridgeTopic(topology.subspace_topic(site), "out", "subspace", f"{site}'s snapshot, up")
    ]
    for node in nodes:
        topics += [
            BridgeTopic(topology.status_topic(node), "out", "status", f"{node}'s status, up"),
            BridgeTopic(
                topology.status_detail_topic(node), "out", "status", f"{node}'s JSON status, up"
            ),
        ]
    topics += [
        BridgeTopic(topology.confirm_topic(leaf), "out", "confirm", f"{leaf}'s confirmations, up")
        for leaf in leaves
    ]
    topics.append(BridgeTopic(topology.model_topic(), "in", "model", "the global model, down"))
    for leaf in leaves:
        sensor = topology.nodes[leaf].sensor_topic
        assert sensor is not None  # a leaf always has one (Topology checks)
        topics.append(BridgeTopic(sensor, "in", "sensor", f"{leaf}'s sensor readings, down"))
    seen: set[str] = set()
    unique = []
    for topic in topics:
        if topic.pattern not in seen:
            seen.add(topic.pattern)
            unique.append(topic)
    return unique


def _word(value: object, what: str) -> str:
    """A value written as one word (no whitespace, no control character)."""
    if not isinstance(value, str) or not value or _WHITESPACE.search(value):
        raise BridgeError(f"{what} {value!r} must be a non-empty string without whitespace")
    if _CONTROL.search(value):
        raise BridgeError(f"{what} {value!r} contains a control character")
    return value


def _path(value: str | os.PathLike[str] | None, what: str) -> str | None:
    """A file path on the site broker's machine: absolute, on one line."""
    if value is None:
        return None
    text = os.fspath(value)
    if _CONTROL.search(text) or text != text.strip():
        raise BridgeError(f"{what} {text!r} contains a line break or surrounding whitespace")
    if not PurePath(text).is_absolute():
        raise BridgeError(
            f"{what} {text!r} must be an absolute path (the site broker's Mosquitto reads it, "
            "from its own working directory)"
        )
    return text


def _check_options(
    central_host: str,
    central_port: int,
    keepalive_s: int,
    restart_timeout_s: tuple[int, int],
) -> None:
    _word(central_host, "central host")
    if ":" in central_host:
        raise BridgeError(
            f"central host {central_host!r}: Mosquitto's bridge address cannot hold an IPv6 "
            "literal; use a host name that resolves to it"
        )
    if isinstance(central_port, bool) or not isinstance(central_port, int):
        raise BridgeError(f"central port must be an integer, got {central_port!r}")
    if not 1 <= central_port <= 65535:
        raise BridgeError(f"central port {central_port} is not in 1-65535")
    if (
        isinstance(keepalive_s, bool)
        or not isinstance(keepalive_s, int)
        or keepalive_s < _MIN_KEEPALIVE_S
    ):
        raise BridgeError(
            f"keepalive_s must be an integer >= {_MIN_KEEPALIVE_S} seconds, got {keepalive_s!r}"
        )
    ok = (
        isinstance(restart_timeout_s, tuple)
        and len(restart_timeout_s) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in restart_timeout_s)
        and 1 <= restart_timeout_s[0] <= restart_timeout_s[1]
    )
    if not ok:
        raise BridgeError(
            "restart_timeout_s must be two integers (base, cap) with 1 <= base <= cap seconds, "
            f"got {restart_timeout_s!r}"
        )


def generate_bridge(
    topology: Topology,
    site: str,
    *,
    central_host: str,
    central_port: int = 1883,
    name: str | None = None,
    ca_file: str | os.PathLike[str] | None = None,
    cert_file: str | os.PathLike[str] | None = None,
    key_file: str | os.PathLike[str] | None = None,
    username: str | None = None,
    password: str | None = None,
    keepalive_s: int = DEFAULT_KEEPALIVE_S,
    restart_timeout_s: tuple[int, int] = DEFAULT_RESTART_TIMEOUT_S,
) -> str:
    """The Mosquitto 2.0 bridge section, for the site broker of ``site``, to the central one.

    One ``connection`` with: MQTT 3.1.1 and ``try_private true`` (retained flags and loop
    detection across the bridge); ``remote_clientid bridge-<site>`` (`bridge_user`, stable,
    so the central broker keeps the bridge's session); persistent sessions on both sides
    (``cleansession false``, ``local_cleansession false``: QoS 1 messages wait in the queue
    of the broker on the far side of a broken link); connection-state notifications on both
    brokers (`notification_topic`); a keepalive and a reconnect back-off; optional TLS and
    credentials; then one ``topic <pattern> <out|in> 1`` line per `bridge_topics` entry,
    each group preceded by a comment. Deterministic (no time stamp).

    Parameters
    ----------
    topology : Topology
    site : str
        An aggregator other than the root whose parent runs on the central broker; its
        subtree (itself and every node below) runs on the site broker.
    central_host : str
        Host name or IPv4 address of the central broker, as the site broker reaches it (with
        TLS, a name in the central certificate's subject alternative names).
    central_port : int, default 1883
        TCP port of the central broker's listener, 1-65535 (8883 for TLS, usually).
    name : str, optional
        Name of the ``connection`` (log lines; letters, digits, ``.``, ``_``, ``-``); default
        ``<site>-to-central``.
    ca_file : path, optional
        Absolute path, on the site broker's machine, of the CA certificate that issued the
        central broker's certificate. Given: TLS 1.2 or later, host name verified
        (``bridge_insecure false``). Not read here.
    cert_file, key_file : path, optional
        Absolute paths of the bridge's client certificate and private key, both or neither;
        need ``ca_file``.
    username : str, optional
        The bridge's user name on the central broker (``remote_username``);
        ``edge-runtime acl --bridge SITE`` names it ``bridge-<site>``.
    password : str, optional
        Its password (``remote_password``); needs ``username``. It is written into the text:
        keep the file readable by root and the ``mosquitto`` group only.
    keepalive_s : int, default 30
        Seconds between pings on an idle uplink, >= 5.
    restart_timeout_s : tuple of int (base, cap), default (2, 30)
        Reconnect back-off in seconds (Mosquitto's jittered back-off), ``1 <= base <= cap``.

    Returns
    -------
    str
        The configuration text, ending in a newline: a file of the site broker's
        ``conf.d`` (``broker_config/README.md``, "Bridges").

    Raises
    ------
    BridgeError
        If ``site`` is not a node of ``topology``, or is its root or a leaf (only aggregators
        below the root are sites); if a value cannot be written into a Mosquitto config
        (whitespace in a name or topic, a relative or multi-line path, a password with a line
        break or surrounding whitespace), ``central_host`` is an IPv6 literal, the port,
        keepalive or back-off is out of range, a password comes without a user name, one of
        ``cert_file`` / ``key_file`` without the other, or either without ``ca_file``.

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
    ... id = "site-a"
    ... parent = "root"
    ... [[nodes]]
    ... id = "pi-01"
    ... parent = "site-a"
    ... ''')
    >>> text = generate_bridge(topology, "site-a", central_host="central.example.org")
    >>> print("\\n".join(line for line in text.splitlines() if line.startswith("topic")))
    topic fpca/root/site-a/subspace out 1
    topic fpca/root/site-a/status out 1
    topic fpca/root/site-a/status/detail out 1
    topic fpca/root/site-a/pi-01/status out 1
    topic fpca/root/site-a/pi-01/status/detail out 1
    topic fpca/root/site-a/pi-01/confirm out 1
    topic fpca/root/model in 1
    topic sensors/pi-01 in 1
    """
    topics = bridge_topics(topology, site)
    _check_options(central_host, central_port, keepalive_s, restart_timeout_s)
    name = _word(f"{site}-to-central" if name is None else name, "bridge name")
    if not _NAME.fullmatch(name):
        raise BridgeError(
            f"bridge name {name!r} may hold only letters, digits, '.', '_' and '-' "
            "(and must start with a letter or digit)"
        )
    ca = _path(ca_file, "CA file")
    cert = _path(cert_file, "certificate file")
    key = _path(key_file, "key file")
    if (cert is None) != (key is None):
        raise BridgeError("give both a certificate file and a key file, or neither")
    if cert is not None and ca is None:
        raise BridgeError("a client certificate needs TLS: give the central broker's CA file too")
    if username is not None:
        _word(username, "user name")
        if ":" in username:
            raise BridgeError(f"user name {username!r} contains ':', which no password file holds")
    if password is not None:
        if username is None:
            raise BridgeError("a password needs a user name (remote_username)")
        if not isinstance(password, str) or not password or password != password.strip():
            raise BridgeError("the password must be non-empty, without surrounding whitespace")
        if _CONTROL.search(password):
            raise BridgeError("the password contains a line break or another control character")
    for topic in topics:
        if _WHITESPACE.search(topic.pattern):
            raise BridgeError(
                f"topic {topic.pattern!r} ({topic.why}) contains whitespace, which a Mosquitto "
                "topic line cannot hold"
            )

    client_id = bridge_user(site)
    source = f" ({topology.source_path.name}) " if topology.source_path is not None else ""
    lines = [
        f"# Mosquitto bridge generated by `edge-runtime bridge` from topology {topology.name!r}",
        f"#{source or ' '}for the site broker of {site} ({topology.path(site)}).",
        "# Regenerate it whenever the topology changes; do not edit it by hand.",
        '# Install it on the SITE broker, in conf.d (broker_config/README.md, "Bridges").',
        f"# On the central broker, the ACL of `edge-runtime acl TOPOLOGY --bridge {site}`",
        f"# lets user {client_id} write exactly the 'out' topics below and read the 'in' ones.",
        "# Mosquitto treats '#' as a comment only as the first character of a line.",
        "",
        "# Starts the bridge; the name appears in the site broker's log.",
        f"connection {name}",
        "",
        "# The central broker.",
        f"address {central_host}:{central_port}",
        "",
        "# MQTT 3.1.1 with Mosquitto's bridge extension: the central broker knows this is a",
        "# bridge, so retained flags are kept (retained snapshots arrive retained) and loops",
        "# are detected. Set try_private false only if the central broker is not Mosquitto",
        "# and refuses the connection.",
        "bridge_protocol_version mqttv311",
        "try_private true",
        "",
        "# Stable client id on the central broker (with use_username_as_clientid true there,",
        "# the user name wins: name the user the same).",
        f"remote_clientid {client_id}",
        "",
        "# Persistent sessions on both sides: QoS 1 messages for the far side of a broken link",
        "# wait in the queue (max_queued_messages) until it returns.",
        "cleansession false",
        "local_cleansession false",
        "",
        "# The bridge's own state, 1 (up) or 0 (down), retained on both brokers; on the",
        "# central one, 0 is also its Last Will, so a dashboard there sees the site drop off.",
        "notifications true",
        "notifications_local_only false",
        f"notification_topic {notification_topic(site)}",
        "",
        "# Seconds between pings on an idle link; reconnect with a jittered back-off between",
        "# the two values, in seconds. Bring the bridge up at start and keep it up.",
        f"keepalive_interval {keepalive_s}",
        f"restart_timeout {restart_timeout_s[0]} {restart_timeout_s[1]}",
        "start_type automatic",
    ]
    if username is not None:
        lines += [
            "",
            "# Credentials on the central broker: a user of its password_file.",
            f"remote_username {username}",
        ]
        if password is not None:
            lines += [
                "# Mosquitto reads the password only from here: keep this file readable by",
                "# root and the mosquitto group only (chmod 640, chgrp mosquitto).",
                f"remote_password {password}",
            ]
    if ca is not None:
        lines += [
            "",
            "# TLS: the CA of the central broker's certificate; its host name is verified.",
            f"bridge_cafile {ca}",
            "bridge_insecure false",
            "bridge_tls_version tlsv1.2",
        ]
        if cert is not None:
            lines += [
                "# The bridge's own certificate and key (require_certificate on the central side).",
                f"bridge_certfile {cert}",
                f"bridge_keyfile {key}",
            ]
    lines += ["", "# --- Topics: pattern, direction, QoS (the tree decides what crosses) ---"]
    groups = [
        ("out", "subspace", f"Up: {site}'s cumulative snapshot, which its parent merges."),
        ("out", "status", "Up: online/offline and JSON status of every node of the subtree."),
        ("out", "confirm", "Up: each leaf's reading confirmations (the replay waits for them)."),
        ("in", "model", "Down: the root's global model, for leaves that use it."),
        ("in", "sensor", "Down: each leaf's sensor readings, from a replay or gateway centrally."),
    ]
    for direction, kind, comment in groups:
        chosen = [t for t in topics if t.kind == kind and t.direction == direction]
        if chosen:
            lines += ["", f"# {comment}"]
            lines += [f"topic {t.pattern} {t.direction} {BRIDGE_QOS}" for t in chosen]
    lines += [
        "",
        "# Everything else stays on site, above all the leaves' snapshots (the bulk of the",
        "# traffic): only the site aggregator reads them.",
    ]
    return "\n".join(lines) + "\n"
