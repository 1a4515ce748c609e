"""How an aggregator's children release what it merges: the aggregator's release strategy.

A leaf releases its readings through one mechanism (``none``, ``gaussian``, ``fpca-eq8`` or
``gaussian-secagg``). For the first three each leaf publishes its own snapshot and the
aggregator merges it as it is: `DirectRelease`, a strategy with nothing to do. For
``gaussian-secagg`` the leaves' noisy increments reach the aggregator only as a secure sum
over the site, slot after slot, and the site's estimate enters the merge as one pseudo-child:
`edge_runtime.agents.aggregator.core.secure_sum.SecureSumRelease`, which holds the site's
`SecAggSite`. `AggregatorCore` holds one strategy and calls it through `AggregatorRelease`
only, so the core has no branch on the mechanism.

No I/O, no clock: time comes in as an argument, actions go out
(`edge_runtime.agents.common.core.actions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from edge_runtime.agents.common.core.actions import Action, Publish, WriteCheckpoint
from edge_runtime.wire import SubspaceMessage

__all__ = ["AggregatorRelease", "DirectRelease", "ReleaseStep"]


@dataclass
class ReleaseStep:
    """What a release strategy decided at one step of its aggregator.

    Attributes
    ----------
    actions : list of Action
        What to carry out first, in order (e.g. write the site's running sum, then publish a
        slot's roster or outcome).
    snapshot : SubspaceMessage or None
        A new snapshot of the strategy's pseudo-child (the site's estimate) for the merge.
    ended : bool
        Something the status document reports ended (a slot): it goes out at once.
    """

    actions: list[Action] = field(default_factory=list)
    snapshot: SubspaceMessage | None = None
    ended: bool = False


class AggregatorRelease(Protocol):
    """The interface `AggregatorCore` calls its release strategy through.

    Every time is seconds on the caller's monotonic clock; ``wall`` is seconds since the
    Unix epoch, stamped on the messages made at that step.
    """

    def children(self, declared: list[str]) -> list[str]:
        """The core's children given the topology's ``declared`` ones, in order."""
        ...

    def step(self, now: float, wall: float) -> ReleaseStep:
        """What the strategy does at ``now`` (`ReleaseStep`)."""
        ...

    def next_wakeup(self, now: float) -> float:
        """When `step` has work next without new input (``inf``: never)."""
        ...

    def published(self, action: Publish, now: float) -> None:
        """The executor carried out one of `step`'s `Publish` actions."""
        ...

    def checkpoint_written(self, action: WriteCheckpoint, now: float) -> None:
        """The executor wrote one of `step`'s `WriteCheckpoint` actions."""
        ...

    def checkpoint_failed(self, action: WriteCheckpoint, now: float, error: str) -> int:
        """Writing it failed (the previous file stays); returns the failures so far."""
        ...

    def status_extra(self) -> dict[str, object]:
        """The strategy's entries of the status document's ``extra``."""
        ...


class DirectRelease:
    """Children that publish their own snapshots (mechanisms ``none``, ``gaussian`` and
    ``fpca-eq8``): merged as they are, so the strategy adds nothing."""

    def children(self, declared: list[str]) -> list[str]:
        """``declared`` as it is."""
        return list(declared)

    def step(self, now: float, wall: float) -> ReleaseStep:
        """Nothing to do."""
        return ReleaseStep()

    def next_wakeup(self, now: float) -> float:
        """Never."""
        return float("inf")

    def published(self, action: Publish, now: float) -> None:
        """Never asked for one."""
        raise ValueError(f"a direct release publishes nothing, got {action.kind!r}")

    def checkpoint_written(self, action: WriteCheckpoint, now: float) -> None:
        """Never asked for one."""
        raise ValueError(f"a direct release writes nothing, got {action.what!r}")

    def checkpoint_failed(self, action: WriteCheckpoint, now: float, error: str) -> int:
        """Never asked for one."""
        raise ValueError(f"a direct release writes nothing, got {action.what!r}")

    def status_extra(self) -> dict[str, object]:
        """Nothing to report."""
        return {}
