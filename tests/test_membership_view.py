"""What ``watch`` and the dashboard read of an aggregator's children (issue 23): joins,
forgets and quarantines extracted from status documents (real `AggregatorCore` documents
through the real encoder, and malformed ones), the changes between two documents, watch's
lines, and the dashboard's view model on a virtual clock. No broker."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from edge_runtime.agents.aggregator.core.aggregator import AggregatorCore
from edge_runtime.agents.aggregator.core.plausibility import DEFAULT_MAX_READING_RATE, ChildBounds
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import StatusPolicy
from edge_runtime.cli.watch import membership_line
from edge_runtime.dashboard import DashboardState
from edge_runtime.dashboard.page import PAGE_HTML
from edge_runtime.fpca import offline_subspace
from edge_runtime.monitor import (
    Membership,
    MembershipEvent,
    MembershipTracker,
    ModelWatcher,
    membership_of,
    quarantined_children,
)
from edge_runtime.monitor.membership import Forgotten
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import NodeConfig, load_topology
from edge_runtime.wire import StatusDetail, SubspaceMessage, decode_status, encode_status

MOTES = Path(__file__).resolve().parent.parent / "topologies" / "motes-light.toml"


def document(node: str, role: str = "aggregator", **extra: object) -> StatusDetail:
    return StatusDetail(
        node_id=node,
        role=role,
        online=True,
        rank=3,
        n_samples=100,
        seq=1,
        epoch="e1",
        rejects={},
        uptime_s=1.0,
        extra=extra,
    )


def members(
    *,
    joined: list[str] | None = None,
    joins: int = 0,
    forgotten: dict[str, tuple[int, float]] | None = None,
    forgets: int = 0,
    quarantined: dict[str, str] | None = None,
    open_: bool = True,
) -> dict[str, object]:
    """The membership keys of an aggregator's ``extra``, as `AggregatorCore` writes them."""
    return {
        "open": open_,
        "joins": joins,
        "joined": joined or [],
        "forgets": forgets,
        "forgotten": {c: {"n_samples": n, "since_s": t} for c, (n, t) in (forgotten or {}).items()},
        "quarantined": {
            c: {"reason": r, "since_s": 0.0, "failures": 1} for c, r in (quarantined or {}).items()
        },
    }


# ------------------------------------------------------------------------ extraction
def test_membership_of_a_real_aggregator_document_through_the_wire() -> None:
    """An open core admits ``pi-09`` and forgets declared ``b``: the document it writes,
    encoded and decoded, reads back as that membership."""
    config = NodeConfig(id="site-0", parent=None, rank=3)
    core = AggregatorCore(
        config,
        ["a", "b"],
        policy=publish_policy_for(config, leaf=False),
        status_policy=StatusPolicy(30.0, 2.0),
        now=0.0,
        influence_cap=None,
        rng=random.Random(0),
        admit=ChildBounds((), DEFAULT_MAX_READING_RATE),
    )
    rng = np.random.default_rng(5)
    for i, child in enumerate(["a", "b", "pi-09"]):
        sub = offline_subspace(rng.normal(size=(20 + i, 6)), 3)
        msg = SubspaceMessage(
            node_id=child,
            epoch="e0",
            seq=1,
            subspace=sub,
            timestamp=0.0,
            provenance={child: sub.n_samples},
        )
        assert core.receive(child, msg, 1.0) is None
    assert core.forget("b", 2.0) == 21
    doc = StatusDetail(
        node_id="site-0",
        role="aggregator",
        online=True,
        rank=3,
        n_samples=41,
        seq=1,
        epoch="e0",
        rejects={},
        uptime_s=3.0,
        extra=core.status_extra(3.0),
    )

    got = membership_of(decode_status(encode_status(doc)))

    assert got == Membership(
        open=True,
        joins=1,
        joined=("pi-09",),
        forgets=1,
        forgotten={"b": Forgotten(21, 1.0)},
        quarantined={},
    )
    assert got.shown
    assert json.loads(json.dumps(got.to_json()))["forgotten"] == {
        "b": {"n_samples": 21, "since_s": 1.0}
    }


def test_membership_of_a_leaf_or_an_old_document_is_none_and_a_closed_one_is_not_shown() -> None:
    assert membership_of(document("pi-01", role="leaf", anomaly_rate=0.1)) is None
    assert membership_of(document("site-a", merges=3)) is None  # before issue 23 / 14
    closed = membership_of(document("site-a", **members(open_=False)))
    assert closed == Membership() and not closed.shown
    quarantine_only = membership_of(document("site-a", quarantined={"pi-03": {"reason": "x"}}))
    assert quarantine_only is not None and quarantine_only.quarantined == {"pi-03": "x"}
    assert quarantine_only.shown


