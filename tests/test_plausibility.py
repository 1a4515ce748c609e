"""Plausibility checks and bounded influence at aggregators (issue 14), core level, virtual
clock: no broker, no sleeps."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from edge_runtime.agents.aggregator.core.aggregator import AggregatorCore
from edge_runtime.agents.aggregator.core.plausibility import (
    DEFAULT_INFLUENCE_CAP,
    MAX_RESETS,
    RATE_SLACK_S,
    RESET_WINDOW_S,
    ChildBounds,
    ResetLimiter,
    check_snapshot,
    child_bounds,
    energy,
    influence_scales,
)
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import StatusPolicy
from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import FPCAEdge, Subspace, error_ratio
from edge_runtime.topology import NodeConfig, load_topology
from edge_runtime.wire import SubspaceMessage


def declared(valid_range: object, max_rate: float) -> ChildBounds:
    """The bounds of one leaf declaring ``valid_range``."""
    leaf = NodeConfig(id="leaf", parent="agg", rank=3, valid_range=valid_range)
    return ChildBounds((leaf,), max_rate)


RANGE = declared([0.0, 2000.0], max_rate=1000.0)


def msg(node: str, sub: Subspace, seq: int, epoch: str = "e0", t: float = 0.0) -> SubspaceMessage:
    return SubspaceMessage(
        node_id=node,
        epoch=epoch,
        seq=seq,
        subspace=sub,
        timestamp=t,
        provenance={node: sub.n_samples},
    )


def fitted(x: np.ndarray, rank: int = 3) -> Subspace:
    return FPCAEdge(x.shape[1], rank, oversample=2).fit(x).tracked_subspace


def forged(d: int, n: int = 1, sigma: float = 1e7, seed: int = 0) -> Subspace:
    basis = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, 3)))[0]
    return Subspace(basis, np.full(3, sigma), n)


def core(children: list[str], bounds: dict[str, ChildBounds], **kw: object) -> AggregatorCore:
    config = NodeConfig(id="agg", parent=None, rank=3)
    return AggregatorCore(
        config,
        children,
        policy=publish_policy_for(config, leaf=False),
        status_policy=StatusPolicy(30.0, 2.0),
        now=0.0,
        bounds=bounds,
        rng=random.Random(0),
        **kw,  # type: ignore[arg-type]
    )


def test_energy_bound_is_n_times_the_largest_squared_reading_norm() -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(0.0, 2000.0, size=(200, 4))
    honest = fitted(x)
    bounds = declared([0.0, 2000.0], 1e5)

    assert bounds.norm_sq(4) == 4 * 2000.0**2
    assert energy(msg("a", honest, 1)) <= 200 * bounds.norm_sq(4)
    assert check_snapshot(msg("a", honest, 1), None, 0.0, bounds, ResetLimiter(), 0.0) is None
    bad = msg("a", forged(4), 1)
    assert check_snapshot(bad, None, 0.0, bounds, ResetLimiter(), 0.0) == "energy_bound"
    # per-feature ranges, and a range of another width disables the check
    wide = declared([[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 3.0]], 1e5)
    assert wide.norm_sq(4) == pytest.approx(12.0)
    assert wide.norm_sq(5) is None
    assert ChildBounds((), 1.0).norm_sq(4) is None


def test_n_samples_never_decreases_and_grows_at_most_at_the_declared_rate() -> None:
    x = np.random.default_rng(2).uniform(0, 100, size=(5000, 4))
    first = msg("a", fitted(x[:100]), 1)
    resets = ResetLimiter()
    # 10 s later at 1000 readings/s: up to 1000 * (10 + slack) more samples
    limit = int(1000 * (10 + RATE_SLACK_S))
    ok = msg("a", fitted(x[: 100 + min(limit, 4900)]), 2)
    assert check_snapshot(ok, first, 0.0, RANGE, resets, 10.0) is None
    jump = msg("a", Subspace(first.subspace.basis, first.subspace.singular_values, 10**9), 2)
    assert check_snapshot(jump, first, 0.0, RANGE, resets, 1.0) == "n_samples_rate"
    fewer = msg("a", fitted(x[:50]), 3)
    assert check_snapshot(fewer, first, 0.0, RANGE, resets, 1.0) == "n_samples_decreased"


def test_new_epochs_are_rate_limited_per_window() -> None:
    x = np.random.default_rng(3).uniform(0, 100, size=(100, 4))
    last = msg("a", fitted(x), 5)
    resets = ResetLimiter()
    results = [
        check_snapshot(msg("a", fitted(x), 1, epoch=f"e{k + 1}"), last, 0.0, RANGE, resets, k)
        for k in range(MAX_RESETS + 1)
    ]
    assert results == [None] * MAX_RESETS + ["reset_rate"]
    later = msg("a", fitted(x), 1, epoch="late")
    assert check_snapshot(later, last, 0.0, RANGE, resets, RESET_WINDOW_S + 5) is None


@pytest.mark.parametrize("policy", ["keep", "drop"])
def test_a_forged_snapshot_quarantines_its_child_until_a_plausible_one_arrives(
    policy: str,
) -> None:
    rng = np.random.default_rng(4)
    parts = [rng.uniform(0, 2000, size=(300, 6)) for _ in range(3)]
    children = ["a", "b", "c"]
    agg = core(children, dict.fromkeys(children, RANGE), quarantine_policy=policy)
    for k, (c, x) in enumerate(zip(children, parts, strict=True)):
        assert agg.receive(c, msg(c, fitted(x[:150]), 1), now=float(k)) is None
    honest, _ = agg.merge()

    reason = agg.receive("b", msg("b", forged(6), 1, epoch="evil", t=1e9), now=5.0)

    assert reason == "energy_bound"
    assert set(agg.quarantined) == {"b"}
    merged, covered = agg.merge()
    if policy == "keep":  # the last good snapshot stays: the merge is unchanged
        assert merged is honest or np.allclose(merged.singular_values, honest.singular_values)
    else:
        assert merged.n_samples == 300 and "b" not in {m.node_id for m in covered}
    status = agg.status_extra(7.0)["quarantined"]
    assert status == {"b": {"reason": "energy_bound", "since_s": 2.0, "failures": 1}}
    assert "b" in str(agg.health())  # a change of health: a status document goes out
    # the honest leaf goes on in its own epoch: released
    assert agg.receive("b", msg("b", fitted(parts[1]), 2), now=8.0) is None
    assert agg.quarantined == {} and agg.releases == 1
    merged, _ = agg.merge()
    assert merged.n_samples == 600  # a and c 150 each, b now 300


def test_influence_cap_scales_only_a_child_far_above_its_siblings_energy_per_sample() -> None:
    rng = np.random.default_rng(5)
    honest = {c: msg(c, fitted(rng.uniform(0, 100, size=(200, 5))), 1) for c in "abc"}
    assert influence_scales(honest) == dict.fromkeys("abc", 1.0)
    loud = dict(honest, d=msg("d", forged(5, n=1, sigma=1e5), 1))

    scales = influence_scales(loud)

    assert scales["a"] == scales["b"] == scales["c"] == 1.0
    others = sum(energy(honest[c]) for c in "abc") / 600
    assert energy(loud["d"]) * scales["d"] ** 2 == pytest.approx(DEFAULT_INFLUENCE_CAP * others)
    with pytest.raises(ValueError, match="influence cap"):
        influence_scales(honest, cap=0.5)


def _motes_replay(slow_leaf: int | None) -> tuple[AggregatorCore, list[dict], Subspace]:
    """The Motes light leaves' snapshots after every block of 50, at 500 readings/s (one
    leaf at 50/s), fed to one aggregator over all 8 with the bounds the shipped
    topologies/motes-light.toml declares and every other setting at its default."""
    data = np.array(load_dataset("motes-light"), dtype=np.float64)
    parts = np.array_split(data, 8)
    leaves = [f"pi-{i:02d}" for i in range(1, 9)]
    topology = load_topology(Path(__file__).resolve().parents[1] / "topologies/motes-light.toml")
    bounds = {leaf: child_bounds(topology, leaf) for leaf in leaves}  # the shipped defaults
    assert bounds["pi-01"].norm_sq(48) == 48 * 2000.0**2
    agg = core(leaves, bounds)
    events = []
    for i, (leaf, x) in enumerate(zip(leaves, parts, strict=True)):
        rate = 50.0 if i == slow_leaf else 500.0
        est = FPCAEdge(48, 10, block_size=50)
        stop = len(x) // 10 if i == slow_leaf else len(x)
        for k, start in enumerate(range(0, stop, 50), start=1):
            est.partial_fit(x[start : start + 50])
            if est.n_samples_seen_ < start + 50 and start + 50 < stop:
                continue
            events.append((min(start + 50, stop) / rate, leaf, k, est.tracked_subspace))
    events.sort(key=lambda e: e[0])
    scales = []
    for t, leaf, k, sub in events:
        assert agg.receive(leaf, msg(leaf, sub, k, t=t), now=t) is None, (leaf, k)
        agg.merge()
        scales.append(dict(agg._scales))
    merged, _ = agg.merge()
    return agg, scales, merged


@pytest.mark.parametrize("slow_leaf", [None, 7])
def test_no_honest_motes_leaf_is_quarantined_or_capped_over_a_full_replay(
    slow_leaf: int | None,
) -> None:
    agg, scales, merged = _motes_replay(slow_leaf)

    assert agg.quarantined == {} and agg.rejects == {}
    assert all(f == 1.0 for step in scales for f in step.values())
    data = np.array(load_dataset("motes-light"), dtype=np.float64)
    if slow_leaf is None:
        assert error_ratio(data, merged.truncate(10).basis) <= 1.01


def test_a_leaf_restored_from_an_older_checkpoint_starts_a_new_epoch_not_a_decrease() -> None:
    from edge_runtime.agents.common.core.policy import ConfirmPolicy
    from edge_runtime.agents.leaf.core.leaf import LeafCore
    from edge_runtime.fpca import FPCAEdge as Estimator

    config = NodeConfig(id="leaf", parent="agg", rank=2, block_size=4)

    def leaf() -> LeafCore:
        return LeafCore(
            config,
            policy=publish_policy_for(config, leaf=True),
            status_policy=StatusPolicy(),
            confirm_policy=ConfirmPolicy(),
            now=0.0,
            n_features=4,
            checkpointing=True,
            rng=random.Random(0),
        )

    x = np.random.default_rng(6).uniform(0, 100, size=(16, 4))
    old = leaf()
    old.apply(x[:8], 0.0)
    state, *_ = old.checkpoint_state()
    estimator_state = old.estimator.get_state()
    old.apply(x[8:], 1.0)  # published after the checkpoint, then the process dies
    published = msg("leaf", old.estimator.tracked_subspace, 3, epoch=old.epoch)

    for retained, new_epoch in ((published, True), (msg("leaf", fitted(x[:8]), 3), False)):
        restarted = leaf()
        restarted.restore_checkpoint(state, Estimator.from_state(estimator_state), 2.0)
        retained = SubspaceMessage(**{**retained.__dict__, "epoch": old.epoch})
        restarted.continue_after(retained)
        assert restarted.seq == 3
        assert (restarted.epoch != old.epoch) is new_epoch
        # the parent takes the restarted leaf's next snapshot instead of quarantining it
        agg = core(["leaf"], {"leaf": RANGE})
        assert agg.receive("leaf", retained, now=1.0) is None
        follow = msg("leaf", restarted.estimator.tracked_subspace, 4, restarted.epoch, t=9.0)
        assert agg.receive("leaf", follow, now=3.0) is None
