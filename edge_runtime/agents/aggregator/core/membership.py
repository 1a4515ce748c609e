"""Who an aggregator's children are: `Membership`, a part of `AggregatorCore`. No I/O, no clock.

The topology declares children; an *open* aggregator (``admit`` bounds given) also admits a
child it does not declare on its first plausible snapshot (counted in ``joins``); a closed one
refuses it (``unknown_child``). A child is forgotten on request (its retained snapshot was
deleted): an admitted one leaves the list and its slot of the merge tree is given back at the
next merge (`take_gone`), a declared one keeps its place. Memory: O(children) plus the last
`MAX_FORGOTTEN_SHOWN` forgotten children.
"""

from __future__ import annotations

from collections import deque

from edge_runtime.agents.aggregator.core.plausibility import ChildBounds

__all__ = ["MAX_FORGOTTEN_SHOWN", "Membership"]

MAX_FORGOTTEN_SHOWN = 32
"""Most recent forgotten children listed in the status document (``extra.forgotten``)."""


class Membership:
    """The children of one aggregator: declared, admitted and forgotten.

    Parameters
    ----------
    children : list of str
        The declared children in topology order (the merge tree's leaf order).
    admit : ChildBounds or None
        None: closed (only ``children``). Otherwise open: an undeclared child is admitted,
        held to these bounds.

    Attributes
    ----------
    child_ids : list of str
        The declared children in topology order, then the admitted ones in order of
        admission (a forgotten admitted child leaves the list).
    declared : frozenset of str
    admit : ChildBounds or None
    joins, forgets : int
        Children admitted (one admitted again after it was forgotten counts twice), and
        children forgotten.
    forgotten : deque of (str, int, float)
        The last `MAX_FORGOTTEN_SHOWN` forgotten children: id, the samples their last
        snapshot held, when (seconds).
    """

    def __init__(self, children: list[str], admit: ChildBounds | None) -> None:
        self.child_ids = list(children)
        self.declared = frozenset(children)
        self.admit = admit
        self.joins = 0
        self.forgets = 0
        self.forgotten: deque[tuple[str, int, float]] = deque(maxlen=MAX_FORGOTTEN_SHOWN)
        self._members = set(children)  # child_ids as a set
        self._gone: list[str] = []  # forgotten admitted children still in the merge tree

    @property
    def open(self) -> bool:
        """Whether children the topology does not declare are admitted."""
        return self.admit is not None

    def knows(self, child: str) -> bool:
        """Whether ``child`` is in `child_ids` (declared, or admitted and not forgotten)."""
        return child in self._members

    def admits(self, child: str) -> bool:
        """Whether a snapshot of ``child`` may be taken (a known child, or any child of an
        open aggregator)."""
        return self.admit is not None or child in self._members

    def join(self, child: str) -> bool:
        """``child``'s snapshot was accepted: admit it if it is new; whether it was."""
        if child in self._members:
            return False
        self._members.add(child)
        self.child_ids.append(child)
        self.joins += 1
        return True

    def forget(self, child: str, n_samples: int, now: float) -> None:
        """``child`` is forgotten at ``now`` (its last snapshot held ``n_samples``): an
        admitted one leaves `child_ids`; its tree slot goes at the next merge (`take_gone`)."""
        if child not in self.declared and child in self._members:
            self._members.discard(child)
            self.child_ids.remove(child)
            self._gone.append(child)
        self.forgets += 1
        self.forgotten.append((child, n_samples, now))

    def take_gone(self) -> list[str]:
        """Forgotten admitted children whose tree slot the merge gives back (once each);
        one admitted again meanwhile is still a member (the caller checks `knows`)."""
        gone, self._gone = self._gone, []
        return gone

    def status(self, now: float) -> dict[str, object]:
        """The status document's ``open``, ``joins``, ``joined``, ``forgets`` and
        ``forgotten`` (id -> samples and seconds since)."""
        return {
            "open": self.open,
            "joins": self.joins,
            "joined": [c for c in self.child_ids if c not in self.declared],
            "forgets": self.forgets,
            "forgotten": {
                c: {"n_samples": n, "since_s": round(now - t, 3)} for c, n, t in self.forgotten
            },
        }
