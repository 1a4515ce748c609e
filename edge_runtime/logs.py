"""structlog set-up for the command line: pretty on a terminal, JSON lines otherwise."""

from __future__ import annotations

import logging
import sys

import structlog

__all__ = ["configure_logging"]


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time of writing, not at set-up: a
    caller (a test runner's capture, a daemon manager) may replace and close the stream it
    had when logging was configured."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(level: str = "warning", *, json_logs: bool | None = None) -> None:
    """Send structured logs to stderr at ``level`` (debug, info, warning, error).

    ``json_logs`` None chooses JSON lines when stderr is not a terminal (systemd,
    files) and the console renderer when it is.

    Raises
    ------
    ValueError
        If ``level`` is not a logging level name.
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}; expected debug, info, warning or error")
    if json_logs is None:
        json_logs = not sys.stderr.isatty()
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if json_logs
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(_CurrentStderr()),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr)
