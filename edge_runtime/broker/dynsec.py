"""Mosquitto's dynamic security plugin: where it is installed, and its control API.

Mosquitto 2.0's dynamic security plugin (``mosquitto_dynamic_security.so``, loaded by
``broker_config/dynsec.conf``; `find_dynsec_plugin` finds it) keeps clients (user names and
password hashes), groups and roles (lists of ACLs) in a JSON file and changes them while the
broker runs. A client whose role may publish to ``$CONTROL/dynamic-security/#`` (the admin
that ``mosquitto_ctrl dynsec init`` creates) sends commands as JSON to `CONTROL_TOPIC`::

    {"commands": [{"command": "createClient", "username": "pi-09", "password": "...",
                   "correlationData": "..."}]}

and the plugin answers that client on `RESPONSE_TOPIC`, one response per command, in order,
with ``"error"`` when it refused the command and ``"data"`` for the ``get``/``list`` ones::

    {"responses": [{"command": "createClient", "correlationData": "...",
                    "error": "Client already exists"}]}

`DynsecClient` owns one MQTT connection (aiomqtt) for that exchange: `DynsecClient.execute`
sends commands and returns their data, and methods named after the commands wrap it
(`DynsecClient.create_client`, `DynsecClient.add_role_acl`, ...). A refused command raises
`DynsecError` naming the command and the plugin's error; so does a command the plugin never
answers within the timeout (the user is no dynamic security admin, or the broker does not
load the plugin: an unauthorised publish is dropped silently).

ACL types (`Acl`): ``publishClientSend`` (the client may publish on a topic),
``publishClientReceive`` (may receive a message published on it), ``subscribeLiteral`` /
``subscribePattern`` (may subscribe with exactly that filter / a filter it matches),
``unsubscribeLiteral`` / ``unsubscribePattern``. A client's roles are checked in order of
priority (highest first), a role's ACLs likewise, and the first ACL whose topic matches
decides; without one, the plugin's default access applies (receive and unsubscribe allowed,
publish and subscribe denied). Reference: https://mosquitto.org/documentation/dynamic-security/

Exceptions::

    BrokerError                     (edge_runtime.broker.url)
     └── DynsecError                a command refused or not answered
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import json
import os
import ssl
import sysconfig
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiomqtt

from edge_runtime.broker.url import MQTT_PORT, BrokerError

__all__ = [
    "ACL_TYPES",
    "CONTROL_TOPIC",
    "DEFAULT_DYNSEC_TIMEOUT_S",
    "DYNSEC_PLUGIN_FILE",
    "DYNSEC_PLUGIN_NOT_FOUND",
    "RESPONSE_TOPIC",
    "Acl",
    "DynsecClient",
    "DynsecError",
    "find_dynsec_plugin",
]

CONTROL_TOPIC = "$CONTROL/dynamic-security/v1"
"""Topic the plugin reads commands from."""

RESPONSE_TOPIC = f"{CONTROL_TOPIC}/response"
"""Topic the plugin answers on (to the client that sent the commands)."""

DEFAULT_DYNSEC_TIMEOUT_S = 10.0
"""Seconds `DynsecClient` waits to connect, subscribe, publish, and for each answer."""

ACL_TYPES = (
    "publishClientSend",
    "publishClientReceive",
    "subscribeLiteral",
    "subscribePattern",
    "unsubscribeLiteral",
    "unsubscribePattern",
)
"""The plugin's ACL types (`Acl.acltype`)."""

DYNSEC_PLUGIN_FILE = "mosquitto_dynamic_security.so"
"""File name of Mosquitto's dynamic security plugin (Debian's ``mosquitto`` package, 2.0+)."""

DYNSEC_PLUGIN_NOT_FOUND = (
    f"{DYNSEC_PLUGIN_FILE} not found: it comes with Mosquitto 2.0 "
    "(`sudo apt-get install mosquitto` on Debian/Raspberry Pi OS 11 or later); "
    "`dpkg -L mosquitto | grep dynamic_security` shows where it is"
)
"""Message of the `BrokerError` raised by `find_dynsec_plugin`."""


