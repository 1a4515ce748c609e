"""What every agent shares: connection lifecycle, reconnects, status topics, counters.

An agent is an async context manager (``async with LeafAgent(...) as agent``) whose
lifecycle is an explicit `AgentState`. Inside, one connection at a time: a *fresh*
``aiomqtt.Client`` per attempt (re-entering one client after a drop can report a
connection that is not there, measured with aiomqtt 2.5 and Mosquitto 2.0), jittered
exponential backoff between attempts, and per connection one ``asyncio.TaskGroup``
with two named tasks: ``receive`` (drain the broker, never blocked by numerics) and
``work`` (asks the node's synchronous core what to publish, publishes it, and sleeps until
the core's next decision time or new input). Every decision — when a snapshot, a status
document or a confirmation goes out, when a missing echo counts as undelivered — is the
core's (`edge_runtime.agents.common.core.node`); the shell only moves bytes. Leaving the
context publishes the final state and the retained ``offline`` status, then disconnects.
The state and counters are in `edge_runtime.agents.common.shell.lifecycle`.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import re
import time
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

import aiomqtt
import structlog

from edge_runtime.agents.common.core.node import NodeCore
from edge_runtime.agents.common.core.reject_log import REJECT_LOG_INTERVAL_S, RejectLog
from edge_runtime.agents.common.shell.config_watch import ConfigWatch
from edge_runtime.agents.common.shell.core_shell import run_numerics, status_document
from edge_runtime.agents.common.shell.discovery import AgentDiscovery, remove_discovery
from edge_runtime.agents.common.shell.echo import SnapshotEcho
from edge_runtime.agents.common.shell.lifecycle import AgentState, AgentStats
from edge_runtime.agents.common.shell.retained import read_retained
from edge_runtime.aio import cancel_and_wait
from edge_runtime.backoff import OutageLog
from edge_runtime.mqtt_ack import Inbox, ack, enable_manual_ack
from edge_runtime.mqtt_ack import backlog as _backlog
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology
from edge_runtime.wire import (
    PrivacyStatus,
    StatusDetail,
    encode_status,
)

__all__ = ["Agent", "AgentState", "AgentStats", "remove_discovery"]

T = TypeVar("T")

MIN_SLEEP_S = 0.002  # least pause of the work loop, seconds (no busy loop on a due decision)
MAX_SLEEP_S = 1.0  # most, seconds (the stop flag and gap timeouts are checked this often)
RECONNECT_LOG_INTERVAL_S = 300.0  # during an outage, a line at least this often (seconds)
ONLINE = b"online"
OFFLINE = b"offline"


class Agent(abc.ABC):
    """Base class of `LeafAgent` and `AggregatorAgent`.

    Parameters
    ----------
    topology : Topology
        The aggregation tree; gives this node's configuration and topic names.
    node_id : str
        This node's id in ``topology``.
    settings : AgentSettings
        Broker address, timeouts and bounds.

    Attributes
    ----------
    state : AgentState
        ``UNOPENED`` until entered, ``RUNNING`` inside ``async with``, then ``CLOSED``.
    stats : AgentStats
        Messages and bytes published and received, duplicates, reconnects.
    connected : asyncio.Event
        Set while subscribed and announced ``online``; cleared on a lost connection.
    offline : asyncio.Event
        The opposite of `connected`: set while it is clear.
    failed_attempts : int
        Failed connection attempts since the last connection.
    last_connect_error : str or None
        The error of the last failed attempt (None before any).
    backoff : Backoff
        Delays between connection attempts: full jitter in ``[reconnect_min_s,
        min(reconnect_max_s, reconnect_min_s * 2**k)]`` seconds after ``k`` failures, from
        this agent's own random generator.

    Raises
    ------
    KeyError
        If ``node_id`` is not in the topology.
    ValueError
        If ``settings.reconnect_min_s`` is not a positive finite number of seconds.
    """

    role: str = "agent"
    reject_log_burst: int = 1
    """``message_rejected`` lines per reason per `REJECT_LOG_INTERVAL_S` (`reject`)."""

    def __init__(self, topology: Topology, node_id: str, settings: AgentSettings) -> None:
        if node_id not in topology.nodes:
            raise KeyError(f"node {node_id!r} is not in topology {topology.name!r}")
        self.topology = topology
        self.node_id = node_id
        self.config = topology.nodes[node_id]
        self.settings = settings
        self.state = AgentState.UNOPENED
        self.stats = AgentStats()
        self.connected = asyncio.Event()
        self.offline = asyncio.Event()
        self.offline.set()
        self.log = structlog.get_logger("edge_runtime.agent").bind(node=node_id, role=self.role)
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()  # the core's: one caller at a time (`_numerics`)
        self._task: asyncio.Task[None] | None = None
        self._started = time.monotonic()
        self._own_topic = topology.subspace_topic(node_id)
        self._wake = asyncio.Event()
        # the work loop's sleep while it sleeps: its timeout and when it began (monotonic s)
        self._sleep: tuple[asyncio.Timeout, float] | None = None
        self._reject_log = RejectLog(self.reject_log_burst, REJECT_LOG_INTERVAL_S)
        self.failed_attempts = 0  # failed connection attempts since the last connection
        # delays between connection attempts: full jitter, from this agent's own generator
        self.backoff = settings.reconnect_backoff()
        self.last_connect_error: str | None = None
        self._served = False  # the current connection attempt got connected
        self.discovery = AgentDiscovery(topology, node_id, settings.discovery_prefix)
        self.config_watch = ConfigWatch(topology.config_topic())  # the deployed topology
        self.snapshot_echo = SnapshotEcho(
            lambda: self.core.echo,
            topic=self._own_topic,
            deployment=topology.name,
            max_payload_bytes=settings.max_payload_bytes,
            publish=self.publish,
            log=self.log,
        )

    @property
    @abc.abstractmethod
    def core(self) -> NodeCore:
        """The node's synchronous core (state and decisions)."""

    @property
    def rejects(self) -> Counter[str]:
        """Rejected inbound messages by reason."""
        return self.core.rejects

    @property
    def undelivered(self) -> int:
        """Published snapshots that never came back from the broker (`EchoTracker`)."""
        return self.core.undelivered

    # ----------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> Agent:
        if self.state is not AgentState.UNOPENED:
            raise RuntimeError(
                f"agent {self.node_id!r} is {self.state.value}; an agent can be entered once"
            )
        self.state = AgentState.RUNNING
        self._task = asyncio.create_task(self.run(), name=f"agent:{self.node_id}")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def stop(self) -> None:
        """Ask the agent to publish its final state and disconnect (non-blocking).

        Returns at once; `aclose` (or leaving ``async with``) waits for the end. A
        disconnected agent stops without publishing.
        """
        self._stop.set()

    async def aclose(self) -> None:
        """Stop, wait for the final publish and disconnect; idempotent.

        Bounded: after ``3 * settings.timeout_s`` seconds the agent's task is cancelled
        (logged as ``shutdown_timed_out``; the retained Last Will ``offline`` then tells
        the others). Never raises for the broker; sets `state` to ``CLOSED``.
        """
        self._stop.set()
        task = self._task
        if task is not None and not task.done():
            timeout_s = 3 * self.settings.timeout_s
            # asyncio.wait, not asyncio.timeout: this runs when leaving ``async with`` in a
            # task being cancelled, where Python 3.11.2 raises the expiry as CancelledError
            # and the agent's task was left running. A cancellation of this caller does not
            # reach the agent's task (as with the shield before): it raises here.
            await asyncio.wait([task], timeout=timeout_s)
            if task.done():
                task.result()  # what the agent's task ended with, as before
            else:
                self.log.error("shutdown_timed_out", timeout_s=timeout_s)
                await cancel_and_wait(task)
        self.state = AgentState.CLOSED

    async def wait_connected(self, timeout_s: float) -> None:
        """Wait until subscribed and announced online (`connected` is set).

        Parameters
        ----------
        timeout_s : float
            Most seconds to wait.

        Raises
        ------
        TimeoutError
            If that takes longer than ``timeout_s`` seconds.
        """
        async with asyncio.timeout(timeout_s):
            await self.connected.wait()

    # ------------------------------------------------------------------ role API
    @abc.abstractmethod
    def subscriptions(self) -> list[str]:
        """Topic filters this agent subscribes to."""

    @abc.abstractmethod
    async def handle(self, message: aiomqtt.Message) -> None:
        """Process one inbound message (must not raise for bad input: count it)."""

    @abc.abstractmethod
    async def step(self, client: aiomqtt.Client, now: float) -> None:
        """Carry out what the core decides at ``now`` (publish snapshots, confirmations)."""

    @abc.abstractmethod
    async def on_connected(self, client: aiomqtt.Client) -> None:
        """Called after subscribing on every (re)connection: re-publish the latest state."""

    @abc.abstractmethod
    async def on_shutdown(self, client: aiomqtt.Client) -> None:
        """Publish the final state before disconnecting."""

    @abc.abstractmethod
    def status_detail(self) -> StatusDetail:
        """The JSON status document of this node."""

    # ------------------------------------------------------------------ internals
    def client_id(self) -> str:
        """Fixed MQTT client id of this node, ``edge-<name>-<prefix>-<node id>``.

        The topology's name (characters other than letters, digits, ``_`` and ``-``
        replaced by ``-``) keeps two deployments on one broker from taking over each
        other's sessions even when they share the prefix and node ids; ``/`` of the prefix
        becomes ``-``.

        Returns
        -------
        str
        """
        name = re.sub(r"[^A-Za-z0-9_-]", "-", self.topology.name)
        return f"edge-{name}-{self.topology.prefix.replace('/', '-')}-{self.node_id}"

    def _make_client(self) -> aiomqtt.Client:
        will = aiomqtt.Will(
            self.topology.status_topic(self.node_id), OFFLINE, qos=self.settings.qos, retain=True
        )
        client = aiomqtt.Client(
            **self.settings.client_kwargs(),
            identifier=self.client_id(),
            will=will,
            keepalive=self.settings.keepalive_s,
            clean_session=not self.settings.persistent_session,
            max_queued_incoming_messages=self.settings.max_queued_messages,
        )
        # Acknowledge a QoS 1 message only once it has been handled: a message received
        # but not handled when the agent stops is redelivered to the persistent session.
        enable_manual_ack(client)
        return client

    def reject(self, reason: str, topic: str, detail: str) -> None:
        """Count and log one rejected inbound message.

        Every rejection is counted in ``core.rejects[reason]`` (reported in the status
        document); at most `reject_log_burst` (1) ``message_rejected`` lines per reason per
        ``REJECT_LOG_INTERVAL_S`` (10) seconds are logged (`RejectLog`).

        Parameters
        ----------
        reason : str
            Short reason key, e.g. a `WireError` reason.
        topic : str
            Topic the message came on.
        detail : str
            One line saying what was wrong.
        """
        self.core.rejects[reason] += 1
        if not self._reject_log.allow(reason, time.monotonic())[0]:
            return
        self.log.warning(
            "message_rejected",
            reason=reason,
            topic=topic,
            detail=detail,
            count=self.core.rejects[reason],
        )

    async def read_retained(self, topic: str) -> bytes | None:
        """The retained payload on ``topic`` or None, read on a fresh connection within
        ``settings.restore_wait_s`` seconds (`edge_runtime.agents.common.shell.retained`)."""
        return await read_retained(self.settings, topic)

    async def publish(
        self,
        client: aiomqtt.Client,
        topic: str,
        payload: bytes,
        *,
        retain: bool = True,
        qos: int | None = None,
    ) -> None:
        """Publish one message and count it in `stats` (messages and payload bytes).

        Parameters
        ----------
        client : aiomqtt.Client
            The connected client of this connection.
        topic : str
            Topic name (no wildcards).
        payload : bytes
            The message body.
        retain : bool, default True
            Ask the broker to keep the message as the topic's retained message (every
            state and status topic of the tree is retained).
        qos : int, optional
            MQTT QoS 0, 1 or 2; default ``settings.qos`` (1: the call returns once the
            broker's PUBACK arrived, which proves neither storage nor delivery, see
            `publish_snapshot`).

        Raises
        ------
        aiomqtt.MqttError
            If the publish is not acknowledged within ``settings.timeout_s`` seconds
            ("Operation timed out"; the outcome is unknown, the message may still arrive)
            or the connection is lost; nothing is counted then. Inside `run` this ends the
            connection and the agent reconnects (after a `backoff` delay) and re-publishes
            its latest state in `on_connected`: snapshots are idempotent.
        """
        await client.publish(
            topic,
            payload,
            qos=self.settings.qos if qos is None else qos,
            retain=retain,
            timeout=self.settings.timeout_s,
        )
        self.stats.messages_published += 1
        self.stats.bytes_published += len(payload)

    async def publish_snapshot(
        self, client: aiomqtt.Client, payload: bytes, epoch: str, seq: int
    ) -> None:
        """Publish this node's snapshot (retained) and expect its echo (`SnapshotEcho.publish`:
        a PUBACK does not prove delivery; one that never comes back is logged as
        ``publish_not_delivered`` and counted ``undelivered``).

        Raises
        ------
        aiomqtt.MqttError
            As `publish`.
        """
        await self.snapshot_echo.publish(client, payload, epoch, seq)

    async def publish_status(self, client: aiomqtt.Client, *, force: bool = False) -> None:
        """Publish the JSON status document on ``<prefix>/<path>/status/detail`` (retained).

        Published when the core's `StatusPolicy` says so (a change of health, at most every
        ``settings.status_min_interval_s`` seconds, or the heartbeat every
        ``settings.status_heartbeat_s``), or now with ``force``.

        Raises
        ------
        aiomqtt.MqttError
            As `publish`.
        """
        now = time.monotonic()
        if not force and not self.core.status_due(now):
            return
        self.core.status_sent(now)
        await self.publish(
            client,
            self.topology.status_detail_topic(self.node_id),
            encode_status(self.status_detail()),
        )

    async def publish_discovery(self, client: aiomqtt.Client) -> None:
        """Publish this node's Home Assistant discovery configs, retained.

        The messages of `edge_runtime.homeassistant.discovery_messages` under
        ``settings.discovery_prefix``; nothing when that is None.

        Raises
        ------
        aiomqtt.MqttError
            As `publish` (the configs are published again on the next connection).
        """
        discovery = self.discovery
        discovery.due = False
        if not discovery.messages:
            return
        for topic, payload in discovery.messages:
            await self.publish(client, topic, payload, retain=True)
        discovery.published += 1
        self.log.debug("discovery_published", messages=len(discovery.messages))

    @property
    def discovery_published(self) -> int:
        """Times this agent published its Home Assistant discovery configs."""
        return self.discovery.published

    def wake(self) -> None:
        """New input: let the work loop ask the core again."""
        self._wake.set()

    def wake_on_input(self) -> None:
        """New input the core has taken: let the work loop ask the core again when that
        may change a decision before the loop wakes by itself.

        The loop runs at once when it is not sleeping, or when `_input_decisive` says the
        input may be decisive in a way the core's `next_wakeup` cannot foresee; otherwise
        its sleep is moved to the core's new `next_wakeup` (earlier or later, but between
        ``MIN_SLEEP_S`` after now and ``MAX_SLEEP_S`` after the sleep began). A message that
        changes no decision thus costs no pass of the loop (one pass per message was a
        tenth of a leaf's CPU at 10 messages/s)."""
        sleep = self._sleep
        if sleep is None or self._input_decisive():
            self._wake.set()
            return
        timeout, began = sleep
        if timeout.expired():  # it ends now: the loop runs and asks the core anyway
            return
        now = time.monotonic()
        when = min(self.core.next_wakeup(now), began + MAX_SLEEP_S)
        if when <= now + MIN_SLEEP_S:
            self._wake.set()
        else:  # the timeout runs on the event loop's clock
            timeout.reschedule(asyncio.get_running_loop().time() + (when - now))

    def _input_decisive(self) -> bool:
        """Whether new input may change a decision now in a way `NodeCore.next_wakeup`
        does not foresee (`NodeCore.input_decisive`)."""
        return self.core.input_decisive()

    async def work(self, client: aiomqtt.Client) -> None:
        """The ``work`` task of a connection: ask the core, act, then sleep until its next
        decision time or new input (between ``MIN_SLEEP_S`` and ``MAX_SLEEP_S`` seconds),
        until `stop`. An exception of `step` other than ``aiomqtt.MqttError`` is counted as
        ``internal_error`` and logged, never raised.

        Raises
        ------
        aiomqtt.MqttError
            When the connection is lost or a publish times out (ends the connection).
        """
        while not self._stop.is_set():  # also when a cancellation is lost (see _serve_once)
            self._wake.clear()
            now = time.monotonic()
            if self.discovery.due:
                await self.publish_discovery(client)
            try:
                await self.step(client, now)
            except aiomqtt.MqttError:
                raise
            except Exception as exc:  # a bug must not take the agent down: count it
                self.core.rejects["internal_error"] += 1
                self.log.exception("step_failed", error=str(exc))
            echo = self.core.echo
            if echo is not None and not _backlog(client):  # the echo may wait in the queue
                for seq in echo.expired(now):
                    self.snapshot_echo.report_undelivered(seq)
            await self.publish_status(client)
            delay = self.core.next_wakeup(time.monotonic()) - time.monotonic()
            delay = min(max(delay, MIN_SLEEP_S), MAX_SLEEP_S)
            try:
                async with asyncio.timeout(delay) as timeout:
                    self._sleep = (timeout, time.monotonic())  # `wake_on_input` may move it
                    await self._wake.wait()
            except TimeoutError:  # woke this late: the event loop's lag, for the echo check
                if echo is not None:
                    loop = asyncio.get_running_loop()
                    echo.load(loop.time() - (timeout.when() or loop.time()))
            finally:
                self._sleep = None

    def _set_connected(self, connected: bool) -> None:
        """Set `connected` and clear `offline`, or the other way round."""
        on, off = (self.connected, self.offline) if connected else (self.offline, self.connected)
        on.set()
        off.clear()

    async def _numerics(self, fn: Callable[[], T]) -> T:
        """``fn()`` under the core's lock, in a worker thread when large (`run_numerics`)."""
        return await run_numerics(
            self._lock, self.core.cells, self.settings.offload_min_cells, fn
        )

    def status_document(
        self,
        *,
        rank: int,
        n_samples: int,
        seq: int,
        epoch: str,
        extra: dict[str, object],
        privacy: PrivacyStatus | None = None,
    ) -> StatusDetail:
        """`status_document` of this agent's core (online while not stopping)."""
        return status_document(
            self.core,
            node_id=self.node_id,
            role=self.role,
            online=not self._stop.is_set(),
            uptime_s=self.uptime_s(),
            rank=rank,
            n_samples=n_samples,
            seq=seq,
            epoch=epoch,
            extra=extra,
            privacy=privacy,
        )

    def uptime_s(self) -> float:
        """Seconds since this agent object was created."""
        return time.monotonic() - self._started

    async def prepare(self) -> None:
        """Called once by `run` before the first connection (a leaf restores its state
        here); does nothing by default."""
        return None

    async def run(self) -> None:
        """Connect, serve and reconnect until `stop` is called (the task `__aenter__` starts).

        Each connection is a fresh client; a lost one (any ``aiomqtt.MqttError``) counts in
        ``stats.reconnects`` and `failed_attempts`, and the next attempt waits a `backoff`
        delay (`stop` interrupts the wait). There is no deadline: an agent waits for its
        broker as long as it runs. Returns after the final state and ``offline`` are
        published, or at once when stopped while disconnected.

        Logging stays journal-friendly during an outage: at most one line per failed
        attempt, and fewer: the first failure, then failures number 2, 4, 8, ... (or when
        the error changes, or `RECONNECT_LOG_INTERVAL_S` after the last line), each with
        the count ``attempts``; the others at debug level. The backoff starts again from
        its minimum after every successful connection.
        """
        await self.prepare()
        outage = OutageLog(RECONNECT_LOG_INTERVAL_S)
        while not self._stop.is_set():
            self._served = False
            try:
                await self._serve_once()
                return
            except* aiomqtt.MqttError as group:
                self._set_connected(False)
                self.stats.reconnects += 1
                if self._served:  # lost after being connected: a new outage
                    self.failed_attempts = 0
                    outage.new_outage()
                delay = self.backoff.delay_s(self.failed_attempts)
                self.failed_attempts += 1
                error = str(group.exceptions[0])
                self.last_connect_error = error
                n = self.failed_attempts
                loud = outage.loud(n, error, time.monotonic())
                log = self.log.warning if loud else self.log.debug
                log("connection_lost", error=error, attempts=n, retry_in_s=round(delay, 2))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stop.wait()
        self.log.debug("stopped_while_disconnected", attempts=self.failed_attempts)

    async def _serve_once(self) -> None:
        async with self._make_client() as client:
            topics = [*self.subscriptions(), self._own_topic, self.config_watch.topic]
            if self.discovery.status_topic is not None:
                topics.append(self.discovery.status_topic)
            for topic in topics:
                await client.subscribe(topic, qos=self.settings.qos)
            await self.publish(client, self.topology.status_topic(self.node_id), ONLINE)
            await self.publish_discovery(client)  # after ONLINE: entities start available
            self.core.connected()
            if self.core.echo is not None:  # the time disconnected is no echo latency
                self.core.echo.connected(time.monotonic())
            await self.on_connected(client)
            await self.publish_status(client)  # a restore or a reconnect is news
            self._set_connected(True)
            self._served = True
            self.log.info(
                "connected",
                host=self.settings.host,
                port=self.settings.port,
                **({"after_attempts": self.failed_attempts} if self.failed_attempts else {}),
            )
            self.failed_attempts = 0
            async with asyncio.TaskGroup() as group:
                receiver = group.create_task(self._receive(client), name=f"{self.node_id}:receive")
                worker = group.create_task(self.work(client), name=f"{self.node_id}:work")
                stopper = group.create_task(self._stop.wait(), name=f"{self.node_id}:stop")
                await stopper
                # The loops also check the stop flag: on Python 3.11 a cancellation that
                # lands as an awaited publish completes can be swallowed by
                # asyncio.wait_for (inside aiomqtt), so cancel() alone may not end them.
                receiver.cancel()
                worker.cancel()
            await self.on_shutdown(client)
            await self.publish_status(client, force=True)
            await self.publish(client, self.topology.status_topic(self.node_id), OFFLINE)
            self._set_connected(False)
            self.log.info("disconnected")

    async def _receive(self, client: aiomqtt.Client) -> None:
        inbox = Inbox(client)  # ``client.messages`` without a task per message
        try:
            while True:
                message = await inbox.next()
                self.stats.messages_received += 1
                topic = str(message.topic)
                try:
                    if topic == self._own_topic:
                        self.snapshot_echo.on_echo(message.payload)
                    elif topic == self.config_watch.topic:
                        await self.config_watch.receive(self, message.payload)
                    elif topic == self.discovery.status_topic:
                        if self.discovery.on_status(message.payload):
                            self.wake()
                    else:
                        await self.handle(message)
                except Exception as exc:  # a bug must not take the agent down: count it
                    self.core.rejects["internal_error"] += 1
                    self.log.exception("handler_failed", topic=topic, error=str(exc))
                ack(client, message)
        finally:
            inbox.close()
