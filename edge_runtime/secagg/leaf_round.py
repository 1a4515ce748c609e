"""A leaf's side of one secure-aggregation slot: a synchronous state machine, no I/O, no clock.

Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving Machine Learning",
CCS 2017, Fig. 4 (honest-but-curious), the user's side of rounds 0, 1, 2 and 4::

    LeafRound(...)            keys and seed from the caller (drawn by the shell)
      .advertise()            -> KeyAdvertisement           phase ADVERTISED
      .receive_roster(r)      -> ShareUpload                phase SHARED
      .receive_shares(d, x)   -> MaskedInput                phase MASKED
      .unmask(q)              -> UnmaskResponse             phase UNMASKED

Each step checks its message and raises `SecAggError` (state unchanged) for one out of
order, for another slot or leaf, or inconsistent with what came before; the same message
again returns the same answer (a duplicate delivery), a different one is refused. `unmask`
enforces the rule the protocol's privacy rests on: for each leaf ``v`` reveal the share of
``b_v`` (``v`` survived) or of ``s_v^SK`` (``v`` dropped), never both, for one request per
slot only, and only when at least ``t`` leaves survived (`UnmaskRefusedError` otherwise): an
aggregator that asks again with ``v`` moved from dropped to survivor would otherwise get
both and strip ``v``'s masks. With ``t`` above half the roster (checked in
`LeafRound.receive_roster`), different requests to different leaves cannot get both either.

Keys: the caller passes fresh X25519 private keys (cipher ``c_u`` and mask ``s_u``) and a
fresh self-mask seed ``b_u`` for every slot, as in the paper's round 0. A mask key must not
outlive a slot in which the aggregator may have recovered it (the leaf was declared dropped,
which the leaf cannot see), so keys per epoch are unsafe after any dropout.

Memory: ``O(n)`` shares and public keys, one copy of the release vector (``m`` uint64).
The only randomness not passed in is the Shamir coefficients (`edge_runtime.secagg.shares`),
which change the share bytes, never a result.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import numpy as np

from edge_runtime.secagg import masking, shares
from edge_runtime.secagg.errors import SecAggError, UnmaskRefusedError
from edge_runtime.secagg.messages import (
    KeyAdvertisement,
    KeyRoster,
    MaskedInput,
    ShareDelivery,
    ShareUpload,
    UnmaskRequest,
    UnmaskResponse,
)
from edge_runtime.secagg.share_cipher import decrypt_shares, encrypt_shares

__all__ = ["LeafPhase", "LeafRound"]


class LeafPhase(enum.Enum):
    """What the leaf has sent last in the slot."""

    ADVERTISED = "advertised"  # public keys; waiting for the roster
    SHARED = "shared"  # encrypted shares; waiting for the peers' shares
    MASKED = "masked"  # masked input; waiting for the unmask request
    UNMASKED = "unmasked"  # shares revealed: the slot is over for this leaf


class LeafRound:
    """One leaf, one slot of secure aggregation with threshold ``t`` (Bonawitz et al. Fig. 4).

    Parameters
    ----------
    leaf_id : str
        This leaf's node id.
    slot : int in [0, 2**64)
        The release slot; strictly increasing per site, never reused.
    threshold : int >= 2
        ``t``: the fewest leaves whose inputs a released sum may hold, and the number of
        shares that recover a secret. The aggregator's roster must carry the same ``t``.
    cipher_private_key, mask_private_key : bytes of length 32
        Fresh raw X25519 private keys ``c_u^SK`` (encrypts the shares) and ``s_u^SK``
        (derives the pair masks); any 32 bytes (X25519 clamps).
    self_mask_seed : bytes of length 32
        Fresh ``b_u``; its ChaCha20 keystream is the self mask.
    bits : int, default=64
        The modulus ``2**bits`` of the encoded inputs.
    cohort : iterable of str or None, default=None
        The site's leaves as this leaf knows them (from the topology): a roster naming
        anyone else is refused, so an aggregator cannot add members of its own (Sybils).
        None accepts any ids (the keys' authenticity is then the broker ACL's alone).

    Raises
    ------
    ValueError
        A malformed argument.
    """

    def __init__(
        self,
        leaf_id: str,
        slot: int,
        threshold: int,
        cipher_private_key: bytes,
        mask_private_key: bytes,
        self_mask_seed: bytes,
        *,
        bits: int = masking.DEFAULT_BITS,
        cohort: Iterable[str] | None = None,
    ) -> None:
        if not isinstance(leaf_id, str) or not leaf_id:
            raise ValueError(f"leaf_id must be a non-empty str, got {leaf_id!r}")
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < 2**64:
            raise ValueError(f"slot must be an int in [0, 2**64), got {slot!r}")
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 2:
            raise ValueError(f"threshold must be an int >= 2, got {threshold!r}")
        if not isinstance(self_mask_seed, bytes | bytearray) or len(self_mask_seed) != 32:
            raise ValueError("self_mask_seed must be 32 bytes")
        self.cohort = None if cohort is None else frozenset(cohort)
        if self.cohort is not None and leaf_id not in self.cohort:
            raise ValueError(f"cohort must include the leaf itself ({leaf_id!r})")
        self.leaf_id = leaf_id
        self.slot = slot
        self.threshold = threshold
        self.bits = masking.check_bits(bits)
        self._cipher_key = bytes(cipher_private_key)
        self._mask_key = bytes(mask_private_key)
        self._seed = bytes(self_mask_seed)
        self._advertisement = KeyAdvertisement(
            slot,
            leaf_id,
            masking.public_key(self._cipher_key),
            masking.public_key(self._mask_key),
        )
        self.phase = LeafPhase.ADVERTISED
        self._roster: KeyRoster | None = None
        self._upload: ShareUpload | None = None
        self._own_shares: tuple[bytes, bytes] | None = None  # of s_u^SK, of b_u
        self._delivery: ShareDelivery | None = None
        self._vector: np.ndarray | None = None
        self._masked: MaskedInput | None = None
        self._held: dict[str, tuple[bytes, bytes]] = {}  # owner -> (share of s^SK, of b)
        self._request: UnmaskRequest | None = None
        self._response: UnmaskResponse | None = None

    def _refuse(self, what: str) -> SecAggError:
        return SecAggError(f"leaf {self.leaf_id!r}, slot {self.slot}: {what}")

    def _check_slot(self, slot: int, kind: str) -> None:
        if slot != self.slot:
            raise self._refuse(f"{kind} is for slot {slot}")

    # -- round 0: AdvertiseKeys -------------------------------------------------------------

    def advertise(self) -> KeyAdvertisement:
        """Round 0: the public keys ``c_u^PK, s_u^PK`` (the same message every time)."""
        return self._advertisement

    # -- round 1: ShareKeys -----------------------------------------------------------------

    def receive_roster(self, roster: KeyRoster) -> ShareUpload:
        """Round 1: Shamir-share ``s_u^SK`` and ``b_u`` among the roster, encrypt to each peer.

        Checks (else `SecAggError`): the slot and ``t`` are this leaf's; the roster is
        sorted by id with no repeats, within ``cohort`` if given, holds this leaf's
        advertisement unchanged, at least
        ``t`` and fewer than ``2 t`` leaves; no public key appears twice (Fig. 4 round 1:
        "all the public key pairs are different"). Share ``i + 1`` goes to the ``i``-th
        leaf of the roster.

        Why ``t`` above half: each leaf answers one unmask request, but an aggregator may
        send different requests to different leaves, naming ``v`` dropped to some and a
        survivor to others; it then needs ``t`` answers of each kind, ``2 t`` leaves, which
        a roster of fewer than ``2 t`` does not have. (Bonawitz et al.'s active variant
        stops this with a signed consistency round instead, Fig. 4 round 3.)

        Returns
        -------
        ShareUpload
            ``(recipient, ciphertext)`` for every other leaf, sorted by recipient.
        """
        self._check_slot(roster.slot, "the roster")
        if self.phase is not LeafPhase.ADVERTISED:
            if roster == self._roster and self._upload is not None:
                return self._upload
            raise self._refuse(f"a second, different roster in phase {self.phase.value}")
        if roster.threshold != self.threshold:
            raise self._refuse(f"the roster's threshold {roster.threshold} is not {self.threshold}")
        ids = roster.leaf_ids
        if list(ids) != sorted(set(ids)):
            raise self._refuse("the roster is not sorted by leaf id or repeats one")
        strangers = sorted(set(ids) - self.cohort) if self.cohort is not None else []
        if strangers:
            raise self._refuse(f"the roster names leaves outside the site's cohort: {strangers}")
        if len(ids) < self.threshold:
            raise self._refuse(f"the roster has {len(ids)} leaves, fewer than t = {self.threshold}")
        if 2 * self.threshold <= len(ids):
            raise self._refuse(
                f"t = {self.threshold} is not above half the roster's {len(ids)} leaves"
            )
        if len(ids) > shares.MAX_SHARES:
            raise self._refuse(f"the roster has {len(ids)} leaves, more than {shares.MAX_SHARES}")
        if self._advertisement not in roster.advertisements:
            raise self._refuse("the roster lacks this leaf's advertisement or altered it")
        keys = [
            key
            for ad in roster.advertisements
            for key in (ad.cipher_public_key, ad.mask_public_key)
        ]
        if len(set(keys)) != len(keys):
            raise self._refuse("a public key appears twice in the roster")
        if any(ad.slot != self.slot for ad in roster.advertisements):
            raise self._refuse("the roster holds an advertisement for another slot")
        mask_key_shares = shares.split(self._mask_key, len(ids), self.threshold)
        seed_shares = shares.split(self._seed, len(ids), self.threshold)
        ciphertexts = []
        try:
            for index, ad in enumerate(roster.advertisements):
                if ad.leaf_id == self.leaf_id:
                    own = (mask_key_shares[index], seed_shares[index])
                    continue
                ciphertext = encrypt_shares(
                    self.leaf_id,
                    self._cipher_key,
                    ad.leaf_id,
                    ad.cipher_public_key,
                    self.slot,
                    mask_key_shares[index],
                    seed_shares[index],
                )
                ciphertexts.append((ad.leaf_id, ciphertext))
        except ValueError as error:  # a peer's malformed or low-order key
            raise self._refuse(f"cannot encrypt to the roster: {error}") from None
        self._roster = roster
        self._own_shares = own
        self._upload = ShareUpload(self.slot, self.leaf_id, tuple(ciphertexts))
        self.phase = LeafPhase.SHARED
        return self._upload

    # -- round 2: MaskedInputCollection -----------------------------------------------------

    def receive_shares(self, delivery: ShareDelivery, vector: np.ndarray) -> MaskedInput:
        """Round 2: decrypt the peers' shares, then mask ``vector`` for the cohort ``U_2``.

        ``U_2`` is this leaf and the delivery's senders: ``y_u = x_u + PRG(b_u) + sum over
        v in U_2 \\ {u} of pair_mask(u, v)`` mod ``2**bits``.

        Parameters
        ----------
        delivery : ShareDelivery
            For this leaf, from leaves of the roster, each once, each authenticating.
        vector : ndarray of shape (m,), uint64
            ``x_u``: the encoded release with this leaf's noise share
            (`masking.encode`, `masking.add_noise`).

        Returns
        -------
        MaskedInput

        Raises
        ------
        SecAggError
            Out of order, a sender outside the roster or repeated, a ciphertext that does
            not authenticate or carries shares of the wrong index, ``|U_2| < t``, or a
            malformed ``vector``.
        """
        self._check_slot(delivery.slot, "the share delivery")
        if self.phase is not LeafPhase.SHARED:
            if (
                self.phase is not LeafPhase.ADVERTISED
                and delivery == self._delivery
                and self._vector is not None
                and self._masked is not None
                and np.array_equal(np.asarray(vector), self._vector)
            ):
                return self._masked
            raise self._refuse(f"a share delivery in phase {self.phase.value}")
        assert self._roster is not None
        if delivery.recipient != self.leaf_id:
            raise self._refuse(f"a share delivery for {delivery.recipient!r}")
        try:
            array = masking.check_vector(vector, self.bits, "vector").copy()
        except ValueError as error:
            raise self._refuse(str(error)) from None
        roster = {ad.leaf_id: ad for ad in self._roster.advertisements}
        own_index = self._roster.leaf_ids.index(self.leaf_id) + 1
        senders = [sender for sender, _ in delivery.ciphertexts]
        if len(set(senders)) != len(senders):
            raise self._refuse("a share delivery repeats a sender")
        held: dict[str, tuple[bytes, bytes]] = {}
        for sender, ciphertext in delivery.ciphertexts:
            if sender == self.leaf_id or sender not in roster:
                raise self._refuse(f"shares from {sender!r}, not a peer in the roster")
            try:
                pair = decrypt_shares(
                    self.leaf_id,
                    self._cipher_key,
                    sender,
                    roster[sender].cipher_public_key,
                    self.slot,
                    ciphertext,
                )
                if {shares.share_index(piece) for piece in pair} != {own_index}:
                    raise ValueError(f"shares from {sender!r} are not for index {own_index}")
            except ValueError as error:
                raise self._refuse(str(error)) from None
            held[sender] = pair
        if len(held) + 1 < self.threshold:
            raise self._refuse(
                f"{len(held) + 1} leaves shared keys, fewer than t = {self.threshold}"
            )
        assert self._own_shares is not None
        held[self.leaf_id] = self._own_shares
        self_masked = masking.unmask_sum(  # the modular sum x_u + PRG(b_u)
            [array, masking.self_mask(self._seed, array.size, self.bits)], self.bits
        )
        peers = {sender: roster[sender].mask_public_key for sender in senders}
        masked = masking.mask(
            self.leaf_id, peers, self._mask_key, self.slot, self_masked, self.bits
        )
        self._held = held
        self._delivery = delivery
        self._vector = array
        self._masked = MaskedInput(self.slot, self.leaf_id, masked)
        self.phase = LeafPhase.MASKED
        return self._masked

    # -- round 4: Unmasking -----------------------------------------------------------------

    def unmask(self, request: UnmaskRequest) -> UnmaskResponse:
        """Round 4: reveal shares of ``b_v`` for survivors and of ``s_v^SK`` for the dropped.

        Answers one request per slot: the same request again gets the same response.

        Raises
        ------
        UnmaskRefusedError
            Before this leaf sent its masked input; a second, different request; a leaf
            named both survivor and dropped; this leaf not among the survivors; a leaf
            this one holds no share of (outside ``U_2``); fewer than ``t`` survivors.
            The leaf's state is unchanged: it has revealed nothing.
        """
        if request.slot != self.slot:
            raise UnmaskRefusedError(
                f"leaf {self.leaf_id!r}, slot {self.slot}: an unmask request for slot "
                f"{request.slot}"
            )
        refuse = f"leaf {self.leaf_id!r}, slot {self.slot}: refuses to unmask:"
        if self.phase is LeafPhase.UNMASKED:
            if request == self._request and self._response is not None:
                return self._response
            raise UnmaskRefusedError(
                f"{refuse} it already answered a different request for the slot"
            )
        if self.phase is not LeafPhase.MASKED:
            raise UnmaskRefusedError(f"{refuse} it has not sent its masked input")
        survivors, dropped = set(request.survivors), set(request.dropped)
        both = sorted(survivors & dropped)
        if both:
            raise UnmaskRefusedError(f"{refuse} {both} named both survivor and dropped")
        if self.leaf_id not in survivors:
            raise UnmaskRefusedError(f"{refuse} it sent its masked input but is not a survivor")
        unknown = sorted((survivors | dropped) - set(self._held))
        if unknown:
            raise UnmaskRefusedError(f"{refuse} it holds no shares of {unknown}")
        if len(survivors) < self.threshold:
            raise UnmaskRefusedError(
                f"{refuse} {len(survivors)} survivors, fewer than t = {self.threshold}"
            )
        self._response = UnmaskResponse(
            self.slot,
            self.leaf_id,
            tuple((owner, self._held[owner][1]) for owner in sorted(survivors)),
            tuple((owner, self._held[owner][0]) for owner in sorted(dropped)),
        )
        self._request = request
        self.phase = LeafPhase.UNMASKED
        return self._response
