"""A secagg leaf's ledger file, ``<state_dir>/<node>.secagg-ledger``: `LedgerFile`.

What `edge_runtime.agents.leaf.shell.secagg.SecAggLeaf` keeps across restarts (its module
docstring says when it is written and what a restart does with it): a msgpack map of format
`LEDGER_FORMAT`, built by `ledger_doc` from the core's `SecAggRelease.export_ledger`, the
leaf's ``revealed`` and its in-flight records. `LedgerFile.read` removes a temporary file
left by a crash mid-write and reads the map (`read_ledger`: at most `MAX_LEDGER_BYTES`, of
this format and version); `parse_ledger` checks it is this leaf's (node, deployment, sequence
numbers, width); `LedgerFile.restore` gives the leaf its core rebuilt from it (the core
checks its ``ledger``: `SecAggRelease.restore_ledger`); `LedgerFile.write` writes it
atomically (`edge_runtime.atomicfile`: temporary file, fsync, rename, directory fsync) off
the event loop, a failure logged (1, 2, 4, ...: ``secagg_ledger_unwritable``) and counted,
the previous file left. A file not taken is one warning line (`LedgerFile.ignore`:
``secagg_ledger_unreadable`` or ``secagg_ledger_refused``), counted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from edge_runtime.atomicfile import TEMP_SUFFIX, fsync_directory, replace_file, temp_name

__all__ = [
    "COUNTS",
    "LEDGER_FORMAT",
    "LEDGER_SUFFIX",
    "MAX_LEDGER_BYTES",
    "LedgerFile",
    "ledger_doc",
    "parse_ledger",
    "read_ledger",
]

LEDGER_SUFFIX = ".secagg-ledger"
"""The leaf's ledger file in its state directory: ``<node><LEDGER_SUFFIX>``."""

LEDGER_FORMAT = "edge_runtime.secagg_leaf_ledger"
"""``"format"`` of the ledger file's msgpack map (version 1): ``node``, ``deployment``,
``ledger`` (the core's `SecAggRelease.export_ledger`, with its ``in_flight`` records),
``revealed`` (source -> the last sequence number revealed) and ``in_flight`` (optional: a
list of ``{"slot", "upto"}``, ``upto`` source -> the last sequence number that slot's masked
input covers, one per record of the core's)."""

MAX_LEDGER_BYTES = 1 << 20
"""A larger ledger file is unreadable (a few hundred bytes, plus ~30 per sensor source)."""

COUNTS = ("restored", "unreadable", "refused", "written", "write_failures")
"""What `LedgerFile.counts` counts (the status's ``ledger_file``)."""


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def read_ledger(path: Path) -> dict[str, Any] | None:
    """The ledger file's map (None: no file); ValueError (one line) if it cannot be read."""
    try:
        size = path.stat().st_size
        if size > MAX_LEDGER_BYTES:
            raise ValueError(f"{size} bytes, more than a ledger can have ({MAX_LEDGER_BYTES})")
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"cannot read it: {exc.strerror or exc}") from None
    try:
        doc = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several kinds for corrupt bytes
        raise ValueError(f"not msgpack: {type(exc).__name__}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != LEDGER_FORMAT or doc.get("version") != 1:
        raise ValueError(f"not a leaf ledger file (format {LEDGER_FORMAT!r} version 1)")
    if not isinstance(doc.get("ledger"), dict) or not isinstance(doc.get("revealed"), dict):
        raise ValueError("no ledger or revealed sequence numbers")
    if not isinstance(doc.get("in_flight", []), list):
        raise ValueError("in_flight is not a list")
    return doc


def _sources(revealed: dict[Any, Any]) -> dict[str, int]:
    """``revealed`` of a ledger file, checked: source (str) -> sequence number (int >= 0)."""
    for source, seq in revealed.items():
        if not isinstance(source, str) or not source:
            raise ValueError(f"revealed names a source {source!r}, not a non-empty str")
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**63:
            raise ValueError(f"revealed[{source!r}] must be an int >= 0, got {seq!r}")
    return dict(revealed)


def parse_ledger(
    doc: dict[str, Any],
    *,
    node_id: str,
    deployment: str,
    n_features: int | None,
    max_payload_bytes: int,
) -> tuple[dict[str, int], dict[int, dict[str, int]], int]:
    """A ledger file's map (`read_ledger`) checked for this leaf: its ``revealed``, its
    in-flight records (slot -> ``upto``) and the width of a reading; ValueError (one line)
    if it is another node's or deployment's, of another width than ``n_features`` (if
    known), of a width whose masked input could not be published, or malformed. The core's
    ``ledger`` in it is checked by `SecAggRelease.restore_ledger`."""
    for key, mine in (("node", node_id), ("deployment", deployment)):
        if doc.get(key) != mine:
            raise ValueError(f"a ledger of {key} {doc.get(key)!r}, not {mine!r}")
    revealed = _sources(doc["revealed"])
    restored_upto: dict[int, dict[str, int]] = {}
    for record in doc.get("in_flight", []):
        if not isinstance(record, dict) or not isinstance(record.get("upto"), dict):
            raise ValueError(f"an in_flight record {record!r} without upto")
        restored_upto[record.get("slot")] = _sources(record["upto"])  # type: ignore[index]
    width = doc["ledger"].get("n_features")
    if n_features is not None and width != n_features:
        raise ValueError(f"a ledger of n_features {width!r}, this leaf's is {n_features}")
    # a width whose masked input could not be published (and no huge allocation)
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"a ledger of n_features {width!r}")
    if 4 * width * (width + 1) > max_payload_bytes:
        raise ValueError(f"a ledger of n_features {width}: over max_payload_bytes")
    return revealed, restored_upto, width


