"""Benchmark (f): FPCA-Edge's private mode, its defaults and its comparators
(``python -m benchmarks.run --only privacy``); `section` runs it, `report_section` and `plot`
write section (f) of REPORT.md.
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
