#!/usr/bin/env python3
"""Run devices/INSTALL.md's commands in order, on a clean sandbox, and report each block.

Usage (as root on Debian with Mosquitto and python3-venv installed, from any folder):

    python3 scripts/check_install.py [--keep] [--timeout SECONDS] [--doc PATH]

Every fenced ``sh`` block of INSTALL.md carries a marker, an HTML comment on the line
before it (blank lines may separate them), so that the document and this check cannot
drift apart: an unmarked ``sh`` block is an error.

- ``<!-- check-install: settings -->``: the variables of step 0 (``NODES``, ``BROKER``);
  replaced by the check's own (every node of the topology on this machine, the broker on
  a free loopback port).
- ``<!-- check-install: run -->``: run as is, in the device's folder (where step 1 copied
  the files); ``run in repository``: in the repository (step 1).
- ``<!-- check-install: dashboard -->``: a command that serves until stopped (the
  dashboard): run in the background, ``/state.json`` read until every node is online and
  the broker accepted the login, then stopped by its pid.
- ``<!-- check-install: skip REASON -->``: not run here (32-bit, TLS, journald, ...).

The blocks run in one ``bash`` (``set -euo pipefail``), so variables and the current folder
carry over as on a terminal. What cannot be real on a shared test machine is redirected:

- every path below ``/opt/edge-runtime``, ``/etc/edge-runtime``, ``/etc/mosquitto``,
  ``/etc/systemd/system``, ``/var/lib/edge-runtime``, ``/var/lib/mosquitto`` and
  ``/var/log/mosquitto`` is moved below a temporary sandbox folder (in the blocks, and in
  the unit and Mosquitto files they install);
- ``sudo`` runs the command (the check runs as root); ``apt-get`` only checks that the
  packages are installed (no network; a missing one is a warning: the commands that need it
  fail); ``scp`` copies into the device's folder;
- ``systemctl restart mosquitto`` starts Mosquitto from a Debian-like main file that
  includes the sandbox's ``conf.d``, with every ``listener 1883`` moved to a free port
  above 20000 on 127.0.0.1 (the system's own Mosquitto and port 1883 are never touched);
- ``systemctl enable --now edge-runtime-agent@NODE`` starts the agent as the unit's
  ``ExecStart=`` would: its ``Environment=`` and ``EnvironmentFile=`` lines (drop-ins
  included), ``LoadCredential=`` copied to a private credentials folder, the
  ``StateDirectory=`` created for ``User=``, specifiers and ``$VAR`` / ``${VAR}``
  expanded as systemd does, and the process run as ``User=``/``Group=``;
  ``systemctl is-active`` says whether it still runs.

``adduser --system`` is real: the service user ``edge`` is created on this machine (it is a
system user without a home or login; running it again changes nothing). Only 127.0.0.1 is
contacted, except by pip, which uses this machine's configuration (``PIP_INDEX_URL``, ...:
``tests/test_install_doc.py`` points it at a local index when the machine has one).

Every process the check starts (the shell, Mosquitto, the agents, the dashboard) is
stopped by its pid at the end, and the sandbox removed (``--keep`` keeps it). The whole run
is bounded by ``--timeout`` (default 900 s). Exit 0 when every block ran and the checks
passed; 1 otherwise, naming the block (its line in INSTALL.md) and the agents' logs.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "devices" / "INSTALL.md"
MARKER = re.compile(r"<!--\s*check-install:\s*(.*?)\s*-->")
SANDBOXED = (
    "/opt/edge-runtime",
    "/etc/edge-runtime",
    "/etc/mosquitto",
    "/etc/systemd/system",
    "/var/lib/edge-runtime",
    "/var/lib/mosquitto",
    "/var/log/mosquitto",
)
_PATHS = re.compile(
    r"(?<![\w./])(" + "|".join(re.escape(p) for p in SANDBOXED) + r")(?=[/\s'\"]|$)"
)
UNIT_NAME = "edge-runtime-agent@.service"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STOP_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Block:
    """One fenced ``sh`` block of the document."""

    line: int  # of the opening fence, 1-based
    kind: str  # settings, run, run in repository, dashboard, skip
    reason: str  # for skip
    body: str


def parse_blocks(text: str) -> list[Block]:
    """The ``sh`` blocks of ``text`` with their markers, in order.

    Raises
    ------
    ValueError
        If a ``sh`` block has no marker, or an unknown one.
    """
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```sh":
            i += 1
            continue
        start = i
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        found = MARKER.fullmatch(lines[j].strip()) if j >= 0 else None
        if found is None:
            raise ValueError(f"line {start + 1}: a sh block without a check-install marker")
        marker = found.group(1)
        kind, _, reason = marker.partition(" ")
        if marker in ("settings", "run", "run in repository", "dashboard"):
            kind, reason = marker, ""
        elif kind != "skip" or not reason:
            raise ValueError(f"line {j + 1}: unknown marker {marker!r} (skip needs a reason)")
        end = start + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"line {start + 1}: unclosed block")
        blocks.append(Block(start + 1, kind, reason, "\n".join(lines[start + 1 : end])))
        i = end + 1
    return blocks


def sandboxed(text: str, root: Path) -> str:
    """``text`` with every path below `SANDBOXED` moved below ``root``."""
    return _PATHS.sub(lambda m: f"{root}{m.group(1)}", text)


def free_port() -> int:
    """A loopback port above 20000 that nothing listens on (bound, then released)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port > 20000:
            return int(port)
    raise RuntimeError("no free loopback port above 20000")


