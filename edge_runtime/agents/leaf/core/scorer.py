"""Which anomaly-scoring core a leaf holds, if any (`NodeConfig.score`, ``score_detector``).

The scoring cores (and ``fpca.faults`` / ``fpca.scoring`` beneath them) are imported only
for a scoring leaf: a leaf with ``score = "off"`` (the default) loads none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_runtime.topology import NodeConfig

if TYPE_CHECKING:
    from edge_runtime.agents.leaf.core.fault_scoring import FaultScoringCore
    from edge_runtime.agents.leaf.core.scoring import ScoringCore

__all__ = ["scoring_core"]


def scoring_core(
    config: NodeConfig, root_id: str | None, now: float
) -> ScoringCore | FaultScoringCore | None:
    """The scoring core of the leaf ``config`` at ``now`` (seconds), or None.

    ``score_detector = "faults"``: a `FaultScoringCore` (no model needed);
    ``"static"``: a `ScoringCore` that accepts the models of ``root_id`` (None: the leaf
    does not score, having no root to take models from); ``score = "off"``: None.
    """
    if config.score == "off":
        return None
    if config.score_detector == "faults":
        from edge_runtime.agents.leaf.core.fault_scoring import FaultScoringCore

        return FaultScoringCore(
            config.id,
            mode=config.score,
            interval_s=config.score_interval_s,
            now=now,
            warmup=config.score_warmup,
        )
    if root_id is None:
        return None
    from edge_runtime.agents.leaf.core.scoring import ScoringCore

    return ScoringCore(
        config.id,
        root_id,
        mode=config.score,
        alpha=config.score_alpha,
        interval_s=config.score_interval_s,
        now=now,
    )
