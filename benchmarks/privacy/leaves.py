"""What one leaf of the section (f) trees publishes, per mechanism: a `Subspace`.

Every function takes one leaf's rows (samples as rows, ``(n, d)``) and returns the
subspace the leaf would publish, in the data's units (singular values of the raw rows,
``C sqrt(lambda)`` for an eigenvalue ``lambda`` of a unit-ball Gram matrix ``sum x x^T``,
``C`` the clipping norm), so that `edge_runtime.fpca.merge_many` can combine leaves of
any kind.

- `fpca_leaf`: `edge_runtime.fpca.FPCAEdge` itself (``mechanism="gaussian"``, the running
  noisy Gram sum of `edge_runtime.fpca.private_gram`, or ``"fpca-eq8"``), one pass,
  ``flush()``, ``tracked_subspace`` (rank + default oversample).
- `plain_leaf`: `FPCAEdge` without privacy.
- `mod_sulq_leaf`: symmetric MOD-SuLQ (`benchmarks.privacy.mod_sulq`) on the leaf's rows.
- `running_sum_leaf`: state (a) of the state-choice table, what ``FPCAEdge`` keeps,
  written with `edge_runtime.fpca.private_gram.PrivateGram` directly so that its noise
  can be shared with state (b).
- `merged_blocks_leaf`: state (b): every block released on its own (`block_releases`:
  ``G_b + (W + W^T) / 2``, the same release as ``FPCAEdge`` with ``horizon=1`` and, from
  the same generator, the very noise matrices of `running_sum_leaf` at ``horizon=1``),
  reduced at once to its top ``r + oversample`` eigenpairs and merged into the leaf's
  subspace with `edge_runtime.fpca.merge_subspaces` (FPCA's streaming summary, Alg. 2);
  only that subspace is kept between blocks.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from scipy.linalg import eigh

from benchmarks.privacy.mod_sulq import mod_sulq_eigenpairs
from edge_runtime.fpca import FPCAEdge, Subspace, merge_subspaces
from edge_runtime.fpca.continual import prefix_noise, sqrt_factorisation_coefficients
from edge_runtime.fpca.private_gram import PrivateGram, release_noise_std

__all__ = [
    "KEY_WORDS",
    "block_releases",
    "eigen_subspace",
    "fpca_leaf",
    "merged_blocks_leaf",
    "mod_sulq_leaf",
    "plain_leaf",
    "running_sum_leaf",
    "top_eigenpairs",
]


#: Words of a segment key as `PrivateGram` draws them (its ``_KEY_WORDS``): `block_releases`
#: replays its noise from the same generator (tests/test_privacy_comparators.py checks it).
KEY_WORDS = 4


def fpca_leaf(
    rows: np.ndarray,
    rank: int,
    *,
    block_size: int | None,
    epsilon: float,
    delta: float,
    clip_norm: float,
    mechanism: str = "gaussian",
    horizon: int = 1,
    seed: int,
) -> Subspace:
    """``FPCAEdge(d, rank, block_size, privacy=(epsilon, delta), ...)`` after ``rows`` and a flush.

    Parameters
    ----------
    rows : ndarray of shape (n, d)
        The leaf's raw readings (clipped inside `FPCAEdge`).
    rank : int
        ``r``; the leaf publishes ``tracked_subspace`` (``r`` + the default oversample).
    block_size : int or None
        Rows per release; None is the library's default for the mechanism.
    epsilon, delta : float
        Budget per reading.
    clip_norm : float
        ``C``, in the data's units.
    mechanism : {"gaussian", "fpca-eq8"}
    horizon : int, default=1
        ``H`` of the continual release (gaussian only).
    seed : int
        ``random_state``.

    Returns
    -------
    Subspace
    """
    est = FPCAEdge(
        rows.shape[1],
        rank,
        block_size,
        privacy=(epsilon, delta),
        clip_norm=clip_norm,
        mechanism=mechanism,
        horizon=horizon,
        random_state=seed,
    )
    est.partial_fit(rows)
    est.flush()
    return est.tracked_subspace


def plain_leaf(rows: np.ndarray, rank: int) -> Subspace:
    """``FPCAEdge(d, rank)`` without privacy (default block and oversample), after a flush."""
    est = FPCAEdge(rows.shape[1], rank)
    est.partial_fit(rows)
    est.flush()
    return est.tracked_subspace


def top_eigenpairs(matrix: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` largest eigenpairs of the symmetric ``(d, d)`` ``matrix``, largest first."""
    d = matrix.shape[0]
    values, vectors = eigh(matrix, subset_by_index=[d - count, d - 1])
    return np.ascontiguousarray(vectors[:, ::-1]), values[::-1].copy()


def eigen_subspace(
    basis: np.ndarray, gram_eigenvalues: np.ndarray, n_samples: int, clip_norm: float
) -> Subspace:
    """A `Subspace` in the data's units from eigenpairs of a unit-ball Gram matrix.

    Singular values ``C sqrt(max(lambda, 0))`` (noise can make ``lambda`` negative).
    """
    values = clip_norm * np.sqrt(np.maximum(gram_eigenvalues, 0.0))
    return Subspace(basis, values, int(n_samples))


