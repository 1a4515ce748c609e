"""Secure sum per site with distributed Skellam noise on Motes light, offline (issue 26).

`sites`: the simulation (leaves' encoded increments plus Skellam shares, summed per site,
decoded, eigendecomposed, merged at the root). `run`: the tables and the plot,
``python -m benchmarks.secagg`` (``benchmarks/report/secagg.md`` and ``secagg.png``).
"""
