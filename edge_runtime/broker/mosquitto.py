"""A private Mosquitto on the loopback interface: find the binary, pick a port, run it.

`LocalMosquitto` starts ``mosquitto`` (found by `find_mosquitto`) on ``127.0.0.1`` and a
free port (`free_port`), with the configuration `edge_runtime.broker.config.derive_config`
writes into its own temporary directory, waits until it serves, and stops it in order.
With ``dynsec=True`` it loads Mosquitto's dynamic security plugin (found by
`find_dynsec_plugin`) with an admin client whose password is drawn for the run.
Stdlib only.
"""

from __future__ import annotations

import errno
import os
import random
import re
import secrets
import shutil
import signal as _signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from edge_runtime.broker.config import (
    CONFIG_NAME,
    DYNSEC_CONFIG_NAME,
    DYNSEC_TEMPLATE_NAME,
    LOCAL_HOST,
    LOG_NAME,
    default_template,
    derive_config,
    dynsec_admin_config,
)
from edge_runtime.broker.dynsec import find_dynsec_plugin
from edge_runtime.broker.url import BrokerAddress, BrokerError

__all__ = [
    "DEFAULT_START_TIMEOUT_S",
    "DEFAULT_STOP_TIMEOUT_S",
    "DYNSEC_ADMIN_USER",
    "FREE_PORT_ATTEMPTS",
    "MOSQUITTO_FALLBACK_PATHS",
    "MOSQUITTO_NOT_FOUND",
    "PORT_RETRIES",
    "START_POLL_INTERVAL_S",
    "LocalMosquitto",
    "find_mosquitto",
    "free_port",
]

MOSQUITTO_FALLBACK_PATHS: tuple[str, ...] = ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto")
"""Where `find_mosquitto` looks when ``mosquitto`` is not on ``PATH`` (Debian puts it in
``/usr/sbin``, which is not on a normal user's ``PATH``)."""

MOSQUITTO_NOT_FOUND = (
    "mosquitto not found: install it with `sudo apt-get install mosquitto` "
    "(Debian/Raspberry Pi OS), or pass --broker mqtt://HOST:PORT"
)
"""Message of the `BrokerError` raised by `find_mosquitto`."""

DYNSEC_ADMIN_USER = "admin"
"""User name of the admin client of a `LocalMosquitto` with ``dynsec=True``."""

FREE_PORT_ATTEMPTS = 50
"""Random ports `free_port` tries before giving up."""

START_POLL_INTERVAL_S = 0.02
"""Seconds between TCP connection attempts while `LocalMosquitto.start` waits."""

PORT_RETRIES = 3
"""Fresh ports `LocalMosquitto.start` tries after the first when another process takes the
chosen port between `free_port` and Mosquitto's bind (a race)."""

DEFAULT_START_TIMEOUT_S = 5.0
"""Seconds `LocalMosquitto.start` waits for the port to accept TCP connections."""

DEFAULT_STOP_TIMEOUT_S = 5.0
"""Seconds `LocalMosquitto.stop` waits after SIGTERM (and again after SIGKILL)."""

_ADDRESS_IN_USE = "Address already in use"
_RUNNING = re.compile(r"mosquitto version \S+ running")


def find_mosquitto() -> str:
    """Path of the ``mosquitto`` executable.

    Looks on ``PATH`` first, then in `MOSQUITTO_FALLBACK_PATHS`.

    Raises
    ------
    BrokerError
        If none is found; the message is `MOSQUITTO_NOT_FOUND` (how to install it, or
        how to use another broker instead).
    """
    found = shutil.which("mosquitto")
    if found:
        return found
    for candidate in MOSQUITTO_FALLBACK_PATHS:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise BrokerError(MOSQUITTO_NOT_FOUND)


def free_port(host: str = LOCAL_HOST, low: int = 20000, high: int = 60000) -> int:
    """A TCP port in ``[low, high)`` that can be bound on ``host`` right now.

    Tries up to `FREE_PORT_ATTEMPTS` ports drawn at random (from the operating
    system's entropy, so parallel test workers with seeded ``random`` do not pick the
    same sequence). The port is released before returning, so another process may
    take it before the caller binds it; `LocalMosquitto.start` retries on that race.

    Parameters
    ----------
    host : str
        IPv4 or IPv6 address to bind, default ``"127.0.0.1"``.
    low, high : int
        Half-open port range, ``1 <= low < high <= 65536``.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        If the range is empty or outside 1-65535.
    BrokerError
        If no port in the range could be bound, or ``host`` cannot be bound at all.
    """
    if not 1 <= low < high <= 65536:
        raise ValueError(f"port range [{low}, {high}) must satisfy 1 <= low < high <= 65536")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    rng = random.SystemRandom()
    for _ in range(FREE_PORT_ATTEMPTS):
        port = rng.randrange(low, high)
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError as exc:
                if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    continue
                raise BrokerError(f"cannot bind a TCP port on {host!r}: {exc}") from exc
        return port
    raise BrokerError(
        f"no free TCP port on {host} in [{low}, {high}) after {FREE_PORT_ATTEMPTS} attempts"
    )


