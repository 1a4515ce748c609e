"""A node's snapshot, published and expected back: delivery that a PUBACK does not prove.

`SnapshotEcho` is the part of `edge_runtime.agents.common.shell.agent.Agent` that publishes
the node's own snapshot and watches for it on the node's own subspace topic; the decisions
(when an echo is late, when a snapshot counts as undelivered) are the core's `EchoTracker`
(`edge_runtime.agents.common.core.node`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import aiomqtt

from edge_runtime.wire import WireError, decode_subspace, with_deployment

if TYPE_CHECKING:
    from edge_runtime.agents.common.core.node import NodeCore
    from edge_runtime.settings import AgentSettings
    from edge_runtime.topology import Topology

__all__ = ["SnapshotEcho"]


class SnapshotEcho:
    """Mixin of `Agent`: `publish_snapshot` and the echo of the node's own snapshot."""

    core: NodeCore
    topology: Topology
    settings: AgentSettings
    log: Any
    _own_topic: str

    if TYPE_CHECKING:  # `Agent.publish`

        async def publish(
            self,
            client: aiomqtt.Client,
            topic: str,
            payload: bytes,
            *,
            retain: bool = True,
            qos: int | None = None,
        ) -> None: ...

    async def publish_snapshot(
        self, client: aiomqtt.Client, payload: bytes, epoch: str, seq: int
    ) -> None:
        """Publish this node's snapshot (retained) and expect to see it come back.

        A PUBACK does not prove delivery: with MQTT 3.1.1 an ACL-denied publish is dropped
        silently and ``message_size_limit`` drops oversized ones. The agent subscribes to its
        own subspace topic; the core's `EchoTracker` reports a snapshot that does not come
        back within a bound that follows the load (at least ``echo_timeout_s``, counted
        from the PUBACK and from the last reconnection) as ``undelivered``, logged as
        ``publish_not_delivered`` — reported, never retried in a loop (the next snapshot
        is published when it is due). A publish that raises (connection lost, PUBACK
        timed out) is never reported: the next snapshot supersedes it.
        The payload is stamped with the topology's name (`with_deployment`), so aggregators
        of another deployment on the same broker and prefix refuse it.
        """
        payload = with_deployment(payload, self.topology.name)
        echo = self.core.echo
        if echo is not None:  # before publishing: the echo may beat the PUBACK
            echo.sent(epoch, seq, time.monotonic())
        try:
            await self.publish(client, self._own_topic, payload)
        except BaseException:  # lost connection, timeout, cancel: superseded, never reported
            if echo is not None:
                echo.failed(epoch, seq)
            raise
        if echo is not None:  # the bound counts from the PUBACK, not from the queueing
            echo.acked(epoch, seq, time.monotonic())

    def _on_echo(self, payload: object) -> None:
        echo = self.core.echo
        if echo is None or not isinstance(payload, bytes | bytearray) or not payload:
            return
        try:
            msg = decode_subspace(bytes(payload), max_bytes=self.settings.max_payload_bytes)
        except WireError:
            return
        late = echo.late
        for seq in echo.echoed(msg.epoch, msg.seq, time.monotonic()):
            self._report_undelivered(seq)
        if echo.late > late:
            self.log.warning("publish_delivered_late", seq=msg.seq, bound_s=echo.bound_s)

    def _report_undelivered(self, seq: int) -> None:
        self.log.error(
            "publish_not_delivered",
            topic=self._own_topic,
            seq=seq,
            hint="denied by the broker's ACL or above its message size limit?",
        )
