"""Plausibility of a child's snapshot, and bounded influence in the merge. No I/O, no clock.

An aggregator cannot see its children's readings, only their summaries ``(U, Sigma, n)``;
what it can check is that a summary is one the declared sensors could have produced,
and it can bound how much any one child moves the merge:

- **energy**: the data behind a snapshot have ``sum(Sigma^2) <= n * M^2``, where ``M^2``
  is the largest squared norm of one reading the leaves below the child can report
  (from their ``valid_range``); a centred summary has less (``sum ||x - mean||^2 <=
  sum ||x||^2``). Checked with a relative tolerance `ENERGY_RTOL` for float32 on the
  wire.
- **n_samples**: within one epoch a child's ``n_samples`` never decreases (except by the
  samples of the leaves its provenance no longer names: an aggregator child that forgot a
  leaf below it, `departed_samples`), and grows at most by ``rate * (dt + RATE_SLACK_S)``
  between two snapshots ``dt`` seconds apart (the aggregator's own arrival times, so no
  clock skew between devices enters; the slack covers batching and broker delays).
  ``rate`` is the sum of the leaves' declared ``max_reading_rate`` below the child,
  `DEFAULT_MAX_READING_RATE` per leaf that declares none.
- **resets**: a new epoch (the child's state started afresh) at most `MAX_RESETS` times
  per `RESET_WINDOW_S` seconds.

A snapshot that fails is not merged; the child is *quarantined* until a snapshot passes
(checked against the child's last good snapshot, never against a failed one).

**Bounded influence** (`influence_scales`): a child whose energy per sample exceeds
``cap`` times the pooled energy per sample of its siblings has its singular values scaled
down to exactly that bound before the merge, so its share of the merged energy is at most
``cap`` times its share of the samples. `DEFAULT_INFLUENCE_CAP` = 100, from a measurement
on Motes light (8 contiguous leaves, which really see different light; every leaf's
snapshot after every block of 50 fed to one aggregator, ``tests/test_plausibility.py``):
the largest honest ratio is 29.2, early in the replay when a leaf's first bright block
meets siblings that have seen only dark ones; over whole leaves it is 2.16. A forged
``(n = 1, Sigma = 1e7)`` snapshot has a ratio near 1e7 and is scaled to the weight of at
most 100 average readings.

Private children: their snapshots are noisy releases, so the energy bound does not hold
exactly for them (the noise adds energy); the energy check is skipped for a snapshot that
carries a privacy guarantee, while the ``n_samples`` checks (``n`` is public in the
release) and the influence cap apply unchanged.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from edge_runtime.topology import NodeConfig, Topology
from edge_runtime.wire import SubspaceMessage

__all__ = [
    "ADMITTED_TEMPLATE_ID",
    "DEFAULT_INFLUENCE_CAP",
    "DEFAULT_MAX_READING_RATE",
    "ENERGY_RTOL",
    "MAX_RESETS",
    "MIN_SIBLINGS",
    "PLAUSIBILITY_REASONS",
    "QUARANTINE_POLICIES",
    "RATE_SLACK_S",
    "RESET_WINDOW_S",
    "ChildBounds",
    "Plausibility",
    "Quarantine",
    "ResetLimiter",
    "admit_bounds",
    "check_snapshot",
    "child_bounds",
    "departed_samples",
    "energy",
    "influence_scales",
]

#: Readings/s assumed for a leaf that declares no ``max_reading_rate``: above the whole
#: fleet's replay rate measured on this machine (28,869 readings/s, `benchmarks/README.md`,
#: section (g)).
DEFAULT_MAX_READING_RATE = 100_000.0
#: Seconds of slack added to the time between two snapshots in the rate bound.
RATE_SLACK_S = 5.0
#: Relative tolerance of the energy bound (float32 singular values on the wire).
ENERGY_RTOL = 1e-3
#: A child may start a new epoch at most this often per `RESET_WINDOW_S`.
MAX_RESETS = 3
#: Seconds of the sliding window `MAX_RESETS` counts in (aggregator clock).
RESET_WINDOW_S = 60.0
#: The reasons `check_snapshot` returns (each quarantines the child).
PLAUSIBILITY_REASONS: tuple[str, ...] = (
    "energy_bound",
    "n_samples_decreased",
    "n_samples_rate",
    "reset_rate",
)
#: Siblings with samples (and, pooled, at least the child's samples) the influence cap
#: needs as its reference: early in a replay one sibling's few readings say little.
MIN_SIBLINGS = 2
#: Largest energy per sample of a child relative to its siblings' (bounded influence).
DEFAULT_INFLUENCE_CAP = 100.0


@dataclass(frozen=True)
class ChildBounds:
    """What the topology declares about the leaves below one child.

    Attributes
    ----------
    leaves : tuple of NodeConfig
        The leaves below the child (their ``valid_range``); empty: no energy check.
    max_rate : float
        Readings/s the leaves below can produce together, > 0.
    """

    leaves: tuple[NodeConfig, ...]
    max_rate: float

    def norm_sq(self, n_features: int) -> float | None:
        """Largest squared L2 norm of one reading of ``n_features`` values any leaf below
        may pass on (`NodeConfig.reading_norm_sq_bound`, sensor units squared); None when
        a leaf below declares no range, or one of another width, or there are no leaves."""
        bounds = [leaf.reading_norm_sq_bound(n_features) for leaf in self.leaves]
        if not bounds or any(b is None for b in bounds):
            return None
        return max(bounds)  # type: ignore[type-var]


def child_bounds(topology: Topology, child: str) -> ChildBounds:
    """`ChildBounds` of ``child`` from the ``valid_range`` and ``max_reading_rate`` its
    leaves declare in ``topology`` (`DEFAULT_MAX_READING_RATE` for a leaf without one)."""
    leaves = tuple(topology.nodes[leaf] for leaf in topology.leaves_under(child))
    rates = (leaf.max_reading_rate for leaf in leaves)
    return ChildBounds(leaves, sum(DEFAULT_MAX_READING_RATE if r is None else r for r in rates))


ADMITTED_TEMPLATE_ID = "admitted"
"""The id `admit_bounds` gives the template leaf of an open aggregator's admitted children
(the bounds do not depend on the id)."""


def admit_bounds(topology: Topology, node_id: str) -> ChildBounds | None:
    """The `ChildBounds` every child that open aggregator ``node_id`` admits is held to:
    the ``valid_range`` and ``max_reading_rate`` of `Topology.admitted_leaf` (one leaf;
    `DEFAULT_MAX_READING_RATE` without a rate). None for a closed aggregator."""
    if not topology.is_open(node_id):
        return None
    leaf = topology.admitted_leaf(node_id, ADMITTED_TEMPLATE_ID)
    rate = leaf.max_reading_rate
    return ChildBounds((leaf,), DEFAULT_MAX_READING_RATE if rate is None else rate)


def energy(msg: SubspaceMessage) -> float:
    """``sum(Sigma^2)`` of a snapshot's singular values ``(k,)``: the squared Frobenius norm
    of the data it summarises (sensor units squared; about its mean when centred)."""
    s = np.asarray(msg.subspace.singular_values, dtype=np.float64)
    return float(np.dot(s, s))


@dataclass
class ResetLimiter:
    """Times of a child's recent epoch changes (a sliding window)."""

    times: deque[float] = field(default_factory=deque)

    def allow(self, now: float) -> bool:
        """Record a reset at ``now``; False when it is one too many in the window."""
        while self.times and now - self.times[0] > RESET_WINDOW_S:
            self.times.popleft()
        if len(self.times) >= MAX_RESETS:
            return False
        self.times.append(now)
        return True


