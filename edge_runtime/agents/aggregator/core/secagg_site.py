"""An aggregator's side of secure aggregation for its private leaves. No I/O, no clock.

`SecAggSite` runs the site's release slots on a time grid (one every ``slot_period_s``
seconds, slot numbers strictly increasing), each an `edge_runtime.secagg.aggregator_round.
AggregatorRound` (Bonawitz et al., CCS 2017, Fig. 4, threshold ``t`` with ``2 t > n``), and
turns the released sums into the site's running noisy Gram matrix, whose top eigenpairs are
the site's estimate: what ``benchmarks/secagg/sites.py`` simulates offline.

The shell's loop (time in seconds, any monotonic origin, passed in)::

    out = site.tick(now)          starts a due slot, closes phases at their deadlines
    out = site.receive(msg, now)  a leaf's message (decoded from its topic)
    sleep until site.next_wakeup(now), or the next message

Both return the messages to publish: `KeyRoster`, `ShareDelivery`, `UnmaskRequest` and the
slot's `SlotOutcome` (released or skipped, with the reason; the outcome topic). Leaves
advertise one slot ahead (`SecAggRelease`): an advertisement for a slot not started yet is
kept (the latest per leaf) and given to that slot's round when it starts, so its advertise
phase closes at once when every leaf has advertised.

A released `SlotOutcome` holds the exact sum mod ``2**bits`` of the survivors' noisy
encodings: decoded (`masking.decode`, ``scale``) and unweighted
(`accounting.unweight_off_diagonal`), it goes into the site's running noisy Gram matrix, a
part the site holds: `edge_runtime.agents.aggregator.core.secagg_site_sum.SiteSum` (the
continual release's segments, the ledger, and their state across restarts).

Restarts: `export_state` gives the site's running sum and ledger between slots as plain
msgpack-able values, `restore_state` takes them back into a site built with the same
configuration (validated; a one-line ValueError otherwise), so a restarted aggregator
continues its estimate and the continual release's segment where it stopped.

Memory: the running sum's (`SiteSum`) plus the round's ``O(n m)`` masked inputs.

References: the leaves' (`edge_runtime.agents.leaf.core.secagg_release`): Bonawitz et al.,
CCS 2017; Agarwal, Kairouz & Liu, NeurIPS 2021 (Skellam); Henzinger, Upadhyay & Upadhyay,
SODA 2023 (the square-root factorisation).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from edge_runtime.agents.aggregator.core.secagg_site_sum import MAX_SLOTS_SHOWN, SiteSum
from edge_runtime.fpca import Subspace
from edge_runtime.fpca.continual import MAX_HORIZON, sqrt_factorisation_coefficients
from edge_runtime.fpca.private_gram import eigen_to_singular
from edge_runtime.fpca.subspace import flip_signs
from edge_runtime.secagg import masking
from edge_runtime.secagg.accounting import (
    DEFAULT_MAX_ROWS_PER_SLOT,
    DEFAULT_SCALE,
    SkellamCalibration,
    gram_calibration,
    site_epsilon,
    unweight_off_diagonal,
)
from edge_runtime.secagg.aggregator_round import (
    AggregatorPhase,
    AggregatorRound,
    Outgoing,
    RoundTimeouts,
)
from edge_runtime.secagg.errors import SecAggError
from edge_runtime.secagg.messages import (
    KeyAdvertisement,
    LeafMessage,
    ShareUpload,
    SlotOutcome,
    UnmaskRequest,
)

__all__ = [
    "DEFAULT_MAX_ROWS_PER_SLOT",
    "DEFAULT_SCALE",
    "MAX_SLOTS_SHOWN",
    "STATE_FORMAT",
    "STATE_VERSION",
    "SecAggSite",
]

#: ``"format"`` of `SecAggSite.export_state`'s mapping; anything else is refused.
STATE_FORMAT = "edge_runtime.secagg_site"
#: ``"version"`` written by `SecAggSite.export_state`; `restore_state` reads this one only.
STATE_VERSION = 1
#: Relative tolerance on the calibration's derived floats (sensitivities, Skellam
#: parameters) between a state and this site: the same settings give the same numbers up
#: to the last bits of another numpy/scipy; different settings differ by far more.
CALIBRATION_RTOL = 1e-9



class SecAggSite:
    """One aggregator's secure sum over its private leaves, slot after slot.

    Parameters
    ----------
    leaf_ids : iterable of str
        The site's ``n`` private leaves (from the topology).
    threshold : int
        ``t``: ``2 <= t <= n`` and ``2 t > n`` (else a one-line ValueError): the fewest
        inputs a released sum holds; up to ``n - t`` leaves may drop out of a slot.
    n_features : int
        ``d``.
    epsilon, delta : float
        The guarantee per reading the leaves are calibrated for.
    clip_norm : float
        ``C``, data units: singular values are ``C sqrt(max(lambda, 0))``.
    slot_period_s : float
        Seconds between slot starts; at least the sum of ``timeouts`` (a slot always ends
        before the next is due).
    now : float
        Seconds, the shell's monotonic clock; the first slot is due at ``now +
        slot_period_s``.
    horizon : int, default=1
        ``H`` of the continual release (the leaves' own).
    scale : float, default=`DEFAULT_SCALE`
    bits : int, default=64
    first_slot : int, default=0
        The first slot's number (the shell resumes above the last one it published, e.g. the
        retained outcome's slot + 1, so a slot number is never reused).
    timeouts : RoundTimeouts or None
        The phases' deadlines (None: `RoundTimeouts()`, 60 s in all).
    calibration : SkellamCalibration or None
        The leaves' noise (None: `accounting.gram_calibration` for these settings).
    max_rows_per_slot : int, default=`DEFAULT_MAX_ROWS_PER_SLOT`
        The leaves' cap on an increment: sets the bound beyond which a sum is taken for one
        whose masks did not cancel (`masking.sum_bound`, `masking.within_bound`).

    Attributes
    ----------
    slot : int or None
        The running slot, None between slots.
    round : AggregatorRound or None
        The running slot's state machine.
    sum : SiteSum
        The running noisy Gram of the released slots and the site's ledger.

    Raises
    ------
    ValueError
        A value out of range (one line naming it).
    """

    def __init__(
        self,
        leaf_ids: Iterable[str],
        threshold: int,
        n_features: int,
        *,
        epsilon: float,
        delta: float,
        clip_norm: float,
        slot_period_s: float,
        now: float,
        horizon: int = 1,
        scale: float = DEFAULT_SCALE,
        bits: int = masking.DEFAULT_BITS,
        first_slot: int = 0,
        timeouts: RoundTimeouts | None = None,
        calibration: SkellamCalibration | None = None,
        max_rows_per_slot: int = DEFAULT_MAX_ROWS_PER_SLOT,
    ) -> None:
        ids = sorted(leaf_ids)
        n = len(ids)
        if n < 2 or len(set(ids)) != n or not all(isinstance(i, str) and i for i in ids):
            raise ValueError(f"leaf_ids must be at least 2 distinct non-empty strs, got {ids!r}")
        if isinstance(threshold, bool) or not isinstance(threshold, int):
            raise ValueError(f"threshold must be an int, got {threshold!r}")
        if not (2 <= threshold <= n and 2 * threshold > n):
            raise ValueError(
                f"threshold t = {threshold} must satisfy 2 <= t <= n and 2 t > n (n = {n} leaves)"
            )
        if isinstance(horizon, bool) or not isinstance(horizon, int):
            raise ValueError(f"horizon must be an int in [1, {MAX_HORIZON}], got {horizon!r}")
        if not 1 <= horizon <= MAX_HORIZON:
            raise ValueError(f"horizon must be in [1, {MAX_HORIZON}], got {horizon!r}")
        if isinstance(first_slot, bool) or not isinstance(first_slot, int):
            raise ValueError(f"first_slot must be an int in [0, 2**64), got {first_slot!r}")
        if not 0 <= first_slot < 2**64:
            raise ValueError(f"first_slot must be in [0, 2**64), got {first_slot!r}")
        for name, value in (("clip_norm", clip_norm), ("scale", scale)):
            if not (isinstance(value, int | float) and 0 < value < math.inf):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        self.timeouts = timeouts if timeouts is not None else RoundTimeouts()
        t_all = self.timeouts.total
        if not (isinstance(slot_period_s, int | float) and t_all <= slot_period_s < math.inf):
            raise ValueError(
                f"slot_period_s must be finite and at least the timeouts' sum {t_all} s, "
                f"got {slot_period_s!r}"
            )
        self.leaf_ids = tuple(ids)
        self.threshold = threshold
        self.n_features = int(n_features)
        self.size = masking.triangle_size(self.n_features)
        self.horizon = horizon
        self.scale = float(scale)
        self.bits = masking.check_bits(bits)
        self.clip_norm = float(clip_norm)
        self.slot_period_s = float(slot_period_s)
        self.coefficients = sqrt_factorisation_coefficients(horizon)
        self.calibration = gram_calibration(
            epsilon,
            delta,
            self.n_features,
            self.scale,
            threshold,
            self.coefficients,
            given=calibration,
            node="the site",
        )
        max_entry = float(max_rows_per_slot) * float(self.coefficients.sum())
        noise_std = math.sqrt(2.0 * n * self.calibration.share_mu)
        self.bound = masking.sum_bound(n, max_entry, self.scale, noise_std)
        if self.bound >= 2 ** (self.bits - 1):
            raise ValueError(
                f"a sum may reach {self.bound}, beyond {self.bits} bits: lower "
                f"max_rows_per_slot ({max_rows_per_slot}) or scale ({scale})"
            )
        self.round: AggregatorRound | None = None
        self._next_slot = first_slot
        self._next_due = float(now) + self.slot_period_s
        self._early: dict[str, KeyAdvertisement] = {}  # leaf -> its ad for a future slot
        self._outbox: list[Outgoing] = []
        self._requested = False  # the running round sent its unmask request
        self.sum = SiteSum(self.n_features, horizon, self.coefficients, self.scale)

    # -- time ---------------------------------------------------------------------------------

    @property
    def slot(self) -> int | None:
        """The running slot's number, or None between slots."""
        return None if self.round is None else self.round.slot

    def slot_due(self, now: float) -> int | None:
        """Start the slot due at ``now``, if any; returns its number (None: none due).

        Due every ``slot_period_s`` on the grid of the constructor's ``now``; a shell that
        ticks late starts one slot and moves the next start to the next grid point after
        ``now`` (slot numbers stay consecutive). The round gets the advertisements kept for
        this slot; a roster it then sends waits in the outbox that `tick` and `receive`
        return.
        """
        if now < self._next_due or self.round is not None:
            return None
        slot = self._next_slot
        self._next_slot += 1
        behind = math.floor((now - self._next_due) / self.slot_period_s)
        self._next_due += (behind + 1) * self.slot_period_s
        self.round = AggregatorRound(
            slot,
            self.leaf_ids,
            self.threshold,
            self.size,
            now,
            bits=self.bits,
            bound=self.bound,
            timeouts=self.timeouts,
        )
        self._requested = False
        for leaf in sorted(self._early):
            ad = self._early[leaf]
            if ad.slot == slot and self.round is not None:
                del self._early[leaf]
                try:
                    self._take(self.round.receive(ad, now))
                except SecAggError:  # e.g. a key repeated: the leaf sits this slot out
                    self.sum.count("advertisements_refused")
            elif ad.slot < slot:
                del self._early[leaf]
        return slot

    def tick(self, now: float) -> list[Outgoing]:
        """Close a phase whose deadline passed, start a due slot; returns what to publish."""
        if self.round is not None:
            self._take(self.round.tick(now))
        self.slot_due(now)
        return self._drain()

    def next_wakeup(self, now: float) -> float:
        """When `tick` has work next (seconds, the shell's clock): the running phase's
        deadline while a slot runs (the next slot waits for it), else the next slot's start
        (at most ``now`` when due). Messages may move the round earlier: `receive` returns
        what they cause."""
        if self.round is not None and self.round.deadline is not None:
            return self.round.deadline
        return self._next_due

    # -- messages -----------------------------------------------------------------------------

    def receive(self, message: LeafMessage, now: float) -> list[Outgoing]:
        """A leaf's message; returns what to publish.

        A `KeyAdvertisement` for a slot not started yet is kept (the latest per leaf) until
        that slot starts; everything else goes to the running round.

        Raises
        ------
        SecAggError
            A message from a leaf outside the site, for a past slot or one not running, or
            one the round refuses (`AggregatorRound.receive`); the state is unchanged.
        """
        leaf = message.sender if isinstance(message, ShareUpload) else message.leaf_id
        if leaf not in self.leaf_ids:
            raise SecAggError(f"site: a {type(message).__name__} from {leaf!r}, not a site leaf")
        if isinstance(message, KeyAdvertisement) and (
            self.round is None or message.slot > self.round.slot
        ):
            if message.slot < self._next_slot:
                raise SecAggError(
                    f"site: a key advertisement of {leaf!r} for past slot {message.slot}"
                )
            kept = self._early.get(leaf)
            if kept is None or message.slot >= kept.slot:
                self._early[leaf] = message
            return self._drain()
        if self.round is None:  # e.g. an unmask response after t others released the slot
            raise SecAggError(
                f"site: a {type(message).__name__} for slot {message.slot}, no slot running "
                f"(the next is {self._next_slot})"
            )
        self._take(self.round.receive(message, now))
        return self._drain()

    def _drain(self) -> list[Outgoing]:
        out, self._outbox = self._outbox, []
        return out

    def _take(self, messages: list[Outgoing]) -> None:
        for message in messages:
            if isinstance(message, UnmaskRequest):
                self._requested = True
            if isinstance(message, SlotOutcome):
                self._finish(message)
        self._outbox.extend(messages)

    # -- outcomes -----------------------------------------------------------------------------

    def _finish(self, outcome: SlotOutcome) -> None:
        assert self.round is not None and self.round.phase is AggregatorPhase.DONE
        self.round = None
        if outcome.released:
            assert outcome.total is not None
            survivors = len(outcome.survivors)
            decoded = masking.decode(outcome.total, self.n_features, self.scale, self.bits)
            self.sum.add_release(
                outcome.slot,
                unweight_off_diagonal(decoded),
                self.calibration.sum_mu(survivors),
                site_epsilon(self.calibration, survivors),
                survivors,
            )
        else:
            self.sum.add_skip(outcome.slot, outcome.reason, self._requested)

    # -- the estimate -------------------------------------------------------------------------

    @property
    def gram(self) -> np.ndarray:
        """The site's running noisy Gram matrix, ``(d, d)`` float64, unit-ball units (a copy)."""
        return self.sum.gram.copy()

    @property
    def noise_std(self) -> float:
        """Std of a diagonal entry of `gram`'s noise (unit-ball Gram units; off-diagonal
        entries have half the variance): from the calibration and the survivors per slot."""
        return self.sum.noise_std()

    def subspace(self, rank: int, n_samples: int = 0) -> Subspace:
        """The site's estimate: the top ``rank`` eigenpairs of `gram`, in the data's units.

        As `edge_runtime.fpca.private_gram.PrivateGram.top` and the private mode's leaves:
        basis the eigenvectors (deterministic signs, `flip_signs`), singular values ``C
        sqrt(max(lambda, 0))`` (`eigen_to_singular`; noise can make ``lambda`` negative).

        Parameters
        ----------
        rank : int
            ``1 <= rank <= n_features``.
        n_samples : int, default=0
            What the subspace summarises: the site does not learn its leaves' reading counts
            from the secure sum; the shell passes them if the leaves publish them.

        Returns
        -------
        Subspace
            ``basis`` ``(n_features, rank)``, ``singular_values`` ``(rank,)``.

        Raises
        ------
        ValueError
            ``rank`` out of range.
        """
        d = self.n_features
        if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= d:
            raise ValueError(f"rank must be an int in [1, {d}], got {rank!r}")
        values, vectors = np.linalg.eigh(self.sum.gram)
        basis = flip_signs(np.ascontiguousarray(vectors[:, d - rank :][:, ::-1]), copy=False)
        singular = eigen_to_singular(values[d - rank :][::-1], self.clip_norm)
        return Subspace(basis, singular, int(n_samples))

    def status(self) -> dict[str, Any]:
        """The site's ledger, plain JSON types (for the status document).

        Keys: ``mechanism`` ("gaussian-secagg"), ``leaves``, ``threshold``, ``horizon``,
        ``epsilon_target``, ``delta``; ``slots_released``, ``slots_skipped``,
        ``slots_discarded`` (released in a segment closed early, not used),
        ``segments_closed_early``; ``slots_unrecorded`` (slots that ended or ran after the
        state a restart restored was exported, `restore_state`: not in the sum);
        ``advertisements_refused`` (early ones the starting round refused, e.g. a repeated
        key: that leaf sits the slot out); ``epsilon``: the guarantee per reading of the
        site's releases, the worst over the released slots of `accounting.site_epsilon` for
        their survivors (at most ``epsilon_target``; 0.0 before any); ``noise_std`` of the
        running Gram's diagonal; ``slot`` (running), ``next_slot``; ``recent``: the last
        `MAX_SLOTS_SHOWN` slots (slot, released, survivors, epsilon, used; or reason and
        after_unmask_request).
        """
        counts = self.sum.counts
        return {
            "mechanism": "gaussian-secagg",
            "leaves": len(self.leaf_ids),
            "threshold": self.threshold,
            "horizon": self.horizon,
            "epsilon_target": self.calibration.epsilon,
            "delta": self.calibration.delta,
            "slots_released": counts["released"],
            "slots_skipped": counts["skipped"],
            "slots_discarded": counts["discarded"],
            "segments_closed_early": counts["segments_closed_early"],
            "slots_unrecorded": counts["unrecorded"],
            "advertisements_refused": counts["advertisements_refused"],
            "epsilon": self.sum.epsilon,
            "noise_std": self.noise_std,
            "slot": self.slot,
            "next_slot": self._next_slot,
            "recent": [dict(r) for r in self.sum.recent],
        }

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
            calibration), ``next_slot``, ``running`` (the running slot or None) and the
            running sum's fields (`SiteSum.export`).
        """
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "identity": dict(identity or {}),
            "config": self._config(),
            "next_slot": self._next_slot,
            "running": self.slot,
            **self.sum.export(),
        }

    def restore_state(
        self, state: Mapping[str, Any], identity: Mapping[str, str] | None = None
    ) -> int:
        """Continue from an `export_state` of an earlier incarnation of this site.

        Only on a site that has run no slot yet. Everything is checked before anything is
        taken: the format and version, ``identity`` and the configuration (leaves,
        threshold, width, horizon, scale, bits, clip norm and the calibration: a state of
        other settings is never restored, its sum was computed under another guarantee or
        another meaning), the slot numbers and the running sum's fields (`SiteSum.restore`).
        On any failure a one-line ValueError names what differs and the site is unchanged.

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
        if self.round is not None or not self.sum.fresh:
            raise ValueError("secagg site state: restore only before the site's first slot")

        def fail(what: str) -> ValueError:
            return ValueError(f"secagg site state: {what}")

        if not isinstance(state, Mapping):
            raise fail(f"must be a map, got {type(state).__name__}")
        if state.get("format") != STATE_FORMAT or state.get("version") != STATE_VERSION:
            raise fail(
                f"format {state.get('format')!r} version {state.get('version')!r}, "
                f"expected {STATE_FORMAT!r} version {STATE_VERSION}"
            )
        mine = dict(identity or {})
        if state.get("identity") != mine:
            raise fail(f"identity {state.get('identity')!r} differs from {mine!r}")
        self._check_config(state.get("config"), fail)

        def integer(key: str, high: int) -> int:
            value = state.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < high:
                raise fail(f"{key} must be an int in [0, {high}), got {value!r}")
            return value

        next_slot = integer("next_slot", 2**64)
        running = state.get("running")
        if running is not None:
            running = integer("running", next_slot)
            if running != next_slot - 1:
                raise fail(f"running slot {running} is not the last started ({next_slot - 1})")
        self.sum.restore(state, next_slot, fail)
        first_slot = self._next_slot
        recorded = running if running is not None else next_slot
        self._next_slot = max(next_slot, first_slot)
        unrecorded = self._next_slot - recorded
        if unrecorded > 0:  # only the first and the last one's segments matter
            self.sum.break_segment(recorded)
            self.sum.break_segment(self._next_slot - 1)
            self.sum.count("unrecorded", unrecorded)
        return max(unrecorded, 0)

    def _check_config(self, config: object, fail: Any) -> None:
        """The state's settings must be this site's (the calibration's derived floats up to
        `CALIBRATION_RTOL`); else `fail` names the first that differs."""
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
                            else math.isclose(other, value, rel_tol=CALIBRATION_RTOL)
                        )
                    )
                    if not same:
                        raise fail(
                            f"calibration {name} differs: state {other!r}, this site {value!r}"
                        )
            elif got != want or type(got) is bool:
                raise fail(f"{key} differs: state {got!r}, this site {want!r}")