def mod_sulq_leaf(
    unit_rows: np.ndarray,
    count: int,
    epsilon: float,
    delta: float,
    clip_norm: float,
    rng: np.random.Generator,
) -> Subspace:
    """Symmetric MOD-SuLQ on one leaf: the top ``count`` eigenpairs of ``(1/n) X^T X + E``.

    Parameters
    ----------
    unit_rows : ndarray of shape (n, d)
        The leaf's rows scaled to the unit ball.
    count : int
        Eigenpairs published (``r`` + oversample, as the `FPCAEdge` leaves).
    epsilon, delta : float
        Budget per reading.
    clip_norm : float
        ``C``, to return to the data's units.
    rng : numpy.random.Generator
        Source of the mask.

    Returns
    -------
    Subspace
        Eigenvalues of the masked second moment times ``n`` are the Gram eigenvalues.
    """
    n = unit_rows.shape[0]
    basis, values = mod_sulq_eigenpairs(unit_rows, count, epsilon, delta, rng)
    return eigen_subspace(basis, n * values, n, clip_norm)


def running_sum_leaf(
    unit_rows: np.ndarray,
    block_size: int,
    count: int,
    epsilon: float,
    delta: float,
    clip_norm: float,
    rng: np.random.Generator,
    horizon: int = 1,
) -> Subspace:
    """State (a): the blocks released into one running `PrivateGram`, its top ``count`` pairs.

    Parameters
    ----------
    unit_rows : ndarray of shape (n, d)
        The leaf's rows scaled to the unit ball.
    block_size : int
        Rows per release (the last block may be shorter, as after ``flush()``).
    count : int
        ``r + oversample``: eigenpairs published.
    epsilon, delta : float
        Budget per reading.
    clip_norm : float
        ``C``, to return to the data's units.
    rng : numpy.random.Generator
        Source of the segment keys.
    horizon : int, default=1
        ``H`` of the continual release.

    Returns
    -------
    Subspace
        Of rank ``count``.
    """
    n, d = unit_rows.shape
    gram = PrivateGram(d, epsilon, delta, horizon=horizon, rng=rng)
    for start in range(0, n, block_size):
        gram.release(unit_rows[start : start + block_size])
    return eigen_subspace(*gram.top(count), n, clip_norm)


def block_releases(
    unit_rows: np.ndarray,
    block_size: int,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
) -> Iterator[tuple[int, np.ndarray]]:
    """Each block's release ``G_b + Z_b`` on its own: ``(rows in the block, (d, d) matrix)``.

    ``Z_b`` is the noise ``PrivateGram(d, epsilon, delta, rng=rng)`` (``horizon=1``) adds to
    its ``b``-th release: it draws one segment key per release from ``rng``
    (`KEY_WORDS` words, as `PrivateGram` does) and regenerates the noise from it with
    `edge_runtime.fpca.continual.prefix_noise`. So the releases sum to
    ``PrivateGram.released`` for the same ``rng`` (tested), and state (b) is paired with
    state (a) noise matrix by noise matrix, while it keeps no ``d x d`` sum.
    """
    n, d = unit_rows.shape
    sigma = release_noise_std(epsilon, delta, 1)
    one = sqrt_factorisation_coefficients(1)
    for start in range(0, n, block_size):
        rows = unit_rows[start : start + block_size]
        key = rng.integers(0, 2**32, size=KEY_WORDS, dtype=np.uint32)
        released = rows.T @ rows
        released += prefix_noise(1, d, sigma, key, one)
        yield rows.shape[0], released


def merged_blocks_leaf(
    unit_rows: np.ndarray,
    block_size: int,
    count: int,
    epsilon: float,
    delta: float,
    clip_norm: float,
    rng: np.random.Generator,
) -> Subspace:
    """State (b): every block's Gaussian release truncated to ``count`` eigenpairs and merged.

    Block ``b`` (``block_size`` rows; the last one may be shorter, as after ``flush()``)
    is released as in `block_releases` (``G_b + (W + W^T) / 2``, ``sigma =
    release_noise_std(epsilon, delta)``: the same release, and for the same ``rng`` the
    same noise, as `running_sum_leaf` at ``horizon=1``). Its top ``count`` eigenpairs
    become a `Subspace`, merged into the leaf's with ``merge_subspaces(state, block,
    rank=count)``.

    Parameters
    ----------
    unit_rows : ndarray of shape (n, d)
        The leaf's rows scaled to the unit ball.
    block_size : int
        Rows per release.
    count : int
        ``r + oversample``: eigenpairs kept per block and in the state.
    epsilon, delta : float
        Budget per reading.
    clip_norm : float
        ``C``, to return to the data's units.
    rng : numpy.random.Generator
        Source of the segment keys.

    Returns
    -------
    Subspace
        Of rank ``count``.
    """
    state: Subspace | None = None
    for rows, released in block_releases(unit_rows, block_size, epsilon, delta, rng):
        block = eigen_subspace(*top_eigenpairs(released, count), rows, clip_norm)
        del released
        state = block if state is None else merge_subspaces(state, block, rank=count)
    assert state is not None
    return state
