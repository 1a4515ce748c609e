"""The commands that change a running fleet through the broker's dynamic security plugin:
``enroll`` (a device's client and role, no restart) and ``retire`` (disable it, clear its
retained topics).

A device is a leaf whose MQTT user name is its node id. `enroll` creates, through
`edge_runtime.broker.DynsecClient`, a role ``edge-device-<node id>`` (`device_role`) whose
ACLs (`DeviceTopics.acls`) let the device do exactly what a leaf's agent does, nothing of any
other device::

    publish               its sensor topic (a sensor process on the device may publish
                          readings), and <prefix>/<parent path>/<node>/subspace, status,
                          status/detail, confirm, scores
    subscribe, receive    its sensor topic, its own subspace (restore, and the echo that
                          proves delivery), the model <prefix>/<root>/model, the deployed
                          topology <prefix>/config and its entry <prefix>/config/nodes/<node>
    receive anything else denied (lowest priority), whatever another role may grant

and a client ``<node id>`` with that role and a random password (``secrets``), printed or
written once; then it publishes, retained, the device's entry ``{"parent": ...,
"sensor_topic": ...}`` on ``<prefix>/config/nodes/<node>`` (`edge_runtime.topology.deployed`),
so that an agent started without a topology file finds its place in the deployed one
(``edge-runtime deploy``). The node need not be in the topology file: its path is its
parent's path and its id. `retire` disables the client (the plugin disconnects it at once,
without its Last Will, and refuses its logins) and clears its retained status, status
document, confirmations, scores and entry with empty retained messages; ``--forget`` also
clears its snapshot, so that its parent drops it. The static ACL (``edge-runtime acl``) stays the
option for fixed fleets.

The operator logs in with the usual flags or environment (`edge_runtime.cli.inputs`): a
dynamic security admin (``mosquitto_ctrl dynsec init``) whose role may also publish and read
the deployment's topics, which `retire` needs to clear them (``broker_config/README.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiomqtt

from edge_runtime.broker import Acl, DynsecClient, DynsecError
from edge_runtime.cli import EXIT_FAILED, EXIT_OK, CliError
from edge_runtime.cli.deploy import publish_checked
from edge_runtime.cli.inputs import broker_settings, login_refused
from edge_runtime.settings import ENV_PASSWORD, ENV_PASSWORD_FILE, ENV_USERNAME, AgentSettings
from edge_runtime.topology import Topology, load_topology
from edge_runtime.topology.checks import check_node_id, topic_filter_problem
from edge_runtime.topology.deployed import NodeEntry
from edge_runtime.topology.topics import (
    CONFIRM,
    SCORES,
    STATUS,
    STATUS_DETAIL,
    SUBSPACE,
    config_node_topic,
    config_topic,
    default_sensor_topic,
    node_topic,
)

__all__ = [
    "DEVICE_ROLE_PREFIX",
    "PASSWORD_BYTES",
    "DeviceTopics",
    "cmd_enroll",
    "cmd_retire",
    "device_role",
    "device_topics",
    "refusing_parent",
]

DEVICE_ROLE_PREFIX = "edge-device-"
"""Prefix of the role `enroll` creates for a device: ``edge-device-<node id>``."""

PASSWORD_BYTES = 24
"""Random bytes of a device's password (``secrets.token_urlsafe``: 32 characters)."""

_ADD_OPERATOR_ACL = (
    "e.g. mosquitto_ctrl -u admin dynsec addRoleACL admin publishClientSend '{prefix}/#' allow"
)


