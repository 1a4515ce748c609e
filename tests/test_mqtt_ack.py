"""`edge_runtime.mqtt_ack` reaches into aiomqtt's private paho client: fail loudly, naming
the installed aiomqtt version, when a release no longer has what it uses."""

from __future__ import annotations

import asyncio
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import aiomqtt
import pytest

from edge_runtime import mqtt_ack

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
INSTALLED = version("aiomqtt")


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def test_the_installed_aiomqtt_is_within_the_pinned_range() -> None:
    dependencies = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    (pin,) = [d for d in dependencies if d.startswith("aiomqtt")]
    low = re.search(r">=\s*([\d.]+)", pin)
    high = re.search(r"<\s*([\d.]+)", pin)
    assert low and high, f"expected aiomqtt>=X,<Y in pyproject.toml, got {pin!r}"
    assert _release(low.group(1)) <= _release(INSTALLED) < _release(high.group(1)), (
        f"aiomqtt {INSTALLED} is outside the range {pin!r} edge_runtime.mqtt_ack was checked for"
    )


async def test_aiomqtt_keeps_the_paho_client_with_manual_ack() -> None:
    client = aiomqtt.Client("127.0.0.1", 1)  # never connected
    assert hasattr(client, "_client"), (
        f"aiomqtt {INSTALLED}: aiomqtt.Client has no _client (the paho client); "
        "edge_runtime.mqtt_ack needs another way to acknowledge messages manually"
    )
    paho = type(mqtt_ack.paho_client(client))
    missing = [
        name for name in ("manual_ack_set", "ack") if not callable(getattr(paho, name, None))
    ]
    assert not missing, (
        f"aiomqtt {INSTALLED}: its paho client {paho.__module__}.{paho.__qualname__} has no "
        f"{', '.join(missing)}; edge_runtime.mqtt_ack cannot acknowledge messages manually"
    )


async def test_enable_and_ack_call_paho(monkeypatch: pytest.MonkeyPatch) -> None:
    client = aiomqtt.Client("127.0.0.1", 1)
    paho = mqtt_ack.paho_client(client)
    calls: list[tuple[str, tuple[object, ...]]] = []
    monkeypatch.setattr(paho, "manual_ack_set", lambda *a: calls.append(("manual_ack_set", a)))
    monkeypatch.setattr(paho, "ack", lambda *a: calls.append(("ack", a)))
    mqtt_ack.enable_manual_ack(client)
    for mid, qos in ((7, 1), (8, 0), (9, 2)):
        mqtt_ack.ack(client, aiomqtt.Message("t", b"x", qos, False, mid, None))
    assert calls == [("manual_ack_set", (True,)), ("ack", (7, 1)), ("ack", (9, 2))]


async def test_aiomqtt_keeps_the_queue_and_the_disconnection_future_inbox_reads() -> None:
    client = aiomqtt.Client("127.0.0.1", 1)  # never connected
    missing = [name for name in ("_queue", "_disconnected") if not hasattr(client, name)]
    assert not missing, (
        f"aiomqtt {INSTALLED}: aiomqtt.Client has no {', '.join(missing)}; "
        "edge_runtime.mqtt_ack.Inbox needs another way to read the client's messages"
    )


async def test_inbox_gives_the_messages_in_order_then_raises_once_disconnected() -> None:
    client = aiomqtt.Client("127.0.0.1", 1, max_queued_incoming_messages=2)
    messages = [aiomqtt.Message("t", bytes([i]), 1, False, i, None) for i in range(3)]
    inbox = mqtt_ack.Inbox(client)
    client._queue.put_nowait(messages[0])
    assert await inbox.next() is messages[0]  # queued: no wait
    waiting = asyncio.create_task(inbox.next())
    await asyncio.sleep(0)
    assert not waiting.done()
    client._queue.put_nowait(messages[1])  # as aiomqtt's on_message does
    assert await waiting is messages[1]
    waiting = asyncio.create_task(inbox.next())
    await asyncio.sleep(0)
    client._disconnected.set_exception(aiomqtt.MqttError("lost"))  # wakes the waiting one
    with pytest.raises(aiomqtt.MqttError, match="Disconnected during message iteration"):
        await waiting
    client._queue.put_nowait(messages[2])
    with pytest.raises(aiomqtt.MqttError):  # queued after the loss: never given
        await inbox.next()
    inbox.close()
    inbox.close()


async def test_inbox_raises_for_a_loss_while_its_full_queue_is_drained() -> None:
    client = aiomqtt.Client("127.0.0.1", 1, max_queued_incoming_messages=1)
    inbox = mqtt_ack.Inbox(client)
    client._queue.put_nowait(aiomqtt.Message("t", b"x", 1, False, 1, None))
    client._disconnected.set_result(None)  # the queue is full: no marker fits
    with pytest.raises(aiomqtt.MqttError):
        await asyncio.wait_for(inbox.next(), 1.0)
    inbox.close()
