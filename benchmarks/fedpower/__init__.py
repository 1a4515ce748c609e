"""Benchmark (h): FPCA against FedPower on the same data, side by side (numerics, no broker).

``python -m benchmarks.run --only fedpower --update`` runs it and writes section (h) of
``REPORT.md`` with ``fedpower.png``. Modules, one concept each:

==================  ====================================================================
`section`           Sizes, results, `run_fedpower_benchmark` (every table).
`report_section`    The Markdown of section (h) and its plot.
`data`              Motes light and heterogeneous Synth, split into contiguous leaves.
`faults`            The fault models: none, one straggler (1/10 the rate), one dead leaf.
`fpca_tree`         FPCA's tree (streaming leaves, two aggregators, root) under a fault.
`fedpower_runs`     FedPower round by round under a fault, with the bytes of each round.
`wire_bytes`        Bytes per message: encoded FPCA snapshots, FedPower round and reply.
==================  ====================================================================

Samples are rows, ``(n_samples, n_features)``; bases are ``(n_features, rank)``.
"""