def ledger_doc(
    *,
    node_id: str,
    deployment: str,
    ledger: dict[str, Any],
    revealed: dict[str, int],
    upto: dict[int, dict[str, int]],
    flight_upto: dict[str, int],
) -> dict[str, Any]:
    """The ledger file's map: ``ledger`` (`SecAggRelease.export_ledger`), ``revealed`` and,
    per in-flight record of ``ledger``, the ``upto`` of its slot (in ``upto``: restored,
    outcome not learnt yet; else ``flight_upto``, the leaf's masked input in flight)."""
    flight = [
        {"slot": r["slot"], "upto": dict(upto.get(r["slot"], flight_upto))}
        for r in ledger["in_flight"]
    ]
    return {
        "format": LEDGER_FORMAT,
        "version": 1,
        "node": node_id,
        "deployment": deployment,
        "ledger": ledger,
        "revealed": dict(revealed),
        "in_flight": flight,
    }


class LedgerFile:
    """The ledger file of a `SecAggLeaf`: read, written, its counts and log lines.

    Parameters
    ----------
    path : Path
        ``<state_dir>/<node><LEDGER_SUFFIX>``.
    agent : LeafAgent
        Its ``log`` is used.

    Attributes
    ----------
    counts : dict of str to int
        ``restored``, ``unreadable``, ``refused``, ``written`` and ``write_failures``.
    found : bool
        Whether `restore` found a file (taken or not): a trace of an earlier incarnation.
    """

    def __init__(self, path: Path, agent: Any) -> None:
        self.path = path
        self.agent = agent
        self.counts = dict.fromkeys(COUNTS, 0)
        self.found = False
        self._saved: dict[str, Any] | None = None  # the file's content, last written
        self._lock = asyncio.Lock()

    def read(self) -> dict[str, Any] | None:
        """Remove a temporary file of a crash mid-write, then `read_ledger`."""
        path = self.path
        for stray in path.parent.glob(f".{path.name}.*{TEMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                stray.unlink()
        return read_ledger(path)

    def restore(
        self,
        new_core: Callable[[int], Any],
        *,
        node_id: str,
        deployment: str,
        n_features: int | None,
        max_payload_bytes: int,
    ) -> tuple[Any, int, dict[str, int], dict[int, dict[str, int]]] | None:
        """The core (``new_core(width)``, its ledger restored: `SecAggRelease.restore_ledger`),
        the width, ``revealed`` and the in-flight records (slot -> ``upto``) of the ledger
        file if this leaf can take it (`parse_ledger`); None if there is none or it is not
        taken (`ignore`; `found` tells). Never raises for the file."""
        try:
            doc = self.read()
        except ValueError as exc:
            self.found = True
            self.ignore("unreadable", exc)
            return None
        if doc is None:
            return None
        self.found = True
        try:
            revealed, restored_upto, width = parse_ledger(
                doc,
                node_id=node_id,
                deployment=deployment,
                n_features=n_features,
                max_payload_bytes=max_payload_bytes,
            )
            core = new_core(width)
            core.restore_ledger(doc["ledger"])
            if sorted(restored_upto) != core.unresolved_slots:
                raise ValueError(
                    f"in_flight slots {sorted(restored_upto)!r}, the ledger's "
                    f"{core.unresolved_slots!r}"
                )
        except ValueError as exc:
            self.ignore("refused", exc)
            return None
        self.counts["restored"] += 1
        return core, width, revealed, restored_upto

    def restored(self, core: Any, sources: int) -> None:
        """The line of a restored ledger (``secagg_ledger_restored``), its core built."""
        restored = core.ledger()
        self.agent.log.info(
            "secagg_ledger_restored",
            path=str(self.path),
            readings_released=restored["readings_released"],
            slots_contributed=restored["slots_contributed"],
            next_slot=restored["next_slot"],
            sources=sources,
            in_flight=[r["slot"] for r in restored["in_flight"]],
        )

    def ignore(self, what: str, exc: Exception) -> None:
        """A ledger file not taken (``what``: unreadable or refused): one line, counted."""
        self.counts[what] += 1
        self.agent.log.warning(
            f"secagg_ledger_{what}",
            path=str(self.path),
            error=_one_line(exc),
            action="starting afresh",
        )

    async def write(self, doc: dict[str, Any]) -> bool:
        """Write ``doc`` to the ledger file (off the event loop, after any earlier capture);
        whether it is on disk. A failure is logged (1, 2, 4, ...) and counted."""
        path = self.path
        async with self._lock:  # FIFO: a later capture is written after an earlier one
            if doc == self._saved:
                return True
            try:
                await asyncio.to_thread(self._write, path, msgpack.packb(doc, use_bin_type=True))
            except OSError as exc:
                failures = self.counts["write_failures"] + 1
                self.counts["write_failures"] = failures
                if failures & (failures - 1) == 0:  # 1, 2, 4, 8, ...: bounded log lines
                    self.agent.log.error(
                        "secagg_ledger_unwritable",
                        path=str(path),
                        error=str(exc),
                        failures=failures,
                    )
                return False
            self._saved = doc
            self.counts["written"] += 1
            return True

    @staticmethod
    def _write(path: Path, payload: bytes) -> None:
        replace_file(path, payload, temp=path.parent / temp_name(path))
        fsync_directory(path.parent)
