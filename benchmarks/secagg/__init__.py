"""Secure sum per site with distributed Skellam noise on Motes light, offline: `sites` (the
simulation) and `run` (``python -m benchmarks secagg``: the tables and the plot)."""
