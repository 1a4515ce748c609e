"""What the agents' async shells share around their synchronous cores.

Every agent (`LeafAgent`, `AggregatorAgent`, the FedPower agents) is an async shell over a
core (`edge_runtime.agents.common.core.node.NodeCore`): the shell moves bytes, the core decides. The
pieces of shell code several roles need are here, once:

- `status_policy_of`: the status-document policy of an agent's settings;
- `run_numerics`: numerics under the core's lock, in a worker thread when large. This is the
  one concurrency scheme of every agent: a core is never thread-safe and owns no lock; its
  shell holds one `asyncio.Lock` around every call that may run in a worker thread *and*
  around every call that changes what such a call reads (a leaf's sequencing and apply, an
  aggregator's `receive`), so an inbound message handled meanwhile waits instead of racing
  it;
- `status_document`: the status document's fields every role fills alike;
- `decode_or_reject`: decode an inbound payload, or count and log why not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from edge_runtime.agents.common.core.policy import StatusPolicy
from edge_runtime.settings import AgentSettings
from edge_runtime.wire import PrivacyStatus, StatusDetail, WireError

__all__ = [
    "decode_or_reject",
    "run_numerics",
    "status_document",
    "status_policy_of",
]

T = TypeVar("T")


def status_policy_of(settings: AgentSettings) -> StatusPolicy:
    """The `StatusPolicy` of an agent with ``settings``: a status document at least every
    ``status_heartbeat_s`` seconds, at most one per ``status_min_interval_s`` seconds."""
    return StatusPolicy(settings.status_heartbeat_s, settings.status_min_interval_s)


def decode_or_reject(
    agent: Any, topic: str, payload: object, decode: Callable[..., T], max_bytes: int
) -> T | None:
    """``decode(payload, max_bytes=max_bytes)``, or None after counting a reject on
    ``agent`` (`Agent.reject`).

    Parameters
    ----------
    agent : Agent
        Counts and logs the reject: reason ``payload_type`` for a payload that is not bytes,
        else the `WireError`'s ``reason``.
    topic : str
        The MQTT topic the payload came on (logged).
    payload : object
        The message payload (bytes expected).
    decode : callable
        A wire decoder (`edge_runtime.wire.decode_subspace`, ``decode_round`` ...) taking
        the payload's bytes and ``max_bytes``.
    max_bytes : int
        Largest payload accepted, bytes (`AgentSettings.max_payload_bytes`).

    Returns
    -------
    object or None
        The decoded message; None when rejected (never raises `WireError`).
    """
    if not isinstance(payload, bytes | bytearray):
        agent.reject("payload_type", topic, f"payload of type {type(payload).__name__}")
        return None
    try:
        return decode(bytes(payload), max_bytes=max_bytes)
    except WireError as exc:
        agent.reject(exc.reason, topic, str(exc))
        return None


async def run_numerics(
    lock: asyncio.Lock, cells: Callable[[], int], offload_min_cells: int, fn: Callable[[], T]
) -> T:
    """``fn()`` under ``lock`` (the core's), in a worker thread when the problem is large
    (``cells()``, the matrix cells a call touches, read under the lock, at least
    ``offload_min_cells``, `AgentSettings.offload_min_cells`): an inbound message handled
    meanwhile waits for it instead of racing it, and the event loop keeps running."""
    async with lock:
        if cells() >= offload_min_cells:
            return await asyncio.to_thread(fn)
        return fn()


def status_document(
    core: Any,
    *,
    node_id: str,
    role: str,
    online: bool,
    uptime_s: float,
    rank: int,
    n_samples: int,
    seq: int,
    epoch: str,
    extra: dict[str, object],
    privacy: PrivacyStatus | None = None,
) -> StatusDetail:
    """The status document (`StatusDetail`) of a node whose core is ``core``: the fields
    every role fills alike -- ``node_id``, ``role``, ``online`` (not stopping), the core's
    ``rejects`` by reason, ``uptime_s`` (seconds, rounded to milliseconds) and, once the node
    runs a deployed topology, ``config_version`` in ``extra`` -- and the rest as given."""
    version = core.config_version
    return StatusDetail(
        node_id=node_id,
        role=role,
        online=online,
        rank=rank,
        n_samples=n_samples,
        seq=seq,
        epoch=epoch,
        rejects=dict(core.rejects),
        uptime_s=round(uptime_s, 3),
        extra=extra | ({} if version is None else {"config_version": version}),
        privacy=privacy,
    )
