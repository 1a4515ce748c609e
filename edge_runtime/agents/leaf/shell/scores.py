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
from collections.abc import Callable
from typing import Any

import numpy as np

from edge_runtime.agents.leaf.core.outbox import MAX_QUEUED_SCORES
from edge_runtime.wire import WireError, decode_subspace

__all__ = ["MAX_QUEUED_SCORES", "Scores"]


class Scores:
    """A leaf shell's anomaly scoring (a part `LeafAgent` holds).

    The status document's ``extra`` carries the core's counters (``scored``, ``anomalies``,
    ``anomaly_rate`` (a fraction), and ``last_q`` or ``suspect`` by detector) and
    ``scores_dropped`` (documents dropped beyond `MAX_QUEUED_SCORES`). With ``score = "off"``
    (the default) nothing of this exists: no subscription, no documents, the same status
    document as before. The documents wait in the core's `ScoreOutbox` (``score_outbox``)
    until its step hands them out as ``scores`` publishes (`LeafCore.step`).

    Parameters
    ----------
    core : LeafCore
        Its ``scoring`` core (or None) and ``score_outbox``.
    max_payload_bytes : int
        Largest model payload accepted, bytes (`AgentSettings.max_payload_bytes`).
    log : structlog logger
    reject : callable
        ``reject(reason, topic, detail, source=...)``: counts and logs a refusal
        (`Rejections.reject`).
    wake : callable
        Lets the agent's work loop run (a model arrived).
    """

    def __init__(
        self,
        core: Any,
        *,
        max_payload_bytes: int,
        log: Any,
        reject: Callable[..., None],
        wake: Callable[[], None],
    ) -> None:
        self._core = core
        self._max_bytes = max_payload_bytes
        self._log = log
        self._reject = reject
        self._wake = wake

    def on_model(self, topic: str, payload: bytes) -> None:
        """The root's model (retained): the static scoring core takes it if newer."""
        scoring = self._core.scoring
        assert scoring is not None
        if not payload:
            return  # a cleared retained model
        try:
            msg = decode_subspace(payload, max_bytes=self._max_bytes)
        except WireError as exc:
            self._reject(f"model_{exc.reason}", topic, str(exc))
            return
        if scoring.offer_model(msg) is None:
            self._log.info("model_received", seq=msg.seq, rank=msg.rank, n_samples=msg.n_samples)
        self._wake()

    async def score(self, block: np.ndarray, source: str | None, seq: int | None) -> None:
        """Score an applied block and queue its documents: in the event loop (``O(n d r)``
        static, ``O(n d^2)`` faults), except the block that ends the fault detector's
        warm-up, whose one-off build runs in a worker thread
        (`FaultScoringCore.completes_warmup`). The caller holds the agent's scoring lock so
        that blocks are scored in the order they were applied."""
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
            self._reject("score", "", str(exc), source=source)
            return
        self._core.score_outbox.add([encode_document(doc) for doc in docs])
