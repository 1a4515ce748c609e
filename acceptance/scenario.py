"""The deployment as documented, run end to end under seeded faults (issue 21, item 2).

What an operator builds by following ``broker_config/SECURITY.md`` and ``devices/``:

- one password per MQTT user, the users being those of the ACL that ``edge-runtime acl
  TOPOLOGY --reader dashboard`` writes (every node, ``replay``, the reader), hashed in place
  by ``mosquitto_passwd -U``; each password also in ``secrets/<user>.password``;
- the ACL file, exactly the output of ``edge-runtime acl``;
- Mosquitto started from ``broker_config/secured.conf`` with only the file paths replaced and
  the TLS listener replaced by the loopback listener that file's comments describe for
  processes on the broker's host (``listener PORT 127.0.0.1``; passwords, the ACL and
  ``use_username_as_clientid`` apply to it), on a free port above 20000;
- one ``edge-runtime agent`` process per node, its command line exactly the systemd unit's
  ``ExecStart`` (``--topology T --node N --broker URL --state-dir DIR``, each node its own
  state directory) and its credentials exactly as the unit passes them
  (``EDGE_MQTT_USERNAME=<node id>``, ``EDGE_MQTT_PASSWORD_FILE=<its password file>``);
- ``edge-runtime replay --topology T [--data F] --broker URL --username replay
  --password-file secrets/replay.password`` with its defaults, or ``--rate N``. Without
  ``--rate`` the replay sends as fast as the broker accepts (there is no flag for that).

`run_scenario` runs one such deployment with a fault schedule (`schedule`: faults at moments
drawn by ``random.Random(seed)``) and checks, whatever the faults:

- the (last) replay exits 0, its summary reports nothing unconfirmed;
- every leaf's retained confirmation reports every reading of the run durable;
- the root's model covers every accepted reading exactly (provenance == the readings each
  leaf accepted, i.e. inside its ``valid_range``);
- the model is the no-fault model: largest principal angle to the offline reference
  (`reference_model`, `faults.offline_model` on the readings each leaf accepts) below
  `SAME_ANGLE_RAD`, and the same error ratio on the accepted data;
- no agent exited that the schedule did not kill.

Fault kinds (`KINDS`): the broker SIGKILLed and restarted from its database (saved by SIGUSR1
a moment before: stale retained messages come back) or from nothing (persistence lost), a
leaf / an aggregator / the root SIGKILLed and restarted with the same command and state
directory, a leaf SIGSTOPped past its keep-alive then SIGCONTed, the replay SIGKILLed and run
again with ``--resume RUN``.

Fault moments count from the replay's first connection to the broker, not from the start
of its process, and a replay run again with ``--resume`` is likewise left to connect before
the next fault: a replay that cannot reach the broker at its very first attempt exits 1 at
once ("cannot talk to the MQTT broker ... Connection refused"), by design (a wrong URL fails
fast), unlike an agent, which retries for ``--startup-timeout`` seconds. Any later loss of
the broker, even before the replay's second connection, it survives. The connection counts
from the replay's first subscription in the broker's log, not from the broker's "New client
connected" line: that line is written before the CONNACK is sent, and under load a broker
killed just after it would cut the replay's very first attempt short. The replay process
takes about a second to start (2-core machine), so a schedule counted from its start would
often kill the broker before it ever connected.

Imported by ``tests/test_acceptance.py`` (short form) and ``benchmarks/acceptance.py`` (many
seeds). Every wait is bounded; every process is stopped by its pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiomqtt
import numpy as np

from acceptance.faults import (
    KEEPALIVE_S,
    AgentProc,
    Monitor,
    Record,
    offline_model,
    send_signal,
    stdout_of,
    terminate,
    wait_exit,
)
from edge_runtime.broker import find_mosquitto, free_port
from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import FPCAEdge, Subspace, error_ratio, principal_angles
from edge_runtime.fpca.merge_tree import MergeTree
from edge_runtime.topology import Topology, load_topology
from edge_runtime.wire import SubspaceMessage, WireError, decode_confirm

ROOT = Path(__file__).resolve().parent.parent
MOTES_LIGHT = ROOT / "topologies" / "motes-light.toml"
SECURED_CONF = ROOT / "broker_config" / "secured.conf"
UNIT = ROOT / "devices" / "edge-runtime-agent@.service"

READER = "dashboard"  # the read-only user of SECURITY.md (the monitor logs in as it)
REPLAY_USER = "replay"  # `edge-runtime acl`'s default --replay-user

SAME_ANGLE_RAD = 1e-6
"""Largest principal angle to the no-fault model that still counts as "the same model"."""
SAME_ERROR_RTOL = 1e-6
"""Relative difference of the error ratio to the no-fault one that counts as the same."""

ONLINE_TIMEOUT_S = 60.0
MODEL_TIMEOUT_S = 60.0
RUN_ID_TIMEOUT_S = 15.0
BROKER_START_TIMEOUT_S = 10.0

KINDS: tuple[str, ...] = (
    "broker_kill_persist",
    "broker_kill_fresh",
    "leaf_kill",
    "aggregator_kill",
    "root_kill",
    "leaf_freeze",
    "replay_kill",
)
"""Every fault kind `schedule` draws from."""

_RUNNING = re.compile(r"mosquitto version \S+ running")
_RUN_SOURCE = re.compile(r"^replay:([A-Za-z0-9_-]{1,32}):")
# Mosquitto's subscribe log line, "<time>: <client id> <qos> <topic>" (the client id is the
# user name: use_username_as_clientid)
_REPLAY_SUBSCRIBED = re.compile(rf"^\d+: {REPLAY_USER} [012] \S", re.MULTILINE)


def edge_runtime_command() -> list[str]:
    """The installed console script next to this interpreter (what the unit runs), else
    ``python -m edge_runtime.cli``."""
    script = Path(sys.executable).parent / "edge-runtime"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "edge_runtime.cli"]


def unit_exec_start() -> list[str]:
    """The words of the unit's ``ExecStart`` after the program (checked against ours)."""
    text = UNIT.read_text()
    match = re.search(r"^ExecStart=(.*?)(?<!\\)$", text, re.MULTILINE | re.DOTALL)
    assert match is not None, "no ExecStart in the unit"
    return match.group(1).replace("\\\n", " ").split()[1:]


