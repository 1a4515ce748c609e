"""Connection settings shared by every agent: every timeout, bound and cadence, named."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AgentSettings"]


@dataclass(frozen=True)
class AgentSettings:
    """How an agent talks to its broker.

    Parameters
    ----------
    host, port : str, int
        The MQTT broker (default ``127.0.0.1:1883``).
    keepalive_s : int
        MQTT keepalive in seconds; the broker publishes the Last Will after 1.5x this
        without traffic. Default 10.
    timeout_s : float
        Default time limit, in seconds, for connect, subscribe and publish. Default 10.
    reconnect_min_s, reconnect_max_s : float
        Bounds of the jittered exponential backoff between connection attempts, seconds.
        Defaults 0.2 and 5.
    status_interval_s : float
        Least time, in seconds, between two JSON status documents. Default 1.
    offload_min_cells : int
        Merges and block updates touching at least this many matrix cells
        (``n_features * (rank + block_size)``) run in a worker thread so the event loop
        keeps draining the broker's queue. Default 200_000.
    max_payload_bytes : int
        Largest payload accepted on a subscribed topic, bytes. Default 4 MiB.
    qos : int
        MQTT QoS of every subscription and publish. Default 1.
    """

    host: str = "127.0.0.1"
    port: int = 1883
    keepalive_s: int = 10
    timeout_s: float = 10.0
    reconnect_min_s: float = 0.2
    reconnect_max_s: float = 5.0
    status_interval_s: float = 1.0
    offload_min_cells: int = 200_000
    max_payload_bytes: int = 4 * 1024 * 1024
    qos: int = 1
