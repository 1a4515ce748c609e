"""Anomaly scoring on a leaf: the root's model in, readings scored, JSON documents out.

This is ``score_detector = "static"`` (Q / T^2 with static limits); the default,
``"faults"``, is `edge_runtime.agents.leaf.core.fault_scoring.FaultScoringCore`, with the
same interface towards the shell.

`ScoringCore` is synchronous and does no I/O and reads no clock (time comes in as
arguments), like the other cores (`edge_runtime.agents.common.core.node`). The leaf shell
(`edge_runtime.agents.leaf.shell.agent.LeafAgent`) subscribes to the root's model topic
(``<prefix>/<root>/model``, retained) when the leaf's ``score`` is not ``"off"``, hands every
model to `offer_model` and every accepted reading block to `score`, and publishes the
documents it returns on ``<prefix>/<path>/scores`` (`Topology.scores_topic`; not retained,
QoS ``AgentSettings.scores_qos``, default 0).

Model. The latest model by ``(epoch, seq)`` of the root (a model of another epoch — the root
restarted — replaces the current one; an older or equal seq of the same epoch is ignored).
The scorer (`edge_runtime.fpca.AnomalyScorer`, Q / SPE and Hotelling's T^2 with
Jackson-Mudholkar and F limits at ``score_alpha``) is rebuilt lazily, at the next batch,
when a newer model arrived or the energy estimate below moved by more than
`ENERGY_REBUILD_RTOL` since the last build.

Total energy. The root publishes its model truncated to ``rank`` directions, so the Q limit
needs the trace of the covariance (``total_energy``): the energy beyond the model's
directions is spread over the ``n_features - rank`` discarded ones (see `AnomalyScorer`).
The leaf estimates it from **its own readings**, in the model's normalisation
(`edge_runtime.fpca.scoring.RunningEnergy`, the streaming `total_energy`): for a centred
model (``mean`` not None) the running trace of the leaf's sample covariance (Welford's
update of the mean and of the summed squared deviations, ``/ (n - 1)``); for an uncentred
model the running mean of squared norms ``sum ||x||^2 / n``. O(n_features) state and work
per reading. Flagged readings do not enter it (a spike would otherwise raise the limit for
the readings after it). When the leaf's own energy is below the model's tracked energy
plus `RESIDUAL_FLOOR` of it (a leaf quieter than the fleet), the residual energy is taken
as `RESIDUAL_FLOOR` times the tracked energy, and ``energy_floored`` says so in the status:
the limit then assumes the fleet's structure, and a quiet leaf sees fewer false alarms
than alpha promises only if its residual really is that small. This is an estimate: the
Q limit's accuracy depends on how well the leaf's own spectrum matches the fleet's.

Cost. Per batch of ``n`` readings: ``O(n * n_features * rank)`` (two products with the
``(n_features, rank)`` basis) plus ``O(n * n_features)`` for the energy; a rebuild costs
``O(n_features)`` and a few quantiles. Memory: the model, ``O(n_features)`` statistics, the
window of flags (`RATE_WINDOW` booleans) and, in ``"interval"`` mode, at most
`MAX_INTERVAL_FLAGGED` flagged readings.

Counters (status document ``extra``): ``scored`` (readings scored since the agent started),
``anomalies`` (of them, flagged), ``anomaly_rate`` (the *fraction*, 0..1, of flagged
readings among the last `RATE_WINDOW` scored ones: a sliding window, so that it recovers
after an incident; null before the first scored reading), ``last_q`` (Q of the latest
scored reading, null before), ``unscored`` (readings that arrived without a usable model),
``model_seq``, ``q_limit``, ``t2_limit``, ``energy_floored``.

Documents (plain JSON, flat keys, numbers; ``ts`` in seconds since the Unix epoch, UTC, so
Telegraf reads it with ``json_time_key = "ts"``, ``json_time_format = "unix"``, Node-RED
with ``new Date(ts * 1000)`` and Home Assistant with ``as_datetime``):

- ``"reading"``: one per reading: ``node``, ``source`` and ``seq`` (the reading's sensor
  source and sequence number, null for bare arrays), ``ts``, ``q``, ``t2``, ``anomaly``
  (1 flagged, 0 not: an integer so that Telegraf's JSON parser keeps it), ``q_limit``,
  ``t2_limit``, ``alpha``, ``rank``, ``model_seq``.
- ``"interval"``: one per ``score_interval_s`` with readings: ``node``, ``ts``,
  ``interval_s``, ``n`` (readings scored), ``anomalies``, ``anomaly`` (1 if any), ``max_q``,
  ``max_t2``, ``last_q``, ``q_limit``, ``t2_limit``, ``alpha``, ``rank``, ``model_seq`` (of
  the latest model), and ``flagged``: a list of ``{source, seq, ts, q, t2}`` of the flagged
  readings (at most `MAX_INTERVAL_FLAGGED`; ``flagged_dropped`` counts the rest).

Privacy. Scoring reads the released model only: for a private fleet it is post-processing
of the model and costs no budget. The scores document, however, reveals each reading's Q
and T^2 (and whether it was flagged): per-reading information about the leaf's own
readings that no privacy guarantee covers. A private leaf therefore scores only with
``score_allow_private = true`` in its topology (`NodeConfig`).
"""

