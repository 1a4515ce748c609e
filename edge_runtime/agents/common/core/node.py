"""What every node core shares: its publish policy and the timing of its status documents.

A *core* is the synchronous, I/O-free part of an agent (the sans-I/O style of h11 and
wsproto): inputs and the current time go in, decisions and messages come out. The async shell
(`edge_runtime.agents.common.shell.agent.Agent`) only moves bytes and sleeps until
`NodeCore.next_wakeup`.
"""

from __future__ import annotations

import math
import random
from collections import Counter

from edge_runtime.agents.common.core.policy import (
    AGGREGATOR_PUBLISH,
    LEAF_PUBLISH,
    EchoTracker,
    PublishPolicy,
    StatusPolicy,
)
from edge_runtime.agents.common.core.reconfigure import ConfigChange, classify_config
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
    rng : random.Random
        Where the core draws its ids from (epochs, sessions: `new_id`): a seeded generator
        replays a run exactly; the shell seeds it from the operating system's entropy.

    Attributes
    ----------
    decisions : Counter
        Publish decisions by reason (``first``, ``moved``, ``max_interval``, ``idle``,
        ``shutdown``, ``reconnect``) and ``suppressed`` (candidates inside the deadband).
    rejects : Counter
        Rejected inbound messages by reason (``config_privacy_change`` and
        ``config_needs_restart``: refused configurations, `apply_config`).
    config_version : str or None
        Version of the deployed topology this node runs (`apply_config`); None while it
        runs from a file and has seen no deployed one.
    """

    is_leaf: bool = False
    """Whether the role's publish defaults are a leaf's (`publish_policy_for`)."""

    def __init__(
        self,
        node_id: str,
        policy: PublishPolicy,
        status_policy: StatusPolicy,
        echo_timeout_s: float,
        now: float,
        *,
        rng: random.Random,
    ) -> None:
        self.node_id = node_id
        self.rng = rng
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
        self.config_version: str | None = None
        self.config_changed_at = now

    def new_id(self) -> str:
        """A fresh random id, 16 hex digits (64 bits), from ``rng``."""
        return f"{self.rng.getrandbits(64):016x}"

    def settle_status(self) -> None:
        """A fresh node has nothing to report but ``online`` (retained): its first status
        document goes out on a change of health, the heartbeat or shutdown."""
        self._signature_sent = self.health()

    # ----------------------------------------------------------------- config
    def apply_config(
        self,
        current: NodeConfig,
        new: NodeConfig,
        version: str,
        now: float,
        *,
        tree_changes: tuple[str, ...] = (),
    ) -> ConfigChange:
        """Apply a deployed configuration, or refuse it whole (`classify_config`).

        Applied: the publish policy becomes ``publish_policy_for(new)`` (the next decision
        uses it: a shorter ``publish_min_interval_s`` lets the next snapshot out sooner) and
        the role keeps ``new`` (`_adopt`: a leaf's sensor range). Refused: counted in
        ``rejects`` under the reason (``config_privacy_change``, ``config_needs_restart``),
        nothing else changes, `config_version` stays.

        Parameters
        ----------
        current : NodeConfig
            The node's configuration now.
        new : NodeConfig
            Its configuration in the deployed topology.
        version : str
            The deployed topology's version (`edge_runtime.topology.deployed.config_version`).
        now : float
            The current time, seconds.
        tree_changes : tuple of str, default ()
            Differences outside the node's settings (its path, the algorithm, the name).

        Returns
        -------
        ConfigChange
        """
        change = classify_config(current, new, tree_changes=tree_changes)
        if change.refused is not None:
            self.rejects[change.refused] += 1
            return change
        if change.applied:
            self.policy = publish_policy_for(new, leaf=self.is_leaf)
            self._adopt(new)
            self.config_changed_at = now
        self.config_version = version
        return change

    def _adopt(self, new: NodeConfig) -> None:
        """Keep an applied configuration (`LeafCore` and `AggregatorCore` hold it in
        ``config``; a core whose ``config`` is of another kind overrides this)."""
        self.config = new

    # ---------------------------------------------------------------- publish
    def _decide(self, now: float, *, moved: bool, first: bool) -> str | None:
        """`PublishPolicy.decide` on this node's times; a candidate held back is counted
        as ``suppressed``."""
        reason = self.policy.decide(now, moved=moved, first=first, **self._times())
        if reason is None:
            self.decisions["suppressed"] += 1
        return reason

    def _times(self) -> dict[str, float]:
        """This node's times as `PublishPolicy.decide` / ``next_check`` take them."""
        return {
            "last_publish": self.last_publish,
            "last_input": self.last_input,
            "unpublished_since": self.unpublished_since,
            "idle_s": self.idle_s,
        }

    @property
    def idle_s(self) -> float:
        """How long the input must pause before the trailing publish, seconds."""
        return self.policy.idle_s

    def _publish_pending(self) -> tuple[bool, bool]:
        """``(moved, first)`` as the next `_decide` would see them without new input."""
        return False, False

    def _other_wakeups(self, now: float) -> list[float]:
        """Role-specific times at which a decision may change (confirmations, gaps, ...)."""
        return []

    def input_decisive(self) -> bool:
        """Whether the input just taken may change a decision at once in a way `next_wakeup`
        does not foresee (the shell then asks the core at once; otherwise it sleeps until
        the new `next_wakeup`). Always, unless a role knows better (`LeafCore`)."""
        return True

    def _publish_next(self, now: float) -> float:
        """When the publish decision may next change without new input, seconds: the
        policy's `PublishPolicy.next_check` on this node's times (a role whose decision
        can be held back whatever the time says when it will act instead, `LeafCore`)."""
        moved, first = self._publish_pending()
        return self.policy.next_check(now, moved=moved, first=first, **self._times())

    def next_wakeup(self, now: float) -> float:
        """The next time a decision may change without new input, seconds."""
        publish = self._publish_next(now)
        return min(publish, self.status_next(now), self.echo_next(), *self._other_wakeups(now))

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
        return self.status_policy.decide(
            now, last_sent=self._last_status, changed=changed, started=self.started
        )

    def status_sent(self, now: float) -> None:
        """The status document was published at ``now``."""
        self._last_status = now
        self._signature_sent = self.health()

    def status_next(self, now: float) -> float:
        """When the status document may next be due without a new change, seconds."""
        changed = self.health() != self._signature_sent
        return self.status_policy.next_check(
            now, last_sent=self._last_status, changed=changed, started=self.started
        )

    def echo_next(self) -> float:
        """When an awaited echo may next expire, seconds (``inf``: none awaited)."""
        return math.inf if self.echo is None else self.echo.next_check()

    @property
    def undelivered(self) -> int:
        """Published snapshots that never came back from the broker."""
        return 0 if self.echo is None else self.echo.undelivered

    def connected(self) -> None:
        """A (re)connection: counted, and shown in the next status document."""
        self.connections += 1
