"""Sensor-fault scoring on a leaf: warm-up on the leaf's own readings, then one verdict each.

`FaultScoringCore` is the ``score_detector = "faults"`` counterpart of
`edge_runtime.agents.leaf.core.scoring.ScoringCore` (``"static"``: Q / T^2 against the
root's model), with the same interface towards the leaf shell
(`edge_runtime.agents.leaf.shell.scores.Scores`): `score`, `interval_document`,
`next_wakeup`, `health`, `status_extra`. It is synchronous, does no I/O and reads no clock
(time comes in as arguments). It needs no model (``needs_model`` is False: the leaf does not
subscribe to the root's model for it), so it scores from the leaf's first readings on.

Warm-up. The first ``warmup`` readings the leaf applies after it starts are copied into a
buffer of shape ``(warmup, n_features)`` float64 (``8 * warmup * n_features`` bytes:
2,787 x 48 = 1.07 MB, 1,000 x 48 = 384 kB), assumed clean (a fault in them is learned
as normal). When it is full, `edge_runtime.fpca.FaultDetector.from_warmup` builds the
detector from it with ``params`` (its defaults when empty: the detector's parameters are
tuned there, not here) and the buffer is freed. Warm-up readings get no verdict and no
document; ``warming_up`` in the status counts the readings still needed. A detector that
cannot be built (fewer than 2 sensors) is reported in ``scorer_error`` and nothing more
is scored.

Scoring. Each later reading, in stream order, gets `FaultDetector.verdict` (``t`` = the
block's ``timestamp``): ``alarm``, the suspected ``sensor`` (column index) and the fault
``kind`` (``"short"``, ``"noise"`` or ``"constant"``), the rule's ``score`` and ``limit``.
The latest alarm's sensor and kind are the leaf's ``suspect`` until `SUSPECT_HOLD` scored
readings pass without an alarm (then null): what Home Assistant's *Suspected sensor* and
*Sensor fault* entities show.

Cost. Per reading the detector's ``O(n_features^2)`` (plus its periodic refreshes, see
`FaultDetector`); memory: the warm-up buffer until built, then the detector's fixed
`FaultDetector.nbytes` (148,864 bytes for 48 sensors), the window of flags (`RATE_WINDOW`
booleans) and, in ``"interval"`` mode, at most `MAX_INTERVAL_FLAGGED` flagged readings.

Counters (status document ``extra``): ``score`` (the mode), ``score_detector``
(``"faults"``), ``scored`` (readings with a verdict since the agent started), ``anomalies``
(of them, alarms), ``anomaly_rate`` (fraction 0..1 of alarms among the last `RATE_WINDOW`
scored readings, null before the first: the same contract as the static scorer's),
``suspect`` (``{"sensor", "fault", "seq", "ts"}`` of the latest alarm while it is recent,
else null), ``warming_up`` (readings still needed before the first verdict; 0 after),
``detector_bytes`` (the detector's state, null before it is built) and ``scorer_error``.

Documents (plain JSON, flat keys; ``ts`` seconds since the Unix epoch, as the static
scorer's):

- ``"reading"``: one per scored reading: ``node``, ``source``, ``seq``, ``ts``,
  ``anomaly`` (1 or 0), ``sensor`` (the suspected column index, null without an alarm),
  ``fault`` (the kind, null without an alarm), ``score``, ``limit`` (of the rule that
  fired, or without an alarm of the rule closest to its limit) and ``detector``
  (``"faults"``).
- ``"interval"``: one per ``score_interval_s`` with scored readings: ``node``, ``ts``,
  ``interval_s``, ``n``, ``anomalies``, ``anomaly``, ``detector``, and ``flagged``: a list of
  ``{source, seq, ts, sensor, fault, score, limit}`` (at most `MAX_INTERVAL_FLAGGED`;
  ``flagged_dropped`` counts the rest).

The topology has no sensor names, so documents name a sensor by its column index.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from edge_runtime.agents.leaf.core.scoring import MAX_INTERVAL_FLAGGED, RATE_WINDOW
from edge_runtime.fpca import FaultDetector
from edge_runtime.wire import SubspaceMessage

__all__ = ["DETECTOR", "SUSPECT_HOLD", "FaultScoringCore"]

DETECTOR = "faults"
"""The ``detector`` of the documents and ``score_detector`` of the status."""

SUSPECT_HOLD = 100
"""Scored readings without an alarm after which the status's ``suspect`` becomes null."""


