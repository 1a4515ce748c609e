"""A FedPower leaf's side of the root's rounds: `RoundReplies`, a part of `FedPowerLeafCore`.

It keeps the latest round message, the last round this process answered and its counts,
and runs a round's local iterations on the leaf's estimator (`GramEstimator.iterate`): at
most once per round per process, never beyond a private leaf's budget. No I/O, no clock.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edge_runtime.wire.fedpower import RoundMessage

__all__ = ["RoundReplies"]


class RoundReplies:
    """The rounds one FedPower leaf has seen and answered.

    Attributes
    ----------
    round : RoundMessage or None
        The latest round received.
    replied_round : int
        The last round this process answered (0: none; back to 0 when the root's epoch
        changes, since a root that started over counts its rounds from 1 again).
    replies : int
        Rounds answered with a reply.
    budget_refusals : int
        Rounds not answered because a private leaf's budget did not cover them.
    """

    def __init__(self) -> None:
        self.round: RoundMessage | None = None
        self.replied_round = 0
        self.replies = 0
        self.budget_refusals = 0

    def offer(
        self, msg: RoundMessage, deployment: str | None, n_features: int | None
    ) -> str | None:
        """Take a round message; a reject reason (``foreign_deployment``, ``rank`` above
        the leaf's reading width ``n_features``), or None."""
        if msg.deployment is not None and deployment is not None and msg.deployment != deployment:
            return "foreign_deployment"
        if msg.rank > (n_features or msg.rank):
            return "rank"
        if self.round is not None and msg.epoch != self.round.epoch:
            self.replied_round = 0  # a root that started over: its rounds count from 1 again
        self.round = msg
        return None

    def due(self, n_samples: int) -> bool:
        """A round waits for this leaf's reply and the leaf has readings (``n_samples``)."""
        r = self.round
        return r is not None and r.round > self.replied_round and n_samples > 0

    def answer(self, estimator: Any) -> np.ndarray | None:
        """Run the waiting round's local iterations on ``estimator`` (numerics): ``Y`` of
        shape ``(n_features, rank)``; None when the estimator's budget does not cover them
        (counted in `budget_refusals`). Either way the round is answered.

        Raises
        ------
        ValueError
            If the round's basis does not fit the readings' width (the round is answered
            all the same, so it is not retried).
        """
        r = self.round
        assert r is not None
        self.replied_round = r.round
        left = estimator.budget_left
        if left is not None and r.local_steps > left:
            self.budget_refusals += 1
            return None
        z = r.start_basis(estimator.n_features_)
        y = estimator.iterate(z, r.local_steps)
        self.replies += 1
        return y

    def status(self) -> dict[str, object]:
        """The status document's ``extra.fedpower``: ``round``, ``replied_round``,
        ``replies``."""
        return {
            "round": None if self.round is None else self.round.round,
            "replied_round": self.replied_round,
            "replies": self.replies,
        }