def find_dynsec_plugin(executable: str | None = None) -> str:
    """Absolute path of Mosquitto's dynamic security plugin, `DYNSEC_PLUGIN_FILE`.

    Debian installs it in its multiarch directory, which depends on the architecture
    (``/usr/lib/x86_64-linux-gnu``, ``/usr/lib/aarch64-linux-gnu``,
    ``/usr/lib/arm-linux-gnueabihf``, ...), so nothing is hard-coded: for the prefix of the
    ``mosquitto`` executable (``/usr`` for ``/usr/sbin/mosquitto``), then ``/usr`` and
    ``/usr/local``, the first file found in ``PREFIX/lib/<Python's multiarch triplet>``,
    ``PREFIX/lib/*/``, ``PREFIX/lib`` or ``PREFIX/lib64``.

    Parameters
    ----------
    executable : str, optional
        The ``mosquitto`` binary (`edge_runtime.broker.find_mosquitto`) whose installation
        to search first.

    Returns
    -------
    str

    Raises
    ------
    BrokerError
        If none is found; the message is `DYNSEC_PLUGIN_NOT_FOUND`.
    """
    prefixes: list[str] = []
    if executable is not None:
        prefixes.append(os.path.dirname(os.path.dirname(os.path.realpath(executable))))
    prefixes += ["/usr", "/usr/local"]
    triplet = sysconfig.get_config_var("MULTIARCH") or ""
    seen: set[str] = set()
    for prefix in dict.fromkeys(prefixes):
        lib = os.path.join(prefix, "lib")
        candidates = [os.path.join(lib, triplet, DYNSEC_PLUGIN_FILE)] if triplet else []
        candidates += sorted(glob.glob(os.path.join(glob.escape(lib), "*", DYNSEC_PLUGIN_FILE)))
        candidates += [
            os.path.join(lib, DYNSEC_PLUGIN_FILE),
            os.path.join(prefix, "lib64", DYNSEC_PLUGIN_FILE),
        ]
        for candidate in candidates:
            if candidate not in seen and os.path.isfile(candidate):
                return candidate
            seen.add(candidate)
    raise BrokerError(DYNSEC_PLUGIN_NOT_FOUND)


class DynsecError(BrokerError):
    """The dynamic security plugin refused a command, or did not answer it in time.

    Parameters
    ----------
    command : str
        The command, e.g. ``"createClient"``.
    error : str
        The plugin's error (e.g. ``"Client already exists"``), or why there was no answer.
    timed_out : bool, default False
        True when the plugin did not answer within the timeout.

    Attributes
    ----------
    command, error : str
    timed_out : bool
    """

    def __init__(self, command: str, error: str, *, timed_out: bool = False) -> None:
        super().__init__(f"dynamic security {command}: {error}")
        self.command = command
        self.error = error
        self.timed_out = timed_out

    @property
    def not_found(self) -> bool:
        """Whether the plugin said the client, group or role does not exist."""
        return self.error.lower().endswith("not found")

    @property
    def exists(self) -> bool:
        """Whether the plugin said the client, group or role exists already."""
        return self.error.lower().endswith("already exists")


