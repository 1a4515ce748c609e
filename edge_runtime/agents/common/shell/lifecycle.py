"""An agent's lifecycle state and its traffic counters (`agent.Agent`, beside this module)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["AgentState", "AgentStats"]


class AgentState(enum.Enum):
    """Lifecycle of an agent: entered at most once."""

    UNOPENED = "unopened"
    RUNNING = "running"
    CLOSED = "closed"


@dataclass
class AgentStats:
    """Traffic counters of one agent (messages and payload bytes, both directions)."""

    messages_published: int = 0
    bytes_published: int = 0
    messages_received: int = 0
    duplicates: int = 0
    reconnects: int = 0