@dataclass(frozen=True)
class DeviceTopics:
    """The topics of one device (a leaf), as its role grants them.

    Parameters
    ----------
    node : str
        Node id, also the MQTT user name.
    path : str
        Chain of ids from the root, e.g. ``"root/site-a/pi-09"``.
    prefix : str
        The topology's topic prefix.
    sensor : str
        Its sensor topic (a filter allowed, as in the topology).
    model : str
        The root's model topic.
    """

    node: str
    path: str
    prefix: str
    sensor: str
    model: str

    def topic(self, kind: str) -> str:
        """``<prefix>/<path>/<kind>`` (`edge_runtime.topology.topics.node_topic`)."""
        return node_topic(self.prefix, self.path, kind)

    @property
    def published(self) -> list[str]:
        """What the device publishes under its path: subspace, status, status/detail,
        confirm, scores."""
        return [self.topic(kind) for kind in (SUBSPACE, STATUS, STATUS_DETAIL, CONFIRM, SCORES)]

    def acls(self) -> list[Acl]:
        """The ACLs of its role (see the module docstring): allowed at priority 0, anything
        else it might receive denied at priority -1."""
        acls = [Acl("publishClientSend", topic) for topic in [self.sensor, *self.published]]
        config = [config_topic(self.prefix), config_node_topic(self.prefix, self.node)]
        for topic in (self.sensor, self.topic(SUBSPACE), self.model, *config):
            acls.append(Acl("subscribeLiteral", topic))
            acls.append(Acl("publishClientReceive", topic))
        acls.append(Acl("publishClientReceive", "#", allow=False, priority=-1))
        return acls

    def to_clear(self, forget: bool) -> list[str]:
        """The topics `retire` clears: status, status/detail, confirm, scores, and its entry
        in the deployed topology (``<prefix>/config/nodes/<node>``); with ``forget`` also
        the subspace (first)."""
        kinds = (STATUS, STATUS_DETAIL, CONFIRM, SCORES)
        mine = [self.topic(kind) for kind in (SUBSPACE, *kinds) if forget or kind != SUBSPACE]
        return [*mine, config_node_topic(self.prefix, self.node)]


def device_role(node: str) -> str:
    """The role `enroll` makes for ``node``: ``edge-device-<node>``."""
    return f"{DEVICE_ROLE_PREFIX}{node}"


def device_topics(
    topology: Topology, node: str, parent: str | None = None, sensor_topic: str | None = None
) -> DeviceTopics:
    """The topics of device ``node`` under ``parent``, checked against the topology.

    Parameters
    ----------
    topology : Topology
    node : str
        A leaf of the topology, or a new id (the topology's id rules).
    parent : str, optional
        An aggregator of the topology; default the node's parent in the topology.
    sensor_topic : str, optional
        Default: the node's in the topology, else ``sensors/<node>``.

    Returns
    -------
    DeviceTopics

    Raises
    ------
    TopologyError
        If ``node`` breaks the id rules (`edge_runtime.topology.checks.check_node_id`).
    CliError
        If ``parent`` is missing for a new node, not a node or a leaf; ``node`` is an
        aggregator or in the topology under another parent; the sensor topic is not a valid
        filter, starts with ``$``, could match the deployment's topics, or is another leaf's.
    """
    check_node_id(node)
    where = f"topology {topology.name!r}" + (
        f" ({topology.source_path})" if topology.source_path is not None else ""
    )
    aggregators = ", ".join(n for n in topology.nodes if not topology.is_leaf(n))
    known = topology.nodes.get(node)
    if known is not None and not topology.is_leaf(node):
        raise CliError(f"{node!r} is an aggregator of {where}: enroll adds devices (leaves)")
    if parent is None:
        if known is None or known.parent is None:
            raise CliError(f"{node!r} is not in {where}: name its parent with --parent AGG")
        parent = known.parent
    if parent not in topology.nodes:
        raise CliError(f"--parent {parent!r} is not a node of {where}; aggregators: {aggregators}")
    if topology.is_leaf(parent):
        raise CliError(
            f"--parent {parent!r} is a leaf of {where}; a device's parent is an aggregator: "
            f"{aggregators}"
        )
    if known is not None and known.parent != parent:
        raise CliError(f"{node!r} is in {where} under {known.parent!r}, not {parent!r}")
    if sensor_topic is None:
        sensor_topic = known.sensor_topic if known is not None else None
    sensor = sensor_topic or default_sensor_topic(node)
    _check_sensor_topic(topology, node, sensor)
    return DeviceTopics(
        node=node,
        path=f"{topology.path(parent)}/{node}",
        prefix=topology.prefix,
        sensor=sensor,
        model=topology.model_topic(),
    )


def refusing_parent(topology: Topology, topics: DeviceTopics) -> str | None:
    """The device's parent when it will refuse the device's snapshots: the topology does not
    name the device and the parent is not open (``open = true``); else None."""
    parent = topics.path.split("/")[-2]
    if topics.node in topology.nodes or topology.is_open(parent):
        return None
    return parent


