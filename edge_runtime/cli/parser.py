"""The argument parser of ``edge-runtime``: every command and option, with its help text.

Usage errors are one line on stderr and exit status 2 (`_Parser`); the values are checked
by `edge_runtime.cli.argtypes`, and in full (files, URLs, topology) by
`edge_runtime.cli.inputs` once a command runs.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, NoReturn

from edge_runtime import __version__
from edge_runtime.cli import EXIT_USAGE
from edge_runtime.cli.argtypes import (
    broker_url,
    declared_value,
    port,
    positive_float,
    positive_int,
)
from edge_runtime.declaration import Key
from edge_runtime.settings import AGENT_SETTINGS_KEYS, ENV_PASSWORD, ENV_PASSWORD_FILE
from edge_runtime.topology.keys import KEYS as TOPOLOGY_KEYS

__all__ = ["add_key_flag", "build_parser"]

# Copies, not imports, so that ``edge-runtime agent`` does not load the replay, the monitor
# and Home Assistant's discovery to build its parser; tests/test_pi_budget.py pins them to the
# originals.
DEFAULT_BATCH_SIZE = 64
"""`edge_runtime.replay.DEFAULT_BATCH_SIZE`: ``replay --batch-size``."""
STALE_AFTER_S = 75.0
"""`edge_runtime.monitor.STALE_AFTER_S`: ``watch`` / ``dashboard --stale-after``."""
DEFAULT_DISCOVERY_PREFIX = "homeassistant"
"""`edge_runtime.homeassistant.DEFAULT_DISCOVERY_PREFIX`: ``--discovery-prefix``."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr and exit 2 (argparse
    prints the whole usage first); subparsers are of this class too."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``edge-runtime``.

    Returns
    -------
    argparse.ArgumentParser
        With one sub-parser per command (``dest="command"``, required); a usage error
        prints one line on stderr and exits with status 2 (`EXIT_USAGE`).
    """
    parser = _Parser(
        prog="edge-runtime",
        description="Federated streaming PCA (FPCA-Edge) over MQTT.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--log-level",
        default=None,
        help="debug, info, warning or error (default per command)",
    )
    connection = argparse.ArgumentParser(add_help=False)
    group = connection.add_argument_group("broker security")
    flagged = {key.name: key for key in AGENT_SETTINGS_KEYS if key.flag is not None}
    add_key_flag(group, flagged.pop("username"))
    group.add_argument(
        "--password-file",
        type=Path,
        help=f"file holding the MQTT password (default: ${ENV_PASSWORD} or ${ENV_PASSWORD_FILE})",
    )
    for key in flagged.values():  # --ca-file, --cert-file, --key-file
        add_key_flag(group, key)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        parents=[common, connection],
        name="run",
        help="run a whole topology on this machine and replay data",
    )
    run.add_argument("topology", type=Path, help="topology TOML file")
    run.add_argument("--data", type=Path, help="matrix file (rows are samples); default: topology")
    run.add_argument(
        "--broker",
        type=broker_url,
        help="mqtt://HOST:PORT; default: start a local Mosquitto",
    )
    run.add_argument("--rate", type=positive_float, help="samples/s (default: as fast as possible)")
    run.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    run.add_argument(
        "--timeout",
        type=positive_float,
        default=60.0,
        help="seconds to wait, once every reading is sent, for the root to cover every "
        "reading (default 60; the replay itself is not bounded: see --rate)",
    )
    run.add_argument(
        "--workers",
        type=positive_int,
        default=os.cpu_count() or 1,
        help="processes hosting the agents, spread over the cores (default: the number of "
        f"cores, {os.cpu_count() or 1} here); 1 runs every agent in this process",
    )
    run.add_argument(
        "--plot",
        type=Path,
        metavar="DIR",
        help="write PNGs into DIR (created if needed): root coverage and error ratio over "
        "time, scree plot of the final model, anomaly timeline; needs the plot extra "
        "(pip install 'edge_runtime-VERSION-py3-none-any.whl[plot]' with the wheel file)",
    )

    agent = sub.add_parser(
        parents=[common, connection],
        name="agent",
        help="run one node of a topology (what a device runs)",
    )
    agent.add_argument(
        "--topology",
        type=Path,
        help="topology TOML file; default: the topology deployed on the broker "
        "(edge-runtime deploy), read from <prefix>/config",
    )
    agent.add_argument("--node", required=True, help="node id in the topology")
    add_key_flag(agent, TOPOLOGY_KEYS["prefix"])
    agent.add_argument("--broker", type=broker_url, default="mqtt://127.0.0.1:1883")
    agent.add_argument(
        "--n-features",
        type=positive_int,
        help="reading width (default: learnt; the aggregator of a secure-aggregation site "
        "needs it, unless its leaves declare a per-feature valid_range)",
    )
    agent.add_argument(
        "--state-dir",
        type=Path,
        help="the node's state folder: a leaf's checkpoint (<node>.ckpt), a secure-aggregation "
        "site's running sum (<node>.secagg); default: none",
    )
    agent.add_argument(
        "--checkpoint-interval",
        type=positive_float,
        default=120.0,
        metavar="SECONDS",
        help="most seconds between a leaf's checkpoints while readings arrive; it also "
        "checkpoints when the stream pauses and on exit (default 120)",
    )
    agent.add_argument(
        "--checkpoint-every",
        type=positive_int,
        default=None,
        metavar="BLOCKS",
        help="also checkpoint after this many blocks (default: by time only)",
    )
    agent.add_argument(
        "--startup-timeout",
        type=positive_float,
        default=30.0,
        help="seconds to reach the broker the first time (and, without --topology, to read "
        "the deployed topology) before giving up (default 30)",
    )
    _add_homeassistant_flags(agent)
    agent.add_argument(
        "--homeassistant-remove",
        action="store_true",
        help="publish empty retained payloads that remove this node's Home Assistant "
        "entities, then exit (does not run the agent)",
    )

    replay = sub.add_parser(
        parents=[common, connection],
        name="replay",
        help="publish a dataset as live sensor readings",
    )
    replay.add_argument("--topology", type=Path, required=True)
    replay.add_argument("--data", type=Path)
    replay.add_argument("--broker", required=True)
    replay.add_argument(
        "--rate",
        type=positive_float,
        help="readings/s over all leaves, each leaf's due readings sent in batches of "
        "--batch-size (default: as fast as the broker acknowledges, within --window)",
    )
    replay.add_argument(
        "--window",
        type=positive_int,
        default=100_000,
        help="readings per leaf kept until the leaf confirms them durable (default 100000)",
    )
    replay.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        help=f"readings per message (default {DEFAULT_BATCH_SIZE}; 1: one per message)",
    )
    replay.add_argument(
        "--confirm-timeout",
        type=positive_float,
        default=60.0,
        help="seconds to wait for confirmations without progress (default 60)",
    )
    replay.add_argument(
        "--no-resend",
        action="store_true",
        help="send each reading once; do not keep or re-send unconfirmed readings",
    )
    replay.add_argument(
        "--resume",
        metavar="RUN",
        help="continue the earlier run RUN (its id from the summary) after what the leaves "
        "confirmed; default: a new run",
    )
    replay.add_argument(
        "--wait-online",
        type=float,
        default=30.0,
        help="seconds to wait for every leaf to be online first; 0 to skip (default 30)",
    )

    acl = sub.add_parser(
        parents=[common],
        name="acl",
        help="print a Mosquitto acl_file for a topology (each device writes only its topics)",
    )
    acl.add_argument(
        "topology",
        type=Path,
        nargs="+",
        help="topology TOML file; several: the deployments sharing one broker, their sections "
        "one after the other (node ids must differ between them)",
    )
    acl.add_argument("--reader", action="append", default=[], help="a read-only user (repeatable)")
    acl.add_argument(
        "--operator",
        metavar="USER",
        help="the user who may write the configuration topics <prefix>/config and "
        "<prefix>/config/nodes/+ (edge-runtime deploy); default: nobody",
    )
    acl.add_argument("--replay-user", default="replay", help="user that publishes readings")
    acl.add_argument("--no-replay", action="store_true", help="no replay / gateway user")
    acl.add_argument(
        "--bridge",
        action="append",
        default=[],
        help="node id behind a bridged site broker",
    )
    _add_homeassistant_flags(acl, what="grant each node write on its own discovery topics")

    bridge = sub.add_parser(
        parents=[common],
        name="bridge",
        help="print a Mosquitto bridge from a site broker to the central one",
        description="Print the bridge section for the site broker of SITE (an aggregator "
        "below the root): its subtree's snapshot, status and confirmations go up, the model "
        "and the leaves' sensor topics come down. TLS and credential files are paths on the "
        "site broker's machine.",
    )
    bridge.add_argument("topology", type=Path, help="topology TOML file")
    bridge.add_argument("--site", required=True, help="aggregator whose subtree the site runs")
    bridge.add_argument(
        "--central",
        required=True,
        help="the central broker, mqtt://HOST:PORT or mqtts://...",
    )
    bridge.add_argument("--name", help="connection name (default: SITE-to-central)")
    bridge.add_argument(
        "--username",
        help="the bridge's user on the central broker (the ACL's: bridge-SITE)",
    )
    bridge.add_argument(
        "--password-file",
        type=Path,
        help="file whose first line is that user's password",
    )
    bridge.add_argument(
        "--ca-file",
        help="absolute path of the central broker's CA certificate (mqtts://)",
    )
    bridge.add_argument("--cert-file", help="absolute path of the bridge's client certificate")
    bridge.add_argument("--key-file", help="absolute path of the bridge's private key")

    watch = sub.add_parser(
        parents=[common, connection],
        name="watch",
        help="follow the root's global model",
    )
    watch.add_argument("--topology", type=Path, required=True)
    watch.add_argument("--broker", type=broker_url, required=True)
    watch.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per root update (and per child joined, forgotten, quarantined "
        'or released: an object with an "event" key)',
    )
    watch.add_argument("--until-samples", type=positive_int, help="exit 0 once covered")
    watch.add_argument(
        "--timeout",
        type=positive_float,
        help="exit 1 after this many seconds unless --until-samples was reached first "
        "(also without --until-samples)",
    )
    watch.add_argument(
        "--stale-after",
        type=positive_float,
        default=STALE_AFTER_S,
        help="an online node silent for this many seconds is shown as stale "
        f"(default {STALE_AFTER_S:g}: 2.5 status heartbeats)",
    )
    _add_dashboard_parser(sub, parents=[common, connection])
    _add_fleet_parsers(sub, parents=[common, connection])
    return parser


def add_key_flag(parser: argparse.ArgumentParser | Any, key: Key) -> None:
    """Add the flag that mirrors a declared setting (`Key.flag`): its value parsed and
    checked as the declaration says (`edge_runtime.cli.argtypes.declared_value`), its
    default the key's, its help `Key.flag_help`.

    Parameters
    ----------
    parser : argparse.ArgumentParser or argument group
        Where the flag goes.
    key : Key
        A key of `edge_runtime.settings.AGENT_SETTINGS_KEYS` or
        `edge_runtime.topology.keys.TOPOLOGY_KEYS` with a ``flag``.

    Raises
    ------
    ValueError
        If the key declares no flag.
    """
    if key.flag is None:
        raise ValueError(f"key {key.name!r} declares no command-line flag")
    parser.add_argument(
        key.flag,
        dest=key.attribute,
        type=declared_value(key),
        default=key.default,
        help=key.flag_help,
    )


def _add_homeassistant_flags(
    parser: argparse.ArgumentParser,
    what: str = "publish this node's Home Assistant MQTT discovery configs (retained) after "
    "connecting and whenever Home Assistant comes online",
) -> None:
    parser.add_argument("--homeassistant", action="store_true", help=f"{what} (off by default)")
    parser.add_argument(
        "--discovery-prefix",
        default=DEFAULT_DISCOVERY_PREFIX,
        metavar="P",
        help=f"Home Assistant's discovery prefix (default {DEFAULT_DISCOVERY_PREFIX!r})",
    )


def _add_dashboard_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add the ``dashboard`` sub-command; ``parents`` are the CLI's shared option parsers
    (log level, broker security)."""
    parser = subparsers.add_parser(
        name="dashboard",
        parents=parents,
        help="serve a live web page of the tree (needs the 'dashboard' extra)",
        description="Serve one web page showing each node's liveness, coverage, rank and "
        "privacy, the root model's scree plot and anomaly rates, updated live from the "
        "broker (server-sent events; /state.json gives the same data as JSON).",
    )
    parser.add_argument("--topology", type=Path, required=True)
    parser.add_argument("--broker", required=True, help="mqtt://HOST[:PORT] or mqtts://...")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=port, default=8080, help="port to listen on (8080)")
    parser.add_argument(
        "--stale-after",
        type=positive_float,
        default=STALE_AFTER_S,
        help=f"an online node silent this many seconds is shown as stale ({STALE_AFTER_S:g})",
    )


