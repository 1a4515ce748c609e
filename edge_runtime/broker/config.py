"""The configuration a `LocalMosquitto` runs with, derived from a template (`derive_config`).

`LocalMosquitto` derives its configuration from the shipped ``broker_config/mosquitto.conf``
(packaged as ``edge_runtime/resources/mosquitto.conf``): it keeps the queue, size and
persistence settings and replaces the listener, the persistence location and the log
destination with its own, so that every instance has its own free port and its own
temporary directory. Text in, text out; stdlib only.
"""

from __future__ import annotations

import os
from importlib import resources

from edge_runtime.broker.url import BrokerError

__all__ = [
    "CONFIG_NAME",
    "DERIVED_CONFIG_DROPPED_KEYS",
    "LOCAL_HOST",
    "LOG_NAME",
    "default_template",
    "derive_config",
]

LOCAL_HOST = "127.0.0.1"
"""Interface a `LocalMosquitto` listens on: loopback only, never the network."""

DERIVED_CONFIG_DROPPED_KEYS = frozenset(
    {
        "listener",
        "port",
        "bind_address",
        "persistence_location",
        "log_dest",
        "pid_file",
        "user",
        "allow_anonymous",
    }
)
"""Options of the template that `derive_config` comments out and replaces."""

LOG_NAME = "mosquitto.log"
"""File name of Mosquitto's log in a `LocalMosquitto`'s directory."""

CONFIG_NAME = "mosquitto.conf"
"""File name of the derived configuration in a `LocalMosquitto`'s directory."""

_LOG_TYPES = ("error", "warning", "notice", "information")


def default_template() -> str:
    """Text of the packaged ``edge_runtime/resources/mosquitto.conf`` (a copy of
    ``broker_config/mosquitto.conf``), the default template of `LocalMosquitto`.

    Raises
    ------
    BrokerError
        If the packaged file cannot be read.
    """
    ref = resources.files("edge_runtime") / "resources" / CONFIG_NAME
    try:
        return ref.read_text(encoding="utf-8")
    except OSError as exc:
        raise BrokerError(f"cannot read the packaged Mosquitto config {ref}: {exc}") from exc


def derive_config(template: str, *, port: int, data_dir: str | os.PathLike[str]) -> str:
    """The configuration a `LocalMosquitto` runs with, derived from ``template``.

    Every line of ``template`` whose option is in `DERIVED_CONFIG_DROPPED_KEYS`
    (``listener``, ``port``, ``bind_address``, ``persistence_location``, ``log_dest``,
    ``pid_file``, ``user``, ``allow_anonymous``) is commented out; then these lines
    are appended::

        persistence_location <data_dir>/
        log_dest file <data_dir>/mosquitto.log
        log_type error
        log_type warning
        log_type notice
        log_type information
        user root                        (only when running as root, see below)
        listener <port> 127.0.0.1
        allow_anonymous true

    The ``log_type`` lines are Mosquitto's defaults, stated so that a template that
    narrows them cannot hide the ``information`` line ``mosquitto version X running``,
    which `LocalMosquitto.start` waits for (``log_type`` lines add up).

    Mosquitto started as root drops to the ``mosquitto`` user, which could not
    write the caller's private temporary directory; ``user root`` keeps it running
    as the caller. Run as any other user, Mosquitto ignores ``user``, so the line is
    left out.

    Parameters
    ----------
    template : str
        Text of a Mosquitto 2.0 configuration file. Listener-specific options must
        not follow its ``listener`` line (they would apply to the appended listener).
    port : int
        TCP port of the loopback listener.
    data_dir : path
        Directory for the persistence database and the log.

    Raises
    ------
    BrokerError
        If ``data_dir`` contains a line break (it could not be written into the file).
    """
    data_dir = os.fspath(data_dir)
    if "\n" in data_dir or "\r" in data_dir:
        raise BrokerError(f"directory {data_dir!r} contains a line break")
    lines = []
    for line in template.splitlines():
        words = line.split(None, 1)
        if words and not words[0].startswith("#") and words[0] in DERIVED_CONFIG_DROPPED_KEYS:
            lines.append(f"# replaced by edge_runtime.broker: {line.strip()}")
        else:
            lines.append(line)
    lines += [
        "",
        "# --- appended by edge_runtime.broker.LocalMosquitto ---",
        f"persistence_location {os.path.join(data_dir, '')}",
        f"log_dest file {os.path.join(data_dir, LOG_NAME)}",
        *(f"log_type {log_type}" for log_type in _LOG_TYPES),
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        lines.append("user root")
    lines += [f"listener {port} {LOCAL_HOST}", "allow_anonymous true", ""]
    return "\n".join(lines)