# ----------------------------------------------------------------- the sandbox's state
class Sandbox:
    """The temporary tree, the processes started in it (``pids``: name and pid per line)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.device = root / "device"
        self.logs = root / "log"
        self.pids = root / "pids"
        self.config = root / "check.json"

    @classmethod
    def create(cls, port: int, dashboard_port: int) -> Sandbox:
        root = Path(tempfile.mkdtemp(prefix="check-install-"))
        root.chmod(0o755)  # the agents' user and Mosquitto's traverse it
        box = cls(root)
        for sub in (
            "device",
            "log",
            "opt",
            "etc/mosquitto/conf.d",
            "etc/systemd/system",
            "var/lib",
            "var/log/mosquitto",
            "var/lib/mosquitto",
            "run/credentials",
        ):
            (root / sub).mkdir(parents=True, exist_ok=True)
            (root / sub).chmod(0o755)
        (box.logs).chmod(0o700)
        for sub in ("var/log/mosquitto", "var/lib/mosquitto"):
            with contextlib.suppress(KeyError, PermissionError):
                shutil.chown(root / sub, "mosquitto", "mosquitto")
        box.config.write_text(json.dumps({"port": port, "dashboard_port": dashboard_port}))
        box.pids.write_text("")
        return box

    def settings(self) -> dict[str, int]:
        return json.loads(self.config.read_text())  # type: ignore[no-any-return]

    def record(self, name: str, pid: int) -> None:
        with self.pids.open("a") as f:
            f.write(f"{name} {pid}\n")

    def processes(self) -> dict[str, int]:
        """The latest pid recorded under each name."""
        out: dict[str, int] = {}
        for line in self.pids.read_text().splitlines():
            name, _, pid = line.partition(" ")
            out[name] = int(pid)
        return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def stop_pid(pid: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM ``pid``, then SIGKILL after ``timeout_s``; reaps it when it is our child."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        reap()
        time.sleep(0.1)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    reap()


def reap() -> None:
    """Collect exited children (orphans come to us: we are a child subreaper)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


# -------------------------------------------------------------------------- systemctl
def parse_unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """Sections of a unit file, (key, value) in order; continuation lines joined."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith(("#", ";"))):
            continue
        if line.endswith("\\"):
            logical += line[:-1].rstrip() + " "
            continue
        line, logical = logical + line, ""
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        key, sep, value = line.partition("=")
        if not sep or current is None:
            raise ValueError(f"not a unit file line: {raw!r}")
        current.append((key.strip(), value.strip()))
    return sections


def env_file(path: Path) -> dict[str, str]:
    """A systemd EnvironmentFile: VAR=value lines, # and ; comments, optional quotes."""
    out: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        name, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[name.strip()] = value
    return out


