"""Benchmark (g): the runtime at fleet sizes over MQTT, as a user runs it (issue 9).

``python -m benchmarks.run --only fleet --update`` runs it and writes section (g) of
``REPORT.md`` with ``fleet.png``. Modules, one concept each:

==================  ====================================================================
`scaling`           The benchmark's sizes, and what ``edge-runtime run`` measures: the
                    sweep over k leaves (and one run of 10,240), the Motes demo.
`inputs`            A depth-2 topology of k leaves and its synthetic data
                    (``python -m benchmarks.fleet.inputs K FOLDER``).
`live`              Every node its own ``edge-runtime agent`` process: latency from a
                    reading to the root, and what one agent process costs.
`dtype`             float32 against float64 snapshots on the wire, offline.
`report_section`    The Markdown of section (g) and issue 9's Done-when checks.
`plot`              ``fleet.png``: traffic per reading and wall time against k.
==================  ====================================================================

Subprocesses (a command with a time limit, CPU and memory samples, stopping a process
group) are `benchmarks.processes`, shared by every benchmark.

The package imports none of its modules, so ``python -m benchmarks.fleet.inputs`` runs
its module once.
"""

__all__: list[str] = []
