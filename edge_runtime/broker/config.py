"""The configuration a `LocalMosquitto` runs with, derived from a template (`derive_config`).

`LocalMosquitto` derives its configuration from the shipped ``broker_config/mosquitto.conf``
(packaged as ``edge_runtime/resources/mosquitto.conf``), or ``broker_config/dynsec.conf``
(``edge_runtime/resources/dynsec.conf``) for a broker with the dynamic security plugin: it
keeps the queue, size and persistence settings and replaces the listener, the persistence
location and the log destination with its own, so that every instance has its own free port
and its own temporary directory. With the plugin, `dynsec_admin_config` is the plugin's first
configuration file (one admin client). Text in, text out; stdlib only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from importlib import resources

from edge_runtime.broker.url import BrokerError

__all__ = [
    "CONFIG_NAME",
    "DERIVED_CONFIG_DROPPED_KEYS",
    "DYNSEC_ADMIN_ROLE",
    "DYNSEC_CONFIG_NAME",
    "DYNSEC_DROPPED_KEYS",
    "DYNSEC_ITERATIONS",
    "DYNSEC_TEMPLATE_NAME",
    "LOCAL_HOST",
    "LOG_NAME",
    "default_template",
    "derive_config",
    "dynsec_admin_config",
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

DYNSEC_TEMPLATE_NAME = "dynsec.conf"
"""File name of the packaged template of a `LocalMosquitto` with the dynamic security plugin
(``edge_runtime/resources/dynsec.conf``, a copy of ``broker_config/dynsec.conf``)."""

DYNSEC_CONFIG_NAME = "dynamic-security.json"
"""File name of the dynamic security plugin's own file (clients, roles, ACLs) in a
`LocalMosquitto`'s directory; the plugin rewrites it after every change."""

DYNSEC_DROPPED_KEYS = frozenset({"plugin", "plugin_opt_config_file", "password_file", "acl_file"})
"""Options of the template that `derive_config` also comments out when it loads the dynamic
security plugin: the plugin's path and file are its own, and the plugin replaces Mosquitto's
password and ACL files."""

DYNSEC_ADMIN_ROLE = "admin"
"""Role of the admin client in `dynsec_admin_config`."""

DYNSEC_ITERATIONS = 101
"""PBKDF2-SHA512 iterations of the admin's password hash in `dynsec_admin_config`: what
``mosquitto_ctrl dynsec init`` writes (Mosquitto 2.0.11)."""

_LOG_TYPES = ("error", "warning", "notice", "information")


def default_template(name: str = CONFIG_NAME) -> str:
    """Text of a packaged template: ``edge_runtime/resources/mosquitto.conf`` (a copy of
    ``broker_config/mosquitto.conf``), the default template of `LocalMosquitto`, or
    `DYNSEC_TEMPLATE_NAME` (``broker_config/dynsec.conf``), its default with the dynamic
    security plugin.

    Parameters
    ----------
    name : str, default `CONFIG_NAME`
        File name in ``edge_runtime/resources``.

    Raises
    ------
    BrokerError
        If the packaged file cannot be read.
    """
    ref = resources.files("edge_runtime") / "resources" / name
    try:
        return ref.read_text(encoding="utf-8")
    except OSError as exc:
        raise BrokerError(f"cannot read the packaged Mosquitto config {ref}: {exc}") from exc


