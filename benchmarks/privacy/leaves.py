"""What one private leaf of the section (f) trees publishes, per mechanism: a `Subspace` in
the data's units (singular values ``C sqrt(lambda)`` of a unit-ball Gram eigenvalue, ``C`` the
clip norm), so `merge_many` combines any kinds. State (a), `running_sum_leaf`, is what
``FPCAEdge(mechanism="gaussian")`` keeps; state (b), `merged_blocks_leaf`, truncates each of
the same releases (`block_releases`) and merges it (`merge_subspaces`, Alg. 2).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from scipy.linalg import eigh

from benchmarks.privacy.comparators import mod_sulq_eigenpairs
from edge_runtime.fpca import FPCAEdge, Subspace, merge_subspaces
from edge_runtime.fpca.continual import prefix_noise, sqrt_factorisation_coefficients
from edge_runtime.fpca.private_gram import PrivateGram, release_noise_std

__all__ = [
    "KEY_WORDS", "block_releases", "eigen_subspace", "fpca_leaf", "merged_blocks_leaf",
    "mod_sulq_leaf", "plain_leaf", "running_sum_leaf", "streamed", "top_eigenpairs",
]  # fmt: skip

#: Words of a segment key as `PrivateGram` draws them: `block_releases` replays its noise.
KEY_WORDS = 4


def streamed(est: FPCAEdge, rows: np.ndarray) -> FPCAEdge:
    """``est`` after ``partial_fit(rows)`` (rows ``(n, d)``) and a flush of the last block."""
    est.partial_fit(rows)
    est.flush()
    return est


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
    """``FPCAEdge(d, rank, block_size, privacy=(epsilon, delta), ...)``'s tracked subspace
    (rank + default oversample) after the raw ``rows`` and a flush; ``seed``: random_state."""
    est = FPCAEdge(
        rows.shape[1], rank, block_size, privacy=(epsilon, delta), clip_norm=clip_norm,
        mechanism=mechanism, horizon=horizon, random_state=seed,
    )  # fmt: skip
    return streamed(est, rows).tracked_subspace


def plain_leaf(rows: np.ndarray, rank: int) -> Subspace:
    """``FPCAEdge(d, rank)`` without privacy (default block and oversample), after a flush."""
    return streamed(FPCAEdge(rows.shape[1], rank), rows).tracked_subspace


def top_eigenpairs(matrix: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` largest eigenpairs of the symmetric ``(d, d)`` ``matrix``, largest first."""
    d = matrix.shape[0]
    values, vectors = eigh(matrix, subset_by_index=[d - count, d - 1])
    return np.ascontiguousarray(vectors[:, ::-1]), values[::-1].copy()


def eigen_subspace(
    basis: np.ndarray, gram_eigenvalues: np.ndarray, n_samples: int, clip_norm: float
) -> Subspace:
    """A `Subspace` in the data's units: singular values ``C sqrt(max(lambda, 0))``."""
    values = clip_norm * np.sqrt(np.maximum(gram_eigenvalues, 0.0))
    return Subspace(basis, values, int(n_samples))


def mod_sulq_leaf(
    unit_rows: np.ndarray, count: int, epsilon: float, delta: float, clip_norm: float,
    rng: np.random.Generator,
) -> Subspace:  # fmt: skip
    """Symmetric MOD-SuLQ's top ``count`` eigenpairs of one leaf's unit-ball rows."""
    n = unit_rows.shape[0]
    basis, values = mod_sulq_eigenpairs(unit_rows, count, epsilon, delta, rng)
    return eigen_subspace(basis, n * values, n, clip_norm)


def running_sum_leaf(
    unit_rows: np.ndarray, block_size: int, count: int, epsilon: float, delta: float,
    clip_norm: float, rng: np.random.Generator, horizon: int = 1,
) -> Subspace:  # fmt: skip
    """State (a): blocks released into one running `PrivateGram` (continual release at
    ``horizon``), its top ``count`` eigenpairs; the last block may be shorter."""
    n, d = unit_rows.shape
    gram = PrivateGram(d, epsilon, delta, horizon=horizon, rng=rng)
    for start in range(0, n, block_size):
        gram.release(unit_rows[start : start + block_size])
    return eigen_subspace(*gram.top(count), n, clip_norm)


def block_releases(
    unit_rows: np.ndarray, block_size: int, epsilon: float, delta: float,
    rng: np.random.Generator,
) -> Iterator[tuple[int, np.ndarray]]:  # fmt: skip
    """Each block's release on its own, ``(rows in it, G_b + Z_b)``: ``Z_b`` is regenerated
    (`prefix_noise`) from a `KEY_WORDS` key drawn from ``rng`` as ``PrivateGram(horizon=1)``
    draws it, so the releases sum to its ``released`` for the same ``rng`` (tested)."""
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
    unit_rows: np.ndarray, block_size: int, count: int, epsilon: float, delta: float,
    clip_norm: float, rng: np.random.Generator,
) -> Subspace:  # fmt: skip
    """State (b): every `block_releases` release cut to its top ``count`` eigenpairs and
    merged into the leaf's subspace, ``merge_subspaces(state, block, rank=count)``."""
    state: Subspace | None = None
    for rows, released in block_releases(unit_rows, block_size, epsilon, delta, rng):
        block = eigen_subspace(*top_eigenpairs(released, count), rows, clip_norm)
        del released
        state = block if state is None else merge_subspaces(state, block, rank=count)
    assert state is not None
    return state
