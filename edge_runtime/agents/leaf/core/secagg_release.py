"""A private leaf's state under ``mechanism = "gaussian-secagg"``. No I/O, no clock.

`SecAggRelease` accumulates the exact Gram matrix of the leaf's clipped readings and, once
per release slot of its site, contributes it to the site's secure sum: the slot input is
the slot's entry of the continual release ``R (G_1, ..., G_H)``
(`edge_runtime.fpca.continual`), off-diagonal entries weighted by ``sqrt(2)``
(`edge_runtime.secagg.accounting.weight_off_diagonal`), encoded at ``scale`` as residues
mod ``2**bits`` (`edge_runtime.secagg.masking.encode`), plus this leaf's Skellam share
``Sk(mu_total / t)`` of the site's noise (`accounting.gram_calibration`), and masked by a
`edge_runtime.secagg.leaf_round.LeafRound` (Bonawitz et al., CCS 2017, Fig. 4). This is
exactly what ``benchmarks/secagg/sites.py`` simulates offline, with the masks and the
dropouts. The aggregator learns only the site's noisy sum (docs/secure_aggregation.md).

One slot, as the shell drives it (the methods take the incoming message and return the
outgoing one, mirroring `LeafRound`; keys, seeds and the noise generator come in)::

    advertise(slot, c_sk, s_sk, b)  -> KeyAdvertisement   slot = `next_slot` (one ahead)
    receive_roster(roster)          -> ShareUpload
    receive_shares(delivery, rng)   -> MaskedInput        the increment leaves `pending`
    unmask(request)                 -> UnmaskResponse     the increment is revealed
    receive_outcome(outcome)        -> bool               the slot is over (or `end_slot()`)

Leaves advertise one slot ahead: after a slot ends (its outcome, or a roster or outcome of
a later slot seen) the leaf advertises for `next_slot` with fresh keys, and the site's
aggregator keeps early advertisements until that slot starts (`SecAggSite`), so a slot's
advertise phase usually closes as soon as it starts.

The rule for a slot that does not release (never a weaker guarantee in silence):

- **Not revealed, nothing lost.** Until the leaf answers an unmask request it has revealed
  nothing (its masked input stays hidden by its self mask ``b_u``, whose shares are never
  revealed for a leaf not named a survivor). If the slot ends without that answer (skipped
  before the unmask request, this leaf dropped, late or declared dropped), the slot's
  increment carries over to the next slot it takes part in: no reading is lost, and it is
  released once, with fresh noise and fresh masks. Except when the outcome names this leaf a
  survivor (its masked input was in ``U_3`` and ``t`` others answered): then it was
  released, and counts so (`receive_outcome`; after a crash `resolve_in_flight`).
- **Revealed, spent.** Once the leaf answered (revealed its shares), the slot counts as
  released for its budget even if the aggregator reports it skipped (an aggregator could
  unmask the sum and claim otherwise): the increment is not re-sent, its readings are
  counted as released, and the ledger takes the worst case, ``t`` survivors, unless an
  outcome with the survivors says better.

Continual release (``horizon = H > 1``). The positions of the factorisation are the site's
slot numbers: slot ``s`` is position ``s % H`` of segment ``s // H``, for every leaf and
the aggregator alike, with no message to agree on it. A leaf's ``G_j`` is the increment it
revealed at position ``j`` of the segment, zero where it revealed none (a slot it missed
or carried over; its readings then sit in a later position). Its input at position ``k``
is ``sum_{j <= k} c_{k-j} G_j`` over the segment. Privacy: per segment, the leaf's
revealed inputs are entries of ``R G`` for one vector ``G`` of ``H`` Gram increments of
disjoint readings (some entries unrevealed: post-processing), and each revealed sum holds
at least ``t`` Skellam shares of ``mu_total / t``: the calibration of
`accounting.gram_calibration` at ``coefficients = c`` holds for every reading, whatever the
dropouts. Segments cover disjoint readings (parallel composition).

Memory: ``(H + 2) d**2`` float64 (the pending and in-flight Grams, the revealed increments
of the open segment) plus one `LeafRound` (``O(n)`` shares, one ``m``-word vector); 55 KiB
at ``d = 48``, ``H = 1``. Time per slot: ``O(H d**2)`` to form the input, the round's
``O(n t)`` sharing and ``3 (n - 1)`` X25519 agreements.

References
----------
K. Bonawitz et al. "Practical Secure Aggregation for Privacy-Preserving Machine Learning."
CCS 2017.
N. Agarwal, P. Kairouz, Z. Liu. "The Skellam Mechanism for Differentially Private
Federated Learning." NeurIPS 2021.
M. Henzinger, J. Upadhyay, S. Upadhyay. "Almost Tight Error Bounds on Differentially
Private Continual Counting." SODA 2023 (the square-root factorisation).

The durable ledger (`export_ledger`, `restore_ledger`, `unresolved_slots`,
`resolve_in_flight`) is in `edge_runtime.agents.leaf.core.secagg_ledger`, a mixin this
class inherits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from edge_runtime.agents.leaf.core.secagg_ledger import (  # the constant is re-exported
    MAX_IN_FLIGHT_RECORDS as MAX_IN_FLIGHT_RECORDS,
)
from edge_runtime.agents.leaf.core.secagg_ledger import SecAggLedger
from edge_runtime.fpca.continual import MAX_HORIZON, sqrt_factorisation_coefficients
from edge_runtime.fpca.privacy import clip_to_unit_ball
from edge_runtime.secagg import masking, messages
from edge_runtime.secagg.accounting import (
    DEFAULT_MAX_ROWS_PER_SLOT,
    DEFAULT_SCALE,
    SkellamCalibration,
    check_count,
    gram_calibration,
    site_epsilon,
    weight_off_diagonal,
)
from edge_runtime.secagg.errors import SecAggError
from edge_runtime.secagg.leaf_round import LeafPhase, LeafRound

__all__ = [
    "DEFAULT_MAX_ROWS_PER_SLOT",
    "DEFAULT_SCALE",
    "MECHANISM",
    "SecAggRelease",
]

#: The mechanism name in the topology and the status ledger.
MECHANISM = "gaussian-secagg"


class SecAggRelease(SecAggLedger):
    """A private leaf's releases to its site's secure sum (Bonawitz et al. 2017; Skellam noise).

    Parameters
    ----------
    leaf_id : str
        This leaf's node id (as in the site's roster).
    n_features : int
        ``d``, the reading width.
    epsilon, delta : float
        The guarantee per reading (replace-one neighbours), ``epsilon > 0``, ``0 < delta < 1``.
    clip_norm : float
        ``C`` > 0, data units: readings are clipped to it and divided by it
        (`edge_runtime.fpca.privacy.clip_to_unit_ball`, as the private mode does).
    threshold : int
        ``t >= 2``, the site's dropout threshold (the roster must carry the same).
    horizon : int, default=1
        ``H`` of the continual release, ``1 <= H <= MAX_HORIZON``.
    scale : float, default=`DEFAULT_SCALE`
    bits : int, default=64
        The modulus ``2**bits`` of the secure sum.
    cohort : iterable of str or None, default=None
        The site's leaves from the topology: a roster naming anyone else is refused.
    calibration : SkellamCalibration or None, default=None
        The site's noise; None computes `accounting.gram_calibration` (a few ms). A given
        one must be for this ``(epsilon, delta, threshold)`` and the sensitivity of
        ``(n_features, scale, H)``.
    max_rows_per_slot : int, default=`DEFAULT_MAX_ROWS_PER_SLOT`
        `add_rows` refuses readings beyond it (the aggregator's bound check assumes it).

    Attributes
    ----------
    calibration : SkellamCalibration
    coefficients : ndarray of shape (H,)
        ``c``, the first column of ``R``.
    n_clipped_ : int
        Readings whose norm exceeded ``clip_norm``.

    Raises
    ------
    ValueError
        A value out of range or a calibration for other settings (one line naming it).
    """

    def __init__(
        self,
        leaf_id: str,
        n_features: int,
        *,
        epsilon: float,
        delta: float,
        clip_norm: float,
        threshold: int,
        horizon: int = 1,
        scale: float = DEFAULT_SCALE,
        bits: int = masking.DEFAULT_BITS,
        cohort: Iterable[str] | None = None,
        calibration: SkellamCalibration | None = None,
        max_rows_per_slot: int = DEFAULT_MAX_ROWS_PER_SLOT,
    ) -> None:
        if not isinstance(leaf_id, str) or not leaf_id:
            raise ValueError(f"leaf_id must be a non-empty str, got {leaf_id!r}")
        self.leaf_id = leaf_id
        self.n_features = check_count(n_features, "n_features", 1)
        self.threshold = check_count(threshold, "threshold", 2)
        self.horizon = check_count(horizon, "horizon", 1, MAX_HORIZON)
        self.bits = masking.check_bits(bits)
        self.max_rows_per_slot = check_count(max_rows_per_slot, "max_rows_per_slot", 1)
        if not (isinstance(clip_norm, int | float) and 0 < clip_norm < float("inf")):
            raise ValueError(f"clip_norm must be a finite number > 0, got {clip_norm!r}")
        if not (isinstance(scale, int | float) and 0 < scale < float("inf")):
            raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
        self.clip_norm = float(clip_norm)
        self.scale = float(scale)
        self.cohort = None if cohort is None else frozenset(cohort)
        self.coefficients = sqrt_factorisation_coefficients(self.horizon)
        d = self.n_features
        self.calibration = gram_calibration(
            epsilon,
            delta,
            d,
            self.scale,
            self.threshold,
            self.coefficients,
            given=calibration,
            node="this leaf",
        )
        self._size = masking.triangle_size(d)
        self._pending = np.zeros((d, d))  # exact Gram of unit-ball rows not yet in flight
        self._pending_rows = 0
        self._in_flight: tuple[np.ndarray, int] | None = None  # (increment, rows) masked now
        self._vector: np.ndarray | None = None  # the slot's noisy encoding (duplicates)
        self._round: LeafRound | None = None
        self._revealed = False  # the current round answered an unmask request
        self._segment: int | None = None  # slot // H of the revealed increments below
        self._grams: dict[int, np.ndarray] = {}  # position -> revealed increment G_j
        self._last_slot = -1  # the highest slot seen (advertised, roster, outcome)
        self.n_clipped_ = 0
        self._readings_released = 0
        self._slots_contributed = 0
        self._slots_released = 0
        self._slots_revealed_skipped = 0
        self._slots_carried_over = 0
        self._epsilon = 0.0  # worst epsilon over the slots this leaf revealed in
        self._last_outcome: dict[str, Any] | None = None
        # slots an earlier incarnation sent its masked input in, outcome not learnt yet
        self._unresolved: dict[int, int] = {}  # slot -> readings in its input
        self._slots_in_flight_unknown = 0
        self._readings_in_flight_unknown = 0

    # -- readings -----------------------------------------------------------------------------

    def add_rows(self, rows: np.ndarray) -> None:
        """Add readings to the increment of the next slot.

        Parameters
        ----------
        rows : ndarray of shape (n_samples, n_features)
            Finite readings in the data's units (not modified); clipped to ``clip_norm`` and
            divided by it (`clip_to_unit_ball`), then ``X^T X`` is added to the pending Gram
            matrix (float64, exact: no noise until the slot).

        Raises
        ------
        ValueError
            Another width, non-finite values, or more than ``max_rows_per_slot`` readings
            not revealed yet (pending and in flight, so that a carried-over increment stays
            within it too); the state is unchanged.
        """
        x = np.asarray(rows, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"rows must have shape (n_samples, {self.n_features}), got {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError("rows has non-finite values")
        if self.pending_rows + x.shape[0] > self.max_rows_per_slot:
            raise ValueError(
                f"{self.pending_rows + x.shape[0]} readings would be pending, more than "
                f"max_rows_per_slot = {self.max_rows_per_slot}"
            )
        norms = np.sqrt(np.einsum("ij,ij->i", x, x))
        unit = clip_to_unit_ball(x, self.clip_norm)
        self._pending += unit.T @ unit
        self._pending_rows += int(x.shape[0])
        self.n_clipped_ += int(np.count_nonzero(norms > self.clip_norm))

    @property
    def pending_rows(self) -> int:
        """Readings not revealed yet (pending and in flight)."""
        flight = 0 if self._in_flight is None else self._in_flight[1]
        return self._pending_rows + flight

    # -- the slot -----------------------------------------------------------------------------

    @property
    def slot(self) -> int | None:
        """The slot of the current round, or None between rounds."""
        return None if self._round is None else self._round.slot

    @property
    def next_slot(self) -> int:
        """The slot to advertise for next: one above the highest slot this leaf has seen."""
        return self._last_slot + 1

    def observe_slot(self, slot: int) -> bool:
        """Note that the site reached ``slot`` (a roster, request or outcome seen, even one
        refused): `next_slot` becomes at least ``slot + 1``, and a current round of an
        earlier slot ends (`end_slot`; returns what it returns)."""
        slot = check_count(slot, "slot", 0, 2**64 - 1)
        spent = False
        if self._round is not None and slot > self._round.slot:
            spent = self.end_slot()
        self._last_slot = max(self._last_slot, slot)
        return spent

    def advertise(
        self,
        slot: int,
        cipher_private_key: bytes,
        mask_private_key: bytes,
        self_mask_seed: bytes,
    ) -> messages.KeyAdvertisement:
        """Round 0: start ``slot`` with fresh keys and return the public keys to publish.

        The shell draws the keys and the seed (``os.urandom(32)`` each) for every slot; the
        same ``slot`` again returns the same advertisement (the keys given are then unused).
        A current round of an earlier slot ends first (`end_slot`).

        Raises
        ------
        ValueError
            ``slot`` not above every slot this leaf has advertised for or seen end, or a
            malformed key (`LeafRound`); the state is unchanged.
        """
        if self._round is not None and slot == self._round.slot:
            return self._round.advertise()
        floor = self._last_slot if self._round is None else max(self._last_slot, self._round.slot)
        if isinstance(slot, bool) or not isinstance(slot, int) or not floor < slot < 2**64:
            raise ValueError(f"slot must be an int above {floor}, got {slot!r}")
        new = LeafRound(
            self.leaf_id,
            slot,
            self.threshold,
            cipher_private_key,
            mask_private_key,
            self_mask_seed,
            bits=self.bits,
            cohort=self.cohort,
        )
        if self._round is not None:
            self.end_slot()
        self._round = new
        self._revealed = False
        self._last_slot = max(self._last_slot, slot - 1)
        return new.advertise()

    def _current(self, slot: int, what: str) -> LeafRound:
        if self._round is None or slot != self._round.slot:
            have = None if self._round is None else self._round.slot
            raise SecAggError(
                f"leaf {self.leaf_id!r}: {what} for slot {slot}, the current round is {have}"
            )
        return self._round

    def receive_roster(self, roster: messages.KeyRoster) -> messages.ShareUpload:
        """Round 1: `LeafRound.receive_roster` of the current slot.

        Raises
        ------
        SecAggError
            A roster of another slot than the current round's (the shell then calls
            `observe_slot` for a later one), or one the round refuses.
        """
        return self._current(roster.slot, "a roster").receive_roster(roster)

    def _slot_input(self, slot: int, increment: np.ndarray) -> np.ndarray:
        """``sum_{j <= k} c_{k-j} G_j`` of the segment, ``G_k = increment``, ``(d, d)``."""
        segment, position = divmod(slot, self.horizon)
        total = self.coefficients[0] * increment
        if segment == self._segment:
            for j, gram in self._grams.items():
                if j < position:
                    total = total + self.coefficients[position - j] * gram
        return total

    def receive_shares(
        self, delivery: messages.ShareDelivery, rng: np.random.Generator
    ) -> messages.MaskedInput:
        """Round 2: form the slot input, add the Skellam share, mask it for ``U_2``.

        The pending increment goes in flight (new readings start the next one): the slot's
        entry of ``R G``, weighted (`weight_off_diagonal`), encoded at ``scale``, plus
        ``Poisson(share_mu) - Poisson(share_mu)`` per entry drawn from ``rng``
        (`masking.skellam_noise_share`), mod ``2**bits``.

        Parameters
        ----------
        delivery : ShareDelivery
        rng : numpy.random.Generator
            The noise source (the shell seeds it from the operating system's entropy; a
            test from a seed). Not used for a duplicate delivery.

        Returns
        -------
        MaskedInput
            ``m = d (d + 1) / 2`` uint64 words (the same message for a duplicate delivery).

        Raises
        ------
        SecAggError
            Another slot, out of order, or a delivery the round refuses; the state is
            unchanged (the increment stays pending).
        ValueError
            An encoded entry does not fit in ``bits`` (impossible within
            ``max_rows_per_slot`` at 64 bits).
        """
        leaf_round = self._current(delivery.slot, "a share delivery")
        if leaf_round.phase is not LeafPhase.SHARED:  # a duplicate, or refused by the round
            vector = self._vector if self._vector is not None else np.zeros(0, np.uint64)
            return leaf_round.receive_shares(delivery, vector)
        increment = self._pending
        exact = self._slot_input(delivery.slot, increment)
        vector = masking.encode(weight_off_diagonal(exact), self.scale, self.bits)
        mu = np.full(self._size, self.calibration.share_mu)
        vector = masking.add_noise(vector, masking.skellam_noise_share(mu, rng), self.bits)
        masked = leaf_round.receive_shares(delivery, vector)
        self._in_flight = (increment, self._pending_rows)
        self._vector = vector
        self._pending = np.zeros_like(increment)
        self._pending_rows = 0
        return masked

    def unmask(self, request: messages.UnmaskRequest) -> messages.UnmaskResponse:
        """Round 4: reveal the shares (`LeafRound.unmask`); the increment is spent.

        From the first answer on the slot counts as released for this leaf's budget: its
        increment becomes ``G_k`` of the segment and is never re-sent, whatever the outcome.

        Raises
        ------
        SecAggError
            A request for another slot than the current round's.
        UnmaskRefusedError
            What `LeafRound.unmask` refuses (a second, different request; this leaf not a
            survivor; fewer than ``t`` survivors; ...): nothing revealed, state unchanged.
        """
        response = self._current(request.slot, "an unmask request").unmask(request)
        if not self._revealed:
            self._spend_in_flight(request.slot)
        return response

    def receive_outcome(self, outcome: messages.SlotOutcome) -> bool:
        """The site's `SlotOutcome` (the outcome topic): ends the slot if it is the current one.

        An outcome of the current slot ends it (`end_slot`) with the survivors it names; one
        of a later slot ends the current round too (`observe_slot`); an earlier one is
        ignored.

        Returns
        -------
        bool
            Whether the slot released this leaf's in-flight increment although it had not
            answered the unmask request (its masked input was in ``U_3`` and ``t`` others
            answered): those readings are released, counted as such and never re-sent.
        """
        released_unanswered = False
        if self._round is not None and outcome.slot == self._round.slot:
            released_unanswered = (
                not self._revealed
                and self._in_flight is not None
                and outcome.released
                and self.leaf_id in outcome.survivors
            )
            if released_unanswered:
                self._spend_in_flight(outcome.slot)
            self._finish(outcome)
        return self.observe_slot(outcome.slot) or released_unanswered

    def _spend_in_flight(self, slot: int) -> None:
        """The in-flight increment of the current round is released: ``G_k`` of the segment."""
        assert self._in_flight is not None
        increment, rows = self._in_flight
        segment, position = divmod(slot, self.horizon)
        if segment != self._segment:
            self._segment, self._grams = segment, {}
        self._grams[position] = increment
        self._in_flight = None
        self._revealed = True
        self._readings_released += rows
        self._slots_contributed += 1

    def end_slot(self) -> bool:
        """End the current round without an outcome (the shell gave up on it, or a later
        slot began). Revealed: counted as released with the worst case, ``t`` survivors.
        Not revealed but its masked input formed: the site may have released it without
        this leaf's answer (its input in ``U_3``, ``t`` others answering), and nothing here
        says otherwise, so for privacy it is counted released at ``t`` survivors too (as an
        unknown in-flight slot: ``slots_in_flight_unknown``), never carried over and
        released again. Otherwise the increment carries over. No-op between rounds.

        Returns
        -------
        bool
            Whether a masked input not answered was counted released (the shell then marks
            its readings revealed).
        """
        if self._round is None:
            return False
        spent = not self._revealed and self._in_flight is not None
        if spent:
            rows = self._in_flight[1]
            self._spend_in_flight(self._round.slot)
            self._slots_in_flight_unknown += 1
            self._readings_in_flight_unknown += rows
        self._finish(None)
        return spent

    def _finish(self, outcome: messages.SlotOutcome | None) -> None:
        assert self._round is not None
        slot = self._round.slot
        record: dict[str, Any] = {"slot": slot, "revealed": self._revealed}
        if self._revealed:
            released = outcome is not None and outcome.released
            if released:
                assert outcome is not None
                survivors = len(outcome.survivors)
                self._slots_released += 1
            else:
                survivors = self.threshold  # the worst case: released from t shares
                if outcome is not None:
                    self._slots_revealed_skipped += 1
            epsilon = site_epsilon(self.calibration, max(survivors, self.threshold))
            self._epsilon = max(self._epsilon, epsilon)
            record.update(released=released, survivors=survivors, epsilon=epsilon)
        else:
            if self._in_flight is not None:  # nothing revealed: the readings carry over
                increment, rows = self._in_flight
                self._pending = self._pending + increment
                self._pending_rows += rows
                self._in_flight = None
            self._slots_carried_over += 1
            record.update(released=False, carried_over=True)
        if outcome is not None:
            record["reason"] = outcome.reason
        self._last_outcome = record
        self._last_slot = max(self._last_slot, slot)
        self._round = None
        self._vector = None
        self._revealed = False

    # -- ledger (export, restore, in flight at a crash: `SecAggLedger`) ---------------------

    def ledger(self) -> dict[str, Any]:
        """The leaf's privacy ledger, plain JSON types (for the status document).

        Keys: ``mechanism``; ``epsilon_target``, ``delta``, ``threshold``, ``horizon``,
        ``scale``; ``readings_released`` (in increments this leaf revealed), ``readings_
        pending`` (not revealed: pending or in flight), ``readings_clipped``;
        ``slots_contributed`` (revealed), ``slots_released`` (revealed, outcome released),
        ``slots_revealed_skipped`` (revealed, outcome skipped: spent all the same),
        ``slots_carried_over`` (ended unrevealed: the increment moved on); ``epsilon``, the
        guarantee per released reading at ``delta``: the worst over the revealed slots of
        `accounting.site_epsilon` for the outcome's survivors, or for ``t`` when no outcome
        said (at most ``epsilon_target``; 0.0 before any); ``slot`` (current round),
        ``next_slot``; ``last`` (the last ended slot: revealed, released, survivors,
        epsilon, carried_over, reason); ``in_flight`` (`in_flight_records`),
        ``slots_in_flight_unknown`` and ``readings_in_flight_unknown`` (in flight at a
        restart, outcome unknown: counted released, `resolve_in_flight`).
        """
        return {
            "mechanism": MECHANISM,
            "epsilon_target": self.calibration.epsilon,
            "delta": self.calibration.delta,
            "threshold": self.threshold,
            "horizon": self.horizon,
            "scale": self.scale,
            "readings_released": self._readings_released,
            "readings_pending": self.pending_rows,
            "readings_clipped": self.n_clipped_,
            "slots_contributed": self._slots_contributed,
            "slots_released": self._slots_released,
            "slots_revealed_skipped": self._slots_revealed_skipped,
            "slots_carried_over": self._slots_carried_over,
            "slots_in_flight_unknown": self._slots_in_flight_unknown,
            "readings_in_flight_unknown": self._readings_in_flight_unknown,
            "in_flight": self.in_flight_records(),
            "epsilon": self._epsilon,
            "slot": self.slot,
            "next_slot": self.next_slot,
            "last": None if self._last_outcome is None else dict(self._last_outcome),
        }
