"""The messages of one secure-aggregation slot between a site's leaves and its aggregator.

One frozen dataclass per message of Bonawitz et al., "Practical Secure Aggregation for
Privacy-Preserving Machine Learning", CCS 2017, Fig. 4 (the honest-but-curious protocol;
round 3, ConsistencyCheck, belongs to the active variant and is not here). Every message
carries its ``slot``; ids are the leaves' node ids, compared as str. These are the cores'
types; ``edge_runtime.wire`` maps them to msgpack (not yet) and checks sizes and types.

=====================  ===============  =============================================
message                direction        Bonawitz et al. Fig. 4
=====================  ===============  =============================================
`KeyAdvertisement`     leaf -> agg.     round 0 AdvertiseKeys: ``c_u^PK, s_u^PK``
`KeyRoster`            agg. -> leaves   round 0 end: the advertisements of ``U_1``
`ShareUpload`          leaf -> agg.     round 1 ShareKeys: ``e_{u,v}`` for ``v`` in ``U_1``
`ShareDelivery`        agg. -> leaf     round 1 end: ``e_{u,v}`` for ``u`` in ``U_2``
`MaskedInput`          leaf -> agg.     round 2 MaskedInputCollection: ``y_u``
`UnmaskRequest`        agg. -> leaves   round 2 end: ``U_3`` (survivors), ``U_2 \\ U_3``
`UnmaskResponse`       leaf -> agg.     round 4 Unmasking: shares of ``b_v`` / ``s_v^SK``
`SlotOutcome`          agg. -> shell    round 4 end: the sum of ``U_3``'s inputs, or skip
=====================  ===============  =============================================

Sizes: a `ShareUpload` and a `ShareDelivery` carry ``n - 1`` ciphertexts of
`edge_runtime.secagg.share_cipher.CIPHERTEXT_BYTES` (156) bytes; an `UnmaskResponse`
``|U_3| + |U_2 \\ U_3|`` shares of `edge_runtime.secagg.shares.SHARE_BYTES` (70) bytes; a
`MaskedInput` ``8 d (d + 1) / 2`` bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "KeyAdvertisement",
    "KeyRoster",
    "LeafMessage",
    "MaskedInput",
    "SecAggMessage",
    "ShareDelivery",
    "ShareUpload",
    "SiteMessage",
    "SlotOutcome",
    "UnmaskRequest",
    "UnmaskResponse",
]


@dataclass(frozen=True)
class KeyAdvertisement:
    """A leaf's two raw 32-byte X25519 public keys for the slot: cipher ``c`` and mask ``s``."""

    slot: int
    leaf_id: str
    cipher_public_key: bytes
    mask_public_key: bytes


@dataclass(frozen=True)
class KeyRoster:
    """The advertisements the aggregator received (``U_1``), sorted by leaf id.

    ``threshold`` is the site's ``t``; a leaf refuses a roster whose ``t`` is not its own.
    The position of a leaf in ``advertisements`` is its share index minus 1.
    """

    slot: int
    threshold: int
    advertisements: tuple[KeyAdvertisement, ...]

    @property
    def leaf_ids(self) -> tuple[str, ...]:
        return tuple(ad.leaf_id for ad in self.advertisements)


@dataclass(frozen=True)
class ShareUpload:
    """A leaf's encrypted shares: ``(recipient, ciphertext)`` for every other leaf of ``U_1``."""

    slot: int
    sender: str
    ciphertexts: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class ShareDelivery:
    """The ciphertexts for ``recipient``: ``(sender, ciphertext)`` for every other leaf of ``U_2``.

    Its senders and the recipient are ``U_2``: the leaves whose pair masks the recipient adds.
    """

    slot: int
    recipient: str
    ciphertexts: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, eq=False)
class MaskedInput:
    """``y_u``: the leaf's encoded noisy release plus its self mask and pair masks.

    ``vector``: ndarray of shape (m,), uint64, residues mod ``2**bits``.
    """

    slot: int
    leaf_id: str
    vector: np.ndarray


@dataclass(frozen=True)
class UnmaskRequest:
    """``U_3`` (``survivors``, whose masked inputs arrived) and ``dropped = U_2 \\ U_3``."""

    slot: int
    survivors: frozenset[str]
    dropped: frozenset[str]


@dataclass(frozen=True)
class UnmaskResponse:
    """A survivor's shares: of ``b_v`` for each survivor ``v``, of ``s_v^SK`` for each dropped.

    ``self_mask_shares`` and ``mask_key_shares`` are ``(owner, share)`` pairs sorted by owner.
    """

    slot: int
    leaf_id: str
    self_mask_shares: tuple[tuple[str, bytes], ...]
    mask_key_shares: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, eq=False)
class SlotOutcome:
    """The end of a slot: the released sum, or why nothing is released.

    ``total``: ndarray of shape (m,), uint64, the exact sum mod ``2**bits`` of the survivors'
    encoded inputs, or None when the slot is skipped (``reason`` says why).
    ``survivors``: whose inputs the sum holds (empty when skipped before round 2 ended).
    ``dropped``: leaves of ``U_2`` whose inputs did not arrive (their pair masks removed).
    """

    slot: int
    total: np.ndarray | None
    survivors: frozenset[str]
    dropped: frozenset[str]
    reason: str = ""

    @property
    def released(self) -> bool:
        return self.total is not None


LeafMessage = KeyAdvertisement | ShareUpload | MaskedInput | UnmaskResponse
"""What a leaf sends its site's aggregator (an `AggregatorRound`'s input)."""

SiteMessage = KeyRoster | ShareDelivery | UnmaskRequest | SlotOutcome
"""What a site's aggregator sends its leaves (an `AggregatorRound`'s output)."""

SecAggMessage = LeafMessage | SiteMessage
"""Any message of a secure-aggregation slot."""
