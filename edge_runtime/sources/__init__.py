"""Local sensor sources: readings from a command, a file or named pipe, or a serial port,
so raw readings need not leave the device.

A leaf reads its readings from its sensor topic over MQTT (kind ``mqtt``, the default) or,
configured per leaf in the topology (``source = { kind = "command", ... }``, see
`SourceSpec`), from a local source opened with `open_source`::

    spec = SourceSpec.from_mapping(table, "node 'pi-07'", base_dir=topology_dir)
    source = open_source(spec, node_id="pi-07",
                         start_seq=lambda sid: leaf.ingested.get(sid, -1) + 1,
                         n_features=48, on_reject=count_reject, state_dir=state_dir)
    async with source:
        async for readings in source.readings():  # SensorReadings(values, source, seq)
            leaf.accept(readings, now)

Every source has a stable id (``command:<node id>``, ``file:<absolute path>``,
``serial:<port>``) and numbers its accepted readings consecutively from ``start_seq``, so
the leaf's `SourceSequencer` delivers them exactly once and in order, and its checkpoint
(``ingested[source id]``) says where a restarted agent continues: a file source skips what
was read before (module `edge_runtime.sources.file`), a command or serial source numbers its
new readings on from there.

Modules (one concept each; the cores do no I/O):

=============  ==============================================================================
`spec`         `SourceSpec` (TOML inline table -> validated spec), `SourceSettings`,
               `source_id`
`lines`        `LineSplitter` (bytes -> lines, bounded), `LineParser` (line -> reading or
               a reject reason, counted); the CSV and JSON line formats
`restart`      `restart_backoff`: a source's restart delays (`edge_runtime.backoff.Backoff`)
`ratelimit`    `LogRateLimiter`: the first few log lines per interval, then a count
`cursor`       `FileCursor`, `CursorLog`: where a file source resumes
`errors`       `SourceError`
`base`         `Source` (lifecycle, bounded queue, numbering)
`command`      `CommandSource`
`file`         `FileSource` (regular files followed like ``tail -F``, named pipes)
`serialport`   `SerialSource` (pyserial, optional extra ``serial``)
`factory`      `open_source`
=============  ==============================================================================

The names below are imported on first use (PEP 562, `edge_runtime.lazy`), and `open_source`
imports the module of the kind it opens: a leaf that reads its sensor topic loads the spec
and the rate limiter, not the command, file and serial sources (a leaf's import time
and RSS stay low).

Exception tree
--------------
::

    ValueError        a bad spec, table or argument (one line naming the key and the value)
    RuntimeError
     +-- SourceError  a source that cannot run (command not found, path is a directory,
                      pyserial missing); transient failures (a command exiting, a port
                      unplugged, a file rotated) are handled and logged, never raised
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_runtime.lazy import lazy_names

if TYPE_CHECKING:
    from edge_runtime.backoff import Backoff as Backoff
    from edge_runtime.sources.base import RejectCallback as RejectCallback
    from edge_runtime.sources.base import Source as Source
    from edge_runtime.sources.base import SourceState as SourceState
    from edge_runtime.sources.command import CommandSource as CommandSource
    from edge_runtime.sources.cursor import CursorLog as CursorLog
    from edge_runtime.sources.cursor import FileCursor as FileCursor
    from edge_runtime.sources.errors import SourceError as SourceError
    from edge_runtime.sources.factory import open_source as open_source
    from edge_runtime.sources.file import FileSource as FileSource
    from edge_runtime.sources.lines import DEFAULT_MAX_LINE_BYTES as DEFAULT_MAX_LINE_BYTES
    from edge_runtime.sources.lines import FORMATS as FORMATS
    from edge_runtime.sources.lines import REJECT_REASONS as REJECT_REASONS
    from edge_runtime.sources.lines import LineParser as LineParser
    from edge_runtime.sources.lines import LineSplitter as LineSplitter
    from edge_runtime.sources.ratelimit import LogRateLimiter as LogRateLimiter
    from edge_runtime.sources.serialport import SerialSource as SerialSource
    from edge_runtime.sources.spec import KINDS as KINDS
    from edge_runtime.sources.spec import MAX_SOURCE_ID_CHARS as MAX_SOURCE_ID_CHARS
    from edge_runtime.sources.spec import RESTART_POLICIES as RESTART_POLICIES
    from edge_runtime.sources.spec import SourceSettings as SourceSettings
    from edge_runtime.sources.spec import SourceSpec as SourceSpec
    from edge_runtime.sources.spec import source_id as source_id

__all__: list[str] = []  # internal to the runtime: no user surface

_MODULE_OF = {
    name: module
    for module, names in {
        "edge_runtime.backoff": ("Backoff",),
        "edge_runtime.sources.base": ("RejectCallback", "Source", "SourceState"),
        "edge_runtime.sources.errors": ("SourceError",),
        "edge_runtime.sources.command": ("CommandSource",),
        "edge_runtime.sources.cursor": ("CursorLog", "FileCursor"),
        "edge_runtime.sources.factory": ("open_source",),
        "edge_runtime.sources.file": ("FileSource",),
        "edge_runtime.sources.lines": (
            "DEFAULT_MAX_LINE_BYTES",
            "FORMATS",
            "REJECT_REASONS",
            "LineParser",
            "LineSplitter",
        ),
        "edge_runtime.sources.ratelimit": ("LogRateLimiter",),
        "edge_runtime.sources.serialport": ("SerialSource",),
        "edge_runtime.sources.spec": (
            "KINDS",
            "MAX_SOURCE_ID_CHARS",
            "RESTART_POLICIES",
            "SourceSettings",
            "SourceSpec",
            "source_id",
        ),
    }.items()
    for name in names
}
"""The module of each public name (imported on first use by `__getattr__`)."""

__getattr__, __dir__ = lazy_names(globals(), _MODULE_OF, _MODULE_OF)
