"""The simulation's fixed numbers: the virtual link and clock, the leaf and aggregator
of the topology, the default report directory, the limits of issue 21 and event kinds."""

from __future__ import annotations

from pathlib import Path

DAY_S = 86_400.0
LINK_S = 0.005  # broker delivery delay of a snapshot, and of its echo, seconds
WALL_ORIGIN = 1.78e9  # wall-clock seconds of virtual time 0 (message timestamps)
ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "topologies" / "motes-light.toml"
LEAF, AGGREGATOR = "pi-01", "site-a"
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "report" / "longevity"

# Done-when of issue 21 per device-day at 100 readings/s, default settings
MAX_BYTES_PER_DAY = 50e6
MAX_FSYNCS_PER_DAY = 3000

# event kinds (ordered: at one instant readings arrive before the work loop runs)
READ, SNAP, ECHO, WAKE_AGG, WAKE_LEAF = range(5)
