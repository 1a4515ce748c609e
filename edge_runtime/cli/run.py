"""The commands that run the federation: ``run`` (the whole tree on this machine),
``agent`` (one node, as a device runs it) and ``replay`` (a dataset as live readings).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from contextlib import ExitStack
from dataclasses import replace

import aiomqtt

from edge_runtime.agents import create_agent
from edge_runtime.cli import EXIT_FAILED, EXIT_OK, CliError
from edge_runtime.cli.inputs import (
    broker_settings,
    discovery_prefix,
    load_data,
    login_refused,
    login_refused_line,
    warn_narrow_data,
)
from edge_runtime.settings import AgentSettings
from edge_runtime.sources import SourceError
from edge_runtime.topology import load_topology
from edge_runtime.topology.checks import check_node_id

__all__ = ["cmd_agent", "cmd_replay", "cmd_run"]


async def cmd_run(args: argparse.Namespace) -> int:
    """``edge-runtime run``: the whole topology on this machine (a local Mosquitto unless
    ``--broker``), the data replayed, then the summary (text, or ``--json``) on stdout.

    Returns
    -------
    int
        0 once the root covers every reading, 1 if it does not within ``--timeout``
        seconds after the last reading was sent (one line on stderr says so).

    Raises
    ------
    CliError
        On bad input (exit 2): plots impossible, too few file descriptors, no dataset;
        exit 1 if an agent host fails or the plots cannot be written.
    """
    # Imported here, not at the top: ``edge-runtime agent`` (a leaf on a Pi) does not need
    # them, and its import time and RSS count.
    from edge_runtime.broker.mosquitto import LocalMosquitto
    from edge_runtime.cli.output import ProgressLine, print_summary
    from edge_runtime.limits import LimitError, ensure_descriptors, run_descriptors_needed
    from edge_runtime.plots import (
        PlotError,
        RunRecorder,
        describe,
        prepare_dir,
        require_matplotlib,
        write_plots,
    )
    from edge_runtime.runner import run_topology, screen_data
    from edge_runtime.workers import WorkerError

    if args.plot is not None:  # up front: not after a run of minutes
        try:
            require_matplotlib()
            prepare_dir(args.plot)
        except PlotError as exc:
            raise CliError(str(exc)) from None
    topology = load_topology(args.topology)
    workers = min(args.workers, len(topology.nodes))
    needed = run_descriptors_needed(len(topology.nodes), workers, local_broker=not args.broker)
    try:  # first: before loading data, and before a local Mosquitto inherits our limit
        ensure_descriptors(needed)
    except LimitError as exc:
        raise CliError(str(exc)) from None
    data = load_data(topology, args.data)
    warn_narrow_data(topology, data)
    try:  # at once, in one line: data the leaves would reject whole
        screen_data(topology, data)
    except ValueError as exc:
        raise CliError(f"--data {args.data or 'motes-light'}: {exc}") from None
    with ExitStack() as stack:
        if args.broker:
            settings = broker_settings(args.broker, args)
        else:
            broker = stack.enter_context(LocalMosquitto())
            settings = AgentSettings(host=broker.host, port=broker.port)
        line = ProgressLine(enabled=not args.json and sys.stderr.isatty())
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
                log_level=args.log_level,
                recorder=recorder,
            )
        except WorkerError as exc:
            raise CliError(str(exc), EXIT_FAILED) from None
        finally:
            line.close()
    plots: dict[str, str] = {}
    if recorder is not None:
        try:
            plots = dict(describe(write_plots(recorder, args.plot), recorder))
        except PlotError as exc:
            raise CliError(str(exc), EXIT_FAILED) from None
    if args.json:
        print(json.dumps(summary.as_dict() | ({"plots": list(plots)} if recorder else {})))
    else:
        print_summary(summary)
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


async def cmd_agent(args: argparse.Namespace) -> int:
    """``edge-runtime agent``: run node ``--node`` until SIGINT or SIGTERM (exit 0), or
    with ``--homeassistant-remove`` remove its discovery configs and exit.

    The topology is ``--topology``'s file, else the one deployed on the broker under
    ``--prefix`` (`edge_runtime.cli.deploy.read_deployed`). Either way the agent follows
    ``<prefix>/config`` while it runs (`edge_runtime.agents.common.shell.config_watch`).

    Raises
    ------
    CliError
        If the node is not in the topology or ``--state-dir`` is no folder (exit 2; a leaf
        keeps its checkpoint there, a secure-aggregation site its running sum); without
        ``--topology``, if no topology is deployed within ``--startup-timeout`` seconds or it
        has no place for the node (exit 1); if
        the broker is not reached within ``--startup-timeout`` seconds, the discovery
        configs cannot be removed, or the leaf's local source cannot run (exit 1).
    """
    settings = broker_settings(args.broker, args)
    version = None
    if args.topology is not None:
        topology = load_topology(args.topology)
    else:  # the topology deployed on the broker (edge-runtime deploy)
        from edge_runtime.cli.deploy import read_deployed  # here: the other command's module

        check_node_id(args.node)
        topology, version = await read_deployed(
            settings, args.prefix, args.node, args.startup_timeout
        )
    if args.node not in topology.nodes:
        known = ", ".join(topology.nodes)
        raise CliError(f"node {args.node!r} is not in topology {topology.name!r} (nodes: {known})")
    if args.homeassistant_remove:
        from edge_runtime.agents.common.shell.discovery import remove_discovery

        prefix = discovery_prefix(args, topology)
        try:
            n = await remove_discovery(topology, args.node, settings, prefix)
        except aiomqtt.MqttError as exc:
            raise CliError(f"cannot remove the discovery configs: {exc}", EXIT_FAILED) from None
        print(
            f"removed {n} Home Assistant discovery configs of {args.node!r}",
            file=sys.stderr,
        )
        return EXIT_OK
    if args.homeassistant:
        settings = replace(settings, discovery_prefix=discovery_prefix(args, topology))
    if args.state_dir is not None and not args.state_dir.is_dir():
        raise CliError(f"--state-dir {str(args.state_dir)!r}: no such folder")
    options = {}
    if topology.is_leaf(args.node):
        options = {
            "checkpoint_every": args.checkpoint_every,
            "checkpoint_interval_s": args.checkpoint_interval,
        }
    agent = create_agent(
        topology,
        args.node,
        settings,
        n_features=args.n_features,
        state_dir=args.state_dir,  # a leaf's checkpoint; a secagg site's running sum
        **options,
    )
    if version is not None:
        agent.config_watch.started_from(agent, version)
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
                if login_refused(agent.last_connect_error):
                    raise CliError(
                        login_refused_line(args.broker, args, str(agent.last_connect_error))
                        + f" ({tries} attempt{'s' if tries != 1 else ''} in "
                        f"{args.startup_timeout:g} s)",
                        EXIT_FAILED,
                    ) from None
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


async def cmd_replay(args: argparse.Namespace) -> int:
    """``edge-runtime replay``: publish the data as the leaves' sensor readings, then one
    JSON summary line on stdout.

    Raises
    ------
    CliError
        If the replay's options are invalid (exit 2), or leaves are not online within
        ``--wait-online`` seconds or readings remain unconfirmed (exit 1).
    """
    # here: ``edge-runtime agent`` does not need them
    from edge_runtime.monitor import wait_online
    from edge_runtime.replay import Replayer

    topology = load_topology(args.topology)
    data = load_data(topology, args.data)
    settings = broker_settings(args.broker, args)
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
    leaves = topology.leaves()
    if args.wait_online > 0:
        missing = await wait_online(topology, leaves, settings, args.wait_online)
        if missing:
            raise CliError(
                f"leaves not online after {args.wait_online:g} s: {', '.join(missing)}",
                EXIT_FAILED,
            )
    # wait_online returns only after a connection (it raises when its first attempt fails):
    # the broker answered, so losing it before the replay's own connection (a restart) is
    # retried, not the wrong-address error that fails at once
    stats = await replayer.run(reached=args.wait_online > 0 and bool(leaves))
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
