"""Benchmark "what a Pi pays": one leaf as deployed, measured natively (issue 24, item 3).

``python -m benchmarks.pi_budget [--out DIR] [--quick] [--start-only] [--no-lean]`` starts a
private Mosquitto (`edge_runtime.broker.LocalMosquitto`, 127.0.0.1) and one
``edge-runtime agent`` process (``python -m edge_runtime.cli agent``, leaf ``leaf-1`` of
``topologies/minimal.toml``, 48 features), feeds readings on its sensor topic
``sensors/leaf-1`` (msgpack, as `edge_runtime.wire.encode_readings` encodes them, QoS 1) and
reads the agent's resident set and CPU time (user + system) with psutil.

The imports and the agent run as on a device: in a lean venv built in a temporary folder
(``pip install`` of the project without extras, with this venv's versions of its
dependencies, pip's cache reused: about 15 s), so without the dev tools and without rich
(which import-linter brings and structlog then imports); ``--no-lean`` uses this venv with
rich hidden instead. Bytecode is written (``PYTHONDONTWRITEBYTECODE`` unset) and every timed
import has one warm-up run before it.

- import time: median wall time of ``python -c 'import edge_runtime.cli.dispatch,
  edge_runtime.cli.parser, edge_runtime.cli.run, edge_runtime.agents.leaf.shell.agent'``
  (what ``edge-runtime agent`` imports for a leaf before it connects) minus
  ``python -c pass``, over 7 runs; beside it numpy's alone, the same after numpy, and the
  third-party imports alone (the floor), each also as CPU time;
- RSS after start: VmRSS 0.5 s after the agent logged ``connected``, beside the VmRSS of
  ``python -c pass``, after numpy, after the third-party imports and after the leaf's;
- CPU per reading at 1, 10 and 100 readings/s: CPU time over the window / readings sent
  (the window includes the agent's idle work: keepalives, timers);
- RSS after 10^5 readings: VmRSS once 10^5 readings were sent (faster than 100/s: at
  ``LONG_RATE``, `BATCH` per message, a rate the leaf keeps up with) and the agent's CPU
  went quiet;
- the floor: the CPU per reading of a bare aiomqtt subscriber that only decodes and
  acknowledges the same 100/s feed (`benchmarks.pi_budget.floor`).

The agent runs with a state directory, as deployed; the readings are a stationary array
of 48 sensors (five common factors plus noise).

Writes ``<out>/pi_budget.md`` (default ``benchmarks/report``); ``--start-only`` prints the
import and start rows only and writes nothing. The aarch64 / armhf columns come from
``benchmarks/report/pi_budget_emulated.json``, written by ``python -m
benchmarks.pi_budget.emulated`` (the same measurements with the agent's Python under qemu
user-mode emulation, `benchmarks.pi_budget.emulated`); emulated RSS and CPU are qemu's.
"""
