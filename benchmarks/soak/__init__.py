"""A real-time soak (issue 21, item 6): processes, faults every few minutes, RSS and open files.

``python -m benchmarks soak --minutes 35`` (the report's soak; ``--minutes 3 --fault-every 40
--sample-every 10``: a short try). As deployed: a private Mosquitto (persistence on, a free port
above 20000) and one ``edge-runtime agent`` process per node of ``root``, ``site-a`` and
``--leaves`` leaves, each leaf with its own ``--state-dir``, fed by a publisher in this process:
per leaf one sequenced source of Motes light rows (looped), ``--rate`` readings/s in messages of
``--batch``, reconnecting after a broker restart and continuing its sequence numbers.

Faults every ``--fault-every`` seconds, in turn: SIGKILL a leaf and start it again (same command
and state directory), restart the broker (its persistence keeps retained messages and sessions),
SIGKILL the aggregator and start it again. The last leaf is never killed: the control.

Every ``--sample-every`` seconds: the RSS and open file descriptors of every agent and of the
broker (`benchmarks.processes.sample_process`); per process (incarnation) the first, last and
largest sample, and whether it is flat: the last sample within 10 % (RSS) and 2 descriptors of
the first one taken 2 minutes or more into its life. Also each node's log lines, and at the end
the leaves' confirmations (ingested and durable) against what was sent. Report: ``SOAK.md`` and
``soak.json`` in ``--out`` (default ``benchmarks/report/longevity/``). ``--io``: one leaf's
``/proc/PID/io``, ``fsync`` calls and checkpoints per day instead (`benchmarks.soak.io_probe`).
"""