def expand_exec(command: str, env: dict[str, str]) -> list[str]:
    """ExecStart= as systemd runs it: words split first; a word ``$VAR`` becomes the
    value's words (none when empty), ``${VAR}`` and ``$VAR`` inside a word the value."""
    argv: list[str] = []
    for word in shlex.split(command):
        whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if whole:
            argv += env.get(whole.group(1), "").split()
            continue
        argv.append(
            re.sub(
                r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)",
                lambda m: env.get(m.group(1) or m.group(2), ""),
                word,
            )
        )
    return argv


def specifiers(value: str, instance: str, credentials: Path) -> str:
    def one(m: re.Match[str]) -> str:
        spec = m.group(1)
        if spec in "iI":
            return instance
        if spec == "d":
            return str(credentials)
        if spec == "%":
            return "%"
        raise ValueError(f"specifier %{spec} is not emulated by the check")

    return re.sub(r"%(.)", one, value)


def start_agent(box: Sandbox, instance: str) -> int:
    """Start ``edge-runtime-agent@<instance>`` as its ExecStart would; returns the pid."""
    unit_dir = box.root / "etc/systemd/system"
    files = [unit_dir / UNIT_NAME]
    for d in (unit_dir / f"{UNIT_NAME}.d", unit_dir / f"edge-runtime-agent@{instance}.service.d"):
        if d.is_dir():
            files += sorted(d.glob("*.conf"))
    if not files[0].is_file():
        raise SystemExit(f"Unit {UNIT_NAME} not found (was it installed?)")
    entries: list[tuple[str, str]] = []
    for path in files:
        entries += parse_unit(sandboxed(path.read_text(), box.root)).get("Service", [])
    unit = f"edge-runtime-agent@{instance}.service"
    credentials = box.root / "run/credentials" / unit
    assigned: dict[str, str] = {}
    env_files: list[str] = []
    loads: list[str] = []
    exec_start = ""
    user = group = None
    state_dirs: list[str] = []
    state_mode = 0o755
    for key, raw in entries:
        value = specifiers(raw, instance, credentials)
        if key == "Environment":
            if not value:
                assigned.clear()
            for word in shlex.split(value):
                name, _, val = word.partition("=")
                assigned[name] = val
        elif key == "EnvironmentFile":
            env_files = [] if not value else [*env_files, value]
        elif key == "LoadCredential":
            loads = [] if not value else [*loads, value]
        elif key == "ExecStart":
            exec_start = value
        elif key == "User":
            user = value
        elif key == "Group":
            group = value
        elif key == "StateDirectory":
            state_dirs = [] if not value else [*state_dirs, *value.split()]
        elif key == "StateDirectoryMode":
            state_mode = int(value, 8)
    as_root = os.geteuid() == 0
    env = {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8"} | assigned
    for spec in env_files:  # EnvironmentFile= wins over Environment=
        optional = spec.startswith("-")
        path = Path(spec.lstrip("-"))
        if not path.is_file():
            if optional:
                continue
            raise SystemExit(f"{unit}: EnvironmentFile {path} not found: the unit would not start")
        env |= {k: sandboxed(v, box.root) for k, v in env_file(path).items()}
    if loads:
        credentials.mkdir(parents=True, exist_ok=True)
        credentials.chmod(0o500)
        for load in loads:
            name, _, source = load.partition(":")
            src = Path(source)
            if not src.is_file():
                raise SystemExit(
                    f"{unit}: LoadCredential {src} not found: the unit would not start"
                )
            target = credentials / name
            shutil.copyfile(src, target)
            target.chmod(0o400)
            if as_root and user:
                shutil.chown(target, user, group or user)
        if as_root and user:
            shutil.chown(credentials, user, group or user)
        env["CREDENTIALS_DIRECTORY"] = str(credentials)
    state_paths = []
    for sub in state_dirs:
        path = box.root / "var/lib" / sub
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(exist_ok=True)
        path.chmod(state_mode)
        if as_root and user:
            shutil.chown(path, user, group or user)
        state_paths.append(str(path))
    if state_paths:
        env["STATE_DIRECTORY"] = ":".join(state_paths)
    argv = expand_exec(exec_start, env)
    if as_root and user:
        argv = ["setpriv", f"--reuid={user}", f"--regid={group or user}", "--init-groups", *argv]
    log = (box.logs / f"{instance}.log").open("ab")
    proc = subprocess.Popen(
        argv, env=env, cwd="/", stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        start_new_session=True,
    )  # fmt: skip
    box.record(f"agent@{instance}", proc.pid)
    print(f"check-install: started {unit} (pid {proc.pid}): {shlex.join(argv)}", file=sys.stderr)
    return proc.pid


def start_mosquitto(box: Sandbox) -> int:
    """Mosquitto from a Debian-like main file including the sandbox's conf.d, each
    ``listener 1883`` moved to the check's loopback port."""
    port = box.settings()["port"]
    old = box.processes().get("mosquitto")
    if old is not None:
        stop_pid(old)
    conf_d = box.root / "etc/mosquitto/conf.d"
    for path in conf_d.glob("*.conf"):
        text = sandboxed(path.read_text(), box.root)
        text = re.sub(r"(?m)^listener\s+1883(\s+\S+)?\s*$", f"listener {port} 127.0.0.1", text)
        if re.search(rf"(?m)^listener\s+(?!{port}\b)", text):
            raise SystemExit(f"{path.name}: a listener other than 1883: not checked here")
        path.write_text(text)
    main = box.root / "etc/mosquitto/mosquitto.conf"
    main.write_text(
        "# as Debian's /etc/mosquitto/mosquitto.conf, in the sandbox\n"
        f"persistence true\npersistence_location {box.root}/var/lib/mosquitto/\n"
        f"log_dest file {box.root}/var/log/mosquitto/mosquitto.log\n"
        f"include_dir {conf_d}\n"
    )
    log = (box.logs / "mosquitto.out").open("ab")
    proc = subprocess.Popen(
        ["mosquitto", "-c", str(main)], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        start_new_session=True,
    )  # fmt: skip
    box.record("mosquitto", proc.pid)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"mosquitto exited with {proc.returncode}: {tail(box, 'mosquitto')}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc.pid
        time.sleep(0.1)
    raise SystemExit(f"mosquitto does not listen on 127.0.0.1:{port} after 15 s")


def tail(box: Sandbox, name: str, lines: int = 15) -> str:
    found = []
    for path in (
        box.logs / f"{name}.log",
        box.logs / f"{name}.out",
        box.root / "var/log/mosquitto/mosquitto.log",
    ):
        if path.is_file() and (name != "mosquitto") == (path.parent == box.logs):
            found += path.read_text(errors="replace").splitlines()[-lines:]
    return "\n".join(found)


def wait_connected(box: Sandbox, instance: str, pid: int, timeout_s: float = 30.0) -> bool:
    """Whether the agent runs, once it logged ``connected`` (or ``timeout_s`` passed): a
    start that fails at once (a bad option, an unreadable file) is seen failing."""
    log = box.logs / f"{instance}.log"
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        if log.is_file() and '"connected"' in log.read_text(errors="replace"):
            return True
        time.sleep(0.2)
    return alive(pid)


def systemctl(box: Sandbox, args: list[str]) -> int:
    """The systemctl verbs INSTALL.md uses, on the sandbox."""
    words = [a for a in args if not a.startswith("-")]
    verb, names = words[0], words[1:]
    if verb == "daemon-reload":
        return 0
    status = 0
    for name in names:
        name = name.removesuffix(".service")
        if name == "mosquitto":
            if verb in ("restart", "start", "enable"):
                start_mosquitto(box)
            elif verb == "reload":
                os.kill(box.processes()["mosquitto"], signal.SIGHUP)
            continue
        instance = name.removeprefix("edge-runtime-agent@")
        if instance == name:
            raise SystemExit(f"systemctl {verb} {name}: not emulated by the check")
        pid = box.processes().get(f"agent@{instance}")
        if verb in ("start", "restart") or (verb == "enable" and "--now" in args):
            if pid is not None and alive(pid):
                if verb != "restart":
                    continue
                stop_pid(pid)
            start_agent(box, instance)
        elif verb == "stop":
            if pid is not None:
                stop_pid(pid)
        elif verb in ("is-active", "status"):
            running = pid is not None and wait_connected(box, instance, pid)
            print("active" if running else "failed")
            if not running:
                print(tail(box, instance), file=sys.stderr)
                status = 3
        elif verb != "enable":
            raise SystemExit(f"systemctl {verb}: not emulated by the check")
    return status


def probe_dashboard(box: Sandbox, pid: int, n_nodes: int, timeout_s: float = 90.0) -> int:
    """Read the dashboard's /state.json until every node is online (0) or time runs out."""
    port = box.settings()["dashboard_port"]
    deadline = time.monotonic() + timeout_s
    last: object = "no answer"
    while time.monotonic() < deadline:
        if not alive(pid):
            print(f"check-install: the dashboard exited: {tail(box, 'dashboard')}", file=sys.stderr)
            return 1
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/state.json", timeout=5) as r:
                state = json.load(r)
        except OSError as exc:
            last = str(exc)
        else:
            last = {k: state.get(k) for k in ("connected", "counts", "broker_error")}
            if state.get("broker_error"):
                print(f"check-install: dashboard: {state['broker_error']}", file=sys.stderr)
                return 1
            if state.get("connected") and state["counts"].get("online") == n_nodes:
                print(f"check-install: dashboard: {n_nodes} of {n_nodes} nodes online")
                return 0
        time.sleep(0.5)
    print(
        f"check-install: dashboard: not every node online after {timeout_s:g} s: {last}",
        file=sys.stderr,
    )
    return 1


# ------------------------------------------------------------------------- the script
def preamble(box: Sandbox) -> str:
    me = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).resolve()))}"
    helper = f"{me} --helper {shlex.quote(str(box.root))}"
    return f"""set -euo pipefail
export PATH={SYSTEM_PATH}:$PATH
sudo() {{ "$@"; }}
systemctl() {{ {helper} systemctl "$@"; }}
journalctl() {{ :; }}
scp() {{
  local n=$(( $# - 1 ))
  cp -r "${{@:1:$n}}" {shlex.quote(str(box.device))}/
}}
apt-get() {{
  local pkg
  for pkg in "$@"; do
    case "$pkg" in -*|install|update) continue ;; esac
    dpkg -s "$pkg" > /dev/null 2>&1 \\
      || echo "check-install: warning: Debian package $pkg is not installed (not needed below?)" >&2
  done
}}
"""


