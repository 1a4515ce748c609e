"""What a core decides at ``now``, for its caller to carry out (the sans-I/O pattern of h11).

A core's ``step(now)`` returns a list of actions in the order they must happen; it performs
none of them. The asyncio shell carries them out against MQTT and the disk, the fleet
simulation (`edge_runtime.simulation.engine`) against its virtual broker, and a test against
a list. Each caller reports the outcome back to the core (for example
``core.published(action, now)`` once the broker acknowledged a `Publish`, or
``core.checkpoint_written(action, now)`` / ``core.checkpoint_failed(now)``),
so what follows an action's completion is decided by the core too. The order of a tick is
therefore written once, in the core, and the simulation runs what a device runs.

Actions are frozen dataclasses; they compare equal by value, so two executors fed the same
trace can be checked for the same sequence of actions (`describe` gives a short, comparable
form without the payloads' bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Action", "Publish", "Wake", "WriteCheckpoint", "describe"]


@dataclass(frozen=True, slots=True)
class Publish:
    """Publish ``message`` on the node's topic ``kind``.

    Attributes
    ----------
    kind : str
        The topic relative to the node's path (`edge_runtime.topology.topics`):
        ``"subspace"``, ``"confirm"``, ``"status"``, ``"scores"``, ``"model"``, or a secure
        aggregation topic (``"secagg/<name>"``).
    message : object
        The typed wire message (`SubspaceMessage`, `ConfirmMessage`, a secure-aggregation
        message, a scores document's bytes, ...); the executor encodes it
        (`edge_runtime.wire`). None for ``"status"``: the status document holds fields only
        the shell knows (uptime, a local source's state), so the executor composes it.
    retain : bool
        Whether the broker keeps it as the topic's retained message.
    reason : str
        Why the core publishes it now (a `PublishPolicy` reason such as ``"moved"`` or
        ``"max_interval"``, ``"reconnect"``, ``"shutdown"``), for counters and logs.
    """

    kind: str
    message: object
    retain: bool = True
    reason: str = ""


@dataclass(frozen=True, slots=True)
class WriteCheckpoint:
    """Write the node's durable state (a leaf's checkpoint, a secure-aggregation site's
    running sum or a leaf's ledger) to its state directory, atomically.

    Attributes
    ----------
    what : str
        Which state file: ``"checkpoint"``, ``"secagg-site"``, ``"secagg-ledger"``.
    state : object
        What to write, as the core exported it (the executor serialises it).
    reason : str
        Why now (``"interval"``, ``"blocks"``, ``"idle"``, ``"shutdown"``, ...).
    """

    what: str
    state: object
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Wake:
    """Call ``step`` again at ``at`` (seconds on the caller's monotonic clock) at the latest;
    an input may wake the node earlier."""

    at: float


Action = Publish | WriteCheckpoint | Wake
"""Everything a core may ask of its caller."""


def describe(action: Action) -> tuple[object, ...]:
    """A short, comparable form of ``action``: its kind and the fields that identify it
    (for a `Publish` of a message with ``node_id``/``epoch``/``seq``, those), never the
    payload's bytes. Two executors fed the same trace give equal lists of descriptions."""
    if isinstance(action, Publish):
        message = action.message
        ident = tuple(
            getattr(message, name) for name in ("node_id", "seq") if hasattr(message, name)
        )
        return ("publish", action.kind, action.retain, action.reason, ident)
    if isinstance(action, WriteCheckpoint):
        return ("checkpoint", action.what, action.reason)
    if isinstance(action, Wake):
        return ("wake", round(action.at, 6))
    raise TypeError(f"not an action: {action!r}")