def test_malformed_membership_entries_are_read_leniently() -> None:
    got = membership_of(
        document(
            "site-0",
            open="yes",  # not True
            joins=-3,
            joined="pi-09",  # not a list
            forgets=True,  # a bool is no count
            forgotten={"pi-04": "gone", "pi-05": {"since_s": "soon"}},
            quarantined={"pi-03": "bad"},
        )
    )
    assert got == Membership(
        open=False,
        joins=0,
        joined=(),
        forgets=0,
        forgotten={"pi-04": Forgotten(0, 0.0), "pi-05": Forgotten(0, 0.0)},
        quarantined={"pi-03": "?"},
    )
    assert quarantined_children(document("pi-01", role="leaf")) == {}


# ------------------------------------------------------------------------ changes
def test_the_tracker_reports_joins_forgets_quarantines_and_releases_once() -> None:
    tracker = MembershipTracker()
    assert tracker.fold("site-0", document("site-0", **members())) == []  # the baseline
    step1 = tracker.fold("site-0", document("site-0", **members(joined=["pi-09"], joins=1)))
    assert step1 == [MembershipEvent("joined", "site-0", "pi-09", joins=1)]
    # the heartbeat again: nothing new
    assert tracker.fold("site-0", document("site-0", **members(joined=["pi-09"], joins=1))) == []
    quarantined = members(joined=["pi-09"], joins=1, quarantined={"pi-09": "energy_bound"})
    assert tracker.fold("site-0", document("site-0", **quarantined)) == [
        MembershipEvent("quarantined", "site-0", "pi-09", joins=1, reason="energy_bound")
    ]
    assert tracker.quarantined() == {"pi-09": "energy_bound"}
    released = members(joined=["pi-09"], joins=1)
    assert tracker.fold("site-0", document("site-0", **released)) == [
        MembershipEvent("released", "site-0", "pi-09", joins=1)
    ]
    forgot = members(joins=1, forgotten={"pi-09": (50, 0.1)}, forgets=1)
    assert tracker.fold("site-0", document("site-0", **forgot)) == [
        MembershipEvent("forgotten", "site-0", "pi-09", joins=1, forgets=1, n_samples=50)
    ]
    later = members(joins=1, forgotten={"pi-09": (50, 30.0)}, forgets=1)  # only older
    assert tracker.fold("site-0", document("site-0", **later)) == []
    assert tracker.totals() == (1, 1)
    # it joins again, and is forgotten again (its forgotten entry younger than before)
    again = members(joined=["pi-09"], joins=2, forgotten={"pi-09": (50, 40.0)}, forgets=1)
    assert [e.kind for e in tracker.fold("site-0", document("site-0", **again))] == ["joined"]
    twice = members(joins=2, forgotten={"pi-09": (60, 0.5)}, forgets=2)
    assert tracker.fold("site-0", document("site-0", **twice)) == [
        MembershipEvent("forgotten", "site-0", "pi-09", joins=2, forgets=2, n_samples=60)
    ]


def test_a_forgotten_quarantined_child_is_forgotten_not_released() -> None:
    tracker = MembershipTracker()
    tracker.fold("site-a", document("site-a", **members(quarantined={"pi-03": "energy_bound"})))
    forgot = members(forgotten={"pi-03": (0, 0.0)}, forgets=1)
    assert [e.kind for e in tracker.fold("site-a", document("site-a", **forgot))] == ["forgotten"]


def test_the_baseline_reports_nothing_unless_it_is_news() -> None:
    """A retained document shows what happened before we looked; a restarted aggregator
    re-learning an admitted child is not a new join."""
    state = members(joined=["pi-09", "pi-10"], joins=2, quarantined={"pi-10": "reset_rate"})
    tracker = MembershipTracker()
    assert tracker.fold("site-0", document("site-0", **state)) == []
    assert tracker.members["site-0"].joined == ("pi-09", "pi-10")
    restarted = members(joined=["pi-09"], joins=1)
    assert [e.kind for e in tracker.fold("site-0", document("site-0", **restarted))] == ["released"]
    assert tracker.fold("site-0", document("site-0", **state))[0].kind == "quarantined"

    news = MembershipTracker()
    events = news.fold("site-0", document("site-0", **state), baseline=False)
    assert [(e.kind, e.child) for e in events] == [
        ("joined", "pi-09"),
        ("joined", "pi-10"),
        ("quarantined", "pi-10"),
    ]