def build_script(box: Sandbox, blocks: list[Block], nodes: list[str]) -> str:
    settings = box.settings()
    parts = [preamble(box)]
    for block in blocks:
        body = sandboxed(block.body, box.root)
        where = f"INSTALL.md line {block.line}"
        parts.append(f"echo {shlex.quote(f'check-install: {where} ({block.kind})')} >&2")
        if block.kind == "skip":
            continue
        if block.kind == "settings":
            names = set(re.findall(r"(?m)^([A-Z_]+)=", block.body))
            if names != {"NODES", "BROKER"}:
                raise SystemExit(f"{where}: the settings block sets {sorted(names)}")
            parts.append(f"NODES={shlex.quote(' '.join(nodes))}")
            parts.append(f"BROKER=mqtt://127.0.0.1:{settings['port']}")
        elif block.kind == "run":
            parts.append(f"cd {shlex.quote(str(box.device))}\n{body}")
        elif block.kind == "run in repository":
            parts.append(f"cd {shlex.quote(str(ROOT))}\n{body}\ncd {shlex.quote(str(box.device))}")
        elif block.kind == "dashboard":
            if "--port 8080" not in body:
                raise SystemExit(f"{where}: the dashboard command needs --port 8080")
            body = body.replace("--port 8080", f"--port {settings['dashboard_port']}")
            log = shlex.quote(str(box.logs / "dashboard.log"))
            helper = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).resolve()))}"
            parts.append(
                f"( exec {body}\n) > {log} 2>&1 &\n"
                "dashboard_pid=$!\n"
                f"{helper} --helper {shlex.quote(str(box.root))} record dashboard $dashboard_pid\n"
                f"{helper} --helper {shlex.quote(str(box.root))} probe-dashboard $dashboard_pid "
                f"{len(nodes)}\n"
                "kill -TERM $dashboard_pid; wait $dashboard_pid || true"
            )
    parts.append("echo 'check-install: every block ran' >&2")
    return "\n".join(parts) + "\n"


