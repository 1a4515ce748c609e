"""Open-file limits: check, before opening N MQTT connections, that the OS allows them.

Every MQTT connection is one socket, so one file descriptor in our process and one in
the broker's (measured with aiomqtt 2.5 and Mosquitto 2.0: 100 agents add 100
descriptors to each). Past the soft ``RLIMIT_NOFILE`` a connect fails with EMFILE and
Mosquitto refuses clients, which looks like a hang, so `edge-runtime run` checks
first: `descriptors_needed` counts, `ensure_descriptors` raises the soft limit up to
the hard limit when that is enough (no privilege needed) and otherwise raises
`LimitError` with one line saying how to raise it.

Margin (`descriptors_needed`): ``RESERVED_DESCRIPTORS`` (64) per process for what is
not a connection -- standard streams, the event loop's epoll and self-pipe, worker
pipes and sentinels, log, data and configuration files, Mosquitto's listeners and
persistence file (a Python process with an event loop holds 9 before connecting,
Mosquitto 7) -- plus 10 % of the connections (``CONNECTION_MARGIN_PERCENT``) for sockets
of a reconnect that overlap the old one while it closes.
"""

from __future__ import annotations

import math
import resource

from edge_runtime.errors import EdgeRuntimeError

__all__ = [
    "CONNECTION_MARGIN_PERCENT",
    "RESERVED_DESCRIPTORS",
    "LimitError",
    "descriptors_needed",
    "ensure_descriptors",
    "run_descriptors_needed",
]

RESERVED_DESCRIPTORS = 64
"""Descriptors a process may hold besides its MQTT connections."""

CONNECTION_MARGIN_PERCENT = 10
"""Extra descriptors, in percent of the connections, for overlapping reconnects."""


class LimitError(EdgeRuntimeError, RuntimeError):
    """The OS limit is too low for the run; the message says how to raise it (one line)."""


def descriptors_needed(connections: int) -> int:
    """File descriptors a process needs to hold ``connections`` MQTT connections.

    ``connections`` plus ``CONNECTION_MARGIN_PERCENT`` % of them (rounded up), plus
    ``RESERVED_DESCRIPTORS``.

    Raises
    ------
    ValueError
        If ``connections`` is negative.
    """
    if connections < 0:
        raise ValueError(f"connections must be >= 0, got {connections}")
    margin = -(-connections * CONNECTION_MARGIN_PERCENT // 100)  # ceiling, in integers
    return connections + margin + RESERVED_DESCRIPTORS


def run_descriptors_needed(agents: int, workers: int, *, local_broker: bool) -> int:
    """Descriptors the busiest process of an ``edge-runtime run`` needs.

    The limit is per process and inherited by the worker processes and by a Mosquitto
    that `run` starts, so the check is against the largest of: the broker (every
    connection: the agents, the replay, the model watcher and the client that clears
    the retained messages), this process (those three clients, plus every agent when
    ``workers`` is 1) and the busiest worker (``ceil(agents / workers)`` agents).

    Parameters
    ----------
    agents : int
        Nodes of the topology (one MQTT connection each).
    workers : int
        Processes hosting the agents; 1 hosts them in this process.
    local_broker : bool
        Whether `run` starts the broker itself (it then inherits our limit).

    Raises
    ------
    ValueError
        If ``agents`` is negative or ``workers`` below 1.
    """
    if agents < 0 or workers < 1:
        raise ValueError(f"need agents >= 0 and workers >= 1, got {agents}, {workers}")
    clients = 3  # replay, model watcher, clear_retained
    per_process = [clients + agents if workers == 1 else clients]
    if workers > 1:
        per_process.append(math.ceil(agents / workers))
    if local_broker:
        per_process.append(clients + agents)
    return max(descriptors_needed(n) for n in per_process)


def ensure_descriptors(needed: int) -> int:
    """Make the soft ``RLIMIT_NOFILE`` at least ``needed``; return the limit now in force.

    A soft limit below ``needed`` is raised to the hard limit when the hard limit is at
    least ``needed`` (to ``needed`` when the hard limit is unlimited); processes started
    afterwards (workers, Mosquitto) inherit it.

    Raises
    ------
    LimitError
        If the hard limit is below ``needed``; the message names both numbers and the
        commands that raise the limit.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise LimitError(
            f"this run needs {needed} open files (one per MQTT connection plus a margin) "
            f"but the limit is {soft} (hard limit {hard}); raise it with `ulimit -n {needed}` "
            f"(as root if above the hard limit), `LimitNOFILE={needed}` in a systemd unit, "
            "or a nofile line in /etc/security/limits.conf"
        )
    new_soft = needed if hard == resource.RLIM_INFINITY else hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))
    except (ValueError, OSError) as exc:
        raise LimitError(
            f"this run needs {needed} open files but the limit is {soft} and raising it to "
            f"{new_soft} failed ({exc}); raise it with `ulimit -n {needed}` first"
        ) from None
    return new_soft
