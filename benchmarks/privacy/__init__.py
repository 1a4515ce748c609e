"""Benchmark (f): FPCA-Edge's private mode (``FPCAEdge(..., privacy=(epsilon, delta))``,
``mechanism="gaussian"`` or the paper's ``"fpca-eq8"``), its defaults and its comparators.

`section` runs every table (``benchmarks.run --only privacy``) and checks the Done-when items,
`report_section` and `plot` write section (f) of REPORT.md; `motes_tree` (the Motes light tree),
`leaves` (what a private leaf publishes), `state_choice`, `horizon` and `synth_table` are its
tables; `comparators` holds MOD-SuLQ and DPdisPCA; `stats` summaries over seeds.
"""

from benchmarks.privacy.comparators import (
    dpdispca,
    dpdispca_noise_std,
    mod_sulq,
    mod_sulq_eigenpairs,
    symmetric_gaussian,
)

__all__ = [
    "dpdispca", "dpdispca_noise_std", "mod_sulq", "mod_sulq_eigenpairs", "symmetric_gaussian",
]  # fmt: skip