def _read_log(log_path: Path, offset: int) -> str:
    """What was written to ``log_path`` after byte ``offset`` ("" if it cannot be read)."""
    try:
        with log_path.open("rb") as fh:
            fh.seek(offset)
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _log_excerpt(log_path: Path, offset: int) -> str:
    """The error lines (else the last line) Mosquitto wrote to ``log_path`` after ``offset``.

    Timestamps are stripped. Mosquitto reports a configuration error in two lines
    (``Error: Unknown configuration variable "x".`` then ``Error found at FILE:LINE.``),
    so the last two error lines are quoted together.
    """
    lines = []
    for raw in _read_log(log_path, offset).splitlines():
        stamp, sep, rest = raw.partition(": ")
        line = (rest if sep and stamp.isdigit() else raw).strip()
        if line:
            lines.append(line)
    if not lines:
        return "(empty log)"
    errors = [line for line in lines if line.startswith("Error")]
    return " ".join(errors[-2:]) if errors else lines[-1]


def _accepts_tcp(host: str, port: int, timeout_s: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


class _PortTakenError(BrokerError):
    """Mosquitto exited because its port was taken (retry on another port)."""


class LocalMosquitto:
    """A private Mosquitto on ``127.0.0.1:<free port>`` with its own temporary directory.

    The configuration is `derive_config` applied to ``config`` (default: the packaged
    ``edge_runtime/resources/mosquitto.conf``, i.e. ``broker_config/mosquitto.conf``),
    written to ``<data_dir>/mosquitto.conf``. The persistence database and the log
    (Mosquitto's own and its stdout/stderr) go to ``data_dir`` as well.

    With ``dynsec=True`` the default template is ``broker_config/dynsec.conf``: Mosquitto
    loads the dynamic security plugin (`find_dynsec_plugin`) and refuses anonymous clients.
    The first `start` writes the plugin's file (`dynsec_config_path`, mode 0600) with one
    client, `admin_username` / `admin_password` (drawn from ``secrets``), who may administer
    the plugin (`edge_runtime.broker.dynsec`), publish and subscribe to everything
    (`edge_runtime.broker.config.dynsec_admin_config`). That template replaces client ids by
    user names: two connections as ``admin`` close each other (pass ``config``, e.g.
    ``broker_config/mosquitto.conf``, for a template without ``use_username_as_clientid``).

    The port is chosen at the first successful `start` and kept for the lifetime of
    the object, so clients reconnect to the same URL after a restart. `stop` removes
    ``data_dir`` unless ``keep_dir`` is true; with ``keep_dir`` a later `start` reuses
    the directory, hence the retained messages saved there (Mosquitto saves its
    database on a clean stop, every ``autosave_interval`` and on SIGUSR1).

    Mosquitto runs in its own session (``start_new_session=True``), so Ctrl-C in a
    terminal reaches only the Python process, which then stops the broker in order
    (in ``__exit__`` or a ``finally``).
    There is no ``__del__``: use it as a context manager or call `stop` in a
    ``finally``.

    Parameters
    ----------
    config : path, optional
        Template configuration (Mosquitto 2.0 syntax); see `derive_config`.
    executable : str, optional
        Mosquitto binary; default `find_mosquitto` at `start`.
    port : int, optional
        Fixed port instead of a free one (no retry on another port if it is taken).
    keep_dir : bool, default False
        Keep ``data_dir`` on `stop` (the caller removes it when done).
    dynsec : bool, default False
        Load the dynamic security plugin with an admin client (see above); False: anonymous
        clients, no plugin.
    dynsec_plugin : str, optional
        Path of ``mosquitto_dynamic_security.so``; default `find_dynsec_plugin` at `start`.

    Raises
    ------
    ValueError
        If ``port`` is not in 1-65535, or ``dynsec_plugin`` is given without ``dynsec``.

    Attributes
    ----------
    host : str
        ``"127.0.0.1"``.
    port : int or None
        Listener port; None until the first `start`.
    keep_dir : bool
    admin_username, admin_password : str or None
        The dynamic security admin's credentials (`DYNSEC_ADMIN_USER` and a random
        password); None without ``dynsec``.

    Examples
    --------
    >>> with LocalMosquitto() as broker:  # doctest: +SKIP
    ...     print(broker.url)
    mqtt://127.0.0.1:43127
    """

    def __init__(
        self,
        config: str | os.PathLike[str] | None = None,
        *,
        executable: str | None = None,
        port: int | None = None,
        keep_dir: bool = False,
        dynsec: bool = False,
        dynsec_plugin: str | None = None,
    ) -> None:
        if port is not None and not 1 <= port <= 65535:
            raise ValueError(f"port must be in 1-65535, got {port}")
        if dynsec_plugin is not None and not dynsec:
            raise ValueError("dynsec_plugin needs dynsec=True")
        self.host: str = LOCAL_HOST
        self.port: int | None = port
        self.keep_dir: bool = keep_dir
        self.dynsec: bool = dynsec
        self.admin_username: str | None = DYNSEC_ADMIN_USER if dynsec else None
        self.admin_password: str | None = secrets.token_urlsafe(24) if dynsec else None
        self._dynsec_plugin = dynsec_plugin
        self._config = None if config is None else Path(config)
        self._executable = executable
        self._proc: subprocess.Popen[bytes] | None = None
        self._data_dir: Path | None = None

    # -- state -------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """Process id of the broker; None when not started or after `stop`."""
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        """True while the broker process exists and has not exited (a SIGSTOPped one counts)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def url(self) -> str:
        """``"mqtt://127.0.0.1:<port>"``.

        Raises
        ------
        BrokerError
            Before the first `start` (no port yet).
        """
        return self.address.url

    @property
    def address(self) -> BrokerAddress:
        """The listener as a `BrokerAddress` (no TLS). Raises `BrokerError` before `start`."""
        if self.port is None:
            raise BrokerError("LocalMosquitto has no port yet: call start() first")
        return BrokerAddress(self.host, self.port, tls=False)

    @property
    def data_dir(self) -> Path | None:
        """The temporary directory (config, database, log); None when there is none."""
        return self._data_dir

    @property
    def log_path(self) -> Path | None:
        """``<data_dir>/mosquitto.log``; None when there is no directory."""
        return None if self._data_dir is None else self._data_dir / LOG_NAME

    @property
    def config_path(self) -> Path | None:
        """``<data_dir>/mosquitto.conf`` (the derived config); None when there is no directory."""
        return None if self._data_dir is None else self._data_dir / CONFIG_NAME

    @property
    def dynsec_config_path(self) -> Path | None:
        """``<data_dir>/dynamic-security.json`` (the plugin's file); None without ``dynsec``
        or without a directory."""
        if not self.dynsec or self._data_dir is None:
            return None
        return self._data_dir / DYNSEC_CONFIG_NAME

    def __repr__(self) -> str:
        where = "no port" if self.port is None else self.url
        dynsec = ", dynsec" if self.dynsec else ""
        return f"LocalMosquitto({where}, pid={self.pid}, running={self.running}{dynsec})"

    # -- lifecycle -----------------------------------------------------------

    def start(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> None:
        """Start Mosquitto and wait until its port accepts TCP connections.

        Polls every `START_POLL_INTERVAL_S` for at most ``timeout_s`` seconds (per
        attempt) until the port accepts a TCP connection *and* Mosquitto has logged
        ``mosquitto version X running`` (written once all its listeners are open, so a
        foreign process listening on the port is not mistaken for the broker). When no
        port was fixed and Mosquitto exits because another process took the port,
        retries on a fresh port up to `PORT_RETRIES` times. On any failure, or an
        interruption such as Ctrl-C, the process just started is killed.

        Raises
        ------
        BrokerError
            If it is already running, Mosquitto (or, with ``dynsec``, its dynamic security
            plugin) is not found, the template cannot be read, or Mosquitto exits or does
            not accept connections within ``timeout_s``; the message quotes the relevant
            log line.
        """
        if self.running:
            raise BrokerError(f"Mosquitto is already running (pid {self.pid}) on {self.url}")
        if self._proc is not None:
            # Exited (crashed or killed) since the last start: reap it first.
            self._proc.wait()
            self._proc = None
        executable = self._executable or find_mosquitto()
        plugin = None
        if self.dynsec:
            plugin = self._dynsec_plugin or find_dynsec_plugin(executable)
        template = self._read_template()
        created_dir = self._data_dir is None
        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="edge-mosquitto-"))
        try:
            if plugin is not None:
                self._write_dynsec_file()
            self._start_on_some_port(executable, template, timeout_s, plugin)
        except BaseException:
            if created_dir and not self.keep_dir:
                shutil.rmtree(self._data_dir, ignore_errors=True)
                self._data_dir = None
            raise

    def _write_dynsec_file(self) -> None:
        """Write the plugin's file with the admin client, unless an earlier start did (the
        plugin keeps the clients and roles made since in it)."""
        path = self.dynsec_config_path
        if path is None or path.exists():
            return
        assert self.admin_username is not None and self.admin_password is not None
        text = dynsec_admin_config(self.admin_username, self.admin_password, salt=os.urandom(12))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)

    def _read_template(self) -> str:
        if self._config is None:
            return default_template(DYNSEC_TEMPLATE_NAME if self.dynsec else CONFIG_NAME)
        try:
            return self._config.read_text(encoding="utf-8")
        except OSError as exc:
            raise BrokerError(f"cannot read Mosquitto config {self._config}: {exc}") from exc

    def _start_on_some_port(
        self, executable: str, template: str, timeout_s: float, plugin: str | None
    ) -> None:
        if self.port is not None:
            self._launch(executable, template, self.port, timeout_s, plugin)
            return
        for attempt in range(PORT_RETRIES + 1):
            port = free_port(self.host)
            try:
                self._launch(executable, template, port, timeout_s, plugin)
            except _PortTakenError:
                if attempt == PORT_RETRIES:
                    raise
                continue
            self.port = port
            return

    def _launch(
        self, executable: str, template: str, port: int, timeout_s: float, plugin: str | None
    ) -> None:
        if self._data_dir is None:
            raise BrokerError("LocalMosquitto has no directory (internal error)")
        config_path = self._data_dir / CONFIG_NAME
        log_path = self._data_dir / LOG_NAME
        config_path.write_text(
            derive_config(template, port=port, data_dir=self._data_dir, dynsec_plugin=plugin)
        )
        offset = log_path.stat().st_size if log_path.exists() else 0
        with log_path.open("ab") as log:
            try:
                proc = subprocess.Popen(
                    [executable, "-c", str(config_path)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            except OSError as exc:
                raise BrokerError(f"cannot run Mosquitto {executable!r}: {exc}") from exc
        try:
            self._wait_until_running(proc, port, timeout_s, log_path, offset)
        except BaseException:
            # Failed, timed out or interrupted (Ctrl-C): leave no broker behind.
            if proc.poll() is None:
                proc.kill()
            proc.wait(DEFAULT_STOP_TIMEOUT_S)
            raise
        self._proc = proc

    def _wait_until_running(
        self,
        proc: subprocess.Popen[bytes],
        port: int,
        timeout_s: float,
        log_path: Path,
        offset: int,
    ) -> None:
        config_path = log_path.with_name(CONFIG_NAME)
        deadline = time.monotonic() + timeout_s
        while True:
            returncode = proc.poll()
            if returncode is not None:
                excerpt = _log_excerpt(log_path, offset)
                kind = _PortTakenError if _ADDRESS_IN_USE in excerpt else BrokerError
                raise kind(
                    f"Mosquitto exited with code {returncode} while starting on "
                    f"{self.host}:{port}: {excerpt} (config {config_path})"
                )
            remaining = deadline - time.monotonic()
            # The port accepting a connection is not enough: another process may listen
            # on it while Mosquitto fails to bind and exits. Mosquitto logs its "running"
            # line only after all its listeners are open.
            if (
                _accepts_tcp(self.host, port, max(0.05, min(0.5, remaining)))
                and _RUNNING.search(_read_log(log_path, offset))
                and proc.poll() is None
            ):
                return
            if remaining <= 0:
                raise BrokerError(
                    f"Mosquitto did not start listening on {self.host}:{port} within "
                    f"{timeout_s} s: {_log_excerpt(log_path, offset)} (config {config_path})"
                )
            time.sleep(START_POLL_INTERVAL_S)

    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        """Stop Mosquitto: SIGTERM (plus SIGCONT, in case it was SIGSTOPped), then SIGKILL.

        Waits up to ``timeout_s`` seconds after SIGTERM, during which Mosquitto saves
        its database, then sends SIGKILL and waits up to ``timeout_s`` again. Removes
        ``data_dir`` unless ``keep_dir`` is true. Idempotent: stopping a stopped or
        never started broker does nothing (an exited one is just reaped).

        Raises
        ------
        BrokerError
            If the process survives SIGKILL for ``timeout_s`` seconds.
        """
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(_signal.SIGTERM)
                proc.send_signal(_signal.SIGCONT)
                try:
                    proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    try:
                        proc.wait(timeout_s)
                    except subprocess.TimeoutExpired:
                        raise BrokerError(
                            f"Mosquitto (pid {proc.pid}) still runs {timeout_s} s after SIGKILL"
                        ) from None
            self._proc = None
        if self._data_dir is not None and not self.keep_dir:
            shutil.rmtree(self._data_dir)
            self._data_dir = None

    def signal(self, sig: int) -> None:
        """Send signal ``sig`` to the broker process (fault injection: SIGKILL, SIGSTOP, ...).

        Raises
        ------
        BrokerError
            If the broker is not running.
        """
        if self._proc is None or self._proc.poll() is not None:
            raise BrokerError(f"cannot send signal {sig}: Mosquitto is not running")
        self._proc.send_signal(sig)

    def __enter__(self) -> LocalMosquitto:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
