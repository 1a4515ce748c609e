"""Anomaly-detection benchmark: seeded faults injected into Motes light, scored by Q and T^2."""
