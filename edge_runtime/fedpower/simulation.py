"""FedPower end to end in one process: the server loop of Algorithm 3 without any I/O.

For tests and benchmarks: every part of the data is one device holding a `LocalGram`; a
`FedPowerServer` runs the rounds on a fake clock (one second per round, every asked
device replies at once), so the result is the numerics of the runtime with no broker,
no timing and no faults. Cost per round: ``p`` products ``(d, d) x (d, r)`` per
participant plus one aggregation; memory ``m d**2`` for the ``m`` devices' Grams plus the
history of ``rounds`` global bases (``8 d r`` bytes each).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edge_runtime.fedpower._checks import check_fraction, check_steps
from edge_runtime.fedpower.accounting import CONVERSIONS, FedPowerBudget
from edge_runtime.fedpower.local_gram import LocalGram
from edge_runtime.fedpower.power import local_iterations, orthonormalise
from edge_runtime.fedpower.schedule import Schedule
from edge_runtime.fedpower.server import FedPowerServer

__all__ = ["FedPowerResult", "run_fedpower"]


@dataclass(frozen=True, eq=False)
class FedPowerResult:
    """The outcome of `run_fedpower`.

    Attributes
    ----------
    basis : ndarray of shape (d, r)
        The final global basis, orthonormal.
    history : tuple of ndarray of shape (d, r)
        The global basis after each round (``history[-1] is basis``).
    local_steps : tuple of int
        Local iterations of each round.
    participants : tuple of frozenset of int
        Indices of the parts that took part in each round.
    budget : FedPowerBudget or None
        The guarantee per reading of every device, if private.
    """

    basis: np.ndarray
    history: tuple[np.ndarray, ...]
    local_steps: tuple[int, ...]
    participants: tuple[frozenset[int], ...]
    budget: FedPowerBudget | None


def run_fedpower(
    parts: Sequence[np.ndarray],
    rank: int,
    rounds: int,
    local_steps: int = 1,
    *,
    decay: str | None = None,
    opt: bool = True,
    reference: str = "previous",
    participation: float = 1.0,
    privacy: tuple[float, float] | None = None,
    clip_norm: float | None = None,
    conversion: str = "mironov",
    rng: np.random.Generator | None = None,
    initial_basis: np.ndarray | None = None,
) -> FedPowerResult:
    """Simulate FedPower over ``parts`` (one device each) for ``rounds`` rounds.

    Parameters
    ----------
    parts : sequence of ndarray of shape (n_l, d)
        Each device's readings (rows), at least one device; ``n_l`` may be 0.
    rank : int
        ``r``, 1 <= r <= d.
    rounds : int
        Rounds (synchronisations) to run, >= 1.
    local_steps : int, default=1
        ``p``, local iterations of the first round (`Schedule`).
    decay : {"exponential", "linear"} or None, default=None
        Decaying ``p`` (`Schedule`).
    opt : bool, default=True
        Orthogonal Procrustes alignment in the aggregation.
    reference : {"previous", "largest"}, default="previous"
        OPT reference (`FedPowerServer`).
    participation : float, default=1.0
        ``K / M`` in (0, 1]: ``K = max(1, round(participation * M))`` devices drawn
        uniformly per round (Algorithm 3); 1.0 is full participation.
    privacy : (epsilon, delta) or None, default=None
        Per-reading budget; each device clips its rows to ``clip_norm`` and adds Gaussian
        noise at every local iteration, calibrated for all ``T = sum of local_steps``
        iterations of the run (`FedPowerBudget.calibrate`).
    clip_norm : float or None, default=None
        Row norm bound ``C``, required with ``privacy``.
    conversion : {"mironov", "cks"}, default="mironov"
        RDP conversion for ``privacy``.
    rng : numpy.random.Generator or None, default=None
        Source of the initial basis, the participant draws and the noise; None is
        ``default_rng(0)``.
    initial_basis : ndarray of shape (d, r) or None, default=None
        ``Z_0``; None draws a Gaussian matrix from ``rng`` and orthonormalises it.

    Returns
    -------
    FedPowerResult

    Raises
    ------
    ValueError
        One line naming a bad argument (shapes, ranks, counts, budget, ``clip_norm``).

    Examples
    --------
    >>> import numpy as np
    >>> from edge_runtime.fpca import offline_subspace, principal_angles
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(600, 6)) * np.array([5.0, 4.0, 1.0, 0.5, 0.3, 0.1])
    >>> res = run_fedpower(np.array_split(x, 3), rank=2, rounds=60)
    >>> bool(principal_angles(res.basis, offline_subspace(x, 2).basis).max() < 1e-8)
    True
    """
    items = [np.asarray(p, dtype=np.float64) for p in parts]
    if not items:
        raise ValueError("parts must hold at least one device's data, got none")
    d = items[0].shape[1] if items[0].ndim == 2 else -1
    for i, x in enumerate(items):
        if x.ndim != 2 or x.shape[1] != d:
            raise ValueError(f"parts[{i}] must have shape (n, {d}), got {x.shape}")
    rank = check_steps(rank, "rank")
    if rank > d:
        raise ValueError(f"rank must be <= n_features {d}, got {rank}")
    rounds = check_steps(rounds, "rounds")
    fraction = check_fraction(participation, "participation")
    rng = np.random.default_rng(0) if rng is None else rng
    schedule = Schedule(local_steps, decay=decay)
    budget = None
    if privacy is not None:
        if conversion not in CONVERSIONS:
            raise ValueError(f"conversion must be one of {CONVERSIONS}, got {conversion!r}")
        if clip_norm is None:
            raise ValueError("privacy needs clip_norm, the bound on each row's norm")
        epsilon, delta = privacy
        total = sum(schedule.local_steps(k) for k in range(1, rounds + 1))
        budget = FedPowerBudget.calibrate(epsilon, delta, clip_norm, total, rank, conversion)
    grams = []
    for x in items:
        g = LocalGram(d, clip_norm=clip_norm if privacy is not None else None)
        g.add(x)
        grams.append(g)
    m = len(grams)
    quorum = max(1, round(fraction * m))
    z0 = orthonormalise(rng.standard_normal((d, rank))) if initial_basis is None else initial_basis
    bounded = Schedule(
        schedule.period,
        total=sum(schedule.local_steps(k) for k in range(1, rounds + 1)),
        decay=decay,
    )
    server = FedPowerServer(
        [str(i) for i in range(m)],
        z0,
        bounded,
        quorum=quorum,
        opt=opt,
        reference=reference,
        sample=quorum < m,
        rng=rng,
    )
    history, steps, who = [], [], []
    for k in range(rounds):
        start = server.start_round(float(k))
        for name in sorted(start.participants, key=int):
            g = grams[int(name)]
            if g.n_samples == 0:
                continue  # nothing to iterate on: the device sits the round out
            noise = 0.0 if budget is None else budget.sigma / g.n_samples
            y = local_iterations(g.matrix, start.basis, start.local_steps, rng, noise)
            server.offer(name, start.round, y, g.n_samples)
        history.append(server.close_round(float(k)))
        steps.append(start.local_steps)
        who.append(frozenset(int(n) for n in start.participants))
    return FedPowerResult(history[-1], tuple(history), tuple(steps), tuple(who), budget)
