"""Connection settings shared by every MQTT client of the package: `AgentSettings`.

The agents, the replay, the model watcher, the runner, the dashboard and the simulation
all talk to the broker with one `AgentSettings` (address, credentials, TLS, every timeout,
bound and cadence, named), declared once in `AGENT_SETTINGS_KEYS`; `credentials_from_env`
reads the MQTT credentials from the environment. Stdlib only (and
`edge_runtime.declaration`): the bottom of the runtime's layers, below
`edge_runtime.agents`.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal  # noqa: F401 (Literal: a field's type hint)

from edge_runtime.backoff import Backoff
from edge_runtime.declaration import Bound, Key, declared

__all__ = ["AGENT_SETTINGS_KEYS", "AgentSettings", "credentials_from_env"]

ENV_USERNAME = "EDGE_MQTT_USERNAME"
ENV_PASSWORD = "EDGE_MQTT_PASSWORD"
ENV_PASSWORD_FILE = "EDGE_MQTT_PASSWORD_FILE"


_SECONDS = "seconds"
_POSITIVE = Bound(0, low_open=True)
_NON_NEGATIVE = Bound(0)
_QOS = Bound(0, 2)

AGENT_SETTINGS_KEYS: tuple[Key, ...] = (
    Key("host", "str", "127.0.0.1", "The MQTT broker's host name or address."),
    Key("port", "int", 1883, "The MQTT broker's TCP port.", bound=Bound(0, 65535)),
    Key(
        "keepalive_s",
        "int",
        5,
        "MQTT keepalive; the broker publishes the Last Will after 1.5x this without traffic, "
        "and a client notices a silent broker within about 2x.",
        bound=_NON_NEGATIVE,
        unit=_SECONDS,
    ),
    Key(
        "timeout_s",
        "float",
        10.0,
        "Default time limit for connect, subscribe and publish. A publish that times out has "
        "an unknown outcome; snapshots are idempotent (ordered by ``(epoch, seq)``), so the "
        "agent simply publishes its latest one again.",
        bound=_POSITIVE,
        unit=_SECONDS,
    ),
    Key(
        "reconnect_min_s",
        "float",
        0.2,
        "Lower bound of the full-jitter exponential backoff between connection attempts.",
        bound=_POSITIVE,
        unit=_SECONDS,
    ),
    Key(
        "reconnect_max_s",
        "float",
        5.0,
        "Upper bound of that backoff (below ``reconnect_min_s`` it counts as equal).",
        bound=_POSITIVE,
        unit=_SECONDS,
    ),
    Key(
        "status_heartbeat_s",
        "float",
        30.0,
        "A node publishes its JSON status document at least this often (progress counters "
        "are refreshed then).",
        bound=_POSITIVE,
        unit=_SECONDS,
    ),
    Key(
        "status_min_interval_s",
        "float",
        2.0,
        "Least time between two status documents triggered by a change of health (rejects, "
        "undelivered snapshots, reconnects, gaps, stale children).",
        bound=_NON_NEGATIVE,
        unit=_SECONDS,
    ),
    Key(
        "confirm_interval_s",
        "float",
        0.5,
        "Least time between two reading confirmations of a leaf "
        "(``<prefix>/<path>/confirm``); a change inside it is confirmed when it ends.",
        bound=_NON_NEGATIVE,
        unit=_SECONDS,
    ),
    Key(
        "wire_dtype",
        "str",
        "float32",
        "Precision of the basis and singular values in published snapshots. float32 halves "
        "the bytes at no measurable cost in accuracy (benchmarks/fleet/dtype.py).",
        choices=("float32", "float64"),
        type_hint='Literal["float32", "float64"]',
    ),
    Key(
        "offload_min_cells",
        "int",
        200_000,
        "Merges and block updates touching at least this many matrix cells "
        "(``n_features * (rank + block_size)``) run in a worker thread so the event loop "
        "keeps draining the broker's queue.",
        bound=_NON_NEGATIVE,
        unit="cells",
    ),
    Key(
        "max_payload_bytes",
        "int",
        4 * 1024 * 1024,
        "Largest payload accepted on a subscribed topic.",
        bound=Bound(1),
        unit="bytes",
    ),
    Key(
        "max_queued_messages",
        "int",
        10_000,
        "Bound of the client's inbound queue. When it is full, further inbound messages are "
        "dropped by the client; they are re-sent by their sources (snapshots are "
        "re-published, readings re-sent by the replay), so the bound trades memory for a "
        "later catch-up.",
        bound=_NON_NEGATIVE,
        unit="messages",
    ),
    Key("qos", "int", 1, "MQTT QoS of every subscription and publish.", bound=_QOS),
    Key(
        "echo_timeout_s",
        "float",
        30.0,
        "Least time an agent waits for its own snapshot to come back from the broker, "
        "counted from the broker's PUBACK (and again from a reconnection), before counting it "
        "undelivered (denied or dropped); the bound grows to 4x the slowest recent echo, "
        "PUBACK round trip or event-loop lag under load, a publish that failed is never "
        "reported, and nothing expires while received messages wait to be handled "
        "(`edge_runtime.agents.common.core.policy.EchoTracker`). 0 turns the check off. The "
        "default reports a misconfiguration (ACL, size limit) within half a minute.",
        bound=_NON_NEGATIVE,
        unit=_SECONDS,
    ),
    Key(
        "restore_wait_s",
        "float",
        1.0,
        "How long a leaf without a checkpoint waits for its own retained snapshot to resume "
        "from at start.",
        bound=_NON_NEGATIVE,
        unit=_SECONDS,
    ),
    Key(
        "persistent_session",
        "bool",
        True,
        "Connect with ``clean_session=False`` (MQTT 3.1.1) under a fixed client id, so the "
        "broker keeps the subscriptions and queues QoS 1 messages while the agent is away.",
    ),
    Key(
        "username",
        "str",
        None,
        "MQTT user name (see `credentials_from_env`).",
        flag="--username",
        flag_help=f"MQTT user name (default: ${ENV_USERNAME})",
    ),
    Key("password", "str", None, "MQTT password (see `credentials_from_env`)."),
    Key(
        "ca_file",
        "path",
        None,
        "CA certificate(s) to verify the broker's TLS certificate; setting it turns TLS on.",
        flag="--ca-file",
        flag_help="CA certificate to verify the broker (TLS)",
    ),
    Key(
        "cert_file",
        "path",
        None,
        "Client certificate for brokers that require one.",
        flag="--cert-file",
        flag_help="client certificate (TLS)",
    ),
    Key(
        "key_file",
        "path",
        None,
        "The client certificate's private key.",
        flag="--key-file",
        flag_help="client private key (TLS)",
    ),
    Key(
        "tls_insecure",
        "bool",
        False,
        "Skip the broker host name check (only for test set-ups).",
    ),
    Key(
        "scores_qos",
        "int",
        0,
        "MQTT QoS of a scoring leaf's documents on ``<prefix>/<path>/scores`` (not retained): "
        "0 by default, since they are a live telemetry stream whose counts are also in the "
        "retained status document, and a lost one needs no re-send.",
        bound=_QOS,
    ),
    Key(
        "discovery_prefix",
        "str",
        None,
        "Home Assistant's discovery prefix (e.g. ``\"homeassistant\"``): the agent then "
        "publishes its node's discovery config messages (`edge_runtime.homeassistant`) "
        "retained after every connection, and again whenever ``<prefix>/status`` says "
        "``online`` (Home Assistant's birth message). None: no discovery.",
    ),
)
"""Every setting of `AgentSettings`, declared once: its fields, defaults, checks, docstring
and the command-line flags that mirror them (`edge_runtime.cli.parser`)."""


def _check_settings(values: dict[str, Any]) -> dict[str, Any]:
    """Each value checked against its declaration (`AGENT_SETTINGS_KEYS`), normalised.

    Raises
    ------
    ValueError
        ``"AgentSettings: <key> must be <requirement>, got <value>"``.
    """
    return {key.name: key.check("AgentSettings", values[key.name]) for key in AGENT_SETTINGS_KEYS}


@declared(AGENT_SETTINGS_KEYS, _check_settings)
class AgentSettings:
    """How an agent (and every other client of ours) talks to its broker.

    Every field is declared in `AGENT_SETTINGS_KEYS` (type, default, bounds, unit, meaning)
    and checked when the settings are built: a value of the wrong type or out of its bounds
    raises `ValueError` in one line naming it.

    Parameters
    ----------
    {parameters}

    Raises
    ------
    ValueError
        If a value is of the wrong type or out of its bounds.
    """

    @property
    def tls(self) -> bool:
        """Whether connections use TLS (a CA file is set)."""
        return self.ca_file is not None

    def tls_context(self) -> ssl.SSLContext | None:
        """The TLS context for ``ca_file`` (and the client certificate), or None.

        Raises
        ------
        OSError, ssl.SSLError
            If a certificate or key file cannot be read.
        """
        if self.ca_file is None:
            return None
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if self.cert_file is not None:
            context.load_cert_chain(
                str(self.cert_file), None if self.key_file is None else str(self.key_file)
            )
        if self.tls_insecure:
            context.check_hostname = False
        return context

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``aiomqtt.Client`` shared by every client of ours."""
        return {
            "hostname": self.host,
            "port": self.port,
            "username": self.username,
            "password": self.password,
            "tls_context": self.tls_context(),
            "timeout": self.timeout_s,
        }

    def reconnect_backoff(self) -> Backoff:
        """A fresh `Backoff` for the delays between connection attempts, seconds.

        Full jitter: after ``k`` consecutive failures a delay uniform in
        ``[reconnect_min_s, min(reconnect_max_s, reconnect_min_s * 2**k)]`` (never below
        ``reconnect_min_s``; a ``reconnect_max_s`` below it counts as equal), drawn from the
        instance's own generator. Used by every client that reconnects: the agents, the
        replay, `edge_runtime.monitor.wait_online` and the dashboard.

        Raises
        ------
        ValueError
            If ``reconnect_min_s`` is not a positive finite number of seconds.
        """
        high = max(self.reconnect_max_s, self.reconnect_min_s)
        return Backoff(self.reconnect_min_s, high, jitter="full")

    def with_credentials_from_env(self) -> AgentSettings:
        """These settings with username and password taken from the environment if unset."""
        username, password = credentials_from_env()
        return replace(
            self,
            username=self.username if self.username is not None else username,
            password=self.password if self.password is not None else password,
        )


def credentials_from_env(environ: dict[str, str] | None = None) -> tuple[str | None, str | None]:
    """MQTT credentials from ``EDGE_MQTT_USERNAME`` and ``EDGE_MQTT_PASSWORD`` or
    ``EDGE_MQTT_PASSWORD_FILE`` (a file whose first line is the password, so the secret
    stays out of the process list and the unit file).

    Raises
    ------
    OSError
        If ``EDGE_MQTT_PASSWORD_FILE`` names a file that cannot be read.
    """
    env = os.environ if environ is None else environ
    username = env.get(ENV_USERNAME) or None
    password = env.get(ENV_PASSWORD) or None
    path = env.get(ENV_PASSWORD_FILE)
    if password is None and path:
        password = read_password_file(Path(path))
    return username, password


def read_password_file(path: Path) -> str:
    """The password on the first line of ``path`` (surrounding whitespace stripped).

    Raises
    ------
    OSError
        If the file cannot be read.
    ValueError
        One line naming the file, if its first line is empty.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    password = lines[0].strip() if lines else ""
    if not password:
        raise ValueError(f"password file {str(path)!r} is empty: the password is its first line")
    return password
