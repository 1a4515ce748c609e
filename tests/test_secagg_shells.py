"""The secure-aggregation shells' handling of bad input, without a broker (issue 26).

`SecAggAggregator` and `SecAggLeaf` on a stand-in agent that records rejects and publishes:
every payload that does not decode, names another leaf than its topic, comes from a node
outside the site or is refused by the core is a counted reject, never an exception.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import structlog

pytest.importorskip("cryptography")
pytest.importorskip("shamirs")

from edge_runtime.agents.aggregator.shell.secagg import SecAggAggregator, slot_timeouts
from edge_runtime.agents.leaf.shell.secagg import SecAggLeaf
from edge_runtime.secagg.messages import KeyAdvertisement, KeyRoster, ShareDelivery
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology, parse_topology
from edge_runtime.topology import topics as kinds
from edge_runtime.wire.secagg import encode_secagg

D = 4


def topology() -> Topology:
    leaves = "".join(
        f'[[nodes]]\nid = "pi-{i}"\nparent = "site"\nmechanism = "gaussian-secagg"\n'
        for i in range(4)
    )
    plain = '[[nodes]]\nid = "plain"\nparent = "site"\n'
    return parse_topology(
        'name = "shells"\n[defaults]\nrank = 2\nepsilon = 1.0\ndelta = 1e-5\nclip_norm = 3.0\n'
        '[[nodes]]\nid = "root"\n[[nodes]]\nid = "site"\nparent = "root"\nsecagg_slot_s = 6\n'
        + leaves
        + plain.replace('parent = "site"\n', 'parent = "site"\nepsilon = 2.0\n')
    )


class StandIn:
    """What the shells use of an agent."""

    def __init__(self, topology: Topology, node_id: str) -> None:
        self.topology = topology
        self.node_id = node_id
        self.config = topology.nodes[node_id]
        self.settings = AgentSettings()
        self.log = structlog.get_logger()
        self.rejects: Counter[str] = Counter()
        self.published: list[tuple[str, bytes, bool]] = []
        self.wakes = 0

    def reject(self, reason: str, topic: str, detail: str) -> None:
        assert "\n" not in detail
        self.rejects[reason] += 1

    def wake(self) -> None:
        self.wakes += 1

    async def publish(self, client: Any, topic: str, payload: bytes, **kw: Any) -> None:
        self.published.append((topic, payload, kw.get("retain", True)))

    async def read_retained(self, topic: str) -> bytes | None:
        return None


def ad(slot: int, leaf: str, key: int = 1) -> KeyAdvertisement:
    return KeyAdvertisement(slot, leaf, bytes([key]) * 32, bytes([key + 1]) * 32)


def test_phase_timeouts_are_the_defaults_for_long_slots_and_half_a_short_slot() -> None:
    long, short = slot_timeouts(600.0), slot_timeouts(6.0)
    assert (long.advertise, long.share, long.masked_input, long.unmask) == (10, 10, 30, 10)
    assert (short.advertise, short.share, short.masked_input, short.unmask) == (
        0.5,
        0.5,
        1.5,
        0.5,
    )


async def test_the_site_counts_every_bad_message_as_a_reject_and_keeps_a_good_one() -> None:
    topo = topology()
    agent = StandIn(topo, "site")
    shell = SecAggAggregator(agent, n_features=D)
    assert shell.leaves == ("pi-0", "pi-1", "pi-2", "pi-3")  # "plain" is not in the site
    await shell.prepare()
    keys = topo.secagg_topic("pi-0", kinds.SECAGG_KEYS)
    dep = topo.name
    assert shell.owns(keys) and not shell.owns(topo.subspace_topic("pi-0"))
    shell.handle(keys, b"\xc1 not msgpack")
    shell.handle(keys, encode_secagg(ad(0, "pi-1"), deployment=dep))  # pi-1's on pi-0's topic
    shell.handle(topo.secagg_topic("plain", kinds.SECAGG_KEYS), encode_secagg(ad(0, "plain")))
    shell.handle(topo.secagg_topic("pi-0", "secagg/other"), encode_secagg(ad(0, "pi-0")))
    shell.handle(keys, encode_secagg(ad(0, "pi-0"), deployment="another"))
    shell.handle(topo.secagg_topic("pi-0", kinds.SECAGG_MASKED), encode_secagg(ad(0, "pi-0")))
    shell.handle(keys, "text")
    shell.handle(keys, b"")  # a cleared retained advertisement: nothing
    assert agent.rejects == Counter(
        {
            "not_msgpack": 1,
            "secagg_leaf_mismatch": 1,
            "unknown_child": 2,
            "field_type": 2,
            "payload_type": 1,
        }
    )
    shell.handle(keys, encode_secagg(ad(0, "pi-0"), deployment=dep))  # kept for slot 0
    assert sum(agent.rejects.values()) == 7
    assert shell.status()["mechanism"] == "gaussian-secagg"


async def test_a_leaf_counts_bad_messages_and_moves_on_after_a_later_slot() -> None:
    topo = topology()
    agent = StandIn(topo, "pi-0")
    shell = SecAggLeaf(agent, n_features=D)
    await shell.flush(None)
    assert [t for t, _, retain in agent.published] == [topo.secagg_topic("pi-0", kinds.SECAGG_KEYS)]
    assert shell.release.slot == 0
    delivery = topo.secagg_topic("site", kinds.secagg_delivery_kind("pi-0"))
    roster = topo.secagg_topic("site", kinds.SECAGG_ROSTER)
    assert set(shell.subscriptions()) == {
        roster,
        delivery,
        topo.secagg_topic("site", kinds.SECAGG_UNMASK),
        topo.secagg_topic("site", kinds.SECAGG_OUTCOME),
    }
    dep = topo.name
    mismatch = ShareDelivery(0, "pi-1", (("pi-0", b"x" * 156),))
    shell.handle(delivery, encode_secagg(mismatch, deployment=dep))
    shell.handle(roster, b"garbage")
    wrong_slot = KeyRoster(0, 3, (ad(0, "pi-1", 3), ad(0, "pi-2", 5), ad(0, "pi-3", 7)))
    shell.handle(
        roster, encode_secagg(wrong_slot, deployment=dep)
    )  # without this leaf: refused by its round
    assert agent.rejects == Counter(
        {"secagg_leaf_mismatch": 1, "not_msgpack": 1, "secagg_refused": 1}
    )
    later = KeyRoster(5, 3, (ad(5, "pi-1", 3), ad(5, "pi-2", 5), ad(5, "pi-3", 7)))
    shell.handle(
        roster, encode_secagg(later, deployment=dep)
    )  # it missed slots: it advertises for slot 6
    assert shell.release.slot == 6
    agent.published.clear()
    await shell.flush(None)
    assert len(agent.published) == 1 and agent.published[0][2] is True
    assert shell.status()["next_slot"] == 6


def test_the_shells_are_only_for_secagg_nodes() -> None:
    topo = topology()
    with pytest.raises(AssertionError):
        SecAggAggregator(StandIn(topo, "root"))


async def test_a_count_reported_while_a_slot_runs_is_held_until_the_slot_ends() -> None:
    """A leaf publishes its status after its unmask response, which may reach the site before
    the slot's outcome: the count must not enter the snapshot before the sum does."""
    import time

    from edge_runtime.wire import StatusDetail, encode_status

    topo = topology()
    agent = StandIn(topo, "site")
    shell = SecAggAggregator(agent, n_features=D)
    await shell.prepare()
    site = shell.site
    assert site is not None
    status_topic = topo.status_detail_topic("pi-0")

    def report(count: int) -> None:
        doc = StatusDetail(
            "pi-0", "leaf", True, 2, count, 0, "e", {}, 1.0,
            extra={"secagg": {"readings_released": count}},
        )  # fmt: skip
        shell.handle(status_topic, encode_status(doc))

    report(5)  # between slots: taken at once
    assert shell.counts["pi-0"] == 5
    release = shell.release
    now = time.monotonic() + 7.0  # slot 0 is due 6 s after prepare
    release.step(now, 0.0)
    assert site.slot == 0
    report(20)  # during slot 0: held
    assert shell.counts["pi-0"] == 5
    release.step(now + 1.0, 0.0)  # no leaf advertised by 0.5 s: slot 0 skipped
    assert site.slot is None
    assert shell.counts["pi-0"] == 20
