"""The command line's inputs made real: the data table, the broker settings (address,
credentials, TLS) and the Home Assistant discovery prefix, each checked up front so that
a bad one is one line (`CliError`) before anything connects.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from edge_runtime.broker import parse_broker_url
from edge_runtime.cli import CliError
from edge_runtime.settings import (
    ENV_PASSWORD,
    ENV_PASSWORD_FILE,
    ENV_USERNAME,
    AgentSettings,
    read_password_file,
)
from edge_runtime.topology import Topology

__all__ = [
    "broker_settings",
    "discovery_prefix",
    "load_data",
    "login_refused",
    "login_refused_line",
    "warn_narrow_data",
]


def load_data(topology: Topology, path: Path | None) -> np.ndarray:
    """The readings to replay: ``--data PATH``, else the dataset the topology names.

    Parameters
    ----------
    topology : Topology
    path : Path or None
        ``--data``; None for the topology's ``[data]`` dataset.

    Returns
    -------
    ndarray of shape (n_samples, n_features), float64
        As `edge_runtime.datasets.load_dataset` reads it (rows are samples).

    Raises
    ------
    CliError
        If ``path`` is None and the topology names no dataset.
    DatasetError
        If the file or dataset is missing or malformed (`main` prints it in one line).
    """
    from edge_runtime.datasets import load_dataset  # here: ``agent`` needs no data

    if path is not None:
        return load_dataset(path)
    source = topology.dataset_path() or topology.dataset
    if source is None:
        raise CliError(f"topology {topology.name!r} names no dataset; pass --data PATH")
    return load_dataset(source)


def warn_narrow_data(topology: Topology, data: np.ndarray) -> None:
    """One line on stderr when the data has fewer columns than a node's configured rank:
    the subspaces then have at most that many directions.

    Parameters
    ----------
    topology : Topology
    data : ndarray of shape (n_samples, n_features)
        Anything else (not 2-D) is left to the run to refuse.
    """
    if data.ndim != 2:
        return
    width = int(data.shape[1])
    rank = max(node.rank for node in topology.nodes.values())
    if width < rank:
        print(
            f"edge-runtime: warning: the data has {width} columns, fewer than the rank {rank} "
            f"of topology {topology.name!r}: the model will have rank at most {width}",
            file=sys.stderr,
        )


def broker_settings(url: str, args: argparse.Namespace) -> AgentSettings:
    """Broker address, credentials (flags, else the environment) and TLS files.

    Parameters
    ----------
    url : str
        ``mqtt://HOST[:PORT]`` or ``mqtts://HOST[:PORT]``.
    args : argparse.Namespace
        With ``username``, ``password_file``, ``ca_file``, ``cert_file`` and ``key_file``
        (None when not given); the environment (``EDGE_MQTT_USERNAME``,
        ``EDGE_MQTT_PASSWORD``, ``EDGE_MQTT_PASSWORD_FILE``) fills the credentials the
        flags leave out.

    Returns
    -------
    AgentSettings
        Whose TLS context was built once, so unreadable certificates fail here.

    Raises
    ------
    CliError
        If ``mqtts://`` comes without ``--ca-file``, a named file does not exist, or the
        password (file or environment) is unusable.
    BrokerError
        If ``url`` is not a broker URL.
    ssl.SSLError, OSError
        If a certificate or key cannot be loaded (`main` prints them in one line).
    """
    address = parse_broker_url(url)
    if address.tls and args.ca_file is None:
        raise CliError(f"{url!r} asks for TLS: give the broker's CA certificate with --ca-file")
    for flag in ("ca_file", "cert_file", "key_file", "password_file"):
        path = getattr(args, flag)
        if path is not None and not path.is_file():
            raise CliError(f"--{flag.replace('_', '-')} {str(path)!r}: no such file")
    password = None
    if args.password_file is not None:
        try:
            password = read_password_file(args.password_file)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    try:
        settings = AgentSettings(
            host=address.host,
            port=address.port,
            username=args.username,
            password=password,
            ca_file=args.ca_file,
            cert_file=args.cert_file,
            key_file=args.key_file,
        ).with_credentials_from_env()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"{ENV_PASSWORD_FILE}: {exc.strerror}: {exc.filename!r}") from None
    settings.tls_context()  # fail now, in one line, on unreadable certificates
    return settings


def discovery_prefix(args: argparse.Namespace, topology: Topology) -> str:
    """``--discovery-prefix``, checked (one line on a bad prefix).

    Raises
    ------
    CliError
        If Home Assistant discovery topics cannot be built under the prefix.
    """
    from edge_runtime.homeassistant import discovery_messages  # here: with discovery only

    try:
        discovery_messages(topology, discovery_prefix=args.discovery_prefix, node_ids=[])
    except ValueError as exc:
        raise CliError(f"--discovery-prefix: {exc}") from None
    return str(args.discovery_prefix)


def login_refused(error: BaseException | str | None) -> bool:
    """Whether a connection error is the broker refusing the login
    (`edge_runtime.monitor.login_refused`, imported when called: ``edge-runtime agent`` does
    not load the monitor).

    Parameters
    ----------
    error : BaseException, str or None
        An ``aiomqtt`` error, or its text (an agent keeps only ``str(error)``).
    """
    from edge_runtime.monitor import login_refused as refused

    return refused(error)


def login_refused_line(url: str, args: argparse.Namespace, error: BaseException | str) -> str:
    """One line for a login the broker refused, naming the user and where its password
    came from (flag, environment or file), never the password itself.

    Parameters
    ----------
    url : str
        The ``--broker`` URL.
    args : argparse.Namespace
        The command's ``username`` and ``password_file`` (None when not given); the
        environment (``EDGE_MQTT_USERNAME``, ``EDGE_MQTT_PASSWORD``,
        ``EDGE_MQTT_PASSWORD_FILE``) as `broker_settings` reads it.
    error : BaseException or str
        What the broker answered, quoted at the end.
    """
    command = getattr(args, "command", None) or "COMMAND"
    user = getattr(args, "username", None) or os.environ.get(ENV_USERNAME) or None
    password_file = getattr(args, "password_file", None)
    if password_file is not None:
        source: str | None = f"--password-file {str(password_file)!r}"
    elif os.environ.get(ENV_PASSWORD):
        source = f"${ENV_PASSWORD}"
    elif os.environ.get(ENV_PASSWORD_FILE):
        source = f"{os.environ[ENV_PASSWORD_FILE]!r} (${ENV_PASSWORD_FILE})"
    else:
        source = None
    if user is None:
        suggested = _suggested_user(args)
        return (
            f"the broker at {url} refused a login without a user name ({error}): it requires "
            f"credentials; pass --username USER --password-file FILE (or set ${ENV_USERNAME} "
            f"and ${ENV_PASSWORD_FILE}), e.g. edge-runtime {command} ... --username "
            f"{suggested} --password-file {suggested}.password"
        )
    if source is None:
        return (
            f"the broker at {url} refused user {user!r}, who gave no password ({error}): "
            f"pass --password-file FILE (or set ${ENV_PASSWORD_FILE})"
        )
    return (
        f"the broker at {url} refused user {user!r} with the password from {source} "
        f"({error}): a wrong password, or no user {user!r} in the broker's password_file "
        "(mosquitto_passwd; then reload Mosquitto)"
    )


def _suggested_user(args: argparse.Namespace) -> str:
    """The user devices/INSTALL.md creates for a command (an agent's is its node id)."""
    command = getattr(args, "command", None)
    if command == "agent":
        return str(getattr(args, "node", None) or "NODE")
    return command if command in ("replay", "watch", "dashboard") else "USER"