def unit_python_environment() -> dict[str, str]:
    """The unit's ``Environment=PYTHON...`` assignments (``PYTHONOPTIMIZE=2``): the agents
    run with them, as the unit runs them on a device."""
    env: dict[str, str] = {}
    for line in re.findall(r"^Environment=(PYTHON\S*)$", UNIT.read_text(), re.MULTILINE):
        name, _, value = line.partition("=")
        env[name] = value
    return env


def _mosquitto_passwd() -> str:
    found = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"
    if not os.access(found, os.X_OK):
        raise RuntimeError("mosquitto_passwd not found: sudo apt-get install mosquitto")
    return found


# ------------------------------------------------------------------------------ reference
def accepted_rows(topology: Topology, data: np.ndarray) -> dict[str, np.ndarray]:
    """Each leaf's rows (`Topology.split_rows`) that its ``valid_range`` accepts, in order
    (``out_of_range = "reject"`` drops a reading with any value outside the range; ``clip``
    and no range keep every row)."""
    out = {}
    for leaf, rows in data_split(topology, data).items():
        cfg = topology.nodes[leaf]
        bounds = cfg.range_bounds(data.shape[1])
        if bounds is not None and cfg.out_of_range == "reject":
            lo, hi = bounds
            x = data[rows]
            rows = rows[~((x < lo) | (x > hi)).any(axis=1)]
        out[leaf] = rows
    return out


def data_split(topology: Topology, data: np.ndarray) -> dict[str, np.ndarray]:
    return {leaf: np.asarray(rows) for leaf, rows in topology.split_rows(data.shape[0]).items()}


def reference_model(topology: Topology, data: np.ndarray) -> Subspace:
    """The no-fault root model computed offline: `faults.offline_model` when every reading
    is accepted, else the same computation on the readings each leaf accepts."""
    accepted = accepted_rows(topology, data)
    split = data_split(topology, data)
    if all(len(accepted[leaf]) == len(split[leaf]) for leaf in split):
        return offline_model(topology, data)[0]
    subs: dict[str, Subspace] = {}
    for leaf, rows in accepted.items():
        cfg = topology.nodes[leaf]
        est = FPCAEdge(data.shape[1], cfg.rank, block_size=cfg.block_size)
        est.partial_fit(data[rows])
        subs[leaf] = est.tracked_subspace

    def merged(node: str) -> Subspace:
        if topology.is_leaf(node):
            return subs[node]
        tree = MergeTree(topology.children(node))
        for child in topology.children(node):
            tree.update(child, merged(child))
        return tree.result

    return merged(topology.root).truncate(topology.nodes[topology.root].rank)


# ------------------------------------------------------------------------------ deployment
@dataclass
class Deployment:
    """What the operator prepares once: topology, data, passwords, ACL; plus the reference."""

    name: str
    directory: Path
    topology_path: Path
    topology: Topology
    data_path: Path | None  # None: the topology's own dataset (replay's default)
    data: np.ndarray
    acl_file: Path
    password_file: Path
    secrets_dir: Path
    reference: Subspace
    reference_error_ratio: float
    expected: dict[str, int]  # readings each leaf accepts
    sent: dict[str, int]  # readings replayed to each leaf

    def password_path(self, user: str) -> Path:
        return self.secrets_dir / f"{user}.password"

    def password(self, user: str) -> str:
        return self.password_path(user).read_text().splitlines()[0]


