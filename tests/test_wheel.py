"""The bare wheel, as a device installs it: no extras, nothing of the tests or benchmarks.

The module builds the wheel with ``scripts/build-wheel.sh``, creates a clean virtual
environment (``python -m venv``, no system site-packages) and installs the wheel into it
without extras, then checks what got installed and runs a leaf and the root from that
environment against a real Mosquitto (the ``mosquitto`` fixture: 127.0.0.1, a free port
above 20000).

The dependencies come from a wheelhouse: ``pip download`` of exactly the versions installed
in the test's own environment, kept in pytest's cache folder, so that a later run installs
them with ``--no-index`` (the first run needs the package index; building the wheel always
asks it for the build backend, setuptools, unless pip's own cache has it). The install uses
``--no-compile`` (no .pyc files written for numpy and scipy: about 3 s instead of 11 s) and
the test environment's pip (``pip --python``), so the fresh venv holds no pip either.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from email.parser import Parser
from importlib import metadata
from pathlib import Path
from typing import Any

import aiomqtt
import pytest
from helpers import low_rank_data
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from edge_runtime.broker import LocalMosquitto
from edge_runtime.wire import decode_subspace

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / "scripts" / "build-wheel.sh"

# What an agent imports (pyproject.toml's [project] dependencies), and nothing else.
AGENT_DEPENDENCIES = {"aiomqtt", "numpy", "scipy", "msgpack", "structlog", "threadpoolctl"}
# Modules of the test and bench extras: none may be importable in the device's venv.
FORBIDDEN_MODULES = (
    "pytest",
    "pytest_asyncio",
    "pytest_timeout",
    "xdist",
    "hypothesis",
    "mpmath",
    "ruff",
    "cryptography",
    "sklearn",
    "matplotlib",
)
STEP_TIMEOUT_S = 240.0  # any one build, download or install step

# 11-36 s with Python 3.11 and 28 s with 3.13 on the development machine (2 shared cores), most
# of it building the wheel, downloading and installing numpy and scipy.
pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class BareInstall:
    wheel: Path
    venv: Path
    base_requirements: tuple[Requirement, ...]
    closure: frozenset[str]  # canonical names the wheel's base dependencies pull in
    install_s: float  # venv creation + pip install

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def edge_runtime(self) -> Path:
        return self.venv / "bin" / "edge-runtime"


def _clean_env() -> dict[str, str]:
    """This process's environment without anything that leaks our own packages in."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PYTHON") and key not in ("VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")
    }
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=STEP_TIMEOUT_S, **kwargs)


def _base_requirements(wheel: Path) -> tuple[Requirement, ...]:
    """The wheel's Requires-Dist entries that apply without extras (on this Python)."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(name).decode())
    requirements = [Requirement(line) for line in meta.get_all("Requires-Dist") or []]
    return tuple(r for r in requirements if r.marker is None or r.marker.evaluate({"extra": ""}))


def _pins(requirements: tuple[Requirement, ...]) -> dict[str, str]:
    """Installed version of every distribution ``requirements`` pull in, recursively."""
    pins: dict[str, str] = {}
    todo = list(requirements)
    for _ in range(1000):  # bounded walk of the dependency graph
        if not todo:
            break
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in pins:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{req.name} (a dependency of the wheel) is not installed here")
        pins[name] = dist.version
        for line in dist.requires or []:
            sub = Requirement(line)
            if sub.marker is None or sub.marker.evaluate({"extra": ""}):
                todo.append(sub)
    else:
        pytest.fail("dependency walk did not end")
    return pins


def _wheelhouse(config: pytest.Config, tmp: Path) -> Path:
    cache = getattr(config, "cache", None)
    if cache is None:  # -p no:cacheprovider
        return tmp / "wheelhouse"
    return Path(cache.mkdir("edge-runtime-wheelhouse"))


@pytest.fixture(scope="module")
def bare(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[BareInstall]:
    tmp = tmp_path_factory.mktemp("wheel")
    env = _clean_env()

    # 1. The wheel, as scripts/build-wheel.sh builds it, with this Python.
    build = _run(
        ["bash", str(BUILD_SCRIPT), str(tmp / "dist")], env={**env, "PYTHON": sys.executable}
    )
    assert build.returncode == 0, build.stderr
    wheel = Path(build.stdout.strip().splitlines()[-1])
    assert wheel.is_file() and wheel.suffix == ".whl", build.stdout
    base = _base_requirements(wheel)

    # 2. The dependencies, pinned to what this environment runs, in a wheelhouse.
    pins = _pins(base)
    constraints = tmp / "constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in pins.items()))
    wheelhouse = _wheelhouse(pytestconfig, tmp)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    download = [*pip, "download", "--only-binary=:all:", "-d", str(wheelhouse)]
    download += ["-c", str(constraints), *(str(r) for r in base)]
    offline = _run([*download, "--no-index", "--find-links", str(wheelhouse)], env=env)
    if offline.returncode != 0:  # first run, or versions changed: ask the index
        online = _run(download, env=env)
        assert online.returncode == 0, f"pip download failed:\n{online.stderr}"

    # 3. A clean venv (no pip: this environment's pip installs into it) and the bare wheel.
    venv = tmp / "venv"
    started = time.monotonic()
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=env)
    assert made.returncode == 0, made.stderr
    install = [*pip, "--python", str(venv / "bin" / "python"), "install", "--no-compile"]
    install += ["--no-index", "--find-links", str(wheelhouse), "-c", str(constraints), str(wheel)]
    installed = _run(install, env=env)
    assert installed.returncode == 0, installed.stderr
    install_s = time.monotonic() - started

    yield BareInstall(wheel, venv, base, frozenset(pins), install_s)


def _inspect(bare: BareInstall) -> dict[str, object]:
    """Ask the venv's own Python (isolated mode: no cwd, no user site) what it holds."""
    script = f"""
import importlib.util, json
from importlib import metadata
import edge_runtime.agents
print(json.dumps({{
    "found": [m for m in {FORBIDDEN_MODULES!r} if importlib.util.find_spec(m) is not None],
    "dists": sorted(d.metadata["Name"] for d in metadata.distributions()),
    "edge_runtime": edge_runtime.__file__,
}}))
"""
    proc = _run([str(bare.python), "-I", "-c", script], env=_clean_env(), cwd=bare.venv)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_wheel_requires_exactly_what_an_agent_imports(bare: BareInstall) -> None:
    names = {canonicalize_name(r.name) for r in bare.base_requirements}
    assert names == AGENT_DEPENDENCIES
    assert bare.wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(bare.wheel) as zf:
        files = set(zf.namelist())
    # The broker template is a symlink in the source tree: the wheel must hold its content.
    assert "edge_runtime/resources/mosquitto.conf" in files
    assert not any(f.startswith(("tests/", "benchmarks/")) for f in files)


