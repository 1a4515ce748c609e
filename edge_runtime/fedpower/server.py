"""The FedPower server as a plain state machine: rounds in, global bases out, no I/O.

One round (Algorithm 3 of FedPower, partial participation): the server sends the global
basis ``Z`` and the round's number of local iterations to the round's participants; each
replies with its last product ``Y_l`` and sample count ``s_l``; the server closes the round
and aggregates (`aggregate`). Time is a parameter (``now``, seconds on any monotonic
clock) and nothing sleeps, so the asyncio shell of the runtime and the tests drive the same
object (the h11 style of this project).

When a round closes. It closes (`close_due`) as soon as ``quorum`` participants (``K``)
have replied, or at ``deadline = start + round_timeout`` with whatever arrived: a
straggler or a dead leaf never stalls it. Two ways of choosing participants:

- ``sample=False`` (the runtime's default): every leaf is asked and the first ``K`` of the
  ``M`` replies close the round;
- ``sample=True``: ``K`` of the ``M`` leaves are drawn uniformly without replacement
  (``rng``), as in the paper's Algorithm 3, and only they are asked.

A reply to a round that is closed (or older) is dropped and counted (`late_replies`);
a second reply of a leaf in a round is `duplicate_replies`; a reply from a leaf not asked
in this round is `unasked_replies`. A round that closes with no weight (no replies, or
only ``n_samples = 0``) keeps the previous basis.

Memory: the global basis and at most ``M`` replies, ``8 d r (M + 1)`` bytes, plus one
`RoundRecord` per round (the history; O(M) each).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edge_runtime.fedpower._checks import as_basis, check_steps
from edge_runtime.fedpower.aggregation import aggregate
from edge_runtime.fedpower.power import orthonormalise
from edge_runtime.fedpower.schedule import Schedule

__all__ = ["DEFAULT_ROUND_TIMEOUT", "REFERENCES", "FedPowerServer", "RoundRecord", "RoundStart"]

#: Seconds a round waits for its quorum before closing with the replies it has.
DEFAULT_ROUND_TIMEOUT = 30.0

#: OPT references: the previous global basis (default) or the reply of largest weight.
REFERENCES = ("previous", "largest")


@dataclass(frozen=True, eq=False)
class RoundStart:
    """What the server sends at the start of a round.

    Attributes
    ----------
    round : int
        1-based round number.
    basis : ndarray of shape (d, r)
        The global basis ``Z`` every participant starts from (orthonormal, read-only).
    local_steps : int
        Local power iterations of the round (`Schedule.local_steps`).
    participants : frozenset of str
        The leaves asked.
    deadline : float
        ``now + round_timeout``: the round closes then at the latest.
    """

    round: int
    basis: np.ndarray
    local_steps: int
    participants: frozenset[str]
    deadline: float


@dataclass(frozen=True)
class RoundRecord:
    """How a round ended: its number, steps, who was counted, and whether it timed out.

    ``participants`` are the leaves asked, ``replied`` the ones counted (sorted);
    ``started`` and ``closed`` are times on the caller's clock (seconds, `start_round`'s
    and `close_round`'s ``now``).
    """

    round: int
    local_steps: int
    participants: frozenset[str]
    replied: tuple[str, ...]
    timed_out: bool
    started: float
    closed: float


class FedPowerServer:
    """The server loop of FedPower (Algorithm 3) as a synchronous core; time is an argument.

    Parameters
    ----------
    leaves : sequence of str
        The ``M`` leaf names, distinct, at least one.
    initial_basis : ndarray of shape (d, r)
        ``Z_0``, full column rank (orthonormalised here); e.g. a QR of a Gaussian matrix.
    schedule : Schedule
        Local iterations per round; the server is `done` after its last round.
    quorum : int or None, default=None
        ``K``, 1 <= K <= M: replies that close a round. None: all ``M``.
    round_timeout : float, default=DEFAULT_ROUND_TIMEOUT
        Seconds, > 0.
    opt : bool, default=True
        Aggregate with Orthogonal Procrustes alignment (`aggregate`).
    reference : {"previous", "largest"}, default="previous"
        OPT reference: the round's start basis, or the reply of largest weight.
    sample : bool, default=False
        Ask a uniform random ``K`` of the ``M`` leaves per round (needs ``rng``); False
        asks all and counts the first ``K``.
    rng : numpy.random.Generator or None, default=None

    Attributes
    ----------
    basis : ndarray of shape (d, r)
        The current global basis.
    n_features, rank : int
        ``d`` and ``r`` (fixed by ``initial_basis``).
    round : int
        The latest round started (0 before the first).
    history : list of RoundRecord
    late_replies, duplicate_replies, unasked_replies, timeouts : int
        Counters (module docstring); ``timeouts`` counts rounds closed short of the quorum.

    Raises
    ------
    ValueError
        One line naming a bad argument.
    """

    def __init__(
        self,
        leaves: Sequence[str],
        initial_basis: np.ndarray,
        schedule: Schedule,
        *,
        quorum: int | None = None,
        round_timeout: float = DEFAULT_ROUND_TIMEOUT,
        opt: bool = True,
        reference: str = "previous",
        sample: bool = False,
        rng: np.random.Generator | None = None,
    ) -> None:
        names = list(leaves)
        if not names or any(not isinstance(n, str) or not n for n in names):
            raise ValueError(f"leaves must be non-empty names, got {names!r}")
        if len(set(names)) != len(names):
            raise ValueError(f"leaves must be distinct, got {names!r}")
        if not isinstance(schedule, Schedule):
            raise ValueError(f"schedule must be a Schedule, got {type(schedule).__name__}")
        self.leaves = tuple(names)
        self.schedule = schedule
        self.quorum = len(names) if quorum is None else check_steps(quorum, "quorum")
        if self.quorum > len(names):
            raise ValueError(f"quorum must be <= the number of leaves {len(names)}, got {quorum}")
        timeout = float(round_timeout) if isinstance(round_timeout, int | float) else math.nan
        if isinstance(round_timeout, bool) or not (math.isfinite(timeout) and timeout > 0.0):
            raise ValueError(f"round_timeout must be a finite number > 0, got {round_timeout!r}")
        self.round_timeout = timeout
        if reference not in REFERENCES:
            raise ValueError(f"reference must be one of {REFERENCES}, got {reference!r}")
        if sample and not isinstance(rng, np.random.Generator):
            raise ValueError("sample=True needs rng, a numpy Generator")
        self.opt = bool(opt)
        self.reference = reference
        self.sample = bool(sample)
        self._rng = rng
        self.basis = orthonormalise(as_basis(initial_basis, "initial_basis"))
        self.basis.setflags(write=False)
        self.n_features, self.rank = (int(k) for k in self.basis.shape)  # fixed: d and r
        self.round = 0
        self.history: list[RoundRecord] = []
        self.late_replies = 0
        self.duplicate_replies = 0
        self.unasked_replies = 0
        self.timeouts = 0
        self._open: RoundStart | None = None
        self._started = 0.0
        self._replies: dict[str, tuple[np.ndarray, int]] = {}

    @property
    def is_open(self) -> bool:
        """True between `start_round` and `close_round`."""
        return self._open is not None

    @property
    def done(self) -> bool:
        """True once the schedule's last round has closed (never for an unbounded one)."""
        n = self.schedule.n_rounds
        return n is not None and self.round >= n and not self.is_open

    @property
    def replies(self) -> int:
        """Replies accepted in the open round (0 if none is open)."""
        return len(self._replies)

    @property
    def pending(self) -> dict[str, tuple[np.ndarray, int]]:
        """The open round's accepted replies, ``leaf -> (Y, n_samples)``, a new dict.

        ``Y`` is the server's own float64 ``(d, r)`` copy (do not write to it); empty when
        no round is open. `close_round` consumes them.
        """
        return dict(self._replies)

    def start_round(self, now: float) -> RoundStart:
        """Open the next round at time ``now`` (seconds, the clock of `close_due`); what to
        send to its participants (``K`` of them drawn from ``rng`` when ``sample``).

        Raises
        ------
        ValueError
            If a round is open or the schedule is done.
        """
        if self._open is not None:
            raise ValueError(f"round {self.round} is still open; close it first")
        if self.done:
            raise ValueError(f"the schedule is done after round {self.round}")
        k = self.round + 1
        if self.sample and self.quorum < len(self.leaves):
            assert self._rng is not None
            chosen = self._rng.choice(len(self.leaves), size=self.quorum, replace=False)
            participants = frozenset(self.leaves[i] for i in chosen)
        else:
            participants = frozenset(self.leaves)
        self.round = k
        self._started = float(now)
        self._replies = {}
        self._open = RoundStart(
            k,
            self.basis,
            self.schedule.local_steps(k),
            participants,
            self._started + self.round_timeout,
        )
        return self._open

    def offer(self, leaf: str, round: int, basis: np.ndarray, n_samples: int) -> bool:
        """A leaf's reply ``Y`` (``basis``, ``(d, r)``, float64-convertible; copied) for
        ``round``, weighing ``n_samples``; True if counted, False if dropped.

        Dropped (and counted): a reply to a closed or earlier round (`late_replies`), a
        second reply (`duplicate_replies`), a reply from a leaf not asked in this round
        (`unasked_replies`).

        Raises
        ------
        ValueError
            One line: an unknown leaf, a round not yet started, a basis not ``(d, r)`` or
            not finite, or ``n_samples`` not an int >= 0.
        """
        if leaf not in self.leaves:
            raise ValueError(f"unknown leaf {leaf!r}")
        k = check_steps(round, "round")
        if k > self.round:
            raise ValueError(f"round {k} has not started (latest is {self.round})")
        y = as_basis(basis, "basis", n_features=self.n_features, rank=self.rank)
        n = check_steps(n_samples, "n_samples", minimum=0)
        if self._open is None or k < self.round:
            self.late_replies += 1
            return False
        if leaf not in self._open.participants:
            self.unasked_replies += 1
            return False
        if leaf in self._replies:
            self.duplicate_replies += 1
            return False
        self._replies[leaf] = (np.array(y, dtype=np.float64), n)
        return True

    def close_due(self, now: float) -> bool:
        """True if the open round should close: ``quorum`` replies, or ``now >= deadline``."""
        if self._open is None:
            return False
        return len(self._replies) >= self.quorum or float(now) >= self._open.deadline

    def close_round(self, now: float | None = None) -> np.ndarray:
        """Close the open round and aggregate its replies; the new global basis ``(d, r)``.

        Parameters
        ----------
        now : float or None
            Time of closing, for the `RoundRecord` (None: the round's deadline if it
            timed out, else its start).

        Raises
        ------
        ValueError
            If no round is open.
        """
        if self._open is None:
            raise ValueError("no round is open")
        start, replies = self._open, self._replies
        timed_out = len(replies) < self.quorum
        self.timeouts += timed_out
        names = tuple(sorted(replies))  # deterministic order, not arrival order
        weights = [replies[n][1] for n in names]
        if names and sum(weights) > 0:
            reference = start.basis if self.reference == "previous" else None
            try:
                new = aggregate([replies[n][0] for n in names], weights, reference, self.opt)
            except ValueError:  # the replies cancel (e.g. all zero): nothing to learn
                new = self.basis
            new.setflags(write=False)
            self.basis = new
        closed = (start.deadline if timed_out else self._started) if now is None else float(now)
        self.history.append(
            RoundRecord(
                start.round,
                start.local_steps,
                start.participants,
                names,
                timed_out,
                self._started,
                closed,
            )
        )
        self._open = None
        self._replies = {}
        return self.basis
