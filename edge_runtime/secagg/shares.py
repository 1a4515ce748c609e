"""Shamir secret sharing of 32-byte secrets (X25519 keys, self-mask seeds), ``t`` of ``n``.

Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving Machine Learning",
CCS 2017, Sec. 3 ("Secret sharing") and Fig. 4 round 1: each leaf shares its mask key
``s_u^SK`` and its self-mask seed ``b_u`` among the cohort, so that any ``t`` survivors
recover either one, and fewer than ``t`` learn nothing about it (information-theoretic).

The arithmetic is the library ``shamirs`` (A. Lapets, MIT, pure Python, with its
``lagrange`` for the interpolation): polynomials over the prime field ``Z / P`` with ``P``
the Mersenne prime ``2**521 - 1`` (the field of NIST P-521), the smallest well-known prime
above every 256-bit secret. Share ``i`` (1-based) is the polynomial's value at ``x = i``;
this module gives it a fixed layout of `SHARE_BYTES` bytes (index, 4 bytes big-endian;
value, 66 bytes big-endian) so that its length reveals nothing and the wire can check it.

Randomness: ``shamirs`` draws its coefficients from `secrets` (no injectable source), so
`split` is the one place of the protocol cores that draws its own randomness. It changes
only the share bytes (which travel encrypted), never a result: any ``t`` shares combine to
the same secret, so the cores stay replayable in everything they decide and release.

Cost: `split` is ``O(n t)`` field operations, `combine` ``O(t**2)`` (about 8 ms at
``t = 5`` on a laptop core; 10x less than ``pyshamir``'s GF(256) bytes, which were measured
at 53 ms).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MAX_SHARES", "PRIME", "SECRET_BYTES", "SHARE_BYTES", "combine", "share_index", "split"]

PRIME = 2**521 - 1
SECRET_BYTES = 32
_INDEX_BYTES = 4
_VALUE_BYTES = (PRIME.bit_length() + 7) // 8  # 66
SHARE_BYTES = _INDEX_BYTES + _VALUE_BYTES  # 70
MAX_SHARES = 2**16  # far above any site; indices fit the 4-byte field with room


def _check_counts(n_shares: int, threshold: int) -> None:
    for name, value in (("n_shares", n_shares), ("threshold", threshold)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an int, got {value!r}")
    if not 2 <= n_shares <= MAX_SHARES:
        raise ValueError(f"n_shares must be in [2, {MAX_SHARES}], got {n_shares}")
    if not 2 <= threshold <= n_shares:
        raise ValueError(f"threshold must be in [2, n_shares = {n_shares}], got {threshold}")


def split(secret: bytes, n_shares: int, threshold: int) -> list[bytes]:
    """Shamir shares of a 32-byte ``secret``: any ``threshold`` of them recover it.

    Parameters
    ----------
    secret : bytes of length 32
    n_shares : int in [2, 2**16]
    threshold : int in [2, n_shares]

    Returns
    -------
    list of ``n_shares`` bytes, each `SHARE_BYTES` long
        Share ``i`` (0-based in the list) has index ``i + 1``: give it to the ``i``-th
        member of the cohort in a fixed order, so the index says whose share it is.

    Raises
    ------
    ValueError
        ``secret`` not 32 bytes, counts out of range.
    """
    import shamirs

    if not isinstance(secret, bytes | bytearray) or len(secret) != SECRET_BYTES:
        raise ValueError(f"secret must be {SECRET_BYTES} bytes")
    _check_counts(n_shares, threshold)
    plaintext = int.from_bytes(bytes(secret), "big")
    made = shamirs.shares(plaintext, n_shares, modulus=PRIME, threshold=threshold, compact=True)
    return [
        int(piece.index).to_bytes(_INDEX_BYTES, "big")
        + int(piece.value).to_bytes(_VALUE_BYTES, "big")
        for piece in made
    ]


def share_index(share: bytes) -> int:
    """The 1-based index (the evaluation point) of a share; `ValueError` if malformed."""
    if not isinstance(share, bytes | bytearray) or len(share) != SHARE_BYTES:
        raise ValueError(f"a share must be {SHARE_BYTES} bytes")
    index = int.from_bytes(share[:_INDEX_BYTES], "big")
    value = int.from_bytes(share[_INDEX_BYTES:], "big")
    if not 1 <= index <= MAX_SHARES or value >= PRIME:
        raise ValueError("a share has an index or value out of range")
    return index


def combine(shares: Sequence[bytes], threshold: int) -> bytes:
    """The 32-byte secret from at least ``threshold`` shares of one `split`.

    Uses the first ``threshold`` shares. Fewer shares than the `split`'s threshold, or
    shares of different splits, give a wrong secret or this `ValueError`: Shamir sharing
    cannot tell (callers check the result, e.g. a recovered key against its public key).

    Raises
    ------
    ValueError
        Fewer than ``threshold`` shares, a malformed share, two shares with one index, or
        an interpolated value that is no 32-byte secret.
    """
    import shamirs

    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 2:
        raise ValueError(f"threshold must be an int >= 2, got {threshold!r}")
    if len(shares) < threshold:
        raise ValueError(f"{len(shares)} shares, fewer than the threshold {threshold}")
    chosen = list(shares[:threshold])
    indices = [share_index(piece) for piece in chosen]
    if len(set(indices)) != len(indices):
        raise ValueError("two shares have the same index")
    points = [
        shamirs.share(index, int.from_bytes(piece[_INDEX_BYTES:], "big"), PRIME)
        for index, piece in zip(indices, chosen, strict=True)
    ]
    secret = shamirs.interpolate(points, threshold=threshold)
    if secret >= 2 ** (8 * SECRET_BYTES):
        raise ValueError("the shares do not interpolate to a 32-byte secret")
    return secret.to_bytes(SECRET_BYTES, "big")
