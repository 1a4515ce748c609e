"""A secure-aggregation site's restarts: `SecAggSiteState`, the state export and restore of
`edge_runtime.agents.aggregator.core.secagg_site.SecAggSite` (issue 26). No I/O, no clock.

`SecAggSiteState.export_state` gives the site's running sum and ledger between slots as
plain msgpack-able values, `SecAggSiteState.restore_state` takes them back into a site built
with the same configuration (validated; a one-line ValueError otherwise), so a restarted
aggregator continues its estimate and the continual release's segment where it stopped.

`SecAggSiteState` is a mixin: `SecAggSite` inherits it and provides what it reads and sets
(the settings ``leaf_ids``, ``threshold``, ``n_features``, ``horizon``, ``scale``, ``bits``,
``clip_norm``, ``calibration``; ``round``, ``slot``, the open segment and estimate
``_segment``, ``_broken``, ``_positions``, ``_released``, ``_mus``, ``_closed``,
``_closed_var``, ``_gram``, ``_gram_var``, the ledger ``_counts``, ``_epsilon``,
``_recent``, ``_next_slot``; and ``_weights``, ``_break_segment``). The module also holds
the state's format (`STATE_FORMAT`, `STATE_VERSION`) and the ledger's shape the state
carries (`COUNT_KEYS`, `MAX_SLOTS_SHOWN`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["COUNT_KEYS", "MAX_SLOTS_SHOWN", "STATE_FORMAT", "STATE_VERSION", "SecAggSiteState"]

#: Most recent slots listed in the status (``recent``): memory O(32).
MAX_SLOTS_SHOWN = 32
#: ``"format"`` of `SecAggSite.export_state`'s mapping; anything else is refused.
STATE_FORMAT = "edge_runtime.secagg_site"
#: ``"version"`` written by `SecAggSite.export_state`; `restore_state` reads this one only.
STATE_VERSION = 1
#: Relative tolerance on the calibration's derived floats (sensitivities, Skellam
#: parameters) between a state and this site: the same settings give the same numbers up
#: to the last bits of another numpy/scipy; different settings differ by far more.
_CALIBRATION_RTOL = 1e-9
#: The site's counters (``SecAggSite._counts``), exactly these keys in a state.
COUNT_KEYS = (
    "released",
    "skipped",
    "discarded",
    "segments_closed_early",
    "advertisements_refused",
    "unrecorded",
)


class SecAggSiteState:
    """`SecAggSite`'s restarts: `export_state` and `restore_state` (a mixin; see the module)."""

    # -- restarts -----------------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        """What a state must have been computed under (compared by `restore_state`)."""
        return {
            "leaves": list(self.leaf_ids),
            "threshold": self.threshold,
            "n_features": self.n_features,
            "horizon": self.horizon,
            "scale": self.scale,
            "bits": self.bits,
            "clip_norm": self.clip_norm,
            "calibration": dataclasses.asdict(self.calibration),
        }

    def export_state(self, identity: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The site's running sum and ledger, for `restore_state` after a restart.

        Plain msgpack-able values only (str, int, float, bool, None, lists, str-keyed dicts;
        each ``(d, d)`` array as the bytes of its little-endian float64 entries, row-major).
        Storing it is safe: the running Gram, its segment's released ``Y_k`` and the closed
        segments' output are all computed from released (noisy, differentially private)
        sums only, so the file is post-processing of what the site already published, under
        the leaves' guarantee; it holds no keys, shares, masked inputs or unmasked seeds (the
        running slot's round is not exported: a restart loses it, `restore_state`).

        Parameters
        ----------
        identity : mapping of str to str, optional
            Who the site is beyond its settings (e.g. ``{"node": ..., "deployment": ...}``),
            stored as given; `restore_state` requires the same.

        Returns
        -------
        dict
            ``format`` (`STATE_FORMAT`), ``version`` (`STATE_VERSION`), ``identity``,
            ``config`` (leaves, threshold, n_features, horizon, scale, bits, clip_norm,
            calibration), ``next_slot``, ``running`` (the running slot or None), the open
            segment (``segment``, ``broken``, ``positions``, ``released``, ``mus``), the
            estimate (``closed``, ``closed_var``, ``gram``, ``gram_var``), ``counts``,
            ``epsilon`` and ``recent``.
        """

        def raw(array: np.ndarray) -> bytes:
            return np.ascontiguousarray(array, dtype="<f8").tobytes()

        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "identity": dict(identity or {}),
            "config": self._config(),
            "next_slot": self._next_slot,
            "running": self.slot,
            "segment": self._segment,
            "broken": self._broken,
            "positions": list(self._positions),
            "released": [raw(y) for y in self._released],
            "mus": list(self._mus),
            "closed": raw(self._closed),
            "closed_var": self._closed_var,
            "gram": raw(self._gram),
            "gram_var": self._gram_var,
            "counts": dict(self._counts),
            "epsilon": self._epsilon,
            "recent": [dict(r) for r in self._recent],
        }

    def restore_state(
        self, state: Mapping[str, Any], identity: Mapping[str, str] | None = None
    ) -> int:
        """Continue from an `export_state` of an earlier incarnation of this site.

        Only on a site that has run no slot yet. Everything is checked before anything is
        taken: the format and version, ``identity`` and the configuration (leaves,
        threshold, width, horizon, scale, bits, clip norm and the calibration: a state of
        other settings is never restored, its sum was computed under another guarantee or
        another meaning), the types, shapes (``d x d``) and finiteness of every array and
        number, the open segment's consistency (positions, ``segment``, the running Gram
        equal to the closed output plus the weighted releases). On any failure a one-line
        ValueError names what differs and the site is unchanged (start afresh).

        Slot numbers: the next slot is the later of the state's and this site's
        ``first_slot`` (the shell's retained outcome + 1), so a number is never reused.
        Slots the state does not record as ended -- the one running when it was exported,
        and those between its ``next_slot`` and ``first_slot`` (they ended after the last
        export) -- may have released or revealed increments that are not in the sum: they
        are counted (``slots_unrecorded``) and treated as a skip after the unmask request
        (their segment closes at its last output), so the continual release never weighs
        a release it does not hold.

        Parameters
        ----------
        state : mapping
            `export_state`'s dict (e.g. after a msgpack round trip).
        identity : mapping of str to str, optional
            Must equal the state's (`export_state`).

        Returns
        -------
        int
            How many slots were unrecorded (0 normally).

        Raises
        ------
        ValueError
            A state this site cannot take (one line).
        """
        if self.round is not None or any(self._counts.values()) or self._segment is not None:
            raise ValueError("secagg site state: restore only before the site's first slot")
        parsed = self._parse_state(state, dict(identity or {}))
        d = self.n_features
        first_slot = self._next_slot
        self._segment = parsed["segment"]
        self._broken = parsed["broken"]
        self._positions = parsed["positions"]
        self._released = parsed["released"]
        self._mus = parsed["mus"]
        self._closed = parsed["closed"].reshape(d, d)
        self._closed_var = parsed["closed_var"]
        self._gram = parsed["gram"].reshape(d, d)
        self._gram_var = parsed["gram_var"]
        self._counts = parsed["counts"]
        self._epsilon = parsed["epsilon"]
        self._recent = deque(parsed["recent"], maxlen=MAX_SLOTS_SHOWN)
        recorded = parsed["running"] if parsed["running"] is not None else parsed["next_slot"]
        self._next_slot = max(parsed["next_slot"], first_slot)
        unrecorded = self._next_slot - recorded
        if unrecorded > 0:  # only the first and the last one's segments matter
            self._break_segment(recorded)
            self._break_segment(self._next_slot - 1)
            self._counts["unrecorded"] += unrecorded
        return max(unrecorded, 0)

    def _parse_state(self, state: Mapping[str, Any], identity: dict[str, str]) -> dict[str, Any]:
        """`restore_state`'s checks; returns the values to take (arrays as float64)."""
        d, horizon = self.n_features, self.horizon

        def fail(what: str) -> ValueError:
            return ValueError(f"secagg site state: {what}")

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

        if not isinstance(state, Mapping):
            raise fail(f"must be a map, got {type(state).__name__}")
        if state.get("format") != STATE_FORMAT or state.get("version") != STATE_VERSION:
            raise fail(
                f"format {state.get('format')!r} version {state.get('version')!r}, "
                f"expected {STATE_FORMAT!r} version {STATE_VERSION}"
            )
        if state.get("identity") != identity:
            raise fail(f"identity {state.get('identity')!r} differs from {identity!r}")
        self._check_config(state.get("config"), fail)
        next_slot = integer("next_slot")
        running = state.get("running")
        if running is not None:
            running = integer("running", 0, next_slot)
            if running != next_slot - 1:
                raise fail(f"running slot {running} is not the last started ({next_slot - 1})")
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
            keep = (self._positions, self._mus)
            self._positions, self._mus = list(positions), parsed_mus
            try:
                w = self._weights()
            finally:
                self._positions, self._mus = keep
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
            "next_slot": next_slot,
            "running": running,
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

    def _check_config(self, config: object, fail: Any) -> None:
        """The state's settings must be this site's (the calibration's derived floats up to
        `_CALIBRATION_RTOL`); else `fail` names the first that differs."""
        mine = self._config()
        if not isinstance(config, Mapping) or set(config) != set(mine):
            raise fail(f"config must have the keys {sorted(mine)}")
        for key, want in mine.items():
            got = config[key]
            if key == "calibration":
                if not isinstance(got, Mapping) or set(got) != set(want):
                    raise fail(f"calibration must have the keys {sorted(want)}")
                for name, value in want.items():
                    other = got[name]
                    same = (
                        not isinstance(other, bool)
                        and isinstance(other, int | float)
                        and (
                            other == value
                            if name in ("epsilon", "delta", "threshold")
                            else math.isclose(other, value, rel_tol=_CALIBRATION_RTOL)
                        )
                    )
                    if not same:
                        raise fail(
                            f"calibration {name} differs: state {other!r}, this site {value!r}"
                        )
            elif got != want or type(got) is bool:
                raise fail(f"{key} differs: state {got!r}, this site {want!r}")
