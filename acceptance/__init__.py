"""The deployment as documented, as a harness shared by the tests and the benchmarks.

Not part of the installed runtime (it is never shipped to a device): a top-level package of
the repository, importable when Python runs from the repository root, as ``pytest`` (its
``pythonpath`` is ``.``) and ``python -m benchmarks`` both do.

- `acceptance.faults`: agent processes by pid, a recording MQTT monitor, an MQTT proxy,
  topologies and the offline model, for tests that inject faults into real processes.
- `acceptance.scenario`: one process per node against a secured Mosquitto, replayed Motes
  light data and a seeded fault schedule, with the checks a run must pass. Used by
  ``tests/test_acceptance.py`` (short form) and ``benchmarks/acceptance.py`` (many seeds).

Neither ``tests/`` nor ``benchmarks/`` imports the other; both import this package.
"""
