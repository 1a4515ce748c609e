"""Streaming PCA baselines for the benchmarks (comparison only, not part of the runtime).

Small implementations from the papers that the FPCA paper (Grammenos et al., NeurIPS
2020) compares against, plus a wrapper of scikit-learn's IncrementalPCA:

========================  ==============================================================
`GROUSE`                  Balzano, Nowak, Recht, Allerton 2010: geodesic SGD step on the
                          Grassmannian per sample.
`FrequentDirections`      Liberty, KDD 2013; Ghashami, Liberty, Phillips, Woodruff, SIAM
                          J. Comput. 2016: deterministic ``ell``-row sketch.
`BlockPower`              Mitliagkas, Caramanis, Jain, NeurIPS 2013, Alg. 1: one power
                          iteration per block of ``B`` samples.
`SPIRIT`                  Papadimitriou, Sun, Faloutsos, VLDB 2005: PAST-based tracking
                          of ``k`` weight vectors with forgetting factor ``lambda``.
`IncrementalPCA`          scikit-learn's (Ross et al. 2008); always centres.
========================  ==============================================================

Each has the interface of `edge_runtime.fpca.FPCAEdge` that the benchmarks use:
``cls(n_features, rank, **params)``; ``partial_fit(X)`` with ``X`` of shape
``(n_samples, n_features)`` (samples are rows; any chunking), returning ``self``;
``fit(X)`` (reset, then ``partial_fit``); ``basis``, an ``(n_features, rank)`` float64
array with orthonormal columns; ``n_tracked``, the number of directions (rows of
sketch) held as state, for equal-state comparisons; the class attributes ``name``
(for tables and plots) and ``centers`` (True only for `IncrementalPCA`, whose error
ratio against the uncentred offline SVD is not like-for-like).

Defaults (measured on the Motes light data, uncentred, rank 10, error ratio against
the offline rank-10 SVD after one pass; on planted low-rank streams; and on
Synth(alpha), d = 400, n = 4000):

- `FrequentDirections`: ``ell = 2 * rank`` (the issue's equal-state setting),
  ``variant="fast"`` (Motes: 1.0057; ``"exact"``: 1.0106, 9x slower). The result
  depends on where the stream ends within a shrink cycle (1.005 .. 1.02 over the
  last 112 Motes samples).
- `GROUSE`: ``eta_t = 100 / t`` on normalised data: recovers planted subspaces and
  Synth(0.5), Synth(1) in one pass. The Motes data favour small steps (Motes: 7.6 at
  the default, 3.7 at ``eta=1``); no step size tried comes near the other methods.
- `BlockPower`: ``B = max(rank, n_features)``, as the FPCA paper's comparison. Larger
  blocks do better on these short streams (Motes: 13.4 at ``B = 48``, 4.9 at 500).
- `SPIRIT`: ``lambda = 0.96`` as in the paper (Motes: 12.6); ``forget=1.0`` is the
  fair setting against the offline SVD of the whole stream (Motes: 1.086).
- `IncrementalPCA`: ``batch_size = max(rank, 50)``, FPCA-Edge's default block size
  (Motes: 1.093 against the uncentred SVD, 1.051 against the centred one).

scikit-learn is imported only when an `IncrementalPCA` is created, so this package
imports without it.
"""

from benchmarks.baselines.block_power import BlockPower
from benchmarks.baselines.frequent_directions import FrequentDirections
from benchmarks.baselines.grouse import GROUSE
from benchmarks.baselines.incremental_pca import IncrementalPCA
from benchmarks.baselines.spirit import SPIRIT

__all__ = [
    "ALL_BASELINES",
    "GROUSE",
    "SPIRIT",
    "BlockPower",
    "FrequentDirections",
    "IncrementalPCA",
]

#: Every baseline class, in the order of the benchmark tables.
ALL_BASELINES: tuple[type, ...] = (
    GROUSE,
    FrequentDirections,
    BlockPower,
    SPIRIT,
    IncrementalPCA,
)
