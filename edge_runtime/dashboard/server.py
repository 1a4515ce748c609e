"""The dashboard's HTTP server (aiohttp, the optional extra ``dashboard``).

Routes: ``/`` the page (`edge_runtime.dashboard.page`), ``/state.json`` the current
`DashboardState.snapshot`, ``/events`` server-sent events: one ``data:`` line of the same
JSON at once, then at each change and at least every `TICK_S` seconds (liveness moves
with time). Each event stream is bounded: at most `MAX_STREAMS` at a time (more get 503)
and `STREAM_LIFETIME_S` seconds each, after which the browser's ``EventSource``
reconnects by itself (``retry:`` `RETRY_MS`).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable

import structlog
from aiohttp import web

from edge_runtime.aio import wait_or_cancel
from edge_runtime.dashboard.follower import Follower
from edge_runtime.dashboard.page import page_with
from edge_runtime.dashboard.state import DashboardState
from edge_runtime.monitor import STALE_AFTER_S
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology

__all__ = ["MAX_STREAMS", "STREAM_LIFETIME_S", "TICK_S", "make_app", "serve_dashboard"]

TICK_S = 1.0
"""Longest time between two events of a stream."""

MAX_STREAMS = 32
"""Event streams served at once."""

STREAM_LIFETIME_S = 600.0
"""Seconds an event stream lasts before the browser reconnects."""

RETRY_MS = 1000
"""Reconnection delay the page's EventSource is told, milliseconds."""

log = structlog.get_logger("edge_runtime.dashboard")

_STATE_KEY = web.AppKey("state", DashboardState)
_FOLLOWER_KEY = web.AppKey("follower", Follower)
_STREAMS_KEY = web.AppKey("streams", set)


def _snapshot_json(state: DashboardState) -> str:
    return json.dumps(state.snapshot(time.monotonic()), separators=(",", ":"), allow_nan=False)


async def _page(request: web.Request) -> web.Response:
    return web.Response(
        text=page_with(_snapshot_json(request.app[_STATE_KEY])),
        content_type="text/html",
        headers={"Cache-Control": "no-store"},
    )


async def _state(request: web.Request) -> web.Response:
    return web.Response(
        text=_snapshot_json(request.app[_STATE_KEY]),
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


async def _events(request: web.Request) -> web.StreamResponse:
    streams: set[web.StreamResponse] = request.app[_STREAMS_KEY]
    if len(streams) >= MAX_STREAMS:
        raise web.HTTPServiceUnavailable(text=f"at most {MAX_STREAMS} event streams at a time")
    state = request.app[_STATE_KEY]
    follower = request.app[_FOLLOWER_KEY]
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    streams.add(response)
    try:
        await response.write(f"retry: {RETRY_MS}\n\n".encode())
        deadline = time.monotonic() + STREAM_LIFETIME_S
        version = -1
        max_events = math.ceil(STREAM_LIFETIME_S / TICK_S) * 4 + 1
        for _ in range(max_events):  # bounded: ends with the lifetime anyway
            await response.write(f"data: {_snapshot_json(state)}\n\n".encode())
            left = deadline - time.monotonic()
            if left <= 0:
                break
            version = await follower.wait_change(version, min(TICK_S, left))
    except ConnectionResetError:
        pass  # the browser went away
    finally:
        streams.discard(response)
    return response


def make_app(state: DashboardState, follower: Follower) -> web.Application:
    """The aiohttp application serving ``state`` (kept current by ``follower``)."""
    app = web.Application()
    app[_STATE_KEY] = state
    app[_FOLLOWER_KEY] = follower
    app[_STREAMS_KEY] = set()
    app.router.add_get("/", _page)
    app.router.add_get("/state.json", _state)
    app.router.add_get("/events", _events)
    return app


async def serve_dashboard(
    topology: Topology,
    settings: AgentSettings,
    host: str = "127.0.0.1",
    port: int = 8080,
    *,
    stop: asyncio.Event | None = None,
    stale_after_s: float = STALE_AFTER_S,
    on_ready: Callable[[str], None] | None = None,
    on_problem: Callable[[str | None], None] | None = None,
) -> None:
    """Serve the live dashboard of ``topology`` on ``http://host:port/`` until ``stop``.

    Parameters
    ----------
    topology : Topology
    settings : AgentSettings
        The broker to follow (host, port, TLS, credentials, reconnect backoff).
    host, port : str, int
        Where to listen; port 0 picks a free port (``on_ready`` tells which).
    stop : asyncio.Event, optional
        Set it to stop; without one, serves until cancelled.
    stale_after_s : float
        An online node silent this long is shown as stale.
    on_ready : callable, optional
        Called with the page's URL once the server listens.
    on_problem : callable, optional
        Called with one line when the broker connection fails or is lost for a new reason
        (a refused login names the user), and with None once it is back.

    Raises
    ------
    OSError
        If the address cannot be bound.
    """
    stop = stop if stop is not None else asyncio.Event()
    state = DashboardState(
        topology, stale_after_s=stale_after_s, max_payload_bytes=settings.max_payload_bytes
    )
    follower = Follower(state, settings, on_problem)
    runner = web.AppRunner(
        make_app(state, follower), handle_signals=False, access_log=None, shutdown_timeout=1.0
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        addresses = runner.addresses
        bound = addresses[0][1] if addresses else port
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{bound}/"
        log.info("dashboard_listening", url=url)
        if on_ready is not None:
            on_ready(url)
        follow = asyncio.create_task(follower.run(stop), name="dashboard-follower")
        try:
            await stop.wait()
        finally:
            stop.set()
            # not asyncio.wait_for, which on Python 3.11 loses a cancellation of this task
            # that lands as the follower ends (gh-86296) and waits unbounded for a follower
            # that ignores its own; and no suppressed CancelledError, which lost one too
            await wait_or_cancel(follow, settings.timeout_s)
    finally:
        await runner.cleanup()
