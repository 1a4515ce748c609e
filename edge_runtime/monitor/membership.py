"""Who belongs to each aggregator, as its status document says, for ``watch``
and the dashboard.

An aggregator's status document (``extra``, `edge_runtime.wire.StatusDetail`) carries
``open`` (it admits children the topology does not declare), ``joins`` and ``joined`` (the
children it admitted so far, and those still in its merge), ``forgets`` and ``forgotten``
(children dropped from the merge because their retained snapshot was deleted, e.g. by
``retire --forget``: id -> ``n_samples`` their snapshot held and ``since_s``) and
``quarantined`` (id -> ``reason``). `membership_of` reads those into a
`Membership`, tolerating malformed entries; `MembershipTracker` keeps one per aggregator and
says what changed between two documents as `MembershipEvent` s (a child joined, was
forgotten, quarantined or released).

A document is the aggregator's state, not a log: events are the difference between the last
document seen and the new one. A child that joins and is forgotten between two documents
shows only as the forget; one forgotten twice between two documents as one forget (the
``joins`` / ``forgets`` counts stay exact). A child already admitted before an aggregator
restarted is not reported as joining again when the restarted aggregator re-learns it from
its retained snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from edge_runtime.wire import StatusDetail

__all__ = [
    "EVENT_KINDS",
    "Forgotten",
    "Membership",
    "MembershipEvent",
    "MembershipTracker",
    "membership_of",
    "quarantined_children",
]

EVENT_KINDS: tuple[str, ...] = ("joined", "forgotten", "quarantined", "released")
"""What a `MembershipEvent` says happened to a child, in the order they are reported."""

_KEYS = ("open", "joins", "joined", "forgets", "forgotten", "quarantined")


def quarantined_children(detail: StatusDetail) -> dict[str, str]:
    """Child id -> reason for the children an aggregator's status document
    (``extra["quarantined"]``) says are quarantined; empty for any other node.
    A malformed entry gives the reason ``"?"``."""
    found = detail.extra.get("quarantined")
    if not isinstance(found, dict):
        return {}
    return {
        str(child): str(entry.get("reason", "?")) if isinstance(entry, dict) else "?"
        for child, entry in found.items()
    }


class Forgotten(NamedTuple):
    """A forgotten child: the samples its dropped snapshot held, and how long before the
    document it was forgotten (seconds, the aggregator's clock)."""

    n_samples: int
    since_s: float


@dataclass(frozen=True)
class Membership:
    """An aggregator's children as one status document says (see the module docstring).

    Attributes
    ----------
    open : bool
        It admits children the topology does not declare.
    joins, forgets : int
        Children admitted and forgotten since the aggregator started.
    joined : tuple of str
        Admitted children still in its merge (declared ones are not listed).
    forgotten : Mapping[str, Forgotten]
        The most recently forgotten children (the aggregator lists at most 32).
    quarantined : Mapping[str, str]
        Quarantined children and why (`quarantined_children`).
    """

    open: bool = False
    joins: int = 0
    joined: tuple[str, ...] = ()
    forgets: int = 0
    forgotten: Mapping[str, Forgotten] = field(default_factory=dict)
    quarantined: Mapping[str, str] = field(default_factory=dict)

    @property
    def shown(self) -> bool:
        """Worth a row: open, or any child joined, forgotten or quarantined."""
        return bool(self.open or self.joins or self.forgets or self.joined or self.quarantined)

    def to_json(self) -> dict[str, object]:
        """A JSON map of the attributes (``forgotten``: id -> ``n_samples``, ``since_s``)."""
        return {
            "open": self.open,
            "joins": self.joins,
            "joined": list(self.joined),
            "forgets": self.forgets,
            "forgotten": {c: f._asdict() for c, f in self.forgotten.items()},
            "quarantined": dict(self.quarantined),
        }


def _count(value: object) -> int:
    """A non-negative integer from a document, else 0."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return int(value) if ok else 0  # type: ignore[arg-type]


def _seconds(value: object) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    return float(value) if ok else 0.0  # type: ignore[arg-type]


def membership_of(detail: StatusDetail) -> Membership | None:
    """The `Membership` an aggregator's status document reports; None for a document
    without any of its keys (a leaf's, or an aggregator's from before open aggregators). Malformed
    entries are read leniently: a count that is no non-negative integer is 0, a joined
    list that is no list is empty, a forgotten entry without ``n_samples`` has 0."""
    extra = detail.extra
    if not any(key in extra for key in _KEYS):
        return None
    joined = extra.get("joined")
    forgotten = extra.get("forgotten")
    return Membership(
        open=extra.get("open") is True,
        joins=_count(extra.get("joins")),
        joined=tuple(str(c) for c in joined) if isinstance(joined, list) else (),
        forgets=_count(extra.get("forgets")),
        forgotten={
            str(child): Forgotten(_count(entry.get("n_samples")), _seconds(entry.get("since_s")))
            if isinstance(entry, dict)
            else Forgotten(0, 0.0)
            for child, entry in (forgotten.items() if isinstance(forgotten, dict) else ())
        },
        quarantined=quarantined_children(detail),
    )


@dataclass(frozen=True)
class MembershipEvent:
    """A child of ``aggregator`` ``kind`` (one of `EVENT_KINDS`); ``n_samples`` for a
    forgotten child (what its snapshot held), ``reason`` for a quarantined one; ``joins``
    and ``forgets``: the aggregator's counts after it."""

    kind: str
    aggregator: str
    child: str
    joins: int = 0
    forgets: int = 0
    n_samples: int | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, object]:
        """``{"event": kind, "aggregator", "child", "joins", "forgets"}``, plus
        ``n_samples`` (forgotten) or ``reason`` (quarantined)."""
        out: dict[str, object] = {
            "event": self.kind,
            "aggregator": self.aggregator,
            "child": self.child,
            "joins": self.joins,
            "forgets": self.forgets,
        }
        if self.n_samples is not None:
            out["n_samples"] = self.n_samples
        if self.reason is not None:
            out["reason"] = self.reason
        return out


