"""The dashboard's MQTT shell: follow the tree's topics into a `DashboardState`.

One aiomqtt connection subscribed to every node's ``status`` and ``status/detail`` and the
root's model (retained, so a fresh connection gets the whole picture at once); each message
is folded with ``time.monotonic()`` and whether it was retained. A lost connection is retried
with the agents' full-jitter exponential backoff (``AgentSettings.reconnect_min_s`` ..
``reconnect_max_s``) until ``stop`` is set. It does not reuse
`edge_runtime.monitor.ModelWatcher` as a whole because that keeps neither the status
documents nor reconnects; it shares its rules (liveness, `STALE_AFTER_S`, `privacy_of`, the
deployment check, `edge_runtime.monitor.MembershipTracker`) through `DashboardState`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import aiomqtt
import structlog

from edge_runtime.aio import cancel_and_wait
from edge_runtime.dashboard.state import DashboardState
from edge_runtime.monitor import connection_problem
from edge_runtime.settings import AgentSettings

__all__ = ["Follower"]

log = structlog.get_logger("edge_runtime.dashboard")


class Follower:
    """Keeps ``state`` up to date from the broker of ``settings``; `changed` wakes waiters.

    Use ``await follower.run(stop)``; it returns once ``stop`` is set. Why the broker is not
    connected (`edge_runtime.monitor.connection_problem`: a refused login names the user)
    goes to ``state.broker_error`` (on the page and in ``/state.json``) and, when it
    changes, to ``on_problem`` (None once connected again).
    """

    def __init__(
        self,
        state: DashboardState,
        settings: AgentSettings,
        on_problem: Callable[[str | None], None] | None = None,
    ) -> None:
        self.state = state
        self.settings = settings
        self.on_problem = on_problem
        self.connections = 0
        self.failed_attempts = 0
        self.last_error: str | None = None
        self._changed = asyncio.Condition()
        self._backoff = settings.reconnect_backoff()  # delays after failed_attempts

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_change(self, version: int, timeout_s: float) -> int:
        """Wait until the state's version differs from ``version`` or ``timeout_s`` passes;
        return the current version."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s), self._changed:
                await self._changed.wait_for(lambda: self.state.version != version)
        return self.state.version

    async def run(self, stop: asyncio.Event) -> None:
        """Follow until ``stop`` is set, reconnecting after every lost connection."""
        while not stop.is_set():
            try:
                await self._connection(stop)
                self.failed_attempts = 0
            except aiomqtt.MqttError as exc:
                self.last_error = str(exc)
                self.failed_attempts += 1
                problem = connection_problem(exc, self.settings)
                log.info("dashboard_disconnected", error=str(exc), attempt=self.failed_attempts)
                if problem != self.state.broker_error and self.on_problem is not None:
                    self.on_problem(problem)
                self.state.set_connected(False, problem)
            else:
                self.state.set_connected(False, self.state.broker_error)
            await self._notify()
            if stop.is_set():
                break
            # not asyncio.wait_for: on Python 3.11 it loses a cancellation that lands as
            # ``stop`` is set (gh-86296); asyncio.timeout does not
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._backoff.delay_s(self.failed_attempts)):
                    await stop.wait()

    async def _connection(self, stop: asyncio.Event) -> None:
        async with aiomqtt.Client(
            **self.settings.client_kwargs(),
            keepalive=self.settings.keepalive_s,
            max_queued_incoming_messages=self.settings.max_queued_messages,
        ) as client:
            for topic in self.state.topics:
                await client.subscribe(topic, qos=1)
            self.connections += 1
            if self.state.broker_error is not None and self.on_problem is not None:
                self.on_problem(None)
            self.state.set_connected(True)
            await self._notify()
            listen = asyncio.create_task(self._listen(client))
            stopped = asyncio.create_task(stop.wait())
            try:
                await asyncio.wait({listen, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()  # ended even if listen's error or a cancellation comes first
                await cancel_and_wait(listen)
                await cancel_and_wait(stopped)
            if listen.done() and not listen.cancelled() and listen.exception() is not None:
                raise listen.exception()  # type: ignore[misc]

    async def _listen(self, client: aiomqtt.Client) -> None:
        async for message in client.messages:
            payload = message.payload
            if not isinstance(payload, bytes | bytearray):
                continue
            retained, now = bool(message.retain), time.monotonic()
            if self.state.fold(str(message.topic), bytes(payload), now, retained=retained):
                await self._notify()
