"""Benchmark (f): FPCA-Edge's private mode, its defaults and its comparators
(``python -m benchmarks.run --only privacy``); `section` runs it, `report_section` and `plot`
write section (f) of REPORT.md, `comparators` holds MOD-SuLQ and DPdisPCA.
"""
