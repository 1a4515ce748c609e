"""The floor under a leaf's CPU per reading: an MQTT subscriber that does nothing else.

``python -m benchmarks.pi_budget.floor PORT``: aiomqtt on 127.0.0.1:PORT, subscribed to
``sensors/#`` at QoS 1 with manual acknowledgement, its messages read through
`edge_runtime.mqtt_ack.Inbox` (both as an agent does), each decoded with
`edge_runtime.wire.decode_readings` and acknowledged, nothing more. Prints ``ready`` once
subscribed; runs until killed. `benchmarks.pi_budget` feeds it exactly what it feeds the
leaf: the leaf's CPU per reading minus this one is what the runtime adds to the MQTT client
it stands on.
"""

from __future__ import annotations

import asyncio
import sys

import aiomqtt

from edge_runtime.mqtt_ack import Inbox, ack, enable_manual_ack
from edge_runtime.wire import decode_readings


async def subscribe(port: int, n_features: int = 48) -> None:
    client = aiomqtt.Client("127.0.0.1", port, identifier="pi-budget-floor", clean_session=False)
    enable_manual_ack(client)
    async with client:
        await client.subscribe("sensors/#", qos=1)
        print("ready", flush=True)
        inbox = Inbox(client)
        while True:
            message = await inbox.next()
            decode_readings(bytes(message.payload), n_features=n_features)  # type: ignore[arg-type]
            ack(client, message)


if __name__ == "__main__":
    asyncio.run(subscribe(int(sys.argv[1])))