def test_the_model_watcher_reports_changes_from_status_documents() -> None:
    motes = load_topology(MOTES)
    seen: list[MembershipEvent] = []
    watcher = ModelWatcher(motes, AgentSettings(), watch_nodes=True, on_membership=seen.append)
    watcher._fold_detail("site-a", encode_status(document("site-a", **members())))
    watcher._fold_detail(
        "site-a",
        encode_status(document("site-a", **members(joined=["pi-09"], joins=1))),
        retained=False,
    )
    watcher._fold_detail(  # a document under another node's topic is not taken
        "site-b", encode_status(document("site-a", **members(joins=5)))
    )
    watcher._fold_detail(  # site-b's first document, live (no retained one): all news
        "site-b",
        encode_status(document("site-b", **members(joined=["pi-10"], joins=1))),
        retained=False,
    )
    assert seen == [
        MembershipEvent("joined", "site-a", "pi-09", joins=1),
        MembershipEvent("joined", "site-b", "pi-10", joins=1),
    ]
    assert list(watcher.membership.shown()) == ["site-a", "site-b"]


# ------------------------------------------------------------------------ watch's lines
def test_watch_lines_and_json_objects_for_each_kind() -> None:
    joined = MembershipEvent("joined", "site-0", "pi-09", joins=1)
    forgot = MembershipEvent("forgotten", "site-0", "pi-09", joins=1, forgets=1, n_samples=50)
    held = MembershipEvent("quarantined", "site-a", "pi-03", reason="energy_bound")
    free = MembershipEvent("released", "site-a", "pi-03")
    assert membership_line(joined) == "site-0 joined: pi-09 (joins=1)"
    assert membership_line(forgot) == "site-0 forgot: pi-09 n_samples=50 (forgets=1)"
    assert membership_line(held) == "site-a quarantined: pi-03 (energy_bound)"
    assert membership_line(free) == "site-a released: pi-03"
    assert forgot.to_json() == {
        "event": "forgotten",
        "aggregator": "site-0",
        "child": "pi-09",
        "joins": 1,
        "forgets": 1,
        "n_samples": 50,
    }
    assert held.to_json()["reason"] == "energy_bound" and "n_samples" not in held.to_json()


# ------------------------------------------------------------------------ the dashboard
def test_the_dashboard_state_holds_membership_and_recent_changes() -> None:
    motes = load_topology(MOTES)
    state = DashboardState(motes)
    topic = motes.status_detail_topic("site-a")
    state.fold(topic, encode_status(document("site-a", **members())), now=1.0)
    assert state.snapshot(1.0)["membership"] == [
        {
            "aggregator": "site-a",
            "open": True,
            "joins": 0,
            "joined": [],
            "forgets": 0,
            "forgotten": {},
            "quarantined": {},
        }
    ]
    joined = members(joined=["pi-09"], joins=1, quarantined={"pi-03": "energy_bound"})
    state.fold(topic, encode_status(document("site-a", **joined)), now=2.0)
    gone = members(joins=1, forgets=1, forgotten={"pi-09": (50, 0.0)})
    state.fold(topic, encode_status(document("site-a", **gone)), now=3.0)
    closed = members(open_=False)  # site-b: closed and nothing happened: not shown
    state.fold(
        motes.status_detail_topic("site-b"), encode_status(document("site-b", **closed)), 3.0
    )

    snap = state.snapshot(4.0)
    json.dumps(snap, allow_nan=False)
    (row,) = snap["membership"]  # type: ignore[misc]
    assert row["aggregator"] == "site-a" and row["joined"] == [] and row["joins"] == 1
    assert row["forgotten"] == {"pi-09": {"n_samples": 50, "since_s": 0.0}}
    assert [(e["t"], e["event"], e["child"]) for e in snap["membership_events"]] == [
        (2.0, "joined", "pi-09"),
        (2.0, "quarantined", "pi-03"),
        (3.0, "forgotten", "pi-09"),
        (3.0, "released", "pi-03"),
    ]
    rows = {n["id"]: n for n in snap["nodes"]}  # type: ignore[union-attr]
    assert rows["pi-03"]["quarantined"] is None  # released
    for needle in ('id="members"', "data-aggregator", "data-forgets", "drawMembership(s)"):
        assert needle in PAGE_HTML, needle
