"""Differential-privacy comparators and the utility benchmark (comparison only, not runtime).

FPCA-Edge's private mode (streaming MOD-SuLQ, `edge_runtime.fpca.FPCAEdge` with
``privacy=(epsilon, delta)``) is compared with, each written from its paper:

======================  ================================================================
`mod_sulq`              Symmetric MOD-SuLQ, Chaudhuri, Sarwate, Sinha, JMLR 2013, Alg. 1:
                        the second-moment matrix plus one symmetric Gaussian mask, top-k
                        eigenvectors.
`dpdispca`              DPdisPCA, Imtiaz and Sarwate, IEEE JSTSP 2018: every site masks
                        its own second-moment matrix (symmetric Gaussian mechanism) and
                        sends ``P_s = U_R Lambda_R^{1/2}``; the aggregator takes the top
                        eigenvectors of ``(1/S) sum_s P_s P_s^T``.
`opendp_ref`            OpenDP's ``sklearn.decomposition.PCA`` as an outside reference
                        (optional extra ``privacy-ref``; run in a subprocess with a hard
                        timeout). Pure epsilon-DP under a different neighbouring relation,
                        so its epsilon is not the same number as the others'.
======================  ================================================================

`utility` runs the paper's Fig. 3 experiment (q_A = |<v1, v1_hat>| against epsilon on
Synth(alpha)), a federated variant and the Motes light data; `benchmarks.run --only
privacy` writes it into the benchmark report.

All comparators take samples as rows, ``(n_samples, n_features)``, already in the unit
ball (``||x|| <= 1``, e.g. `edge_runtime.fpca.privacy.clip_to_unit_ball`): their
privacy analyses assume it, and they raise ValueError otherwise.
"""

from benchmarks.privacy.dpdispca import dpdispca, dpdispca_noise_std
from benchmarks.privacy.mod_sulq import mod_sulq, symmetric_gaussian

__all__ = ["dpdispca", "dpdispca_noise_std", "mod_sulq", "symmetric_gaussian"]
