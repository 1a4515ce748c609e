"""The FedPower root core: the server of the runtime's rounds (Algorithm 3), no I/O, no clock.

`FedPowerRootCore` wraps `FedPowerServer` (partial participation: a round closes with ``K``
replies or at its timeout; later replies are dropped and counted) and decides when to start
rounds, when to close them and what model to publish.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import numpy as np

from edge_runtime.agents.aggregator.core.aggregator import weakest_guarantee
from edge_runtime.agents.common.core.actions import Action, Publish, Wake
from edge_runtime.agents.common.core.node import NodeCore
from edge_runtime.agents.common.core.policy import AGGREGATOR_PUBLISH, StatusPolicy, largest_angle
from edge_runtime.fedpower import FedPowerServer, Schedule
from edge_runtime.fedpower.aggregation import procrustes_rotation
from edge_runtime.fedpower.power import initial_basis
from edge_runtime.fpca import Subspace
from edge_runtime.topology import FedPowerConfig, NodeConfig
from edge_runtime.wire import PrivacyParams, SubspaceMessage
from edge_runtime.wire.fedpower import ReplyMessage, RoundMessage

__all__ = ["FedPowerRootCore", "largest_angle", "schedule_of"]


def schedule_of(config: FedPowerConfig) -> Schedule:
    """The (unbounded) `Schedule` of a topology's FedPower settings."""
    decay = None if config.decay == "none" else config.decay
    return Schedule(config.local_steps, decay=decay)


