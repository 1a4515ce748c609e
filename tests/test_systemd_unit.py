"""devices/edge-runtime-agent@.service: the settings a device relies on, read from the unit
file itself, and ``systemd-analyze verify`` on an instance of it (when systemd-analyze, from
Debian's ``systemd`` package, is installed; skipped otherwise)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edge_runtime.cli import EXIT_USAGE
from edge_runtime.settings import ENV_PASSWORD_FILE, ENV_USERNAME

ROOT = Path(__file__).resolve().parent.parent
DEVICES = ROOT / "devices"
UNIT = DEVICES / "edge-runtime-agent@.service"
ENV_EXAMPLE = DEVICES / "agent.env.example"
NO_PASSWORDS = DEVICES / "no-passwords.conf"
INSTANCE = "edge-runtime-agent@pi-01.service"
INSTALLED_BINARY = "/opt/edge-runtime/bin/edge-runtime"


def parse_unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """Sections of a systemd unit file, each a list of (key, value) in file order.

    Lines ending in a backslash continue on the next line (joined with a space, as systemd
    does); lines starting with ``#`` or ``;`` are comments.
    """
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
        assert sep and current is not None, f"not a unit file line: {raw!r}"
        current.append((key.strip(), value.strip()))
    return sections


def values(section: list[tuple[str, str]], key: str) -> list[str]:
    return [value for k, value in section if k == key]


def one(section: list[tuple[str, str]], key: str) -> str:
    found = values(section, key)
    assert len(found) == 1, f"{key}= set {len(found)} times: {found}"
    return found[0]


def environment(section: list[tuple[str, str]]) -> dict[str, str]:
    """The unit's Environment= assignments (later ones win, as in systemd)."""
    env: dict[str, str] = {}
    for line in values(section, "Environment"):
        for word in shlex.split(line):
            name, _, value = word.partition("=")
            env[name] = value
    return env


def env_example() -> tuple[dict[str, str], dict[str, list[str]]]:
    """agent.env.example: the variables it sets, and every value shown (commented or not)."""
    active: dict[str, str] = {}
    shown: dict[str, list[str]] = {}
    for raw in ENV_EXAMPLE.read_text().splitlines():
        match = re.fullmatch(r"(#?)([A-Z_][A-Z0-9_]*)=(.*)", raw.strip())
        if match is None:
            continue
        commented, name, value = match.groups()
        shown.setdefault(name, []).append(value)
        if not commented:
            active[name] = value
    return active, shown


@pytest.fixture(scope="module")
def service() -> list[tuple[str, str]]:
    return parse_unit(UNIT.read_text())["Service"]


@pytest.fixture(scope="module")
def argv(service: list[tuple[str, str]]) -> list[str]:
    return shlex.split(one(service, "ExecStart"))


