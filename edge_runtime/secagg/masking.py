"""Masking for secure summation of leaves' noisy Gram releases: encoding, masks, noise shares.

The groundwork of private mode at central accuracy: each leaf of a site releases
its block Gram matrix plus only *its share* of the noise, masked so that the aggregator
learns nothing but the site's noisy sum. Synchronous and pure: no I/O, no clock, no
randomness of its own (keys and a seeded ``numpy.random.Generator`` come in as arguments).

Protocol pieces, after Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving
Machine Learning", CCS 2017 (the pairwise masks of its Sec. 4; SecAgg+, Bell et al. CCS 2020,
masks with a sparse neighbour graph instead of all pairs):

1. `encode`: the upper triangle (diagonal included, ``m = d (d + 1) / 2`` entries, row by
   row as ``numpy.triu_indices``) of a float symmetric ``d x d`` matrix, times ``scale``,
   rounded to integers, in ``Z / 2**bits`` (two's complement). `decode` is the inverse
   through the centred lift ``[-2**(bits-1), 2**(bits-1))``.
2. `add_noise` with `skellam_noise_share`: each leaf adds integer Skellam noise whose sum
   over the leaves has the target variance (below).
3. `mask`: for every other leaf ``v`` of the cohort, leaf ``u`` adds ``+PRG(k_uv)`` if
   ``u < v`` (ids compared as str) and ``-PRG(k_uv)`` otherwise, mod ``2**bits``;
   ``k_uv = HKDF-SHA256(X25519(sk_u, pk_v), salt = slot, info = label || ids)`` and PRG is
   the ChaCha20 keystream read as little-endian uint64 words reduced mod ``2**bits``
   (``2**bits`` divides ``2**64``, so the words stay uniform). Both leaves of a pair derive
   the same key, so the pair's two masks cancel in the sum.
4. `unmask_sum`: the modular sum of all the cohort's masked vectors, which is the exact
   modular sum of the noisy encodings. `within_bound` tells a plausible sum from one whose
   masks did not cancel (a leaf that did not mask, a missing release): such a residue is
   uniform mod ``2**bits`` and leaves the bound with overwhelming probability.

5. `self_mask`: the PRG of a leaf's per-slot self-mask seed ``b_u`` (Bonawitz et al. Sec. 4,
   "double masking"), the ChaCha20 keystream of the seed, so that a leaf whose pair masks
   are removed after it was wrongly declared dropped stays hidden.

A slot (a release's sequence number) must never be reused with the same keys: two
releases masked with the same masks give away their difference. A leaf that drops out after
the others masked leaves its pair masks in the sum; `edge_runtime.secagg.aggregator_round`
removes them after recovering its key from threshold shares (Bonawitz et al. Sec. 4).

Why ``bits = 64`` by default: numpy's uint64 arithmetic is already arithmetic mod ``2**64``
(no reduction step), and the headroom is ample, so the sum never wraps: e.g. blocks of
``2**16`` unit-ball readings (every Gram entry at most ``2**16`` in absolute value), a scale
of ``2**24`` (resolution ``6e-8``) and ``2**10`` leaves sum to at most ``2**50``, plus the
noise, far inside ``2**63``; `sum_bound` and `bits_needed` give the exact requirement.
A wire entry is then 8 bytes, what the float64 Gram costs already (Kairouz et al. pick far
fewer bits because their vectors have millions of entries; ours have ``d (d + 1) / 2``).

Why Skellam noise (Agarwal, Kairouz & Liu, "The Skellam Mechanism for Differentially
Private Federated Learning", NeurIPS 2021) rather than the distributed discrete Gaussian
(Kairouz, Liu & Steinke, ICML 2021): a sum of independent Skellams is again Skellam
(``Sk(mu_1) + Sk(mu_2) = Sk(mu_1 + mu_2)``), so the noise in the site's sum has exactly
the distribution the accounting assumes, whereas a sum of discrete Gaussians is only close
to one; and a Skellam ``Sk(mu) = Poisson(mu) - Poisson(mu)`` (variance ``2 mu``) is two
calls to numpy's Poisson sampler, where an exact discrete Gaussian needs a rejection sampler
in exact arithmetic per entry (Canonne, Kamath & Steinke 2020). The leaves' shares are
integers added after rounding, so the released values are integers (no floating-point
noise to attack, Mironov 2012). The privacy accounting is `edge_runtime.secagg.accounting`
(the smaller of Agarwal et al.'s Renyi DP bound, Thm. 3.5, and the Gaussian-DP bound of
`edge_runtime.secagg.gdp`).

``cryptography`` (the ``secagg`` extra) is imported inside the functions that need it, so
that encoding and noise work without it. Moved here from ``edge_runtime.fpca.secure_sum``:
``edge_runtime.fpca`` stays numpy and scipy only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

__all__ = [
    "DEFAULT_BITS",
    "KEY_BYTES",
    "TAIL_SIGMAS",
    "add_noise",
    "bits_needed",
    "check_bits",
    "check_vector",
    "decode",
    "encode",
    "gram_noise_variance",
    "mask",
    "negate",
    "pair_mask",
    "public_key",
    "self_mask",
    "skellam_noise_share",
    "skellam_share_mu",
    "sum_bound",
    "triangle_size",
    "unmask_sum",
    "within_bound",
]

DEFAULT_BITS = 64
KEY_BYTES = 32  # X25519 keys, raw
TAIL_SIGMAS = 20.0  # noise margin of `sum_bound`, in standard deviations of the summed noise
_MAX_SLOT = 2**64 - 1
_LABEL = b"edge_runtime/secure_sum/v1"
_NONCE = bytes(16)  # ChaCha20's counter || nonce: fixed, since every key is fresh per slot


def check_bits(bits: int) -> int:
    """``bits`` as an int; `ValueError` unless it is an int in ``[2, 64]``."""
    if isinstance(bits, bool) or not isinstance(bits, int | np.integer) or not 2 <= bits <= 64:
        raise ValueError(f"bits must be an int in [2, 64], got {bits!r}")
    return int(bits)


def _low_mask(bits: int) -> np.uint64:
    return np.uint64((1 << bits) - 1)


def triangle_size(n_features: int) -> int:
    """``m = d (d + 1) / 2``: entries of an encoded ``d x d`` symmetric matrix."""
    if isinstance(n_features, bool) or not isinstance(n_features, int | np.integer):
        raise ValueError(f"n_features must be a positive int, got {n_features!r}")
    if n_features < 1:
        raise ValueError(f"n_features must be a positive int, got {n_features!r}")
    return int(n_features) * (int(n_features) + 1) // 2


def check_vector(vector: np.ndarray, bits: int, name: str = "vector") -> np.ndarray:
    """``vector`` as an array; `ValueError` unless 1-D uint64 with entries below ``2**bits``."""
    array = np.asarray(vector)
    if array.dtype != np.uint64 or array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D uint64 array, got {array.dtype} {array.shape}")
    if bits < 64 and np.any(array > _low_mask(bits)):
        raise ValueError(f"{name} has entries outside [0, 2**{bits})")
    return array


def encode(matrix: np.ndarray, scale: float, bits: int = DEFAULT_BITS) -> np.ndarray:
    """Upper triangle of ``matrix`` times ``scale``, rounded, as residues mod ``2**bits``.

    Parameters
    ----------
    matrix : ndarray of shape (d, d)
        Float, symmetric; only the upper triangle (diagonal included) is read.
    scale : float
        Integer units per unit of ``matrix``: the resolution is ``1 / scale`` (rounding to
        nearest, error at most ``1 / (2 scale)`` per entry and leaf).
    bits : int, default=64
        The modulus ``2**bits``.

    Returns
    -------
    ndarray of shape (d (d + 1) / 2,), uint64
        Residues in ``[0, 2**bits)``, negative values in two's complement.

    Raises
    ------
    ValueError
        Not square, non-finite entries, ``scale`` not positive, or an entry whose scaled
        value does not fit in ``[-2**(bits-1), 2**(bits-1))``.
    """
    bits = check_bits(bits)
    if not (isinstance(scale, int | float | np.number) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    array = np.asarray(matrix, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] != array.shape[1] or array.shape[0] == 0:
        raise ValueError(f"matrix must be square (d, d), got shape {array.shape}")
    upper = array[np.triu_indices(array.shape[0])]
    if not np.all(np.isfinite(upper)):
        raise ValueError("matrix has non-finite entries")
    rounded = np.rint(upper * float(scale))
    limit = float(2 ** (bits - 1))
    if np.any(rounded >= limit) or np.any(rounded < -limit):
        raise ValueError(f"an entry times scale does not fit in {bits} bits (two's complement)")
    return rounded.astype(np.int64).astype(np.uint64) & _low_mask(bits)


def _centred(vector: np.ndarray, bits: int) -> np.ndarray:
    """Residues mod ``2**bits`` as int64 in ``[-2**(bits-1), 2**(bits-1))`` (sign extension)."""
    shift = np.uint64(64 - bits)
    return (vector << shift).view(np.int64) >> np.int64(64 - bits)


def decode(
    vector: np.ndarray, n_features: int, scale: float, bits: int = DEFAULT_BITS
) -> np.ndarray:
    """The symmetric float matrix of an encoded (or summed) vector: the inverse of `encode`.

    Parameters
    ----------
    vector : ndarray of shape (d (d + 1) / 2,), uint64
        Residues mod ``2**bits``, read through the centred lift (correct as long as the true
        integer values lie in ``[-2**(bits-1), 2**(bits-1))``: see `sum_bound`).
    n_features : int
        ``d``.
    scale : float
        The scale of `encode`.
    bits : int, default=64

    Returns
    -------
    ndarray of shape (d, d), float64, symmetric
        Integer values above ``2**53`` lose float64 precision (far beyond any useful scale).
    """
    bits = check_bits(bits)
    size = triangle_size(n_features)
    array = check_vector(vector, bits)
    if array.shape != (size,):
        raise ValueError(f"vector must have {size} entries for d = {n_features}, got {array.shape}")
    values = _centred(array, bits).astype(np.float64) / float(scale)
    out = np.zeros((n_features, n_features))
    out[np.triu_indices(n_features)] = values
    return out + np.triu(out, 1).T


def public_key(private_key: bytes) -> bytes:
    """The raw 32-byte X25519 public key of a raw 32-byte private key.

    The private key comes from the caller (a shell draws it with ``os.urandom(32)`` or
    ``X25519PrivateKey.generate()``; X25519 clamps any 32 bytes into a valid scalar).
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    key = X25519PrivateKey.from_private_bytes(_check_key(private_key, "private_key"))
    return key.public_key().public_bytes(
        encoding=serialization.Encoding.Raw, format=serialization.PublicFormat.Raw
    )


