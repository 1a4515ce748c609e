"""The order of a leaf's ticks, written once: what `LeafCore.step` returns, phase by phase.

A tick is what a leaf does at one instant ``now``: a pass of its shell's work loop, a
(re)connection, or the last pass before it disconnects. `TICKS` names the phases of each in
order; `LeafTick` walks them, asking the core (`LeafCore`) for each phase's decision and
turning it into actions (`edge_runtime.agents.common.core.actions`). The asyncio shell
(`LeafAgent.step`) and the fleet simulation (`edge_runtime.simulation.engine`) both carry
out these actions, so the simulation runs what a device runs. No I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_runtime.agents.common.core.actions import Action, Publish, Wake, WriteCheckpoint
from edge_runtime.agents.leaf.core.intake import Applied

if TYPE_CHECKING:
    from edge_runtime.agents.leaf.core.leaf import LeafCore

__all__ = ["MAX_TICK_CALLS", "TICKS", "LeafTick"]

MAX_TICK_CALLS = 16
"""Calls of `LeafTick.step` an executor makes per tick at most: a tick of `TICKS` ends
within as many calls as it has phases (at most 9); a bound, never reached, on a core that
would never end one."""

TICKS: dict[str, tuple[str, ...]] = {
    "work": (
        "expire",
        "scores",
        "flush",
        "checkpoint",
        "snapshot",
        "checkpoint",
        "confirm",
        "status",
        "wake",
    ),
    "connect": ("republish", "confirm!", "wake"),
    "final": ("flush!", "scores", "checkpoint!", "snapshot!", "confirm!", "wake"),
}
"""The phases of each tick, in order.