def option(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, f"{name} given {argv.count(name)} times: {argv}"
    return argv[argv.index(name) + 1]


def test_unit_runs_the_node_of_its_instance_name_with_checkpoints_in_its_state_directory(
    service: list[tuple[str, str]], argv: list[str]
) -> None:
    assert argv[:2] == [INSTALLED_BINARY, "agent"]
    assert option(argv, "--node") == "%i"
    assert option(argv, "--topology") == "${EDGE_TOPOLOGY}"
    assert option(argv, "--broker") == "${EDGE_BROKER}"
    # StateDirectory= creates /var/lib/edge-runtime/<node>, owned by User=, writable under
    # ProtectSystem=strict, and exports its path as $STATE_DIRECTORY.
    assert values(service, "StateDirectory") == ["edge-runtime/%i"]
    assert option(argv, "--state-dir") == "${STATE_DIRECTORY}"


def test_unit_reads_broker_credentials_and_tls_options_from_its_environment(
    service: list[tuple[str, str]], argv: list[str]
) -> None:
    # The machine's settings, then (optional) the node's own: a later file wins.
    assert values(service, "EnvironmentFile") == [
        "/etc/edge-runtime/agent.env",
        "-/etc/edge-runtime/%i.env",
    ]
    # The password file stays root-only: systemd hands the agent a private copy. One file
    # per node id, so that a machine may run several nodes (an aggregator beside a leaf).
    assert values(service, "LoadCredential") == ["mqtt-password:/etc/edge-runtime/%i.password"]
    env = environment(service)
    assert env[ENV_PASSWORD_FILE] == "%d/mqtt-password"
    assert env[ENV_USERNAME] == "%i"  # the ACL's user names are node ids
    # Unbraced: split into words, and no argument at all when unset (TLS is optional).
    assert "$EDGE_AGENT_OPTIONS" in argv
    # Defaults come first, so that the environment file may override them.
    keys = [key for key, _ in service]
    assert keys.index("EnvironmentFile") > max(i for i, k in enumerate(keys) if k == "Environment")


def test_unit_is_read_only_but_its_state_and_restarts_on_failure(
    service: list[tuple[str, str]],
) -> None:
    assert one(service, "ProtectSystem") == "strict"
    assert one(service, "Restart") == "on-failure"
    # Exit 2 is a configuration error (edge_runtime.cli.EXIT_USAGE): restarting every 5 s
    # would fail the same way forever.
    assert one(service, "RestartPreventExitStatus") == str(EXIT_USAGE)
    assert one(service, "NoNewPrivileges") == "true"
    assert one(service, "User") == "edge"
    assert one(service, "KillSignal") == "SIGTERM"  # the agent checkpoints and says "offline"


def test_every_variable_and_option_the_unit_passes_is_defined(
    service: list[tuple[str, str]], argv: list[str]
) -> None:
    active, shown = env_example()
    env = environment(service)
    command = one(service, "ExecStart")
    for name in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", command):
        assert name == "STATE_DIRECTORY" or name in env or name in shown, name
    # Variables the command needs as exactly one argument are set in the example.
    for name in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", command):
        assert name == "STATE_DIRECTORY" or name in env or active.get(name), name

    # Every option of ExecStart and of the example's EDGE_AGENT_OPTIONS lines exists.
    proc = subprocess.run(
        [sys.executable, "-m", "edge_runtime.cli", "agent", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    known = set(re.findall(r"--[a-z][a-z0-9-]*", proc.stdout))
    used = [word for word in argv if word.startswith("--")]
    for line in shown["EDGE_AGENT_OPTIONS"]:
        used += [word for word in shlex.split(line) if word.startswith("--")]
    assert "--ca-file" in used
    assert set(used) <= known, sorted(set(used) - known)


def test_no_passwords_drop_in_removes_the_credential() -> None:
    service = parse_unit(NO_PASSWORDS.read_text())["Service"]
    assert values(service, "LoadCredential") == [""]  # an empty assignment resets the list
    assert environment(service) == {ENV_PASSWORD_FILE: ""}


def _instance(tmp_path: Path) -> Path:
    """The unit as `INSTANCE` in ``tmp_path``, its binary replaced by a stub that exists."""
    binary = tmp_path / "bin" / "edge-runtime"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    text = UNIT.read_text()
    assert text.count(INSTALLED_BINARY) == 1
    unit = tmp_path / INSTANCE
    unit.write_text(text.replace(INSTALLED_BINARY, str(binary)))
    return unit


def _verify(unit: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian package: systemd)")
    proc = subprocess.run(
        [tool, "verify", str(unit)], capture_output=True, text=True, timeout=60, cwd=unit.parent
    )
    output = proc.stdout + proc.stderr
    # systemd-analyze exits 0 on warnings (unknown keys, bad values): read its output too.
    ours = [line for line in output.splitlines() if "edge-runtime-agent@" in line]
    assert proc.returncode == 0 and not ours, output


def test_systemd_analyze_verify_accepts_an_instance(tmp_path: Path) -> None:
    _verify(_instance(tmp_path))


def test_systemd_analyze_verify_accepts_the_no_passwords_drop_in(tmp_path: Path) -> None:
    unit = _instance(tmp_path)
    drop_ins = tmp_path / f"{INSTANCE}.d"
    drop_ins.mkdir()
    shutil.copy(NO_PASSWORDS, drop_ins / NO_PASSWORDS.name)
    _verify(unit)


def test_every_file_of_an_instance_is_named_after_its_node_so_nodes_can_share_a_machine(
    service: list[tuple[str, str]],
) -> None:
    """Two instances on one machine (``@pi-01`` and ``@site-a``) share no writable state or
    credential: whatever is per node carries %i."""
    per_node = [
        *values(service, "LoadCredential"),
        *values(service, "StateDirectory"),
        values(service, "EnvironmentFile")[-1],
    ]
    assert all("%i" in value for value in per_node), per_node
    assert environment(service)[ENV_USERNAME] == "%i"


def test_a_configuration_error_exits_2_so_the_unit_does_not_restart_it(tmp_path: Path) -> None:
    """What RestartPreventExitStatus=2 relies on: the agent's configuration errors exit 2."""
    proc = subprocess.run(
        [sys.executable, "-m", "edge_runtime.cli", "agent", "--topology",
         str(ROOT / "topologies" / "motes-light.toml"), "--node", "no-such-node",
         "--broker", "mqtt://127.0.0.1:1"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == EXIT_USAGE, proc.stderr