def _add_fleet_parsers(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``enroll``, ``deploy`` and ``retire`` (`edge_runtime.cli.fleet`,
    `edge_runtime.cli.deploy`); ``parents`` are the CLI's shared option parsers (log level,
    broker security: the operator's login)."""
    operator = (
        "The operator logs in with --username/--password-file (or $EDGE_MQTT_USERNAME and "
        "$EDGE_MQTT_PASSWORD or $EDGE_MQTT_PASSWORD_FILE) as a dynamic security admin "
        "(broker_config/dynsec.conf, broker_config/README.md)."
    )
    enroll = subparsers.add_parser(
        name="enroll",
        parents=parents,
        help="add a device to a running fleet: its MQTT client and role (dynamic security)",
        description="Create the MQTT client and role of device NODE through the broker's "
        "dynamic security plugin, without a restart: it may publish only its sensor topic and "
        "its own topics under its parent's path (subspace, status, status/detail, confirm, "
        "scores), and read its sensor topic, its own subspace and the model; nothing of any "
        "other device. Prints its credentials once (EDGE_MQTT_USERNAME=NODE, "
        "EDGE_MQTT_PASSWORD=...), or writes the password to --credentials-file. " + operator,
    )
    enroll.add_argument("node", metavar="NODE", help="node id of the device (its user name)")
    enroll.add_argument(
        "--parent",
        metavar="AGG",
        help="aggregator of the topology the device reports to (default: the node's parent, "
        "when the topology names the node)",
    )
    enroll.add_argument("--topology", type=Path, required=True, help="topology TOML file")
    enroll.add_argument("--broker", type=broker_url, required=True, help="mqtt[s]://HOST[:PORT]")
    enroll.add_argument(
        "--sensor-topic",
        metavar="TOPIC",
        help="the device's sensor topic (default: the topology's, else sensors/NODE)",
    )
    enroll.add_argument(
        "--credentials-file",
        type=Path,
        metavar="FILE",
        help="write the password to this new file (mode 0600; its first line, as "
        "--password-file reads it) instead of printing it",
    )

    deploy = subparsers.add_parser(
        name="deploy",
        parents=parents,
        help="publish a topology on the broker for the agents (retained <prefix>/config)",
        description="Publish the topology file's text, retained, QoS 1, on <prefix>/config "
        "and check that it came back. Agents started without --topology read it; running "
        "agents apply what may change at once and refuse the rest (README, 'Configuration "
        "from the broker'). The operator's login must be allowed to write it.",
    )
    deploy.add_argument("topology", type=Path, metavar="TOPOLOGY", help="topology TOML file")
    deploy.add_argument("--broker", type=broker_url, required=True, help="mqtt[s]://HOST[:PORT]")
    deploy.add_argument(
        "--timeout",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="most seconds to wait for the published topology to come back (default 10)",
    )

    retire = subparsers.add_parser(
        name="retire",
        parents=parents,
        help="retire a device: disable its client and clear its retained topics",
        description="Disable the MQTT client of device NODE (disconnected at once, no further "
        "logins) and clear its retained status, status/detail, confirm and scores topics. Its "
        "snapshot stays, and with it its data in the model, unless --forget. " + operator,
    )
    retire.add_argument("node", metavar="NODE", help="node id of the device")
    retire.add_argument("--topology", type=Path, required=True, help="topology TOML file")
    retire.add_argument("--broker", type=broker_url, required=True, help="mqtt[s]://HOST[:PORT]")
    retire.add_argument(
        "--forget",
        action="store_true",
        help="also clear its retained snapshot (subspace), so that its parent drops its data",
    )
