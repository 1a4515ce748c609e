"""Months on a Raspberry Pi (issue 21, item 6): a leaf and its aggregator over simulated days.

``python -m benchmarks longevity`` (``--quick --out /tmp/l``: a smoke run of seconds). The REAL
cores -- the `LeafCore` of ``pi-01`` of ``topologies/motes-light.toml`` with checkpointing on, and
the `AggregatorCore` of ``site-a`` fed every snapshot it publishes -- on a virtual clock, driven as
their shells drive them (`benchmarks.longevity.harness`): readings sequenced, screened and applied,
waking the leaf as `wake_on_input` does; each step's actions (`LeafCore.step` in the order of
`TICKS`, `AggregatorCore.step`) carried out by the simulation's executor: checkpoints written by
the real `save_checkpoint` on a real disk (``os.fsync`` counted by a test double), snapshots,
confirmations and status documents counted; then echoes expire and the work loop sleeps until
``next_wakeup``, clamped as it clamps it; snapshots and echoes arrive 5 ms later. Log lines go
through the real limiters (`RejectLog`, `OutageLog` with the agents' backoff). Readings: Motes
light (7712 x 48, lux) in a loop, ``--batch`` rows per message.

Cases of a day: ``steady``; ``outage`` (broker unreachable: nothing is stepped; the leaf
checkpoints as its offline task does, and one with a local source keeps applying readings,
``outage-local``); ``reject`` (every reading outside ``valid_range``). Per simulated day:
tracemalloc current and peak, the checkpoint file's size, bytes written, fsync calls, checkpoints,
log lines, snapshots, confirmations and status documents, and the latency from a reading's arrival
to the confirmation reporting it durable. Report: ``LONGEVITY.md``, ``longevity.json``,
``longevity.png`` in ``--out`` (default ``benchmarks/report/longevity/``).
"""
