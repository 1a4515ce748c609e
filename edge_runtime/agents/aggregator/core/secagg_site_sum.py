"""A secure-aggregation site's running noisy Gram matrix and ledger: `SiteSum`, a part of
`edge_runtime.agents.aggregator.core.secagg_site.SecAggSite`. No I/O, no clock.

A released `SlotOutcome` holds the exact sum mod ``2**bits`` of the survivors' noisy
encodings: decoded (`masking.decode`, ``scale``), unweighted
(`accounting.unweight_off_diagonal`), it is ``Y_k = (R G)_k + Z_k``, the slot's entry of
the continual release of the site's Gram increments ``G`` plus the Skellam noise of at least
``t`` shares. The sum applies the factorisation's ``L = R`` (``R R = M``, the prefix-sum
matrix: `edge_runtime.fpca.continual`) within each segment of ``H`` slots (slot ``s`` is
position ``s % H`` of segment ``s // H``, for the leaves too): with every position of the
segment released, ``S_T = closed + sum_{k <= T} c_{T-k} Y_k``, the running Gram plus
``R Z``. A position where no leaf revealed anything (no slot ran, or the slot was skipped
before its unmask request) has ``G = 0`` for the whole site (the leaves carried their
increments over), and the released positions ``K`` determine ``sum G`` exactly:
``S_T = closed + w^T Y_K`` with ``R_KK^T w = 1`` (``R_KK`` is unit lower-triangular; ``w_k =
c_{T-k}`` when ``K`` is every position). A slot skipped *after* its unmask request may have
revealed some survivors' increments, which no later release can separate: the segment
closes at its last output and its remaining slots are not used (counted as
``slots_discarded``; their readings are spent for the leaves, lost for the estimate; no
weaker guarantee, only less data). H = 1: every slot is its own segment and the running
Gram is the sum of the released ``Y``.

The ledger counts the slots by outcome (`COUNT_KEYS`), keeps the worst guarantee of a
release and the last `MAX_SLOTS_SHOWN` slots.

`export` and `restore` carry all of it across a restart as plain msgpack-able values (each
``(d, d)`` array as the bytes of its little-endian float64 entries, row-major); `restore`
checks everything (types, shapes, finiteness, the segment's consistency: the running Gram
equals the closed output plus the weighted releases) before it takes anything.

Memory: ``(H + 3) d**2`` float64 (the released ``Y`` of the open segment, the closed sum, the
output, a temporary); ``O(|K|**3 + |K| d**2)`` time per release (``|K| <= H``).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["COUNT_KEYS", "MAX_SLOTS_SHOWN", "SiteSum"]

#: Most recent slots listed in the status (``recent``): memory O(32).
MAX_SLOTS_SHOWN = 32
#: The ledger's counters, exactly these keys in a state.
COUNT_KEYS = (
    "released",
    "skipped",
    "discarded",
    "segments_closed_early",
    "advertisements_refused",
    "unrecorded",
)


class SiteSum:
    """The running noisy Gram of a site's released slots, and its ledger (module docstring).

    Parameters
    ----------
    n_features : int
        ``d``.
    horizon : int
        ``H`` of the continual release.
    coefficients : ndarray of shape (H,)
        ``c_0 .. c_{H-1}`` of the square-root factorisation.
    scale : float
        The encoding's scale (a sum's noise variance is ``2 mu / scale**2`` per entry).

    Attributes
    ----------
    counts : dict of str to int
        Slots by outcome (`COUNT_KEYS`).
    epsilon : float
        The worst guarantee per reading of the releases so far (0.0 before any).
    recent : deque of dict
        The last `MAX_SLOTS_SHOWN` slots' records.
    """

    def __init__(
        self, n_features: int, horizon: int, coefficients: np.ndarray, scale: float
    ) -> None:
        d = n_features
        self.n_features = d
        self.horizon = horizon
        self.coefficients = coefficients
        self.scale = scale
        self.segment: int | None = None  # slot // H of the open segment
        self.broken = False  # the open segment lost a position to a skip after unmasking
        self.positions: list[int] = []  # released positions K of the open segment
        self.released: list[np.ndarray] = []  # their Y_k, (d, d) each
        self.mus: list[float] = []  # their Skellam parameter per entry (survivors * share)
        self.closed = np.zeros((d, d))  # output of the closed segments
        self.closed_var = 0.0  # its noise variance per diagonal entry (Gram units**2)
        self.gram = np.zeros((d, d))  # the running noisy Gram, S_T
        self.gram_var = 0.0
        self.counts = dict.fromkeys(COUNT_KEYS, 0)
        self.epsilon = 0.0
        self.recent: deque[dict[str, Any]] = deque(maxlen=MAX_SLOTS_SHOWN)

    @property
    def fresh(self) -> bool:
        """Whether no slot has ended or been counted yet (a state may be restored)."""
        return not any(self.counts.values()) and self.segment is None

    # -- outcomes -----------------------------------------------------------------------------

    def add_release(
        self, slot: int, y: np.ndarray, mu: float, epsilon: float, survivors: int
    ) -> None:
        """Slot ``slot`` released ``y`` (``(d, d)``, unit-ball Gram units) with Skellam
        parameter ``mu`` per entry and guarantee ``epsilon``: into the running Gram unless
        its segment closed early (then counted as discarded)."""
        position = self._enter(slot)
        record: dict[str, Any] = {"slot": slot, "released": True, "survivors": survivors}
        if self.broken:
            self.counts["discarded"] += 1
            record["used"] = False
        else:
            self.positions.append(position)
            self.released.append(y)
            self.mus.append(mu)
            w = self._weights(self.positions, self.mus)
            self.gram = self.closed + np.einsum("k,kij->ij", w, np.stack(self.released))
            var = float(np.sum(w**2 * 2.0 * np.asarray(self.mus))) / self.scale**2
            self.gram_var = self.closed_var + var
            record["used"] = True
        self.counts["released"] += 1
        self.epsilon = max(self.epsilon, epsilon)
        record["epsilon"] = epsilon
        self.recent.append(record)

    def add_skip(self, slot: int, reason: str | None, after_unmask_request: bool) -> None:
        """Slot ``slot`` was skipped; after its unmask request its segment closes here."""
        self.counts["skipped"] += 1
        self.recent.append(
            {
                "slot": slot,
                "released": False,
                "reason": reason,
                "after_unmask_request": after_unmask_request,
            }
        )
        if after_unmask_request:  # some survivors may have revealed: the segment ends here
            self.break_segment(slot)

    def count(self, key: str, n: int = 1) -> None:
        """Add ``n`` to the ledger's ``key`` (`COUNT_KEYS`)."""
        self.counts[key] += n

    def break_segment(self, slot: int) -> None:
        """``slot`` may have revealed increments no release separates: its segment closes
        at its last output (the rest of it is not used)."""
        self._enter(slot)
        if not self.broken:
            self._close_segment()
            self.broken = self.horizon > 1
            self.counts["segments_closed_early"] += int(self.horizon > 1)

    def _close_segment(self) -> None:
        self.closed = self.gram
        self.closed_var = self.gram_var
        self.positions, self.released, self.mus = [], [], []

    def _enter(self, slot: int) -> int:
        """Open the segment of ``slot`` if it is a new one; returns the slot's position."""
        segment, position = divmod(slot, self.horizon)
        if segment != self.segment:
            self._close_segment()
            self.segment = segment
            self.broken = False
        return position

    def _weights(self, positions: list[int], mus: list[float]) -> np.ndarray:
        """``w`` with ``R_KK^T w = 1`` over the released ``positions`` ``K``."""
        k = np.asarray(positions)
        lags = k[:, None] - k[None, :]
        r_kk = np.where(lags >= 0, self.coefficients[np.maximum(lags, 0)], 0.0)
        return np.linalg.solve(r_kk.T, np.ones(len(k)))

    # -- restarts -----------------------------------------------------------------------------

    def export(self) -> dict[str, Any]:
        """The sum and ledger as plain msgpack-able values: the open segment (``segment``,
        ``broken``, ``positions``, ``released``, ``mus``), the estimate (``closed``,
        ``closed_var``, ``gram``, ``gram_var``), ``counts``, ``epsilon`` and ``recent``."""

        def raw(array: np.ndarray) -> bytes:
            return np.ascontiguousarray(array, dtype="<f8").tobytes()

        return {
            "segment": self.segment,
            "broken": self.broken,
            "positions": list(self.positions),
            "released": [raw(y) for y in self.released],
            "mus": list(self.mus),
            "closed": raw(self.closed),
            "closed_var": self.closed_var,
            "gram": raw(self.gram),
            "gram_var": self.gram_var,
            "counts": dict(self.counts),
            "epsilon": self.epsilon,
            "recent": [dict(r) for r in self.recent],
        }

    def restore(
        self, state: Mapping[str, Any], next_slot: int, fail: Callable[[str], ValueError]
    ) -> None:
        """Take an `export` back, all checked first (a state of slots up to ``next_slot``);
        on any failure raises ``fail(what)`` and nothing changes."""
        parsed = self._parse(state, next_slot, fail)
        d = self.n_features
        self.segment = parsed["segment"]
        self.broken = parsed["broken"]
        self.positions = parsed["positions"]
        self.released = parsed["released"]
        self.mus = parsed["mus"]
        self.closed = parsed["closed"].reshape(d, d)
        self.closed_var = parsed["closed_var"]
        self.gram = parsed["gram"].reshape(d, d)
        self.gram_var = parsed["gram_var"]
        self.counts = parsed["counts"]
        self.epsilon = parsed["epsilon"]
        self.recent = deque(parsed["recent"], maxlen=MAX_SLOTS_SHOWN)

    def _parse(
        self, state: Mapping[str, Any], next_slot: int, fail: Callable[[str], ValueError]
    ) -> dict[str, Any]:
        """`restore`'s checks; returns the values to take (arrays as float64)."""
        d, horizon = self.n_features, self.horizon

        def integer(key: str, low: int = 0, high: int = 2**64) -> int:
            value = state.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value < high:
                raise fail(f"{key} must be an int in [{low}, {high}), got {value!r}")
            return value

        def number(key: str, value: object = None) -> float:
            value = state.get(key) if value is None else value
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise fail(f"{key} must be a number, got {type(value).__name__}")
            if not (math.isfinite(value) and value >= 0):
                raise fail(f"{key} must be finite and >= 0, got {value!r}")
            return float(value)

        def matrix(key: str, value: object) -> np.ndarray:
            if not isinstance(value, bytes) or len(value) != d * d * 8:
                size = len(value) if isinstance(value, bytes) else type(value).__name__
                raise fail(f"{key} must be {d * d * 8} bytes (float64, {d} x {d}), got {size}")
            array = np.frombuffer(value, dtype="<f8").astype(np.float64).reshape(d, d)
            if not np.all(np.isfinite(array)):
                raise fail(f"{key} has non-finite entries")
            return array

        segment = state.get("segment")
        if segment is not None:  # at most the last started slot's
            segment = integer("segment", 0, (next_slot - 1) // horizon + 1 if next_slot else 0)
        broken = state.get("broken")
        if not isinstance(broken, bool) or (broken and (segment is None or horizon == 1)):
            raise fail(
                f"broken must be a bool (False without a segment or at H = 1), got {broken!r}"
            )
        positions, released, mus = (state.get(k) for k in ("positions", "released", "mus"))
        if not all(isinstance(v, list) for v in (positions, released, mus)):
            raise fail("positions, released and mus must be lists")
        if not len(positions) == len(released) == len(mus):
            raise fail(
                f"positions ({len(positions)}), released ({len(released)}) and mus "
                f"({len(mus)}) differ in length"
            )
        if positions and (segment is None or broken):
            raise fail("released positions without an open segment")
        for p in positions:
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < horizon:
                raise fail(f"positions must be ints in [0, {horizon}), got {positions!r}")
        if any(b <= a for a, b in itertools.pairwise(positions)):
            raise fail(f"positions must increase, got {positions!r}")
        if positions and segment * horizon + positions[-1] >= next_slot:
            raise fail(f"position {positions[-1]} of segment {segment} is not before next_slot")
        parsed_mus = [number("mus", m) for m in mus]
        if any(m <= 0 for m in parsed_mus):
            raise fail("mus must be > 0")
        ys = [matrix("released", y) for y in released]
        closed = matrix("closed", state.get("closed"))
        gram = matrix("gram", state.get("gram"))
        closed_var, gram_var = number("closed_var"), number("gram_var")
        if positions:
            w = self._weights(list(positions), parsed_mus)
            expect = closed + np.einsum("k,kij->ij", w, np.stack(ys))
            expect_var = closed_var + float(np.sum(w**2 * 2.0 * np.asarray(parsed_mus))) / (
                self.scale**2
            )
        else:
            expect, expect_var = closed, closed_var
        tol = 1e-9 * max(1.0, float(np.max(np.abs(expect), initial=0.0)))
        if not np.allclose(gram, expect, rtol=0.0, atol=tol):
            raise fail("gram differs from the closed output plus the segment's releases")
        if not math.isclose(gram_var, expect_var, rel_tol=1e-9, abs_tol=1e-300):
            raise fail(f"gram_var {gram_var!r} differs from the releases' {expect_var!r}")
        counts = state.get("counts")
        if not isinstance(counts, Mapping) or set(counts) != set(COUNT_KEYS):
            raise fail(f"counts must have the keys {list(COUNT_KEYS)}")
        for key, value in counts.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise fail(f"counts[{key!r}] must be an int >= 0, got {value!r}")
        if counts["released"] + counts["skipped"] > next_slot:
            raise fail(f"more slots ended than started before next_slot {next_slot}")
        recent = state.get("recent")
        if not isinstance(recent, list) or len(recent) > MAX_SLOTS_SHOWN:
            raise fail(f"recent must be a list of at most {MAX_SLOTS_SHOWN} records")
        for record in recent:
            if not (
                isinstance(record, Mapping)
                and all(isinstance(k, str) for k in record)
                and all(
                    v is None or isinstance(v, bool | int | float | str) for v in record.values()
                )
            ):
                raise fail(f"recent has a record that is not a flat str-keyed map: {record!r}")
        return {
            "segment": segment,
            "broken": broken,
            "positions": list(positions),
            "released": ys,
            "mus": parsed_mus,
            "closed": closed,
            "closed_var": closed_var,
            "gram": gram,
            "gram_var": gram_var,
            "counts": dict(counts),
            "epsilon": number("epsilon"),
            "recent": [dict(r) for r in recent],
        }

    def noise_std(self) -> float:
        """Std of a diagonal entry of the running Gram's noise (unit-ball Gram units)."""
        return math.sqrt(self.gram_var)

