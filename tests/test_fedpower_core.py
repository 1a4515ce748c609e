"""FedPower's runtime cores on a virtual clock: no broker, no sleeps, time as an argument.

`FedPowerRootCore` and `FedPowerLeafCore` are driven by hand with explicit ``now`` values:
rounds close at the first K of M replies or at the timeout, late and bad replies are dropped
and counted, a restarted leaf answers the retained round, a restarted root continues its
rounds, and a private leaf clips, adds noise at the calibrated scale, stops at its budget,
reports its ledger and never publishes its Gram.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from edge_runtime.agents.aggregator.core.guarantee import weakest_guarantee
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import ConfirmPolicy, StatusPolicy, largest_angle
from edge_runtime.agents.fedpower.core.estimator import GramEstimator
from edge_runtime.agents.fedpower.core.leaf import FedPowerLeafCore
from edge_runtime.agents.fedpower.core.root import FedPowerRootCore
from edge_runtime.fedpower.accounting import (
    MECHANISM,
    fedpower_noise_std,
    power_step_sensitivity,
    rdp_epsilon,
)
from edge_runtime.fedpower.power import orthonormalise
from edge_runtime.topology import Topology, parse_topology
from edge_runtime.wire import PrivacyParams
from edge_runtime.wire.fedpower import ReplyMessage, RoundMessage

LEAVES = ("a", "b", "c")
D, RANK = 6, 2
TIMEOUT = 2.0
DEP = "fp-core"
ANGLE_ROUNDING = 1e-10  # rad: a converged angle recomputed after one more round


def topology(*, private: str = "", **fedpower: object) -> Topology:
    """root -> a, b, c; ``private`` holds extra [defaults] keys (privacy)."""
    head = [f'name = "{DEP}"', 'algorithm = "fedpower"', f"fedpower_round_timeout_s = {TIMEOUT}"]
    fedpower = {"round_interval_s": 0.0, "idle_interval_s": 0.0, **fedpower}
    head += [f"fedpower_{k} = {v!r}" for k, v in fedpower.items()]
    lines = [*head, "[defaults]", f"rank = {RANK}", private, "[[nodes]]", 'id = "root"']
    for leaf in LEAVES:
        lines += ["[[nodes]]", f'id = "{leaf}"', 'parent = "root"']
    return parse_topology("\n".join(lines) + "\n")


def leaf_core(t: Topology, leaf: str, now: float = 0.0) -> FedPowerLeafCore:
    config = t.nodes[leaf]
    return FedPowerLeafCore(
        config,
        iterations=t.fedpower.total_iterations,
        policy=publish_policy_for(config, leaf=True),
        status_policy=StatusPolicy(30.0, 1.0),
        confirm_policy=ConfirmPolicy(0.5),
        now=now,
        rng=random.Random(0),
    )


def root_core(t: Topology, now: float = 0.0) -> FedPowerRootCore:
    return FedPowerRootCore(
        "root",
        t.leaves(),
        RANK,
        t.fedpower,
        status_policy=StatusPolicy(30.0, 1.0),
        now=now,
        deployment=DEP,
        rng=random.Random(now),  # a root started at another time draws another epoch
    )


def data(seed: int = 0, n: int = 200) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    scales = np.array([5.0, 4.0, 1.0, 0.5, 0.3, 0.1])
    rot, _ = np.linalg.qr(rng.standard_normal((D, D)))
    return {leaf: (rng.standard_normal((n, D)) * scales) @ rot.T for leaf in LEAVES}


def fed(t: Topology, rows: dict[str, np.ndarray], now: float = 0.0) -> dict[str, FedPowerLeafCore]:
    leaves = {leaf: leaf_core(t, leaf, now) for leaf in LEAVES}
    for leaf, core in leaves.items():
        core.apply(rows[leaf], now)
    return leaves


def reply_of(leaf: FedPowerLeafCore, msg: RoundMessage) -> ReplyMessage:
    assert leaf.on_round(msg, DEP) is None
    assert leaf.reply_due()
    reply = leaf.make_reply(0.0, DEP)
    assert reply is not None
    return reply


def run_round(
    root: FedPowerRootCore, leaves: dict[str, FedPowerLeafCore], now: float, answer=LEAVES
) -> RoundMessage:
    """Start a round at ``now``; the leaves in ``answer`` reply at ``now``."""
    msg = root.round_due(now, now)
    assert msg is not None
    for leaf in answer:
        assert root.offer(reply_of(leaves[leaf], msg), now) is None
    return msg


def top(x: np.ndarray, r: int = RANK) -> np.ndarray:
    return np.linalg.svd(x, full_matrices=False)[2][:r].T


def test_a_round_closes_at_the_first_k_of_m_replies_and_a_later_reply_is_late():
    t = topology(quorum=2)
    root, leaves = root_core(t), fed(t, data())
    msg = root.round_due(0.0, 0.0)
    assert msg is not None and msg.round == 1 and msg.basis is None  # d not known yet
    assert not root.close_due(100.0)  # no reply: round 1 has no deadline
    assert root.offer(reply_of(leaves["a"], msg), 1.0) is None
    assert not root.close_due(1.0)
    assert root.offer(reply_of(leaves["b"], msg), 1.5) is None
    assert root.close_due(1.5)  # K = 2 of M = 3, long before the timeout
    model = root.close(1.5, 1.5)
    assert model is not None and model.seq == 1 and set(model.provenance) == {"a", "b"}
    assert model.n_samples == 400 and model.privacy is None
    assert root.offer(reply_of(leaves["c"], msg), 1.6) == "late"
    assert root.late_replies == 1 and root.status_extra(1.6)["late_replies"] == 1


def test_the_roots_step_closes_a_round_then_starts_the_next_in_that_order():
    """`FedPowerRootCore.step` decides the tick: the model of the round that closes, then
    the next round, then the status document, then when to wake."""
    from edge_runtime.agents.common.core.actions import Publish, Wake, describe

    t = topology(quorum=2)
    root, leaves = root_core(t), fed(t, data())
    first = root.step(0.0, 100.0)
    assert [describe(a)[:2] for a in first] == [("publish", "round"), ("wake", 1.0)]
    msg = first[0].message
    assert isinstance(msg, RoundMessage) and msg.round == 1 and msg.timestamp == 100.0
    for leaf in ("a", "b"):
        assert root.offer(reply_of(leaves[leaf], msg), 1.0) is None
    actions = root.step(1.5, 101.5)
    kinds = [describe(a)[:2] for a in actions]
    assert kinds[:2] == [("publish", "model"), ("publish", "round")]  # closed, then the next
    assert isinstance(actions[-1], Wake)
    model, second = actions[0].message, actions[1].message
    assert model.seq == 1 and set(model.provenance) == {"a", "b"}
    assert second.round == 2 and second.basis is not None
    status = [a for a in actions if isinstance(a, Publish) and a.kind == "status"]
    for action in status:
        root.published(action, 1.5)
    assert not root.status_due(1.5)


def test_a_round_closes_at_the_timeout_without_a_dead_leaf_and_its_reply_is_late():
    t = topology(round_interval_s=0.5)
    root, leaves = root_core(t), fed(t, data())
    run_round(root, leaves, 0.0)
    assert root.close_due(0.0)  # all three replied
    root.close(0.0, 0.0)
    assert root.round_due(0.4, 0.4) is None  # round_interval_s
    msg = run_round(root, leaves, 0.5, answer=("a", "b"))  # "c" is dead
    assert msg.round == 2 and msg.basis is not None
    assert not root.close_due(0.5 + TIMEOUT - 1e-6)
    assert root._other_wakeups(0.5) == [0.5 + TIMEOUT]  # the deadline is a wakeup
    assert root.close_due(0.5 + TIMEOUT)
    model = root.close(0.5 + TIMEOUT, 0.0)
    assert model is not None and set(model.provenance) == {"a", "b"}
    assert root.status_extra(3.0)["timeouts"] == 1
    assert root.offer(reply_of(leaves["c"], msg), 3.0) == "late"
    assert root.late_replies == 1
    # rounds go on and converge on the data of everybody who answers
    now = 3.0
    for _ in range(30):
        now += 1.0
        run_round(root, leaves, now)
        assert root.close_due(now)
        root.close(now, now)
    everything = np.vstack(list(data().values()))
    assert largest_angle(top(everything), root.model.subspace.basis) < 1e-6


def test_a_restarted_leaf_answers_the_retained_round_or_joins_the_next():
    t = topology()
    rows = data()
    root, leaves = root_core(t), fed(t, rows)
    run_round(root, leaves, 0.0)
    root.close(0.0, 0.0)
    msg = run_round(root, leaves, 1.0, answer=("a", "b"))
    # "c" restarts (a new process, its readings back from a checkpoint or its sensors) and
    # finds round 2 retained: it answers it, and the open round counts it
    c = leaf_core(t, "c", 1.5)
    c.apply(rows["c"], 1.5)
    assert c.replied_round == 0
    assert root.offer(reply_of(c, msg), 1.5) is None
    assert root.close_due(1.5)
    assert set(root.close(1.5, 0.0).provenance) == set(LEAVES)
    # restarted again after round 3 closed without it: its answer is late, it joins round 4
    msg3 = run_round(root, leaves, 2.0, answer=("a", "b"))
    root.close(2.0 + TIMEOUT, 0.0)
    c = leaf_core(t, "c", 5.0)
    c.apply(rows["c"], 5.0)
    assert root.offer(reply_of(c, msg3), 5.0) == "late"
    assert not c.reply_due()  # answered once per round per process
    msg4 = root.round_due(5.0, 5.0)
    assert msg4 is not None and msg4.round == 4
    assert root.offer(reply_of(c, msg4), 5.0) is None


def test_bad_replies_are_reasons_not_crashes_and_leave_the_round_intact():
    t = topology()
    root, leaves = root_core(t), fed(t, data())
    msg = run_round(root, leaves, 0.0, answer=("a",))
    good = reply_of(leaves["b"], msg)

    def variant(**changes: object) -> ReplyMessage:
        fields = {
            "node_id": good.node_id,
            "epoch": good.epoch,
            "round": good.round,
            "y": good.y,
            "n_samples": good.n_samples,
            "deployment": DEP,
        }
        fields.update(changes)
        return ReplyMessage(**fields)  # type: ignore[arg-type]

    non_finite = variant()
    y = good.y.copy()
    y[0, 0] = np.nan
    object.__setattr__(non_finite, "y", y)  # the wire refuses it; the core must too
    cases = {
        "unknown_leaf": variant(node_id="zz"),
        "n_features": variant(y=np.ones((D + 1, RANK))),
        "rank": variant(y=np.ones((D, RANK + 1))),
        "non_finite": non_finite,
        "round": variant(round=7),
        "foreign_deployment": variant(deployment="other"),
    }
    for reason, reply in cases.items():
        assert root.offer(reply, 0.1) == reason
    assert root.offer(good, 0.2) is None
    assert root.offer(good, 0.2) == "duplicate"
    assert root.offer(reply_of(leaves["c"], msg), 0.3) is None
    assert root.close_due(0.3)
    model = root.close(0.3, 0.0)
    assert model is not None and set(model.provenance) == set(LEAVES)
    assert np.isfinite(model.subspace.basis).all()
    # a leaf refuses a round of another deployment or a rank above its width
    leaf = leaves["a"]
    foreign = RoundMessage("root", "e", 9, RANK, None, 1, 1.0, deployment="other")
    assert leaf.on_round(foreign, DEP) == "foreign_deployment"
    assert leaf.on_round(RoundMessage("root", "e", 9, D + 1, None, 1, 1.0), DEP) == "rank"


def test_a_restarted_root_continues_after_its_retained_round():
    t = topology()
    root, leaves = root_core(t), fed(t, data())
    for k in range(3):
        run_round(root, leaves, float(k))
        root.close(float(k), 0.0)
    retained = root.round_message
    assert retained is not None and retained.round == 3
    before = root.model.subspace.basis
    again = root_core(t, 10.0)
    assert again.restore(retained) and again.epoch == root.epoch
    msg = run_round(again, leaves, 10.0)
    assert msg.round == 4
    assert largest_angle(msg.basis, retained.basis) < 1e-12  # it starts from the basis
    model = again.close(10.0, 0.0)
    assert model.seq == 4
    everything = np.vstack(list(data().values()))
    # After three rounds the power iteration sits at its fixed point (about 1.5e-6 rad
    # from the offline SVD here), so the fourth round moves the angle by rounding only:
    # another machine's BLAS made it 1.5e-16 rad larger. "No worse" holds within a
    # tolerance far below the angle itself and far above that rounding.
    assert largest_angle(top(everything), model.subspace.basis) <= largest_angle(
        top(everything), before
    ) + ANGLE_ROUNDING
    assert not root_core(t).restore(
        RoundMessage("other-root", "e", 3, RANK, None, 1, 1.0)
    )  # another root's message


def test_late_replies_before_the_root_knows_d_are_counted():
    """A root restarted during round 1 (retained round without a basis) has no server yet:
    replies to that round are late, and ``late_replies`` counts them from the first one,
    not only once the server exists."""
    t = topology()
    root, leaves = root_core(t), fed(t, data())
    first = root.round_due(0.0, 0.0)
    assert first is not None and first.basis is None
    again = root_core(t, 1.0)
    assert again.restore(first) and again.server is None
    assert again.offer(reply_of(leaves["a"], first), 1.0) == "late"  # round 1 is over
    assert again.late_replies == 1 and again.status_extra(1.0)["late_replies"] == 1
    second = again.round_due(1.0, 1.0)
    assert second is not None and second.round == 2 and second.basis is None
    assert again.offer(reply_of(leaves["b"], first), 1.1) == "late"
    assert again.late_replies == 2
    assert again.offer(reply_of(leaves["c"], second), 1.2) is None  # d known: a server
    assert again.server is not None and again.late_replies == 2


# ------------------------------------------------------------------------------ privacy
PRIVATE = "epsilon = 1.0\ndelta = 1e-5\nclip_norm = 8.0"


def test_private_noise_is_sigma_on_s_q_in_unit_ball_units():
    """The estimator iterates on A = S / n and adds sigma / n: n Y - S Q has std sigma."""
    d, r, n, t_iter = 200, 50, 40, 3
    params = PrivacyParams(1.0, 1e-5, 10.0, mechanism=MECHANISM, neighbours="replace-one")
    est = GramEstimator(d, r, privacy=params, iterations=t_iter, random_state=1)
    rows = np.random.default_rng(2).standard_normal((n, d)) * 3.0
    est.partial_fit(rows)
    sigma = fedpower_noise_std(1.0, 1e-5, t_iter, power_step_sensitivity(r))
    assert est.last_noise_std_ == pytest.approx(sigma)
    assert rdp_epsilon(sigma, t_iter, math.sqrt(2.0), 1e-5) == pytest.approx(1.0)
    z = orthonormalise(np.random.default_rng(3).standard_normal((d, r)))
    y = est.iterate(z, 1)
    noise = n * y - est.gram.gram @ z  # S of the unit-ball rows
    assert np.std(noise) == pytest.approx(sigma, rel=0.03)
    assert abs(np.mean(noise)) < 0.05 * sigma
    assert est.n_releases_ == 1 and est.budget_left == t_iter - 1
    # rows were clipped into the unit ball: ||x|| ~ 3 sqrt(200) > 10
    assert est.n_clipped_ == n
    assert np.trace(est.gram.gram) == pytest.approx(n, rel=1e-9)
    with pytest.raises(ValueError, match="budget covers 2 more"):
        est.iterate(z, 3)
    # the checkpoint keeps the guarantee and the ledger
    back = GramEstimator.from_state(est.get_state())
    assert back.params == params and back.iterations == t_iter
    assert (back.n_releases_, back.n_clipped_) == (1, n)
    assert np.array_equal(back.gram.gram, est.gram.gram)


def test_a_private_leaf_replies_with_its_guarantee_until_its_budget_is_spent():
    t = topology(private=PRIVATE, rounds=2, local_steps=1, decay="none")
    assert t.fedpower.total_iterations == 2
    rows = data(n=5000)
    root, leaves = root_core(t), fed(t, rows)
    leaf = leaves["a"]
    assert leaf.private and leaf.iterations == 2
    assert leaf.snapshot_due(0.0) is None and leaf.make_snapshot(0.0, "first") is None
    for k in range(2):
        msg = run_round(root, leaves, float(k))
        assert root.close_due(float(k))
        model = root.close(float(k), 0.0)
        assert model.privacy == PrivacyParams(
            1.0, 1e-5, 8.0, mechanism=MECHANISM, neighbours="replace-one"
        )
    assert root.done and root.round_due(10.0, 10.0) is None
    assert leaf.estimator.n_releases_ == 2 and leaf.budget_exhausted
    assert leaf.durable == leaf.ingested  # released: never replayed into a restart
    # a root that starts over (no retained round) asks again: the leaf does not answer
    again = root_core(t, 20.0)
    msg = again.round_due(20.0, 20.0)
    assert leaf.on_round(msg, DEP) is None and leaf.reply_due()
    assert leaf.make_reply(20.0, DEP) is None
    assert not leaf.reply_due() and leaf.budget_refusals == 1
    extra = leaf.status_extra(20.0)["fedpower"]
    assert extra["budget_exhausted"] and extra["iterations_run"] == 2
    assert extra["budget_iterations"] == 2 and extra["budget_refusals"] == 1
    # the noisy model still beats a random subspace by far (about 1.2 rad here)
    everything = np.vstack(list(rows.values()))
    assert largest_angle(top(everything), model.subspace.basis) < 0.3
    # a private leaf restores no snapshot (it publishes none)
    assert leaves["b"].restore_snapshot(model, 0.0) == "privacy_mismatch"


def test_the_model_carries_the_weakest_guarantee_of_every_leaf_that_shaped_it():
    weak = PrivacyParams(2.0, 1e-4, 30.0, mechanism=MECHANISM)
    strong = PrivacyParams(0.5, 1e-6, 10.0, mechanism=MECHANISM)
    assert weakest_guarantee([weak, strong]) == PrivacyParams(2.0, 1e-4, 30.0, mechanism=MECHANISM)
    assert weakest_guarantee([weak, None]) is None and weakest_guarantee([]) is None
    t = topology()
    root, leaves = root_core(t), fed(t, data())
    msg = root.round_due(0.0, 0.0)
    for leaf, params in zip(LEAVES, (weak, strong, strong), strict=True):
        reply = reply_of(leaves[leaf], msg)
        object.__setattr__(reply, "privacy", params)
        assert root.offer(reply, 0.0) is None
    assert root.close(0.0, 0.0).privacy == weak
    msg = root.round_due(1.0, 1.0)
    for leaf in ("b", "c"):  # "a" sits this round out; its data shaped the basis
        reply = reply_of(leaves[leaf], msg)
        object.__setattr__(reply, "privacy", strong)
        root.offer(reply, 1.0)
    assert root.close(1.0 + TIMEOUT, 0.0).privacy == weak


def test_the_text_summary_of_a_fedpower_run_reports_its_rounds(capsys) -> None:  # type: ignore[no-untyped-def]
    from edge_runtime.cli.output import print_summary as _print_summary
    from edge_runtime.runner import RunSummary

    fields = dict(
        samples=10, n_features=4, leaves_reporting=2, leaves_total=2, rank=2,
        root_n_samples=10, error_ratio=1.0, messages=5, payload_bytes=100, raw_bytes=320,
        sensor_messages=2, sensor_bytes=400, merges=0, rejects=0, wall_s=1.0, covered=True,
    )  # fmt: skip
    _print_summary(RunSummary(**fields, algorithm="fedpower", rounds=7))
    fedpower = capsys.readouterr().out
    _print_summary(RunSummary(**fields))
    fpca = capsys.readouterr().out
    assert "rounds              7" in fedpower and "merges" not in fedpower
    assert "merges              0" in fpca and "rounds" not in fpca