def prepare(
    directory: Path, topology_path: Path, data_path: Path | None = None, name: str = ""
) -> Deployment:
    """Passwords, ACL and reference for ``topology_path`` (and ``data_path``, else the
    topology's dataset), as SECURITY.md steps 3 and 4 make them, in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    topology = load_topology(topology_path)
    acl = subprocess.run(
        [*edge_runtime_command(), "acl", str(topology_path), "--reader", READER],
        check=True, capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    acl_file = directory / "acl"
    acl_file.write_text(acl.stdout)
    users = [w[1] for line in acl.stdout.splitlines() if (w := line.split()) and w[0] == "user"]
    assert set(topology.nodes) | {READER, REPLAY_USER} <= set(users), users
    secrets_dir = directory / "secrets"
    secrets_dir.mkdir(mode=0o700, exist_ok=True)
    password_file = directory / "passwd"
    password_file.touch(mode=0o600)
    lines = []
    for user in users:
        password = secrets.token_urlsafe(18)
        lines.append(f"{user}:{password}\n")
        path = secrets_dir / f"{user}.password"
        path.touch(mode=0o600)
        path.write_text(password + "\n")
    password_file.write_text("".join(lines))
    subprocess.run([_mosquitto_passwd(), "-U", str(password_file)], check=True, timeout=60)
    data = load_dataset(data_path if data_path is not None else _dataset_of(topology))
    reference = reference_model(topology, data)
    accepted = accepted_rows(topology, data)
    all_accepted = np.concatenate([accepted[leaf] for leaf in topology.leaves()])
    return Deployment(
        name=name or topology.name,
        directory=directory,
        topology_path=topology_path,
        topology=topology,
        data_path=data_path,
        data=data,
        acl_file=acl_file,
        password_file=password_file,
        secrets_dir=secrets_dir,
        reference=reference,
        reference_error_ratio=error_ratio(data[np.sort(all_accepted)], reference.basis),
        expected={leaf: len(rows) for leaf, rows in accepted.items()},
        sent={leaf: len(rows) for leaf, rows in data_split(topology, data).items()},
    )


def _dataset_of(topology: Topology) -> str | Path:
    source = topology.dataset_path() or topology.dataset
    assert source is not None, f"topology {topology.name!r} names no dataset"
    return source


def digits_deployment(directory: Path) -> Deployment:
    """The second real dataset: scikit-learn's handwritten digits (1797 x 64 pixel
    intensities 0..16), as a whitespace-separated text file (`--data`), through root ->
    2 sites -> 2 leaves each (rank 8, blocks of 40: no leaf's share is a whole number of
    blocks), each leaf declaring the sensor's true range [0, 16]."""
    from sklearn.datasets import load_digits  # the bench extra

    directory.mkdir(parents=True, exist_ok=True)
    data_path = directory / "digits.txt"
    np.savetxt(data_path, load_digits().data, fmt="%g")
    lines = [
        "# scikit-learn digits, 1797 x 64, replayed through four leaves",
        'name = "digits"',
        'prefix = "fpca"',
        "[defaults]",
        "rank = 8",
        "block_size = 40",
        "valid_range = [0.0, 16.0]",
        "[data]",
        'split = "contiguous"',
        "[[nodes]]",
        'id = "root"',
    ]
    for s in ("site-a", "site-b"):
        lines += ["[[nodes]]", f'id = "{s}"', 'parent = "root"']
        for i in (1, 2):
            leaf = f"{s[-1]}-pi-{i:02d}"
            lines += ["[[nodes]]", f'id = "{leaf}"', f'parent = "{s}"']
    topology_path = directory / "digits.toml"
    topology_path.write_text("\n".join(lines) + "\n")
    return prepare(directory, topology_path, data_path, name="digits")


def motes_deployment(directory: Path) -> Deployment:
    """The built-in Motes light data through the shipped ``topologies/motes-light.toml``."""
    return prepare(directory, MOTES_LIGHT, None, name="motes-light")


