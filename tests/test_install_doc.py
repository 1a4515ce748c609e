"""devices/INSTALL.md as a new user follows it: every ``sh`` block carries a marker for
``scripts/check_install.py``, and the marked blocks run in order on a clean sandbox (users,
the venv, the wheel, the broker from network.conf, every agent as its unit's ExecStart runs
it, replay, watch and the dashboard), so the document and what works cannot drift apart."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_install.py"
DOC = ROOT / "devices" / "INSTALL.md"
LOCAL_INDEX = Path("/opt/pypi/simple")  # a machine's local package index, when it has one

sys.path.insert(0, str(SCRIPT.parent))
import check_install  # noqa: E402


def test_every_sh_block_of_install_md_is_marked_and_the_steps_are_in_order() -> None:
    blocks = check_install.parse_blocks(DOC.read_text())
    kinds = [b.kind for b in blocks]
    assert kinds[0] == "settings" and kinds.count("settings") == 1
    assert kinds.count("dashboard") == 1 and "run in repository" in kinds
    ran = "\n".join(b.body for b in blocks if b.kind not in ("skip", "settings"))
    # The finding of issue 21: the password is installed only after the broker's step
    # wrote it, and every edge-runtime call names the venv's binary (a Pi has no other).
    assert ran.index("secrets/$user.password") < ran.index('"secrets/$node.password"')
    assert "edge-runtime acl" in ran
    for line in ran.splitlines():
        words = line.partition("#")[0].split()
        assert "edge-runtime" not in words, line  # a bare command: not on a Pi's PATH


def test_an_unmarked_block_is_refused() -> None:
    with pytest.raises(ValueError, match="line 3: a sh block without a check-install marker"):
        check_install.parse_blocks("text\n\n```sh\nls\n```\n")


def test_paths_move_into_the_sandbox_once() -> None:
    root = Path("/tmp/box")
    text = (
        "sudo install x /etc/edge-runtime/topology.toml\n"
        "LoadCredential=mqtt-password:/etc/edge-runtime/%i.password\n"
        "EnvironmentFile=-/etc/edge-runtime/%i.env\n"
        "password_file /etc/mosquitto/passwd\n"
        "/opt/edge-runtime/bin/edge-runtime --version /etc/other\n"
    )
    out = check_install.sandboxed(text, root)
    assert out.count("/tmp/box/etc/edge-runtime/") == 3
    assert "/tmp/box/etc/mosquitto/passwd" in out and "/tmp/box/opt/edge-runtime/bin" in out
    assert " /etc/other" in out
    assert check_install.sandboxed(out, Path("/x")).count("/x/") == 0  # never twice


def test_exec_start_expands_like_systemd() -> None:
    env = {"EDGE_BROKER": "mqtt://h:1", "EDGE_AGENT_OPTIONS": "--ca-file /c --log-level info"}
    argv = check_install.expand_exec(
        "/bin/a agent --broker ${EDGE_BROKER} $EDGE_AGENT_OPTIONS $UNSET --x=${EDGE_BROKER}", env
    )
    assert argv == [
        "/bin/a", "agent", "--broker", "mqtt://h:1", "--ca-file", "/c", "--log-level", "info",
        "--x=mqtt://h:1",
    ]  # fmt: skip


def _missing_requirement() -> str | None:
    if os.geteuid() != 0:
        return "runs the install as root (adduser, install -o, the agents' user)"
    for tool in ("mosquitto", "mosquitto_passwd", "openssl", "setpriv", "bash"):
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
            return f"{tool} is not installed"
    if subprocess.run(["/usr/bin/python3", "-c", "import venv, ensurepip"],
                      capture_output=True, check=False).returncode != 0:  # fmt: skip
        return "Debian's python3-venv is not installed"
    return None


# About 90 s on the development machine (2 shared cores): building the wheel, installing
# numpy and scipy into the venv, 11 agents, the replay of 7712 readings, the dashboard.
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_install_md_runs_in_order_on_a_clean_sandbox() -> None:
    missing = _missing_requirement()
    if missing is not None:
        pytest.skip(missing)
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    # nor the caller's PYTHONPATH: with a checkout holding an egg-info on it, the sandbox's
    # pip would find edge-runtime "already installed" and skip the wheel
    env.pop("PYTHONPATH", None)
    if LOCAL_INDEX.is_dir() and "PIP_INDEX_URL" not in env and "PIP_NO_INDEX" not in env:
        env["PIP_INDEX_URL"] = LOCAL_INDEX.as_uri()  # no traffic beyond this machine
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--timeout", "800"],
        capture_output=True, text=True, timeout=860, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "check-install: OK: " in proc.stdout, proc.stdout[-3000:]
    assert "check-install: dashboard: 11 of 11 nodes online" in proc.stdout
    assert '"unconfirmed_total": 0' in proc.stdout  # the replay: every reading durable
