"""`open_source`: the one entry point from a `SourceSpec` to a running `Source`.

Each kind's module is imported when a source of that kind is opened: a leaf that reads its
sensor topic, or one kind of source, does not load the others (RSS counts on a Pi).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from edge_runtime.sources.base import RejectCallback, Source, SourceArgs
from edge_runtime.sources.spec import SourceSettings, SourceSpec, source_id

__all__ = ["open_source"]

_SEQ_LIMIT = 1 << 63


def open_source(
    spec: SourceSpec,
    *,
    node_id: str,
    start_seq: Callable[[str], int] | int = 0,
    n_features: int | None = None,
    on_reject: RejectCallback | None = None,
    settings: SourceSettings | None = None,
    state_dir: Path | None = None,
    rng: random.Random | None = None,
) -> Source:
    """A local source for ``spec``, not started yet (`Source.readings` starts it).

    Parameters
    ----------
    spec : SourceSpec
        Kind ``command``, ``file`` or ``serial`` (``mqtt`` is the leaf's own subscription).
    node_id : str
        The leaf; names a command source (``command:<node id>``).
    start_seq : int or callable of str to int, default 0
        Number of the first reading to deliver: the consumer's next expected reading of
        this source, i.e. for a leaf ``ingested.get(source_id, -1) + 1`` (its checkpoint
        keeps the *last* applied number). A callable gets the source id (which depends on
        the spec) and returns that number. A file source skips readings below it (they
        were delivered before a restart); command and serial sources number their new
        readings from it.
    n_features : int or None, default None
        Values per reading; lines of another width are rejected (``width``). None: the
        first accepted line fixes it.
    on_reject : callable (source_id, reason) -> None, optional
        Called once per rejected line (e.g. to count rejects per source in a status
        document); the source itself logs rejects, rate-limited.
    settings : SourceSettings, optional
        Bounds, timeouts and cadences (defaults documented there).
    state_dir : Path or None, default None
        File sources keep resume cursors here (the leaf's state directory), so a restart
        seeks instead of re-reading the whole file and survives rotations; ignored by the
        other kinds.
    rng : random.Random, optional
        Restart-jitter generator (default: a new unseeded one per source).

    Returns
    -------
    Source
        `CommandSource`, `FileSource` or `SerialSource`; ``source.source_id`` is its id.

    Raises
    ------
    ValueError
        For kind ``mqtt``, or ``start_seq`` (or what the callable returns) outside
        ``0 <= start_seq < 2**63``, or an invalid ``n_features``.
    SourceError
        If the source cannot run: the command is not found, the path is a directory,
        pyserial is not installed (naming the ``serial`` extra).
    """
    if not isinstance(spec, SourceSpec):
        raise ValueError(f"spec must be a SourceSpec, got {type(spec).__name__}")
    if not spec.is_local:
        raise ValueError(
            "an mqtt source is the leaf's sensor-topic subscription; open_source reads "
            "'command', 'file' and 'serial' sources"
        )
    sid = source_id(spec, node_id)
    first = start_seq(sid) if callable(start_seq) else start_seq
    if isinstance(first, bool) or not isinstance(first, int) or not 0 <= first < _SEQ_LIMIT:
        raise ValueError(f"start_seq for {sid!r} must be an int in [0, 2**63), got {first!r}")
    if n_features is not None and (
        isinstance(n_features, bool) or not isinstance(n_features, int) or n_features < 1
    ):
        raise ValueError(f"n_features must be None or an int >= 1, got {n_features!r}")
    common = SourceArgs(
        source_id=sid,
        start_seq=first,
        n_features=n_features,
        on_reject=on_reject,
        settings=settings if settings is not None else SourceSettings(),
        rng=rng if rng is not None else random.Random(),
    )
    if spec.kind == "command":
        from edge_runtime.sources.command import CommandSource

        return CommandSource(spec, **common)
    if spec.kind == "file":
        from edge_runtime.sources.file import FileSource

        return FileSource(spec, state_dir=state_dir, **common)
    from edge_runtime.sources.serialport import SerialSource

    return SerialSource(spec, **common)
