"""The aggregator's side of one secure-aggregation slot: a state machine, time passed in.

Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving Machine Learning",
CCS 2017, Fig. 4 (honest-but-curious), the server's side of rounds 0, 1, 2 and 4, for one
site (the aggregator and its ``n`` leaves) and one release slot::

    phase          collects             closes when                 then sends
    ADVERTISE      KeyAdvertisement     all n, or the deadline      KeyRoster        (U_1)
    SHARE          ShareUpload          all of U_1, or deadline     ShareDelivery    (U_2)
    MASKED_INPUT   MaskedInput          all of U_2, or deadline     UnmaskRequest    (U_3)
    UNMASK         UnmaskResponse       t of U_3 (or deadline)      SlotOutcome
    DONE

At the end of any phase with fewer than ``t`` leaves left, the slot is skipped: the
`SlotOutcome` carries no sum and says why, so nothing is ever released from fewer than
``t`` inputs. Otherwise the aggregator recovers ``b_u`` for every survivor ``u`` and
``s_v^SK`` for every dropped ``v`` from ``t`` responses, and releases::

    sum over u in U_3 of (y_u - PRG(b_u))  +  sum over v in U_2 \\ U_3, u in U_3 of pair_mask(v, u)

which is the exact sum mod ``2**bits`` of the survivors' encoded inputs (``pair_mask(v, u)
= -pair_mask(u, v)`` is the mask ``u`` added for its pair with ``v``, now removed). With a
``bound`` (`masking.sum_bound`), a sum outside it (a mask that did not cancel: a leaf that
did not mask, a wrong share) is not released either (`masking.within_bound`).

Time comes in as ``now`` (seconds, any monotonic origin); `deadline` tells the shell when
to call `tick`. A message received at or after the deadline is refused as late (the phase
closes at `tick`), so the outcome depends only on the sequence of calls. Every refusal is
a `SecAggError` with the state unchanged.

Cost at the end: ``|U_3| + |U_2 \\ U_3|`` Shamir combinations of ``t`` shares
(``O(t**2)`` each) and ``|U_2 \\ U_3| |U_3|`` pair masks of ``m`` words; memory ``O(n m)``
for the masked inputs plus ``O(n**2)`` ciphertexts while routing them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from edge_runtime.secagg import masking, messages, shares
from edge_runtime.secagg.errors import SecAggError
from edge_runtime.secagg.share_cipher import CIPHERTEXT_BYTES

__all__ = ["AggregatorPhase", "AggregatorRound", "Outgoing", "RoundTimeouts"]

Outgoing = messages.SiteMessage
Incoming = messages.LeafMessage


@dataclass(frozen=True)
class RoundTimeouts:
    """Seconds each phase waits for the leaves before it closes with those that answered."""

    advertise: float = 10.0
    share: float = 10.0
    masked_input: float = 30.0
    unmask: float = 10.0

    def __post_init__(self) -> None:
        for name in ("advertise", "share", "masked_input", "unmask"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and value > 0 and value < float("inf")):
                raise ValueError(f"timeout {name} must be a positive finite number, got {value!r}")

    @property
    def total(self) -> float:
        """Seconds of the four phases together: the longest a slot runs."""
        return self.advertise + self.share + self.masked_input + self.unmask


class AggregatorPhase(enum.Enum):
    """What the aggregator collects now."""

    ADVERTISE = "advertise"
    SHARE = "share"
    MASKED_INPUT = "masked_input"
    UNMASK = "unmask"
    DONE = "done"


_EXPECTS: dict[AggregatorPhase, type] = {
    AggregatorPhase.ADVERTISE: messages.KeyAdvertisement,
    AggregatorPhase.SHARE: messages.ShareUpload,
    AggregatorPhase.MASKED_INPUT: messages.MaskedInput,
    AggregatorPhase.UNMASK: messages.UnmaskResponse,
}


class AggregatorRound:
    """One site's aggregator, one slot of secure aggregation with threshold ``t``.

    Parameters
    ----------
    slot : int in [0, 2**64)
    leaf_ids : iterable of str
        The site's ``n`` leaves (the cohort this slot may hold).
    threshold : int in [2, n], above ``n / 2``
        ``t``: the fewest inputs a released sum holds, and the shares that recover a secret
        (above half, or the leaves refuse the roster: `LeafRound.receive_roster`). Up to
        ``n - t`` leaves may drop out.
    size : int >= 1
        ``m``, the entries of an encoded input (`masking.triangle_size` of ``d``).
    now : float
        The slot's start; the advertise phase's deadline is ``now + timeouts.advertise``.
    bits : int, default=64
    bound : int or None, default=None
        When given, a sum whose centred entries leave ``[-bound, bound]`` is not released
        (`masking.sum_bound` of ``t`` or ``n`` leaves, whichever the caller expects).
    timeouts : RoundTimeouts

    Attributes
    ----------
    phase : AggregatorPhase
    deadline : float or None
        When the current phase closes (None once DONE): the shell calls `tick` then.
    outcome : SlotOutcome or None
        Set once, when the phase becomes DONE.
    """

    def __init__(
        self,
        slot: int,
        leaf_ids: Iterable[str],
        threshold: int,
        size: int,
        now: float,
        *,
        bits: int = masking.DEFAULT_BITS,
        bound: int | None = None,
        timeouts: RoundTimeouts | None = None,
    ) -> None:
        ids = list(leaf_ids)
        if not ids or not all(isinstance(node, str) and node for node in ids):
            raise ValueError("leaf_ids must be non-empty strs")
        if len(set(ids)) != len(ids):
            raise ValueError("leaf_ids repeats an id")
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < 2**64:
            raise ValueError(f"slot must be an int in [0, 2**64), got {slot!r}")
        if isinstance(threshold, bool) or not isinstance(threshold, int):
            raise ValueError(f"threshold must be an int, got {threshold!r}")
        if not (2 <= threshold <= len(ids) and 2 * threshold > len(ids)):
            raise ValueError(
                f"threshold must be in [2, n] and above n / 2 (n = {len(ids)}; leaves refuse a "
                f"lower one), got {threshold}"
            )
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int, got {size!r}")
        self.bits = masking.check_bits(bits)
        if bound is not None and not (isinstance(bound, int) and 0 <= bound < 2 ** (self.bits - 1)):
            raise ValueError(f"bound must be None or an int in [0, 2**(bits-1)), got {bound!r}")
        self.slot = slot
        self.leaf_ids = frozenset(ids)
        self.threshold = threshold
        self.size = size
        self.bound = bound
        self.timeouts = timeouts if timeouts is not None else RoundTimeouts()
        self.phase = AggregatorPhase.ADVERTISE
        self.deadline: float | None = float(now) + self.timeouts.advertise
        self.outcome: messages.SlotOutcome | None = None
        self._ads: dict[str, messages.KeyAdvertisement] = {}
        self._uploads: dict[str, messages.ShareUpload] = {}
        self._inputs: dict[str, np.ndarray] = {}
        self._responses: dict[str, messages.UnmaskResponse] = {}
        self._survivors: frozenset[str] = frozenset()  # U_3
        self._dropped: frozenset[str] = frozenset()  # U_2 \ U_3

    # -- events in ----------------------------------------------------------------------------

    def receive(self, message: Incoming, now: float) -> list[Outgoing]:
        """Take one leaf's message; returns what to send (empty until the phase closes).

        Raises
        ------
        SecAggError
            A message for another slot, from a leaf outside the phase's cohort, of the
            wrong kind for the phase (late or early), at or after the deadline, malformed,
            or different from one the same leaf sent before (an identical one is ignored).
        """
        if message.slot != self.slot:
            raise self._refuse(f"a {type(message).__name__} for slot {message.slot}")
        expected = _EXPECTS.get(self.phase)
        if expected is None or not isinstance(message, expected):
            raise self._refuse(f"a {type(message).__name__} in phase {self.phase.value}")
        assert self.deadline is not None
        if now >= self.deadline:
            raise self._refuse(f"a {type(message).__name__} after the deadline {self.deadline}")
        if isinstance(message, messages.KeyAdvertisement):
            complete = self._take_advertisement(message)
        elif isinstance(message, messages.ShareUpload):
            complete = self._take_upload(message)
        elif isinstance(message, messages.MaskedInput):
            complete = self._take_input(message)
        else:
            complete = self._take_response(message)
        return self._close(now) if complete else []

    def tick(self, now: float) -> list[Outgoing]:
        """Close the current phase if its deadline has passed; returns what to send."""
        if self.deadline is None or now < self.deadline:
            return []
        return self._close(now)

    # -- checks per phase ---------------------------------------------------------------------

    def _refuse(self, what: str) -> SecAggError:
        return SecAggError(f"aggregator, slot {self.slot}: {what}")

    def _check_sender(self, sender: str, cohort: Iterable[str], kind: str) -> None:
        if sender not in cohort:
            raise self._refuse(f"a {kind} from {sender!r}, outside the cohort of this phase")

    def _take_advertisement(self, ad: messages.KeyAdvertisement) -> bool:
        self._check_sender(ad.leaf_id, self.leaf_ids, "key advertisement")
        if ad.leaf_id in self._ads:
            if ad != self._ads[ad.leaf_id]:
                raise self._refuse(f"a second, different key advertisement from {ad.leaf_id!r}")
            return False
        keys = (ad.cipher_public_key, ad.mask_public_key)
        if not all(isinstance(key, bytes) and len(key) == masking.KEY_BYTES for key in keys):
            raise self._refuse(f"public keys of {ad.leaf_id!r} are not {masking.KEY_BYTES} bytes")
        seen = {
            key
            for other in self._ads.values()
            for key in (other.cipher_public_key, other.mask_public_key)
        }
        if len(set(keys)) != 2 or seen & set(keys):
            raise self._refuse(f"a public key of {ad.leaf_id!r} repeats one already advertised")
        self._ads[ad.leaf_id] = ad
        return len(self._ads) == len(self.leaf_ids)

    def _take_upload(self, upload: messages.ShareUpload) -> bool:
        self._check_sender(upload.sender, self._ads, "share upload")
        if upload.sender in self._uploads:
            if upload != self._uploads[upload.sender]:
                raise self._refuse(f"a second, different share upload from {upload.sender!r}")
            return False
        recipients = [recipient for recipient, _ in upload.ciphertexts]
        if sorted(recipients) != sorted(set(self._ads) - {upload.sender}):
            raise self._refuse(f"the upload of {upload.sender!r} is not for each other leaf once")
        if not all(
            isinstance(ct, bytes) and len(ct) == CIPHERTEXT_BYTES for _, ct in upload.ciphertexts
        ):
            raise self._refuse(f"a ciphertext of {upload.sender!r} is not {CIPHERTEXT_BYTES} bytes")
        self._uploads[upload.sender] = upload
        return len(self._uploads) == len(self._ads)

    def _take_input(self, message: messages.MaskedInput) -> bool:
        self._check_sender(message.leaf_id, self._uploads, "masked input")
        try:
            vector = masking.check_vector(message.vector, self.bits, "masked input")
        except ValueError as error:
            raise self._refuse(f"{message.leaf_id!r}: {error}") from None
        if vector.shape != (self.size,):
            raise self._refuse(f"the masked input of {message.leaf_id!r} is not ({self.size},)")
        if message.leaf_id in self._inputs:
            if not np.array_equal(vector, self._inputs[message.leaf_id]):
                raise self._refuse(f"a second, different masked input from {message.leaf_id!r}")
            return False
        self._inputs[message.leaf_id] = vector.copy()
        return len(self._inputs) == len(self._uploads)

    def _take_response(self, response: messages.UnmaskResponse) -> bool:
        self._check_sender(response.leaf_id, self._survivors, "unmask response")
        if response.leaf_id in self._responses:
            if response != self._responses[response.leaf_id]:
                raise self._refuse(f"a second, different unmask response from {response.leaf_id!r}")
            return False
        for pairs, owners, what in (
            (response.self_mask_shares, self._survivors, "self-mask shares"),
            (response.mask_key_shares, self._dropped, "mask-key shares"),
        ):
            if sorted(owner for owner, _ in pairs) != sorted(owners):
                raise self._refuse(f"the {what} of {response.leaf_id!r} are not one per leaf asked")
            try:
                for _, piece in pairs:
                    shares.share_index(piece)
            except ValueError as error:
                raise self._refuse(f"{response.leaf_id!r}: {error}") from None
        self._responses[response.leaf_id] = response
        return len(self._responses) >= self.threshold

    # -- phase ends ---------------------------------------------------------------------------

    def _skip(self, reason: str) -> list[Outgoing]:
        self.phase = AggregatorPhase.DONE
        self.deadline = None
        self.outcome = messages.SlotOutcome(self.slot, None, self._survivors, self._dropped, reason)
        return [self.outcome]

    def _close(self, now: float) -> list[Outgoing]:
        t = self.threshold
        if self.phase is AggregatorPhase.ADVERTISE:
            if len(self._ads) < t:
                return self._skip(
                    f"{len(self._ads)} of {len(self.leaf_ids)} leaves advertised keys, t = {t}"
                )
            self.phase = AggregatorPhase.SHARE
            self.deadline = now + self.timeouts.share
            ads = tuple(self._ads[node] for node in sorted(self._ads))
            return [messages.KeyRoster(self.slot, t, ads)]
        if self.phase is AggregatorPhase.SHARE:
            if len(self._uploads) < t:
                return self._skip(f"{len(self._uploads)} leaves shared keys, t = {t}")
            self.phase = AggregatorPhase.MASKED_INPUT
            self.deadline = now + self.timeouts.masked_input
            cohort = sorted(self._uploads)
            routed = {node: dict(self._uploads[node].ciphertexts) for node in cohort}
            return [
                messages.ShareDelivery(
                    self.slot,
                    recipient,
                    tuple(
                        (sender, routed[sender][recipient])
                        for sender in cohort
                        if sender != recipient
                    ),
                )
                for recipient in cohort
            ]
        if self.phase is AggregatorPhase.MASKED_INPUT:
            self._survivors = frozenset(self._inputs)
            self._dropped = frozenset(self._uploads) - self._survivors
            if len(self._survivors) < t:
                return self._skip(f"{len(self._survivors)} masked inputs arrived, t = {t}")
            self.phase = AggregatorPhase.UNMASK
            self.deadline = now + self.timeouts.unmask
            return [messages.UnmaskRequest(self.slot, self._survivors, self._dropped)]
        if self.phase is AggregatorPhase.UNMASK:
            if len(self._responses) < t:
                return self._skip(
                    f"{len(self._responses)} survivors answered the unmask request, t = {t}"
                )
            return self._release()
        return []

    def _recover(self, owner: str, kind: str) -> bytes:
        responses = [self._responses[node] for node in sorted(self._responses)][: self.threshold]
        pieces = [
            dict(r.self_mask_shares if kind == "self" else r.mask_key_shares)[owner]
            for r in responses
        ]
        return shares.combine(pieces, self.threshold)

    def _release(self) -> list[Outgoing]:
        bits, size = self.bits, self.size
        try:
            seeds = {node: self._recover(node, "self") for node in sorted(self._survivors)}
            keys = {node: self._recover(node, "key") for node in sorted(self._dropped)}
        except ValueError as error:
            return self._skip(f"the shares do not combine: {error}")
        for node, key in keys.items():
            if masking.public_key(key) != self._ads[node].mask_public_key:
                return self._skip(f"the recovered mask key of {node!r} is not its advertised one")
        terms = [self._inputs[node] for node in sorted(self._survivors)]
        for seed in seeds.values():  # minus PRG(b_u)
            terms.append(masking.negate(masking.self_mask(seed, size, bits), bits))
        for dropped, key in keys.items():  # the survivors' masks with each dropped leaf
            for node in sorted(self._survivors):
                terms.append(
                    masking.pair_mask(
                        dropped, key, node, self._ads[node].mask_public_key, self.slot, size, bits
                    )
                )
        total = masking.unmask_sum(terms, bits)
        if self.bound is not None and not masking.within_bound(total, self.bound, bits):
            return self._skip(f"the sum leaves the bound {self.bound}: a mask did not cancel")
        self.phase = AggregatorPhase.DONE
        self.deadline = None
        self.outcome = messages.SlotOutcome(self.slot, total, self._survivors, self._dropped)
        return [self.outcome]
