"""Per-sensor temporal rules of `edge_runtime.fpca.faults.FaultDetector`: NOISE, CONSTANT, RAIL.

What the cross-sensor models cannot see from one reading: a sensor that repeats its value
while the others say it should move (CONSTANT, Sharma, Golubchik & Govindan, ACM TOSN
6(3), 2010), that sits at its saturation rail while the level model says it should be
lower (RAIL), or that keeps making large changes of its own (NOISE). `TemporalRules`
keeps the per-sensor state these need and turns each reading into per-sensor scores;
the limits, the models and the decision stay in `FaultDetector`.

Pure numpy. Memory: six ``(d,)`` arrays of 8 bytes, ``48 d`` bytes; ``O(d)`` per reading.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TemporalRules"]


class TemporalRules:
    """Per-sensor run lengths, accumulated predictions, rail and noise EWMA.

    Parameters
    ----------
    n_features : int
        Sensors ``d``.
    noise_halflife : float
        Half-life (readings) of the NOISE EWMA, > 0.
    noise_clip : float
        ``|z|`` is clipped there before the NOISE EWMA (a spike is not noise).
    min_run : int
        Readings a value must repeat before CONSTANT scores it, >= 1.
    mute_after : int
        Readings of repetition after which a sensor is offline (dead): CONSTANT and RAIL
        score it 0 until it changes, >= 1.
    rtol : float
        Relative tolerance (``rtol * max(|x|, 1)``) under which two values are equal.
    zero_rail : bool
        Whether a sensor at <= 0 for ``min_run`` readings scores ``inf`` (stuck at 0).

    Attributes
    ----------
    noise, acc : ndarray of shape (d,)
        NOISE EWMA (squared standardised changes); changes the other sensors predicted
        over the current run (units of the transformed readings).
    run, rail_run : ndarray of shape (d,), int64
        Readings the value has repeated; readings at the rail.
    rail, x_prev : ndarray of shape (d,)
        Largest accepted value (the saturation rail); the previous reading (raw units).
    """

    def __init__(
        self,
        n_features: int,
        *,
        noise_halflife: float,
        noise_clip: float,
        min_run: int,
        mute_after: int,
        rtol: float,
        zero_rail: bool,
    ) -> None:
        d = int(n_features)
        self.noise_a = 1.0 - 0.5 ** (1.0 / noise_halflife)
        self.noise_clip = float(noise_clip)
        self.min_run = int(min_run)
        self.mute_after = int(mute_after)
        self.rtol = float(rtol)
        self.zero_rail = bool(zero_rail)
        self.noise = np.zeros(d)
        self.acc = np.zeros(d)
        self.run = np.zeros(d, dtype=np.int64)
        self.rail_run = np.zeros(d, dtype=np.int64)
        self.rail = np.zeros(d)
        self.x_prev = np.zeros(d)

    def start(self, X: np.ndarray) -> None:  # noqa: N803
        """Rail = largest warm-up value per sensor; previous reading = the first one.

        Parameters
        ----------
        X : ndarray of shape (n_warmup, d)
            The warm-up readings (raw units).
        """
        self.rail = X.max(axis=0)
        self.x_prev = X[0].copy()

    def scores(
        self,
        x: np.ndarray,
        z2: np.ndarray,
        pred: np.ndarray,
        scale2: np.ndarray,
        level_z: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Update the state with reading ``x`` and score every sensor.

        Parameters
        ----------
        x : ndarray of shape (d,)
            The reading, raw units.
        z2 : ndarray of shape (d,)
            Squared standardised leave-one-out changes.
        pred : ndarray of shape (d,)
            The change of each sensor the other sensors predict (transformed units).
        scale2 : ndarray of shape (d,)
            Mean square of the leave-one-out changes (transformed units squared).
        level_z : ndarray of shape (d,)
            Leave-one-out level residual over its RMS (signed, dimensionless).

        Returns
        -------
        noise, constant, rail : ndarray of shape (d,)
            NOISE: EWMA of ``min(z2, noise_clip^2)``. CONSTANT: ``|acc| / sqrt(scale2)``
            for sensors repeated ``min_run`` readings (``inf`` at 0 with ``zero_rail``).
            RAIL: ``level_z`` for sensors at their rail for 2+ readings. 0 where a rule
            does not apply, and for CONSTANT and RAIL on muted (dead) sensors.
        """
        self.noise += self.noise_a * (np.minimum(z2, self.noise_clip**2) - self.noise)
        tol = self.rtol * np.maximum(np.abs(x), 1.0)
        self.run = np.where(np.abs(x - self.x_prev) <= tol, self.run + 1, 0)
        self.acc = np.where(self.run > 0, self.acc + pred, 0.0)
        live = self.run < self.mute_after
        repeated = live & (self.run >= self.min_run)
        constant = np.where(repeated, np.abs(self.acc), 0.0) / np.sqrt(scale2)
        if self.zero_rail:
            constant = np.where(repeated & (x <= 0.0), np.inf, constant)
        self.rail_run = np.where(x >= self.rail - tol, self.rail_run + 1, 0)
        rail = np.where(live & (self.rail_run >= 2), level_z, 0.0)
        return self.noise, constant, rail

    def accept(self, x: np.ndarray, ok: np.ndarray) -> None:
        """After the decision: raise the rail of unflagged sensors, remember ``x``."""
        self.rail = np.where(ok, np.maximum(self.rail, x), self.rail)
        self.x_prev = x

    @property
    def nbytes(self) -> int:
        """Bytes of array state (fixed)."""
        arrays = (self.noise, self.acc, self.run, self.rail_run, self.rail, self.x_prev)
        return int(sum(a.nbytes for a in arrays))