``work``, each pass of the work loop: readings released by a sequence gap that timed out;
the queued scores documents; a private leaf's pending rows masked when idle; a due
checkpoint -- *before* the snapshot, since the snapshot's publish waits for its PUBACK, and
readings acknowledged meanwhile would widen what a crash loses beyond ``checkpoint_every``
blocks; the snapshot when the deadband or a deadline says so; a checkpoint that made due
(the first one goes with the first snapshot); the confirmation; the status document; the
time to wake. ``connect``, after every (re)connection: the last snapshot again and the
confirmation, forced. ``final``, before disconnecting: every pending row masked, the scores,
a forced checkpoint, a last snapshot of anything unpublished (reason ``"shutdown"``), the
confirmation, forced. A ``!`` marks a phase that does not wait for its deadline."""


class LeafTick:
    """Where a leaf is in its current tick: which tick, at which ``now``, the next phase.

    State: one tuple (or None between ticks), and the blocks ``expire`` released until the
    caller takes them. A tick that is left unfinished (its caller lost
    its connection mid-way) is abandoned by the next call with another tick or ``now``.
    """

    def __init__(self) -> None:
        self._at: tuple[str, float, int] | None = None  # (tick, now, next phase)
        self._released: list[Applied] = []  # what ``expire`` released, for the caller

    def take_released(self) -> list[Applied]:
        """The blocks ``expire`` released (applied, or refused by the estimator), oldest
        first; forgotten here."""
        released, self._released = self._released, []
        return released

    @property
    def in_tick(self) -> bool:
        """Whether a tick was begun and has not returned its `Wake` yet."""
        return self._at is not None

    def step(self, core: LeafCore, now: float, *, timestamp: float, tick: str) -> list[Action]:
        """The next actions of ``tick`` at ``now``, in order.

        Returns the actions up to the first one whose outcome the rest of the tick depends
        on (a `WriteCheckpoint`, a snapshot, the confirmation, the status document): the
        caller carries them out in order, reports each outcome to the core
        (`LeafCore.published`, `LeafCore.checkpoint_written`, `LeafCore.checkpoint_failed`)
        and calls again with the same ``now`` until the list ends with a `Wake`, which ends
        the tick. Readings a sequence gap released (``expire``) are applied here; the
        caller takes them (`LeafCore.take_released`: to score them, or count a refused
        block) before it calls again.

        Parameters
        ----------
        core : LeafCore
            The leaf whose decisions these are.
        now : float
            Monotonic seconds (the caller's clock; the simulation's virtual one).
        timestamp : float
            Wall-clock seconds since the Unix epoch, for the messages made now.
        tick : {"work", "connect", "final"}
            Which tick (`TICKS`).

        Returns
        -------
        list of Action
            `Publish` of kind ``"scores"`` (JSON bytes, not retained), ``"subspace"`` (a
            `SubspaceMessage`; reason a `PublishPolicy` reason, ``"reconnect"`` or
            ``"shutdown"``), ``"confirm"`` (a `ConfirmMessage`) or ``"status"``
            (message None: the caller composes the document, which holds its own fields);
            `WriteCheckpoint` of ``"checkpoint"`` (a `CheckpointImage`); `Wake` last.

        Raises
        ------
        KeyError
            If ``tick`` is not one of `TICKS`.
        """
        phases = TICKS[tick]
        at = self._at
        start = at[2] if at is not None and at[:2] == (tick, now) else 0
        actions: list[Action] = []
        for index in range(start, len(phases)):
            done, wait = self._phase(core, phases[index], now, timestamp)
            actions += done
            self._at = None if index == len(phases) - 1 else (tick, now, index + 1)
            if wait:
                break
        return actions

    def _phase(
        self, core: LeafCore, phase: str, now: float, timestamp: float
    ) -> tuple[list[Action], bool]:
        """One phase: its actions, and whether the tick waits for their outcome (for
        ``expire``: for the caller to take what it released)."""
        if phase == "expire":
            if not core.sequencer.held_rows:
                return [], False
            released = core.ingest(core.expire_labelled(now), now)
            self._released += released
            return [], bool(released)
        if phase == "scores":
            return self._scores(core, now, timestamp), False
        if phase in ("flush", "flush!"):
            if phase == "flush!" or core.flush_due(now):
                core.flush()
            return [], False
        if phase in ("checkpoint", "checkpoint!"):
            if not core.checkpoint_due(now, force=phase == "checkpoint!"):
                return [], False
            reason = "final" if phase == "checkpoint!" else "due"
            return [WriteCheckpoint("checkpoint", core.checkpoint_image(), reason)], True
        if phase in ("snapshot", "snapshot!"):
            msg = core.snapshot_now(now, timestamp, final=phase == "snapshot!")
            if msg is None:
                return [], False
            return [Publish("subspace", msg[0], reason=msg[1])], True
        if phase == "republish":
            snap = core.snapshot
            if snap is None:
                return [], False
            return [Publish("subspace", snap, reason="reconnect")], False
        if phase in ("confirm", "confirm!"):
            forced = phase == "confirm!"
            confirm = core.confirm_due(now, force=forced)
            if confirm is None:
                return [], False
            return [Publish("confirm", confirm, reason="forced" if forced else "due")], True
        if phase == "status":
            if not core.status_due(now):
                return [], False
            return [Publish("status", None, reason="due")], True
        if phase == "wake":
            return [Wake(core.next_wakeup(now))], True
        raise ValueError(f"unknown phase {phase!r}")

    @staticmethod
    def _scores(core: LeafCore, now: float, timestamp: float) -> list[Action]:
        """The queued scores documents (`ScoreOutbox`), after the scoring's interval document
        when one is due at ``now`` (``timestamp``: wall-clock seconds)."""
        scoring = core.scoring
        if scoring is not None:
            doc = scoring.interval_document(now, timestamp)
            if doc is not None:
                from edge_runtime.agents.leaf.core.scoring import encode_document

                core.score_outbox.add([encode_document(doc)])
        return [
            Publish("scores", payload, retain=False, reason="scored")
            for payload in core.score_outbox.items
        ]
