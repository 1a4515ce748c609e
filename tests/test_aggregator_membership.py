"""Membership at the aggregator core (issue 23): an open aggregator admits children the
topology does not declare, a closed one refuses them, and any aggregator forgets a child on
request. Virtual clock: no broker, no sleeps."""

from __future__ import annotations

import random

import numpy as np
import pytest

from edge_runtime.agents.aggregator.core.aggregator import MAX_FORGOTTEN_SHOWN, AggregatorCore
from edge_runtime.agents.aggregator.core.plausibility import (
    DEFAULT_MAX_READING_RATE,
    ChildBounds,
    admit_bounds,
)
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import StatusPolicy
from edge_runtime.fpca import Subspace, merge_many, offline_subspace
from edge_runtime.fpca.metrics import principal_angles
from edge_runtime.topology import NodeConfig, parse_topology
from edge_runtime.wire import SubspaceMessage

D, SIGNAL_RANK = 6, 3
_RNG = np.random.default_rng(23)
_W = np.linalg.qr(_RNG.normal(size=(D, SIGNAL_RANK)))[0]


def exact(n: int, seed: int) -> Subspace:
    """The exact summary of ``n`` readings in one common 3-dim subspace of R^6 (so every
    merge is lossless and any grouping gives the same result up to rounding)."""
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(n, SIGNAL_RANK)) * [5.0, 2.0, 0.7]) @ _W.T + 10.0
    return offline_subspace(x @ np.eye(D), SIGNAL_RANK)


def snap(node: str, sub: Subspace, seq: int = 1, epoch: str = "e0") -> SubspaceMessage:
    return SubspaceMessage(
        node_id=node,
        epoch=epoch,
        seq=seq,
        subspace=sub,
        timestamp=float(seq),
        provenance={node: sub.n_samples},
    )


def make_core(
    children: list[str], *, admit: ChildBounds | None = None, node: str = "agg", **kw: object
) -> AggregatorCore:
    config = NodeConfig(id=node, parent=None, rank=SIGNAL_RANK)
    return AggregatorCore(
        config,
        children,
        policy=publish_policy_for(config, leaf=False),
        status_policy=StatusPolicy(30.0, 2.0),
        now=0.0,
        influence_cap=None,
        rng=random.Random(0),
        admit=admit,
        **kw,  # type: ignore[arg-type]
    )


OPEN = ChildBounds((), DEFAULT_MAX_READING_RATE)


class Clock:
    """A virtual clock that publishes what a core decides (as `AggregatorAgent.step`) and
    sends its status documents."""

    def __init__(self) -> None:
        self.now = 0.0

    def publish(self, core: AggregatorCore) -> SubspaceMessage | None:
        """Advance to the core's next wakeup (at most 60 s) and publish if it decides to."""
        for _ in range(10):
            self.now = min(core.next_wakeup(self.now), self.now + 60.0)
            if core.status_due(self.now):
                core.status_sent(self.now)  # the status document (a join or forget)
            reason = core.snapshot_due(self.now)
            if reason is not None:
                msg = core.make_snapshot(self.now, reason)
                assert msg is not None
                core.snapshot_published(msg, self.now)
                return msg
        return None


def assert_same_summary(got: Subspace, expected: Subspace) -> None:
    assert got.n_samples == expected.n_samples
    k = min(got.rank, expected.rank, SIGNAL_RANK)
    np.testing.assert_allclose(got.singular_values[:k], expected.singular_values[:k], rtol=1e-9)
    assert principal_angles(got.basis[:, :k], expected.basis[:, :k]).max() < 1e-7


SUBS = {name: exact(20 + 7 * i, seed=i) for i, name in enumerate(["a", "b", "c", "d", "e"])}


def test_an_open_aggregator_admits_a_child_the_topology_does_not_declare() -> None:
    core, clock = make_core(["a", "b"], admit=OPEN), Clock()
    for child in ("a", "b"):
        assert core.receive(child, snap(child, SUBS[child]), clock.now) is None

    assert core.receive("d", snap("d", SUBS["d"]), clock.now) is None
    assert core.child_ids == ["a", "b", "d"] and core.joins == 1
    assert core.status_changed  # a join sends a status document
    msg = clock.publish(core)

    assert msg is not None
    assert msg.provenance == {"a": 20, "b": 27, "d": 41}
    assert_same_summary(msg.subspace, merge_many([SUBS["a"], SUBS["b"], SUBS["d"]]))
    assert "d" in core.tree and core.tree.keys == ("a", "b", "d")
    extra = core.status_extra(clock.now)
    assert extra["open"] is True
    assert extra["joined"] == ["d"] and extra["joins"] == 1


