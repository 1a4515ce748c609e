"""What every node core shares: its publish policy and the timing of its status documents.

A *core* is the synchronous, I/O-free part of an agent (the sans-I/O style of h11 and
wsproto): inputs and the current time go in, decisions and messages come out. The async shell
(`edge_runtime.agents.base.Agent`) only moves bytes and sleeps until `NodeCore.next_wakeup`.
"""

from __future__ import annotations

import math
from collections import Counter

from edge_runtime.agents.policy import (
    AGGREGATOR_PUBLISH,
    LEAF_PUBLISH,
    EchoTracker,
    PublishPolicy,
    StatusPolicy,
)
from edge_runtime.topology import NodeConfig

__all__ = ["NodeCore", "publish_policy_for"]


def publish_policy_for(config: NodeConfig, *, leaf: bool) -> PublishPolicy:
    """The publish policy of a node: its topology keys over the role's defaults."""
    base = LEAF_PUBLISH if leaf else AGGREGATOR_PUBLISH
    low = config.publish_min_interval_s
    high = config.publish_max_interval_s
    low = base.min_interval_s if low is None else low
    high = base.max_interval_s if high is None else high
    return PublishPolicy(
        min_interval_s=low,
        max_interval_s=max(high, low),
        idle_s=base.idle_s if config.idle_flush_s is None else config.idle_flush_s,
        angle_rad=base.angle_rad if config.publish_angle_rad is None else config.publish_angle_rad,
        spectrum_change=base.spectrum_change
        if config.publish_spectrum_change is None
        else config.publish_spectrum_change,
        growth=base.growth if config.publish_growth is None else config.publish_growth,
    )


class NodeCore:
    """Shared state of a leaf core and an aggregator core.

    Parameters
    ----------
    node_id : str
    policy : PublishPolicy
    status_policy : StatusPolicy
    echo_timeout_s : float
        Least bound of the echo check (`EchoTracker`), seconds; 0 turns the check off.
    now : float
        The current time, seconds (any monotonic origin).

    Attributes
    ----------
    decisions : Counter
        Publish decisions by reason (``first``, ``moved``, ``max_interval``, ``idle``,
        ``shutdown``, ``reconnect``) and ``suppressed`` (candidates inside the deadband).
    rejects : Counter
        Rejected inbound messages by reason.
    """

    def __init__(
        self,
        node_id: str,
        policy: PublishPolicy,
        status_policy: StatusPolicy,
        echo_timeout_s: float,
        now: float,
    ) -> None:
        self.node_id = node_id
        self.policy = policy
        self.status_policy = status_policy
        self.echo = EchoTracker(echo_timeout_s) if echo_timeout_s > 0 else None
        self.started = now
        self.decisions: Counter[str] = Counter()
        self.rejects: Counter[str] = Counter()
        self.connections = 0
        self.last_publish = -math.inf
        self.last_input = -math.inf
        self.unpublished_since = math.inf
        self._last_status = -math.inf
        self._status_signature: object = None
        self._signature_sent: object = None  # set by `settle_status` once state exists

    def settle_status(self, now: float) -> None:
        """A fresh node has nothing to report but ``online`` (retained): its first status
        document goes out on a change of health, the heartbeat or shutdown."""
        self._signature_sent = self.health()
        self._last_status = now

    # ----------------------------------------------------------------- status
    def health(self) -> tuple[object, ...]:
        """The fields whose change triggers a status document (not progress counters)."""
        undelivered = 0 if self.echo is None else self.echo.undelivered
        return (sum(self.rejects.values()), undelivered, max(0, self.connections - 1))

    @property
    def status_changed(self) -> bool:
        """Whether a health field changed since the last status document."""
        return self.health() != self._signature_sent

    def status_due(self, now: float) -> bool:
        """Whether the status document should be published now (`StatusPolicy`)."""
        changed = self.health() != self._signature_sent
        return self.status_policy.decide(now, last_sent=self._last_status, changed=changed)

    def status_sent(self, now: float) -> None:
        """The status document was published at ``now``."""
        self._last_status = now
        self._signature_sent = self.health()

    def status_next(self, now: float) -> float:
        changed = self.health() != self._signature_sent
        return self.status_policy.next_check(now, last_sent=self._last_status, changed=changed)

    def echo_next(self) -> float:
        return math.inf if self.echo is None else self.echo.next_check()

    @property
    def undelivered(self) -> int:
        """Published snapshots that never came back from the broker."""
        return 0 if self.echo is None else self.echo.undelivered

    def connected(self) -> None:
        """A (re)connection: counted, and shown in the next status document."""
        self.connections += 1
