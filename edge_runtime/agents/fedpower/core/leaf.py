"""The FedPower leaf core: a `LeafCore` over a `GramEstimator`, answering the root's rounds.

On a round message it runs the round's local iterations on ``A_l = S/n`` from the round's
basis and replies with ``Y`` and its sample count (a leaf without readings does not reply; a
leaf replies at most once per round per process). A private leaf stops replying once its
budget of ``T`` local iterations is spent and never publishes its Gram. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edge_runtime.agents.fedpower.core.estimator import GramEstimator
from edge_runtime.agents.fedpower.core.rounds import RoundReplies
from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.wire import SubspaceMessage
from edge_runtime.wire.fedpower import ReplyMessage, RoundMessage

__all__ = ["FedPowerLeafCore"]


class FedPowerLeafCore(LeafCore):
    """A `LeafCore` whose estimator is a `GramEstimator`, answering the root's rounds.

    Takes the parameters of `LeafCore` and ``iterations``: ``T``, the local iterations a
    private leaf's budget covers (the topology's ``fedpower.total_iterations``; None for an
    unbounded schedule, which a private leaf refuses), known before its first estimator.

    Attributes
    ----------
    rounds : RoundReplies
        The rounds seen and answered (a part; `round`, `replied_round`, `replies` and
        `budget_refusals` read it).
    """

    def __init__(self, *args: Any, iterations: int | None = None, **kwargs: Any) -> None:
        self.iterations = iterations
        self.rounds = RoundReplies()
        super().__init__(*args, **kwargs)

    round = property(lambda self: self.rounds.round, doc="The latest round received.")
    replied_round = property(
        lambda self: self.rounds.replied_round, doc="The last round answered (0: none)."
    )
    replies = property(lambda self: self.rounds.replies, doc="Replies made.")
    budget_refusals = property(
        lambda self: self.rounds.budget_refusals, doc="Rounds the budget did not cover."
    )

    @property
    def private(self) -> bool:
        """The leaf has a privacy guarantee (noisy iterations, no published Gram)."""
        return self.privacy is not None

    def cells(self) -> int:
        """Matrix cells a step touches: ``d**2`` (a Gram update, a local iteration on the
        dense ``S``), so the shell offloads a large Gram to a thread (`LeafCore.cells`)."""
        est = self.estimator
        return 0 if est is None else est.n_features_**2

    @staticmethod
    def estimator_from_state(  # type: ignore[override]
        state: Mapping[str, Any], random_state: Any = None
    ) -> GramEstimator:
        return GramEstimator.from_state(state, random_state=random_state)

    def new_estimator(self, n_features: int) -> GramEstimator:  # type: ignore[override]
        """A fresh `GramEstimator` (private with this leaf's guarantee and ``T``).

        Raises
        ------
        ValueError
            For a private leaf without ``T`` (an unbounded schedule).
        """
        if self.privacy is not None and self.iterations is None:
            raise ValueError("a private FedPower leaf needs a bounded schedule (fedpower_rounds)")
        return GramEstimator(
            n_features,
            self.config.rank,
            privacy=self.privacy,
            iterations=self.iterations,
            random_state=self.noise,
        )

    def privacy_mismatch(self, est: Any) -> str | None:
        """Another guarantee or another ``T`` in a checkpoint's estimator, or None."""
        params = getattr(est, "params", None)
        if params != self.privacy:
            return f"privacy {params}, configured {self.privacy}"
        if self.privacy is not None and est.iterations != self.iterations:
            return f"budget for {est.iterations} iterations, configured {self.iterations}"
        return None

    # A private leaf publishes no snapshot: its Gram is raw second-moment data.
    def snapshot_due(self, now: float) -> str | None:
        return None if self.private else super().snapshot_due(now)

    def make_snapshot(self, timestamp: float, reason: str) -> SubspaceMessage | None:
        return None if self.private else super().make_snapshot(timestamp, reason)

    def next_wakeup(self, now: float) -> float:
        if not self.private:
            return super().next_wakeup(now)
        return min(self.status_next(now), self.echo_next(), *self._other_wakeups(now))

    def restore_snapshot(self, msg: SubspaceMessage, now: float) -> str | None:
        """Continue from this leaf's own retained snapshot (its exact Gram, `GramEstimator`);
        never for a private leaf (it publishes none; an older one is not its guarantee)."""
        if self.private:
            return "privacy_mismatch"
        if msg.node_id != self.node_id or msg.n_samples == 0:
            return "empty"
        if msg.privacy is not None:
            return "privacy_mismatch"
        try:
            estimator = GramEstimator.from_subspace(msg.subspace, self.config.rank)
        except (ValueError, TypeError) as exc:
            return f"unusable: {exc}"
        self._resume_from(msg, estimator)
        return None

    # ------------------------------------------------------------------ rounds
    def on_round(self, msg: RoundMessage, deployment: str | None) -> str | None:
        """Take a round message; a reject reason, or None (`RoundReplies.offer`)."""
        return self.rounds.offer(msg, deployment, self.n_features)

    def reply_due(self) -> bool:
        """A round is waiting for this leaf's reply, and the leaf has readings."""
        return self.rounds.due(self.n_samples)

    @property
    def budget_exhausted(self) -> bool:
        """A private leaf whose budget does not cover another iteration."""
        est = self.estimator
        left = None if est is None else getattr(est, "budget_left", None)
        return left is not None and left <= 0

    def make_reply(self, timestamp: float, deployment: str | None) -> ReplyMessage | None:
        """Run the round's local iterations (numerics) and build the reply; None when a
        private leaf's budget does not cover the round's iterations (the round is then
        marked answered and counted in ``budget_refusals``).

        Raises
        ------
        ValueError
            If the round's basis does not fit the readings' width (the round is then
            marked answered, so it is not retried).
        """
        r = self.round
        est = self.estimator
        assert r is not None and est is not None
        y = self.rounds.answer(est)
        if y is None:
            return None
        self._input_version += 1  # a private leaf spent budget: news for its checkpoint
        if self.private and not self.checkpointing:
            # Without a checkpoint nothing restores a private leaf's readings; once a reply
            # has released them (spent their budget) they are confirmed, so the publishers
            # never replay them into a restarted leaf, where they would spend it again.
            self.durable = dict(self.ingested)
        return ReplyMessage(
            node_id=self.node_id,
            epoch=self.epoch,
            round=r.round,
            y=y,
            n_samples=self.n_samples,
            timestamp=timestamp,
            privacy=self.privacy,
            sources=self.ingested,
            deployment=deployment,
        )

    def _other_wakeups(self, now: float) -> list[float]:
        times = super()._other_wakeups(now)
        if self.reply_due():
            times.append(now)
        return times

    def status_extra(self, now: float) -> dict[str, object]:
        extra = super().status_extra(now)
        extra["fedpower"] = self.rounds.status()
        if self.private:
            est = self.estimator
            extra["fedpower"].update(  # type: ignore[attr-defined]
                {
                    "budget_iterations": self.iterations,
                    "iterations_run": 0 if est is None else est.n_releases_,
                    "budget_exhausted": self.budget_exhausted,
                    "budget_refusals": self.budget_refusals,
                }
            )
        return extra