def _check_key(key: bytes, name: str) -> bytes:
    if not isinstance(key, bytes | bytearray) or len(key) != KEY_BYTES:
        raise ValueError(f"{name} must be {KEY_BYTES} raw bytes")
    return bytes(key)


def _check_id(node_id: str, name: str) -> bytes:
    if not isinstance(node_id, str) or not node_id:
        raise ValueError(f"{name} must be a non-empty str, got {node_id!r}")
    return node_id.encode("utf-8")


def _check_slot(slot: int) -> bytes:
    if isinstance(slot, bool) or not isinstance(slot, int | np.integer):
        raise ValueError(f"slot must be an int in [0, 2**64), got {slot!r}")
    if not 0 <= int(slot) <= _MAX_SLOT:
        raise ValueError(f"slot must be in [0, 2**64), got {slot!r}")
    return int(slot).to_bytes(8, "big")


def _pair_key(
    own_id: str, own_private_key: bytes, peer_id: str, peer_public_key: bytes, slot: int
) -> bytes:
    """ChaCha20 key of the pair ``{own_id, peer_id}`` for ``slot`` (the same on both sides)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.x25519 import (
        X25519PrivateKey,
        X25519PublicKey,
    )
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    own = _check_id(own_id, "own id")
    peer = _check_id(peer_id, "peer id")
    if own_id == peer_id:
        raise ValueError(f"a leaf has no pair mask with itself ({own_id!r})")
    private = X25519PrivateKey.from_private_bytes(_check_key(own_private_key, "private key"))
    public = X25519PublicKey.from_public_bytes(_check_key(peer_public_key, "peer public key"))
    # ValueError for a low-order peer key (an all-zero shared secret).
    shared = private.exchange(public)
    low, high = (own, peer) if own_id < peer_id else (peer, own)
    info = _LABEL + len(low).to_bytes(4, "big") + low + len(high).to_bytes(4, "big") + high
    kdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=_check_slot(slot), info=info)
    return kdf.derive(shared)


def _keystream_words(key: bytes, count: int) -> np.ndarray:
    """``count`` little-endian uint64 words of the ChaCha20 keystream of ``key``."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    encryptor = Cipher(algorithms.ChaCha20(key, _NONCE), mode=None).encryptor()
    stream = encryptor.update(bytes(8 * count)) + encryptor.finalize()
    return np.frombuffer(stream, dtype="<u8").astype(np.uint64)


