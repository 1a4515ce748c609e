"""Manual acknowledgement of QoS 1 messages (and the client's backlog): the one place that
reaches into aiomqtt.

An agent acknowledges a QoS 1 message only once it has handled it, so a message received
but not handled when the agent stops is redelivered by the broker to the persistent
session instead of being lost. paho-mqtt offers this (``Client.manual_ack_set`` and
``Client.ack``); aiomqtt 2.5 does not expose it, so these functions use the paho client
aiomqtt keeps in its private attribute ``_client``. `tests/test_mqtt_ack.py` fails,
naming the installed aiomqtt version, when an aiomqtt release no longer has it (the
dependency is pinned to ``aiomqtt>=2.5,<3`` in ``pyproject.toml``).
"""

from __future__ import annotations

from typing import Any

import aiomqtt

__all__ = ["ack", "backlog", "enable_manual_ack", "paho_client"]


def paho_client(client: aiomqtt.Client) -> Any:
    """The paho-mqtt client inside ``client`` (aiomqtt's private ``_client``).

    Raises
    ------
    AttributeError
        If this aiomqtt release keeps no ``_client`` (see the module docstring).
    """
    return client._client


def enable_manual_ack(client: aiomqtt.Client) -> None:
    """Turn automatic acknowledgement off for ``client``: every QoS > 0 message must then
    be acknowledged with `ack` (call before connecting)."""
    paho_client(client).manual_ack_set(True)


def ack(client: aiomqtt.Client, message: aiomqtt.Message) -> None:
    """Acknowledge ``message`` (PUBACK for QoS 1, PUBREC for QoS 2); a QoS 0 message needs
    none and is left alone. Does not wait: the acknowledgement is queued on the connection
    (a connection lost meanwhile makes the broker redeliver the message)."""
    if message.qos > 0:
        paho_client(client).ack(message.mid, message.qos)


def backlog(client: aiomqtt.Client) -> int:
    """Messages the client received and the receive loop has not handled yet (0 when the
    client cannot say): an echo check waits until they are handled, since the echo it
    would report missing may be among them (a loaded process drains its queue late)."""
    try:
        return len(client.messages)
    except (AttributeError, TypeError):
        return 0
