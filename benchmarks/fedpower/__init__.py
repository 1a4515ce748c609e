"""Benchmark (h): FPCA against FedPower on the same data (numerics in one process, no broker):
``python -m benchmarks.run --only fedpower``. Samples are rows ``(n, d)``; bases ``(d, rank)``.
"""
