"""``edge-runtime deploy``: the topology on the broker, for devices that do not carry it.

``deploy TOPOLOGY --broker URL`` publishes the file's text, retained, QoS 1, on the
operator-only ``<prefix>/config`` (`edge_runtime.topology.deployed`), and checks that it
came back. Every running agent follows that topic and applies what may change at once
(README, "Configuration from the broker"); ``edge-runtime agent --node ID`` without
``--topology`` reads it at start (`read_deployed`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tomllib
from pathlib import Path

import aiomqtt

from edge_runtime.cli import EXIT_FAILED, EXIT_OK, CliError
from edge_runtime.cli.inputs import broker_settings
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology, TopologyError, load_topology
from edge_runtime.topology.deployed import (
    NodeEntry,
    config_version,
    node_config,
    parse_deployed,
    with_node,
)
from edge_runtime.topology.topics import config_node_topic, config_topic

__all__ = ["cmd_deploy", "deployable_payload", "publish_checked", "read_deployed"]


def deployable_payload(path: Path) -> tuple[bytes, Topology]:
    """The bytes ``deploy`` publishes for the file at ``path``, and its topology.

    The file's text, with ``name = "<file stem>"`` put first when it sets no name (a device
    parsing the text has no file name to take it from; the name is in every client id).

    Raises
    ------
    TopologyError
        If the file is no valid topology (`load_topology`).
    """
    topology = load_topology(path)
    text = path.read_text(encoding="utf-8")
    if "name" not in tomllib.loads(text):
        text = f"name = {topology.name!r}\n" + text  # a TOML literal string, as repr quotes
    payload = text.encode("utf-8")
    parse_deployed(payload, topology.prefix)  # the device's parse: it must accept it too
    return payload, topology


async def publish_checked(
    settings: AgentSettings, topic: str, payload: bytes, timeout_s: float
) -> None:
    """Publish ``payload`` retained, QoS 1, on ``topic`` and wait until it comes back.

    A PUBACK proves nothing (an ACL-denied publish is acknowledged and dropped), so the
    publisher subscribes first and waits for its own payload.

    Raises
    ------
    CliError
        Exit 1, if the payload does not come back within ``timeout_s`` seconds (the broker
        refused it: the login may not write ``topic``, or it exceeds the size limit).
    aiomqtt.MqttError
        If the broker cannot be reached.
    """
    async with aiomqtt.Client(**settings.client_kwargs()) as client:
        await client.subscribe(topic, qos=1)
        await client.publish(topic, payload, qos=1, retain=True, timeout=settings.timeout_s)
        try:
            async with asyncio.timeout(timeout_s):
                async for message in client.messages:
                    if message.payload == payload:
                        return
        except TimeoutError:
            raise CliError(
                f"{topic}: the broker did not deliver the published configuration back within "
                f"{timeout_s:g} s: may this login write it (the operator's role), and is it "
                "below the broker's message_size_limit?",
                EXIT_FAILED,
            ) from None


async def cmd_deploy(args: argparse.Namespace) -> int:
    """``edge-runtime deploy TOPOLOGY``: publish the topology (`deployable_payload`) on
    ``<prefix>/config``, retained, checked end to end; one line on stderr with its version.

    Returns
    -------
    int
        0.

    Raises
    ------
    CliError
        Exit 1 when the broker does not deliver it back (`publish_checked`).
    TopologyError, BrokerError
        A bad topology file or broker URL (exit 2).
    aiomqtt.MqttError
        The broker cannot be reached (exit 1).
    """
    payload, topology = deployable_payload(args.topology)
    settings = broker_settings(args.broker, args)
    topic = config_topic(topology.prefix)
    await publish_checked(settings, topic, payload, args.timeout)
    print(
        f"edge-runtime deploy: topology {topology.name!r} version {config_version(payload)} "
        f"({len(payload)} bytes, {len(topology.nodes)} nodes) retained on {topic}",
        file=sys.stderr,
    )
    return EXIT_OK


async def read_deployed(
    settings: AgentSettings, prefix: str, node_id: str, timeout_s: float
) -> tuple[Topology, str]:
    """The deployed topology, with ``node_id`` in it, and its version: what an agent
    started without ``--topology`` runs from.

    Reads the retained ``<prefix>/config`` and ``<prefix>/config/nodes/<node_id>``; a node
    the topology does not declare runs as the leaf its entry's open parent admits
    (`edge_runtime.topology.deployed.node_config`).

    Raises
    ------
    CliError
        Exit 1: nothing retained on ``<prefix>/config`` within ``timeout_s`` seconds, the
        broker cannot be reached, or the deployed topology is invalid or has no place for
        the node.
    """
    topics = [config_topic(prefix), config_node_topic(prefix, node_id)]
    found: dict[str, bytes] = {}
    try:
        async with aiomqtt.Client(**settings.client_kwargs()) as client:
            # The entry first: the broker sends a subscription's retained messages before it
            # handles the next SUBSCRIBE, so the entry, if any, precedes the topology.
            for topic in reversed(topics):
                await client.subscribe(topic, qos=1)
            async with asyncio.timeout(timeout_s):
                async for message in client.messages:
                    if isinstance(message.payload, bytes) and message.payload:
                        found[str(message.topic)] = message.payload
                    if topics[0] in found:
                        break
    except TimeoutError:
        pass
    except aiomqtt.MqttError as exc:
        raise CliError(f"cannot read {topics[0]}: {exc}", EXIT_FAILED) from None
    if topics[0] not in found:
        raise CliError(
            f"no topology deployed on {topics[0]} within {timeout_s:g} s (edge-runtime deploy "
            "TOPOLOGY --broker URL publishes it; or run with --topology FILE)",
            EXIT_FAILED,
        )
    payload = found[topics[0]]
    try:
        topology = parse_deployed(payload, prefix)
        entry = NodeEntry.decode(found[topics[1]]) if topics[1] in found else None
        topology = with_node(topology, node_config(topology, node_id, entry))
    except TopologyError as exc:
        raise CliError(f"{topics[0]}: {exc}", EXIT_FAILED) from None
    return topology, config_version(payload)