def topology_nodes(doc_text: str) -> list[str]:
    """The node ids of the topology INSTALL.md installs (the .toml its scp copies)."""
    found = re.search(r"topologies/([\w.-]+\.toml)", doc_text)
    if found is None:
        raise SystemExit("INSTALL.md copies no topologies/*.toml")
    with (ROOT / "topologies" / found.group(1)).open("rb") as f:
        data = tomllib.load(f)
    return [str(node["id"]) for node in data["nodes"]]


def helper(argv: list[str]) -> int:
    """``--helper SANDBOX VERB ...``: what the script's shell functions call."""
    box = Sandbox(Path(argv[0]))
    verb, rest = argv[1], argv[2:]
    if verb == "systemctl":
        return systemctl(box, rest)
    if verb == "record":
        box.record(rest[0], int(rest[1]))
        return 0
    if verb == "probe-dashboard":
        return probe_dashboard(box, int(rest[0]), int(rest[1]))
    raise SystemExit(f"unknown helper verb {verb!r}")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--helper"]:
        return helper(args[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for everything")
    parser.add_argument("--keep", action="store_true", help="keep the sandbox folder")
    opts = parser.parse_args(args)
    text = opts.doc.read_text()
    try:
        blocks = parse_blocks(text)
    except ValueError as exc:
        print(f"check-install: {opts.doc}: {exc}", file=sys.stderr)
        return 1
    nodes = topology_nodes(text)
    with contextlib.suppress(OSError, AttributeError):  # orphans come to us, to be reaped
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    box = Sandbox.create(free_port(), free_port())
    script = box.root / "install.sh"
    script.write_text(build_script(box, blocks, nodes))
    started = time.monotonic()
    ran = sum(b.kind != "skip" for b in blocks)
    print(
        f"check-install: {len(blocks)} sh blocks in {opts.doc} ({ran} to run, "
        f"{len(blocks) - ran} skipped), sandbox {box.root}, nodes {' '.join(nodes)}",
        file=sys.stderr,
        flush=True,
    )
    shell = subprocess.Popen(["bash", str(script)], cwd=box.device, start_new_session=True)
    box.record("shell", shell.pid)
    status = 1
    try:
        status = shell.wait(timeout=opts.timeout)
    except subprocess.TimeoutExpired:
        print(f"check-install: FAILED: not done after {opts.timeout:g} s", file=sys.stderr)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGTERM)  # the shell and its background jobs
        for name, pid in reversed(list(box.processes().items())):
            stop_pid(pid)
            if name.startswith("agent@") and status != 0:
                print(
                    f"--- {name} (last lines)\n{tail(box, name.removeprefix('agent@'))}",
                    file=sys.stderr,
                )
        reap()
        if opts.keep:
            print(f"check-install: sandbox kept in {box.root}", file=sys.stderr)
        else:
            shutil.rmtree(box.root, ignore_errors=True)
    took = time.monotonic() - started
    if status == 0:
        print(
            f"check-install: OK: {ran} blocks of {opts.doc.name} ran in order, "
            f"{len(blocks) - ran} skipped, {len(nodes)} agents, in {took:.0f} s"
        )
        return 0
    print(f"check-install: FAILED (exit {status}) after {took:.0f} s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
