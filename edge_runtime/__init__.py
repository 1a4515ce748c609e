"""edge_runtime: asyncio MQTT runtime for federated, streaming PCA (FPCA-Edge) on IoT devices."""

__version__ = "0.1.0"
