"""The dashboard's view model: MQTT messages folded into a JSON-ready picture of the tree.

A synchronous core without I/O: `DashboardState.fold` takes a topic, a payload and the
time (seconds on any monotonic clock, passed in, so tests drive it with a virtual clock),
and `DashboardState.snapshot` gives the view at a time ``now``:

* per node (in tree order): liveness ``online`` / ``stale`` / ``offline`` / ``unknown``
  (`edge_runtime.monitor.liveness`, the rule of `ModelWatcher.node_states`: an ``online``
  node silent for more than ``stale_after_s`` seconds is stale), and from its status document
  (`edge_runtime.wire.StatusDetail`) coverage ``n_samples``, ``rank`` (and ``tracked``: the
  directions an aggregator's snapshot carries beyond it, `_rank_view`), ``seq``, the privacy
  ledger, the total of rejected messages, and the latest ``extra["anomaly_rate"]`` when the
  node reports one; ``suspect``: ``{"sensor", "fault"}`` of the latest status document's
  ``extra["suspect"]`` (the sensor a leaf's fault detector suspects: column index
  and kind), else None; ``quarantined``: the reason its aggregator quarantined it (the
  parent's ``extra["quarantined"]``), else None;
* the root's model (`edge_runtime.wire.SubspaceMessage` on ``<prefix>/<root>/model``): its
  singular values and each component's share of the captured energy (``sigma_i^2 /
  sum sigma^2``, a scree plot), samples, rank, leaves covered and privacy
  (`edge_runtime.monitor.privacy_of`, as `edge_runtime.wire.PrivacyParams.to_json`);
* anomaly rates over time: per node, the last `HISTORY_POINTS` ``(t, rate)`` pairs, ``t``
  in seconds of the same clock;
* ``membership``: one entry per aggregator that is open or has had a child join,
  be forgotten or quarantined (`edge_runtime.monitor.Membership.to_json` and its id as
  ``aggregator``: ``open``, ``joins``, ``joined``, ``forgets``, ``forgotten``,
  ``quarantined`` with reasons), from its latest status document; admitted children are not
  in the topology, so they are listed here, not among the nodes; and ``membership_events``:
  the last `MEMBERSHIP_EVENTS` changes (`edge_runtime.monitor.MembershipEvent.to_json` with
  the time ``t``), oldest first.

Invalid payloads are counted in ``rejects`` (by reason) and otherwise ignored.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from edge_runtime.monitor import (
    LIVENESS,
    STALE_AFTER_S,
    MembershipEvent,
    MembershipTracker,
    liveness,
    privacy_of,
)
from edge_runtime.topology import Topology
from edge_runtime.wire import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    StatusDetail,
    SubspaceMessage,
    WireError,
    decode_status,
    decode_subspace,
)

__all__ = ["HISTORY_POINTS", "MEMBERSHIP_EVENTS", "DashboardState"]

HISTORY_POINTS = 360
"""Anomaly-rate points kept per node (an hour at one status document per 10 s)."""

MEMBERSHIP_EVENTS = 50
"""Membership changes (joins, forgets, quarantines, releases) kept for the page."""


@dataclass
class _Node:
    online: bool | None = None
    last_heard: float | None = None
    detail: StatusDetail | None = None
    anomaly: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=HISTORY_POINTS)
    )


def _rank_view(topology: Topology, node_id: str, detail: StatusDetail | None) -> dict[str, object]:
    """``rank`` and ``tracked`` of a node's row. A leaf's status document reports its rank
    (what its model keeps); an aggregator's reports the directions its snapshot tracks,
    ``rank + oversample`` (default twice the rank), so that merges lose little, while the
    model is truncated to the configured ``rank``: show that, and the tracked ones beside."""
    if detail is None:
        return {"rank": None, "tracked": None}
    configured = topology.nodes[node_id].rank
    if topology.is_leaf(node_id) or detail.rank <= configured:
        return {"rank": detail.rank, "tracked": None}
    return {"rank": configured, "tracked": detail.rank}


def _anomaly_rate(extra: Mapping[str, object]) -> float | None:
    value = extra.get("anomaly_rate")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    rate = float(value)
    return rate if math.isfinite(rate) else None


def _suspect(extra: Mapping[str, object]) -> dict[str, object] | None:
    """``{"sensor": int, "fault": str or None}`` of ``extra["suspect"]``, or None when it is
    absent, null or malformed."""
    value = extra.get("suspect")
    if not isinstance(value, Mapping):
        return None
    sensor, fault = value.get("sensor"), value.get("fault")
    if isinstance(sensor, bool) or not isinstance(sensor, int):
        return None
    return {"sensor": sensor, "fault": fault if isinstance(fault, str) else None}


class DashboardState:
    """Folds the tree's status, status-detail and model messages into a view model.

    Parameters
    ----------
    topology : Topology
    stale_after_s : float, default `edge_runtime.monitor.STALE_AFTER_S`
    max_payload_bytes : int
        Payloads longer than this are rejected unread.
    """

    def __init__(
        self,
        topology: Topology,
        *,
        stale_after_s: float = STALE_AFTER_S,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        if not (stale_after_s > 0 and math.isfinite(stale_after_s)):
            raise ValueError(f"stale_after_s must be a positive number, got {stale_after_s!r}")
        self.topology = topology
        self.stale_after_s = stale_after_s
        self.max_payload_bytes = max_payload_bytes
        self.order = self._tree_order()
        self.nodes: dict[str, _Node] = {node: _Node() for node in self.order}
        self.model: SubspaceMessage | None = None
        self.model_heard: float | None = None
        self.rejects: dict[str, int] = {}
        self.membership = MembershipTracker()
        self.membership_events: deque[tuple[float, MembershipEvent]] = deque(
            maxlen=MEMBERSHIP_EVENTS
        )
        self.connected = False
        self.broker_error: str | None = None
        self.version = 0
        self._routes: dict[str, tuple[str, str]] = {}
        for node in topology.nodes:
            self._routes[topology.status_topic(node)] = (node, "status")
            self._routes[topology.status_detail_topic(node)] = (node, "detail")
        self._routes[topology.model_topic()] = (topology.root, "model")

    def _tree_order(self) -> list[str]:
        """Node ids depth-first from the root, children in file order."""
        order: list[str] = []
        stack = [self.topology.root]
        while stack and len(order) <= len(self.topology.nodes):
            node = stack.pop()
            order.append(node)
            stack.extend(reversed(self.topology.children(node)))
        return order

    @property
    def topics(self) -> list[str]:
        """Every topic to subscribe to: statuses and status documents first, then the model."""
        return list(self._routes)

    def _reject(self, reason: str) -> None:
        self.rejects[reason] = self.rejects.get(reason, 0) + 1

    def fold(self, topic: str, payload: bytes, now: float, *, retained: bool = True) -> bool:
        """Take one message at time ``now``; return whether it was one of ours and valid.
        ``retained``: it was sent on subscribing (an aggregator's first status document is
        then the baseline of its membership; a live one's changes are all news)."""
        route = self._routes.get(topic)
        if route is None:
            return False
        node_id, kind = route
        node = self.nodes[node_id]
        if not payload:  # a retained message being cleared
            return False
        if kind == "status":
            if payload not in (b"online", b"offline"):
                self._reject("status_value")
                return False
            node.online = payload == b"online"
            node.last_heard = now
        elif kind == "detail":
            try:
                detail = decode_status(payload, max_bytes=self.max_payload_bytes)
            except WireError as exc:
                self._reject(exc.reason)
                return False
            if detail.node_id != node_id:
                self._reject("node_id")
                return False
            node.detail = detail
            node.last_heard = now
            if node.online is None:
                node.online = detail.online
            rate = _anomaly_rate(detail.extra)
            if rate is not None:
                node.anomaly.append((now, rate))
            for event in self.membership.fold(node_id, detail, baseline=retained):
                self.membership_events.append((now, event))
        else:
            try:
                model = decode_subspace(payload, max_bytes=self.max_payload_bytes)
            except WireError as exc:
                self._reject(exc.reason)
                return False
            if model.deployment not in (None, self.topology.name):
                self._reject("foreign_deployment")
                return False
            self.model = model
            self.model_heard = now
        self.version += 1
        return True

    def set_connected(self, connected: bool, error: str | None = None) -> None:
        """Whether the follower is connected to the broker, and if not, why (one line:
        a refused login, an unreachable broker); both shown on the page. Connecting
        clears the error."""
        error = None if connected else error
        if connected != self.connected or error != self.broker_error:
            self.connected = connected
            self.broker_error = error
            self.version += 1

    def states(self, now: float) -> dict[str, str]:
        """Each node's liveness (one of `LIVENESS`) at ``now`` (``time.monotonic()``
        seconds, the clock of `fold`), in tree order."""
        return {
            node_id: liveness(node.online, node.last_heard, now, self.stale_after_s)
            for node_id, node in self.nodes.items()
        }

    def snapshot(self, now: float) -> dict[str, object]:
        """The JSON-ready view at ``now`` (``time.monotonic()`` seconds, the clock of
        `fold`; ages such as ``silent_s`` are in seconds): see the module docstring."""
        topology = self.topology
        states = self.states(now)
        depth = {topology.root: 0}
        nodes: list[dict[str, object]] = []
        for node_id in self.order:
            node = self.nodes[node_id]
            parent = topology.nodes[node_id].parent
            if parent is not None:
                depth[node_id] = depth[parent] + 1
            detail = node.detail
            nodes.append(
                {
                    "id": node_id,
                    "parent": parent,
                    "depth": depth[node_id],
                    "leaf": topology.is_leaf(node_id),
                    "state": states[node_id],
                    "silent_s": None if node.last_heard is None else now - node.last_heard,
                    "role": None if detail is None else detail.role,
                    "n_samples": None if detail is None else detail.n_samples,
                    **_rank_view(topology, node_id, detail),
                    "seq": None if detail is None else detail.seq,
                    "uptime_s": None if detail is None else detail.uptime_s,
                    "rejects": None if detail is None else sum(detail.rejects.values()),
                    "privacy": None
                    if detail is None or detail.privacy is None
                    else detail.privacy.as_dict(),
                    "anomaly_rate": node.anomaly[-1][1] if node.anomaly else None,
                    "suspect": None if detail is None else _suspect(detail.extra),
                }
            )
        quarantined = self.membership.quarantined()
        for view in nodes:
            view["quarantined"] = quarantined.get(str(view["id"]))
        counts = dict.fromkeys(LIVENESS, 0)
        for state in states.values():
            counts[state] += 1
        return {
            "name": topology.name,
            "prefix": topology.prefix,
            "root": topology.root,
            "now": now,
            "connected": self.connected,
            "broker_error": self.broker_error,
            "stale_after_s": self.stale_after_s,
            "counts": counts,
            "nodes": nodes,
            "model": self._model_view(now),
            "anomaly": {
                node_id: [[t, rate] for t, rate in node.anomaly]
                for node_id, node in self.nodes.items()
                if node.anomaly
            },
            "rejects": dict(self.rejects),
            "membership": [
                {"aggregator": agg, **member.to_json()}
                for agg, member in self.membership.shown().items()
            ],
            "membership_events": [{"t": t, **e.to_json()} for t, e in self.membership_events],
        }

    def _model_view(self, now: float) -> dict[str, object] | None:
        model = self.model
        if model is None:
            return None
        sv = [float(s) for s in model.subspace.singular_values]
        energy = sum(s * s for s in sv)
        privacy = privacy_of(model)
        return {
            "seq": model.seq,
            "epoch": model.epoch,
            "n_samples": model.n_samples,
            "rank": model.rank,
            "n_features": int(model.subspace.basis.shape[0]),
            "centred": model.subspace.mean is not None,
            "singular_values": sv,
            "explained": [s * s / energy for s in sv] if energy > 0 else [0.0 for _ in sv],
            "leaves_covered": sorted(k for k, v in model.provenance.items() if v > 0),
            "provenance": dict(model.provenance),
            "privacy": None if privacy is None else privacy.to_json(),
            "timestamp": model.timestamp,
            "age_s": None if self.model_heard is None else now - self.model_heard,
        }
