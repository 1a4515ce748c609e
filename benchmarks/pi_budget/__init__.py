"""Benchmark "what a Pi pays": one leaf as deployed, measured natively (issue 24, item 3).

``python -m benchmarks.pi_budget [--out DIR] [--quick]`` starts a private Mosquitto
(`edge_runtime.broker.LocalMosquitto`, 127.0.0.1) and one ``edge-runtime agent`` process
(``python -m edge_runtime.cli agent``, leaf ``leaf-1`` of ``topologies/minimal.toml``,
48 features), feeds readings on its sensor topic ``sensors/leaf-1`` (msgpack, as
`edge_runtime.wire.encode_readings` encodes them, QoS 1) and reads the agent's
``/proc/PID/status`` (VmRSS) and ``/proc/PID/stat`` (utime + stime):

- import time: median wall time of ``python -c 'import edge_runtime.cli.dispatch'`` (what
  ``edge-runtime agent`` imports before it runs) minus ``python -c pass``, over 7 runs;
- RSS after start: VmRSS once the agent logged ``connected``;
- CPU per reading at 1, 10 and 100 readings/s: CPU time over the window / readings sent
  (the window includes the agent's idle work: keepalives, timers);
- RSS after 10^5 readings: VmRSS once 10^5 readings were sent (faster than 100/s,
  paced at ``FAST_RATE``) and the agent's CPU went quiet.

Writes ``<out>/pi_budget.md`` (default ``benchmarks/report``). The aarch64 / armhf columns
say "see scripts/test-arm.sh": nothing here runs under emulation.
"""
