"""Benchmark (g), the runtime at fleet sizes over MQTT (``scaling``, ``live``, ``dtype``,
``report_section``, ``plot``; inputs from ``inputs``), and the churn and membership
benchmarks (``churn``, ``churn_run``, ``membership``). Imports none of its modules."""

__all__: list[str] = []