def pair_mask(
    own_id: str,
    own_private_key: bytes,
    peer_id: str,
    peer_public_key: bytes,
    slot: int,
    size: int,
    bits: int = DEFAULT_BITS,
) -> np.ndarray:
    """The mask leaf ``own_id`` adds for its pair with ``peer_id``: ``+PRG`` or ``-PRG``.

    ``+`` when ``own_id < peer_id`` (str order), ``-`` otherwise, so that
    ``pair_mask(u, sk_u, v, pk_v, ...) + pair_mask(v, sk_v, u, pk_u, ...) == 0`` mod
    ``2**bits``. Whoever holds ``sk_u`` (the aggregator after recovering a dropped leaf's key
    from threshold shares) can recompute it.

    Returns
    -------
    ndarray of shape (size,), uint64, residues mod ``2**bits``
    """
    bits = check_bits(bits)
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
        raise ValueError(f"size must be a positive int, got {size!r}")
    key = _pair_key(own_id, own_private_key, peer_id, peer_public_key, slot)
    words = _keystream_words(key, int(size)) & _low_mask(bits)
    if own_id < peer_id:
        return words
    return (np.uint64(0) - words) & _low_mask(bits)


def self_mask(seed: bytes, size: int, bits: int = DEFAULT_BITS) -> np.ndarray:
    """The self-mask ``PRG(b_u)`` a leaf adds to its release (Bonawitz et al. 2017, Sec. 4).

    The ChaCha20 keystream of the 32-byte ``seed`` read as little-endian uint64 words mod
    ``2**bits``, like the pair masks. The seed must be fresh per slot (the leaf draws it; the
    aggregator learns it from threshold shares only when the leaf's release arrived).

    Returns
    -------
    ndarray of shape (size,), uint64, residues mod ``2**bits``

    Raises
    ------
    ValueError
        ``seed`` not 32 bytes, ``size`` not a positive int, ``bits`` outside ``[2, 64]``.
    """
    bits = check_bits(bits)
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
        raise ValueError(f"size must be a positive int, got {size!r}")
    return _keystream_words(_check_key(seed, "seed"), int(size)) & _low_mask(bits)