# ------------------------------------------------------------------------------ broker
def secured_config(deployment: Deployment, port: int, data_dir: Path) -> str:
    """``broker_config/secured.conf``: the TLS listener replaced by ``listener PORT
    127.0.0.1`` (its TLS-only options dropped), the password and ACL files ours, and the
    persistence location and log in ``data_dir``."""
    template = SECURED_CONF.read_text(encoding="utf-8")
    replaced = {
        "listener": f"listener {port} 127.0.0.1",
        "password_file": f"password_file {deployment.password_file}",
        "acl_file": f"acl_file {deployment.acl_file}",
    }
    dropped = {"cafile", "certfile", "keyfile", "tls_version", "require_certificate"}
    seen = set()
    out = []
    for line in template.splitlines():
        words = line.split(None, 1)
        key = words[0] if words else ""
        if key in replaced:
            line = replaced[key]
            seen.add(key)
        elif key in dropped:
            line = f"# dropped by acceptance/scenario.py (TLS only): {line}"
            seen.add(key)
        out.append(line)
    missing = (set(replaced) | dropped) - seen
    assert not missing, f"secured.conf has no {sorted(missing)} lines any more"
    assert "use_username_as_clientid true" in template and "allow_anonymous false" in template
    out += [
        f"persistence_location {data_dir}/",
        f"log_dest file {data_dir / 'mosquitto.log'}",
        *(f"log_type {kind}" for kind in ("error", "warning", "notice", "information")),
        "log_type subscribe",  # "<client id> <qos> <topic>": a client acting on its CONNACK
    ]
    if os.geteuid() == 0:  # as root Mosquitto would switch to user mosquitto
        out.append("user root")
    return "\n".join(out) + "\n"


class SecuredBroker:
    """Mosquitto from ``secured.conf`` on 127.0.0.1:<free port above 20000>, its database
    and log in ``directory``; started, killed and stopped by its pid. The port is kept
    across restarts (clients reconnect to the same URL)."""

    def __init__(self, deployment: Deployment, directory: Path) -> None:
        self.deployment = deployment
        self.directory = directory
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "mosquitto.log"

    @property
    def db_path(self) -> Path:
        return self.directory / "mosquitto.db"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def start(self) -> None:
        """Start it (a fresh port the first time, up to 3 tries; the same port after)."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.directory.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):
            port = self.port or free_port(low=20000, high=60000)
            conf = self.directory / "mosquitto.conf"
            conf.write_text(secured_config(self.deployment, port, self.directory))
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            with (self.directory / "stdout.log").open("ab") as out:
                proc = subprocess.Popen(
                    [find_mosquitto(), "-c", str(conf)],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            deadline = time.monotonic() + BROKER_START_TIMEOUT_S
            while time.monotonic() < deadline and proc.poll() is None:
                if _RUNNING.search(self.log()[offset:]):
                    self.proc, self.port = proc, port
                    self.starts += 1
                    return
                time.sleep(0.02)
            if proc.poll() is None:
                proc.kill()
            proc.wait(5)
            taken = "Address already in use" in self.log()[offset:]
            if not (taken and self.port is None and attempt < 2):
                raise RuntimeError(f"Mosquitto did not start on port {port}: {self.log()[-600:]}")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, sig)

    async def kill(self) -> None:
        """SIGKILL, reaped (bounded)."""
        self.signal(signal.SIGKILL)
        for _ in range(250):
            if not self.running:
                break
            await asyncio.sleep(0.02)

    def stop(self) -> None:
        """SIGCONT + SIGTERM (Mosquitto saves its database), SIGKILL after 5 s; by pid."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


class CredentialMonitor(Monitor):
    """`faults.Monitor`, logged in as the read-only user (the broker refuses anonymous
    clients)."""

    def __init__(self, host: str, port: int, topology: Topology, user: str, password: str):
        super().__init__(host, port, topology)
        self.user, self.password = user, password

    async def _run(self) -> None:
        prefix = self.topology.prefix
        while True:  # until cancelled by __aexit__; one connection attempt per 0.2 s at most
            try:
                async with aiomqtt.Client(
                    self.host, self.port, timeout=5, keepalive=5, clean_session=True,
                    username=self.user, password=self.password,
                ) as client:  # fmt: skip
                    await client.subscribe(f"{prefix}/#", qos=1)
                    self.connects += 1
                    async for message in client.messages:
                        payload = message.payload
                        if not isinstance(payload, bytes | bytearray):
                            payload = str(payload).encode()
                        self.records.append(
                            Record(time.time(), str(message.topic), bytes(payload), message.retain)
                        )
                        self._changed.set()
            except aiomqtt.MqttError:
                await asyncio.sleep(0.2)


# ------------------------------------------------------------------------------ processes
def _spawn(name: str, args: list[str], log_dir: Path, env: Mapping[str, str]) -> AgentProc:
    log_dir.mkdir(parents=True, exist_ok=True)
    n = len(list(log_dir.glob(f"{name}.*.log")))
    log_path = log_dir / f"{name}.{n}.log"
    with log_path.open("wb") as err, log_path.with_suffix(".out").open("wb") as out:
        popen = subprocess.Popen(
            args, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
        )  # fmt: skip
    return AgentProc(name, popen, log_path, time.time())