def check_snapshot(
    msg: SubspaceMessage,
    last_good: SubspaceMessage | None,
    last_good_arrived: float,
    bounds: ChildBounds,
    resets: ResetLimiter,
    now: float,
) -> str | None:
    """The first failed plausibility check of ``msg``, or None.

    Parameters
    ----------
    msg : SubspaceMessage
        The child's new snapshot (already known to be newer than ``last_good``).
    last_good : SubspaceMessage or None
        The child's last snapshot that passed, None before the first.
    last_good_arrived : float
        When ``last_good`` arrived, seconds (aggregator clock).
    bounds : ChildBounds
    resets : ResetLimiter
        The child's epoch changes (updated here when ``msg`` starts a new epoch).
    now : float
        Arrival time of ``msg``, seconds.

    Returns
    -------
    str or None
        ``"energy_bound"``, ``"n_samples_decreased"``, ``"n_samples_rate"``,
        ``"reset_rate"`` or None.
    """
    n = msg.n_samples
    norm_sq = bounds.norm_sq(msg.n_features)
    public = msg.privacy is None
    if norm_sq is not None and public and energy(msg) > n * norm_sq * (1.0 + ENERGY_RTOL):
        return "energy_bound"
    if last_good is None:
        return None
    if msg.epoch == last_good.epoch:
        if n < last_good.n_samples and n < last_good.n_samples - departed_samples(last_good, msg):
            return "n_samples_decreased"
        allowed = bounds.max_rate * (max(now - last_good_arrived, 0.0) + RATE_SLACK_S)
        if n - last_good.n_samples > allowed:
            return "n_samples_rate"
        return None
    if not resets.allow(now):
        return "reset_rate"
    return None


