"""A real-time soak (issue 21, item 6): processes, faults every few minutes, RSS and open files.

One command (from the repository root)::

    python -m benchmarks.soak --minutes 35            # the soak of the report
    python -m benchmarks.soak --minutes 3 --fault-every 40 --sample-every 10   # a short try

What runs, as deployed: a private Mosquitto (`edge_runtime.broker.LocalMosquitto` on a free
127.0.0.1 port above 20000, persistence on), and one ``edge-runtime agent`` process per node
of a small tree -- ``root``, one aggregator ``site-a`` and ``--leaves`` leaves, each leaf with
its own ``--state-dir`` (as the systemd unit runs them) -- fed continuously by a publisher in
this process: per leaf one sequenced source (``{"src", "seq", "x"}``, QoS 1, the map form
``replay`` sends) of Motes light rows (48 features, looped), ``--rate`` readings/s per leaf in
messages of ``--batch``. The publisher reconnects after a broker restart and continues its
sequence numbers (readings lost meanwhile show as gaps the leaves time out).

Faults every ``--fault-every`` seconds, in turn: SIGKILL a leaf and start it again (same
command and state directory), restart the broker (SIGTERM, start on the same port; its
persistence keeps the retained messages and sessions), SIGKILL the aggregator and start it
again. One leaf (the last) is never killed: the control.

Every ``--sample-every`` seconds: the resident set and the number of open file descriptors
of every agent and of the broker (`benchmarks.processes.sample_process`); per agent process
(incarnation) the first, last and largest sample, and whether it is flat: the last sample
within 10 % (RSS) and within 2 descriptors (files) of the first sample taken 2 minutes or
more into its life (start-up imports and the first blocks settle first). Also each
process's log lines, and at the end the leaves' confirmations (ingested and durable per
source) against what was sent.

The report: ``SOAK.md`` and ``soak.json`` in ``--out`` (default
``benchmarks/report/longevity/``). The run is bounded: ``--minutes`` plus a minute to stop.
"""

from __future__ import annotations

from benchmarks.soak.cli import main

__all__ = ["main"]
