"""Benchmarks of FPCA-Edge against the offline SVD and streaming PCA baselines (not shipped)."""