class FedPowerRootCore(NodeCore):
    """The FedPower server of the runtime: rounds out, replies in, the global model out.

    Rounds. The next round starts ``round_interval_s`` after the previous one closed
    (``idle_interval_s`` once the estimate settled: the last round moved the basis by at
    most ``tolerance_rad`` and no participant had new readings), until ``rounds`` rounds
    (0: never stops). Every leaf is asked; a round closes with the first ``K`` replies or at
    ``round_timeout_s`` (`FedPowerServer`). Until a first reply tells the root the width
    ``d`` of the readings, round 1 carries no basis (the leaves start from `initial_basis`)
    and has no deadline: nothing can be learnt before a leaf has readings.

    The model of a closed round (with at least one reply) is a `SubspaceMessage`: the new
    global basis, ``seq`` = the round, ``n_samples`` and ``provenance`` = the participants'
    samples, and singular values estimated from the replies: the singular values ``l_j``
    of ``sum_l w_l Y_l D_l`` (the aligned, weighted replies, ``~ M Z``) give
    ``sigma_j = sqrt(n l_j)`` (exact at convergence with one local step).

    Parameters
    ----------
    node_id : str
        The root's name (``root`` of its round messages).
    leaves : sequence of str
        The ``M`` leaves asked every round.
    rank : int
        ``r``, columns of the global basis.
    config : FedPowerConfig
        The topology's round settings (quorum, timeouts, intervals, schedule, seed, OPT).
    status_policy : StatusPolicy
    now : float
        Monotonic seconds; every ``now`` argument is on this clock.
    deployment : str or None
        The topology's name: replies of another deployment are rejected.

    Raises
    ------
    ValueError
        From `FedPowerServer` once ``d`` is known, for a bad quorum or timeout.
    """

    def __init__(
        self,
        node_id: str,
        leaves: Sequence[str],
        rank: int,
        config: FedPowerConfig,
        *,
        status_policy: StatusPolicy,
        now: float,
        deployment: str | None = None,
        rng: random.Random,
    ) -> None:
        super().__init__(node_id, AGGREGATOR_PUBLISH, status_policy, 0.0, now, rng=rng)
        self.leaves = tuple(leaves)
        self.rank = rank
        self.config = config
        self.quorum = config.quorum_of(len(self.leaves))
        self.schedule = schedule_of(config)
        self.deployment = deployment
        self.epoch = self.new_id()
        self.server: FedPowerServer | None = None
        self.round = 0  # the latest round started
        self.open = False
        self.opened_at = now
        self.next_start = now
        self.round_message: RoundMessage | None = None
        self.model: SubspaceMessage | None = None
        self.last_angle: float | None = None
        self.settled = False
        self.rounds_closed = 0
        self.restored_from: str | None = None
        self._last_counts: dict[str, int] = {}
        self.guarantees: dict[str, PrivacyParams | None] = {}  # every leaf that replied
        self.last_participants: tuple[str, ...] = ()
        self._early_late = 0  # late replies while round 1 had no basis (no server yet)
        self.settle_status()

    # ------------------------------------------------------------------ state
    def _adopt(self, new: NodeConfig) -> None:
        """Its ``config`` is the `FedPowerConfig` of the rounds: only the publish policy
        of `apply_config` changes."""
        return None

    @property
    def done(self) -> bool:
        """The configured number of rounds closed (never when open-ended)."""
        return self.config.rounds > 0 and self.round >= self.config.rounds and not self.open

    @property
    def late_replies(self) -> int:
        """Replies dropped as late (the server's count plus those before it existed)."""
        return self._early_late + (0 if self.server is None else self.server.late_replies)

    def _new_server(self, basis: np.ndarray, round_no: int) -> FedPowerServer:
        server = FedPowerServer(
            self.leaves,
            basis,
            self.schedule,
            quorum=self.quorum,
            round_timeout=self.config.round_timeout_s,
            opt=self.config.opt,
        )
        server.round = round_no
        return server

    def restore(self, msg: RoundMessage) -> bool:
        """Continue after the root's own retained round message (a restart): the next round
        is ``msg.round + 1`` from its basis. False if the message is not this root's."""
        if msg.root != self.node_id or msg.rank != self.rank:
            return False
        if self.deployment is not None and msg.deployment not in (None, self.deployment):
            return False
        self.epoch = msg.epoch
        self.round = msg.round
        if msg.basis is not None:
            self.server = self._new_server(msg.basis, msg.round)
        self.restored_from = "retained round"
        return True

    # -------------------------------------------------------------------- step
    def step(self, now: float, wall: float) -> list[Action]:
        """What the root does at ``now``, in order; the caller carries it out.

        1. close the open round when it is due (`close_due`: ``K`` replies or its
           deadline) and publish its model on ``model`` (retained; none when nobody
           replied);
        2. start the next round when it is due (`round_due`) and publish it on ``round``
           (retained);
        3. the status document when the status policy says so (``status``: the executor
           publishes the document as it is then);
        4. `Wake` at `next_wakeup`.

        The caller reports each `Publish` carried out with `published`.

        Parameters
        ----------
        now : float
            Monotonic seconds.
        wall : float
            Seconds since the Unix epoch, stamped on the model and the round message.

        Returns
        -------
        list of Action
        """
        actions: list[Action] = []
        if self.close_due(now):
            model = self.close(now, wall)
            if model is not None:
                actions.append(Publish("model", model, reason="round_closed"))
        msg = self.round_due(now, wall)
        if msg is not None:
            actions.append(Publish("round", msg, reason="round"))
        if self.status_due(now):
            actions.append(Publish("status", None, reason="due"))
        actions.append(Wake(self.next_wakeup(now)))
        return actions

    def published(self, action: Publish, now: float) -> None:
        """The caller carried out ``action`` at ``now`` (the broker acknowledged it)."""
        if action.kind == "status":
            self.status_sent(now)

    # ------------------------------------------------------------------ rounds
    def round_due(self, now: float, timestamp: float) -> RoundMessage | None:
        """The round to start (and publish, retained) now, or None."""
        if self.open or self.done or now < self.next_start:
            return None
        if self.server is None:
            self.round += 1
            basis, steps = None, self.schedule.local_steps(self.round)
        else:
            start = self.server.start_round(now)
            self.round = start.round
            basis, steps = start.basis, start.local_steps
        self.open, self.opened_at = True, now
        self.round_message = RoundMessage(
            root=self.node_id,
            epoch=self.epoch,
            round=self.round,
            rank=self.rank,
            basis=basis,
            local_steps=steps,
            timeout_s=self.config.round_timeout_s,
            seed=self.config.seed,
            timestamp=timestamp,
            deployment=self.deployment,
        )
        return self.round_message

    def offer(self, reply: ReplyMessage, now: float) -> str | None:
        """A leaf's reply: None when counted; ``"late"``, ``"duplicate"``, ``"unasked"``
        when dropped (counted by the server, not a reject); else a reject reason."""
        if (
            reply.deployment is not None
            and self.deployment is not None
            and reply.deployment != self.deployment
        ):
            return "foreign_deployment"
        if reply.node_id not in self.leaves:
            return "unknown_leaf"
        if reply.rank != self.rank:
            return "rank"
        if reply.round > self.round:
            return "round"
        if self.server is None:  # round 1 without a basis: this reply fixes d
            if not self.open or reply.round < self.round:
                self._early_late += 1
                return "late"
            z0 = initial_basis(self.config.seed, reply.n_features, self.rank)
            self.server = self._new_server(z0, self.round - 1)
            self.server.start_round(self.opened_at)
        if reply.n_features != self.server.n_features:
            return "n_features"
        if not np.isfinite(reply.y).all():  # the wire refuses it; a core never trusts that
            return "non_finite"
        server = self.server
        before = (server.late_replies, server.duplicate_replies, server.unasked_replies)
        try:
            accepted = server.offer(reply.node_id, reply.round, reply.y, reply.n_samples)
        except ValueError:
            return "round"
        if accepted:
            self.guarantees[reply.node_id] = reply.privacy
            return None
        after = (server.late_replies, server.duplicate_replies, server.unasked_replies)
        return ("late", "duplicate", "unasked")[next(i for i in range(3) if after[i] != before[i])]

    def close_due(self, now: float) -> bool:
        """The open round should close (quorum or deadline; never before ``d`` is known)."""
        return self.open and self.server is not None and self.server.close_due(now)

    def cells(self) -> int:
        """Matrix cells closing the open round touches, ``d r (replies + 1)`` (the shell
        runs large closes in a worker thread, as `LeafCore.cells`)."""
        server = self.server
        return 0 if server is None else server.n_features * server.rank * (server.replies + 1)

    def close(self, now: float, timestamp: float) -> SubspaceMessage | None:
        """Close the open round; the model to publish, or None when nobody replied."""
        server = self.server
        assert server is not None and self.open
        previous = server.basis
        replies = server.pending
        basis = server.close_round(now)
        record = server.history[-1]
        self.open = False
        self.rounds_closed += 1
        self.last_participants = record.replied
        if not replies:
            self.next_start = now + self.config.round_interval_s
            return None
        angle = largest_angle(previous, basis)
        counts = {leaf: n for leaf, (_, n) in replies.items()}
        same = all(self._last_counts.get(leaf) == n for leaf, n in counts.items())
        self.settled = angle <= self.config.tolerance_rad and same
        self._last_counts.update(counts)
        self.last_angle = angle
        wait = self.config.idle_interval_s if self.settled else self.config.round_interval_s
        self.next_start = now + wait
        n_total = sum(counts.values())
        sv = self._singular_values(replies, previous, n_total)
        self.model = SubspaceMessage(
            node_id=self.node_id,
            epoch=self.epoch,
            seq=record.round,
            subspace=Subspace(np.array(basis), sv, n_total),
            timestamp=timestamp,
            privacy=self.privacy,
            provenance=counts,
            deployment=self.deployment,
        )
        return self.model

    @property
    def privacy(self) -> PrivacyParams | None:
        """The model's guarantee: the weakest of every leaf whose replies shaped the basis
        (all rounds since this process started, `weakest_guarantee`); None if one of them
        replied without noise. The basis of a round depends on every earlier round's
        replies, so the leaves of earlier rounds count too."""
        return weakest_guarantee(list(self.guarantees.values()))

    def _singular_values(
        self, replies: Mapping[str, tuple[np.ndarray, int]], reference: np.ndarray, n: int
    ) -> np.ndarray:
        total = np.zeros_like(reference)
        for y, count in replies.values():
            rotation = procrustes_rotation(y, reference) if self.config.opt else np.eye(y.shape[1])
            total += (count / n) * (y @ rotation)
        values = np.linalg.svd(total, compute_uv=False)
        return np.sort(np.sqrt(np.clip(values, 0.0, None) * n))[::-1]

    def next_wakeup(self, now: float) -> float:
        """The next round start, round deadline or status document, seconds."""
        return min(self.status_next(now), *self._other_wakeups(now), now + 1.0)

    def _other_wakeups(self, now: float) -> list[float]:
        if self.open:
            if self.server is None:
                return []
            return [self.opened_at + self.config.round_timeout_s]
        return [] if self.done else [self.next_start]

    def status_extra(self, now: float) -> dict[str, object]:
        server = self.server
        return {
            "algorithm": "fedpower",
            "round": self.round,
            "round_open": self.open,
            "rounds_closed": self.rounds_closed,
            "quorum": self.quorum,
            "participants": list(self.last_participants),
            "late_replies": self.late_replies,
            "duplicate_replies": 0 if server is None else server.duplicate_replies,
            "unasked_replies": 0 if server is None else server.unasked_replies,
            "timeouts": 0 if server is None else server.timeouts,
            "last_angle_rad": self.last_angle,
            "settled": self.settled,
            "restored_from": self.restored_from,
        }
