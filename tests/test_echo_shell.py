"""The shell's side of the echo check (issue 21): what `Agent.publish_snapshot` and the work
loop tell the core's `EchoTracker`, with a stand-in client (no broker)."""

from __future__ import annotations

import asyncio

import aiomqtt
import pytest

from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.mqtt_ack import backlog
from edge_runtime.settings import AgentSettings
from tests.helpers import tree_topology


class _Client:
    """Publishes succeed after ``delay_s``, or raise ``error``."""

    def __init__(self, error: Exception | None = None, delay_s: float = 0.0) -> None:
        self.error = error
        self.delay_s = delay_s
        self.published: list[str] = []

    async def publish(self, topic: str, payload: bytes, **_: object) -> None:
        await asyncio.sleep(self.delay_s)
        if self.error is not None:
            raise self.error
        self.published.append(topic)


@pytest.fixture(autouse=True)
def _any_payload(monkeypatch: pytest.MonkeyPatch) -> None:
    """The payload's deployment stamp needs a real snapshot; not what is tested here."""
    monkeypatch.setattr(
        "edge_runtime.agents.common.shell.echo.with_deployment", lambda payload, _: payload
    )


def _leaf() -> LeafAgent:
    topology = tree_topology(sites=1, leaves_per_site=1, rank=2, block_size=10)
    return LeafAgent(topology, topology.leaves()[0], AgentSettings(echo_timeout_s=5.0))


async def test_a_publish_that_raises_is_withdrawn_from_the_echo_check() -> None:
    leaf = _leaf()
    echo = leaf.core.echo
    assert echo is not None
    client = _Client(aiomqtt.MqttError("Operation timed out"))
    with pytest.raises(aiomqtt.MqttError):
        await leaf.publish_snapshot(client, b"x", "e", 1)  # type: ignore[arg-type]
    assert (echo.awaiting, echo.failed_publishes) == (0, 1)
    assert echo.echoed("e", 2, 1e9) == [] and echo.expired(1e9) == []
    assert leaf.undelivered == 0


async def test_a_cancelled_publish_is_withdrawn_too() -> None:
    leaf = _leaf()
    echo = leaf.core.echo
    assert echo is not None
    task = asyncio.create_task(leaf.publish_snapshot(_Client(delay_s=10.0), b"x", "e", 1))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert echo.awaiting == 0


async def test_the_echo_clock_starts_at_the_puback() -> None:
    leaf = _leaf()
    echo = leaf.core.echo
    assert echo is not None
    await leaf.publish_snapshot(_Client(delay_s=0.05), b"x", "e", 1)  # type: ignore[arg-type]
    assert echo.awaiting == 1
    assert echo.bound_s == 5.0  # the 50 ms round trip is below the least bound
    assert max(echo._round_trips) >= 0.04  # the PUBACK round trip


def test_the_backlog_of_a_client_that_cannot_say_is_none() -> None:
    assert backlog(object()) == 0  # type: ignore[arg-type]

    class Messages:
        def __len__(self) -> int:
            return 3

    class Client:
        messages = Messages()

    assert backlog(Client()) == 3  # type: ignore[arg-type]
