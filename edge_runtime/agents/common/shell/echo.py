"""A node's snapshot, published and expected back: delivery that a PUBACK does not prove.

`SnapshotEcho` is the part an `edge_runtime.agents.common.shell.agent.Agent` holds that publishes
the node's own snapshot and watches for it on the node's own subspace topic; the decisions
(when an echo is late, when a snapshot counts as undelivered) are the core's `EchoTracker`
(`edge_runtime.agents.common.core.node`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aiomqtt

from edge_runtime.wire import WireError, decode_subspace, with_deployment

if TYPE_CHECKING:
    from edge_runtime.agents.common.core.policy import EchoTracker

__all__ = ["SnapshotEcho"]


class SnapshotEcho:
    """An agent's own snapshot, published and expected back (a part `Agent` holds).

    Parameters
    ----------
    tracker : callable
        ``tracker()``: the core's `EchoTracker`, or None with the check off
        (``echo_timeout_s = 0``).
    topic : str
        The node's own subspace topic (published to and subscribed to).
    deployment : str
        The topology's name, stamped on every payload (`with_deployment`).
    max_payload_bytes : int
        Largest echo decoded, bytes.
    publish : callable
        ``await publish(client, topic, payload)``: the agent's publish (QoS 1, retained).
    log : structlog logger
    """

    def __init__(
        self,
        tracker: Callable[[], EchoTracker | None],
        *,
        topic: str,
        deployment: str,
        max_payload_bytes: int,
        publish: Callable[[aiomqtt.Client, str, bytes], Awaitable[None]],
        log: Any,
    ) -> None:
        self._tracker = tracker
        self._topic = topic
        self._deployment = deployment
        self._max_bytes = max_payload_bytes
        self._publish = publish
        self._log = log

    async def publish(self, client: aiomqtt.Client, payload: bytes, epoch: str, seq: int) -> None:
        """Publish this node's snapshot (retained) and expect to see it come back.

        A PUBACK does not prove delivery: with MQTT 3.1.1 an ACL-denied publish is dropped
        silently and ``message_size_limit`` drops oversized ones. The agent subscribes to its
        own subspace topic; the core's `EchoTracker` reports a snapshot that does not come
        back within a bound that follows the load (at least ``echo_timeout_s``, counted
        from the PUBACK and from the last reconnection) as ``undelivered``, logged as
        ``publish_not_delivered`` -- reported, never retried in a loop (the next snapshot
        is published when it is due). A publish that raises (connection lost, PUBACK
        timed out) is never reported: the next snapshot supersedes it.
        The payload is stamped with the topology's name (`with_deployment`), so aggregators
        of another deployment on the same broker and prefix refuse it.
        """
        payload = with_deployment(payload, self._deployment)
        echo = self._tracker()
        if echo is not None:  # before publishing: the echo may beat the PUBACK
            echo.sent(epoch, seq, time.monotonic())
        try:
            await self._publish(client, self._topic, payload)
        except BaseException:  # lost connection, timeout, cancel: superseded, never reported
            if echo is not None:
                echo.failed(epoch, seq)
            raise
        if echo is not None:  # the bound counts from the PUBACK, not from the queueing
            echo.acked(epoch, seq, time.monotonic())

    def on_echo(self, payload: object) -> None:
        """A message on the node's own subspace topic: the echo of a published snapshot."""
        echo = self._tracker()
        if echo is None or not isinstance(payload, bytes | bytearray) or not payload:
            return
        try:
            msg = decode_subspace(bytes(payload), max_bytes=self._max_bytes)
        except WireError:
            return
        late = echo.late
        for seq in echo.echoed(msg.epoch, msg.seq, time.monotonic()):
            self.report_undelivered(seq)
        if echo.late > late:
            self._log.warning("publish_delivered_late", seq=msg.seq, bound_s=echo.bound_s)

    def report_undelivered(self, seq: int) -> None:
        """Log that snapshot ``seq`` never came back (``publish_not_delivered``)."""
        self._log.error(
            "publish_not_delivered",
            topic=self._topic,
            seq=seq,
            hint="denied by the broker's ACL or above its message size limit?",
        )