def mask(
    leaf_id: str,
    peers_public_keys: Mapping[str, bytes],
    own_private_key: bytes,
    slot: int,
    vector: np.ndarray,
    bits: int = DEFAULT_BITS,
) -> np.ndarray:
    """``vector`` plus this leaf's pair masks with every peer of the cohort, mod ``2**bits``.

    Parameters
    ----------
    leaf_id : str
        This leaf's id (ids are ordered as str).
    peers_public_keys : mapping of str to bytes
        Raw X25519 public keys of every *other* leaf whose release enters the same sum.
    own_private_key : bytes
        This leaf's raw X25519 private key.
    slot : int
        The release's number in ``[0, 2**64)``, the HKDF salt: never reuse one.
    vector : ndarray of shape (m,), uint64
        The leaf's (noisy) encoded release, residues mod ``2**bits``.
    bits : int, default=64

    Returns
    -------
    ndarray of shape (m,), uint64
    """
    bits = check_bits(bits)
    array = check_vector(vector, bits)
    _check_id(leaf_id, "leaf_id")
    if leaf_id in peers_public_keys:
        raise ValueError(f"peers_public_keys must not contain the leaf itself ({leaf_id!r})")
    out = array.copy()
    for peer_id, peer_key in peers_public_keys.items():
        out += pair_mask(leaf_id, own_private_key, peer_id, peer_key, slot, array.size, bits)
    return out & _low_mask(bits)


