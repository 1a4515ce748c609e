"""The live benchmark of the secure sum per site (issue 26): `run` (the command, the report)
and `live` (one run against a real Mosquitto)."""
