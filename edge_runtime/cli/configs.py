"""The commands that print Mosquitto configuration for a topology: ``acl`` (who may
write which topic) and ``bridge`` (a site broker's connection to the central one).
"""

from __future__ import annotations

import argparse
import sys

from edge_runtime.acl import check_shared_broker, generate_acl
from edge_runtime.bridge import bridge_user, generate_bridge
from edge_runtime.broker import parse_broker_url
from edge_runtime.cli import EXIT_OK, CliError
from edge_runtime.cli.inputs import discovery_prefix
from edge_runtime.topology import load_topology

__all__ = ["cmd_acl", "cmd_bridge"]


async def cmd_acl(args: argparse.Namespace) -> int:
    """``edge-runtime acl``: print a Mosquitto ``acl_file`` for the topology (or for each of
    several deployments sharing the broker, one after the other: Mosquitto merges a user's
    sections) on stdout (`edge_runtime.acl.generate_acl`); 0, or an `AclError` for an unfit
    user or topic, or for topologies that cannot share a broker
    (`edge_runtime.acl.check_shared_broker`)."""
    paths = args.topology if isinstance(args.topology, list) else [args.topology]
    topologies = [load_topology(path) for path in paths]
    replay = None if args.no_replay else args.replay_user
    if len(topologies) > 1:
        check_shared_broker(topologies, readers=args.reader, replay=replay, bridges=args.bridge)
    texts = []
    for topology in topologies:
        bridges = [node for node in args.bridge if len(topologies) == 1 or node in topology.nodes]
        texts.append(
            generate_acl(
                topology,
                readers=args.reader,
                replay=replay,
                bridges=bridges,
                homeassistant=discovery_prefix(args, topology) if args.homeassistant else None,
                operator=args.operator,
            )
        )
    sys.stdout.write("\n".join(texts))
    return EXIT_OK


async def cmd_bridge(args: argparse.Namespace) -> int:
    """``edge-runtime bridge``: print the Mosquitto bridge section of site ``--site`` on
    stdout (`edge_runtime.bridge.generate_bridge`).

    Raises
    ------
    CliError
        If ``--central`` and ``--ca-file`` disagree on TLS, the password file cannot be
        read, or it comes without ``--username`` (exit 2).
    BridgeError
        If the site cannot be bridged (`main` prints it in one line).
    """
    topology = load_topology(args.topology)
    central = parse_broker_url(args.central)
    if central.tls != (args.ca_file is not None):
        raise CliError(
            f"--central {args.central!r} asks for TLS: give the central broker's CA with --ca-file"
            if central.tls
            else f"--ca-file needs TLS: give the central broker as mqtts://, not {args.central!r}"
        )
    password = None
    if args.password_file is not None:
        try:
            lines = args.password_file.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            raise CliError(f"--password-file {str(args.password_file)!r}: not UTF-8") from None
        except OSError as exc:
            raise CliError(f"--password-file {str(args.password_file)!r}: {exc.strerror}") from None
        password = lines[0].strip() if lines else ""
        if args.username is None:
            raise CliError(
                f"--password-file needs --username (the ACL names it {bridge_user(args.site)})"
            )
    text = generate_bridge(
        topology,
        args.site,
        central_host=central.host,
        central_port=central.port,
        name=args.name,
        ca_file=args.ca_file,
        cert_file=args.cert_file,
        key_file=args.key_file,
        username=args.username,
        password=password,
    )
    sys.stdout.write(text)
    return EXIT_OK
