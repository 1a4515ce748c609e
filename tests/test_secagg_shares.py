"""Shamir shares of 32-byte secrets and their encryption from leaf to leaf (issue 26)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("cryptography")
pytest.importorskip("shamirs")

from edge_runtime.secagg import masking, shares
from edge_runtime.secagg.share_cipher import (
    CIPHERTEXT_BYTES,
    decrypt_shares,
    encrypt_shares,
)


@pytest.mark.parametrize(("n", "t"), [(2, 2), (5, 3), (7, 7)])
def test_any_threshold_shares_recover_the_secret(n: int, t: int) -> None:
    secret = np.random.default_rng(n * 10 + t).bytes(32)
    pieces = shares.split(secret, n, t)
    assert len(pieces) == n and all(len(p) == shares.SHARE_BYTES for p in pieces)
    assert [shares.share_index(p) for p in pieces] == list(range(1, n + 1))
    for subset in itertools.islice(itertools.combinations(pieces, t), 20):
        assert shares.combine(list(subset), t) == secret
    assert shares.combine(pieces[::-1], t) == secret  # order does not matter


def test_fewer_shares_than_the_threshold_do_not_give_the_secret() -> None:
    secret = bytes(range(32))
    pieces = shares.split(secret, 5, 3)
    with pytest.raises(ValueError, match="fewer than the threshold"):
        shares.combine(pieces[:2], 3)
    # interpolating 2 shares of a degree-2 polynomial as if t were 2 gives something else
    try:
        wrong = shares.combine(pieces[:2], 2)
    except ValueError:
        wrong = None
    assert wrong != secret


def test_split_and_combine_refuse_misuse() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        shares.split(b"short", 3, 2)
    with pytest.raises(ValueError, match="threshold"):
        shares.split(bytes(32), 3, 4)
    with pytest.raises(ValueError, match="threshold"):
        shares.split(bytes(32), 3, 1)
    pieces = shares.split(bytes(32), 3, 2)
    with pytest.raises(ValueError, match="same index"):
        shares.combine([pieces[0], pieces[0]], 2)
    with pytest.raises(ValueError, match="bytes"):
        shares.combine([pieces[0][:-1], pieces[1]], 2)


def _keypair(rng: np.random.Generator) -> tuple[bytes, bytes]:
    private = rng.bytes(32)
    return private, masking.public_key(private)


def test_shares_decrypt_only_for_their_recipient_slot_and_sender() -> None:
    rng = np.random.default_rng(11)
    (u_sk, u_pk), (v_sk, v_pk), (w_sk, w_pk) = (_keypair(rng) for _ in range(3))
    mask_share, seed_share = shares.split(rng.bytes(32), 3, 2)[:2]
    ciphertext = encrypt_shares("u", u_sk, "v", v_pk, 5, mask_share, seed_share)
    assert len(ciphertext) == CIPHERTEXT_BYTES
    assert mask_share not in ciphertext and seed_share not in ciphertext
    assert decrypt_shares("v", v_sk, "u", u_pk, 5, ciphertext) == (mask_share, seed_share)
    attempts = [
        ("w", w_sk, "u", u_pk, 5),  # another leaf, with its own key
        ("w", v_sk, "u", u_pk, 5),  # the recipient's key under another name
        ("v", v_sk, "u", u_pk, 6),  # another slot
        ("v", v_sk, "w", w_pk, 5),  # claimed to come from another sender
        ("u", u_sk, "v", v_pk, 5),  # the reverse direction
    ]
    for recipient, key, sender, sender_pk, slot in attempts:
        with pytest.raises(ValueError, match="do not authenticate"):
            decrypt_shares(recipient, key, sender, sender_pk, slot, ciphertext)
    tampered = bytes([ciphertext[0] ^ 1]) + ciphertext[1:]
    with pytest.raises(ValueError, match="do not authenticate"):
        decrypt_shares("v", v_sk, "u", u_pk, 5, tampered)
    with pytest.raises(ValueError, match="itself"):
        encrypt_shares("u", u_sk, "u", u_pk, 5, mask_share, seed_share)
