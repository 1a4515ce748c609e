"""A streaming sensor-fault detector with adaptive limits, for one leaf's readings.

`FaultDetector` scores one reading ``x`` (shape ``(n_features,)``, one value per sensor)
at a time and says whether it raises an alarm and which sensor it suspects. It
complements the static Q/T^2 limits of `edge_runtime.fpca.scoring` (kept unchanged),
which assume Gaussian, stationary readings: Motes light is neither (day/night cycles,
heavy-tailed changes), and the static limits flag 58.5% of its clean readings.

Pipeline per reading (all per sensor ``j`` unless said otherwise):

1. Transform ``v = log(max(x, 0) + log_offset)`` (``log_offset=None``: ``v = x``):
   light changes are multiplicative (lights on/off scale whole groups of sensors).
2. Change ``dv = v - ref`` against the last *accepted* value ``ref`` (for a sensor
   under a SHORT alarm ``ref`` follows the change the other sensors predict instead,
   so one spike is one alarm, not two).
3. Two cross-sensor models (`LaggedPCA`: exponentially weighted covariance, recursive
   PCA as Li et al., J. Process Control 10, 2000, with a basis that lags one refresh
   period, an N-step-ahead model as Wang, Kruger & Irwin, Ind. Eng. Chem. Res. 44,
   2005, so that a fault is scored before it can be learned): one of the changes
   ``dv`` (rank ``rank``), one of the levels ``v`` (rank ``level_rank``). Each gives
   the leave-one-out residual ``loo_j``: sensor ``j``'s value minus what the other
   sensors predict for it. ``z_j = loo_j / scale_j``, ``scale_j`` the exponentially
   weighted RMS of the unflagged ``loo_j``.
4. Rules (fault types of Sharma, Golubchik & Govindan, ACM TOSN 6(3), 2010), each a
   per-sensor score:

   - SHORT: ``|loo_j|`` of the change over a *local* RMS (half-life ``local_halflife``
     readings, floored at ``local_floor`` times ``scale_j``). When it fires on ``j``
     the others' residuals are recomputed without ``j`` (a spike leaks into them
     through the projection).
   - RAIL (reported as "constant"): a sensor at the largest value it has shown (its
     saturation) for 2+ readings while the level model says it should be lower:
     ``loo_j`` of the level over its RMS (one-sided).
   - CONSTANT: a sensor whose value has repeated ``run_j >= min_run`` readings, ``|sum of
     the changes the other sensors predict for j over the run| / scale_j``: the truth
     moved away while the sensor did not; and a sensor at 0 for ``min_run`` readings
     (``zero_rail``). Sensors repeated ``mute_after`` readings are offline (dead) and
     muted for these two rules.
   - NOISE: an EWMA (half-life ``noise_halflife`` readings) of ``min(z_j^2,
     noise_clip^2)``: sustained large changes of one sensor.

   RAIL, CONSTANT and NOISE keep per-sensor state over time (`faults_rules.TemporalRules`).

   Each rule has its own `PotLimit`, an extreme-value (peaks-over-threshold) limit at
   ``risk`` per reading on the rule's largest score over the sensors, fed only with the
   scores of unflagged sensors.
5. The verdict names the first rule that fires (order `RULES`) and the sensor with its
   largest score. Flagged sensors do not update the models, scales or limits.

Cost. Memory is fixed (`FaultDetector.nbytes`), independent of the number of readings:
for ``d`` sensors ``8 (4 d^2 + (rank + level_rank) d + 4 window) + 120 d`` bytes; 48
sensors at the defaults: 148,864 bytes (limits 65,536, the two models 79,104, per-sensor
vectors 4,224), i.e. 3.1 kB per sensor. Time per reading is ``O(d^2)`` (two covariance
updates) plus an ``O(d^3)`` eigendecomposition per model every ``refresh`` readings and
an ``O(window)`` limit refit every ``every``: median 120 us, mean 133 us per 48-sensor
reading on one x86 core (Motes light, 4925 readings), `from_warmup` of one device-day
0.8 s.

Measured (``python -m benchmarks.anomaly.events``, Motes light, warm-up the first
device-day, 20 seeds of faults, defaults): 1.7 clean alarm events per device-day, event
precision 0.82, identification 1.00, NAB 24.7 (static Q/T^2 limits 18.2, robust z of
differences 14.9); recall SHORT 0.04 (6 of 160 spikes of 5-10 sigma), NOISE 0.26,
CONSTANT 0.53 (stuck at 0: 32 of 32, at the rail 25 of 40, frozen 6 of 48), drift 0.
The clean Motes stream itself holds level shifts and glitches of that size (a mote's
1847 lux for one reading, drops from 1141 to 210 lux that stay): at 2 events per
device-day no single-reading statistic tried (per-sensor and cross-sensor, global and
local scales, lux and log) caught more than a tenth of 5-10 sigma spikes.

Pure numpy, no I/O; time is an argument; deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_runtime.fpca.faults_limits import PotLimit
from edge_runtime.fpca.faults_model import LaggedPCA
from edge_runtime.fpca.faults_rules import TemporalRules

__all__ = [
    "DEFAULT_RISK",
    "FLOORS",
    "KINDS",
    "RULES",
    "FaultDetector",
    "FaultVerdict",
    "auto_log_offset",
]

#: Fault kinds a verdict may name ("" when there is no alarm).
KINDS = ("short", "noise", "constant")

#: Lowest limit of each rule, whatever the fitted tail says: 3 standardised changes for
#: SHORT and CONSTANT, 9 (3 squared) for NOISE. A rule whose clean scores are all 0 (no
#: sensor ever repeats a value) would otherwise fit a limit of 0.
FLOORS = {"short": 3.0, "rail": 3.0, "constant": 3.0, "noise": 9.0}

#: The rules, in the order they are tried (the first that fires names the suspect), and
#: the kind each reports: RAIL is a CONSTANT fault found by the level model.
RULES = ("short", "rail", "constant", "noise")
RULE_KIND = {"short": "short", "rail": "constant", "constant": "constant", "noise": "noise"}

#: Per-reading risk of each rule's limit, chosen on Motes light with the event benchmark
#: (``python -m benchmarks.anomaly.events``, 20 seeds; clean alarm events per device-day
#: must stay <= 2). At the other defaults: SHORT and NOISE 1e-4 gave 1.7 events per day,
#: precision 0.84, NAB 23.7; both 3e-4 1.7, 0.82, NAB 24.7 (SHORT 6 instead of 4 of 160,
#: NOISE 21 instead of 19 of 80); NOISE 5e-4 or SHORT 1e-3 raised clean events to 3.4 and
#: 4.5 per day. RAIL and CONSTANT fire on the motes that die in the clean stream: at 5e-5
#: instead of 2e-5, 2.8 and 2.3 events per day.
DEFAULT_RISK = {"short": 3e-4, "rail": 2e-5, "constant": 2e-5, "noise": 3e-4}


@dataclass(frozen=True)
class FaultVerdict:
    """What `FaultDetector.verdict` says about one reading.

    Attributes
    ----------
    t : float
        The reading's time as passed (seconds, any origin).
    alarm : bool
        Whether any rule's score exceeds its limit.
    sensor : int
        Index of the suspected sensor (column), -1 without an alarm.
    kind : str
        One of `KINDS`, "" without an alarm.
    rule : str
        The rule that fired (one of `RULES`: "rail" reports kind "constant"), "" without
        an alarm.
    score : float
        The score of ``kind`` (or, without an alarm, of the rule closest to its limit).
    limit : float
        Its limit, same units (standardised changes; squared for "noise"), at least
        `FLOORS`.
    contributions : ndarray of shape (n_features,)
        ``z_j^2``: each sensor's squared standardised leave-one-out change.
    """

    t: float
    alarm: bool
    sensor: int
    kind: str
    rule: str
    score: float
    limit: float
    contributions: np.ndarray


def auto_log_offset(X: np.ndarray) -> float | None:  # noqa: N803
    """The log transform's offset for readings ``X`` (n, d): None if any is negative.

    Non-negative readings (light, counts) change multiplicatively, so the detector works
    on ``log(x + c)``; ``c`` is the median over the sensors of the robust sigma of the
    non-zero first differences (``1.4826 median |diff|``), the scale below which ratios
    are resolution noise. On Motes light (first device-day) it is 14.4 lux. Measured
    there (rank-8 model of changes, 3000 spikes of 20 sigma, threshold at 10 clean
    events per day): offsets 10 and 50 lux caught 15% and 12% of the spikes, no
    transform 0%. Returns None (no transform) for signed data or when no sensor ever
    changes.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)

    Returns
    -------
    float or None
        Units of ``X``.
    """
    x = np.asarray(X, dtype=np.float64)
    if x.size == 0 or (x < 0).any():
        return None
    diff = np.diff(x, axis=0)
    sig = [1.4826 * float(np.median(np.abs(c[c != 0]))) for c in diff.T if np.any(c != 0)]
    return float(np.median(sig)) if sig else None


class FaultDetector:
    """Streaming SHORT/NOISE/CONSTANT sensor-fault detector (see the module docstring).

    Build it with `from_warmup` from clean readings; then call `update` (or `verdict`)
    once per reading, in time order.

    Parameters
    ----------
    n_features : int
        Number of sensors ``d >= 2``.
    rank : int or None, default=None
        Directions of the cross-sensor model of changes, ``0 <= rank < d``; None:
        ``min(8, d // 4)``, few enough that no sensor's variance is mostly in the basis.
        On Motes light (first device-day as warm-up, 3000 spikes of 20 sigma in the
        rest, threshold at 2 / 10 clean events per day) ranks 0, 3, 8, 15 caught 3/6,
        3/12, 7/15, 5/15 % of them.
    level_rank : int or None, default=None
        Directions of the cross-sensor model of levels (the RAIL rule), ``0 <= . < d``;
        None: ``min(2, d // 4)``. On Motes light rank 2 caught 71% of stuck-at-rail
        faults at 1 clean event per day, ranks 4 and 8 58%.
    log_offset : float or None, default=None
        Offset of the log transform (units of the readings); None: no transform.
        `from_warmup` chooses it from the data unless given (`auto_log_offset`).
    halflife : float, default=2787.0
        Half-life (readings) of the weighted covariances and of the scales; the default
        is one Motes device-day. Event benchmark, 5 seeds: 1000 gave 5.1 clean events
        per device-day, 8000 2.3, 2787 1.7.
    refresh : int, default=1024
        Readings between model refreshes; the models in use lag ``refresh`` to ``2 *
        refresh`` readings behind. Event benchmark, Motes light, 5 seeds (with
        ``noise_halflife=8``): 1024 gave NAB 25.5, precision 0.90 and 1.7 clean events
        per device-day; 256 gave NAB 22.8 and 1.1 events; 64 (with ``noise_halflife=4``)
        2.3 events per day and 2048 2.8: over the budget of 2.
    risk : float or dict of str to float or None, default=None
        Per-reading exceedance probability of each rule's limit; a dict gives it per rule
        (keys of `RULES`, missing ones from `DEFAULT_RISK`); None: `DEFAULT_RISK`.
    window : int, default=2048
        Scores kept per limit.
    level : float, default=0.98
        Tail threshold quantile of the POT fit.
    every : int, default=64
        Readings between limit refits.
    noise_halflife : float, default=8.0
        Half-life (readings) of the NOISE rule's EWMA. Event benchmark, Motes light, 5
        seeds (``refresh=256``): half-lives 2, 4, 8, 16 caught 2, 2, 5, 6 of 20 noise
        faults at 1.7, 1.7, 1.1, 1.1 clean events per device-day; with ``refresh=1024``
        8 and 16 caught 7 and 8 of 20 at 1.7, NAB 25.5 and 25.0; at the final risks and 20
        seeds 8 and 16 gave NAB 24.7 and 24.6, precision 0.82 and 0.80.
    noise_clip : float, default=6.0
        ``|z|`` is clipped there before entering the NOISE EWMA (a spike is not noise).
    min_run : int, default=3
        Readings a value must repeat before the CONSTANT rule scores it. Event benchmark,
        Motes light, 5 seeds: 2 and 3 the same, 5 raised clean events from 1.7 to 2.8
        per device-day.
    reanchor : int, default=30
        After this many consecutive SHORT alarms on one sensor its new level is accepted
        (10 and 30 measured the same on the event benchmark).
    rtol : float, default=1e-6
        Relative tolerance under which two values count as equal.
    zero_rail : bool, default=True
        A sensor reading 0 (or less) for ``min_run`` readings is a CONSTANT fault (stuck
        at the low rail). Set False where 0 is a normal value or unfilled dropouts.
    mute_after : int, default=100
        A sensor whose value has repeated this many readings is taken as offline (a dead
        mote): the CONSTANT and RAIL rules stop scoring it until it changes, so a dead
        sensor is one event and its alarm does not swallow the next fault's. Longer than
        any frozen stretch the detector must catch at its start (the benchmark's: 20-80).
        Motes light's clean stream has motes that die (their filled dropouts repeat for
        800-3000 readings): without muting, 3.4 clean alarm events per device-day, with
        it 1.1 (risk 2e-5, before the RAIL rule existed).
    local_halflife : float or None, default=30.0
        If set, the SHORT rule scales ``loo_j`` by a local RMS (this half-life, readings,
        unflagged readings only) floored at ``local_floor`` times the global one, instead
        of the global RMS: a change is judged against the sensor's recent activity. None:
        the global RMS. On Motes light (20 seeds) 30 against None: NAB 18.8 against
        18.3, NOISE 6 against 4 of 80, clean events the same (1.7 per device-day).
    local_floor : float, default=0.3
        See ``local_halflife``. Event benchmark, Motes light, 20 seeds: 0.6 gave the same
        NAB (24.7) at precision 0.80 against 0.82.

    Raises
    ------
    ValueError
        If a parameter is out of range (the message names it).
    """

    def __init__(
        self,
        n_features: int,
        *,
        rank: int | None = None,
        level_rank: int | None = None,
        log_offset: float | None = None,
        halflife: float = 2787.0,
        refresh: int = 1024,
        risk: float | dict[str, float] | None = None,
        window: int = 2048,
        level: float = 0.98,
        every: int = 64,
        noise_halflife: float = 8.0,
        noise_clip: float = 6.0,
        min_run: int = 3,
        reanchor: int = 30,
        rtol: float = 1e-6,
        zero_rail: bool = True,
        mute_after: int = 100,
        local_halflife: float | None = 30.0,
        local_floor: float = 0.3,
    ) -> None:
        d = int(n_features)
        if d < 2:
            raise ValueError(f"n_features must be >= 2, got {n_features}")
        rank = min(8, d // 4) if rank is None else rank
        level_rank = min(2, d // 4) if level_rank is None else level_rank
        for name, r in (("rank", rank), ("level_rank", level_rank)):
            if not 0 <= r < d:
                raise ValueError(f"{name} must be in [0, {d}), got {r}")
        if log_offset is not None and not log_offset > 0:
            raise ValueError(f"log_offset must be > 0 or None, got {log_offset}")
        for name, value in (("halflife", halflife), ("noise_halflife", noise_halflife)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if min(refresh, min_run, reanchor, mute_after) < 1:
            raise ValueError("refresh, min_run, reanchor and mute_after must be >= 1")
        if risk is None:
            risks = DEFAULT_RISK
        elif isinstance(risk, dict):
            risks = {**DEFAULT_RISK, **risk}
        else:
            risks = dict.fromkeys(RULES, float(risk))
        if set(risks) - set(RULES):
            raise ValueError(f"risk keys must be among {RULES}, got {sorted(risks)}")
        self.n_features = d
        self.log_offset = None if log_offset is None else float(log_offset)
        self.reanchor = int(reanchor)
        self.mute_after = int(mute_after)
        self.local_floor = float(local_floor)
        self._local_a = None if local_halflife is None else 1.0 - 0.5 ** (1.0 / local_halflife)
        self._a = 1.0 - 0.5 ** (1.0 / halflife)
        self.limits = {k: PotLimit(window, float(risks[k]), level, every) for k in RULES}
        forget = 1.0 - self._a
        self.changes = LaggedPCA(d, rank, forget, refresh, centered=False)
        self.levels = LaggedPCA(d, level_rank, forget, refresh, centered=True)
        self.rules = TemporalRules(
            d,
            noise_halflife=noise_halflife,
            noise_clip=noise_clip,
            min_run=min_run,
            mute_after=mute_after,
            rtol=rtol,
            zero_rail=zero_rail,
        )
        # Per-sensor state, all of shape (d,).
        self._scale2 = np.ones(d)  # weighted mean square of the change loo
        self._local2 = np.ones(d)  # the same over ~local_halflife readings
        self._lscale2 = np.ones(d)  # weighted mean square of the level loo
        self._ref = np.zeros(d)  # last accepted transformed value
        self._streak = np.zeros(d, dtype=np.int64)  # consecutive SHORT alarms
        self.n_seen = 0
        self.learning = False  # True: push every score, raise no alarm (warm-up)

    @classmethod
    def from_warmup(cls, X: np.ndarray, **params: object) -> FaultDetector:  # noqa: N803
        """A detector whose models, scales and limits are learned from clean readings.

        Parameters
        ----------
        X : array-like of shape (n_warmup, n_features)
            Clean readings in time order, finite; ``n_warmup >= 2`` (a few hundred or
            more for useful limits: a limit needs ``2 * MIN_EXCESSES / (1 - level)``
            scores, 800 at the defaults, before its first fit; until then it is
            `FLOORS`).
        **params
            Keyword parameters of `FaultDetector`; without ``log_offset``,
            `auto_log_offset` of ``X`` chooses it, and without ``zero_rail`` it is True
            only if ``X`` has no negative reading (0 is a rail of non-negative sensors,
            an ordinary value of signed ones).

        Returns
        -------
        FaultDetector
            Ready for `update`; the last warm-up reading is its previous reading.

        Raises
        ------
        ValueError
            If ``X`` is not 2-D with >= 2 rows or not finite, or a parameter is invalid.
        """
        x = np.asarray(X, dtype=np.float64)
        if x.ndim != 2 or x.shape[0] < 2:
            raise ValueError(f"X must be 2-D with >= 2 rows, got shape {x.shape}")
        if not np.isfinite(x).all():
            raise ValueError("X must be finite")
        if "log_offset" not in params:
            params["log_offset"] = auto_log_offset(x)
        if "zero_rail" not in params:
            params["zero_rail"] = bool((x >= 0).all())
        det = cls(x.shape[1], **params)  # type: ignore[arg-type]
        v = det._transform(x)
        dv = np.diff(v, axis=0)
        # Models and scales from the whole warm-up (batch), then a replay in learning
        # mode fills the limits with the scores the stream would have produced.
        det.changes.fit(dv)
        det.levels.fit(v)
        loo = np.array([det.changes.loo(row) for row in dv])
        det._scale2 = np.maximum(np.mean(loo * loo, axis=0), 1e-12)
        det._local2 = det._scale2.copy()
        lres = np.array([det.levels.loo(row) for row in v])
        det._lscale2 = np.maximum(np.mean(lres * lres, axis=0), 1e-12)
        det.rules.start(x)
        det._ref = v[0].copy()
        det.learning = True
        for row in x[1:]:
            det.verdict(row, 0.0)
        det.learning = False
        for lim in det.limits.values():
            lim.refit()
        return det

    def _transform(self, x: np.ndarray) -> np.ndarray:
        if self.log_offset is None:
            return np.asarray(x, dtype=np.float64)
        return np.log(np.maximum(x, 0.0) + self.log_offset)

    def _limit(self, rule: str) -> float:
        return max(self.limits[rule].limit, FLOORS[rule])

    def update(self, x: np.ndarray, t: float) -> tuple[bool, int]:
        """Score one reading; ``(alarm, suspected sensor index or -1)``.

        Parameters
        ----------
        x : ndarray of shape (n_features,)
            One reading, finite, units of the warm-up.
        t : float
            Its time (seconds); recorded in the verdict only.

        Returns
        -------
        tuple of (bool, int)

        Raises
        ------
        ValueError
            If ``x`` has the wrong shape or is not finite (the state is then unchanged).
        """
        v = self.verdict(x, t)
        return v.alarm, v.sensor

    def verdict(self, x: np.ndarray, t: float) -> FaultVerdict:
        """Score one reading and update the state; the full `FaultVerdict`.

        Parameters and errors as `update`. The sensors no rule flags update the models,
        the scales and the limits; flagged ones update none of them (the models take the
        value the other sensors predict for them instead).
        """
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        if x.shape[0] != self.n_features:
            raise ValueError(f"x must have shape ({self.n_features},), got {x.shape}")
        if not np.isfinite(x).all():
            raise ValueError("x must be finite (screen missing readings before the detector)")
        v = self._transform(x)
        dv = v - self._ref
        loo = self.changes.loo(dv)
        short_den = (
            self._scale2
            if self._local_a is None
            else np.maximum(self._local2, self.local_floor**2 * self._scale2)
        )
        zs2 = loo * loo / short_den
        j = int(np.argmax(zs2))
        if not self.learning and zs2[j] > self._limit("short") ** 2:
            # A spike on j leaks into the others' residuals through the projection.
            loo = self.changes.loo(dv, exclude=j)
            zs2 = loo * loo / short_den
        z2 = loo * loo / self._scale2
        lres = self.levels.loo(v)
        noise, cscore, rscore = self.rules.scores(
            x, z2, dv - loo, self._scale2, lres / np.sqrt(self._lscale2)
        )
        per = {"short": np.sqrt(zs2), "rail": rscore, "constant": cscore, "noise": noise}
        limits = {k: self._limit(k) for k in RULES}
        flagged = np.zeros(self.n_features, dtype=bool)
        rule, sensor = "", -1
        if not self.learning:
            for k in RULES:
                over = per[k] > limits[k]
                if over.any():
                    flagged |= over
                    if sensor < 0:
                        rule, sensor = k, int(np.argmax(per[k]))
        short_over = flagged & (per["short"] > limits["short"])
        self._learn(x, v, dv, loo, lres, per, flagged, short_over)
        self.n_seen += 1
        if sensor >= 0:
            kind, score, limit = RULE_KIND[rule], float(per[rule][sensor]), limits[rule]
        else:
            ratio = {k: float(per[k].max()) / limits[k] for k in RULES}
            near = max(ratio, key=ratio.__getitem__)
            kind, score, limit = "", float(per[near].max()), limits[near]
        return FaultVerdict(float(t), sensor >= 0, sensor, kind, rule, score, limit, z2)

    def _learn(
        self,
        x: np.ndarray,
        v: np.ndarray,
        dv: np.ndarray,
        loo: np.ndarray,
        lres: np.ndarray,
        per: dict[str, np.ndarray],
        flagged: np.ndarray,
        short_over: np.ndarray,
    ) -> None:
        """Learn from the unflagged sensors of this reading; flagged ones are imputed."""
        ok = ~flagged
        pred = dv - loo  # the change the other sensors predict
        self.changes.learn(np.where(ok, dv, pred))
        self.levels.learn(np.where(ok, v, v - lres))
        self.changes.tick()
        self.levels.tick()
        a = self._a
        self._scale2 = np.where(ok, self._scale2 + a * (loo * loo - self._scale2), self._scale2)
        self._lscale2 = np.where(
            ok, self._lscale2 + a * (lres * lres - self._lscale2), self._lscale2
        )
        np.maximum(self._scale2, 1e-12, out=self._scale2)
        np.maximum(self._lscale2, 1e-12, out=self._lscale2)
        if self._local_a is not None:
            b = self._local_a
            self._local2 = np.where(ok, self._local2 + b * (loo * loo - self._local2), self._local2)
        for k in RULES:
            finite = ok & np.isfinite(per[k])  # a zero-rail score is inf
            if finite.any():
                self.limits[k].push(float(per[k][finite].max()))
        self.rules.accept(x, ok)
        # Short-flagged sensors keep a reference where the others say they should be,
        # until `reanchor` consecutive alarms accept the new level.
        self._streak = np.where(flagged, self._streak + 1, 0)
        keep = short_over & (self._streak < self.reanchor)
        self._ref = np.where(keep, self._ref + pred, v)
        self._streak[self._streak >= self.reanchor] = 0

    def run(self, X: np.ndarray, t: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:  # noqa: N803
        """`update` over the rows of ``X`` in order.

        Parameters
        ----------
        X : array-like of shape (n_readings, n_features)
        t : array-like of shape (n_readings,) or None
            Times (seconds); None: the row index.

        Returns
        -------
        alarms : ndarray of shape (n_readings,), bool
        sensors : ndarray of shape (n_readings,), int64
            Suspected sensor, -1 without an alarm.
        """
        x = np.asarray(X, dtype=np.float64)
        times = np.arange(len(x), dtype=np.float64) if t is None else np.asarray(t, float)
        alarms = np.zeros(len(x), dtype=bool)
        sensors = np.full(len(x), -1, dtype=np.int64)
        for i in range(len(x)):
            alarms[i], sensors[i] = self.update(x[i], float(times[i]))
        return alarms, sensors

    @property
    def nbytes(self) -> int:
        """Bytes of array state: fixed, independent of the number of readings."""
        arrays = [v for v in vars(self).values() if isinstance(v, np.ndarray)]
        return int(
            sum(a.nbytes for a in arrays)
            + sum(lim.nbytes for lim in self.limits.values())
            + self.changes.nbytes
            + self.levels.nbytes
            + self.rules.nbytes
        )