def departed_samples(last: SubspaceMessage, new: SubspaceMessage) -> int:
    """Samples of the leaves ``last``'s provenance names and ``new``'s does not: what a
    child that forgot leaves below it (membership) may drop within one epoch.

    ``O(len(last.provenance))``; `check_snapshot` computes it only for a decrease.
    """
    return sum(count for leaf, count in last.provenance.items() if leaf not in new.provenance)


def influence_scales(
    snapshots: Mapping[str, SubspaceMessage], cap: float = DEFAULT_INFLUENCE_CAP
) -> dict[str, float]:
    """Factor (<= 1) for each child's singular values so that no child's energy per sample
    exceeds ``cap`` times its siblings' pooled energy per sample.

    Computed on the unscaled snapshots (one pass; scaling one child never changes another's
    factor). A child gets 1 without a reference: fewer than `MIN_SIBLINGS` siblings holding
    samples and energy, siblings holding fewer samples than it, or no samples or energy of
    its own. Energies are `energy` (sensor units squared); scaling the singular values by
    ``f`` scales a child's energy by ``f**2``. The cap is a policy of this runtime
    (`DEFAULT_INFLUENCE_CAP` from the measurement in the module docstring), not
    from the FPCA paper.

    Parameters
    ----------
    snapshots : mapping of str to SubspaceMessage
        The latest snapshot of each child the merge includes.
    cap : float, default `DEFAULT_INFLUENCE_CAP`
        Largest ratio of a child's energy per sample to its siblings' pooled one.

    Returns
    -------
    dict of str to float
        The factor in ``(0, 1]`` of each child of ``snapshots``.

    Raises
    ------
    ValueError
        If ``cap`` is not a finite number >= 1.
    """
    if not (math.isfinite(cap) and cap >= 1.0):
        raise ValueError(f"influence cap must be a finite number >= 1, got {cap!r}")
    e = {c: energy(m) for c, m in snapshots.items()}
    n = {c: m.n_samples for c, m in snapshots.items()}
    total_e, total_n = sum(e.values()), sum(n.values())
    reporting = sum(1 for c in snapshots if n[c] > 0 and e[c] > 0)
    scales = {}
    for c in snapshots:
        others_n, others_e = total_n - n[c], total_e - e[c]
        # A reference needs MIN_SIBLINGS siblings holding at least as many samples.
        if reporting - 1 < MIN_SIBLINGS or others_n < n[c] or others_e <= 0 or e[c] <= 0:
            scales[c] = 1.0
            continue
        bound = cap * (others_e / others_n) * n[c]
        scales[c] = 1.0 if e[c] <= bound else math.sqrt(bound / e[c])
    return scales


