"""Benchmark (f): FPCA-Edge's private mode, its defaults and its comparators (not runtime).

The private mode is `edge_runtime.fpca.FPCAEdge` with ``privacy=(epsilon, delta)``:
``mechanism="gaussian"`` (the default; the Gaussian mechanism on each block's Gram
matrix, analytic calibration, running noisy sum, optional continual release) or
``"fpca-eq8"`` (the paper's streaming MOD-SuLQ, kept for comparison). Modules, one
concept each:

======================  ================================================================
`section`               Sizes, results, `run_privacy` (every table) and the Done-when
                        `checks`; `benchmarks.run --only privacy` calls it.
`report_section`        The Markdown of section (f).
`plot`                  ``privacy_utility.png``: error ratio against epsilon, noise
                        against the horizon.
`motes_tree`            The Motes light tree (8 private leaves, 2 aggregators, root) and
                        its root error ratio per method.
`leaves`                What one leaf publishes per mechanism (a `Subspace`).
`state_choice`          Memory of the two candidate leaf states (running sum or merged
                        per-block summaries).
`horizon`               Noise of the k-th release against the continual-release horizon.
`synth_table`           q_A against epsilon on Synth(1), the paper's Fig. 3 setting.
`stats`                 Summaries over seeds, seeded generators.
`mod_sulq`              Symmetric MOD-SuLQ, Chaudhuri, Sarwate, Sinha, JMLR 2013, Alg. 1:
                        the second-moment matrix plus one symmetric Gaussian mask, top-k
                        eigenpairs.
`dpdispca`              DPdisPCA, Imtiaz and Sarwate, IEEE JSTSP 2018: every site masks
                        its own second-moment matrix (symmetric Gaussian mechanism) and
                        sends ``P_s = U_R Lambda_R^{1/2}``; the aggregator takes the top
                        eigenvectors of ``(1/S) sum_s P_s P_s^T``.
======================  ================================================================

The comparators take samples as rows, ``(n_samples, n_features)``, already in the unit
ball (``||x|| <= 1``, e.g. `edge_runtime.fpca.privacy.clip_to_unit_ball`): their privacy
analyses assume it, and they raise ValueError otherwise.
"""

from benchmarks.privacy.dpdispca import dpdispca, dpdispca_noise_std
from benchmarks.privacy.mod_sulq import mod_sulq, mod_sulq_eigenpairs, symmetric_gaussian

__all__ = [
    "dpdispca",
    "dpdispca_noise_std",
    "mod_sulq",
    "mod_sulq_eigenpairs",
    "symmetric_gaussian",
]