def _check_sensor_topic(topology: Topology, node: str, sensor: str) -> None:
    """Refuse a sensor topic that would grant the device more than its own readings."""
    problem = topic_filter_problem(sensor)
    if problem is not None:
        raise CliError(f"sensor topic {sensor!r} is not a valid MQTT topic filter: it {problem}")
    if sensor.startswith(("$", "+", "#")):
        raise CliError(
            f"sensor topic {sensor!r} may not start with '$', '+' or '#' (broker topics such as "
            "$CONTROL, or every topic)"
        )
    if _may_match_under(sensor, topology.prefix):
        raise CliError(
            f"sensor topic {sensor!r} lies under the deployment's prefix {topology.prefix!r}: "
            "it would let the device write other nodes' topics"
        )
    for leaf in topology.leaves():
        other = topology.nodes[leaf].sensor_topic
        if leaf != node and other is not None and _overlap(sensor, other):
            raise CliError(
                f"sensor topic {sensor!r} overlaps the sensor topic of leaf {leaf!r} ({other!r})"
            )


def _may_match_under(topic_filter: str, prefix: str) -> bool:
    """Whether ``topic_filter`` can match a topic ``<prefix>/...``."""
    levels = topic_filter.split("/")
    for index, level in enumerate(prefix.split("/")):
        if index >= len(levels) or levels[index] == "#":
            return index < len(levels)
        if levels[index] not in ("+", level):
            return False
    return len(levels) > len(prefix.split("/"))


def _overlap(a: str, b: str) -> bool:
    """Whether two topic filters can match one topic (level by level, ``+`` and ``#``)."""
    left, right = a.split("/"), b.split("/")
    for index in range(max(len(left), len(right))):
        x = left[index] if index < len(left) else None
        y = right[index] if index < len(right) else None
        if x == "#" or y == "#":
            return True
        if x is None or y is None:
            return False
        if x != y and "+" not in (x, y):
            return False
    return True


@contextlib.asynccontextmanager
async def _operator(settings: AgentSettings, url: str) -> AsyncIterator[DynsecClient]:
    """A `DynsecClient` logged in as the operator; what the plugin refuses or does not answer
    (`DynsecError`) and a refused login become one line and exit 1."""
    kwargs = settings.client_kwargs()
    try:
        async with DynsecClient(
            kwargs["hostname"],
            kwargs["port"],
            username=kwargs["username"],
            password=kwargs["password"],
            tls_context=kwargs["tls_context"],
            timeout=kwargs["timeout"],
        ) as dynsec:
            yield dynsec
    except DynsecError as exc:
        raise CliError(str(exc), EXIT_FAILED) from None
    except aiomqtt.MqttError as exc:
        if not login_refused(exc):
            raise
        who = (
            f"operator {settings.username!r}"
            if settings.username
            else "a login without a user name (pass --username and --password-file)"
        )
        raise CliError(
            f"the broker at {url} refused {who} ({exc}): the operator must be a client of its "
            "dynamic security plugin with the admin role (mosquitto_ctrl dynsec init, "
            "broker_config/README.md)",
            EXIT_FAILED,
        ) from None


