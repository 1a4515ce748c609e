"""The offline secure-sum benchmark (`benchmarks.secagg.sites`) against the runtime's protocol:
the leaf and aggregator cores (`SecAggRelease`, `SecAggSite`) run one slot per site on a virtual
clock, every message through the wire, with the benchmark's share draws (``rng_for(26, seed,
site, leaf)``; the masks cancel): the released sums, so the root error, are the benchmark's.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

pytest.importorskip("cryptography")
pytest.importorskip("shamirs")

from benchmarks.measure import rng_for
from benchmarks.privacy.motes_tree import load_motes
from benchmarks.secagg import sites
from edge_runtime.agents.aggregator.core.secagg_site import SecAggSite
from edge_runtime.agents.leaf.core.secagg_release import SecAggRelease
from edge_runtime.fpca import error_ratio, merge_many
from edge_runtime.secagg.aggregator_round import RoundTimeouts
from edge_runtime.secagg.messages import KeyRoster, ShareDelivery, SlotOutcome, UnmaskRequest
from edge_runtime.wire.secagg import decode_secagg, encode_secagg

PERIOD_S = 100.0
TIMEOUTS = RoundTimeouts(advertise=5.0, share=5.0, masked_input=10.0, unmask=5.0)
MAX_MESSAGES = 200  # a slot of 4 leaves is a few dozen messages


def _wire(message):
    """Through the wire and back, as the shells publish and read it."""
    return decode_secagg(encode_secagg(message, deployment="bench"), deployment="bench")


def _one_slot(
    leaves: dict[str, SecAggRelease],
    site: SecAggSite,
    noise: dict[str, np.random.Generator],
    keys: np.random.Generator,
) -> SlotOutcome:
    """Every leaf advertises, answers every stage, and the site's outcome is returned."""
    now = 0.0
    for leaf in leaves.values():
        ad = leaf.advertise(leaf.next_slot, keys.bytes(32), keys.bytes(32), keys.bytes(32))
        assert site.receive(_wire(ad), now) == []
    now = site.next_wakeup(now)
    queue = deque(site.tick(now))
    for _ in range(MAX_MESSAGES):
        if not queue:
            now = site.next_wakeup(now)
            queue.extend(site.tick(now))
            continue
        message = _wire(queue.popleft())
        if isinstance(message, KeyRoster):
            replies = [leaves[node].receive_roster(message) for node in message.leaf_ids]
        elif isinstance(message, ShareDelivery):
            node = message.recipient
            replies = [leaves[node].receive_shares(message, noise[node])]
        elif isinstance(message, UnmaskRequest):
            replies = [leaves[node].unmask(message) for node in sorted(message.survivors)]
        else:
            assert isinstance(message, SlotOutcome)
            return message
        for reply in replies:
            queue.extend(site.receive(_wire(reply), now))
    raise AssertionError(f"no outcome after {MAX_MESSAGES} messages")


def test_motes_light_one_release_matches_the_benchmark():
    """2 sites of 4 leaves, t = 4, one release each, (1, 1e-5), rank 10: the in-process
    protocol gives the root error of `benchmarks.secagg.sites` for seed 0."""
    data = load_motes()
    d, seed, epsilon, delta = data.n_features, 0, 1.0, 1e-5
    method = sites.SiteMethod("one release per leaf, t = 4", scale=2.0**16)
    cal = sites.calibration_for(method, d, epsilon, delta)
    common = {"epsilon": epsilon, "delta": delta, "clip_norm": data.clip_norm, "horizon": 1}
    subspaces = []
    for s, members in enumerate(sites.sites_of(len(data.parts), 2)):
        ids = tuple(f"pi-{i:02d}" for i in members)
        leaves = {
            node: SecAggRelease(node, d, threshold=4, cohort=ids, calibration=cal, **common)
            for node in ids
        }
        site = SecAggSite(
            ids, 4, d, slot_period_s=PERIOD_S, now=0.0, timeouts=TIMEOUTS, calibration=cal,
            **common,
        )  # fmt: skip
        for i, node in zip(members, ids, strict=True):
            leaves[node].add_rows(data.parts[i])
        noise = {f"pi-{i:02d}": rng_for(26, seed, s, i) for i in members}
        outcome = _one_slot(leaves, site, noise, np.random.default_rng(s))
        assert outcome.released and len(outcome.survivors) == 4
        n = sum(len(data.parts[i]) for i in members)
        subspaces.append(site.subspace(d, n_samples=n))
    root = merge_many(subspaces, rank=10)
    ours = error_ratio(data.x, root.basis[:, :10])
    bench = sites.root_error(data, method, cal, rank=10, epsilon=epsilon, delta=delta, seed=seed)
    assert ours == pytest.approx(bench, rel=1e-6)
    assert ours < 2.6  # 2.49 for seed 0 (the 20-seed median is the benchmark's)
