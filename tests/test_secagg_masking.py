"""Secure aggregation masking (issue 26): encoding, pair and self masks, Skellam noise shares."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from edge_runtime.secagg import masking as ss

# The masks need the `secagg` extra (in the test extra too); encoding and noise do not.
needs_crypto = pytest.mark.skipif(
    importlib.util.find_spec("cryptography") is None, reason="cryptography (secagg extra)"
)

D = 6
SCALE = 2.0**20


def _keys(n: int, rng: np.random.Generator) -> tuple[list[str], dict[str, bytes], dict[str, bytes]]:
    ids = [f"pi-{i:02d}" for i in range(n)]
    private = {node: rng.bytes(ss.KEY_BYTES) for node in ids}
    public = {node: ss.public_key(key) for node, key in private.items()}
    return ids, private, public


def _gram(rng: np.random.Generator, block: int = 20) -> np.ndarray:
    """A block Gram of unit-ball readings, as a private leaf releases it."""
    x = rng.standard_normal((block, D))
    x /= np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))
    return x.T @ x


def _masked_cohort(
    n: int, rng: np.random.Generator, slot: int, bits: int = ss.DEFAULT_BITS
) -> tuple[list[np.ndarray], list[np.ndarray], dict[str, bytes], dict[str, bytes], list[str]]:
    ids, private, public = _keys(n, rng)
    plain = [ss.encode(_gram(rng), SCALE, bits) for _ in ids]
    masked = [
        ss.mask(
            node,
            {peer: key for peer, key in public.items() if peer != node},
            private[node],
            slot,
            vector,
            bits,
        )
        for node, vector in zip(ids, plain, strict=True)
    ]
    return plain, masked, private, public, ids


@needs_crypto
@pytest.mark.parametrize("n", [2, 5, 8])
@pytest.mark.parametrize("bits", [64, 40])
def test_the_masked_sum_unmasks_to_the_exact_modular_sum(n: int, bits: int) -> None:
    rng = np.random.default_rng(n * 100 + bits)
    plain, masked, *_ = _masked_cohort(n, rng, slot=7, bits=bits)
    exact = [sum(int(p[i]) for p in plain) % 2**bits for i in range(plain[0].size)]  # Python ints
    total = ss.unmask_sum(masked, bits)
    assert total.dtype == np.uint64
    assert [int(value) for value in total] == exact
    # and every single masked vector looks nothing like its plaintext
    for p, m in zip(plain, masked, strict=True):
        assert np.count_nonzero(p == m) <= 1


@needs_crypto
def test_the_two_masks_of_a_pair_cancel_and_depend_on_the_slot() -> None:
    rng = np.random.default_rng(1)
    (a, b), private, public = _keys(2, rng)
    size = ss.triangle_size(D)
    ab = ss.pair_mask(a, private[a], b, public[b], 3, size)
    ba = ss.pair_mask(b, private[b], a, public[a], 3, size)
    assert np.all(ab + ba == 0)
    assert np.count_nonzero(ab) == size
    other_slot = ss.pair_mask(a, private[a], b, public[b], 4, size)
    assert not np.any(other_slot == ab)
    narrow = ss.pair_mask(a, private[a], b, public[b], 3, size, bits=16)
    narrow_back = ss.pair_mask(b, private[b], a, public[a], 3, size, bits=16)
    assert np.all((narrow + narrow_back) % 2**16 == 0)
    assert np.all(narrow < 2**16)


@needs_crypto
def test_a_leaf_left_unmasked_is_detected() -> None:
    n = 5
    rng = np.random.default_rng(2)
    plain, masked, private, public, ids = _masked_cohort(n, rng, slot=11)
    true_sum = ss.unmask_sum(plain)
    bound = ss.sum_bound(n, max_abs_entry=20.0, scale=SCALE)
    assert ss.bits_needed(bound) < ss.DEFAULT_BITS
    assert ss.within_bound(ss.unmask_sum(masked), bound)

    broken = list(masked)
    broken[3] = plain[3]  # leaf 3 forgot its masks
    aggregate = ss.unmask_sum(broken)
    residue = aggregate - true_sum
    assert np.count_nonzero(residue) == residue.size
    # the residue is exactly minus leaf 3's masks, which the others' no longer cancel
    leaf = ids[3]
    own_masks = sum(
        ss.pair_mask(leaf, private[leaf], peer, public[peer], 11, residue.size)
        for peer in ids
        if peer != leaf
    )
    assert np.all(residue + own_masks == 0)
    assert not ss.within_bound(aggregate, bound)

    dropped = ss.unmask_sum(masked[:3] + masked[4:])  # leaf 3 dropped after the others masked
    assert not ss.within_bound(dropped, bound)


@pytest.mark.parametrize("bits", [64, 48])
def test_encoding_round_trip_within_the_resolution(bits: int) -> None:
    rng = np.random.default_rng(3)
    grams = [_gram(rng) - 5.0 for _ in range(4)]  # negative entries too
    for gram in grams:
        decoded = ss.decode(ss.encode(gram, SCALE, bits), D, SCALE, bits)
        np.testing.assert_array_equal(decoded, decoded.T)
        assert np.max(np.abs(decoded - gram)) <= 0.5 / SCALE
    total = ss.unmask_sum([ss.encode(g, SCALE, bits) for g in grams], bits)
    assert np.max(np.abs(ss.decode(total, D, SCALE, bits) - sum(grams))) <= 4 * 0.5 / SCALE


def test_encoding_refuses_what_does_not_fit() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        ss.encode(np.full((2, 2), 2.0**20), SCALE, bits=40)
    with pytest.raises(ValueError, match="non-finite"):
        ss.encode(np.array([[np.nan]]), SCALE)
    with pytest.raises(ValueError, match="square"):
        ss.encode(np.zeros((2, 3)), SCALE)
    assert ss.bits_needed(2**39 - 1) == 40 and ss.bits_needed(2**39) == 41


@needs_crypto
def test_mask_and_unmask_reject_misuse() -> None:
    rng = np.random.default_rng(4)
    ids, private, public = _keys(3, rng)
    vector = ss.encode(np.eye(D), SCALE)
    with pytest.raises(ValueError, match="itself"):
        ss.mask(ids[0], public, private[ids[0]], 1, vector)
    with pytest.raises(ValueError, match="slot"):
        ss.mask(ids[0], {ids[1]: public[ids[1]]}, private[ids[0]], -1, vector)
    with pytest.raises(ValueError, match="shared key"):
        ss.mask(ids[0], {ids[1]: bytes(32)}, private[ids[0]], 1, vector)
    with pytest.raises(ValueError, match="shape"):
        ss.unmask_sum([vector, vector[:-1]])
    with pytest.raises(ValueError, match="no masked"):
        ss.unmask_sum([])


@pytest.mark.parametrize("n_shares", [2, 5, 8])
def test_noise_shares_sum_to_the_target_variance(n_shares: int) -> None:
    rng = np.random.default_rng(5 + n_shares)
    sigma, samples = 3.0e-3, 100_000
    target = ss.gram_noise_variance(2, sigma, SCALE)  # diagonal, off-diagonal, diagonal
    assert target[0] == pytest.approx((sigma * SCALE) ** 2)
    assert target[1] == pytest.approx(target[0] / 2)
    mu = ss.skellam_share_mu(target, n_shares)
    shares = [
        ss.skellam_noise_share(np.broadcast_to(mu, (samples, 3)), rng) for _ in range(n_shares)
    ]
    assert shares[0].dtype == np.int64
    assert isinstance(ss.skellam_noise_share(2.5, rng), np.int64)
    total = np.sum(shares, axis=0)
    # sample variance's relative std is about sqrt(2 / N) (Skellam's excess kurtosis 1 / (2 n mu)
    # is negligible here); 6 of those is the bound
    ratio = total.var(axis=0) / target
    assert np.all(np.abs(ratio - 1.0) < 6 * np.sqrt(2.0 / samples)), ratio
    assert np.all(np.abs(total.mean(axis=0)) < 6 * np.sqrt(target / samples))


@needs_crypto
def test_noisy_masked_sum_decodes_near_the_noisy_gram_sum() -> None:
    n, bits = 5, ss.DEFAULT_BITS
    rng = np.random.default_rng(6)
    ids, private, public = _keys(n, rng)
    grams = [_gram(rng) for _ in ids]
    mu = ss.skellam_share_mu(ss.gram_noise_variance(D, 1e-2, SCALE), n)
    masked = []
    for node, gram in zip(ids, grams, strict=True):
        noisy = ss.add_noise(ss.encode(gram, SCALE), ss.skellam_noise_share(mu, rng))
        peers = {peer: key for peer, key in public.items() if peer != node}
        masked.append(ss.mask(node, peers, private[node], 0, noisy))
    total = ss.unmask_sum(masked)
    bound = ss.sum_bound(n, 20.0, SCALE, noise_std=1e-2 * SCALE)
    assert ss.within_bound(total, bound, bits)
    error = ss.decode(total, D, SCALE) - sum(grams)
    assert 0 < np.max(np.abs(error)) < 6 * 1e-2  # the noise is there, at its scale


def test_importing_fpca_does_not_import_cryptography_or_secagg() -> None:
    code = (
        "import sys, edge_runtime.fpca; "
        "assert 'cryptography' not in sys.modules, 'cryptography imported'; "
        "assert 'edge_runtime.secagg' not in sys.modules, 'secagg imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@needs_crypto
def test_self_masks_are_keyed_by_the_seed_and_refuse_a_malformed_one() -> None:
    rng = np.random.default_rng(7)
    seed, other = rng.bytes(32), rng.bytes(32)
    size = ss.triangle_size(D)
    first = ss.self_mask(seed, size)
    assert first.dtype == np.uint64 and first.shape == (size,)
    assert np.array_equal(first, ss.self_mask(seed, size))
    assert not np.any(first == ss.self_mask(other, size))
    assert np.all(ss.self_mask(seed, size, bits=20) == first & np.uint64(2**20 - 1))
    assert np.all(ss.unmask_sum([first, ss.negate(first)]) == 0)
    narrow = ss.self_mask(seed, size, bits=20)
    assert np.all(ss.unmask_sum([narrow, ss.negate(narrow, 20)], 20) == 0)
    with pytest.raises(ValueError, match="seed"):
        ss.self_mask(seed[:16], size)
    with pytest.raises(ValueError, match="size"):
        ss.self_mask(seed, 0)