class Fleet:
    """The deployment's processes: one agent per node (the unit's command line and
    credentials), the replays, all signalled and stopped by pid."""

    def __init__(self, deployment: Deployment, broker: SecuredBroker, work: Path) -> None:
        self.d = deployment
        self.broker = broker
        self.work = work
        self.log_dir = work / "logs"
        self.procs: dict[str, AgentProc] = {}
        self.history: list[AgentProc] = []
        self.killed: set[int] = set()  # pids the schedule killed on purpose

    def state_dir(self, node: str) -> Path:
        path = self.work / "state" / node
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path

    def agent_args(self, node: str) -> list[str]:
        return [
            *edge_runtime_command(), "agent",
            "--topology", str(self.d.topology_path), "--node", node,
            "--broker", self.broker.url, "--state-dir", str(self.state_dir(node)),
        ]  # fmt: skip

    def agent_env(self, node: str) -> dict[str, str]:
        """What the unit sets for ``node``: its Python settings and its credentials."""
        return {
            **unit_python_environment(),
            "EDGE_MQTT_USERNAME": node,
            "EDGE_MQTT_PASSWORD_FILE": str(self.d.password_path(node)),
        }

    def start(self, node: str) -> AgentProc:
        proc = _spawn(node, self.agent_args(node), self.log_dir, self.agent_env(node))
        self.procs[node] = proc
        self.history.append(proc)
        return proc

    def start_all(self) -> None:
        for node in self.d.topology.nodes:
            self.start(node)

    def replay(self, rate: float | None, resume: str | None = None) -> AgentProc:
        args = [*edge_runtime_command(), "replay", "--topology", str(self.d.topology_path)]
        if self.d.data_path is not None:
            args += ["--data", str(self.d.data_path)]
        args += [
            "--broker", self.broker.url,
            "--username", REPLAY_USER, "--password-file", str(self.d.password_path(REPLAY_USER)),
        ]  # fmt: skip
        if rate is not None:
            args += ["--rate", f"{rate:g}"]
        if resume is not None:
            args += ["--resume", resume]
        proc = _spawn("replay", args, self.log_dir, {})
        self.history.append(proc)
        return proc

    def kill(self, proc: AgentProc) -> None:
        self.killed.add(proc.pid)
        send_signal(proc, signal.SIGKILL)

    def dead(self) -> dict[str, str]:
        """Agents that exited although the schedule did not kill them: {node: log tail}."""
        return {
            node: p.tail()
            for node, p in self.procs.items()
            if p.popen.poll() is not None and p.pid not in self.killed
        }

    async def stop_all(self) -> dict[str, int | None]:
        codes = await asyncio.gather(*(terminate(p, 5.0) for p in self.history))
        return {f"{p.name}:{p.pid}": c for p, c in zip(self.history, codes, strict=True)}