@dataclass(frozen=True)
class Acl:
    """One ACL of a role: what a client may (``allow``) or may not do on a topic.

    Parameters
    ----------
    acltype : str
        One of `ACL_TYPES`.
    topic : str
        A topic, or a filter with ``+`` / ``#`` (the ``*Pattern`` and ``publish*`` types
        match topics against it).
    allow : bool, default True
        False denies.
    priority : int, default 0
        ACLs of a role are checked highest priority first; the first match decides.

    Raises
    ------
    ValueError
        If ``acltype`` is not one of `ACL_TYPES` or ``topic`` is empty.
    """

    acltype: str
    topic: str
    allow: bool = True
    priority: int = 0

    def __post_init__(self) -> None:
        if self.acltype not in ACL_TYPES:
            raise ValueError(
                f"ACL type must be one of {', '.join(ACL_TYPES)}, got {self.acltype!r}"
            )
        if not self.topic:
            raise ValueError("an ACL needs a topic")

    def as_json(self) -> dict[str, Any]:
        """The ACL as the plugin's commands and file write it."""
        return {
            "acltype": self.acltype,
            "topic": self.topic,
            "priority": self.priority,
            "allow": self.allow,
        }

    @classmethod
    def from_json(cls, acl: Mapping[str, Any]) -> Acl:
        """An ACL as ``getRole`` returns it.

        Raises
        ------
        ValueError
            If a field is missing or of the wrong type.
        """
        try:
            return cls(
                str(acl["acltype"]),
                str(acl["topic"]),
                bool(acl.get("allow", False)),
                int(acl.get("priority", 0)),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not an ACL of the dynamic security plugin: {acl!r}") from exc


class DynsecClient:
    """A connection to the broker that administers its dynamic security plugin.

    An async context manager: entering connects (as ``username``, whose role must allow
    publishing to ``$CONTROL/dynamic-security/#`` and subscribing to `RESPONSE_TOPIC`) and
    subscribes to `RESPONSE_TOPIC`; leaving disconnects. It can be entered once. The
    connection is for the plugin's answers only: do not share it.

    Commands are sent one request at a time (a lock orders concurrent callers); each request
    carries a random ``correlationData`` per command, and answers to anything else (an earlier
    request that timed out) are skipped.

    Parameters
    ----------
    hostname : str
        The broker.
    port : int, default 1883
    username, password : str or None
        The admin's credentials.
    tls_context : ssl.SSLContext, optional
        TLS (``mqtts://``); the commands carry new clients' passwords, so use TLS on any
        network but the loopback interface.
    timeout : float, default `DEFAULT_DYNSEC_TIMEOUT_S`
        Seconds to connect, subscribe, publish, and to wait for each answer.

    Raises
    ------
    ValueError
        If ``timeout`` is not positive.

    Examples
    --------
    >>> async def enrol() -> None:  # doctest: +SKIP
    ...     async with DynsecClient("127.0.0.1", username="admin", password=pw) as dynsec:
    ...         await dynsec.create_role("sensor", [Acl("publishClientSend", "sensors/x")])
    ...         await dynsec.create_client("x", password="...", roles=["sensor"])
    """

    def __init__(
        self,
        hostname: str,
        port: int = MQTT_PORT,
        *,
        username: str | None,
        password: str | None,
        tls_context: ssl.SSLContext | None = None,
        timeout: float = DEFAULT_DYNSEC_TIMEOUT_S,
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
        self.timeout_s = float(timeout)
        self._client = aiomqtt.Client(
            hostname,
            port,
            username=username,
            password=password,
            tls_context=tls_context,
            timeout=self.timeout_s,
        )
        self._state = "unopened"
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> DynsecClient:
        """Connect and subscribe to `RESPONSE_TOPIC`.

        Raises
        ------
        RuntimeError
            If it was entered before.
        aiomqtt.MqttError
            If the broker cannot be reached or refuses the login.
        DynsecError
            If the broker refuses the subscription (the user may not administer the plugin).
        """
        if self._state != "unopened":
            raise RuntimeError(f"a DynsecClient can be entered once; this one is {self._state}")
        self._state = "opened"
        await self._client.__aenter__()
        try:
            granted = await self._client.subscribe(RESPONSE_TOPIC, qos=1, timeout=self.timeout_s)
            if any(int(getattr(code, "value", code)) >= 0x80 for code in granted):
                raise DynsecError(
                    "subscribe",
                    f"the broker refused the subscription to {RESPONSE_TOPIC}: the user may not "
                    "administer the dynamic security plugin",
                )
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Disconnect (errors while disconnecting are not raised)."""
        if self._state != "opened":
            return
        self._state = "closed"
        with contextlib.suppress(aiomqtt.MqttError):
            await self._client.__aexit__(None, None, None)

    async def execute(self, *commands: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Send ``commands`` in one request; the ``data`` of each answer, in order.

        The plugin runs the commands in order and does not stop at a refused one; the first
        refused command raises (the others have run).

        Parameters
        ----------
        *commands : mapping
            Each with a ``"command"`` name and its fields, as the plugin documents them.

        Returns
        -------
        list of dict
            One per command: its ``"data"`` (``{}`` for commands that return none).

        Raises
        ------
        RuntimeError
            Outside ``async with``.
        DynsecError
            If the plugin refused a command (naming it and the plugin's error), or did not
            answer within ``timeout`` (``timed_out``).
        aiomqtt.MqttError
            If the connection fails.
        """
        if self._state != "opened":
            raise RuntimeError("DynsecClient.execute needs `async with DynsecClient(...)`")
        if not commands:
            return []
        names = [str(command["command"]) for command in commands]
        ids = [uuid.uuid4().hex for _ in commands]
        request = {
            "commands": [
                {**command, "correlationData": cid}
                for command, cid in zip(commands, ids, strict=True)
            ]
        }
        async with self._lock:
            await self._client.publish(
                CONTROL_TOPIC, json.dumps(request).encode("utf-8"), qos=1, timeout=self.timeout_s
            )
            answers = await self._answers(names, ids)
        data = []
        for name, answer in zip(names, answers, strict=True):
            if "error" in answer:
                raise DynsecError(name, str(answer["error"]))
            data.append(dict(answer.get("data") or {}))
        return data

    async def _answers(self, names: Sequence[str], ids: Sequence[str]) -> list[dict[str, Any]]:
        """The plugin's answer to each command of ``ids``, waiting at most ``timeout_s``."""
        wanted = set(ids)
        found: dict[str, dict[str, Any]] = {}
        try:
            async with asyncio.timeout(self.timeout_s):
                async for message in self._client.messages:
                    for answer in _responses(message.payload):
                        cid = answer.get("correlationData")
                        if cid in wanted:
                            found[cid] = answer
                    if wanted <= found.keys():
                        break
        except TimeoutError:
            missing = [name for name, cid in zip(names, ids, strict=True) if cid not in found]
            raise DynsecError(
                missing[0] if missing else names[0],
                f"no answer from the plugin within {self.timeout_s:g} s: is the broker loading "
                "mosquitto_dynamic_security.so, and may this user administer it (its role needs "
                "publishClientSend on $CONTROL/dynamic-security/#)?",
                timed_out=True,
            ) from None
        return [found[cid] for cid in ids]

    async def command(self, name: str, **fields: Any) -> dict[str, Any]:
        """Run one command; its ``data`` (``{}`` if none). Raises as `execute`."""
        (data,) = await self.execute({"command": name, **fields})
        return data

    # -- clients ------------------------------------------------------------------------

    async def create_client(
        self,
        username: str,
        *,
        password: str,
        roles: Iterable[str] = (),
        textname: str | None = None,
        textdescription: str | None = None,
    ) -> None:
        """``createClient``: a client that logs in as ``username`` with ``password``.

        Parameters
        ----------
        username, password : str
        roles : iterable of str, default ()
            Roles the client has, in order of priority.
        textname, textdescription : str, optional
            Free text the plugin stores with the client.

        Raises
        ------
        DynsecError
            If the client exists (`DynsecError.exists`) or a role does not; see `execute`.
        """
        fields: dict[str, Any] = {
            "username": username,
            "password": password,
            "roles": [{"rolename": role} for role in roles],
        }
        if textname is not None:
            fields["textname"] = textname
        if textdescription is not None:
            fields["textdescription"] = textdescription
        await self.command("createClient", **fields)

    async def delete_client(self, username: str) -> None:
        """``deleteClient`` (it is disconnected). Raises `DynsecError` as `execute`."""
        await self.command("deleteClient", username=username)

    async def disable_client(self, username: str) -> None:
        """``disableClient``: it is disconnected at once and can no longer log in (the
        plugin does not send its Last Will). Raises `DynsecError` as `execute`."""
        await self.command("disableClient", username=username)

    async def enable_client(self, username: str) -> None:
        """``enableClient``: a disabled client may log in again. Raises as `execute`."""
        await self.command("enableClient", username=username)

    async def set_client_password(self, username: str, password: str) -> None:
        """``setClientPassword``. Raises `DynsecError` as `execute`."""
        await self.command("setClientPassword", username=username, password=password)

    async def get_client(self, username: str) -> dict[str, Any]:
        """``getClient``: the client as the plugin stores it (``username``, ``roles``,
        ``groups``, ``disabled``, ...; no password). Raises `DynsecError` (`not_found`)."""
        data = await self.command("getClient", username=username)
        return dict(data.get("client") or {})

    async def list_clients(self) -> list[str]:
        """``listClients``: every user name. Raises `DynsecError` as `execute`."""
        data = await self.command("listClients")
        return [str(name) for name in data.get("clients") or []]

    async def add_client_role(
        self, username: str, rolename: str, *, priority: int | None = None
    ) -> None:
        """``addClientRole``: give a client a role (higher ``priority`` is checked first).
        Raises `DynsecError` as `execute`."""
        fields: dict[str, Any] = {"username": username, "rolename": rolename}
        if priority is not None:
            fields["priority"] = priority
        await self.command("addClientRole", **fields)

    async def remove_client_role(self, username: str, rolename: str) -> None:
        """``removeClientRole``. Raises `DynsecError` as `execute`."""
        await self.command("removeClientRole", username=username, rolename=rolename)

    # -- roles --------------------------------------------------------------------------

    async def create_role(
        self,
        rolename: str,
        acls: Iterable[Acl] = (),
        *,
        textname: str | None = None,
        textdescription: str | None = None,
    ) -> None:
        """``createRole`` with its ACLs.

        Raises
        ------
        DynsecError
            If the role exists (`DynsecError.exists`); see `execute`.
        """
        fields: dict[str, Any] = {"rolename": rolename, "acls": [acl.as_json() for acl in acls]}
        if textname is not None:
            fields["textname"] = textname
        if textdescription is not None:
            fields["textdescription"] = textdescription
        await self.command("createRole", **fields)

    async def delete_role(self, rolename: str) -> None:
        """``deleteRole`` (clients that had it lose it). Raises `DynsecError` as `execute`."""
        await self.command("deleteRole", rolename=rolename)

    async def get_role(self, rolename: str) -> dict[str, Any]:
        """``getRole``: ``rolename``, ``acls`` (as `Acl.as_json`), ``textname``, ... Raises
        `DynsecError` (`not_found`)."""
        data = await self.command("getRole", rolename=rolename)
        return dict(data.get("role") or {})

    async def role_acls(self, rolename: str) -> list[Acl]:
        """The ACLs of a role (``getRole``). Raises `DynsecError` (`not_found`), and
        ValueError if the plugin returns a malformed ACL."""
        role = await self.get_role(rolename)
        return [Acl.from_json(acl) for acl in role.get("acls") or []]

    async def add_role_acl(self, rolename: str, acl: Acl) -> None:
        """``addRoleACL``. Raises `DynsecError` as `execute`."""
        await self.command("addRoleACL", rolename=rolename, **acl.as_json())

    async def remove_role_acl(self, rolename: str, acltype: str, topic: str) -> None:
        """``removeRoleACL``. Raises `DynsecError` as `execute`."""
        await self.command("removeRoleACL", rolename=rolename, acltype=acltype, topic=topic)


def _responses(payload: object) -> list[dict[str, Any]]:
    """The answers in one message on `RESPONSE_TOPIC` (none if it is not the plugin's JSON)."""
    if not isinstance(payload, bytes | bytearray):
        return []
    try:
        document = json.loads(payload)
    except ValueError:
        return []
    answers = document.get("responses") if isinstance(document, dict) else None
    if not isinstance(answers, list):
        return []
    return [answer for answer in answers if isinstance(answer, dict)]
