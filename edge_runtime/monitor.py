"""Follow the root's global model on ``<prefix>/<root>/model`` (for `run` and `watch`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping

import aiomqtt
import structlog

from edge_runtime.agents.settings import AgentSettings
from edge_runtime.topology import Topology
from edge_runtime.wire import SubspaceMessage, WireError, decode_subspace

__all__ = ["ModelWatcher", "covers", "leaves_reporting"]

log = structlog.get_logger("edge_runtime.monitor")


def leaves_reporting(model: SubspaceMessage | None, expected: Mapping[str, int]) -> int:
    """How many leaves the model covers completely (``provenance[leaf] == expected[leaf]``).

    A leaf expected to contribute 0 samples counts as covered.
    """
    prov = {} if model is None else model.provenance
    return sum(1 for leaf, n in expected.items() if prov.get(leaf, 0) == n)


def covers(model: SubspaceMessage | None, expected: Mapping[str, int]) -> bool:
    """Whether the model covers every leaf's expected samples exactly."""
    return leaves_reporting(model, expected) == len(expected)


class ModelWatcher:
    """Subscribes to the model topic and keeps the latest valid global estimate.

    Parameters
    ----------
    topology : Topology
    settings : AgentSettings
    on_update : callable, optional
        Called with each new `SubspaceMessage` (retained one first).

    Use as ``async with ModelWatcher(...) as watcher`` then `wait_until`.
    """

    def __init__(
        self,
        topology: Topology,
        settings: AgentSettings,
        on_update: Callable[[SubspaceMessage], None] | None = None,
    ) -> None:
        self.topology = topology
        self.settings = settings
        self.on_update = on_update
        self.model: SubspaceMessage | None = None
        self.updates = 0
        self.rejects = 0
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._client: aiomqtt.Client | None = None
        self._subscribed = asyncio.Event()

    async def __aenter__(self) -> ModelWatcher:
        self._client = aiomqtt.Client(**self.settings.client_kwargs())
        await self._client.__aenter__()
        await self._client.subscribe(self.topology.model_topic(), qos=1)
        self._task = asyncio.create_task(self._listen(self._client), name="model-watcher")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._client is not None:
            await self._client.__aexit__(None, None, None)

    async def _listen(self, client: aiomqtt.Client) -> None:
        async for message in client.messages:
            payload = message.payload
            if not payload or not isinstance(payload, bytes | bytearray):
                continue
            try:
                model = decode_subspace(bytes(payload), max_bytes=self.settings.max_payload_bytes)
            except WireError as exc:
                self.rejects += 1
                log.warning("model_rejected", reason=exc.reason, detail=str(exc))
                continue
            async with self._changed:
                self.model = model
                self.updates += 1
                self._changed.notify_all()
            if self.on_update is not None:
                self.on_update(model)

    async def wait_until(
        self, predicate: Callable[[SubspaceMessage | None], bool], timeout_s: float
    ) -> SubspaceMessage | None:
        """Wait until ``predicate(model)`` holds; returns the model.

        Raises
        ------
        TimeoutError
            If it does not hold within ``timeout_s`` seconds.
        """
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: predicate(self.model))
            return self.model
