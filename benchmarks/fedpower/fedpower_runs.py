"""FedPower simulated round by round under a fault (`benchmarks.fedpower.faults`).

`simulate` is `edge_runtime.fedpower.run_fedpower` (same server, numerics and draws; without a
fault the very same bases, tested) plus the fault and the bytes of every round: one round
message per subscribed leaf and one reply per leaf that answered in time; a round closes at the
quorum or at the timeout of a fake clock (one second per round).
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
    """One simulated run: the global basis ``(d, r)`` after each round; per round the wire
    bytes, the replies that arrived and the messages delivered (round copies + replies); rounds
    closed at the timeout; wall time of the numerics (no I/O); each private leaf's budget."""

    history: tuple[np.ndarray, ...]
    bytes_per_round: tuple[int, ...]
    replies_per_round: tuple[int, ...]
    messages_per_round: tuple[int, ...]
    timeouts: int
    seconds: float
    budget: FedPowerBudget | None


def simulate(
    parts: Sequence[np.ndarray], rank: int, rounds: int, local_steps: int = 1, *,
    opt: bool = True, participation: float = 1.0, privacy: tuple[float, float] | None = None,
    clip_norm: float | None = None, fault: Fault | None = None, seed: int = 0,
) -> FedPowerRun:  # fmt: skip
    """FedPower over ``parts`` (``(n_l, d)``, one leaf each) for ``rounds`` rounds; arguments as
    for `run_fedpower` (``rng = default_rng(seed)``); ``privacy`` calibrates the noise for all
    ``rounds * local_steps`` iterations (ValueError without ``clip_norm``)."""
    fault = Fault() if fault is None else fault
    rng = np.random.default_rng(seed)
    m, d = len(parts), int(parts[0].shape[1])
    t0 = time.perf_counter()
    budget = None
    if privacy is not None:
        if clip_norm is None:
            raise ValueError("privacy needs clip_norm")
        steps = rounds * local_steps
        budget = FedPowerBudget.calibrate(*privacy, clip_norm, steps, rank, "mironov")
    grams = [LocalGram(d, clip_norm=clip_norm if privacy is not None else None) for _ in parts]
    for i, (g, part) in enumerate(zip(grams, parts, strict=True)):
        g.add(fault.rows(i, np.asarray(part, dtype=np.float64), m))
    quorum = max(1, round(participation * m))
    server = FedPowerServer(
        [str(i) for i in range(m)], orthonormalise(rng.standard_normal((d, rank))),
        Schedule(local_steps, total=rounds * local_steps), quorum=quorum, opt=opt,
        sample=quorum < m, rng=rng,
    )  # fmt: skip
    subscribers = sum(fault.connected(i, m) for i in range(m))
    history, wire, replied = [], [], []
    for k in range(rounds):
        start = server.start_round(float(k))
        sent, count = subscribers * round_bytes(d, rank, start.round, start.local_steps), 0
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
    messages = tuple(subscribers + c for c in replied)
    seconds = time.perf_counter() - t0
    return FedPowerRun(tuple(history), tuple(wire), tuple(replied), messages, server.timeouts,
                       seconds, budget)  # fmt: skip
