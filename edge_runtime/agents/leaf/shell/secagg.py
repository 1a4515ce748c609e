"""A secagg leaf's side of secure aggregation on MQTT: `SecAggLeaf`, its release strategy.

A leaf of mechanism ``"gaussian-secagg"`` holds a `SecAggLeaf` as its release strategy
(`edge_runtime.agents.leaf.shell.release.ReleaseShell`, chosen by
`edge_runtime.agents.leaf.shell.release.release_shell_for`). It publishes no snapshot of its
own (`publishes_snapshots` is False: its core is ``local_only``, its estimator without
privacy, `local_config`): it adds the
readings it ingests to a `edge_runtime.agents.leaf.core.secagg_release.SecAggRelease` and,
slot after slot, contributes their Gram matrix, masked and with its share of the site's
noise, to the secure sum its parent (the site's aggregator) runs
(docs/secure_aggregation.md). This module is the thin async part around that core: topics,
decoding, publishing, fresh keys, the noise generator, rejects.

Topics (`edge_runtime.topology.topics`, ``<leaf>`` its own path, ``<site>`` its parent's):
it publishes ``<leaf>/secagg/keys`` (retained), ``<leaf>/secagg/shares``,
``<leaf>/secagg/masked`` and ``<leaf>/secagg/unmasked``, all QoS 1, and reads
``<site>/secagg/roster``, ``<site>/secagg/unmask``, ``<site>/secagg/outcome`` and
``<site>/secagg/delivery/<its id>``.

The slot, as the leaf drives it: it advertises fresh public keys (``os.urandom(32)`` for
each of the two private keys and the self-mask seed, every slot) for `SecAggRelease.
next_slot` once it knows the width of a reading (its first one) and after every outcome;
answers a roster with its shares, a delivery with its masked input (noise from its own
``numpy`` Generator: the operating system's entropy, or the node's ``noise_seed`` in
experiments), an unmask request with its unmask response. A roster or request for a later
slot than its own round's (it missed one, or it started late) ends that round
(`SecAggRelease.observe_slot`) and it advertises for the next. The retained outcome,
delivered again on every (re)connection, ends a round it was still waiting in. A message
that does not decode, names another leaf than the topic's, or that the core refuses is a
reject (`edge_runtime.agents.common.shell.agent.Agent.reject`), never an exception.

Durability: a reading is durable for its publishers (the leaf's confirmations) once the leaf
revealed it in a slot (`revealed`; `flush` returns it and the agent sets the core's
``durable`` from it), and only then. The pending increment (readings not yet revealed) is
in memory only, so a secagg leaf writes no checkpoint even with a state directory
(`checkpoint_path` is None: a checkpoint of its local estimator would confirm readings that a
crash then loses for the site's sum): after a restart its publishers re-send every reading it
had not revealed.

The ledger across restarts (with a state directory: ``edge-runtime agent --state-dir DIR``,
the `LeafAgent`'s ``state_dir``): after its answers are published (`flush`), whenever the
ledger changed (a reveal, a slot's end, a new round), the leaf writes
``<state_dir>/<node>.secagg-ledger`` (`edge_runtime.agents.leaf.shell.secagg_ledger_file`:
msgpack, `LEDGER_FORMAT`, written atomically off the event loop): the core's
`SecAggRelease.export_ledger` (counters, ``epsilon``, the last slot, for these settings) and
`revealed`, before the agent's confirmations claim those readings.
Nothing in it beyond what the status document publishes and the confirmations say: no
readings, Gram matrices, keys or noise. At start it is restored before the first connection
(`SecAggRelease.restore_ledger`; the core is built then, with the file's width): the status
continues ``readings_released`` and the slot counts, so the site, which counts each leaf's
revealed readings from its status (the larger of old and new), never under-counts a
restarted leaf; the leaf advertises for the slot after the last one it took part in (a round
it was in at the crash is not advertised for again: its keys are gone); and `resume` gives
`revealed` to the agent's core as each source's last ingested and durable sequence number,
so a restarted leaf confirms what it revealed (only that: the file is written only after the
unmask response went out) and drops a re-send of it as a duplicate instead of revealing it
a second time. A file that cannot be read (``secagg_ledger_unreadable``) or is refused
(``secagg_ledger_refused``: another node, deployment, width, threshold, horizon, scale, clip
norm or calibration, or inconsistent) is one warning line, counted in the status
(``ledger_file``), and ignored: the ledger starts at zero, never a crash. A failed write is
logged (failures 1, 2, 4, ...) and counted; the previous file stays. A leaf that finds any
such file (restored or not) never reuses ``noise_seed``'s stream: it draws its noise from the
operating system's entropy, as an earlier incarnation may have drawn from the seed.

In flight at a crash (a reading released twice would double its epsilon): before its masked
input for slot ``k`` is published, the leaf writes the ledger file with the in-flight record
(``in_flight``: slot ``k`` and, per source, the last sequence number the input covers; the
publish waits for the write, and a failed write withholds that masked input: the slot then
carries the readings over). Killed before it answered the unmask request, its input may still
be in ``U_3`` and released from ``t`` other leaves' answers. A new incarnation restores the
record and holds re-sends of those readings (`status` ``readings_held``) until it learns slot
``k``'s outcome from the site's retained outcome (`SecAggRelease.resolve_in_flight`):
released with it among the survivors -> revealed (counted released, durable, confirmed;
re-sends dropped as duplicates: `status` ``duplicates``); skipped or it not a survivor -> the
held and later re-sends go to the next slot; an outcome of a later slot (it was down longer
than a slot) or one that cannot be read -> treated as released, never released again, one
warning line ``secagg_in_flight_unknown`` (those readings may be missing from the estimate),
counted (``slots_in_flight_unknown``, ``readings_in_flight_unknown``). A live leaf whose
slot's outcome names it a survivor without its answer counts its input released likewise.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from edge_runtime.agents.common.shell.secagg_payload import decode_or_reject, payload_bytes
from edge_runtime.agents.leaf.shell.release import Flushed
from edge_runtime.agents.leaf.shell.secagg_ledger_file import (
    COUNTS,
    LEDGER_FORMAT,
    LEDGER_SUFFIX,
    LedgerFile,
    ledger_doc,
)
from edge_runtime.agents.leaf.shell.secagg_ledger_file import (
    MAX_LEDGER_BYTES as MAX_LEDGER_BYTES,
)
from edge_runtime.secagg import require_extra
from edge_runtime.topology import Topology
from edge_runtime.topology import topics as kinds
from edge_runtime.topology.keys import SECAGG_MECHANISM as MECHANISM

__all__ = ["LEDGER_FORMAT", "LEDGER_SUFFIX", "SecAggLeaf", "is_secagg_leaf", "local_config"]

_KEY_BYTES = 32


def is_secagg_leaf(topology: Topology, node_id: str) -> bool:
    """Whether ``node_id`` is a leaf of mechanism ``"gaussian-secagg"``."""
    return topology.is_leaf(node_id) and topology.nodes[node_id].mechanism == MECHANISM


def local_config(config: Any) -> Any:
    """A secagg leaf's `NodeConfig` for its local estimator: without privacy (its estimate
    never leaves the device; the secure sum is its only release)."""
    from dataclasses import replace

    return replace(
        config,
        epsilon=None,
        delta=None,
        clip_norm=None,
        mechanism=None,
        release_horizon=None,
        noise_seed=None,
    )


def _later(old: dict[str, int], new: dict[str, int]) -> dict[str, int]:
    """The later sequence number of each source of ``old`` and ``new``."""
    return {**old, **{k: max(v, old.get(k, v)) for k, v in new.items()}}


class SecAggLeaf:
    """The release strategy of a `LeafAgent` of mechanism ``"gaussian-secagg"``
    (`edge_runtime.agents.leaf.shell.release.ReleaseShell`).

    Parameters
    ----------
    agent : LeafAgent
        Its ``topology``, ``node_id``, ``settings``, ``log``, ``reject``, ``publish`` and
        ``wake`` are used.
    n_features : int or None, default None
        The width of a reading when known; else a restored ledger's, else the first rows
        given to `add_rows` fix it.
    state_dir : path or None, default None
        Keep the ledger in ``<state_dir>/<node>.secagg-ledger`` and restore it now (module
        docstring); None: in memory only.

    Attributes
    ----------
    release : SecAggRelease or None
        The core, once the width of a reading is known.
    revealed : dict of str to int
        Per sensor source, the last sequence number whose reading this leaf has revealed in
        a slot (answered the unmask request): released into the site's sum, so durable for
        its publishers (the leaf's confirmations, without a checkpoint). Readings carried
        over (a slot that ended before this leaf revealed) stay unconfirmed until a later
        slot reveals them.
    published : int
        Messages published.
    ledger_path : Path or None
        The ledger file.
    ledger_counts : dict of str to int
        The ledger file's ``restored``, ``unreadable``, ``refused``, ``written`` and
        ``write_failures`` (in the status as ``ledger_file`` with a state directory).
    """

    publishes_snapshots = False
    """The site's slots release the leaf's readings, never a snapshot of its own."""

    def __init__(
        self, agent: Any, n_features: int | None = None, state_dir: Path | str | None = None
    ) -> None:
        require_extra(agent.node_id)  # at start, not at the first slot
        # The core and its accounting (scipy.special, scipy.optimize) load here, before the
        # first connection: at the first reading they blocked the event loop for seconds on a
        # shared 2-core machine, past the broker's keep-alive. Only secagg leaves pay it.
        from edge_runtime.agents.leaf.core.secagg_release import SecAggRelease

        self._core = SecAggRelease
        self._leaf_core: Any = None  # the agent's `LeafCore`, once bound (`resume`)
        self.agent = agent
        topology: Topology = agent.topology
        self.node_id: str = agent.node_id
        config = topology.nodes[self.node_id]
        assert config.parent is not None and config.mechanism == MECHANISM
        self.config = config
        self.parent = config.parent
        site = topology.nodes[self.parent]
        assert site.secagg_threshold is not None  # filled in by `Topology`
        self.threshold = site.secagg_threshold
        self.cohort = tuple(topology.secagg_leaves(self.parent))
        self.deployment = topology.name
        self.release: Any = None  # SecAggRelease, loaded with the first reading
        self._noise = np.random.default_rng(config.noise_seed)  # None: the OS's entropy
        self._seen = -1  # the highest slot seen before the core existed
        self._outbox: list[tuple[str, bytes, bool, dict[str, Any] | None, int | None]] = []
        self.published = 0
        # the last sequence number per source: pending, in flight, revealed (`revealed`)
        self._pending_upto: dict[str, int] = {}
        self._flight_upto: dict[str, int] = {}
        self.revealed: dict[str, int] = {}
        self._moved = self._spent = -1  # the slots whose input / answer were formed
        self._status_due = False
        own = {kind: topology.secagg_topic(self.node_id, kind) for kind in kinds.SECAGG_LEAF_KINDS}
        self.keys_topic = own[kinds.SECAGG_KEYS]
        self.shares_topic = own[kinds.SECAGG_SHARES]
        self.masked_topic = own[kinds.SECAGG_MASKED]
        self.unmasked_topic = own[kinds.SECAGG_UNMASKED]
        self.roster_topic = topology.secagg_topic(self.parent, kinds.SECAGG_ROSTER)
        self.unmask_topic = topology.secagg_topic(self.parent, kinds.SECAGG_UNMASK)
        self.outcome_topic = topology.secagg_topic(self.parent, kinds.SECAGG_OUTCOME)
        self.delivery_topic = topology.secagg_topic(
            self.parent, kinds.secagg_delivery_kind(self.node_id)
        )
        self.ledger_path = (
            None if state_dir is None else Path(state_dir) / f"{self.node_id}{LEDGER_SUFFIX}"
        )
        self._file = None if self.ledger_path is None else LedgerFile(self.ledger_path, agent)
        self.ledger_counts = dict.fromkeys(COUNTS, 0) if self._file is None else self._file.counts
        # slot -> upto of the masked inputs in flight at a restart, outcome not learnt yet
        self._restored_upto: dict[int, dict[str, int]] = {}
        # (source, seq) -> row: re-sends of those readings held until the outcome says
        self._held: dict[tuple[str, int], np.ndarray] = {}
        self._withheld: set[int] = set()  # slots whose masked input is never published
        self.duplicates = 0  # rows of readings already released, not added again
        self._changed = False  # a message or a new core since the last capture for the file
        self._restore(n_features)
        if n_features is not None and self.release is None:
            self._build(n_features)

    def core_config(self, config: Any) -> Any:
        """The leaf core's settings: its estimator without privacy (`local_config`)."""
        return local_config(config)

    def checkpoint_path(self, state_dir: Path | None, node_id: str) -> Path | None:
        """None: readings are durable once revealed in a slot, never by a checkpoint (the
        pending increment is in memory only; module docstring). The ledger file
        (`ledger_path`) is this strategy's own."""
        return None

    # -- the core -------------------------------------------------------------------------

    def _build(self, n_features: int, core: Any = None) -> None:
        """The core (``core``, a restored one, or a fresh one of width ``n_features``), then
        the advertisement for its next slot."""
        self.release = self._new_core(n_features) if core is None else core
        self._changed = True
        if self._seen >= 0:
            self.release.observe_slot(self._seen)
        self._advertise()

    def _new_core(self, n_features: int) -> Any:
        config = self.config
        assert config.epsilon is not None and config.delta is not None
        assert config.clip_norm is not None
        return self._core(
            self.node_id,
            n_features,
            epsilon=config.epsilon,
            delta=config.delta,
            clip_norm=config.clip_norm,
            threshold=self.threshold,
            horizon=config.release_horizon or 1,
            cohort=self.cohort,
        )

    # -- the ledger file ------------------------------------------------------------------

    def _restore(self, n_features: int | None) -> None:
        """Continue from the ledger file, if there is one this leaf can take (module
        docstring): the core is built from it. Never raises."""
        if self._file is None:
            return
        restored = self._file.restore(
            self._new_core,
            node_id=self.node_id,
            deployment=self.deployment,
            n_features=n_features,
            max_payload_bytes=self.agent.settings.max_payload_bytes,
        )
        if self._file.found:  # restored or not
            self._fresh_noise()
        if restored is None:
            return
        core, width, self.revealed, self._restored_upto = restored
        self._build(width, core)  # the first `flush` writes the file (its new round's slot)
        self._file.restored(core, len(self.revealed))

    def _fresh_noise(self) -> None:
        """A trace of an earlier incarnation: never ``noise_seed``'s stream again."""
        if self.config.noise_seed is not None:
            self._noise = np.random.default_rng()  # the operating system's entropy

    def _ledger_doc(self) -> dict[str, Any]:
        assert self.release is not None
        return ledger_doc(
            node_id=self.node_id,
            deployment=self.deployment,
            ledger=self.release.export_ledger(),
            revealed=self.revealed,
            upto=self._restored_upto,
            flight_upto=self._flight_upto,
        )

    async def _save(self) -> None:
        """Write the ledger file if the ledger changed, off the event loop; only when every
        answer is published (so it never holds a reveal whose response is not out). A
        failure is logged, counted and leaves the previous file."""
        if self._file is None or self.release is None or self._outbox or not self._changed:
            return
        self._changed = False  # (a failed write is retried at the next change: every slot)
        await self._file.write(self._ledger_doc())  # captured at this instant, outbox empty

    def resume(self, core: Any) -> None:
        """Bind the agent's `LeafCore` and give it the restored `revealed` (before any
        reading): each source continues after its last revealed sequence number
        (`SourceSequencer.advance`), and those readings are durable (`LeafCore.mark_durable`,
        confirmed). Later reveals of a slot in flight at a restart advance it too."""
        self._leaf_core = core
        if self.revealed:
            core.sequencer.advance(self.revealed)
            core.mark_durable(self.revealed)

    def _advertise(self) -> None:
        """Advertise fresh keys for `SecAggRelease.next_slot` (between rounds only)."""
        release = self.release
        if release is None or release.slot is not None:
            return
        ad = release.advertise(
            release.next_slot,
            os.urandom(_KEY_BYTES),
            os.urandom(_KEY_BYTES),
            os.urandom(_KEY_BYTES),
        )
        self._queue(self.keys_topic, ad, retain=True)

    def _queue(
        self,
        topic: str,
        message: Any,
        *,
        retain: bool = False,
        doc: dict[str, Any] | None = None,
        gate: int | None = None,
    ) -> None:
        """Queue a message for `flush`: after ``doc`` (if any) is in the ledger file; never
        if slot ``gate``'s masked input is withheld (its in-flight record not written)."""
        from edge_runtime.wire.secagg import encode_secagg

        payload = encode_secagg(
            message, deployment=self.deployment, max_bytes=self.agent.settings.max_payload_bytes
        )
        self._outbox.append((topic, payload, retain, doc, gate))

    def add_rows(
        self, rows: np.ndarray, source: str | None = None, first_seq: int | None = None
    ) -> None:
        """Readings the leaf ingested (screened, in the data's units): into the next slot's
        increment. The first rows fix the width and the leaf advertises its keys. Rows the
        core refuses (another width, over ``max_rows_per_slot``) are a reject
        (``secagg_rows``). ``source`` and ``first_seq`` (the sequence number of the first
        row) label them for `revealed`."""
        if len(rows) == 0:
            return
        if source is not None and first_seq is not None:
            rows, first_seq = self._screen(rows, source, first_seq)
            if len(rows) == 0:
                return
            self._pending_upto[source] = first_seq + len(rows) - 1
        if self.release is None:
            self._build(int(rows.shape[1]))
        assert self.release is not None
        try:
            self.release.add_rows(rows)
        except ValueError as exc:
            self.agent.reject("secagg_rows", self.agent.config.sensor_topic or "", str(exc))
        if self._outbox:
            self.agent.wake()

    def readings_applied(
        self, rows: np.ndarray, source: str | None = None, first_seq: int | None = None
    ) -> None:
        """Readings the leaf's core applied: `add_rows`."""
        self.add_rows(rows, source, first_seq)

    def _hold_upto(self, source: str) -> int:
        """The last sequence number of ``source`` in a masked input in flight at a restart."""
        return max((upto.get(source, -1) for upto in self._restored_upto.values()), default=-1)

    def _screen(self, rows: np.ndarray, source: str, first_seq: int) -> tuple[np.ndarray, int]:
        """Drop the rows already released (``seq <= revealed[source]``: a re-send, never in
        a second slot) and hold those of a masked input in flight at a restart until its
        outcome is known; the rest, and the sequence number of its first row."""
        floor = self.revealed.get(source, -1)
        if first_seq <= floor:
            skip = min(len(rows), floor - first_seq + 1)
            self.duplicates += skip
            rows, first_seq = rows[skip:], first_seq + skip
        held = min(len(rows), self._hold_upto(source) - first_seq + 1)
        if held > 0:
            for i in range(held):
                self._held[(source, first_seq + i)] = np.array(rows[i])
            rows, first_seq = rows[held:], first_seq + held
        return rows, first_seq

    def _resolve(self, outcome: Any) -> None:
        """Learn the outcome of the masked inputs in flight at a restart
        (`SecAggRelease.resolve_in_flight`): released (or unknown: conservatively so) ->
        revealed, durable, re-sends dropped; not released -> the held re-sends go to the
        next slot."""
        release = self.release
        if release is None or not release.unresolved_slots:
            return
        for slot, verdict, rows in release.resolve_in_flight(outcome):
            upto = self._restored_upto.pop(slot, {})
            self._changed = True
            if verdict == "not_released":
                self.agent.log.info("secagg_in_flight_not_released", slot=slot, readings=rows)
                continue
            self.revealed = _later(self.revealed, upto)
            self._status_due = True
            self._advance_sequencer(upto)
            if verdict == "unknown":
                self.agent.log.warning(
                    "secagg_in_flight_unknown",
                    slot=slot,
                    readings=rows,
                    detail=f"slot {slot}'s outcome is unknown: its {rows} readings are "
                    "treated as released and may be missing from the estimate",
                )
            else:
                self.agent.log.info("secagg_in_flight_released", slot=slot, readings=rows)
        # the held rows: already released -> duplicates; no longer held -> the next slot
        ready: dict[str, list[tuple[int, np.ndarray]]] = {}
        for (source, seq), row in sorted(self._held.items(), key=lambda kv: kv[0]):
            if seq <= self.revealed.get(source, -1):
                self.duplicates += 1
            elif seq > self._hold_upto(source):
                ready.setdefault(source, []).append((seq, row))
            else:
                continue
            del self._held[(source, seq)]
        for source, items in ready.items():
            block = np.stack([row for _, row in items])
            self._pending_upto[source] = max(self._pending_upto.get(source, -1), items[-1][0])
            try:
                release.add_rows(block)
            except ValueError as exc:
                self.agent.reject("secagg_rows", self.agent.config.sensor_topic or "", str(exc))

    def _advance_sequencer(self, upto: dict[str, int]) -> None:
        """The bound core's sequencer continues after released readings (re-sends:
        duplicates); a source with rows held behind a gap is left to `_screen`."""
        if self._leaf_core is not None:
            self._leaf_core.sequencer.advance(upto)

    # -- messages -------------------------------------------------------------------------

    def subscriptions(self) -> list[str]:
        """Its parent's roster, unmask request, outcome and its own share delivery."""
        return [self.roster_topic, self.unmask_topic, self.outcome_topic, self.delivery_topic]

    def owns(self, topic: str) -> bool:
        """Whether ``topic`` is one of `subscriptions`."""
        return topic in (self.roster_topic, self.unmask_topic, self.outcome_topic) or (
            topic == self.delivery_topic
        )

    def handle(self, topic: str, payload: object) -> None:
        """One message on a topic of `subscriptions`: decoded, checked, given to the core;
        what it answers waits for `flush`. Never raises for the message."""
        from edge_runtime.secagg import messages
        from edge_runtime.secagg.errors import SecAggError, UnmaskRefusedError

        data = payload_bytes(self.agent, topic, payload)
        if not data:  # rejected, or a cleared retained message
            if topic == self.outcome_topic:  # an in-flight slot's outcome cannot be read
                self._resolve(None)
                self.agent.wake()
            return
        expect = {
            self.roster_topic: messages.KeyRoster,
            self.unmask_topic: messages.UnmaskRequest,
            self.outcome_topic: messages.SlotOutcome,
            self.delivery_topic: messages.ShareDelivery,
        }[topic]
        message = decode_or_reject(
            self.agent, topic, data, expect=expect, deployment=self.deployment
        )
        if message is None:
            if topic == self.outcome_topic:  # an in-flight slot's outcome cannot be read
                self._resolve(None)
                self.agent.wake()
            return
        if isinstance(message, messages.ShareDelivery) and message.recipient != self.node_id:
            self.agent.reject(
                "secagg_leaf_mismatch",
                topic,
                f"a share delivery for {message.recipient!r} on {self.node_id!r}'s topic",
            )
            return
        release = self.release
        if release is None:  # no reading yet: nothing to contribute, note the slot
            self._seen = max(self._seen, message.slot)
            return
        try:
            if isinstance(message, messages.SlotOutcome):
                self._resolve(message)
                if release.receive_outcome(message):  # released without its answer (or
                    # a later slot's outcome ended its round with its masked input out)
                    self._spent = message.slot
                    self._status_due = True
                    self.revealed = _later(self.revealed, self._flight_upto)
                    self._flight_upto = {}
                self._log_outcome(message)
            elif release.slot is not None and message.slot == release.slot:
                if isinstance(message, messages.KeyRoster):
                    self._queue(self.shares_topic, release.receive_roster(message))
                elif isinstance(message, messages.ShareDelivery):
                    masked = release.receive_shares(message, self._noise)
                    doc = None
                    if message.slot != self._moved:  # the pending rows went in flight
                        self._moved = message.slot
                        self._flight_upto = _later(self._flight_upto, self._pending_upto)
                        self._pending_upto = {}
                        if self._file is not None:  # on disk before it is published
                            doc = self._ledger_doc()
                    self._queue(self.masked_topic, masked, doc=doc, gate=message.slot)
                else:
                    self._queue(self.unmasked_topic, release.unmask(message))
                    if message.slot != self._spent:  # revealed: released for the leaf
                        self._spent = message.slot
                        self._status_due = True
                        self.revealed = _later(self.revealed, self._flight_upto)
                        self._flight_upto = {}
            else:
                current = release.slot if release.slot is not None else release.next_slot - 1
                if message.slot > current and release.observe_slot(message.slot):
                    # a later slot than its own: that round is over, and its masked input,
                    # not answered, may have been released: counted released, never re-sent
                    self._spent = current
                    self._status_due = True
                    self.revealed = _later(self.revealed, self._flight_upto)
                    self._flight_upto = {}
                # else a past slot's (a retained roster): nothing to do
        except UnmaskRefusedError as exc:
            self.agent.log.warning("secagg_unmask_refused", slot=message.slot, detail=str(exc))
            self.agent.reject("secagg_unmask_refused", topic, str(exc))
        except SecAggError as exc:
            self.agent.reject("secagg_refused", topic, str(exc))
        finally:
            self._advertise()  # between rounds (after an outcome or a later slot): the next
            self._changed = True  # the ledger may have moved: `_save` compares
        self.agent.wake()

    def _log_outcome(self, outcome: Any) -> None:
        last = None if self.release is None else self.release.ledger()["last"]
        if last is not None and last.get("slot") == outcome.slot:
            self.agent.log.debug("secagg_slot_ended", **last)

    async def flush(self, client: Any) -> Flushed:
        """Publish what the core answered, in order (QoS 1; keys retained), then write the
        ledger file if the ledger changed (with a state directory): before the agent's
        confirmations claim the readings revealed. Returns `revealed` (durable) and whether
        the leaf revealed a slot since the last call (`take_status_due`)."""
        await self._send(client)
        return Flushed(durable=dict(self.revealed), status_due=self.take_status_due())

    async def _send(self, client: Any) -> None:
        """The outbox published in order, then the ledger file (`flush`)."""
        while self._outbox:
            topic, payload, retain, doc, gate = self._outbox[0]
            if doc is not None and self._file and not await self._file.write(doc):
                self._withheld.add(gate)  # its in-flight record is not on disk: never out
                self.agent.log.warning("secagg_masked_input_withheld", slot=gate)
            if gate is None or gate not in self._withheld:
                await self.agent.publish(client, topic, payload, retain=retain, qos=1)
                self.published += 1
            self._outbox.pop(0)
        await self._save()

    async def on_connected(self, client: Any) -> None:
        """After every (re)connection: the current advertisement again (retained); the
        retained roster and outcome arrive by themselves."""
        await self._send(client)

    def take_status_due(self) -> bool:
        """Whether the leaf revealed a slot since the last call: its status document goes out
        then (the site reads ``readings_released`` from it for its provenance)."""
        due, self._status_due = self._status_due, False
        return due

    def status_extra(self) -> dict[str, object]:
        """``{"secagg": status()}`` for the status document's ``extra``."""
        return {"secagg": self.status()}

    def status(self) -> dict[str, object]:
        """The ledger (`SecAggRelease.ledger`) for the status document's ``extra``, and with
        a state directory the ledger file's counts (``ledger_file``: `ledger_counts`)."""
        file = {} if self.ledger_path is None else {"ledger_file": dict(self.ledger_counts)}
        if self.release is None:
            return {"mechanism": MECHANISM, "state": "no reading yet", "published": 0, **file}
        return {
            **self.release.ledger(),
            "published": self.published,
            "readings_held": len(self._held),
            "duplicates": self.duplicates,
            **file,
        }
