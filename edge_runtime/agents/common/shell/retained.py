"""One retained message, read on a fresh connection: how an agent finds its earlier state.

A restarting leaf reads its own retained snapshot, a FedPower root its last round, a
secure-aggregation site its last slot outcome, before their own connection starts.
"""

from __future__ import annotations

import asyncio

import aiomqtt

from edge_runtime.settings import AgentSettings

__all__ = ["read_retained"]


async def read_retained(settings: AgentSettings, topic: str) -> bytes | None:
    """The retained payload on ``topic``, read on a fresh connection (QoS 1).

    Parameters
    ----------
    settings : AgentSettings
        The broker (`AgentSettings.client_kwargs`) and the wait, ``restore_wait_s`` seconds.
    topic : str
        Topic name (no wildcards).

    Returns
    -------
    bytes or None
        The payload; None when nothing (or an empty payload) is retained there within
        ``settings.restore_wait_s`` seconds, or the broker cannot be reached. Never raises
        for the broker (``aiomqtt.MqttError`` and timeouts give None).
    """
    try:
        async with aiomqtt.Client(**settings.client_kwargs()) as client:
            await client.subscribe(topic, qos=1)
            async with asyncio.timeout(settings.restore_wait_s):
                async for message in client.messages:
                    payload = message.payload
                    if isinstance(payload, bytes | bytearray) and payload:
                        return bytes(payload)
                    return None
    except (TimeoutError, aiomqtt.MqttError):
        pass
    return None
