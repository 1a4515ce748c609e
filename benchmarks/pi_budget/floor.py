"""The floor under a leaf's CPU per reading (``python -m benchmarks.pi_budget.floor PORT``): an
aiomqtt subscriber to ``sensors/#`` at QoS 1 on 127.0.0.1:PORT that only reads through
`edge_runtime.mqtt_ack.Inbox`, decodes and acknowledges, as an agent does. Prints ``ready``."""

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