from __future__ import annotations

import json
import math
from collections import deque
from typing import Any

import numpy as np

from edge_runtime.fpca import AnomalyScorer
from edge_runtime.fpca.scoring import RunningEnergy
from edge_runtime.wire import SubspaceMessage

__all__ = [
    "ENERGY_REBUILD_RTOL",
    "MAX_INTERVAL_FLAGGED",
    "RATE_WINDOW",
    "RESIDUAL_FLOOR",
    "ScoringCore",
    "encode_document",
]

RATE_WINDOW = 1000
"""Scored readings over which ``anomaly_rate`` is the fraction flagged (sliding window)."""

ENERGY_REBUILD_RTOL = 0.05
"""Rebuild the scorer when the energy estimate moved by more than this fraction."""

RESIDUAL_FLOOR = 0.01
"""Least residual energy assumed, as a fraction of the model's tracked energy."""

MAX_INTERVAL_FLAGGED = 100
"""Flagged readings listed in one interval document (the rest are only counted)."""


class ScoringCore:
    """Synchronous anomaly scoring of one leaf (see the module docstring).

    Parameters
    ----------
    node_id : str
        The leaf (``node`` of every document).
    root_id : str
        The root, whose models are accepted (``node_id`` of the model message).
    mode : {"reading", "interval"}
    alpha : float
        Significance of both limits, in (0, 1).
    interval_s : float
        Seconds of one interval (``"interval"`` mode), > 0.
    now : float
        Current (monotonic) time, seconds.
    window : int, default `RATE_WINDOW`
        Scored readings in the ``anomaly_rate`` window, >= 1.

    Raises
    ------
    ValueError
        One line, for a mode, alpha, interval or window out of range.
    """

    needs_model = True  # the shell subscribes to the root's model for it

    def __init__(
        self,
        node_id: str,
        root_id: str,
        *,
        mode: str,
        alpha: float,
        interval_s: float,
        now: float,
        window: int = RATE_WINDOW,
    ) -> None:
        if mode not in ("reading", "interval"):
            raise ValueError(f"mode must be 'reading' or 'interval', got {mode!r}")
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        if not (math.isfinite(interval_s) and interval_s > 0):
            raise ValueError(f"interval_s must be > 0 seconds, got {interval_s!r}")
        if window < 1:
            raise ValueError(f"window must be >= 1 reading, got {window}")
        self.node_id = node_id
        self.root_id = root_id
        self.mode = mode
        self.alpha = float(alpha)
        self.interval_s = float(interval_s)
        self.model: SubspaceMessage | None = None
        self.scorer: AnomalyScorer | None = None
        self.scorer_error: str | None = None
        self.energy_floored = False
        self.models = 0  # models taken
        self.scored = 0
        self.anomalies = 0
        self.unscored = 0
        self.last_q: float | None = None
        self._window: deque[bool] = deque(maxlen=window)
        self._window_flags = 0
        self._energy = RunningEnergy()
        self._built_energy: float | None = None
        self._stale = True  # rebuild the scorer at the next batch
        self._interval_start = now
        self._reset_interval()

    # ------------------------------------------------------------------ model
    def offer_model(self, msg: SubspaceMessage) -> str | None:
        """Take ``msg`` as the current model if it is the root's and newer.

        Returns
        -------
        str or None
            None when taken; else why not: ``"not_root"``, ``"old"`` (not newer than the
            current one of the same epoch).
        """
        if msg.node_id != self.root_id:
            return "not_root"
        cur = self.model
        if cur is not None and cur.epoch == msg.epoch and msg.seq <= cur.seq:
            return "old"
        self.model = msg
        self.models += 1
        self._stale = True
        return None

    def _build(self) -> None:
        """(Re)build the scorer from the model and the energy estimate."""
        msg = self.model
        assert msg is not None
        model = msg.subspace
        centered = model.mean is not None
        energy = self._energy.trace(centered)
        if energy is None:
            self.scorer = None
            self.scorer_error = "too few readings for the energy estimate"
            return
        dof = model.n_samples - 1 if centered else model.n_samples
        tracked = float(np.sum(np.asarray(model.singular_values, np.float64) ** 2)) / max(dof, 1)
        floor = tracked * (1.0 + RESIDUAL_FLOOR)
        self.energy_floored = energy < floor and model.rank < model.n_features
        total = max(energy, floor)
        try:
            self.scorer = AnomalyScorer(model, alpha=self.alpha, total_energy=total)
            self.scorer_error = None
        except ValueError as exc:
            self.scorer = None
            self.scorer_error = str(exc)
        self._built_energy = energy
        self._stale = False

    def _needs_build(self) -> bool:
        if self.model is None:
            return False
        if self._stale or self._built_energy is None:
            return True
        energy = self._energy.trace(self.model.subspace.mean is not None)
        if energy is None:
            return True
        return abs(energy - self._built_energy) > ENERGY_REBUILD_RTOL * self._built_energy

    # ------------------------------------------------------------------ scoring
    def score(
        self,
        values: np.ndarray,
        *,
        source: str | None,
        seq: int | None,
        timestamp: float,
    ) -> list[dict[str, Any]]:
        """Score one accepted block of readings ``(n, n_features)``, in stream order.

        ``source`` and ``seq`` identify the first row (rows are consecutive: row ``i`` has
        ``seq + i``), None for readings without a sequence. ``timestamp``: seconds since
        the Unix epoch (the documents' ``ts``).

        Returns
        -------
        list of dict
            In ``"reading"`` mode one document per scored reading; in ``"interval"`` mode
            none (`interval_document` gives them). Empty while there is no usable model:
            the readings are then counted in ``unscored`` (they still enter the energy).
        """
        x = np.asarray(values, dtype=np.float64)
        if x.ndim == 1:
            x = x.reshape(1, -1)
        if self.model is not None and self._energy.n < 2:
            self._energy.update(x)  # bootstrap the energy with the first readings
            self._stale = True
            bootstrapped = True
        else:
            bootstrapped = False
        if self._needs_build():
            self._build()
        scorer = self.scorer
        if scorer is None or x.shape[1] != scorer.n_features_:
            self.unscored += len(x)
            if not bootstrapped:
                self._energy.update(x)
            return []
        result = scorer.score(x)
        if not bootstrapped:
            self._energy.update(x[~result.flags])
        docs: list[dict[str, Any]] = []
        ts = round(float(timestamp), 3)
        for i in range(len(x)):
            q, t2, flag = float(result.q[i]), float(result.t2[i]), bool(result.flags[i])
            row_seq = None if seq is None else seq + i
            self._count(q, flag)
            self._iv_n += 1
            self._iv_max_q = max(self._iv_max_q, q)
            self._iv_max_t2 = max(self._iv_max_t2, t2)
            if flag:
                self._iv_anomalies += 1
                if len(self._iv_flagged) < MAX_INTERVAL_FLAGGED:
                    self._iv_flagged.append(
                        {"source": source, "seq": row_seq, "ts": ts, "q": q, "t2": t2}
                    )
                else:
                    self._iv_dropped += 1
            if self.mode == "reading":
                docs.append(
                    {
                        "node": self.node_id,
                        "source": source,
                        "seq": row_seq,
                        "ts": ts,
                        "q": q,
                        "t2": t2,
                        "anomaly": int(flag),
                        **self._limits(),
                    }
                )
        if self.mode == "reading":
            self._reset_interval()
        return docs

    def _count(self, q: float, flag: bool) -> None:
        self.scored += 1
        self.anomalies += flag
        self.last_q = q
        window = self._window
        if len(window) == window.maxlen and window[0]:
            self._window_flags -= 1
        window.append(flag)
        self._window_flags += flag

    def _limits(self) -> dict[str, Any]:
        scorer, model = self.scorer, self.model
        assert scorer is not None and model is not None
        return {
            "q_limit": scorer.q_limit,
            "t2_limit": scorer.t2_limit,
            "alpha": self.alpha,
            "rank": scorer.rank_,
            "model_seq": model.seq,
        }

    @property
    def anomaly_rate(self) -> float | None:
        """Fraction of flagged readings among the last ``window`` scored ones, or None."""
        if not self._window:
            return None
        return self._window_flags / len(self._window)

    # ------------------------------------------------------------------ interval
    def _reset_interval(self) -> None:
        self._iv_n = 0
        self._iv_anomalies = 0
        self._iv_max_q = -math.inf
        self._iv_max_t2 = -math.inf
        self._iv_flagged: list[dict[str, Any]] = []
        self._iv_dropped = 0

    def interval_due(self, now: float) -> bool:
        """In ``"interval"`` mode: the interval ended (a document is due if it scored any)."""
        return self.mode == "interval" and now >= self._interval_start + self.interval_s

    def next_wakeup(self, now: float) -> float:
        """When `interval_document` has something to say next, in the clock of ``now``
        (monotonic seconds); ``inf`` if never (``"reading"`` mode, or nothing scored)."""
        if self.mode != "interval" or self._iv_n == 0:
            return math.inf
        return self._interval_start + self.interval_s

    def interval_document(self, now: float, timestamp: float) -> dict[str, Any] | None:
        """The document of the interval that ended by ``now`` (None if it scored nothing,
        or not due); starts the next interval.

        ``now`` is monotonic seconds (the clock of the constructor's ``now``);
        ``timestamp`` is seconds since the Unix epoch (the document's ``ts``).
        """
        if not self.interval_due(now):
            return None
        doc = None
        if self._iv_n and self.scorer is not None:
            doc = {
                "node": self.node_id,
                "ts": round(float(timestamp), 3),
                "interval_s": self.interval_s,
                "n": self._iv_n,
                "anomalies": self._iv_anomalies,
                "anomaly": int(self._iv_anomalies > 0),
                "max_q": self._iv_max_q,
                "max_t2": self._iv_max_t2,
                "last_q": self.last_q,
                **self._limits(),
                "flagged": self._iv_flagged,
                "flagged_dropped": self._iv_dropped,
            }
        # the next interval starts now (an idle stretch is not made up for)
        self._interval_start = now
        self._reset_interval()
        return doc

    # ------------------------------------------------------------------ status
    def health(self) -> tuple[object, ...]:
        """What makes the status document due early: a new anomaly, a new model."""
        return (self.anomalies, self.models, self.scorer_error is None)

    def status_extra(self) -> dict[str, object]:
        """The scoring part of the leaf's status document ``extra``."""
        scorer = self.scorer
        return {
            "score": self.mode,
            "scored": self.scored,
            "anomalies": self.anomalies,
            "anomaly_rate": self.anomaly_rate,
            "last_q": self.last_q,
            "unscored": self.unscored,
            "model_seq": None if self.model is None else self.model.seq,
            "q_limit": None if scorer is None else scorer.q_limit,
            "t2_limit": None if scorer is None else scorer.t2_limit,
            "score_alpha": self.alpha,
            "energy_floored": self.energy_floored,
            "scorer_error": self.scorer_error,
        }


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def encode_document(doc: dict[str, Any]) -> bytes:
    """``doc`` as compact UTF-8 JSON; a non-finite number becomes null (valid JSON)."""
    return json.dumps(_finite(doc), separators=(",", ":"), allow_nan=False).encode("utf-8")