async def cmd_enroll(args: argparse.Namespace) -> int:
    """``edge-runtime enroll NODE``: create the device's role and client (module docstring)
    and print its credentials once, or write its password to ``--credentials-file``.

    Prints ``EDGE_MQTT_USERNAME=<node>`` and ``EDGE_MQTT_PASSWORD=<password>`` (or
    ``EDGE_MQTT_PASSWORD_FILE=<file>``) on stdout, the environment an agent reads, and one
    line on stderr saying what the device may do; a second line warns when the topology
    does not name the node and its parent is not open (``open = true``): that aggregator
    refuses the device's snapshots until it is.

    Returns
    -------
    int
        0.

    Raises
    ------
    CliError
        Exit 2: bad node, parent or sensor topic (`device_topics`), a credentials file that
        exists or cannot be created, a client of that name on the broker already. Exit 1: the
        plugin refused or did not answer a command.
        A login the broker refuses (exit 1, naming the operator).
    TopologyError, BrokerError
        A bad topology file or broker URL (exit 2, `edge_runtime.cli.dispatch`).
    aiomqtt.MqttError
        The broker cannot be reached or drops the connection (exit 1).
    """
    topology = load_topology(args.topology)
    topics = device_topics(topology, args.node, args.parent, args.sensor_topic)
    settings = broker_settings(args.broker, args)
    password = secrets.token_urlsafe(PASSWORD_BYTES)
    path: Path | None = args.credentials_file
    fd = _create_private(path) if path is not None else None
    try:
        async with _operator(settings, args.broker) as dynsec:
            await _enroll(dynsec, topics, password, topology)
        entry = NodeEntry(topics.path.split("/")[-2], topics.sensor).encode()
        entry_topic = config_node_topic(topics.prefix, topics.node)
        await publish_checked(settings, entry_topic, entry, settings.timeout_s)
        if fd is not None:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fd = None
                fh.write(password + "\n")
    except BaseException:
        if fd is not None:
            os.close(fd)
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()
        raise
    print(f"{ENV_USERNAME}={topics.node}")
    if path is None:
        print(f"{ENV_PASSWORD}={password}")
    else:
        print(f"{ENV_PASSWORD_FILE}={path.resolve()}")
    print(
        f"edge-runtime enroll: {topics.node} enrolled as {topics.path} (role "
        f"{device_role(topics.node)}): it may publish {topics.sensor} and "
        f"{topics.prefix}/{topics.path}/{{subspace,status,status/detail,confirm,scores}}, "
        f"read those it needs and {topics.model}; "
        + ("its password is shown once" if path is None else f"its password is in {path}"),
        file=sys.stderr,
    )
    parent = refusing_parent(topology, topics)
    if parent is not None:
        print(
            f"edge-runtime enroll: warning: {parent!r} is not open in topology "
            f"{topology.name!r}: its aggregator refuses the snapshots of {topics.node!r}, which "
            f"the file does not name (unknown_child), until it is (open = true on {parent!r}, "
            "topologies/README.md)",
            file=sys.stderr,
        )
    return EXIT_OK


def _create_private(path: Path) -> int:
    """Open a new file readable by its owner only (mode 0600); never overwrite one."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise CliError(f"--credentials-file {str(path)!r} exists: not overwritten") from None
    except OSError as exc:
        raise CliError(f"--credentials-file {str(path)!r}: {exc.strerror}") from None


async def _enroll(
    dynsec: DynsecClient, topics: DeviceTopics, password: str, topology: Topology
) -> None:
    """Create the role, then the client with it; remove the role again if that fails."""
    node, role = topics.node, device_role(topics.node)
    try:
        client = await dynsec.get_client(node)
    except DynsecError as exc:
        if not exc.not_found:
            raise
    else:
        state = "disabled, retired" if client.get("disabled") else "enabled"
        raise CliError(
            f"{node!r} is a client of the broker already ({state}); to enrol it again, delete "
            f"it first: mosquitto_ctrl -u admin dynsec deleteClient {node}"
        )
    description = f"edge_runtime device {topics.path} of {topology.name!r} ({topics.prefix})"
    try:
        await dynsec.create_role(role, topics.acls(), textdescription=description)
    except DynsecError as exc:
        if not exc.exists:
            raise
        # Left by an enrolment that failed half-way (there is no client): made again.
        await dynsec.delete_role(role)
        await dynsec.create_role(role, topics.acls(), textdescription=description)
    try:
        await dynsec.create_client(
            node, password=password, roles=[role], textname=node, textdescription=description
        )
    except BaseException:
        with contextlib.suppress(DynsecError, aiomqtt.MqttError):
            await dynsec.delete_role(role)
        raise


async def cmd_retire(args: argparse.Namespace) -> int:
    """``edge-runtime retire NODE [--forget]``: disable the device's client and clear its
    retained topics (module docstring); one line on stdout per step.

    The device's topics come from its role on the broker (what it could publish), else from
    the topology (a leaf the topology names whose client is not the plugin's: nothing to
    disable). Every empty retained message is checked end to end: the operator subscribes to
    the topics first, and each must come back within the broker timeout.

    Returns
    -------
    int
        0.

    Raises
    ------
    CliError
        Exit 2: a node id the broker and the topology do not know, or whose role's topics are
        not under the topology's prefix. Exit 1: the plugin refused or did not answer, the
        broker refused the operator's login, or a topic was not cleared (the operator may not
        publish there).
    TopologyError, BrokerError, aiomqtt.MqttError
        As for `cmd_enroll`.
    """
    topology = load_topology(args.topology)
    node = args.node
    check_node_id(node)
    settings = broker_settings(args.broker, args)
    async with _operator(settings, args.broker) as dynsec:
        topics, disabled = await _disable(dynsec, topology, node)
    if disabled:
        print(f"disabled client {node}: it can no longer connect or publish")
    else:
        print(f"no client {node} in the broker's dynamic security: nothing to disable")
    cleared = topics.to_clear(args.forget)
    await clear_device_topics(settings, cleared, topology.prefix)
    for topic in cleared:
        print(f"cleared {topic}")
    if not args.forget:
        print(f"kept {topics.topic(SUBSPACE)}: its data stays in the model (--forget removes it)")
    return EXIT_OK


async def _disable(
    dynsec: DynsecClient, topology: Topology, node: str
) -> tuple[DeviceTopics, bool]:
    """Disable ``node``'s client if the plugin has one; its topics, and whether it had one."""
    where = f"topology {topology.name!r}"
    try:
        await dynsec.get_client(node)
    except DynsecError as exc:
        if not exc.not_found:
            raise
        if node in topology.nodes and topology.is_leaf(node):
            return device_topics(topology, node), False
        raise CliError(
            f"no device {node!r}: the broker's dynamic security has no such client and {where} "
            "names no such leaf"
        ) from None
    try:
        await dynsec.disable_client(node)
        acls = await dynsec.role_acls(device_role(node))
    except DynsecError as exc:
        if not exc.not_found:
            raise
        acls = []
    topics = _topics_from_acls(topology, node, acls)
    if topics is None and node in topology.nodes and topology.is_leaf(node):
        topics = device_topics(topology, node)
    if topics is None:
        raise CliError(
            f"disabled client {node}, but its topics are unknown: its role "
            f"{device_role(node)} grants nothing under prefix {topology.prefix!r} and {where} "
            "names no such leaf (another --topology?)"
        )
    return topics, True


