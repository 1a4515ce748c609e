"""What a Pi pays for one leaf agent: measured natively (`benchmarks.pi_budget.run`), under qemu
(`benchmarks.pi_budget.emulated`), and the floor of a bare MQTT subscriber (`floor`)."""
