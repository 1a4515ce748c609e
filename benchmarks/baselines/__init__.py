"""Streaming PCA baselines the FPCA paper compares against (benchmarks only, not the runtime).

Each is ``cls(n_features, rank, **params)`` with ``partial_fit(X)`` (rows are samples, any
chunking), ``fit(X)`` (reset, then partial_fit), ``basis`` ``(n_features, rank)`` orthonormal
float64, ``n_tracked`` (directions of state), and class attributes ``name`` and ``centers``
(True only for `IncrementalPCA`, whose ratio against the uncentred SVD is not like for like).

Defaults, with their error ratio on Motes light (uncentred, rank 10, one pass):
`FrequentDirections` ``ell = 2 rank``, ``"fast"`` (1.0057; ``"exact"`` 1.0106, 9x slower);
`GROUSE` ``eta_t = 100 / t`` on normalised data (7.6; 3.7 at ``eta=1``; it recovers planted
subspaces and Synth(0.5), Synth(1)); `BlockPower` ``B = max(rank, n_features)`` as the paper
(13.4; 4.9 at B = 500); `SPIRIT` ``lambda = 0.96`` as the paper (12.6; 1.086 at
``forget=1``); `IncrementalPCA` ``batch_size = max(rank, 50)`` (1.093; 1.051 centred).
"""

from benchmarks.baselines.block_power import BlockPower
from benchmarks.baselines.frequent_directions import FrequentDirections
from benchmarks.baselines.grouse import GROUSE
from benchmarks.baselines.incremental_pca import IncrementalPCA
from benchmarks.baselines.spirit import SPIRIT

__all__ = [
    "ALL_BASELINES", "GROUSE", "SPIRIT", "BlockPower", "FrequentDirections", "IncrementalPCA",
]  # fmt: skip

#: Every baseline class, in the order of the benchmark tables.
ALL_BASELINES: tuple[type, ...] = (GROUSE, FrequentDirections, BlockPower, SPIRIT, IncrementalPCA)
