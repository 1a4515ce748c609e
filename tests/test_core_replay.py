"""The cores are deterministic (issue 22, item 3): a recorded trace of inbound messages and
times, fed twice to fresh cores with the same seed, gives byte-identical outbound messages
and checkpoints.

The trace is what a leaf and its aggregator receive over 60 virtual seconds: sensor batches
with duplicates, gaps that a re-send fills, a gap nobody fills, readings outside the
declared range, and pauses. It is recorded once (as JSON, the way a trace would be stored)
and replayed through the cores exactly as their shells drive them: input, then the core's
own deadlines (`next_wakeup`). Everything outbound is encoded to the bytes the shell would
publish or write: snapshots (`encode_subspace`), confirmations (`encode_confirm`), status
documents (`encode_status`) and checkpoints (`save_checkpoint`).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from pathlib import Path

import numpy as np

from edge_runtime.agents.aggregator.core.aggregator import AggregatorCore
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import ConfirmPolicy, StatusPolicy
from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.checkpoint import save_checkpoint
from edge_runtime.topology import NodeConfig
from edge_runtime.wire import (
    SensorReadings,
    StatusDetail,
    encode_confirm,
    encode_status,
    encode_subspace,
)

D = 6
SRC = "replay:trace:leaf"


def record_trace(seed: int = 7) -> str:
    """A trace of timed sensor messages, as JSON: ``[[t, seq, rows], ...]``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(50.0, 10.0, size=(600, D))
    x[[17, 250, 251]] = 1e6  # outside valid_range: rejected
    messages, t = [], 0.0
    for start in range(0, 600, 8):
        t += float(rng.exponential(0.05)) + (3.0 if start in (200, 400) else 0.0)
        messages.append([round(t, 6), start, x[start : start + 8].tolist()])
    order = list(range(len(messages)))
    order[10], order[11] = order[11], order[10]  # reordered
    trace = [messages[i] for i in order]
    trace.insert(30, messages[29])  # a duplicate
    lost = trace.pop(40)  # lost, re-sent 2 s later
    trace.append([lost[0] + 2.0, lost[1], lost[2]])
    trace.pop(60)  # lost for good: the gap is given up
    trace.sort(key=lambda m: m[0])
    return json.dumps(trace)


def leaf_core(rng: random.Random) -> LeafCore:
    cfg = NodeConfig(
        id="leaf",
        parent="root",
        rank=2,
        block_size=16,
        valid_range=(0.0, 1000.0),
        epsilon=1.0,
        delta=1e-5,
        clip_norm=200.0,
        noise_seed=3,
    )
    return LeafCore(
        cfg,
        policy=publish_policy_for(cfg, leaf=True),
        status_policy=StatusPolicy(30.0, 2.0),
        confirm_policy=ConfirmPolicy(0.5),
        now=0.0,
        n_features=D,
        checkpointing=True,
        checkpoint_interval_s=10.0,
        gap_timeout_s=5.0,
        rng=rng,
    )


def root_core(rng: random.Random) -> AggregatorCore:
    cfg = NodeConfig(id="root", parent=None, rank=2)
    return AggregatorCore(
        cfg,
        ["leaf"],
        policy=publish_policy_for(cfg, leaf=False),
        status_policy=StatusPolicy(30.0, 2.0),
        now=0.0,
        rng=rng,
    )


def status_bytes(core, now: float) -> bytes:
    doc = StatusDetail(
        node_id=core.node_id,
        role="core",
        online=True,
        rank=0,
        n_samples=0,
        seq=core.seq,
        epoch=core.epoch,
        rejects=dict(core.rejects),
        uptime_s=round(now, 3),
        extra=core.status_extra(now),
    )
    return encode_status(doc)


def checkpoint_if_due(leaf: LeafCore, now: float, tmp: Path, out: list[bytes]) -> None:
    if leaf.checkpoint_due(now):
        state, ingested, n, blocks = leaf.checkpoint_state()
        path = tmp / f"leaf-{len(out)}.ckpt"
        save_checkpoint(path, state)
        out.append(path.read_bytes())
        leaf.checkpointed(ingested, n, blocks, now=now)


def replay(trace: str, seed: int, tmp: Path) -> list[bytes]:
    """Feed ``trace`` to fresh cores seeded with ``seed``; every outbound byte string."""
    rng = random.Random(seed)
    leaf, root = leaf_core(rng), root_core(rng)
    out: list[bytes] = []
    inbox = [(t, seq, np.asarray(rows)) for t, seq, rows in json.loads(trace)]
    now, i = 0.0, 0
    for _ in range(100_000):  # bounded: one pass per input or deadline
        while i < len(inbox) and inbox[i][0] <= now:
            _, seq, rows = inbox[i]
            for block, _, _ in leaf.accept_labelled(SensorReadings(rows, SRC, seq), now):
                leaf.apply(block, now)
            out += [repr(event).encode() for event in leaf.take_range_events()]
            i += 1
        for block, _, _ in leaf.expire_labelled(now):  # LeafAgent.step
            leaf.apply(block, now)
        if leaf.flush_due(now):
            leaf.flush()
        checkpoint_if_due(leaf, now, tmp, out)  # before the snapshot, as LeafAgent.step
        reason = leaf.snapshot_due(now)
        if reason is not None:
            msg = leaf.make_snapshot(now, reason)
            assert msg is not None
            leaf.snapshot_published(msg, now)
            out.append(encode_subspace(msg))
            assert root.receive("leaf", msg, now) is None
        checkpoint_if_due(leaf, now, tmp, out)
        confirm = leaf.confirm_due(now)
        if confirm is not None:
            leaf.confirm_sent(now)
            out.append(encode_confirm(confirm))
        reason = root.snapshot_due(now)  # AggregatorAgent.step
        if reason is not None:
            msg = root.make_snapshot(now, reason)
            assert msg is not None
            root.snapshot_published(msg, now)
            out.append(encode_subspace(msg))
        for core in (leaf, root):
            if core.status_due(now):
                core.status_sent(now)
                out.append(status_bytes(core, now))
        wake = min(leaf.next_wakeup(now), root.next_wakeup(now))
        nxt = inbox[i][0] if i < len(inbox) else math.inf
        now = min(max(wake, now + 1e-3), nxt)
        if now > 60.0:
            return out
    raise AssertionError("the trace did not end within 100,000 passes")


def test_the_same_trace_and_seed_give_byte_identical_messages_and_checkpoints(
    tmp_path: Path,
) -> None:
    trace = record_trace()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = replay(trace, seed=11, tmp=tmp_path / "a")
    second = replay(trace, seed=11, tmp=tmp_path / "b")
    kinds = len(first)
    assert kinds > 30  # snapshots, checkpoints, confirmations, status documents, events
    assert [hashlib.sha256(b).hexdigest() for b in first] == [
        hashlib.sha256(b).hexdigest() for b in second
    ]


def test_another_seed_gives_other_ids_and_nothing_else(tmp_path: Path) -> None:
    """The seed only draws ids (epochs, sessions): the numbers published are the same."""
    trace = record_trace()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = replay(trace, seed=11, tmp=tmp_path / "a")
    other = replay(trace, seed=12, tmp=tmp_path / "b")
    assert len(first) == len(other)
    assert first != other  # the epochs differ