def test_a_closed_aggregator_refuses_a_child_it_does_not_declare() -> None:
    core, clock = make_core(["a", "b"]), Clock()
    core.receive("a", snap("a", SUBS["a"]), 0.0)

    assert not core.admits("d")
    assert core.receive("d", snap("d", SUBS["d"]), 0.0) == "unknown_child"
    assert core.child_ids == ["a", "b"] and core.joins == 0
    assert "d" not in core.tree
    assert clock.publish(core).provenance == {"a": 20}  # type: ignore[union-attr]
    assert core.status_extra(clock.now)["open"] is False


def test_an_admitted_child_is_held_to_the_bounds_declared_for_the_group() -> None:
    topology = parse_topology(
        """
        [defaults]
        rank = 3
        [[nodes]]
        id = "root"
        open = true
        [nodes.admit]
        valid_range = [0, 20]
        max_reading_rate = 1
        """
    )
    core = make_core([], admit=admit_bounds(topology, "root"))
    assert core.receive("pi-09", snap("pi-09", SUBS["a"]), 0.0) is None

    # a forged snapshot of a new device: far more energy than readings in [0, 20] allow
    basis = np.linalg.qr(np.random.default_rng(1).normal(size=(D, 3)))[0]
    forged = snap("pi-66", Subspace(basis, np.full(3, 1e6), 1))
    assert core.receive("pi-66", forged, 0.0) == "energy_bound"
    assert "pi-66" in core.quarantined and not core.knows("pi-66")
    # pi-09 reads at most once a second: 1000 more readings 1 s later is implausible
    jump = snap("pi-09", Subspace(SUBS["a"].basis, SUBS["a"].singular_values, 1020), 2)
    assert core.receive("pi-09", jump, 1.0) == "n_samples_rate"
    assert core.child_ids == ["pi-09"] and core.joins == 1
    assert set(core.status_extra(1.0)["quarantined"]) == {"pi-09", "pi-66"}


def test_forgetting_a_child_publishes_the_merge_of_the_others_with_exactly_its_samples_less():
    core, clock = make_core(["a", "b", "c"], admit=OPEN), Clock()
    for child in ("a", "b", "c", "d"):
        core.receive(child, snap(child, SUBS[child]), clock.now)
    before = clock.publish(core)
    assert before is not None and before.n_samples == 20 + 27 + 34 + 41

    forgot_b = clock.now
    assert core.forget("b", clock.now) == 27  # declared
    after = clock.publish(core)
    assert after is not None
    assert after.n_samples == before.n_samples - 27
    assert after.provenance == {"a": 20, "c": 34, "d": 41}
    assert after.epoch == before.epoch and after.seq == before.seq + 1  # a normal publish
    assert_same_summary(after.subspace, merge_many([SUBS["a"], SUBS["c"], SUBS["d"]]))
    assert core.child_ids == ["a", "b", "c", "d"]  # a declared child keeps its place

    forgot_d = clock.now
    assert core.forget("d", clock.now) == 41  # admitted: it leaves the tree
    last = clock.publish(core)
    assert last is not None and last.provenance == {"a": 20, "c": 34}
    assert_same_summary(last.subspace, merge_many([SUBS["a"], SUBS["c"]]))
    assert core.child_ids == ["a", "b", "c"] and "d" not in core.tree
    extra = core.status_extra(clock.now)
    assert extra["forgets"] == 2 and extra["joined"] == []
    assert extra["forgotten"] == {
        "b": {"n_samples": 27, "since_s": round(clock.now - forgot_b, 3)},
        "d": {"n_samples": 41, "since_s": round(clock.now - forgot_d, 3)},
    }
    assert set(extra["children"]) == {"a", "c"}


def test_the_forget_is_published_by_the_core_deadline_without_new_input() -> None:
    core, clock = make_core(["a", "b"]), Clock()
    core.receive("a", snap("a", SUBS["a"]), 0.0)
    core.receive("b", snap("b", SUBS["b"]), 0.0)
    clock.publish(core)
    clock.now += 100.0
    t = clock.now

    core.forget("a", t)
    assert core.next_wakeup(t) <= t + core.policy.max_interval_s
    msg = clock.publish(core)  # from one wakeup to the next, no input
    assert msg is not None and msg.n_samples == 27
    assert clock.now <= t + core.policy.max_interval_s


def test_a_forgotten_child_that_publishes_again_is_merged_again() -> None:
    core, clock = make_core(["a", "b"], admit=OPEN), Clock()
    for child in ("a", "b", "d"):
        core.receive(child, snap(child, SUBS[child], seq=5), clock.now)
    full = clock.publish(core)
    core.forget("d", clock.now)
    core.forget("b", clock.now)
    assert clock.publish(core).n_samples == 20  # type: ignore[union-attr]

    # the same snapshots again (even an older seq of the same epoch): first ones now
    assert core.receive("d", snap("d", SUBS["d"], seq=1), clock.now) is None
    assert core.receive("b", snap("b", SUBS["b"], seq=1), clock.now) is None
    again = clock.publish(core)

    assert core.joins == 2 and core.child_ids == ["a", "b", "d"]
    assert again is not None and full is not None
    assert again.provenance == full.provenance
    assert_same_summary(again.subspace, full.subspace)


