"""Offline simulation of the secure sum per site on Motes light (issue 26, accuracy).

The tree of `benchmarks.privacy.motes_tree` (8 leaves of contiguous rows, clipped at 8230
lux), with the leaves grouped in 2 sites of 4 (contiguous quarters of each half, as the
aggregators of `motes_tree.tree_root` group them). Per site and release slot, every leaf

1. computes its increment: its Gram matrix of unit-ball rows (one release), or for the
   continual release the slot's entry of ``R (G_1, ..., G_H)`` (`edge_runtime.fpca.continual`:
   ``sum_{j <= k} c_{k-j} G_j`` over its blocks of the segment),
2. weights the off-diagonal entries by ``sqrt(2)``
   (`edge_runtime.secagg.accounting.weight_off_diagonal`), encodes the upper triangle times
   ``scale``, rounded to nearest, as int64,
3. adds its Skellam share ``Poisson(share_mu) - Poisson(share_mu)`` per entry
   (`accounting.gram_calibration`: the site's noise of ONE release, calibrated for (epsilon,
   delta) at the dropout threshold ``t``).

The masks are left out: they cancel exactly in the modular sum (`tests/test_secagg_masking.py`),
and in 64 bits nothing wraps (`bits_for`). The site sums the vectors, decodes, unweights,
and for the continual release outputs ``S_T = sum_k c_{T-k} Y_k`` (segments of ``H`` slots,
a closed segment's output kept as a constant). Its subspace is the eigendecomposition of the
noisy site Gram matrix, every direction (``C sqrt(max(lambda, 0))``, as `PrivateGram.top`
and `benchmarks.privacy.leaves.eigen_subspace` make them); the root merges the two sites at
rank ``r`` (`edge_runtime.fpca.merge_many`), scored by `edge_runtime.fpca.error_ratio` on
all (unclipped) rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from benchmarks.privacy.leaves import eigen_subspace, top_eigenpairs
from benchmarks.privacy.motes_tree import MotesData
from benchmarks.privacy.stats import rng_for
from edge_runtime.fpca import Subspace, error_ratio, merge_many
from edge_runtime.fpca.continual import sqrt_factorisation_coefficients
from edge_runtime.fpca.gaussian_mechanism import symmetric_noise
from edge_runtime.fpca.private_gram import release_noise_std
from edge_runtime.secagg.accounting import (
    SkellamCalibration,
    gram_calibration,
    gram_sensitivity,
    rdp_to_epsilon,
    skellam_rdp,
    unweight_off_diagonal,
    weight_off_diagonal,
)

__all__ = [
    "GAUSSIAN_SITE",
    "MERGE",
    "RDP_ONLY",
    "SKELLAM",
    "SUM",
    "TIGHT",
    "SiteMethod",
    "bits_for",
    "calibration_for",
    "root_error",
    "site_grams",
    "sites_of",
]

#: `SiteMethod.noise`: distributed Skellam shares on the encoded increments.
SKELLAM = "skellam"
#: `SiteMethod.noise`: one continuous Gaussian on the site's sum at the analytic sigma (what a
#: trusted site curator would add: the limit of a perfect secure sum, no RDP or rounding cost).
GAUSSIAN_SITE = "gaussian-site"

#: `SiteMethod.accounting`: the runtime's (the smaller of the RDP and the Gaussian-DP bounds,
#: `edge_runtime.secagg.accounting.achieved_epsilon`), or the RDP bound alone (Agarwal,
#: Kairouz & Liu 2021, Thm. 3.5), for comparison.
TIGHT = "tight"
RDP_ONLY = "rdp-only"

#: `SiteMethod.root`: merge the sites' subspaces, or sum their released Gram matrices.
MERGE = "merge"
SUM = "sum"

_SEED_TAG = 26  # rng_for(_SEED_TAG, seed, site, leaf): the leaves' shares


@dataclass(frozen=True)
class SiteMethod:
    """One row of the secure-sum table.

    Attributes
    ----------
    label : str
    block_size : int
        Rows per slot (0: one release of all of a leaf's rows).
    horizon : int
        ``H`` of the continual release (1: independent slots).
    threshold : int
        ``t``: the fewest shares a released sum may contain (every leaf reports, so with
        ``t < 4`` the sum carries ``4 / t`` times the calibrated variance).
    scale : float
        Integer units per unit-ball Gram unit.
    noise : str
        `SKELLAM` or `GAUSSIAN_SITE`.
    root : str
        `MERGE` (each site publishes the subspace of its noisy Gram, the root merges them at
        rank ``r``: the tree of the brief) or `SUM` (a variant: the sites forward their noisy
        Gram matrices and the root takes the top ``r`` eigenvectors of their sum).
    sites : int
        Sites the leaves are grouped in (contiguous; 2 in the tree of the brief, 1 for the
        ceiling of one secure sum over all leaves).
    accounting : str
        `TIGHT` (the runtime's) or `RDP_ONLY`.
    """

    label: str
    block_size: int = 0
    horizon: int = 1
    threshold: int = 4
    scale: float = 2.0**16
    noise: str = SKELLAM
    root: str = MERGE
    sites: int = 2
    accounting: str = TIGHT


def sites_of(n_leaves: int, n_sites: int = 2) -> list[list[int]]:
    """Leaf indices per site: contiguous groups (the halves of `motes_tree.tree_root`)."""
    return [list(g) for g in np.array_split(np.arange(n_leaves), n_sites)]


def calibration_for(
    method: SiteMethod, n_features: int, epsilon: float, delta: float
) -> SkellamCalibration:
    """`gram_calibration` of ``method`` (its scale, threshold and horizon)."""
    coefficients = sqrt_factorisation_coefficients(method.horizon)
    if method.accounting == TIGHT:
        return gram_calibration(
            epsilon, delta, n_features, method.scale, method.threshold, coefficients
        )
    from scipy.optimize import brentq

    l1, l2 = gram_sensitivity(n_features, method.scale, coefficients)
    log_mu = brentq(
        lambda x: rdp_to_epsilon(skellam_rdp(math.exp(x), l1, l2), delta) - epsilon,
        math.log(l2 * l2) - 20.0,
        math.log(l2 * l2) + 20.0,
        xtol=1e-13,
    )
    total = math.exp(log_mu) * (1.0 + 1e-9)
    t = method.threshold
    return SkellamCalibration(epsilon, delta, l1, l2, t, total, total / t)


def _encode(matrix: np.ndarray, scale: float) -> np.ndarray:
    upper = weight_off_diagonal(matrix)[np.triu_indices(matrix.shape[0])]
    return np.rint(upper * scale).astype(np.int64)


def _decode(vector: np.ndarray, n_features: int, scale: float) -> np.ndarray:
    out = np.zeros((n_features, n_features))
    out[np.triu_indices(n_features)] = vector.astype(np.float64) / scale
    out = out + np.triu(out, 1).T
    return unweight_off_diagonal(out)


def _slot_increments(unit_rows: np.ndarray, block: int, horizon: int) -> list[np.ndarray]:
    """A leaf's increment per slot: the slot's entry of ``R G`` within its segment."""
    grams = [
        unit_rows[s : s + block].T @ unit_rows[s : s + block]
        for s in range(0, len(unit_rows), block)
    ]
    c = sqrt_factorisation_coefficients(horizon)
    out = []
    for k, _ in enumerate(grams):
        start = (k // horizon) * horizon  # first slot of the segment
        out.append(sum(c[k - j] * grams[j] for j in range(start, k + 1)))
    return out


def site_grams(
    data: MotesData,
    method: SiteMethod,
    calibration: SkellamCalibration | None,
    *,
    epsilon: float,
    delta: float,
    seed: int,
) -> list[np.ndarray]:
    """Each site's released (noisy) Gram matrix after all rows, ``(d, d)`` unit-ball units.

    Leaf ``i`` of site ``s`` draws its shares from ``rng_for(26, seed, s, i)``;
    `GAUSSIAN_SITE` draws the site's noise from ``rng_for(26, seed, s, 999)``.
    """
    d = data.n_features
    c = sqrt_factorisation_coefficients(method.horizon)
    out = []
    for s, members in enumerate(sites_of(len(data.parts), method.sites)):
        per_leaf = []
        for i in members:
            rows = data.unit_parts[i]
            block = method.block_size or len(rows)
            per_leaf.append(_slot_increments(rows, block, method.horizon))
        slots = len(per_leaf[0])
        if any(len(p) != slots for p in per_leaf):
            raise ValueError("the leaves of a site make different numbers of releases")
        if method.noise == GAUSSIAN_SITE:
            sigma = release_noise_std(epsilon, delta, method.horizon)
            rng = rng_for(_SEED_TAG, seed, s, 999)
            released = [
                sum(p[k] for p in per_leaf) + symmetric_noise(d, sigma, rng) for k in range(slots)
            ]
        else:
            assert calibration is not None
            rngs = [rng_for(_SEED_TAG, seed, s, i) for i in members]
            m = d * (d + 1) // 2
            released = []
            for k in range(slots):
                total = np.zeros(m, dtype=np.int64)
                for p, rng in zip(per_leaf, rngs, strict=True):
                    share = rng.poisson(calibration.share_mu, m) - rng.poisson(
                        calibration.share_mu, m
                    )
                    total += _encode(p[k], method.scale) + share
                released.append(_decode(total, d, method.scale))
        # Post-processing: S_t = closed + sum_k c_{t-k} Y_k within the open segment.
        closed = np.zeros((d, d))
        output = closed
        for k in range(slots):
            start = (k // method.horizon) * method.horizon
            output = closed + sum(c[k - j] * released[j] for j in range(start, k + 1))
            if (k + 1) % method.horizon == 0:
                closed = output
        out.append(output)
    return out


def root_error(
    data: MotesData,
    method: SiteMethod,
    calibration: SkellamCalibration | None,
    *,
    rank: int,
    epsilon: float,
    delta: float,
    seed: int,
) -> float:
    """`error_ratio` of the root's rank-``rank`` basis (2 sites merged) on all of ``data.x``."""
    d = data.n_features
    grams = site_grams(data, method, calibration, epsilon=epsilon, delta=delta, seed=seed)
    if method.root == SUM:
        return error_ratio(data.x, top_eigenpairs(sum(grams), rank)[0])
    n_per_site = [
        sum(len(data.parts[i]) for i in g) for g in sites_of(len(data.parts), method.sites)
    ]
    subs: list[Subspace] = [
        eigen_subspace(*top_eigenpairs(g, d), n, data.clip_norm)
        for g, n in zip(grams, n_per_site, strict=True)
    ]
    root = merge_many(subs, rank=rank)
    return error_ratio(data.x, root.basis[:, :rank])


def bits_for(
    method: SiteMethod, calibration: SkellamCalibration, leaf_rows: int, leaves_per_site: int
) -> int:
    """Bits of the modulus a site's sum needs without wrapping (`masking.sum_bound` logic).

    Entries of a weighted unit-ball Gram increment are at most its rows (``|sqrt(2) x_i x_j|
    <= 1/sqrt(2)``), times ``sum_k c_k`` for a continual slot; noise up to 20 standard
    deviations of the sum of all ``leaves_per_site`` shares.
    """
    block = method.block_size or leaf_rows
    coefficients = sqrt_factorisation_coefficients(method.horizon)
    max_entry = block * float(coefficients.sum())
    noise_std = math.sqrt(2.0 * calibration.share_mu * leaves_per_site)
    bound = math.ceil(leaves_per_site * (max_entry * method.scale + 0.5) + 20.0 * noise_std)
    return max(2, bound.bit_length() + 1)
