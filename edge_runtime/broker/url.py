"""Broker URLs: ``mqtt://HOST[:PORT]`` and ``mqtts://HOST[:PORT]`` as a `BrokerAddress`.

A user names the broker to connect to with ``--broker URL``; `parse_broker_url` checks it
and `BrokerAddress.url` writes it back. `BrokerError` is the error of the whole
`edge_runtime.broker` package (a bad URL here; no binary, a failed start or stop in
`edge_runtime.broker.mosquitto`). Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from edge_runtime.errors import EdgeRuntimeError

__all__ = ["MQTTS_PORT", "MQTT_PORT", "BrokerAddress", "BrokerError", "parse_broker_url"]

MQTT_PORT = 1883
"""Default port of ``mqtt://`` URLs (IANA, MQTT over TCP)."""

MQTTS_PORT = 8883
"""Default port of ``mqtts://`` URLs (IANA, MQTT over TLS)."""

_URL_FORM = "expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT]"


class BrokerError(EdgeRuntimeError, RuntimeError):
    """No broker binary, a bad broker URL, or a broker that failed to start or stop."""


@dataclass(frozen=True)
class BrokerAddress:
    """Where to connect: ``host``, TCP ``port`` and whether to use TLS (``tls``)."""

    host: str
    port: int
    tls: bool

    @property
    def url(self) -> str:
        """The address as a URL, e.g. ``"mqtt://127.0.0.1:1883"`` (IPv6 hosts in brackets)."""
        scheme = "mqtts" if self.tls else "mqtt"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"


def parse_broker_url(url: str) -> BrokerAddress:
    """Parse ``mqtt://HOST[:PORT]`` or ``mqtts://HOST[:PORT]``.

    Parameters
    ----------
    url : str
        ``mqtt://`` (plain TCP, default port 1883) or ``mqtts://`` (TLS, default port
        8883) followed by a host name, an IPv4 address or a bracketed IPv6 address, and
        optionally ``:PORT`` (1-65535) and a trailing ``/``.

    Returns
    -------
    BrokerAddress

    Raises
    ------
    BrokerError
        For any other form (another or no scheme, no host, a bad port, user
        credentials, a path, query or fragment, whitespace); the one-line message names
        the URL and the expected form.

    Examples
    --------
    >>> parse_broker_url("mqtt://pi-hub.local")
    BrokerAddress(host='pi-hub.local', port=1883, tls=False)
    >>> parse_broker_url("mqtts://[::1]:8884")
    BrokerAddress(host='::1', port=8884, tls=True)
    """

    def bad(reason: str) -> BrokerError:
        return BrokerError(f"bad broker URL {url!r}: {reason}; {_URL_FORM}")

    if not isinstance(url, str):
        raise bad(f"not a string but {type(url).__name__}")
    if not url or any(ch.isspace() for ch in url):
        raise bad("empty or contains whitespace")
    if "://" not in url:
        raise bad("no scheme")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise bad(str(exc)) from None
    if parts.scheme not in ("mqtt", "mqtts"):
        raise bad(f"unsupported scheme {parts.scheme!r}")
    if "@" in parts.netloc:
        raise bad("credentials in the URL are not supported")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise bad("unexpected path, query or fragment")
    host = parts.hostname
    if not host:
        raise bad("no host")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is None:
        if parts.netloc.endswith(":"):
            raise bad("empty port")
        port = MQTTS_PORT if parts.scheme == "mqtts" else MQTT_PORT
    if not 1 <= port <= 65535:
        raise bad("port is not a number in 1-65535")
    return BrokerAddress(host=host, port=port, tls=parts.scheme == "mqtts")
