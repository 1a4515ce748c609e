"""Months on a Raspberry Pi (issue 21, item 6): a leaf and its aggregator over simulated days.

One command (from the repository root)::

    python -m benchmarks.longevity                       # the full run (see --help)
    python -m benchmarks.longevity --quick --out /tmp/l  # a smoke run, seconds

What runs: the REAL cores -- one `LeafCore` (``pi-01`` of ``topologies/motes-light.toml``:
48 features, rank 10, block size 50, ``valid_range`` [0, 2000], its publish policy and the
agents' default settings) with checkpointing on, and one `AggregatorCore` (``site-a``) above it
fed every snapshot the leaf publishes -- on a virtual clock, driven exactly as their shells
drive them (`edge_runtime.agents.leaf.shell.agent.LeafAgent`,
`edge_runtime.agents.aggregator.shell.agent.AggregatorAgent`,
`edge_runtime.agents.common.shell.agent.Agent.work`):

- a readings message is sequenced and screened (`LeafCore.accept_labelled`), its blocks
  applied (`LeafCore.apply`), then the work loop is woken;
- a step is the shell's order: reject-log summaries (`RejectLog.due`), readings released by a
  timed-out gap, a private leaf's flush, the snapshot when due, the checkpoint when due
  (`LeafCore.checkpoint_state`, then the real `edge_runtime.checkpoint.save_checkpoint` into
  a temporary directory on the real disk, then `LeafCore.checkpointed`, or
  `LeafCore.checkpoint_failed` and the shell's 1, 2, 4, ... log rule), the confirmation when
  due; then echo expiry, the status document when due, and a sleep until
  ``next_wakeup`` clamped to the shell's ``[MIN_SLEEP_S, MAX_SLEEP_S]`` (so at least one step
  a second, as the real work loop);
- every snapshot the leaf publishes arrives at the aggregator 5 ms later
  (`AggregatorCore.receive`, then its step), and comes back to the leaf as its echo 5 ms
  later (`EchoTracker.echoed`); the aggregator's own snapshots echo alike.

Nothing sleeps. ``os.fsync`` is replaced by a counting test double for the run (every
``fsync`` the checkpoint code makes is counted; with ``--real-fsync`` it also syncs), and the
bytes each ``save_checkpoint`` writes are summed; the bytes the process caused to be written
to storage (``write_bytes``, `benchmarks.processes.sample_process`) are read per day as a
cross-check. Log lines are what the shells would log at level info and above,
through the real limiters: rejects through `RejectLog` (the leaf's burst
`REJECT_LOG_BURST`, `REJECT_LOG_INTERVAL_S`), checkpoint failures through the shell's
1, 2, 4, ... rule, reconnect attempts through `OutageLog` with the agents' real
`Backoff` (``AgentSettings().reconnect_backoff()``) and `RECONNECT_LOG_INTERVAL_S`.

Readings: the Motes light matrix (7712 x 48, lux) replayed in a loop, ``--batch`` rows per
message (default 64, the replay's batch when it sends as fast as it can; one reading per
message at 1 reading/s, what a simple sensor script does), evenly spaced in time.

Cases (each day of a run is one of):

- ``steady``: readings arrive all day;
- ``outage``: the broker is unreachable for the whole day. ``Agent.run`` serves the work
  loop (``step``) only inside a connection, so nothing is stepped; the shell retries with
  its backoff, and logs per `OutageLog`. For a leaf fed over MQTT nothing arrives either (the
  publisher cannot reach the broker). For a leaf with a *local* source (``source`` in the
  topology: command, file, serial) the source task keeps reading (`LeafSource._read_source`
  runs independently of the connection), so readings are sequenced and applied all day, but
  no checkpoint is written and nothing becomes durable until the broker is back
  (``outage-local``, reported as a finding);
- ``reject``: every reading is outside the sensor's ``valid_range`` (rejected by
  `LeafCore.screen`, logged through `RejectLog`).

Per simulated day: tracemalloc current and peak (peak reset daily), the state on disk (the
checkpoint file's size), bytes written and ``fsync`` calls, checkpoints, log lines, snapshots
(leaf and aggregator), confirmations and status documents published, and the latency from a
reading's arrival to the first confirmation that reports it durable (p50 / p95 / max).

The report goes to ``--out`` (default ``benchmarks/report/longevity/``): ``LONGEVITY.md``,
``longevity.json`` and ``longevity.png`` (with matplotlib).
"""

from __future__ import annotations

from benchmarks.longevity.cli import main
from benchmarks.longevity.simulation import run_days
from benchmarks.longevity.stats import DayStats, LongevityRun

__all__ = ["DayStats", "LongevityRun", "main", "run_days"]
