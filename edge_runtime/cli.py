"""``edge-runtime``: the command line, and the composition root of the runtime.

Commands: ``run`` (the whole tree on this machine, with a replay and a summary),
``agent`` (one node, as a Raspberry Pi runs it), ``replay`` (a dataset as live sensor
readings) and ``watch`` (follow the root's global model). Bad input ends in one line
on stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import ssl
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

import aiomqtt
import numpy as np
from threadpoolctl import threadpool_limits

from edge_runtime import __version__
from edge_runtime.acl import AclError, generate_acl
from edge_runtime.agents import AgentSettings, create_agent
from edge_runtime.agents.base import remove_discovery
from edge_runtime.agents.settings import (
    ENV_PASSWORD,
    ENV_PASSWORD_FILE,
    ENV_USERNAME,
    read_password_file,
)
from edge_runtime.bridge import bridge_user, generate_bridge
from edge_runtime.broker import BrokerError, LocalMosquitto, parse_broker_url
from edge_runtime.dashboard.cli import add_dashboard_parser, cmd_dashboard
from edge_runtime.datasets import DatasetError, load_dataset
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.homeassistant import DEFAULT_DISCOVERY_PREFIX, discovery_messages
from edge_runtime.limits import LimitError, ensure_descriptors, run_descriptors_needed
from edge_runtime.logs import configure_logging
from edge_runtime.monitor import STALE_AFTER_S, ModelWatcher, privacy_of
from edge_runtime.plots import PlotError, RunRecorder, describe, prepare_dir, require_matplotlib
from edge_runtime.plots import write_plots as _write_plots
from edge_runtime.replay import DEFAULT_BATCH_SIZE, Replayer, wait_online
from edge_runtime.runner import Progress, RunSummary, run_topology
from edge_runtime.sources import SourceError
from edge_runtime.topology import Topology, TopologyError, load_topology
from edge_runtime.wire import SubspaceMessage
from edge_runtime.workers import WorkerError

__all__ = ["main"]

EXIT_OK = 0
EXIT_FAILED = 1  # ran, but the goal was not reached (coverage, timeout)
EXIT_USAGE = 2  # bad input: files, topology, data, broker address


class CliError(EdgeRuntimeError):
    """A one-line error for the user; ``main`` prints it and exits non-zero."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------- parsing