def test_forgetting_a_child_not_held_changes_nothing() -> None:
    core = make_core(["a"], admit=OPEN)
    core.receive("a", snap("a", SUBS["a"]), 0.0)
    Clock().publish(core)

    assert core.forget("zz", 1.0) is None
    assert core.forget("a", 1.0) == 20
    assert core.forget("a", 2.0) is None  # twice: the second finds nothing
    assert core.forgets == 1


def test_forgetting_a_quarantined_child_that_was_never_merged_drops_its_quarantine() -> None:
    topology = parse_topology(
        '[defaults]\nrank = 3\nvalid_range = [0, 20]\n[[nodes]]\nid = "root"\nopen = true\n'
    )
    core = make_core([], admit=admit_bounds(topology, "root"))
    basis = np.linalg.qr(np.random.default_rng(2).normal(size=(D, 3)))[0]
    core.receive("x", snap("x", Subspace(basis, np.full(3, 1e6), 1)), 0.0)
    assert "x" in core.quarantined

    assert core.forget("x", 1.0) == 0
    assert not core.quarantined and not core.unpublished


def test_forgetting_every_child_publishes_an_empty_summary_the_parent_accepts() -> None:
    site, root, clock = make_core(["a", "b"], node="site"), make_core(["site"]), Clock()
    for child in ("a", "b"):
        site.receive(child, snap(child, SUBS[child]), clock.now)
    up = clock.publish(site)
    assert up is not None and root.receive("site", up, clock.now) is None

    site.forget("a", clock.now)
    site.forget("b", clock.now)
    empty = clock.publish(site)

    assert empty is not None
    assert (empty.n_samples, empty.rank, empty.n_features, empty.provenance) == (0, 0, D, {})
    assert root.receive("site", empty, clock.now) is None  # a decrease its provenance explains
    assert clock.publish(root).n_samples == 0  # type: ignore[union-attr]


def test_a_parent_takes_a_decrease_explained_by_forgotten_leaves_and_quarantines_others():
    site, root, clock = make_core(["a", "b", "c"], node="site"), make_core(["site"]), Clock()
    for child in ("a", "b", "c"):
        site.receive(child, snap(child, SUBS[child]), clock.now)
    root.receive("site", clock.publish(site), clock.now)  # type: ignore[arg-type]
    top = clock.publish(root)
    assert top is not None and top.n_samples == 81

    site.forget("b", clock.now)
    up = clock.publish(site)
    assert up is not None
    assert root.receive("site", up, clock.now) is None
    assert clock.publish(root).n_samples == 81 - 27  # type: ignore[union-attr]

    # the same drop with provenance still naming every leaf is implausible
    forged = SubspaceMessage(
        node_id="site",
        epoch=up.epoch,
        seq=up.seq + 1,
        subspace=Subspace(up.subspace.basis, up.subspace.singular_values, 10),
        timestamp=0.0,
        provenance=up.provenance,
    )
    assert root.receive("site", forged, clock.now) == "n_samples_decreased"


def test_the_status_document_lists_only_the_latest_forgotten_children() -> None:
    core = make_core([], admit=OPEN)
    for i in range(MAX_FORGOTTEN_SHOWN + 5):
        core.receive(f"n{i}", snap(f"n{i}", SUBS["a"]), float(i))
        core.forget(f"n{i}", float(i))

    extra = core.status_extra(100.0)
    assert extra["forgets"] == extra["joins"] == MAX_FORGOTTEN_SHOWN + 5
    assert list(extra["forgotten"]) == [f"n{i}" for i in range(5, MAX_FORGOTTEN_SHOWN + 5)]
    assert core.tree.capacity <= 1  # every slot reused


@pytest.mark.parametrize("k", [8, 100])
def test_each_join_and_leave_costs_at_most_ceil_log2_k_plus_one_merges(k: int) -> None:
    core, clock = make_core([], admit=OPEN), Clock()
    bound = int(np.ceil(np.log2(k))) + 1
    for i in range(k):
        core.receive(f"n{i}", snap(f"n{i}", SUBS["abcde"[i % 5]]), clock.now)
        core.merge()
        assert core.tree.merges_last_update <= bound
    for i in range(0, k, 3):
        core.forget(f"n{i}", clock.now)
        before = core.merges
        core.merge()
        assert core.merges - before <= bound
    assert len(core.tree) == k - len(range(0, k, 3))