class FaultScoringCore:
    """Synchronous sensor-fault scoring of one leaf (see the module docstring).

    Parameters
    ----------
    node_id : str
        The leaf (``node`` of every document).
    mode : {"reading", "interval"}
    interval_s : float
        Seconds of one interval (``"interval"`` mode), > 0.
    now : float
        Current (monotonic) time, seconds.
    warmup : int
        Readings the detector is warmed on, >= 2.
    window : int, default `RATE_WINDOW`
        Scored readings in the ``anomaly_rate`` window, >= 1.
    params : mapping or None, default None
        Keyword parameters of `FaultDetector.from_warmup` (None: its defaults).

    Attributes
    ----------
    detector : FaultDetector or None
        None while warming up (or if it could not be built).
    n_features : int or None
        Width of the readings, from the first one.

    Raises
    ------
    ValueError
        One line, for a mode, interval, warm-up or window out of range.
    """

    needs_model = False
    model: SubspaceMessage | None = None  # the static scorer's; never set here

    def __init__(
        self,
        node_id: str,
        *,
        mode: str,
        interval_s: float,
        now: float,
        warmup: int,
        window: int = RATE_WINDOW,
        params: Mapping[str, object] | None = None,
    ) -> None:
        if mode not in ("reading", "interval"):
            raise ValueError(f"mode must be 'reading' or 'interval', got {mode!r}")
        if not (math.isfinite(interval_s) and interval_s > 0):
            raise ValueError(f"interval_s must be > 0 seconds, got {interval_s!r}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 2:
            raise ValueError(f"warmup must be an integer >= 2 readings, got {warmup!r}")
        if window < 1:
            raise ValueError(f"window must be >= 1 reading, got {window}")
        self.node_id = node_id
        self.mode = mode
        self.interval_s = float(interval_s)
        self.warmup = warmup
        self.params = dict(params or {})
        self.detector: FaultDetector | None = None
        self.scorer_error: str | None = None
        self.n_features: int | None = None
        self.scored = 0
        self.anomalies = 0
        self.suspect: dict[str, Any] | None = None
        self._since_alarm = 0
        self._buffer: np.ndarray | None = None
        self._buffered = 0
        self._window: deque[bool] = deque(maxlen=window)
        self._window_flags = 0
        self._interval_start = now
        self._reset_interval()

    # ------------------------------------------------------------------ model
    def offer_model(self, msg: SubspaceMessage) -> str | None:
        """The fault detector uses no model: always ``"not_used"``."""
        return "not_used"

    # ------------------------------------------------------------------ warm-up
    @property
    def warming_up(self) -> int:
        """Readings still needed before the first verdict (0 once the detector is built
        or could not be)."""
        if self.detector is not None or self.scorer_error is not None:
            return 0
        return self.warmup - self._buffered

    def completes_warmup(self, n: int) -> bool:
        """Whether a block of ``n`` readings would end the warm-up (and so build the
        detector: ``O(warmup * n_features^2)``, about 0.8 s for 2787 x 48 on a desktop
        core; the shell runs that block's `score` in a worker thread)."""
        return self.detector is None and self.scorer_error is None and n >= self.warming_up

    @property
    def buffer_bytes(self) -> int:
        """Bytes of the warm-up buffer now (0 before the first reading and after)."""
        return 0 if self._buffer is None else int(self._buffer.nbytes)

    def _warm(self, x: np.ndarray) -> np.ndarray:
        """Buffer rows of ``x`` until the warm-up is full (building the detector then);
        the rows left over for scoring."""
        if self.detector is not None or self.scorer_error is not None:
            return x
        if self._buffer is None:
            self._buffer = np.empty((self.warmup, x.shape[1]), dtype=np.float64)
        take = min(self.warmup - self._buffered, len(x))
        self._buffer[self._buffered : self._buffered + take] = x[:take]
        self._buffered += take
        if self._buffered == self.warmup:
            try:
                self.detector = FaultDetector.from_warmup(self._buffer, **self.params)
            except ValueError as exc:
                self.scorer_error = str(exc)
            self._buffer = None  # freed: the detector keeps what it learned
        return x[take:]

    # ------------------------------------------------------------------ scoring
    def score(
        self,
        values: np.ndarray,
        *,
        source: str | None,
        seq: int | None,
        timestamp: float,
    ) -> list[dict[str, Any]]:
        """Warm up on, or score, one accepted block of readings ``(n, n_features)``.

        ``source`` and ``seq`` identify the first row (row ``i`` has ``seq + i``), None
        for readings without a sequence. ``timestamp``: seconds since the Unix epoch (the
        documents' ``ts`` and the verdicts' ``t``).

        Returns
        -------
        list of dict
            In ``"reading"`` mode one document per scored reading (warm-up readings get
            none); in ``"interval"`` mode none (`interval_document` gives them).

        Raises
        ------
        ValueError
            If the block is not 1-D or 2-D, or its width differs from the first
            reading's; the state is then unchanged.
        """
        x = np.asarray(values, dtype=np.float64)
        if x.ndim == 1:
            x = x.reshape(1, -1)
        if x.ndim != 2:
            raise ValueError(f"readings must be 1-D or 2-D, got shape {x.shape}")
        if self.n_features is None:
            self.n_features = x.shape[1]
        elif x.shape[1] != self.n_features:
            raise ValueError(
                f"readings have {x.shape[1]} values, the fault detector expects "
                f"{self.n_features} (the width of the first reading)"
            )
        offset = len(x)
        x = self._warm(x)
        offset -= len(x)
        detector = self.detector
        if detector is None or not len(x):
            return []
        ts = round(float(timestamp), 3)
        docs: list[dict[str, Any]] = []
        for i in range(len(x)):
            v = detector.verdict(x[i], float(timestamp))
            row_seq = None if seq is None else seq + offset + i
            sensor = v.sensor if v.alarm else None
            fault = v.kind if v.alarm else None
            self._count(v.alarm, sensor, fault, row_seq, ts)
            self._iv_n += 1
            if v.alarm:
                self._iv_anomalies += 1
                if len(self._iv_flagged) < MAX_INTERVAL_FLAGGED:
                    self._iv_flagged.append(
                        {
                            "source": source,
                            "seq": row_seq,
                            "ts": ts,
                            "sensor": sensor,
                            "fault": fault,
                            "score": v.score,
                            "limit": v.limit,
                        }
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
                        "anomaly": int(v.alarm),
                        "sensor": sensor,
                        "fault": fault,
                        "score": v.score,
                        "limit": v.limit,
                        "detector": DETECTOR,
                    }
                )
        if self.mode == "reading":
            self._reset_interval()
        return docs

    def _count(
        self, alarm: bool, sensor: int | None, fault: str | None, seq: int | None, ts: float
    ) -> None:
        self.scored += 1
        self.anomalies += alarm
        window = self._window
        if len(window) == window.maxlen and window[0]:
            self._window_flags -= 1
        window.append(alarm)
        self._window_flags += alarm
        if alarm:
            self.suspect = {"sensor": sensor, "fault": fault, "seq": seq, "ts": ts}
            self._since_alarm = 0
        else:
            self._since_alarm += 1
            if self._since_alarm >= SUSPECT_HOLD:
                self.suspect = None

    @property
    def anomaly_rate(self) -> float | None:
        """Fraction of alarms among the last ``window`` scored readings, or None."""
        if not self._window:
            return None
        return self._window_flags / len(self._window)

    # ------------------------------------------------------------------ interval
    def _reset_interval(self) -> None:
        self._iv_n = 0
        self._iv_anomalies = 0
        self._iv_flagged: list[dict[str, Any]] = []
        self._iv_dropped = 0

    def interval_due(self, now: float) -> bool:
        """In ``"interval"`` mode: the interval ended (a document is due if it scored any)."""
        return self.mode == "interval" and now >= self._interval_start + self.interval_s

    def next_wakeup(self, now: float) -> float:
        """When `interval_document` has something to say next (monotonic seconds, the
        clock of ``now``); ``inf`` if never (``"reading"`` mode, or nothing scored)."""
        if self.mode != "interval" or self._iv_n == 0:
            return math.inf
        return self._interval_start + self.interval_s

    def interval_document(self, now: float, timestamp: float) -> dict[str, Any] | None:
        """The document of the interval that ended by ``now`` (None if it scored nothing,
        or not due); starts the next interval. ``now``: monotonic seconds; ``timestamp``:
        seconds since the Unix epoch (the document's ``ts``)."""
        if not self.interval_due(now):
            return None
        doc = None
        if self._iv_n:
            doc = {
                "node": self.node_id,
                "ts": round(float(timestamp), 3),
                "interval_s": self.interval_s,
                "n": self._iv_n,
                "anomalies": self._iv_anomalies,
                "anomaly": int(self._iv_anomalies > 0),
                "detector": DETECTOR,
                "flagged": self._iv_flagged,
                "flagged_dropped": self._iv_dropped,
            }
        self._interval_start = now  # an idle stretch is not made up for
        self._reset_interval()
        return doc

    # ------------------------------------------------------------------ status
    def health(self) -> tuple[object, ...]:
        """What makes the status document due early: a new alarm, a new or cleared
        suspect, the end of the warm-up, an error."""
        suspect = None if self.suspect is None else (self.suspect["sensor"], self.suspect["fault"])
        return (self.anomalies, suspect, self.detector is not None, self.scorer_error is None)

    def status_extra(self) -> dict[str, object]:
        """The scoring part of the leaf's status document ``extra``."""
        detector = self.detector
        return {
            "score": self.mode,
            "score_detector": DETECTOR,
            "scored": self.scored,
            "anomalies": self.anomalies,
            "anomaly_rate": self.anomaly_rate,
            "suspect": None if self.suspect is None else dict(self.suspect),
            "warming_up": self.warming_up,
            "detector_bytes": None if detector is None else detector.nbytes,
            "scorer_error": self.scorer_error,
        }