class MembershipTracker:
    """Each aggregator's latest `Membership`, and what changed from one document to the next.

    `fold` takes a status document; the first one of an aggregator is its baseline (nothing
    reported: what it shows happened before we looked) unless ``baseline=False`` says it is
    news (e.g. not a retained message), in which case it is compared with no members.

    Attributes
    ----------
    members : dict
        Aggregator id -> its latest `Membership` (only aggregators whose documents carry
        one).
    """

    def __init__(self) -> None:
        self.members: dict[str, Membership] = {}
        self._admitted: dict[str, set[str]] = {}  # joined and not forgotten since, per aggregator

    def fold(
        self, aggregator: str, detail: StatusDetail, *, baseline: bool = True
    ) -> list[MembershipEvent]:
        """Take ``aggregator``'s status document; return the changes it shows, in the order
        of `EVENT_KINDS` (children sorted within each)."""
        after = membership_of(detail)
        if after is None:
            return []
        before = self.members.get(aggregator)
        self.members[aggregator] = after
        admitted = self._admitted.setdefault(aggregator, set())
        if before is None:
            if baseline:
                admitted.update(after.joined)
                return []
            before = Membership()
        counts = {"joins": after.joins, "forgets": after.forgets}
        events = [
            MembershipEvent("joined", aggregator, child, **counts)
            for child in sorted(set(after.joined) - admitted)
        ]
        admitted.update(after.joined)
        gone = sorted(
            child
            for child, entry in after.forgotten.items()
            if child not in before.forgotten or entry.since_s < before.forgotten[child].since_s
        )
        for child in gone:
            admitted.discard(child)
            n = after.forgotten[child].n_samples
            events.append(MembershipEvent("forgotten", aggregator, child, **counts, n_samples=n))
        for child in sorted(set(after.quarantined) - set(before.quarantined)):
            why = after.quarantined[child]
            events.append(MembershipEvent("quarantined", aggregator, child, **counts, reason=why))
        for child in sorted(set(before.quarantined) - set(after.quarantined) - set(gone)):
            events.append(MembershipEvent("released", aggregator, child, **counts))
        return events

    def quarantined(self) -> dict[str, str]:
        """Every quarantined child (any aggregator) -> reason, sorted by child."""
        out: dict[str, str] = {}
        for member in self.members.values():
            out.update(member.quarantined)
        return dict(sorted(out.items()))

    def totals(self) -> tuple[int, int]:
        """Joins and forgets summed over the aggregators."""
        members = self.members.values()
        return sum(m.joins for m in members), sum(m.forgets for m in members)

    def shown(self) -> dict[str, Membership]:
        """The aggregators worth showing (`Membership.shown`), by id."""
        return {a: m for a, m in sorted(self.members.items()) if m.shown}