@dataclass
class Quarantine:
    """A quarantined child: why, since when, how many snapshots failed."""

    reason: str
    since: float
    failures: int = 1


#: What happens to a quarantined child's last good snapshot: kept in the merge, or dropped.
QUARANTINE_POLICIES: tuple[str, ...] = ("keep", "drop")


class Plausibility:
    """The checks, quarantines and influence factors of one aggregator's children: a part
    of `AggregatorCore`.

    Parameters
    ----------
    bounds : mapping of str to ChildBounds
        What the topology declares below each child; a child missing here is held to the
        bounds its caller gives (`check`), else none but `DEFAULT_MAX_READING_RATE`.
    influence_cap : float or None
        Bounded influence (`influence_scales`); None merges children as they are.
    quarantine_policy : {"keep", "drop"}
        A quarantined child's last good snapshot stays in the merge, or leaves it until the
        child sends a plausible snapshot again.

    Attributes
    ----------
    quarantined : dict of str to Quarantine
        The children quarantined now.
    releases : int
        Quarantines ended by a plausible snapshot.

    Raises
    ------
    ValueError
        An unknown ``quarantine_policy``.
    """

    def __init__(
        self,
        bounds: Mapping[str, ChildBounds],
        influence_cap: float | None,
        quarantine_policy: str,
    ) -> None:
        if quarantine_policy not in QUARANTINE_POLICIES:
            raise ValueError(
                f"quarantine_policy must be one of {QUARANTINE_POLICIES}, got {quarantine_policy!r}"
            )
        self.bounds = dict(bounds)
        self.influence_cap = influence_cap
        self.quarantine_policy = quarantine_policy
        self.quarantined: dict[str, Quarantine] = {}
        self.releases = 0
        self._resets: dict[str, ResetLimiter] = {}

    def check(
        self,
        child: str,
        msg: SubspaceMessage,
        last_good: SubspaceMessage | None,
        last_good_arrived: float,
        now: float,
        *,
        undeclared: ChildBounds | None = None,
    ) -> str | None:
        """`check_snapshot` of ``child``'s new snapshot against its bounds (``undeclared``
        for a child without declared ones, e.g. an admitted child); a failure quarantines
        the child (or counts one more failure), a pass ends its quarantine. Returns the
        reason of a failure, else None."""
        bounds = self.bounds.get(child)
        if bounds is None:
            bounds = undeclared or ChildBounds((), DEFAULT_MAX_READING_RATE)
        resets = self._resets.setdefault(child, ResetLimiter())
        failed = check_snapshot(msg, last_good, last_good_arrived, bounds, resets, now)
        if failed is not None:
            entry = self.quarantined.get(child)
            if entry is None:
                self.quarantined[child] = Quarantine(failed, now)
            else:
                entry.failures += 1
                entry.reason = failed
            return failed
        if self.quarantined.pop(child, None) is not None:
            self.releases += 1
        return None

    def excludes(self, child: str) -> bool:
        """Whether the merge leaves ``child`` out for its quarantine (policy ``drop``)."""
        return self.quarantine_policy == "drop" and child in self.quarantined

    def scales(self, included: Mapping[str, SubspaceMessage]) -> dict[str, float]:
        """Each included child's influence factor (`influence_scales`; all 1 without a
        cap)."""
        if self.influence_cap is None:
            return dict.fromkeys(included, 1.0)
        return influence_scales(included, self.influence_cap)

    def forget(self, child: str) -> bool:
        """Drop what is held of ``child`` (quarantine, reset window); whether it was
        quarantined."""
        self._resets.pop(child, None)
        return self.quarantined.pop(child, None) is not None

    def status(self, now: float) -> dict[str, object]:
        """The status document's ``quarantined`` (id -> reason, seconds since, failures)
        and ``released``."""
        return {
            "quarantined": {
                c: {"reason": q.reason, "since_s": round(now - q.since, 3), "failures": q.failures}
                for c, q in sorted(self.quarantined.items())
            },
            "released": self.releases,
        }
