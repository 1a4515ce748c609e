"""The shell side of an aggregator's release strategy: topics, files and logs around it.

`AggregatorAgent` holds one release shell next to its core's release strategy
(`edge_runtime.agents.aggregator.core.release`): `DirectShell` for children that publish
their own snapshots (it has nothing to subscribe to, publish or write), and for a
secure-aggregation site `edge_runtime.agents.aggregator.shell.secagg.SecAggAggregator`
(the site's topics, the retained outcome, its state file). The agent calls it through
`ReleaseShell` only, so it has no branch on the mechanism.
"""

from __future__ import annotations

from typing import Any, Protocol

from edge_runtime.agents.aggregator.core.release import AggregatorRelease, DirectRelease
from edge_runtime.agents.common.core.actions import Publish, WriteCheckpoint

__all__ = ["DirectShell", "ReleaseShell"]


class ReleaseShell(Protocol):
    """The interface `AggregatorAgent` calls its release shell through."""

    release: AggregatorRelease
    """The strategy the agent's core holds."""

    def subscriptions(self) -> list[str]:
        """Topic filters the strategy needs besides the children's snapshots."""
        ...

    def owns(self, topic: str) -> bool:
        """Whether an inbound message on ``topic`` is the strategy's."""
        ...

    def handle(self, topic: str, payload: object) -> bool:
        """Take an inbound message of `owns`; whether the agent's core should step soon.
        Never raises for the message (a bad one is a reject). The caller holds the core's
        lock."""
        ...

    async def prepare(self) -> None:
        """Before the first connection (read what the strategy resumes from)."""
        ...

    async def publish(self, client: Any, action: Publish) -> None:
        """Carry out one of the strategy's `Publish` actions."""
        ...

    async def write(self, action: WriteCheckpoint) -> str | None:
        """Carry out one of the strategy's `WriteCheckpoint` actions; the error (one line)
        if it failed, else None."""
        ...

    def write_failed(self, action: WriteCheckpoint, error: str, failures: int) -> None:
        """Log a failed write (``failures`` so far, as the core counts them)."""
        ...


class DirectShell:
    """The shell of `DirectRelease`: nothing to subscribe to, publish or write."""

    def __init__(self) -> None:
        self.release = DirectRelease()

    def subscriptions(self) -> list[str]:
        """None."""
        return []

    def owns(self, topic: str) -> bool:
        """Never."""
        return False

    def handle(self, topic: str, payload: object) -> bool:
        """Never called (`owns` is False)."""
        return False

    async def prepare(self) -> None:
        """Nothing to resume from."""
        return None

    async def publish(self, client: Any, action: Publish) -> None:
        """Never asked for one."""
        raise ValueError(f"a direct release publishes nothing, got {action.kind!r}")

    async def write(self, action: WriteCheckpoint) -> str | None:
        """Never asked for one."""
        raise ValueError(f"a direct release writes nothing, got {action.what!r}")

    def write_failed(self, action: WriteCheckpoint, error: str, failures: int) -> None:
        """Never asked for one."""
        raise ValueError(f"a direct release writes nothing, got {action.what!r}")
