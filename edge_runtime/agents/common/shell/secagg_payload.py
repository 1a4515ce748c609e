"""A secure-aggregation message as the secagg shells receive it: the payload's
bytes, then the decoded message, each refusal counted as a reject (`Agent.reject`) and
never raised. Both sides of a site, `edge_runtime.agents.leaf.shell.secagg.SecAggLeaf` and
`edge_runtime.agents.aggregator.shell.secagg.SecAggAggregator`, read their topics so.

`edge_runtime.wire.secagg` loads on the first decode (a node without secure aggregation
never imports it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_runtime.wire import WireError

if TYPE_CHECKING:
    from edge_runtime.agents.common.shell.agent import Agent
    from edge_runtime.secagg.messages import SecAggMessage

__all__ = ["decode_or_reject", "payload_bytes"]


def payload_bytes(agent: Agent, topic: str, payload: object) -> bytes:
    """``payload`` as bytes; empty for a payload of another type (rejected,
    ``payload_type``) and for an empty one (a cleared retained message: nothing to read)."""
    if not isinstance(payload, bytes | bytearray):
        agent.reject("payload_type", topic, f"payload of type {type(payload).__name__}")
        return b""
    return bytes(payload)


def decode_or_reject(
    agent: Agent,
    topic: str,
    payload: bytes,
    *,
    expect: type | tuple[type, ...],
    deployment: str | None,
) -> SecAggMessage | None:
    """The message `edge_runtime.wire.secagg.decode_secagg` reads from ``payload`` (of the
    class(es) ``expect`` that ``topic`` carries, of this ``deployment``, within the agent's
    ``max_payload_bytes``); None for a payload it refuses, rejected with the wire's reason."""
    from edge_runtime.wire.secagg import decode_secagg

    try:
        return decode_secagg(
            payload,
            expect=expect,
            deployment=deployment,
            max_bytes=agent.settings.max_payload_bytes,
        )
    except WireError as exc:
        agent.reject(exc.reason, topic, str(exc))
        return None
