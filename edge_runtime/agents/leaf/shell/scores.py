"""A leaf's anomaly scores: readings in, scores documents out.

With the node's ``score`` = ``"reading"`` or ``"interval"``, the leaf scores every accepted
reading block after it is applied and publishes the documents on ``<prefix>/<path>/scores``
(not retained, QoS ``settings.scores_qos``) from its work loop. The scoring core is
``score_detector``'s: ``"faults"`` (the default,
`edge_runtime.agents.leaf.core.fault_scoring.FaultScoringCore`: a sensor-fault detector
warmed on the leaf's own first readings, naming the suspected sensor; no model) or
``"static"`` (`edge_runtime.agents.leaf.core.scoring.ScoringCore`: the leaf subscribes to
the root's model, ``<prefix>/<root>/model``, retained, and scores Q, T^2 and their limits
at ``score_alpha``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from edge_runtime.agents.leaf.core.outbox import MAX_QUEUED_SCORES
from edge_runtime.topology import Topology
from edge_runtime.wire import WireError, decode_subspace

__all__ = ["MAX_QUEUED_SCORES", "LeafScores"]


class LeafScores:
    """The scoring part of `LeafAgent` (a mixin over `Agent`).

    The status document's ``extra`` carries the core's counters (``scored``, ``anomalies``,
    ``anomaly_rate`` (a fraction), and ``last_q`` or ``suspect`` by detector) and
    ``scores_dropped`` (documents dropped beyond
    `MAX_QUEUED_SCORES`). With ``score = "off"`` (the default) nothing of this exists: no
    subscription, no documents, the same status document as before.

    The documents wait in the core's `ScoreOutbox` (``score_outbox``) until its step hands
    them out as ``scores`` publishes (`LeafCore.step`).

    The agent provides ``_core`` (its ``scoring`` and ``score_outbox``), ``settings``,
    ``topology``, ``node_id``, ``log``, ``reject`` and ``wake``.
    """

    _core: Any
    settings: Any
    topology: Topology
    node_id: str
    log: Any

    def _on_model(self, topic: str, payload: bytes) -> None:
        """The root's model (retained): the static scoring core takes it if newer."""
        scoring = self._core.scoring
        assert scoring is not None
        if not payload:
            return  # a cleared retained model
        try:
            msg = decode_subspace(payload, max_bytes=self.settings.max_payload_bytes)
        except WireError as exc:
            self.reject(f"model_{exc.reason}", topic, str(exc))
            return
        if scoring.offer_model(msg) is None:
            self.log.info("model_received", seq=msg.seq, rank=msg.rank, n_samples=msg.n_samples)
        self.wake()

    async def _score(self, block: np.ndarray, source: str | None, seq: int | None) -> None:
        """Score an applied block and queue its documents: in the event loop (``O(n d r)``
        static, ``O(n d^2)`` faults), except the block that ends the fault detector's
        warm-up, whose one-off build runs in a worker thread
        (`FaultScoringCore.completes_warmup`). The caller holds ``_scoring_lock`` so that
        blocks are scored in the order they were applied."""
        scoring = self._core.scoring
        if scoring is None:
            return
        timestamp = time.time()

        def run() -> list[dict[str, Any]]:
            return scoring.score(block, source=source, seq=seq, timestamp=timestamp)

        from edge_runtime.agents.leaf.core.fault_scoring import FaultScoringCore
        from edge_runtime.agents.leaf.core.scoring import encode_document

        try:
            if isinstance(scoring, FaultScoringCore) and scoring.completes_warmup(len(block)):
                docs = await asyncio.to_thread(run)
            else:
                docs = run()
        except ValueError as exc:  # e.g. a width the model does not have
            self.reject("score", "", str(exc), source=source)
            return
        self._queue_scores([encode_document(doc) for doc in docs])

    def _queue_scores(self, payloads: list[bytes]) -> None:
        self._core.score_outbox.add(payloads)