def negate(vector: np.ndarray, bits: int = DEFAULT_BITS) -> np.ndarray:
    """``-vector`` mod ``2**bits``: the additive inverse, to subtract in `unmask_sum`.

    Returns
    -------
    ndarray of the shape of ``vector``, uint64
    """
    bits = check_bits(bits)
    array = check_vector(vector, bits)
    return (np.uint64(0) - array) & _low_mask(bits)


def unmask_sum(masked_vectors: Iterable[np.ndarray], bits: int = DEFAULT_BITS) -> np.ndarray:
    """The modular sum of the cohort's masked vectors: the pair masks cancel in it.

    With every leaf's masked release, this is exactly the sum of the (noisy) encodings mod
    ``2**bits``; with one missing or unmasked, it is off by a pseudorandom residue (see
    `within_bound`).

    Returns
    -------
    ndarray of shape (m,), uint64
    """
    bits = check_bits(bits)
    total: np.ndarray | None = None
    for index, vector in enumerate(masked_vectors):
        array = check_vector(vector, bits, f"masked vector {index}")
        if total is None:
            total = array.copy()
        elif array.shape != total.shape:
            raise ValueError(f"masked vector {index} has shape {array.shape}, not {total.shape}")
        else:
            total += array
    if total is None:
        raise ValueError("no masked vectors to sum")
    return total & _low_mask(bits)


def sum_bound(
    n_leaves: int,
    max_abs_entry: float,
    scale: float,
    noise_std: float = 0.0,
    tail_sigmas: float = TAIL_SIGMAS,
) -> int:
    """Largest absolute integer entry of a sum of ``n_leaves`` noisy encodings, bar tail events.

    ``n (max_abs_entry * scale + 1/2) + tail_sigmas * noise_std`` rounded up: the data
    (each leaf's entries at most ``max_abs_entry`` in matrix units, plus rounding) and the
    summed noise (std ``noise_std`` in integer units) up to ``tail_sigmas`` standard
    deviations (at the default 20, ``scipy.stats.skellam.sf`` underflows to 0 for total
    variances from 1 to 1e8). For a block Gram of ``B`` unit-ball readings,
    ``max_abs_entry = B``.
    """
    if isinstance(n_leaves, bool) or not isinstance(n_leaves, int | np.integer) or n_leaves < 1:
        raise ValueError(f"n_leaves must be a positive int, got {n_leaves!r}")
    for name, value in (
        ("max_abs_entry", max_abs_entry),
        ("scale", scale),
        ("noise_std", noise_std),
        ("tail_sigmas", tail_sigmas),
    ):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be finite and non-negative, got {value!r}")
    return math.ceil(n_leaves * (max_abs_entry * scale + 0.5) + tail_sigmas * noise_std)


def bits_needed(bound: int) -> int:
    """The fewest ``bits`` whose centred range ``[-2**(bits-1), 2**(bits-1))`` holds ``±bound``."""
    if isinstance(bound, bool) or not isinstance(bound, int | np.integer) or bound < 0:
        raise ValueError(f"bound must be a non-negative int, got {bound!r}")
    return max(2, int(bound).bit_length() + 1)