class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr and exit 2 (argparse
    prints the whole usage first); subparsers are of this class too."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _broker_url(text: str) -> str:
    """``--broker``: a non-empty URL (checked in full by `parse_broker_url` later)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT], got {text!r}"
        )
    return text


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``edge-runtime``."""
    parser = _Parser(
        prog="edge-runtime",
        description="Federated streaming PCA (FPCA-Edge) over MQTT.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--log-level", default=None, help="debug, info, warning or error (default per command)"
    )
    connection = argparse.ArgumentParser(add_help=False)
    group = connection.add_argument_group("broker security")
    group.add_argument("--username", help=f"MQTT user name (default: ${ENV_USERNAME})")
    group.add_argument(
        "--password-file",
        type=Path,
        help=f"file holding the MQTT password (default: ${ENV_PASSWORD} or ${ENV_PASSWORD_FILE})",
    )
    group.add_argument("--ca-file", type=Path, help="CA certificate to verify the broker (TLS)")
    group.add_argument("--cert-file", type=Path, help="client certificate (TLS)")
    group.add_argument("--key-file", type=Path, help="client private key (TLS)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        parents=[common, connection],
        name="run",
        help="run a whole topology on this machine and replay data",
    )
    run.add_argument("topology", type=Path, help="topology TOML file")
    run.add_argument("--data", type=Path, help="matrix file (rows are samples); default: topology")
    run.add_argument(
        "--broker", type=_broker_url, help="mqtt://HOST:PORT; default: start a local Mosquitto"
    )
    run.add_argument(
        "--rate", type=_positive_float, help="samples/s (default: as fast as possible)"
    )
    run.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    run.add_argument(
        "--timeout",
        type=_positive_float,
        default=60.0,
        help="seconds to wait, once every reading is sent, for the root to cover every "
        "reading (default 60; the replay itself is not bounded: see --rate)",
    )
    run.add_argument(
        "--workers",
        type=_positive_int,
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
        "(pip install 'edge-runtime[plot]')",
    )

    agent = sub.add_parser(
        parents=[common, connection],
        name="agent",
        help="run one node of a topology (what a device runs)",
    )
    agent.add_argument("--topology", type=Path, required=True)
    agent.add_argument("--node", required=True, help="node id in the topology")
    agent.add_argument("--broker", type=_broker_url, default="mqtt://127.0.0.1:1883")
    agent.add_argument("--n-features", type=_positive_int, help="reading width (default: learnt)")
    agent.add_argument(
        "--state-dir",
        type=Path,
        help="folder for the leaf's checkpoint (<node>.ckpt); default: no checkpoint",
    )
    agent.add_argument(
        "--checkpoint-every",
        type=_positive_int,
        default=1,
        help="checkpoint after this many blocks (and when idle, and on exit); default 1",
    )
    agent.add_argument(
        "--startup-timeout",
        type=_positive_float,
        default=30.0,
        help="seconds to reach the broker the first time before giving up (default 30)",
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
    replay.add_argument("--rate", type=_positive_float)
    replay.add_argument(
        "--window",
        type=_positive_int,
        default=100_000,
        help="readings per leaf kept until the leaf confirms them durable (default 100000)",
    )
    replay.add_argument(
        "--batch-size",
        type=_positive_int,
        default=DEFAULT_BATCH_SIZE,
        help=f"readings per message (default {DEFAULT_BATCH_SIZE}; 1: one per message)",
    )
    replay.add_argument(
        "--confirm-timeout",
        type=_positive_float,
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
    acl.add_argument("topology", type=Path, help="topology TOML file")
    acl.add_argument("--reader", action="append", default=[], help="a read-only user (repeatable)")
    acl.add_argument("--replay-user", default="replay", help="user that publishes readings")
    acl.add_argument("--no-replay", action="store_true", help="no replay / gateway user")
    acl.add_argument(
        "--bridge", action="append", default=[], help="node id behind a bridged site broker"
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
        "--central", required=True, help="the central broker, mqtt://HOST:PORT or mqtts://..."
    )
    bridge.add_argument("--name", help="connection name (default: SITE-to-central)")
    bridge.add_argument(
        "--username", help="the bridge's user on the central broker (the ACL's: bridge-SITE)"
    )
    bridge.add_argument(
        "--password-file", type=Path, help="file whose first line is that user's password"
    )
    bridge.add_argument(
        "--ca-file", help="absolute path of the central broker's CA certificate (mqtts://)"
    )
    bridge.add_argument("--cert-file", help="absolute path of the bridge's client certificate")
    bridge.add_argument("--key-file", help="absolute path of the bridge's private key")

    watch = sub.add_parser(
        parents=[common, connection], name="watch", help="follow the root's global model"
    )
    watch.add_argument("--topology", type=Path, required=True)
    watch.add_argument("--broker", type=_broker_url, required=True)
    watch.add_argument("--json", action="store_true", help="one JSON object per root update")
    watch.add_argument("--until-samples", type=_positive_int, help="exit 0 once covered")
    watch.add_argument(
        "--timeout",
        type=_positive_float,
        help="exit 1 after this many seconds unless --until-samples was reached first "
        "(also without --until-samples)",
    )
    watch.add_argument(
        "--stale-after",
        type=_positive_float,
        default=STALE_AFTER_S,
        help="an online node silent for this many seconds is shown as stale "
        f"(default {STALE_AFTER_S:g}: 2.5 status heartbeats)",
    )
    add_dashboard_parser(sub, parents=[common, connection])
    return parser


# ---------------------------------------------------------------------------- helpers
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


def _discovery_prefix(args: argparse.Namespace, topology: Topology) -> str:
    """``--discovery-prefix``, checked (one line on a bad prefix)."""
    try:
        discovery_messages(topology, discovery_prefix=args.discovery_prefix, node_ids=[])
    except ValueError as exc:
        raise CliError(f"--discovery-prefix: {exc}") from None
    return str(args.discovery_prefix)


def _topology(path: Path) -> Topology:
    return load_topology(path)


def _data(topology: Topology, path: Path | None) -> np.ndarray:
    if path is not None:
        return load_dataset(path)
    source = topology.dataset_path() or topology.dataset
    if source is None:
        raise CliError(f"topology {topology.name!r} names no dataset; pass --data PATH")
    return load_dataset(source)


def _warn_narrow_data(topology: Topology, data: np.ndarray) -> None:
    """One line on stderr when the data has fewer columns than a node's configured rank:
    the subspaces then have at most that many directions."""
    if data.ndim != 2:
        return
    width = int(data.shape[1])
    rank = max(node.rank for node in topology.nodes.values())
    if width < rank:
        print(
            f"edge-runtime: warning: the data has {width} columns, fewer than the rank {rank} "
            f"of topology {topology.name!r}: the model will have rank at most {width}",
            file=sys.stderr,
        )


def _settings(url: str, args: argparse.Namespace) -> AgentSettings:
    """Broker address, credentials (flags, else the environment) and TLS files."""
    address = parse_broker_url(url)
    if address.tls and args.ca_file is None:
        raise CliError(f"{url!r} asks for TLS: give the broker's CA certificate with --ca-file")
    for flag in ("ca_file", "cert_file", "key_file", "password_file"):
        path = getattr(args, flag)
        if path is not None and not path.is_file():
            raise CliError(f"--{flag.replace('_', '-')} {str(path)!r}: no such file")
    password = None
    if args.password_file is not None:
        try:
            password = read_password_file(args.password_file)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    try:
        settings = AgentSettings(
            host=address.host,
            port=address.port,
            username=args.username,
            password=password,
            ca_file=args.ca_file,
            cert_file=args.cert_file,
            key_file=args.key_file,
        ).with_credentials_from_env()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"{ENV_PASSWORD_FILE}: {exc.strerror}: {exc.filename!r}") from None
    settings.tls_context()  # fail now, in one line, on unreadable certificates
    return settings


def _model_line(model: SubspaceMessage) -> dict[str, object]:
    return {
        "n_samples": model.n_samples,
        "rank": model.rank,
        "leaves_covered": sorted(k for k, v in model.provenance.items() if v > 0),
        "seq": model.seq,
        "epoch": model.epoch,
        "timestamp": model.timestamp,
        "privacy": privacy_of(model),
    }


def _privacy_text(privacy: Mapping[str, float | str] | None) -> str:
    """The guarantee line of `run`: budget per reading, neighbouring relation, mechanism,
    clip norm (`privacy_of`)."""
    if privacy is None:
        return "none (some leaf publishes without noise)"
    return (
        f"({privacy['epsilon']:g}, {privacy['delta']:g})-DP per reading, "
        f"{privacy['neighbours']} neighbours, mechanism {privacy['mechanism']}, "
        f"clip norm {privacy['clip_norm']:g}"
    )


class _ProgressLine:
    """One self-overwriting status line on a terminal, at most 10 times a second."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._last = 0.0

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        if not self.enabled or now - self._last < 0.1:
            return
        self._last = now
        sys.stderr.write(
            f"\rreplayed {p.samples_replayed}/{p.samples_total} samples | "
            f"leaves reporting {p.leaves_reporting}/{p.leaves_total} | "
            f"root rank {p.root_rank}, n={p.root_n_samples} | {p.elapsed_s:.1f} s  "
        )
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _print_summary(s: RunSummary) -> None:
    ratio = s.payload_bytes / s.raw_bytes if s.raw_bytes else float("nan")
    lines = [
        f"samples replayed    {s.samples} x {s.n_features} features",
        f"leaves reporting    {s.leaves_reporting}/{s.leaves_total}",
        f"root rank           {s.rank} (covers {s.root_n_samples} samples)",
        f"error ratio         {s.error_ratio:.6f}  (vs offline rank-{s.rank} SVD; 1.0 optimal)",
        f"MQTT messages       {s.messages} ({s.payload_bytes} payload bytes, "
        f"{ratio:.2f}x the {s.raw_bytes} bytes of the raw readings)",
        f"sensor messages     {s.sensor_messages} ({s.sensor_bytes} bytes)",
        f"merges              {s.merges}"
        if s.rounds is None
        else f"rounds              {s.rounds} (FedPower; the root's model is round {s.rounds})",
        f"rejected messages   {s.rejects}",
        f"privacy             {_privacy_text(s.privacy)}",
        f"throughput          {_maybe(s.readings_per_s, '.0f')} readings/s "
        "(first reading sent to the root covering every reading)",
        f"latency to root     p50 {_maybe(s.latency_p50_s, '.3f')} s, "
        f"p95 {_maybe(s.latency_p95_s, '.3f')} s",
        f"re-sent readings    {s.resent}",
        f"undelivered         {s.undelivered} snapshots",
        f"peak memory         {s.peak_rss_bytes / 2**20:.0f} MiB ({_hosts_text(s.workers)})",
        f"wall time           {s.wall_s:.2f} s",
    ]
    print("\n".join(lines))


def _maybe(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _hosts_text(workers: int) -> str:
    if workers == 1:
        return "this process, hosting every agent"
    return f"sum over this process and {workers} worker processes hosting the agents"


# ---------------------------------------------------------------------------- commands
async def _cmd_run(args: argparse.Namespace) -> int:
    if args.plot is not None:  # up front: not after a run of minutes
        try:
            require_matplotlib()
            prepare_dir(args.plot)
        except PlotError as exc:
            raise CliError(str(exc)) from None
    topology = _topology(args.topology)
    workers = min(args.workers, len(topology.nodes))
    needed = run_descriptors_needed(len(topology.nodes), workers, local_broker=not args.broker)
    try:  # first: before loading data, and before a local Mosquitto inherits our limit
        ensure_descriptors(needed)
    except LimitError as exc:
        raise CliError(str(exc)) from None
    data = _data(topology, args.data)
    _warn_narrow_data(topology, data)
    with ExitStack() as stack:
        if args.broker:
            settings = _settings(args.broker, args)
        else:
            broker = stack.enter_context(LocalMosquitto())
            settings = AgentSettings(host=broker.host, port=broker.port)
        line = _ProgressLine(enabled=not args.json and sys.stderr.isatty())
        recorder = None if args.plot is None else RunRecorder(data)
        try:
            summary = await run_topology(
                topology,
                data,
                settings,
                rate=args.rate,
                settle_timeout_s=args.timeout,
                progress=line,
                workers=workers,
                log_level=args.log_level or DEFAULT_LOG_LEVEL["run"],
                recorder=recorder,
            )
        except WorkerError as exc:
            raise CliError(str(exc), EXIT_FAILED) from None
        finally:
            line.close()
    plots: dict[str, str] = {}
    if recorder is not None:
        try:
            plots = dict(describe(_write_plots(recorder, args.plot), recorder))
        except PlotError as exc:
            raise CliError(str(exc), EXIT_FAILED) from None
    if args.json:
        print(json.dumps(summary.as_dict() | ({"plots": list(plots)} if recorder else {})))
    else:
        _print_summary(summary)
        for i, (path, what) in enumerate(plots.items()):
            print(f"{'plots' if i == 0 else '':<20}{path}  ({what})")
    if not summary.covered:
        print(
            f"edge-runtime: error: the root covers {summary.leaves_reporting} of "
            f"{summary.leaves_total} leaves {args.timeout:g} s after the last reading was sent "
            "(--timeout)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK


async def _cmd_agent(args: argparse.Namespace) -> int:
    topology = _topology(args.topology)
    if args.node not in topology.nodes:
        known = ", ".join(topology.nodes)
        raise CliError(f"node {args.node!r} is not in topology {topology.name!r} (nodes: {known})")
    settings = _settings(args.broker, args)
    if args.homeassistant_remove:
        prefix = _discovery_prefix(args, topology)
        try:
            n = await remove_discovery(topology, args.node, settings, prefix)
        except aiomqtt.MqttError as exc:
            raise CliError(f"cannot remove the discovery configs: {exc}", EXIT_FAILED) from None
        print(f"removed {n} Home Assistant discovery configs of {args.node!r}", file=sys.stderr)
        return EXIT_OK
    if args.homeassistant:
        settings = replace(settings, discovery_prefix=_discovery_prefix(args, topology))
    if args.state_dir is not None and not args.state_dir.is_dir():
        raise CliError(f"--state-dir {str(args.state_dir)!r}: no such folder")
    options = {}
    if topology.is_leaf(args.node):
        options = {"state_dir": args.state_dir, "checkpoint_every": args.checkpoint_every}
    agent = create_agent(topology, args.node, settings, n_features=args.n_features, **options)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, agent.stop)
    try:
        async with agent:
            try:
                await agent.wait_connected(args.startup_timeout)
            except TimeoutError:
                agent.stop()
                tries = agent.failed_attempts
                raise CliError(
                    f"cannot reach the broker at {args.broker} within {args.startup_timeout:g} "
                    f"s ({tries} attempt{'s' if tries != 1 else ''}, last error: "
                    f"{agent.last_connect_error})",
                    EXIT_FAILED,
                ) from None
            await agent._stop.wait()
    except SourceError as exc:  # the leaf's local source cannot run at all
        raise CliError(f"node {args.node!r}: {exc}", EXIT_FAILED) from None
    return EXIT_OK


async def _cmd_replay(args: argparse.Namespace) -> int:
    topology = _topology(args.topology)
    data = _data(topology, args.data)
    settings = _settings(args.broker, args)
    try:
        replayer = Replayer(
            topology,
            data,
            settings,
            rate=args.rate,
            resend=not args.no_resend,
            window=args.window,
            confirm_timeout_s=args.confirm_timeout,
            batch_size=args.batch_size,
            run_id=args.resume,
            resume=args.resume is not None,
        )
    except ValueError as exc:
        prefix = "--resume: " if args.resume is not None else ""
        raise CliError(f"{prefix}{exc}") from None
    if args.wait_online > 0:
        missing = await wait_online(topology, topology.leaves(), settings, args.wait_online)
        if missing:
            raise CliError(
                f"leaves not online after {args.wait_online:g} s: {', '.join(missing)}",
                EXIT_FAILED,
            )
    stats = await replayer.run()
    unconfirmed = sum(stats.unconfirmed.values())
    summary = {
        "run": stats.run_id,
        "samples": stats.rows,
        "sent": stats.rows,
        "confirmed": stats.confirmed,
        "rejected": stats.rejected,
        "unconfirmed_total": unconfirmed,
        "skipped": stats.skipped,
        "messages": stats.messages,
        "payload_bytes": stats.payload_bytes,
        "resent": stats.resent,
        "reconnects": stats.reconnects,
        "unconfirmed": dict(stats.unconfirmed),
        "wall_s": round(stats.wall_s, 3),
    }
    print(json.dumps(summary), flush=True)
    if unconfirmed or (args.no_resend and stats.rejected) or stats.error:
        why = (
            f"broker unreachable ({stats.error})"
            if stats.error
            else f"nothing more confirmed within {args.confirm_timeout:g} s"
        )
        leaves = ", ".join(f"{k} {v}" for k, v in stats.unconfirmed.items())
        raise CliError(
            f"replay run {stats.run_id} incomplete: sent {stats.rows}, confirmed "
            f"{stats.confirmed}, rejected {stats.rejected}, unconfirmed {unconfirmed}"
            + (f" ({leaves})" if leaves else "")
            + f"; {why}",
            EXIT_FAILED,
        )
    return EXIT_OK


async def _cmd_watch(args: argparse.Namespace) -> int:
    topology = _topology(args.topology)
    settings = _settings(args.broker, args)

    watcher = ModelWatcher(topology, settings, watch_nodes=True, stale_after_s=args.stale_after)

    def show(model: SubspaceMessage) -> None:
        line = _model_line(model)
        line["nodes"] = watcher.node_states()
        quarantined = watcher.quarantined()
        line["quarantined"] = quarantined
        if args.json:
            print(json.dumps(line), flush=True)
            return
        states = line["nodes"]
        assert isinstance(states, dict)
        down = [f"{node} {state}" for node, state in states.items() if state != "online"]
        print(
            f"root n_samples={line['n_samples']} rank={line['rank']} "
            f"leaves={len(line['leaves_covered'])} seq={line['seq']}"  # type: ignore[arg-type]
            + (
                ""
                if model.privacy is None
                else f" privacy=({model.privacy.epsilon:g}, {model.privacy.delta:g})-DP"
                f" mechanism={model.privacy.mechanism} neighbours={model.privacy.neighbours}"
            )
            + f" | nodes online {len(states) - len(down)}/{len(states)}"
            + (f" ({', '.join(down)})" if down else "")
            + (
                " | quarantined: " + ", ".join(f"{c} ({r})" for c, r in quarantined.items())
                if quarantined
                else ""
            ),
            flush=True,
        )

    watcher.on_update = show
    target = args.until_samples
    timeout = args.timeout if args.timeout is not None else math.inf
    async with watcher:
        try:
            await watcher.wait_until(
                lambda m: target is not None and m is not None and m.n_samples >= target, timeout
            )
        except TimeoutError:
            have = 0 if watcher.model is None else watcher.model.n_samples
            goal = "" if target is None else f" of {target}"
            raise CliError(
                f"watch timed out after {args.timeout:g} s (--timeout): "
                f"the root covers {have}{goal} samples",
                EXIT_FAILED,
            ) from None
    return EXIT_OK


async def _cmd_acl(args: argparse.Namespace) -> int:
    topology = _topology(args.topology)
    text = generate_acl(
        topology,
        readers=args.reader,
        replay=None if args.no_replay else args.replay_user,
        bridges=args.bridge,
        homeassistant=_discovery_prefix(args, topology) if args.homeassistant else None,
    )
    sys.stdout.write(text)
    return EXIT_OK


async def _cmd_bridge(args: argparse.Namespace) -> int:
    topology = _topology(args.topology)
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


COMMANDS = {
    "run": _cmd_run,
    "agent": _cmd_agent,
    "replay": _cmd_replay,
    "watch": _cmd_watch,
    "acl": _cmd_acl,
    "bridge": _cmd_bridge,
    "dashboard": cmd_dashboard,
}
DEFAULT_LOG_LEVEL = dict.fromkeys(COMMANDS, "warning") | {"agent": "info"}


def _innermost(exc: BaseException) -> BaseException:
    """The first leaf of nested exception groups (TaskGroup wraps errors in groups)."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``edge-runtime``; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        configure_logging(args.log_level or DEFAULT_LOG_LEVEL[args.command])
        # Small matrices: one BLAS thread is faster and leaves the other core to the loop.
        with threadpool_limits(limits=1):
            return asyncio.run(COMMANDS[args.command](args))
    except KeyboardInterrupt:
        return 130
    except Exception as raised:
        exc = _innermost(raised)
        if isinstance(exc, CliError):
            message, code = str(exc), exc.code
        elif isinstance(exc, TopologyError | DatasetError | BrokerError | AclError | ValueError):
            message, code = str(exc), EXIT_USAGE
        elif isinstance(exc, ssl.SSLError):
            message, code = f"TLS: {exc}", EXIT_USAGE
        elif isinstance(exc, aiomqtt.MqttError | OSError):
            message, code = f"cannot talk to the MQTT broker: {exc}", EXIT_FAILED
        else:
            raise
    print(f"edge-runtime: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