# ------------------------------------------------------------------------------ schedule
@dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` at ``at_s`` seconds after the replay started, on ``node``
    (agent faults), lasting ``down_s`` (time down / frozen), with ``stale_s`` between the
    broker's database save and its kill (``broker_kill_persist``)."""

    at_s: float
    kind: str
    node: str | None = None
    down_s: float = 1.0
    stale_s: float = 0.0


def schedule(
    seed: int,
    topology: Topology,
    window_s: float,
    *,
    n_faults: int = 2,
    kinds: Sequence[str] = KINDS,
    include: Sequence[str] = (),
) -> list[Fault]:
    """``n_faults`` faults at moments drawn uniformly in [5 %, 90 %] of ``window_s`` (the
    replay's expected duration) by ``random.Random(seed)``, counted from the replay's first
    connection to the broker (`run_scenario`; see the module docstring). One fault's kind is
    ``kinds[seed % len(kinds)]`` (consecutive seeds cover every kind), or else every kind in
    ``include``; the others are drawn, and the order is shuffled;
    a kind's node (a leaf, an aggregator other than the root, the root), its downtime and,
    for a freeze, how far past the keep-alive are drawn too."""
    rng = random.Random(seed)
    leaves = list(topology.leaves())
    aggregators = [n for n in topology.nodes if not topology.is_leaf(n) and n != topology.root]
    chosen = list(include) if include else [kinds[seed % len(kinds)]]
    chosen += [rng.choice(kinds) for _ in range(n_faults - len(chosen))]
    rng.shuffle(chosen)
    moments = sorted(rng.uniform(0.05, 0.9) * window_s for _ in chosen)
    out = []
    for at_s, kind in zip(moments, chosen, strict=True):
        node = None
        down_s = rng.uniform(0.3, 3.0)
        stale_s = 0.0
        if kind in ("leaf_kill", "leaf_freeze"):
            node = rng.choice(leaves)
        elif kind == "aggregator_kill":
            node = rng.choice(aggregators or [topology.root])
        elif kind == "root_kill":
            node = topology.root
        if kind == "leaf_freeze":  # the broker drops a client after 1.5 keep-alives
            down_s = 1.5 * KEEPALIVE_S + rng.uniform(0.5, 3.0)
        if kind == "broker_kill_persist":
            stale_s = rng.uniform(0.2, 2.0)
        out.append(Fault(round(at_s, 3), kind, node, round(down_s, 3), round(stale_s, 3)))
    return out


# ------------------------------------------------------------------------------ one run
@dataclass
class RunResult:
    """What one run did and whether it passed (``failures`` empty)."""

    deployment: str
    rate: float | None
    seed: int | None
    faults: list[Fault]
    failures: list[str] = field(default_factory=list)
    replay_exit: int | None = None
    replay_summary: dict = field(default_factory=dict)
    replays: int = 0
    run_id: str | None = None
    replay_s: float | None = None  # first replay start -> last replay exit
    connected_s: float | None = None  # first replay start -> its first connection (broker log)
    model_s: float | None = None  # last replay exit -> root model covering everything
    total_s: float | None = None  # broker start -> checks done
    angle_rad: float | None = None
    error_ratio: float | None = None
    reference_error_ratio: float | None = None
    coverage_ok: bool = False
    notes: list[str] = field(default_factory=list)
    restores: list[str] = field(default_factory=list)  # "<node>: <source> n_samples=<n>"
    work: str = ""

    @property
    def passed(self) -> bool:
        return not self.failures

    def rate_label(self) -> str:
        return "max" if self.rate is None else f"{self.rate:g}/s"

    def to_json(self) -> dict:
        out = asdict(self)
        out["passed"] = self.passed
        return out


def expected_window_s(deployment: Deployment, rate: float | None) -> float:
    """About how long the replay sends: rows / rate, or a few seconds as fast as possible."""
    n = deployment.data.shape[0]
    return n / rate if rate is not None else max(2.0, n / 2500.0)


def coverage(model: SubspaceMessage | None) -> dict[str, int]:
    return {} if model is None else {k: v for k, v in model.provenance.items() if v}


def latest_confirms(mon: Monitor, topology: Topology) -> dict[str, object]:
    out: dict[str, object] = {}
    for leaf in topology.leaves():
        for rec in reversed(mon.on(topology.confirm_topic(leaf))):
            if rec.payload:
                with contextlib.suppress(WireError):
                    out[leaf] = decode_confirm(rec.payload)
                    break
    return out


def run_ids_seen(mon: Monitor, topology: Topology) -> set[str]:
    """Replay run ids in the sources of the leaves' confirmations so far."""
    ids: set[str] = set()
    for leaf in topology.leaves():
        for rec in mon.on(topology.confirm_topic(leaf)):
            if not rec.payload:
                continue
            with contextlib.suppress(WireError):
                confirm = decode_confirm(rec.payload)
                for source in confirm.ingested:
                    if m := _RUN_SOURCE.match(source):
                        ids.add(m.group(1))
    return ids


def _summary(proc: AgentProc) -> dict:
    for line in reversed(stdout_of(proc).splitlines()):
        if line.strip().startswith("{"):
            with contextlib.suppress(ValueError):
                return json.loads(line)
    return {}


async def _wait_online(mon: Monitor, fleet: Fleet, nodes: Sequence[str], since: float) -> bool:
    """Every node in ``nodes`` published "online" after ``since`` (or the run fails)."""
    topology = fleet.d.topology

    def online() -> bool:
        return all(
            any(r.payload == b"online" for r in mon.on(topology.status_topic(n), since))
            for n in nodes
        )

    await mon.wait_for(lambda: online() or bool(fleet.dead()), ONLINE_TIMEOUT_S)
    return online()


async def wait_replay_connected(
    mon: Monitor, broker: SecuredBroker, replay: AgentProc, offset: int
) -> None:
    """Until the broker's log (after byte ``offset``) shows the replay's first subscription
    (its client has the CONNACK: the connection is made on both sides), or the replay exited
    (bounded): no fault strikes a replay before its first connection, which it does not retry
    (see the module docstring)."""
    await mon.wait_for(
        lambda: bool(_REPLAY_SUBSCRIBED.search(broker.log()[offset:]))
        or replay.popen.poll() is not None,
        ONLINE_TIMEOUT_S,
    )


class _Run:
    """State of one run while its faults are injected."""

    def __init__(self, d: Deployment, fleet: Fleet, broker: SecuredBroker, mon: Monitor,
                 rate: float | None, result: RunResult) -> None:  # fmt: skip
        self.d, self.fleet, self.broker, self.mon = d, fleet, broker, mon
        self.rate, self.result = rate, result
        self.replay: AgentProc | None = None

    async def inject(self, fault: Fault) -> None:
        kind, fleet = fault.kind, self.fleet
        self.result.notes.append(f"{time.time():.3f} {kind} {fault.node or ''}".strip())
        if kind in ("broker_kill_persist", "broker_kill_fresh"):
            if kind == "broker_kill_persist":
                self.broker.signal(signal.SIGUSR1)  # save the database now ...
                await asyncio.sleep(fault.stale_s)  # ... which goes stale meanwhile
            await self.broker.kill()
            if kind == "broker_kill_fresh":
                with contextlib.suppress(FileNotFoundError):
                    self.broker.db_path.unlink()
            await asyncio.sleep(fault.down_s)
            await asyncio.to_thread(self.broker.start)
        elif kind in ("leaf_kill", "aggregator_kill", "root_kill"):
            assert fault.node is not None
            proc = fleet.procs[fault.node]
            fleet.kill(proc)
            await wait_exit(proc, 5.0)
            await asyncio.sleep(fault.down_s)
            fleet.start(fault.node)
        elif kind == "leaf_freeze":
            assert fault.node is not None
            proc = fleet.procs[fault.node]
            send_signal(proc, signal.SIGSTOP)
            try:
                await asyncio.sleep(fault.down_s)
            finally:
                send_signal(proc, signal.SIGCONT)
        elif kind == "replay_kill":
            await self.kill_and_resume_replay(fault)
        else:
            raise ValueError(f"unknown fault kind {kind!r}")

    async def kill_and_resume_replay(self, fault: Fault) -> None:
        replay = self.replay
        assert replay is not None
        if replay.popen.poll() is not None:
            self.result.notes.append("replay_kill: the replay had already exited")
            return
        self.fleet.kill(replay)
        await wait_exit(replay, 5.0)
        await asyncio.sleep(fault.down_s)
        # The replay prints its run id only in its final summary: a killed replay never
        # did. The run id is in the source names of the leaves' retained confirmations.
        run_id = _summary(replay).get("run")
        if run_id is None:
            await self.mon.wait_for(
                lambda: bool(run_ids_seen(self.mon, self.d.topology)), RUN_ID_TIMEOUT_S
            )
            ids = run_ids_seen(self.mon, self.d.topology)
            if len(ids) > 1:
                self.result.failures.append(f"several replay runs in the confirmations: {ids}")
                return
            run_id = next(iter(ids), None)
        offset = len(self.broker.log())
        if run_id is None:  # killed before any leaf ingested a reading: start afresh
            self.result.notes.append("replay_kill: no reading ingested yet, a new replay")
            self.replay = self.fleet.replay(self.rate)
        else:
            self.result.run_id = run_id
            self.replay = self.fleet.replay(self.rate, resume=run_id)
        self.result.replays += 1
        await wait_replay_connected(self.mon, self.broker, self.replay, offset)


async def run_scenario(
    deployment: Deployment,
    work: Path,
    *,
    rate: float | None,
    faults: Sequence[Fault] = (),
    seed: int | None = None,
    replay_timeout_s: float | None = None,
) -> RunResult:
    """One run of the deployment: broker, monitor, every agent, the replay at ``rate``
    (None: as fast as possible), ``faults`` at their moments, then every check. Never
    raises for a failed check: the result lists the failures. Every process stopped."""
    d = deployment
    result = RunResult(d.name, rate, seed, list(faults), work=str(work))
    result.reference_error_ratio = d.reference_error_ratio
    t_begin = time.monotonic()
    window = expected_window_s(d, rate)
    replay_timeout_s = replay_timeout_s or window + 240.0
    broker = SecuredBroker(d, work / "broker")
    fleet = Fleet(d, broker, work)
    try:
        await asyncio.to_thread(broker.start)
        mon = CredentialMonitor(
            "127.0.0.1", broker.port or 0, d.topology, READER, d.password(READER)
        )
        async with mon:
            t0 = time.time()
            fleet.start_all()
            if not await _wait_online(mon, fleet, list(d.topology.nodes), t0):
                result.failures.append(f"agents not online: dead {sorted(fleet.dead())}")
                return result
            run = _Run(d, fleet, broker, mon, rate, result)
            start = time.monotonic()
            offset = len(broker.log())
            run.replay = fleet.replay(rate)
            result.replays = 1
            if faults:  # fault moments count from the replay's first connection
                await wait_replay_connected(mon, broker, run.replay, offset)
                result.connected_s = time.monotonic() - start
            t_faults = time.monotonic()
            for fault in faults:
                delay = t_faults + fault.at_s - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await run.inject(fault)
            assert run.replay is not None
            code = await wait_exit(
                run.replay, max(1.0, start + replay_timeout_s - time.monotonic())
            )
            result.replay_s = time.monotonic() - start
            t_exit = time.monotonic()
            result.replay_exit = code
            result.replay_summary = _summary(run.replay)
            result.run_id = result.run_id or result.replay_summary.get("run")
            if code != 0:
                result.failures.append(f"replay exit {code}: {run.replay.tail(600).strip()[-600:]}")
            elif result.replay_summary.get("unconfirmed_total", 1) != 0:
                result.failures.append(f"replay summary: {result.replay_summary}")
            model = await mon.wait_model(lambda m: coverage(m) == d.expected, MODEL_TIMEOUT_S)
            result.model_s = time.monotonic() - t_exit
            check_model(result, d, model)
            check_confirms(result, d, mon)
            result.restores = restores(fleet)
            dead = fleet.dead()
            if dead:
                result.failures.append(
                    f"agents exited: {sorted(dead)}: {next(iter(dead.values()))}"
                )
    except Exception as exc:  # a broken harness is a failed run, with the reason
        result.failures.append(f"harness error: {type(exc).__name__}: {exc}")
    finally:
        await fleet.stop_all()
        await asyncio.to_thread(broker.stop)
        result.total_s = time.monotonic() - t_begin
    return result


def restores(fleet: Fleet) -> list[str]:
    """What each restarted leaf restored from (its ``restored`` log event): its checkpoint
    or its retained snapshot, and how many samples."""
    out = []
    for proc in fleet.history:
        for event in proc.events():
            if event.get("event") == "restored":
                out.append(f"{proc.name}: {event.get('source')} n_samples={event.get('n_samples')}")
    return out


def check_model(result: RunResult, d: Deployment, model: SubspaceMessage | None) -> None:
    if model is None:
        result.failures.append("the root published no model")
        return
    covered = coverage(model)
    result.coverage_ok = covered == d.expected and model.n_samples == sum(d.expected.values())
    if not result.coverage_ok:
        diff = {
            leaf: covered.get(leaf, 0) - n
            for leaf, n in d.expected.items()
            if covered.get(leaf, 0) != n
        }
        result.failures.append(
            f"coverage: model n_samples {model.n_samples} != {sum(d.expected.values())}, "
            f"per leaf (model - expected) {diff}"
        )
    basis = model.subspace.basis
    result.angle_rad = float(principal_angles(basis, d.reference.basis).max())
    accepted = accepted_rows(d.topology, d.data)
    rows = np.sort(np.concatenate([accepted[leaf] for leaf in d.topology.leaves()]))
    result.error_ratio = float(error_ratio(d.data[rows], basis))
    if not result.angle_rad < SAME_ANGLE_RAD:
        result.failures.append(
            f"model differs from the no-fault one: largest principal angle "
            f"{result.angle_rad:.3g} rad (>= {SAME_ANGLE_RAD:g})"
        )
    rel = abs(result.error_ratio - d.reference_error_ratio) / d.reference_error_ratio
    if not rel < SAME_ERROR_RTOL:
        result.failures.append(
            f"error ratio {result.error_ratio:.9g} vs {d.reference_error_ratio:.9g} no-fault"
        )


def check_confirms(result: RunResult, d: Deployment, mon: Monitor) -> None:
    """Every leaf's retained confirmation: every reading of the run ingested and durable."""
    if result.run_id is None:
        result.failures.append("no replay run id known")
        return
    confirms = latest_confirms(mon, d.topology)
    short = {}
    for leaf, n in d.sent.items():
        confirm = confirms.get(leaf)
        source = f"replay:{result.run_id}:{leaf}"
        ingested = None if confirm is None else confirm.ingested.get(source)  # type: ignore[attr-defined]
        durable = None if confirm is None else confirm.durable.get(source)  # type: ignore[attr-defined]
        if ingested != n - 1 or durable != n - 1:
            short[leaf] = {"sent": n, "ingested": ingested, "durable": durable}
    if short:
        result.failures.append(f"confirmations (last seq, expected sent - 1): {short}")


def describe(result: RunResult) -> str:
    """One line: pass/fail, rate, seed, faults, durations, angle, failures."""
    faults = ", ".join(
        f"{f.kind}{'(' + f.node + ')' if f.node else ''}@{f.at_s:.1f}s" for f in result.faults
    )
    head = (
        f"{'PASS' if result.passed else 'FAIL'} {result.deployment} rate={result.rate_label()} "
        f"seed={result.seed} faults=[{faults}] replay_s={_f(result.replay_s)} "
        f"model_s={_f(result.model_s)} total_s={_f(result.total_s)} "
        f"angle={_g(result.angle_rad)} error_ratio={_g(result.error_ratio)} "
        f"(no-fault {_g(result.reference_error_ratio)}) replays={result.replays} "
        f"resent={result.replay_summary.get('resent')}"
    )
    if result.restores:
        head += f" restores=[{'; '.join(result.restores)}]"
    return head + ("" if result.passed else " :: " + " | ".join(result.failures))


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"
