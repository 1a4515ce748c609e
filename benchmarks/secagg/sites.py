"""Offline simulation of the secure sum per site on Motes light (issue 26, accuracy).

The tree of `benchmarks.privacy.motes_tree` (8 leaves of contiguous rows, clipped at 8230 lux) in
2 sites of 4. Per site and release slot every leaf takes its increment (its Gram matrix of
unit-ball rows; continual: the slot's entry of ``R (G_1, ..., G_H)``,
`edge_runtime.fpca.continual`), weights the off-diagonal by ``sqrt(2)``, encodes the upper
triangle times ``scale`` as int64 and adds its Skellam share ``Poisson(share_mu) -
Poisson(share_mu)`` per entry (`edge_runtime.secagg.accounting.gram_calibration`). The masks
are left out: they cancel exactly (`tests/test_secagg_masking.py`) and nothing wraps in 64 bits
(`bits_for`). The site sums, decodes and (continual) post-processes; its subspace is every
direction of its noisy Gram; the root merges the sites at rank ``r`` (`merge_many`), scored by
`error_ratio` on all rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from benchmarks.measure import rng_for
from benchmarks.privacy.leaves import eigen_subspace, top_eigenpairs
from benchmarks.privacy.motes_tree import MotesData
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

SKELLAM, GAUSSIAN_SITE = "skellam", "gaussian-site"  # `SiteMethod.noise`
TIGHT, RDP_ONLY = "tight", "rdp-only"  # `SiteMethod.accounting`
MERGE, SUM = "merge", "sum"  # `SiteMethod.root`
_SEED_TAG = 26  # rng_for(_SEED_TAG, seed, site, leaf): the leaves' shares


@dataclass(frozen=True)
class SiteMethod:
    """One row of the secure-sum table.

    ``block_size``: rows per slot (0: one release of all of a leaf's rows); ``horizon``: ``H``
    of the continual release; ``threshold``: ``t``, the fewest shares a released sum may
    contain (every leaf reports, so with ``t < 4`` the sum carries ``4 / t`` times the
    calibrated variance); ``scale``: integer units per unit-ball Gram unit; ``noise``: `SKELLAM`
    shares, or `GAUSSIAN_SITE` (one Gaussian at the analytic sigma on the site's sum: a trusted
    curator, the limit of a perfect secure sum); ``root``: `MERGE` the sites' subspaces at rank
    ``r``, or `SUM` their noisy Gram matrices (a variant); ``sites``: contiguous groups of
    leaves; ``accounting``: `TIGHT` (the runtime's: the smaller of the RDP and Gaussian-DP
    bounds) or `RDP_ONLY` (Agarwal, Kairouz & Liu 2021, Thm. 3.5).
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


def calibration_for(method: SiteMethod, n_features: int, epsilon: float,
                    delta: float) -> SkellamCalibration:
    """`gram_calibration` of ``method`` (its scale, threshold, horizon and accounting)."""
    coefficients = sqrt_factorisation_coefficients(method.horizon)
    if method.accounting == TIGHT:
        return gram_calibration(epsilon, delta, n_features, method.scale, method.threshold,
                                coefficients)
    from scipy.optimize import brentq

    l1, l2 = gram_sensitivity(n_features, method.scale, coefficients)
    log_mu = brentq(lambda x: rdp_to_epsilon(skellam_rdp(math.exp(x), l1, l2), delta) - epsilon,
                    math.log(l2 * l2) - 20.0, math.log(l2 * l2) + 20.0, xtol=1e-13)
    total = math.exp(log_mu) * (1.0 + 1e-9)
    return SkellamCalibration(epsilon, delta, l1, l2, method.threshold, total,
                              total / method.threshold)


def _encode(matrix: np.ndarray, scale: float) -> np.ndarray:
    upper = weight_off_diagonal(matrix)[np.triu_indices(matrix.shape[0])]
    return np.rint(upper * scale).astype(np.int64)


def _decode(vector: np.ndarray, n_features: int, scale: float) -> np.ndarray:
    out = np.zeros((n_features, n_features))
    out[np.triu_indices(n_features)] = vector.astype(np.float64) / scale
    return unweight_off_diagonal(out + np.triu(out, 1).T)


def _segment_sums(c: np.ndarray, items: list[np.ndarray], horizon: int) -> list[np.ndarray]:
    """``sum_{start <= j <= k} c_{k-j} items_j`` per slot ``k``, ``start`` its segment's first."""
    return [sum(c[k - j] * items[j] for j in range((k // horizon) * horizon, k + 1))
            for k in range(len(items))]


def site_grams(data: MotesData, method: SiteMethod, calibration: SkellamCalibration | None, *,
               epsilon: float, delta: float, seed: int) -> list[np.ndarray]:
    """Each site's released (noisy) Gram matrix after all rows, ``(d, d)`` unit-ball units.

    Leaf ``i`` of site ``s`` draws its shares from ``rng_for(26, seed, s, i)``;
    `GAUSSIAN_SITE` draws the site's noise from ``rng_for(26, seed, s, 999)``.
    """
    d, h = data.n_features, method.horizon
    c = sqrt_factorisation_coefficients(h)
    out = []
    for s, members in enumerate(sites_of(len(data.parts), method.sites)):
        per_leaf = []
        for i in members:
            rows = data.unit_parts[i]
            block = method.block_size or len(rows)
            grams = [rows[j : j + block].T @ rows[j : j + block]
                     for j in range(0, len(rows), block)]
            per_leaf.append(_segment_sums(c, grams, h))  # the slot's entry of R G
        slots = len(per_leaf[0])
        if any(len(p) != slots for p in per_leaf):
            raise ValueError("the leaves of a site make different numbers of releases")
        if method.noise == GAUSSIAN_SITE:
            sigma, rng = release_noise_std(epsilon, delta, h), rng_for(_SEED_TAG, seed, s, 999)
            released = [sum(p[k] for p in per_leaf) + symmetric_noise(d, sigma, rng)
                        for k in range(slots)]
        else:
            assert calibration is not None
            rngs = [rng_for(_SEED_TAG, seed, s, i) for i in members]
            m, mu = d * (d + 1) // 2, calibration.share_mu
            released = []
            for k in range(slots):
                total = np.zeros(m, dtype=np.int64)
                for p, rng in zip(per_leaf, rngs, strict=True):
                    share = rng.poisson(mu, m)
                    total += _encode(p[k], method.scale) + (share - rng.poisson(mu, m))
                released.append(_decode(total, d, method.scale))
        # Post-processing: S_t = closed + sum_k c_{t-k} Y_k within the open segment.
        closed = output = np.zeros((d, d))
        for k, within in enumerate(_segment_sums(c, released, h)):
            output = closed + within
            if (k + 1) % h == 0:
                closed = output
        out.append(output)
    return out


def root_error(data: MotesData, method: SiteMethod, calibration: SkellamCalibration | None, *,
               rank: int, epsilon: float, delta: float, seed: int) -> float:
    """`error_ratio` of the root's rank-``rank`` basis (the sites merged) on all of ``data.x``."""
    grams = site_grams(data, method, calibration, epsilon=epsilon, delta=delta, seed=seed)
    if method.root == SUM:
        return error_ratio(data.x, top_eigenpairs(sum(grams), rank)[0])
    groups = sites_of(len(data.parts), method.sites)
    subs: list[Subspace] = [
        eigen_subspace(*top_eigenpairs(g, data.n_features),
                       sum(len(data.parts[i]) for i in group), data.clip_norm)
        for g, group in zip(grams, groups, strict=True)]
    return error_ratio(data.x, merge_many(subs, rank=rank).basis[:, :rank])


def bits_for(method: SiteMethod, calibration: SkellamCalibration, leaf_rows: int,
             leaves_per_site: int) -> int:
    """Bits of the modulus a site's sum needs without wrapping (`masking.sum_bound` logic):
    entries of a weighted unit-ball Gram increment are at most its rows, times ``sum_k c_k``
    for a continual slot; noise up to 20 standard deviations of the sum of all shares."""
    coefficients = sqrt_factorisation_coefficients(method.horizon)
    max_entry = (method.block_size or leaf_rows) * float(coefficients.sum())
    noise_std = math.sqrt(2.0 * calibration.share_mu * leaves_per_site)
    bound = math.ceil(leaves_per_site * (max_entry * method.scale + 0.5) + 20.0 * noise_std)
    return max(2, bound.bit_length() + 1)