def _topics_from_acls(topology: Topology, node: str, acls: Sequence[Acl]) -> DeviceTopics | None:
    """The device's topics from the ``publishClientSend`` ACLs of its role."""
    sends = [acl.topic for acl in acls if acl.acltype == "publishClientSend" and acl.allow]
    head, tail = f"{topology.prefix}/", f"/{node}/{SUBSPACE}"
    for topic in sends:
        if topic.startswith(head) and topic.endswith(tail):
            path = topic[len(head) : -len(f"/{SUBSPACE}")]
            under = f"{topology.prefix}/{path}/"
            sensor = next((t for t in sends if not t.startswith(under)), None)
            return DeviceTopics(
                node=node,
                path=path,
                prefix=topology.prefix,
                sensor=sensor or default_sensor_topic(node),
                model=topology.model_topic(),
            )
    return None


async def clear_device_topics(settings: AgentSettings, topics: Sequence[str], prefix: str) -> None:
    """Publish an empty retained message on each topic and wait until each comes back.

    What ``retire`` does to a device's topics (`device_topics`); also used by the churn
    benchmark (``benchmarks.fleet.churn_run``) to retire devices the same way.

    Parameters
    ----------
    settings : AgentSettings
        The operator's broker address and credentials; ``timeout_s`` (seconds) bounds the wait.
    topics : sequence of str
        Topics to clear (QoS 1, retained, zero-length payload).
    prefix : str
        The topology's topic prefix, named in the error's hint.

    Raises
    ------
    CliError
        Exit 1 when the subscription is refused or an empty message does not come back within
        ``settings.timeout_s`` (the operator may not publish there: a denied publish is
        dropped silently), naming the topics and how to grant the operator's role.
    """
    pending = set(topics)
    hint = _ADD_OPERATOR_ACL.format(prefix=prefix)
    async with aiomqtt.Client(**settings.client_kwargs()) as client:
        for topic in topics:
            granted = await client.subscribe(topic, qos=1)
            if any(int(getattr(code, "value", code)) >= 0x80 for code in granted):
                raise CliError(
                    f"the broker refused the operator's subscription to {topic}, needed to check "
                    f"that it is cleared; grant it (e.g. subscribePattern '{prefix}/#')",
                    EXIT_FAILED,
                )
        for topic in topics:
            await client.publish(topic, b"", qos=1, retain=True)
        try:
            async with asyncio.timeout(settings.timeout_s):
                async for message in client.messages:
                    if not message.payload:
                        pending.discard(str(message.topic))
                    if not pending:
                        break
        except TimeoutError:
            raise CliError(
                f"not cleared within {settings.timeout_s:g} s: {', '.join(sorted(pending))}; the "
                f"operator may not publish there (dynamic security: {hint})",
                EXIT_FAILED,
            ) from None
