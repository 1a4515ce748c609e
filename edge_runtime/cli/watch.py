"""The commands that follow a running tree from its broker: ``watch`` (a line per root
model) and ``dashboard`` (a live web page; needs the ``dashboard`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import math
import sys

from edge_runtime import __version__
from edge_runtime.cli import EXIT_FAILED, EXIT_OK, CliError
from edge_runtime.cli.inputs import broker_settings
from edge_runtime.cli.output import model_line
from edge_runtime.monitor import MembershipEvent, ModelWatcher, connection_problem
from edge_runtime.topology import load_topology
from edge_runtime.wire import SubspaceMessage

__all__ = ["cmd_dashboard", "cmd_watch", "membership_line"]


def membership_line(event: MembershipEvent) -> str:
    """``watch``'s line for a change of an aggregator's children, e.g. ``site-0 joined:
    pi-09 (joins=1)``, ``site-0 forgot: pi-09 n_samples=50 (forgets=1)``, ``site-a
    quarantined: pi-03 (energy_bound)``, ``site-a released: pi-03``."""
    agg, child = event.aggregator, event.child
    if event.kind == "joined":
        return f"{agg} joined: {child} (joins={event.joins})"
    if event.kind == "forgotten":
        return f"{agg} forgot: {child} n_samples={event.n_samples} (forgets={event.forgets})"
    if event.kind == "quarantined":
        return f"{agg} quarantined: {child} ({event.reason})"
    return f"{agg} {event.kind}: {child}"


async def cmd_watch(args: argparse.Namespace) -> int:
    """``edge-runtime watch``: one line (or ``--json`` object) on stdout per root model,
    with every node's liveness, the quarantined clients and the aggregators' joins and
    forgets; and one (``--json``: an object with an ``"event"`` key, see
    `MembershipEvent.to_json`) per child that joins an aggregator, is forgotten,
    quarantined or released (`membership_line`), as their status documents show. A lost
    connection is re-opened (one line on stderr says why it was lost, one that it is back).

    Returns
    -------
    int
        0 once the root covers ``--until-samples`` samples.

    Raises
    ------
    CliError
        Exit 1 when ``--timeout`` seconds pass first (naming the samples covered).
    """
    topology = load_topology(args.topology)
    settings = broker_settings(args.broker, args)

    problem: list[str] = []  # the last connection problem shown, until reconnected

    def connection(error: BaseException | None) -> None:
        """One line on stderr when the connection is lost (and when a reconnection fails
        differently), one when it is back; never a traceback."""
        if error is None:
            problem.clear()
            print(f"edge-runtime watch: reconnected to {args.broker}", file=sys.stderr, flush=True)
            return
        line = connection_problem(error, settings)
        if problem and problem[-1] == line:
            return
        problem[:] = [line]
        print(f"edge-runtime watch: {line}; reconnecting", file=sys.stderr, flush=True)

    watcher = ModelWatcher(
        topology,
        settings,
        watch_nodes=True,
        stale_after_s=args.stale_after,
        on_connection=connection,
    )

    def member(event: MembershipEvent) -> None:
        text = json.dumps(event.to_json()) if args.json else membership_line(event)
        print(text, flush=True)

    def show(model: SubspaceMessage) -> None:
        states = watcher.node_states()
        quarantined = watcher.quarantined()
        tracked = watcher.tracked()
        shown = watcher.membership.shown()
        line = model_line(model) | {
            "tracked": tracked,
            "nodes": states,
            "quarantined": quarantined,
            "membership": {agg: m.to_json() for agg, m in shown.items()},
        }
        if args.json:
            print(json.dumps(line), flush=True)
            return
        down = [f"{node} {state}" for node, state in states.items() if state != "online"]
        print(
            f"root n_samples={line['n_samples']} rank={line['rank']}"
            + ("" if tracked is None else f" (of {tracked} tracked)")
            + " "
            + f"leaves={len(line['leaves_covered'])} seq={line['seq']}"  # type: ignore[arg-type]
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
            )
            + (" | joins={} forgets={}".format(*watcher.membership.totals()) if shown else ""),
            flush=True,
        )

    watcher.on_update = show
    watcher.on_membership = member
    target = args.until_samples
    timeout = args.timeout if args.timeout is not None else math.inf
    async with watcher:
        try:
            await watcher.wait_until(
                lambda m: target is not None and m is not None and m.n_samples >= target,
                timeout,
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


async def cmd_dashboard(args: argparse.Namespace) -> int:
    """Run the dashboard of ``args`` (``topology``, ``broker``, ``host``, ``port``,
    ``stale_after``) until interrupted; 0 on a clean stop.

    Raises
    ------
    CliError
        If aiohttp is missing, the topology or broker settings are invalid, or the
        address cannot be listened on (in use, not available, not permitted).
    """
    try:
        from edge_runtime.dashboard.server import serve_dashboard
    except ImportError as exc:
        raise CliError(
            f"the dashboard needs aiohttp ({exc.name or exc}): install the dashboard extra "
            "into this environment from the edge-runtime wheel file: "
            f"{sys.executable} -m pip install '/path/to/edge_runtime-{__version__}-py3-none-any"
            ".whl[dashboard]' (in a clone of the repository: pip install '.[dashboard]'; "
            "edge-runtime is not on PyPI)"
        ) from None
    topology = load_topology(args.topology)
    settings = broker_settings(args.broker, args)

    def ready(url: str) -> None:
        print(
            f"dashboard of {topology.name} on {url} (Ctrl-C stops)",
            file=sys.stderr,
            flush=True,
        )

    def problem(line: str | None) -> None:
        """One line on stderr per new broker problem (the page shows it too)."""
        text = f"broker {args.broker}: connected" if line is None else line
        print(f"edge-runtime dashboard: {text}", file=sys.stderr, flush=True)

    try:
        await serve_dashboard(
            topology,
            settings,
            args.host,
            args.port,
            stop=asyncio.Event(),
            stale_after_s=args.stale_after,
            on_ready=ready,
            on_problem=problem,
        )
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
        raise
    return EXIT_OK