def derive_config(
    template: str,
    *,
    port: int,
    data_dir: str | os.PathLike[str],
    dynsec_plugin: str | os.PathLike[str] | None = None,
) -> str:
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
        plugin <dynsec_plugin>           (only with dynsec_plugin)
        plugin_opt_config_file <data_dir>/dynamic-security.json   (only with dynsec_plugin)
        listener <port> 127.0.0.1
        <the template's lines after its first listener line>
        allow_anonymous true             (false with dynsec_plugin)

    The ``log_type`` lines are Mosquitto's defaults, stated so that a template that
    narrows them cannot hide the ``information`` line ``mosquitto version X running``,
    which `LocalMosquitto.start` waits for (``log_type`` lines add up).

    The template's lines after its first ``listener`` line (such as
    ``use_username_as_clientid``, an option of the listener above it) follow the appended
    listener, so they still apply to a listener: placed before any listener, Mosquitto would
    apply them to a default listener it then opens on port 1883 of every interface.

    Mosquitto started as root drops to the ``mosquitto`` user, which could not
    write the caller's private temporary directory; ``user root`` keeps it running
    as the caller. Run as any other user, Mosquitto ignores ``user``, so the line is
    left out.

    Parameters
    ----------
    template : str
        Text of a Mosquitto 2.0 configuration file with ``per_listener_settings false``
        (the default), so that authentication options apply to every listener. Options of
        any listener but the first are not supported.
    port : int
        TCP port of the loopback listener.
    data_dir : path
        Directory for the persistence database and the log (and the dynamic security
        plugin's file, `DYNSEC_CONFIG_NAME`).
    dynsec_plugin : path, optional
        Absolute path of ``mosquitto_dynamic_security.so``: load the plugin with its file in
        ``data_dir`` (which the caller writes first, `dynsec_admin_config`), comment out
        the template's `DYNSEC_DROPPED_KEYS` and refuse anonymous clients. None (the
        default): no plugin, anonymous clients allowed.

    Raises
    ------
    BrokerError
        If ``data_dir`` or ``dynsec_plugin`` contains a line break (it could not be written
        into the file).
    """
    data_dir = os.fspath(data_dir)
    plugin = None if dynsec_plugin is None else os.fspath(dynsec_plugin)
    for value in (data_dir, plugin or ""):
        if "\n" in value or "\r" in value:
            raise BrokerError(f"path {value!r} contains a line break")
    dropped = DERIVED_CONFIG_DROPPED_KEYS | (DYNSEC_DROPPED_KEYS if plugin else frozenset())
    head: list[str] = []
    tail: list[str] = []  # the lines after the template's first listener line
    lines = head
    for line in template.splitlines():
        words = line.split(None, 1)
        active = bool(words) and not words[0].startswith("#")
        if active and words[0] in dropped:
            lines.append(f"# replaced by edge_runtime.broker: {line.strip()}")
            if words[0] == "listener":
                lines = tail
        else:
            lines.append(line)
    head += [
        "",
        "# --- appended by edge_runtime.broker.LocalMosquitto ---",
        f"persistence_location {os.path.join(data_dir, '')}",
        f"log_dest file {os.path.join(data_dir, LOG_NAME)}",
        *(f"log_type {log_type}" for log_type in _LOG_TYPES),
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        head.append("user root")
    if plugin is not None:
        head += [
            f"plugin {plugin}",
            f"plugin_opt_config_file {os.path.join(data_dir, DYNSEC_CONFIG_NAME)}",
        ]
    head.append(f"listener {port} {LOCAL_HOST}")
    if tail:
        head += ["# --- the template's lines after its listener line ---", *tail, "# ---"]
    head += [f"allow_anonymous {'false' if plugin else 'true'}", ""]
    return "\n".join(head)


def dynsec_admin_config(username: str, password: str, *, salt: bytes) -> str:
    """The dynamic security plugin's file with one admin client, as JSON text.

    What ``mosquitto_ctrl dynsec init FILE USERNAME PASSWORD`` writes (Mosquitto 2.0.11), with
    one more grant: the admin role may also publish on every topic (``publishClientSend #``),
    so the operator of a `LocalMosquitto` can clear a retired device's retained topics and
    publish readings. It may administer the plugin (``$CONTROL/dynamic-security/#``), read and
    subscribe to everything (``#``, ``$SYS/#``). The default ACL access is the plugin's: a
    client may receive and unsubscribe, but not publish or subscribe, unless a role allows it.

    The password is stored as the plugin stores it: PBKDF2-HMAC-SHA512 of the UTF-8 password
    with ``salt`` and `DYNSEC_ITERATIONS` iterations, both base64-encoded.

    Parameters
    ----------
    username : str
        The admin's user name (e.g. ``"admin"``).
    password : str
        Its password (not stored; draw it with ``secrets``).
    salt : bytes
        Random salt, 12 bytes as ``mosquitto_ctrl`` draws them (``os.urandom(12)``); passed in
        so that the output is reproducible in tests.

    Returns
    -------
    str
        JSON text; write it with mode 0600 (it holds a password hash).

    Raises
    ------
    ValueError
        If ``username`` or ``password`` is empty, or ``salt`` is shorter than 8 bytes.
    """
    if not username or not password:
        raise ValueError("the dynamic security admin needs a non-empty user name and password")
    if len(salt) < 8:
        raise ValueError(f"salt must be at least 8 bytes, got {len(salt)}")
    digest = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, DYNSEC_ITERATIONS)

    def grant(acltype: str, topic: str) -> dict[str, object]:
        return {"acltype": acltype, "topic": topic, "allow": True}

    control = "$CONTROL/dynamic-security/#"
    document = {
        "clients": [
            {
                "username": username,
                "textName": "Dynsec admin user (edge_runtime.broker.LocalMosquitto)",
                "password": base64.b64encode(digest).decode("ascii"),
                "salt": base64.b64encode(salt).decode("ascii"),
                "iterations": DYNSEC_ITERATIONS,
                "roles": [{"rolename": DYNSEC_ADMIN_ROLE}],
            }
        ],
        "roles": [
            {
                "rolename": DYNSEC_ADMIN_ROLE,
                "acls": [
                    grant("publishClientSend", control),
                    grant("publishClientReceive", control),
                    grant("subscribePattern", control),
                    grant("publishClientReceive", "$SYS/#"),
                    grant("subscribePattern", "$SYS/#"),
                    grant("publishClientSend", "#"),
                    grant("publishClientReceive", "#"),
                    grant("subscribePattern", "#"),
                    grant("unsubscribePattern", "#"),
                ],
            }
        ],
        "defaultACLAccess": {
            "publishClientSend": False,
            "publishClientReceive": True,
            "subscribe": False,
            "unsubscribe": True,
        },
    }
    return json.dumps(document, indent=2) + "\n"
