"""Benchmark (h): FPCA against FedPower on the same data (numerics in one process, no broker).

``python -m benchmarks.run --only fedpower --update`` runs `section` and writes section (h) of
REPORT.md with `report_section`. `data`: Motes light and heterogeneous Synth in contiguous
leaves; `faults`: none, a straggler, a dead leaf; `fpca_tree` and `fedpower_runs`: each
method under a fault; `wire_bytes`: bytes per message. Samples are rows ``(n, d)``; bases
``(d, rank)``.
"""
