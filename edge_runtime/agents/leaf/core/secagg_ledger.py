"""The durable ledger of a `SecAggRelease` (`edge_runtime.agents.leaf.core.secagg_release`).

`SecAggLedger`, the mixin `SecAggRelease` inherits: what a leaf keeps across a restart and
continues from (`export_ledger`, `restore_ledger`, with their validation), and the slots an
earlier incarnation had a masked input in flight at the crash, outcome not learnt yet
(`unresolved_slots`, `resolve_in_flight`). The state it reads and writes is
`SecAggRelease`'s, created by its ``__init__``; the status ledger (`SecAggRelease.ledger`)
stays there. No I/O, no clock.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edge_runtime.secagg import messages
from edge_runtime.secagg.accounting import SkellamCalibration, site_epsilon
from edge_runtime.secagg.leaf_round import LeafRound

__all__ = ["MAX_IN_FLIGHT_RECORDS", "SecAggLedger"]


_COUNTERS = (
    "readings_released",
    "slots_contributed",
    "slots_released",
    "slots_revealed_skipped",
    "slots_carried_over",
)
"""The ledger's counters that `SecAggRelease.export_ledger` keeps across restarts."""

_LATER_COUNTERS = ("slots_in_flight_unknown", "readings_in_flight_unknown")
"""Counters added later: a ledger without them has them at zero."""

MAX_IN_FLIGHT_RECORDS = 64
"""Most in-flight records a ledger may hold (slots masked, unanswered, outcome not learnt)."""

_EPSILON_SLACK = 1e-6
"""Relative slack of a restored ``epsilon`` over ``epsilon_target`` (rounding, not budget)."""


