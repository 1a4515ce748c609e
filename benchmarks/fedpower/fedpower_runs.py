"""FedPower simulated round by round with a fault (`benchmarks.fedpower.faults`).

`simulate` is `edge_runtime.fedpower.run_fedpower` (same server, same numerics, same
random draws) with a fault model and the wire bytes of every round: leaf ``i`` holds a
`LocalGram` of `Fault.rows`; each round the server (`FedPowerServer`, Algorithm 3: all
``M`` leaves asked, or a uniform ``K`` of them with ``participation < 1``) sends its
round message, the asked leaves whose reply is on time (`Fault.replies`) run their
local iterations and reply, and the round closes with what arrived (at the quorum, or
at the round timeout: a fake clock, one second per round). Without a fault it returns
the bases of `run_fedpower` exactly (tested).

Bytes per round: the round message (`wire_bytes.round_bytes`) once per *subscribed*
leaf (MQTT delivers a copy to each subscriber; a dead leaf is not subscribed; all ``M``
receive it with ``K < M`` too, as the round topic is shared) plus one reply
(`wire_bytes.reply_bytes`) per leaf that replied. Replies go straight to the root
(aggregators forward: one more copy per hop in a deeper tree is not counted).

Cost: per round ``p`` products ``(d, d) x (d, r)`` per replying leaf plus one
aggregation; memory ``M d**2`` floats for the Grams plus ``rounds`` bases.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.fedpower.faults import Fault
from benchmarks.fedpower.wire_bytes import reply_bytes, round_bytes
from edge_runtime.fedpower import (
    FedPowerBudget,
    FedPowerServer,
    LocalGram,
    Schedule,
    local_iterations,
    orthonormalise,
)

__all__ = ["FedPowerRun", "simulate"]


@dataclass(frozen=True, eq=False)
class FedPowerRun:
    """One simulated FedPower run.

    Attributes
    ----------
    history : tuple of ndarray of shape (d, r)
        Global basis after each round.
    bytes_per_round : tuple of int
        Wire bytes of each round (round copies + replies).
    replies_per_round : tuple of int
        Replies that arrived in each round.
    messages_per_round : tuple of int
        Messages delivered in each round (round copies + replies).
    timeouts : int
        Rounds closed at the timeout, short of the quorum.
    seconds : float
        Wall time of the numerics (Grams, local iterations, aggregation; no I/O).
    budget : FedPowerBudget or None
        Each private leaf's guarantee per reading.
    """

    history: tuple[np.ndarray, ...]
    bytes_per_round: tuple[int, ...]
    replies_per_round: tuple[int, ...]
    messages_per_round: tuple[int, ...]
    timeouts: int
    seconds: float
    budget: FedPowerBudget | None


def simulate(
    parts: Sequence[np.ndarray],
    rank: int,
    rounds: int,
    local_steps: int = 1,
    *,
    opt: bool = True,
    participation: float = 1.0,
    privacy: tuple[float, float] | None = None,
    clip_norm: float | None = None,
    fault: Fault | None = None,
    seed: int = 0,
) -> FedPowerRun:
    """Run FedPower over ``parts`` (``(n_l, d)`` each, one leaf each) for ``rounds`` rounds.

    Parameters mean what they mean for `run_fedpower` (``rng = default_rng(seed)``, the
    previous global basis as OPT reference, ``p`` constant); ``privacy`` calibrates the
    noise for all ``rounds * local_steps`` local iterations (a leaf that sits rounds out
    spends less). ``fault`` (default: none) as in `benchmarks.fedpower.faults`.
    """
    fault = Fault() if fault is None else fault
    rng = np.random.default_rng(seed)
    m = len(parts)
    d = int(parts[0].shape[1])
    t0 = time.perf_counter()
    budget = None
    if privacy is not None:
        if clip_norm is None:
            raise ValueError("privacy needs clip_norm")
        budget = FedPowerBudget.calibrate(
            privacy[0], privacy[1], clip_norm, rounds * local_steps, rank, "mironov"
        )
    grams = []
    for i, part in enumerate(parts):
        g = LocalGram(d, clip_norm=clip_norm if privacy is not None else None)
        g.add(fault.rows(i, np.asarray(part, dtype=np.float64), m))
        grams.append(g)
    quorum = max(1, round(participation * m))
    z0 = orthonormalise(rng.standard_normal((d, rank)))
    server = FedPowerServer(
        [str(i) for i in range(m)],
        z0,
        Schedule(local_steps, total=rounds * local_steps),
        quorum=quorum,
        opt=opt,
        sample=quorum < m,
        rng=rng,
    )
    subscribers = sum(fault.connected(i, m) for i in range(m))
    history, wire, replied = [], [], []
    for k in range(rounds):
        start = server.start_round(float(k))
        sent = subscribers * round_bytes(d, rank, start.round, start.local_steps)
        count = 0
        for name in sorted(start.participants, key=int):
            i, g = int(name), grams[int(name)]
            if g.n_samples == 0 or not fault.replies(i, start.round, m):
                continue  # nothing to iterate on, dead, or too late for this round
            noise = 0.0 if budget is None else budget.sigma / g.n_samples
            y = local_iterations(g.matrix, start.basis, start.local_steps, rng, noise)
            server.offer(name, start.round, y, g.n_samples)
            sent += reply_bytes(d, rank, start.round, f"leaf-{i}", g.n_samples, budget is not None)
            count += 1
        history.append(server.close_round(float(k) + (0.5 if count >= quorum else 1.0)))
        wire.append(sent)
        replied.append(count)
    seconds = time.perf_counter() - t0
    messages = tuple(subscribers + c for c in replied)
    return FedPowerRun(
        tuple(history), tuple(wire), tuple(replied), messages, server.timeouts, seconds, budget
    )
