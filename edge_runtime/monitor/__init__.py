"""Follow the tree from outside: the root's global model on ``<prefix>/<root>/model`` and
the nodes' liveness (for ``run``, ``watch`` and the dashboard).

`ModelWatcher` keeps the latest valid model (and, optionally, every node's status);
`liveness` is the one rule for "online" / "stale" / "offline" / "unknown" (the dashboard's
too); `wait_online` waits for nodes' retained ``online`` status; `login_refused` and
`connection_problem` say in one line what went wrong with a broker connection (the
dashboard's and ``watch``'s words). `edge_runtime.monitor.membership` reads the
aggregators' children (joined, forgotten, quarantined) from their status documents.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable, Mapping

import aiomqtt
import structlog
from aiomqtt.exceptions import MqttConnectError

from edge_runtime.aio import cancel_and_wait
from edge_runtime.monitor.membership import Membership as Membership
from edge_runtime.monitor.membership import (
    MembershipEvent,
    MembershipTracker,
)
from edge_runtime.monitor.membership import membership_of as membership_of
from edge_runtime.monitor.membership import quarantined_children as quarantined_children
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology
from edge_runtime.wire import (
    PrivacyParams,
    SubspaceMessage,
    WireError,
    decode_status,
    decode_subspace,
)

__all__: list[str] = []  # internal to the runtime: no user surface

STALE_AFTER_S = 75.0
"""Seconds of silence after which an online node is shown as stale (2.5 status heartbeats)."""

LIVENESS: tuple[str, ...] = ("online", "stale", "offline", "unknown")
"""The states a node is shown in (`liveness`)."""

log = structlog.get_logger("edge_runtime.monitor")

_REFUSED_CODES = frozenset({4, 5, 134, 135})  # CONNACK: bad user name or password, not authorised
_REFUSED_TEXT = re.compile(r"\[code:13[45]\]|bad user ?name or password|not authori[sz]ed", re.I)


def login_refused(error: BaseException | str | None) -> bool:
    """Whether a connection error is the broker refusing the login (CONNACK "bad user name
    or password" / "not authorised": MQTT 3.1.1 codes 4 and 5, MQTT 5 codes 134 and 135).
    The broker was reached; the credentials are what is wrong.

    Parameters
    ----------
    error : BaseException, str or None
        An ``aiomqtt`` error, or its text (an agent keeps only ``str(error)``).
    """
    if isinstance(error, MqttConnectError):
        rc = error.rc
        return int(getattr(rc, "value", rc)) in _REFUSED_CODES  # type: ignore[arg-type]
    return error is not None and bool(_REFUSED_TEXT.search(str(error)))


def connection_problem(error: BaseException | str, settings: AgentSettings) -> str:
    """One line for a broker connection that failed or was lost.

    A refused login names the user (``settings.username``), or asks for one; a connection
    lost after it was up, with a user name, says that with ``use_username_as_clientid``
    (broker_config/network.conf, secured.conf) a second client logging in as the same user
    takes the connection over: each tool needs its own user.
    """
    user = settings.username
    where = f"{settings.host}:{settings.port}"
    if login_refused(error):
        if user is None:
            return (
                f"the broker at {where} requires a user name and password ({error}): "
                "pass --username and --password-file"
            )
        return (
            f"the broker at {where} refused user {user!r} ({error}): a wrong password, or no "
            "such user in its password_file (check --password-file)"
        )
    line = f"lost the connection to the broker at {where} ({error})"
    if user is not None:
        line += (
            f"; if another client logs in as {user!r} too, the broker (use_username_as_clientid)"
            " lets only one of them stay: give each tool its own user (devices/INSTALL.md, "
            "step 8)"
        )
    return line


def liveness(
    online: bool | None, last_heard: float | None, now: float, stale_after_s: float
) -> str:
    """A node's state, one of `LIVENESS`.

    Parameters
    ----------
    online : bool or None
        What its retained ``status`` says (``online`` True, ``offline`` or its Last Will
        False); None when nothing was heard.
    last_heard : float or None
        When it was last heard from (status or status document), ``time.monotonic()``
        seconds; None: never.
    now : float
        The time to judge at, same clock.
    stale_after_s : float
        Seconds of silence after which an online node is stale.

    Returns
    -------
    str
        "unknown" (nothing heard), "offline" (its status says so, or its Last Will did),
        "stale" (online but silent for more than ``stale_after_s``), else "online".
    """
    if online is None:
        return "unknown"
    if not online:
        return "offline"
    if last_heard is None or now - last_heard > stale_after_s:
        return "stale"
    return "online"


def leaves_reporting(model: SubspaceMessage | None, expected: Mapping[str, int]) -> int:
    """How many leaves the model covers completely (``provenance[leaf] == expected[leaf]``).

    A leaf expected to contribute 0 samples counts as covered.
    """
    prov = {} if model is None else model.provenance
    return sum(1 for leaf, n in expected.items() if prov.get(leaf, 0) == n)


def privacy_of(model: SubspaceMessage | None) -> PrivacyParams | None:
    """The differential-privacy guarantee a model reports: its own ``privacy``.

    A `PrivacyParams`: each reading the model covers is ``(epsilon, delta)``-DP with
    respect to everything published, for neighbouring datasets under ``neighbours``
    (``"replace-one"``), by ``mechanism`` (``"gaussian"``, ``"fpca-eq8"``, or
    ``"fpca-eq8+gaussian"`` over leaves of both); the weakest guarantee over the leaves,
    see `edge_runtime.agents.aggregator.shell.agent.weakest_privacy`. None when there is no model or
    some covered leaf publishes without noise. Its JSON map is `PrivacyParams.to_json`.
    """
    return None if model is None else model.privacy


def covers(model: SubspaceMessage | None, expected: Mapping[str, int]) -> bool:
    """Whether the model covers every leaf's expected samples exactly."""
    return leaves_reporting(model, expected) == len(expected)


class ModelWatcher:
    """Subscribes to the model topic and keeps the latest valid global estimate.

    Parameters
    ----------
    topology : Topology
        Gives the model topic ``<prefix>/<root>/model`` and the nodes' status topics.
    settings : AgentSettings
        Broker address, credentials and timeouts; ``max_payload_bytes`` bounds a model.
    on_update : callable, optional
        Called with each new `SubspaceMessage` (retained one first), in the listening task.
    watch_nodes : bool, default False
        Also follow every node's ``status`` and ``status/detail`` topics; see
        `node_states`.
    stale_after_s : float, default `STALE_AFTER_S`
        An online node heard from (its ``online`` status or a status document) no later
        than this many seconds ago is "online"; after that, "stale". Nodes send a status
        document at least every ``AgentSettings.status_heartbeat_s`` (30 s), so the default
        is 2.5 heartbeats.
    on_connection : callable, optional
        Called after the first connection with None when the connection is back, and with
        the error when it is lost or a reconnection fails (`connection_problem` words it).
    on_membership : callable, optional
        With ``watch_nodes``: called with each `MembershipEvent` (a child joined, was
        forgotten, quarantined or released) an aggregator's status document shows, in the
        listening task. An aggregator's retained document is the baseline: what it shows
        already is in `membership`, not reported.

    Use as ``async with ModelWatcher(...) as watcher`` then `wait_until`; `privacy`
    gives the current model's differential-privacy guarantee. Entering connects (one
    aiomqtt client, QoS 1 subscriptions) and starts the listening task; leaving cancels it
    and disconnects. A lost connection is re-opened after a full-jitter backoff delay
    (`AgentSettings.reconnect_backoff`), for as long as the watcher runs; the model stays the
    last one meanwhile, and the retained topics bring everything up to date on reconnection
    (a model already seen is not reported again).

    Attributes
    ----------
    model : SubspaceMessage or None
        The latest valid model of this deployment (None until one arrives).
    updates : int
        Models taken.
    disconnects : int
        Connections lost (each followed by reconnection attempts).
    rejects : int
        Models refused (malformed, or of another deployment), each logged as
        ``model_rejected``.
    online, last_heard : dict
        With ``watch_nodes``: each node's last ``status`` (True for ``online``) and when it
        was last heard from (``time.monotonic()`` seconds).
    reported_rank : dict
        With ``watch_nodes``: the ``rank`` of each node's latest status document (for an
        aggregator, the directions its snapshot tracks, see `tracked`).
    membership : MembershipTracker
        With ``watch_nodes``: each aggregator's children as its latest status document says
        (``membership.members``; `quarantined`).

    Raises
    ------
    aiomqtt.MqttError
        On entering, if the broker cannot be reached within ``settings.timeout_s``.
    """

    def __init__(
        self,
        topology: Topology,
        settings: AgentSettings,
        on_update: Callable[[SubspaceMessage], None] | None = None,
        *,
        watch_nodes: bool = False,
        stale_after_s: float = STALE_AFTER_S,
        on_connection: Callable[[BaseException | None], None] | None = None,
        on_membership: Callable[[MembershipEvent], None] | None = None,
    ) -> None:
        self.on_connection = on_connection
        self.on_membership = on_membership
        self.disconnects = 0
        self.watch_nodes = watch_nodes
        self.stale_after_s = stale_after_s
        self.online: dict[str, bool] = {}
        self.last_heard: dict[str, float] = {}
        self.membership = MembershipTracker()
        self.reported_rank: dict[str, int] = {}  # node -> rank in its status document
        self._topics: dict[str, tuple[str, str]] = {}
        for node in topology.nodes:
            self._topics[topology.status_topic(node)] = (node, "status")
            self._topics[topology.status_detail_topic(node)] = (node, "detail")
        self.topology = topology
        self.settings = settings
        self.on_update = on_update
        self.model: SubspaceMessage | None = None
        self.updates = 0
        self.rejects = 0
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._client: aiomqtt.Client | None = None

    async def __aenter__(self) -> ModelWatcher:
        self._client = await self._connect()
        self._task = asyncio.create_task(self._run(), name="model-watcher")
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self._task is not None:  # bounded, and a cancellation of the caller stays
                await cancel_and_wait(self._task)
        finally:
            await self._close()

    async def _connect(self) -> aiomqtt.Client:
        client = aiomqtt.Client(**self.settings.client_kwargs())
        await client.__aenter__()
        try:
            if self.watch_nodes:  # first, so retained statuses arrive before the model
                for topic in self._topics:
                    await client.subscribe(topic, qos=1)
            await client.subscribe(self.topology.model_topic(), qos=1)
        except aiomqtt.MqttError:
            with contextlib.suppress(aiomqtt.MqttError):
                await client.__aexit__(None, None, None)
            raise
        return client

    async def _close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(aiomqtt.MqttError):
                await client.__aexit__(None, None, None)

    async def _run(self) -> None:
        """Listen; after a lost connection, reconnect with backoff until cancelled."""
        backoff = self.settings.reconnect_backoff()
        while True:  # ends by cancellation (__aexit__); every failure waits a backoff delay
            try:
                if self._client is None:
                    self._client = await self._connect()
                    backoff.reset()
                    log.info("watcher_reconnected", disconnects=self.disconnects)
                    if self.on_connection is not None:
                        self.on_connection(None)
                await self._listen(self._client)
                error: BaseException = aiomqtt.MqttError("the broker closed the connection")
            except aiomqtt.MqttError as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # aiomqtt may turn a cancelled wait into an MqttError (seen: Ctrl-C on
                    # `watch` hung, reconnecting forever): a cancelled watcher ends
                    raise asyncio.CancelledError from exc
                error = exc
            if self._client is not None:
                self.disconnects += 1
            await self._close()
            if self.on_connection is not None:  # it tells the user
                log.info("watcher_disconnected", error=str(error), disconnects=self.disconnects)
                self.on_connection(error)
            else:
                log.warning("watcher_disconnected", error=str(error), disconnects=self.disconnects)
            await asyncio.sleep(backoff.next_delay())

    async def _listen(self, client: aiomqtt.Client) -> None:
        async for message in client.messages:
            payload = message.payload
            if not payload or not isinstance(payload, bytes | bytearray):
                continue
            node_topic = self._topics.get(str(message.topic))
            if node_topic is not None:
                node, kind = node_topic
                if kind == "status":
                    self.online[node] = bytes(payload) == b"online"
                else:
                    self._fold_detail(node, bytes(payload), retained=bool(message.retain))
                self.last_heard[node] = time.monotonic()
                continue
            try:
                model = decode_subspace(bytes(payload), max_bytes=self.settings.max_payload_bytes)
            except WireError as exc:
                self.rejects += 1
                log.warning("model_rejected", reason=exc.reason, detail=str(exc))
                continue
            if model.deployment not in (None, self.topology.name):
                self.rejects += 1
                log.warning(
                    "model_rejected",
                    reason="foreign_deployment",
                    detail=f"model of deployment {model.deployment!r}, not "
                    f"{self.topology.name!r}: give each deployment its own prefix",
                )
                continue
            seen = self.model
            if seen is not None and (seen.epoch, seen.seq) == (model.epoch, model.seq):
                continue  # the retained model again, after a reconnection
            async with self._changed:
                self.model = model
                self.updates += 1
                self._changed.notify_all()
            if self.on_update is not None:
                self.on_update(model)

    def _fold_detail(self, node: str, payload: bytes, *, retained: bool = True) -> None:
        """Keep a node's reported rank and what an aggregator's status document says of its
        children; report the changes (`on_membership`). A node's first document is the
        baseline when ``retained`` (sent on subscribing), news when not."""
        try:
            detail = decode_status(payload, max_bytes=self.settings.max_payload_bytes)
        except WireError:
            return
        if detail.node_id != node:
            return
        self.reported_rank[node] = detail.rank
        for event in self.membership.fold(node, detail, baseline=retained):
            if self.on_membership is not None:
                self.on_membership(event)

    def quarantined(self) -> dict[str, str]:
        """Children their aggregator has quarantined, with the reason, as the
        aggregators' latest status documents say."""
        return self.membership.quarantined()

    def tracked(self) -> int | None:
        """How many directions the root's snapshot tracks (``rank + oversample``, its status
        document's ``rank``), when that is more than the model's rank; the model on
        ``<prefix>/<root>/model`` is that snapshot truncated to the configured ``rank``.
        None when unknown (no status document yet, or ``watch_nodes`` off) or not more."""
        reported = self.reported_rank.get(self.topology.root)
        model = self.model
        if reported is None or model is None or reported <= model.rank:
            return None
        return reported

    @property
    def privacy(self) -> PrivacyParams | None:
        """The latest model's guarantee (`privacy_of`): None without one."""
        return privacy_of(self.model)

    def node_states(self) -> dict[str, str]:
        """Each node's liveness: "online", "stale" (online, but silent for
        ``stale_after_s`` seconds), "offline" (said so, or its Last Will did) or
        "unknown" (nothing retained yet)."""
        now = time.monotonic()
        return {
            node: liveness(
                self.online.get(node), self.last_heard.get(node), now, self.stale_after_s
            )
            for node in self.topology.nodes
        }

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


async def wait_online(
    topology: Topology, nodes: list[str], settings: AgentSettings, timeout_s: float
) -> list[str]:
    """Wait until every node in ``nodes`` has a retained ``online`` status.

    A lost connection is re-opened after a full-jitter delay
    (`AgentSettings.reconnect_backoff`) until ``timeout_s``.

    Parameters
    ----------
    topology : Topology
        Gives each node's ``<prefix>/<path>/status`` topic.
    nodes : list of str
        Node ids to wait for.
    settings : AgentSettings
        Broker address, credentials, timeouts and reconnect backoff.
    timeout_s : float
        Most seconds to wait in all.

    Returns
    -------
    list of str
        The nodes still not online after ``timeout_s`` seconds (empty when all are).

    Raises
    ------
    aiomqtt.MqttError
        If the broker cannot be reached at the first attempt.
    """
    missing = set(nodes)
    topics = {topology.status_topic(n): n for n in nodes}
    deadline = time.monotonic() + timeout_s
    connected = False
    backoff = settings.reconnect_backoff()
    # bounded: every round ends by the deadline or waits >= reconnect_min_s before the next
    while missing and time.monotonic() < deadline:
        try:
            async with aiomqtt.Client(**settings.client_kwargs()) as client:
                connected = True
                backoff.reset()
                if topics:
                    await client.subscribe([(topic, 1) for topic in topics])
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    async for message in client.messages:
                        node = topics.get(str(message.topic))
                        if node is None:
                            continue
                        if message.payload == b"online":
                            missing.discard(node)
                        else:
                            missing.add(node)
                        if not missing:
                            break
        except TimeoutError:
            break
        except aiomqtt.MqttError:
            if not connected:
                raise
            await asyncio.sleep(min(backoff.next_delay(), deadline - time.monotonic()))
    return sorted(missing)