class SecAggLedger:
    """The ledger methods of `SecAggRelease` (a mixin: the state is `SecAggRelease`'s)."""

    leaf_id: str
    n_features: int
    threshold: int
    horizon: int
    scale: float
    bits: int
    clip_norm: float
    max_rows_per_slot: int
    calibration: SkellamCalibration
    pending_rows: int  # a property of `SecAggRelease`
    _round: LeafRound | None
    _in_flight: tuple[np.ndarray, int] | None
    _revealed: bool
    _last_slot: int
    _last_outcome: dict[str, Any] | None
    _unresolved: dict[int, int]
    _epsilon: float
    _readings_released: int
    _slots_contributed: int
    _slots_released: int
    _slots_revealed_skipped: int
    _slots_carried_over: int
    _slots_in_flight_unknown: int
    _readings_in_flight_unknown: int

    # -- ledger -------------------------------------------------------------------------------

    def _settings(self) -> dict[str, Any]:
        """What a ledger is for: this leaf and its calibration (`export_ledger`)."""
        return {
            "leaf_id": self.leaf_id,
            "n_features": int(self.n_features),
            "threshold": int(self.threshold),
            "horizon": int(self.horizon),
            "scale": float(self.scale),
            "bits": int(self.bits),
            "clip_norm": float(self.clip_norm),
            "epsilon_target": float(self.calibration.epsilon),
            "delta": float(self.calibration.delta),
        }

    def export_ledger(self) -> dict[str, Any]:
        """The ledger to keep across a restart (plain msgpack/JSON types; `restore_ledger`).

        The settings it is for (``leaf_id``, ``n_features``, ``threshold``, ``horizon``,
        ``scale``, ``bits``, ``clip_norm``, ``epsilon_target``, ``delta``), the counters of
        `ledger` that only grow (``readings_released``, ``slots_contributed``,
        ``slots_released``, ``slots_revealed_skipped``, ``slots_carried_over``), ``epsilon``,
        ``last_slot`` (the highest slot this leaf has seen or is in) and ``last``. Nothing
        beyond what `ledger` publishes: no readings, Gram matrices, keys or noise. A round
        revealed and not ended yet counts at its worst case (``t`` survivors) in
        ``epsilon``, as `end_slot` would count it.
        """
        epsilon = self._epsilon
        if self._round is not None and self._revealed:
            epsilon = max(epsilon, site_epsilon(self.calibration, self.threshold))
        last_slot = self._last_slot
        if self._round is not None:
            last_slot = max(last_slot, self._round.slot)
        counters = {
            "readings_released": self._readings_released,
            "slots_contributed": self._slots_contributed,
            "slots_released": self._slots_released,
            "slots_revealed_skipped": self._slots_revealed_skipped,
            "slots_carried_over": self._slots_carried_over,
        }
        counters["slots_in_flight_unknown"] = self._slots_in_flight_unknown
        counters["readings_in_flight_unknown"] = self._readings_in_flight_unknown
        last = None if self._last_outcome is None else dict(self._last_outcome)
        return {
            **self._settings(),
            **counters,
            "epsilon": float(epsilon),
            "last_slot": int(last_slot),
            "last": last,
            "in_flight": self.in_flight_records(),
        }

    def in_flight_records(self) -> list[dict[str, int]]:
        """The slots whose masked input holds readings this leaf has not seen released nor
        carried over: ``{"slot", "rows"}`` each, the restored ones not resolved yet and the
        current round's once its masked input is formed and until it answers or ends."""
        records = [{"slot": s, "rows": r} for s, r in sorted(self._unresolved.items())]
        if self._round is not None and self._in_flight is not None and not self._revealed:
            records.append({"slot": int(self._round.slot), "rows": int(self._in_flight[1])})
        return records

    def restore_ledger(self, ledger: Any) -> None:
        """Continue the ledger of an earlier incarnation of this leaf (`export_ledger`).

        Only on a fresh core (no reading, no round, no slot seen). The counters, ``epsilon``
        and ``last`` continue from ``ledger``; `next_slot` becomes ``last_slot + 1``: a
        round the earlier incarnation was in is never advertised for again (its keys are
        gone). What was pending then is not in it: its publishers re-send it. A masked input
        in flight then (``in_flight``: slot and readings) waits in `unresolved_slots` for
        `resolve_in_flight` (a ledger without it has none).

        Raises
        ------
        ValueError
            A ledger of another leaf or other settings (width, threshold, horizon, scale,
            bits, clip norm, epsilon, delta), a malformed or inconsistent one, or a core
            that is not fresh (one line naming the field); the state is unchanged.
        """
        if (
            self._round is not None
            or self._last_slot >= 0
            or self.pending_rows
            or self._readings_released
            or self._slots_carried_over
        ):
            raise ValueError("restore_ledger needs a fresh core")
        if not isinstance(ledger, dict):
            raise ValueError(f"a ledger is a map, got {type(ledger).__name__}")
        for key, value in self._settings().items():
            got = ledger.get(key)
            if type(got) is not type(value) or got != value:  # bool is not int, nor int float
                raise ValueError(f"ledger of {key} = {got!r}, this leaf's is {value!r}")

        def count(key: str, low: int = 0) -> int:
            got = ledger.get(key)
            if isinstance(got, bool) or not isinstance(got, int) or not low <= got < 2**63:
                raise ValueError(f"ledger's {key} must be an int >= {low}, got {got!r}")
            return got

        counters = {key: count(key) for key in _COUNTERS}
        later = {key: count(key) if key in ledger else 0 for key in _LATER_COUNTERS}
        last_slot = count("last_slot", -1)
        flight = ledger.get("in_flight", [])
        if not isinstance(flight, list) or len(flight) > MAX_IN_FLIGHT_RECORDS:
            raise ValueError(f"ledger's in_flight must be a list of <= {MAX_IN_FLIGHT_RECORDS}")
        unresolved: dict[int, int] = {}
        for record in flight:
            if not isinstance(record, dict) or set(record) != {"slot", "rows"}:
                raise ValueError(f"ledger's in_flight record {record!r} is not {{slot, rows}}")
            slot, rows = record["slot"], record["rows"]
            if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot <= last_slot:
                raise ValueError(f"ledger's in_flight slot {slot!r} not in [0, {last_slot}]")
            if (
                isinstance(rows, bool)
                or not isinstance(rows, int)
                or not 0 <= rows <= self.max_rows_per_slot
                or slot in unresolved
            ):
                raise ValueError(f"ledger's in_flight rows {rows!r} of slot {slot} refused")
            unresolved[slot] = rows
        contributed = counters["slots_contributed"]
        if counters["slots_released"] + counters["slots_revealed_skipped"] > contributed:
            raise ValueError("ledger's slots released and skipped exceed the slots contributed")
        if counters["readings_released"] > contributed * self.max_rows_per_slot:
            raise ValueError("ledger's readings_released exceed max_rows_per_slot per slot")
        if contributed + counters["slots_carried_over"] > last_slot + 1:
            raise ValueError(f"ledger's slots exceed last_slot + 1 = {last_slot + 1}")
        epsilon = ledger.get("epsilon")
        target = self.calibration.epsilon
        if not (
            isinstance(epsilon, float)
            and 0.0 <= epsilon <= target * (1.0 + _EPSILON_SLACK)
            and (epsilon > 0.0) == (contributed > 0)
        ):
            raise ValueError(f"ledger's epsilon must be in (0, {target}] if revealed: {epsilon!r}")
        last = ledger.get("last")
        if last is not None and not (
            isinstance(last, dict)
            and all(isinstance(k, str) for k in last)
            and all(v is None or isinstance(v, bool | int | float | str) for v in last.values())
        ):
            raise ValueError("ledger's last must be None or a map of str to scalars")
        self._readings_released = counters["readings_released"]
        self._slots_contributed = contributed
        self._slots_released = counters["slots_released"]
        self._slots_revealed_skipped = counters["slots_revealed_skipped"]
        self._slots_carried_over = counters["slots_carried_over"]
        self._slots_in_flight_unknown = later["slots_in_flight_unknown"]
        self._readings_in_flight_unknown = later["readings_in_flight_unknown"]
        self._unresolved = unresolved
        self._epsilon = epsilon
        self._last_slot = last_slot
        self._last_outcome = None if last is None else dict(last)

    # -- in flight at a crash -----------------------------------------------------------------

    @property
    def unresolved_slots(self) -> list[int]:
        """Slots an earlier incarnation sent its masked input in and whose outcome this leaf
        has not learnt yet (`resolve_in_flight`), in order."""
        return sorted(self._unresolved)

    def resolve_in_flight(self, outcome: messages.SlotOutcome | None) -> list[tuple[int, str, int]]:
        """Learn what became of the slots in flight at a restart (`unresolved_slots`).

        Parameters
        ----------
        outcome : SlotOutcome or None
            The site's outcome (the retained one, or a later one), or None when it cannot
            be read.

        Returns
        -------
        list of (slot, verdict, readings)
            One per record decided now: ``"released"`` (the outcome of that slot released
            it with this leaf among the survivors: its readings are counted released, at
            the outcome's survivors), ``"not_released"`` (skipped, or this leaf not among
            the survivors: nothing of it was revealed, its readings are re-sent and go to a
            later slot; counted carried over) or ``"unknown"`` (None, or an outcome of a
            later slot: that slot's outcome is no longer retained; counted released at the
            worst case, ``t`` survivors, and in ``slots_in_flight_unknown`` /
            ``readings_in_flight_unknown``: never released twice, possibly missing from the
            estimate). Records of a later slot than ``outcome``'s stay.
        """
        decided: list[tuple[int, str, int]] = []
        for slot in sorted(self._unresolved):
            rows = self._unresolved[slot]
            if outcome is not None and outcome.slot < slot:
                continue
            if outcome is None or outcome.slot > slot:
                verdict, survivors = "unknown", self.threshold
                self._slots_in_flight_unknown += 1
                self._readings_in_flight_unknown += rows
            elif outcome.released and self.leaf_id in outcome.survivors:
                verdict, survivors = "released", len(outcome.survivors)
                self._slots_released += 1
            else:
                verdict, survivors = "not_released", 0
                self._slots_carried_over += 1
            if verdict != "not_released":
                self._readings_released += rows
                self._slots_contributed += 1
                epsilon = site_epsilon(self.calibration, max(survivors, self.threshold))
                self._epsilon = max(self._epsilon, epsilon)
            del self._unresolved[slot]
            decided.append((slot, verdict, rows))
        return decided
