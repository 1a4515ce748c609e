"""Authenticated encryption of a leaf's two Shamir shares for one peer, through the aggregator.

Bonawitz et al. 2017, Fig. 4 round 1 (ShareKeys): leaf ``u`` encrypts to each peer ``v``
its shares of ``s_u^SK`` (the mask key) and ``b_u`` (the self-mask seed) under
``KA.agree(c_u^SK, c_v^PK)``, so that the aggregator that routes them learns nothing. The
cipher keys ``c`` are a second X25519 pair, separate from the mask keys ``s``: recovering a
dropped leaf's ``s_u^SK`` must not open the shares it received (the paper's reason for two
pairs; with one pair, ``n - t >= t`` recovered keys would open every survivor's ``s_v^SK``).

Construction (all from ``cryptography``): ``key = HKDF-SHA256(X25519(c_u^SK, c_v^PK), salt =
slot, info = label || sender || recipient)`` (ids length-prefixed, in the direction of the
message, so ``u -> v`` and ``v -> u`` use different keys), ChaCha20-Poly1305 with a zero
nonce (each key encrypts exactly one message: fresh per slot and direction) and the same
``slot || sender || recipient`` as associated data. The plaintext is the two shares, each
`edge_runtime.secagg.shares.SHARE_BYTES` long, mask key's first.
"""

from __future__ import annotations

from edge_runtime.secagg.masking import KEY_BYTES
from edge_runtime.secagg.shares import SHARE_BYTES

__all__ = ["CIPHERTEXT_BYTES", "decrypt_shares", "encrypt_shares"]

_LABEL = b"edge_runtime/secagg/share-cipher/v1"
_NONCE = bytes(12)
_TAG_BYTES = 16
CIPHERTEXT_BYTES = 2 * SHARE_BYTES + _TAG_BYTES


def _context(slot: int, sender: str, recipient: str) -> bytes:
    if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < 2**64:
        raise ValueError(f"slot must be an int in [0, 2**64), got {slot!r}")
    parts = []
    for name, node in (("sender", sender), ("recipient", recipient)):
        if not isinstance(node, str) or not node:
            raise ValueError(f"{name} must be a non-empty str, got {node!r}")
        raw = node.encode("utf-8")
        parts.append(len(raw).to_bytes(4, "big") + raw)
    if sender == recipient:
        raise ValueError(f"a leaf encrypts no shares to itself ({sender!r})")
    return slot.to_bytes(8, "big") + parts[0] + parts[1]


def _key(own_private_key: bytes, peer_public_key: bytes, context: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.x25519 import (
        X25519PrivateKey,
        X25519PublicKey,
    )
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    for name, key in (("private key", own_private_key), ("peer public key", peer_public_key)):
        if not isinstance(key, bytes | bytearray) or len(key) != KEY_BYTES:
            raise ValueError(f"{name} must be {KEY_BYTES} raw bytes")
    private = X25519PrivateKey.from_private_bytes(bytes(own_private_key))
    # ValueError for a low-order peer key (an all-zero shared secret).
    shared = private.exchange(X25519PublicKey.from_public_bytes(bytes(peer_public_key)))
    kdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=context[:8], info=_LABEL + context[8:])
    return kdf.derive(shared)


def encrypt_shares(
    sender: str,
    sender_private_key: bytes,
    recipient: str,
    recipient_public_key: bytes,
    slot: int,
    mask_key_share: bytes,
    self_mask_share: bytes,
) -> bytes:
    """The ciphertext of ``sender``'s two shares for ``recipient`` (`CIPHERTEXT_BYTES` long).

    ``sender_private_key`` and ``recipient_public_key`` are raw 32-byte X25519 *cipher* keys.
    `ValueError` for malformed keys, ids, slot or shares.
    """
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    for name, share in (("mask_key_share", mask_key_share), ("self_mask_share", self_mask_share)):
        if not isinstance(share, bytes | bytearray) or len(share) != SHARE_BYTES:
            raise ValueError(f"{name} must be {SHARE_BYTES} bytes")
    context = _context(slot, sender, recipient)
    aead = ChaCha20Poly1305(_key(sender_private_key, recipient_public_key, context))
    return aead.encrypt(_NONCE, bytes(mask_key_share) + bytes(self_mask_share), context)


def decrypt_shares(
    recipient: str,
    recipient_private_key: bytes,
    sender: str,
    sender_public_key: bytes,
    slot: int,
    ciphertext: bytes,
) -> tuple[bytes, bytes]:
    """``(mask_key_share, self_mask_share)`` from ``sender``'s ciphertext for ``recipient``.

    Raises
    ------
    ValueError
        Malformed arguments, or a ciphertext that does not authenticate: not for this
        recipient, slot or sender, or altered on the way.
    """
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    if not isinstance(ciphertext, bytes | bytearray) or len(ciphertext) != CIPHERTEXT_BYTES:
        raise ValueError(f"a share ciphertext must be {CIPHERTEXT_BYTES} bytes")
    context = _context(slot, sender, recipient)
    aead = ChaCha20Poly1305(_key(recipient_private_key, sender_public_key, context))
    try:
        plain = aead.decrypt(_NONCE, bytes(ciphertext), context)
    except InvalidTag:
        raise ValueError(
            f"the shares from {sender!r} to {recipient!r} for slot {slot} do not authenticate"
        ) from None
    return plain[:SHARE_BYTES], plain[SHARE_BYTES:]
