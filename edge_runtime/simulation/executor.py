"""The simulation's executor: a core's actions carried out against the virtual broker and disk.

A core's ``step`` decides what happens at ``now`` and returns it as actions, in order
(`edge_runtime.agents.common.core.actions`). On a device the shell carries them out
against MQTT and the disk (`LeafAgent.carry_out`, `AggregatorAgent.carry_out`); in the
simulation `carry_out` does, against a `VirtualIO`: every `Publish` goes to the virtual
broker, every `WriteCheckpoint` to the node's virtual state directory, and each outcome is
reported back to the core as the shells report it (`published`, `checkpoint_written`), so
the core decides what follows exactly as on a device. A `Wake` needs nothing here: the
caller sleeps until the core's ``next_wakeup``, as the shells' work loops do. A write
never fails in the simulation.

`edge_runtime.simulation.engine.Simulation` is the `VirtualIO` of a whole run (its broker
delivers after seeded delays, its state directories restore crashed leaves) and carries out
every leaf's tick and every aggregator's step through `carry_out`; anything else with
`publish` and `write` (a test's record of one node) can stand in for it, so one step's
actions can be carried out and compared alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from edge_runtime.agents.common.core.actions import Action, Publish, WriteCheckpoint

__all__ = ["Reporting", "VirtualIO", "carry_out"]

NodeT = TypeVar("NodeT", contravariant=True)


class VirtualIO(Protocol[NodeT]):
    """What the simulation's executor carries actions out against: a virtual broker and
    the nodes' virtual state directories. ``node`` is the caller's handle of the node whose
    core decided the action (the engine's `SimNode`)."""

    def publish(self, node: NodeT, action: Publish) -> None:
        """Take ``action.message`` on the node's topic ``action.kind`` (retained if
        ``action.retain``); the broker acknowledges at once."""
        ...

    def write(self, node: NodeT, action: WriteCheckpoint) -> None:
        """Keep ``action.state`` as the node's state file ``action.what`` (it replaces the
        previous one)."""
        ...


class Reporting(Protocol):
    """What the executor reports to a core (`LeafCore`, `AggregatorCore`, a FedPower core):
    the outcome of each action it carried out, at ``now`` (seconds, virtual time)."""

    def published(self, action: Publish, now: float) -> None:
        """The broker acknowledged ``action``."""
        ...

    def checkpoint_written(self, action: WriteCheckpoint, now: float) -> None:
        """``action``'s state is on the disk."""
        ...


def carry_out(
    io: VirtualIO[NodeT],
    node: NodeT,
    core: Reporting,
    actions: Iterable[Action],
    now: float,
) -> list[Action]:
    """Carry out ``actions`` of ``node``'s ``core`` in order against ``io``, reporting each
    outcome to ``core`` at ``now`` (seconds, virtual time).

    A `Publish` is handed to ``io.publish``, then reported (`Reporting.published`); a
    `WriteCheckpoint` to ``io.write``, then reported (`Reporting.checkpoint_written`); a
    `Wake` is carried out by the caller's scheduling (nothing is done here).

    Returns
    -------
    list of Action
        The actions carried out, in the order they were (all of ``actions``): what the node
        did at this step, comparable with a shell's (`describe`).
    """
    done: list[Action] = []
    for action in actions:
        if isinstance(action, WriteCheckpoint):
            io.write(node, action)
            core.checkpoint_written(action, now)
        elif isinstance(action, Publish):
            io.publish(node, action)
            core.published(action, now)
        done.append(action)
    return done