def test_bare_venv_has_no_test_or_bench_dependency(bare: BareInstall) -> None:
    seen = _inspect(bare)
    assert seen["found"] == [], f"test/bench modules in the device venv: {seen['found']}"
    dists = {canonicalize_name(str(name)) for name in seen["dists"]}  # type: ignore[union-attr]
    assert dists == {"edge-runtime"} | bare.closure, sorted(dists)
    # The agent code comes from the venv, not from this source tree.
    assert Path(str(seen["edge_runtime"])).is_relative_to(bare.venv)
    print(f"venv + install of the bare wheel: {bare.install_s:.1f} s")


TOPOLOGY = """
name = "wheel-test"
prefix = "{prefix}"

[defaults]
rank = 2
block_size = 5
idle_flush_s = 0.2

[[nodes]]
id = "root"

[[nodes]]
id = "leaf-1"
parent = "root"
sensor_topic = "{prefix}-sensors/leaf-1"
"""
N_READINGS = 40
N_FEATURES = 4


def _vm_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _stop(proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> int:
    """SIGTERM, then SIGKILL after ``timeout_s``; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        return -signal.SIGKILL


@pytest.mark.mqtt
async def test_agents_from_the_bare_wheel_reach_the_root(
    bare: BareInstall, mosquitto: LocalMosquitto, unique_topic: str, tmp_path: Path
) -> None:
    prefix = unique_topic.replace("test/", "wheel/")
    topology = tmp_path / "topology.toml"
    topology.write_text(TOPOLOGY.format(prefix=prefix))
    state = tmp_path / "state"
    state.mkdir()
    host, port = mosquitto.address.host, mosquitto.address.port
    leaf_path, root_path = f"{prefix}/root/leaf-1", f"{prefix}/root"

    def agent(node: str, *extra: str) -> subprocess.Popen[bytes]:
        args = [str(bare.edge_runtime), "agent", "--topology", str(topology), "--node", node]
        args += ["--broker", mosquitto.url, *extra]
        log = (tmp_path / f"{node}.log").open("wb")
        try:
            return subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=_clean_env()
            )
        finally:
            log.close()

    def logs() -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in tmp_path.glob("*.log")
        )

    readings = low_rank_data(N_READINGS, N_FEATURES, 2, seed=5)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(agent("root"))
        procs.append(agent("leaf-1", "--state-dir", str(state)))
        leaf = procs[1]
        leaf_n = model_n = -1
        online: set[str] = set()
        both_online = {f"{leaf_path}/status", f"{root_path}/status"}
        sent = False
        async with aiomqtt.Client(host, port, timeout=10) as client:
            await client.subscribe(f"{prefix}/#", qos=1)
            try:
                async with asyncio.timeout(60):
                    async for message in client.messages:
                        topic, payload = str(message.topic), bytes(message.payload)  # type: ignore[arg-type]
                        if topic.endswith("/status") and payload == b"online":
                            online.add(topic)
                            if not sent and online == both_online:
                                sent = True
                                for row in readings:
                                    await client.publish(
                                        f"{prefix}-sensors/leaf-1", json.dumps(row.tolist()), qos=1
                                    )
                        elif topic == f"{leaf_path}/subspace":
                            leaf_n = decode_subspace(payload).subspace.n_samples
                        elif topic == f"{prefix}/root/model":
                            model_n = decode_subspace(payload).subspace.n_samples
                        if leaf_n == model_n == N_READINGS:
                            break
            except TimeoutError:
                pytest.fail(f"online={online} leaf_n={leaf_n} model_n={model_n}\n{logs()}")
        rss_kib = _vm_rss_kib(leaf.pid)
        print(f"leaf agent from the bare wheel: VmRSS {rss_kib / 1024:.1f} MiB")
        # devices/edge-runtime-agent@.service caps each agent at MemoryMax=256M.
        assert 0 < rss_kib < 256 * 1024
        codes = [_stop(p) for p in procs]
        assert codes == [0, 0], logs()
        assert (state / "leaf-1.ckpt").is_file(), logs()
    finally:
        for proc in procs:
            _stop(proc, timeout_s=5)