def within_bound(vector: np.ndarray, bound: int, bits: int = DEFAULT_BITS) -> bool:
    """Whether every entry's centred lift lies in ``[-bound, bound]``.

    A sum whose masks did not cancel carries a residue uniform mod ``2**bits``: each entry
    then passes with probability about ``2 bound / 2**bits`` and all ``m`` of them with its
    ``m``-th power (``2**-13`` per entry at ``bound = 2**50``, ``bits = 64``).
    """
    bits = check_bits(bits)
    array = check_vector(vector, bits)
    if isinstance(bound, bool) or not isinstance(bound, int | np.integer) or bound < 0:
        raise ValueError(f"bound must be a non-negative int, got {bound!r}")
    if bound >= 2 ** (bits - 1):
        raise ValueError(f"bound {bound} does not fit in {bits} bits")
    centred = _centred(array, bits)  # no abs: -2**63 has none in int64
    return bool(np.all((centred >= -int(bound)) & (centred <= int(bound))))


def gram_noise_variance(n_features: int, sigma: float, scale: float) -> np.ndarray:
    """Per-entry target variance, in integer units, of the encoded site sum's noise.

    The pattern of `edge_runtime.fpca.gaussian_mechanism.symmetric_noise` (``(W + W^T) / 2``,
    ``W`` i.i.d. std ``sigma``): ``sigma**2`` on the diagonal, ``sigma**2 / 2`` off it, times
    ``scale**2``; in `encode`'s order.

    Returns
    -------
    ndarray of shape (d (d + 1) / 2,), float64
    """
    size = triangle_size(n_features)
    if not (math.isfinite(sigma) and sigma >= 0 and math.isfinite(scale) and scale > 0):
        raise ValueError(f"sigma must be >= 0 and scale > 0, got {sigma!r}, {scale!r}")
    rows, cols = np.triu_indices(n_features)
    variance = np.full(size, 0.5 * (sigma * scale) ** 2)
    variance[rows == cols] = (sigma * scale) ** 2
    return variance


def skellam_share_mu(target_variance: float | np.ndarray, n_shares: int) -> np.ndarray:
    """Each leaf's Skellam parameter ``mu`` so that ``n_shares`` shares sum to the target variance.

    ``Sk(mu)`` has variance ``2 mu`` and ``n`` independent ``Sk(mu)`` sum to ``Sk(n mu)``,
    so ``mu = target_variance / (2 n_shares)``. Take ``n_shares`` as the fewest releases a
    sum may contain (the dropout threshold, Kairouz et al. 2021 Sec. 4): a sum of more has
    more noise than the target, never less.
    """
    if isinstance(n_shares, bool) or not isinstance(n_shares, int | np.integer) or n_shares < 1:
        raise ValueError(f"n_shares must be a positive int, got {n_shares!r}")
    variance = np.asarray(target_variance, dtype=np.float64)
    if not np.all(np.isfinite(variance)) or np.any(variance < 0):
        raise ValueError("target_variance must be finite and non-negative")
    return variance / (2.0 * int(n_shares))


def skellam_noise_share(mu: float | np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One leaf's integer noise share: ``Poisson(mu) - Poisson(mu)``, entrywise.

    Parameters
    ----------
    mu : float or ndarray of shape (m,)
        From `skellam_share_mu` (a scalar gives a single draw).
    rng : numpy.random.Generator
        The caller's seeded source.

    Returns
    -------
    ndarray of int64, the shape of ``mu`` (a numpy int64 for a scalar ``mu``)
    """
    lam = np.asarray(mu, dtype=np.float64)
    if not np.all(np.isfinite(lam)) or np.any(lam < 0):
        raise ValueError("mu must be finite and non-negative")
    first = np.asarray(rng.poisson(lam), dtype=np.int64)
    return first - np.asarray(rng.poisson(lam), dtype=np.int64)


def add_noise(vector: np.ndarray, noise: np.ndarray, bits: int = DEFAULT_BITS) -> np.ndarray:
    """``vector + noise`` mod ``2**bits`` (``noise`` integer, e.g. `skellam_noise_share`)."""
    bits = check_bits(bits)
    array = check_vector(vector, bits)
    shares = np.asarray(noise)
    if shares.shape != array.shape or not np.issubdtype(shares.dtype, np.integer):
        raise ValueError(f"noise must be integers of shape {array.shape}, got {shares.dtype}")
    return (array + shares.astype(np.int64).astype(np.uint64)) & _low_mask(bits)
