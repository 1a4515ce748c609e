"""`SourceError`, in a module of its own: an agent catches it without loading the sources
(`edge_runtime.sources.base` and the kinds' modules load when a local source is opened:
a leaf's import time and RSS stay low)."""

from __future__ import annotations

from edge_runtime.errors import EdgeRuntimeError

__all__ = ["SourceError"]


class SourceError(EdgeRuntimeError, RuntimeError):
    """A local source that cannot run at all: pyserial missing, a command that does not
    exist, a path that is a directory. One line naming the value and what was expected.
    Raised by `open_source` when detectable up front, else by `Source.readings`."""
