"""Issue 23, Done-when bullets 1 and 2, measured as deployed against a dynsec Mosquitto.

``python -m benchmarks.fleet.membership [--out DIR]``

1. A `LocalMosquitto` with the dynamic security plugin; the Motes tree of
   ``topologies/motes-light.toml`` with ``open = true`` on site-a and site-b, deployed with
   ``edge-runtime deploy``; the 8 leaves enrolled with ``edge-runtime enroll``; the root, the
   two sites, the replay and this script's observer each get their own client (one
   connection per user name: ``use_username_as_clientid``). 11 ``edge-runtime agent``
   processes without a topology file, each with its own ``--state-dir``; ``edge-runtime
   replay --rate 200`` in the background.
2. During the replay: ``enroll pi-09 --parent site-a``, pi-09 started with only the broker
   URL, its credentials and its node id, fed rows of the Motes data on its sensor topic. The
   time from its first snapshot to the root's model naming it in its provenance, against
   ``publish_max_interval_s + 1 s``; the broker's and agents' PIDs before and after.
3. After the replay: ``retire pi-04 --forget``: the time until the root's ``n_samples``
   drops by exactly pi-04's count, and the root's error ratio on the rows it still covers;
   the control ``retire pi-08`` (no ``--forget``) changes nothing in the root's ``n_samples``.

Every wait is bounded; every process started here is stopped by its pid, also on error.
Writes ``<out>/membership.md`` (default ``benchmarks/report``); when a step fails, also the
processes' logs in ``<out>/membership-logs``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiomqtt
import numpy as np

from benchmarks.processes import edge_runtime_command, stop_processes
from benchmarks.reporting import Check, checks_table
from benchmarks.schema import environment, read_result, revive, write_result
from edge_runtime.agents.common.core.policy import LEAF_PUBLISH
from edge_runtime.broker import LocalMosquitto
from edge_runtime.broker.dynsec import Acl, DynsecClient
from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import error_ratio
from edge_runtime.runner import screen_data
from edge_runtime.topology import load_topology
from edge_runtime.wire import SubspaceMessage, decode_subspace, encode_readings

REPO = Path(__file__).resolve().parents[2]
SOURCE_TOPOLOGY = REPO / "topologies" / "motes-light.toml"
DEFAULT_OUT = REPO / "benchmarks" / "report"
INFRA_ROLE = "bench-infra"
INFRA = ("root", "site-a", "site-b", "replay", "bench")
NEWCOMER, NEWCOMER_PARENT = "pi-09", "site-a"
NEWCOMER_ROWS = 640
FORGOTTEN, KEPT = "pi-04", "pi-08"
RATE = 200.0
CLI_TIMEOUT_S = 60.0
ONLINE_TIMEOUT_S = 60.0
REPLAY_TIMEOUT_S = 240.0
COVER_TIMEOUT_S = 120.0


class StepError(RuntimeError):
    """A step that did not happen within its bound; the message says which."""


def open_variant(text: str) -> str:
    """The topology's text with ``open = true`` on site-a and site-b (the rest as is)."""
    out = text
    for site in ("site-a", "site-b"):
        block = f'id = "{site}"\nparent = "root"\n'
        if block not in out:
            raise StepError(f"{SOURCE_TOPOLOGY}: no [[nodes]] block {block!r}")
        out = out.replace(block, block + "open = true\n")
    return out


class Observer:
    """One MQTT client (user ``bench``): follows the root's model and the newcomer's snapshot
    and status, and publishes the newcomer's readings."""

    def __init__(self, broker: LocalMosquitto, password: str, prefix: str) -> None:
        self.client = aiomqtt.Client(
            broker.host, broker.port, username="bench", password=password, timeout=10
        )
        self.model_topic = f"{prefix}/root/model"
        self.newcomer_topic = f"{prefix}/root/{NEWCOMER_PARENT}/{NEWCOMER}"
        self.models: list[tuple[float, SubspaceMessage]] = []
        self.newcomer_first: float | None = None
        self.newcomer_online = False
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Observer:
        await self.client.__aenter__()
        for topic in (
            self.model_topic,
            f"{self.newcomer_topic}/subspace",
            f"{self.newcomer_topic}/status",
        ):
            await self.client.subscribe(topic, qos=1)
        self._task = asyncio.create_task(self._listen())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
                await self._task
        with contextlib.suppress(aiomqtt.MqttError):
            await self.client.__aexit__(None, None, None)

    async def _listen(self) -> None:
        async for message in self.client.messages:
            now, topic, payload = time.monotonic(), str(message.topic), bytes(message.payload)
            if topic == f"{self.newcomer_topic}/status":
                self.newcomer_online = payload == b"online"
            elif not payload:
                continue
            elif topic == self.model_topic:
                with contextlib.suppress(Exception):
                    self.models.append((now, decode_subspace(payload)))
            elif self.newcomer_first is None:
                self.newcomer_first = now

    @property
    def model(self) -> SubspaceMessage | None:
        return self.models[-1][1] if self.models else None

    async def wait_model(
        self, test: Callable[[SubspaceMessage], bool], timeout_s: float, what: str
    ) -> tuple[float, SubspaceMessage]:
        """The first model (seen from now on, or the current one) passing ``test``."""
        deadline, seen = time.monotonic() + timeout_s, max(0, len(self.models) - 1)
        while time.monotonic() < deadline:
            for when, model in self.models[seen:]:
                if test(model):
                    return when, model
            seen = max(seen, len(self.models) - 1)
            await asyncio.sleep(0.02)
        raise StepError(
            f"no root model {what} within {timeout_s:.0f} s (last: {_describe(self.model)})"
        )


def _describe(model: SubspaceMessage | None) -> str:
    if model is None:
        return "none"
    return f"n_samples {model.n_samples}, provenance {dict(model.provenance)}"


async def wait_for(test: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``test`` until it holds; the time it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if test():
            return time.monotonic() - start
        await asyncio.sleep(0.02)
    raise StepError(f"{what}: not within {timeout_s:.0f} s")


class Bench:
    """The broker, the processes and their credentials; `close` stops them all."""

    def __init__(self, out: Path, work: Path) -> None:
        self.out, self.work = out, work
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.broker = LocalMosquitto(dynsec=True)
        self.topology_path = work / "motes-light-open.toml"
        self.passwords: dict[str, str] = {}
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.others: list[subprocess.Popen[bytes]] = []
        self.commands: list[str] = []

    def env(self, user: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("EDGE_MQTT_")}
        env["EDGE_MQTT_USERNAME"] = user
        password_file = self.work / f"{user}.password"
        if password_file.exists():
            env["EDGE_MQTT_PASSWORD_FILE"] = str(password_file)
        else:
            env["EDGE_MQTT_PASSWORD"] = self.passwords[user]
        return env

    def admin_env(self) -> dict[str, str]:
        self.passwords.setdefault("admin", str(self.broker.admin_password))
        return self.env(str(self.broker.admin_username))

    async def cli(self, *args: str, user: str | None = None) -> str:
        """``edge-runtime ARGS --broker URL`` as ``user`` (default the admin), bounded; its
        stdout. A non-zero exit raises `StepError` with the command and its output."""
        argv = [*edge_runtime_command(), *args, "--broker", self.broker.url]
        shown = "edge-runtime " + " ".join(args) + f" --broker {self.broker.url}"
        self.commands.append(shown)
        env = self.admin_env() if user is None else self.env(user)
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        try:
            async with asyncio.timeout(CLI_TIMEOUT_S):
                out, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise StepError(f"{shown}: no exit within {CLI_TIMEOUT_S:.0f} s") from None
        if proc.returncode != 0:
            raise StepError(f"{shown}: exit {proc.returncode}\n{out.decode()}{err.decode()}")
        return out.decode()

    def spawn(self, name: str, args: list[str], user: str) -> subprocess.Popen[bytes]:
        argv = [*edge_runtime_command(), *args, "--broker", self.broker.url]
        self.commands.append(f"EDGE_MQTT_USERNAME={user} edge-runtime " + " ".join(args))
        with (self.logs / f"{name}.log").open("wb") as log:
            return subprocess.Popen(
                argv, env=self.env(user), stdout=log, stderr=subprocess.STDOUT,
                cwd=self.work, start_new_session=True,
            )  # fmt: skip

    def start_agent(self, node: str, state: bool = True) -> None:
        args = ["agent", "--node", node]
        if state:
            (self.work / "state" / node).mkdir(parents=True, exist_ok=True)
            args += ["--state-dir", str(self.work / "state" / node)]
        self.agents[node] = self.spawn(node, args, node)

    def pids(self) -> dict[str, int | None]:
        """The broker's and every agent's pid, None for one that has exited."""
        found: dict[str, int | None] = {"broker": self.broker.pid if self.broker.running else None}
        for node, proc in self.agents.items():
            found[node] = proc.pid if proc.poll() is None else None
        return found

    def close(self) -> None:
        stop_processes([*self.others, *self.agents.values()])
        self.broker.stop()


async def setup(bench: Bench, leaves: list[str]) -> None:
    """Broker, clients, deployment, the 11 agents (bullet 1's set-up)."""
    bench.broker.start()
    bench.topology_path.write_text(open_variant(SOURCE_TOPOLOGY.read_text()), encoding="utf-8")
    grants = [
        Acl(kind, "#") for kind in ("publishClientSend", "publishClientReceive", "subscribePattern")
    ]
    async with DynsecClient(
        bench.broker.host, bench.broker.port, username=bench.broker.admin_username,
        password=bench.broker.admin_password,
    ) as dynsec:  # fmt: skip
        await dynsec.create_role(INFRA_ROLE, grants, textdescription="aggregators, replay, bench")
        for user in INFRA:
            bench.passwords[user] = secrets.token_urlsafe(18)
            await dynsec.create_client(user, password=bench.passwords[user], roles=[INFRA_ROLE])
    topo = str(bench.topology_path)
    await bench.cli("deploy", topo)
    topology = load_topology(bench.topology_path)
    for leaf in leaves:
        parent = topology.nodes[leaf].parent or ""
        await bench.cli(
            "enroll", leaf, "--parent", parent, "--topology", topo,
            "--credentials-file", str(bench.work / f"{leaf}.password"),
        )  # fmt: skip
    for node in ("root", "site-a", "site-b", *leaves):
        bench.start_agent(node)


async def measure(bench: Bench, rows: list[list[str]], checks: list[Check]) -> None:
    """Bullets 1 and 2; appends what it measured to ``rows`` and ``checks``."""
    topology = load_topology(SOURCE_TOPOLOGY)
    leaves = topology.leaves()
    data = load_dataset("motes-light")
    screen = screen_data(topology, data)
    expected = dict(screen.accepted)
    leaf_max = topology.nodes[leaves[0]].publish_max_interval_s or LEAF_PUBLISH.max_interval_s
    bound_s = leaf_max + 1.0
    await setup(bench, leaves)
    async with Observer(bench.broker, bench.passwords["bench"], topology.prefix) as obs:
        replay = bench.spawn(
            "replay",
            ["replay", "--topology", str(bench.topology_path), "--rate", f"{RATE:g}"],
            "replay",
        )
        bench.others.append(replay)
        await obs.wait_model(lambda m: m.n_samples > 0, ONLINE_TIMEOUT_S, "with any samples")
        before = bench.pids()
        rows.append(["pids before enroll", _pids(before)])

        # Bullet 1: a device joins during the replay.
        password_file = bench.work / f"{NEWCOMER}.password"
        await bench.cli(
            "enroll", NEWCOMER, "--parent", NEWCOMER_PARENT, "--topology",
            str(bench.topology_path), "--credentials-file", str(password_file),
        )  # fmt: skip
        bench.start_agent(NEWCOMER, state=False)
        await wait_for(lambda: obs.newcomer_online, ONLINE_TIMEOUT_S, f"{NEWCOMER} online")
        fed = data[np.arange(NEWCOMER_ROWS) * (data.shape[0] // NEWCOMER_ROWS)]
        sensor = f"sensors/{NEWCOMER}"
        for lo in range(0, NEWCOMER_ROWS, 64):
            payload = encode_readings(fed[lo : lo + 64], source=f"bench:{NEWCOMER}", seq=lo)
            await obs.client.publish(sensor, payload, qos=1)
            await asyncio.sleep(64 / RATE)
        await wait_for(
            lambda: obs.newcomer_first is not None, bound_s * 4, f"{NEWCOMER}'s first snapshot"
        )
        first = obs.newcomer_first
        assert first is not None
        seen_at, _ = await obs.wait_model(
            lambda m: m.provenance.get(NEWCOMER, 0) > 0, bound_s * 4, f"naming {NEWCOMER}"
        )
        latency = seen_at - first
        replay_running = replay.poll() is None
        checks.append(
            Check(
                f"{NEWCOMER} enrolled under {NEWCOMER_PARENT}, started with URL, credentials "
                "and node id: its first snapshot -> root model with it in its provenance",
                f"{latency:.2f} s (replay still running: {replay_running})",
                f"<= publish_max_interval_s + 1 = {bound_s:g} s",
                latency <= bound_s,
            )
        )
        after = bench.pids()
        rows.append(["pids after pi-09 joined", _pids(after)])
        same = all(after[k] == v and v is not None for k, v in before.items())
        checks.append(
            Check(
                "no broker or agent restarted (same PIDs before and after)",
                f"{sum(after[k] == v for k, v in before.items())}/{len(before)} same",
                "all same",
                same,
            )
        )

        # Everything replayed and covered before the retirements.
        try:
            await asyncio.to_thread(replay.wait, REPLAY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise StepError(f"replay did not finish within {REPLAY_TIMEOUT_S:.0f} s") from None
        rows.append(["replay exit code", str(replay.returncode)])
        full = {**expected, NEWCOMER: NEWCOMER_ROWS}
        _, model = await obs.wait_model(
            lambda m: dict(m.provenance) == full, COVER_TIMEOUT_S, f"covering {full}"
        )
        rows.append(["root before retire", _describe(model)])

        # Bullet 2: retire pi-04 --forget.
        count = model.provenance[FORGOTTEN]
        n_before = model.n_samples
        started = time.monotonic()
        out = await bench.cli(
            "retire", FORGOTTEN, "--forget", "--topology", str(bench.topology_path)
        )
        returned = time.monotonic()
        rows.append([f"retire {FORGOTTEN} --forget", " / ".join(out.strip().splitlines())])
        seen_at, model = await obs.wait_model(
            lambda m: FORGOTTEN not in m.provenance, bound_s * 4, f"without {FORGOTTEN}"
        )
        kept = [leaf for leaf in leaves if leaf != FORGOTTEN]
        split = topology.split_rows(data.shape[0])
        reference = np.concatenate([data[split[leaf][screen.kept[leaf]]] for leaf in kept] + [fed])
        ratio = error_ratio(reference, model.subspace.basis)
        drop = n_before - model.n_samples
        waited = seen_at - started
        checks.append(
            Check(
                f"retire {FORGOTTEN} --forget: root n_samples drops by exactly its count",
                f"{n_before} -> {model.n_samples} (-{drop}; {FORGOTTEN} had {count})",
                f"-{count}",
                drop == count and dict(model.provenance) == {k: full[k] for k in [*kept, NEWCOMER]},
            )
        )
        checks.append(
            Check(
                f"retire {FORGOTTEN} --forget: time to the root model without it, and its "
                "error ratio on the remaining leaves' rows",
                f"{waited:.2f} s from the command's start (the command took "
                f"{returned - started:.2f} s); error ratio {ratio:.6f} on "
                f"{reference.shape[0]} rows",
                f"<= {bound_s:g} s; <= 1.001",
                waited <= bound_s and ratio <= 1.001,
            )
        )

        # Control: retire without --forget changes nothing.
        n_kept = model.n_samples
        mark = len(obs.models)
        out = await bench.cli("retire", KEPT, "--topology", str(bench.topology_path))
        rows.append([f"retire {KEPT}", " / ".join(out.strip().splitlines())])
        await asyncio.sleep(bound_s)
        later = [m.n_samples for _, m in obs.models[mark:]]
        final = obs.model
        assert final is not None
        checks.append(
            Check(
                f"control: retire {KEPT} (no --forget) leaves the root's n_samples as is",
                f"{n_kept} -> {final.n_samples} over {bound_s:g} s ({len(later)} models, "
                f"{KEPT} still {final.provenance.get(KEPT)})",
                "unchanged",
                all(n == n_kept for n in later) and final.provenance.get(KEPT) == full[KEPT],
            )
        )
        rows.append(["pids at the end", _pids(bench.pids())])


def _pids(pids: dict[str, int | None]) -> str:
    return ", ".join(f"{k} {v}" for k, v in pids.items())


def _cell(text: str) -> str:
    return re.sub(r"[|\n]", " ", text)


def render(checks: list[Check], rows: list[list[str]], commands: list[str], error: str) -> str:
    lines = ["# Membership: enrol, join, forget (issue 23, Done-when 1 and 2)", ""]
    lines += [checks_table(checks, item="Done-when"), ""]
    if error:
        lines += ["**Stopped early:**", "", "```", error.strip(), "```", ""]
    lines += ["| step | observed |", "|---|---|"]
    lines += [f"| {k} | {_cell(v)} |" for k, v in rows]
    lines += ["", "Commands (broker URL and credentials from the run):", "", "```"]
    lines += [*commands, "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet.membership")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="report folder")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[list[str]] = []
    checks: list[Check] = []
    error = ""
    with tempfile.TemporaryDirectory(prefix="membership-") as work:
        bench = Bench(args.out, Path(work))
        try:
            asyncio.run(measure(bench, rows, checks))
        except (StepError, aiomqtt.MqttError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            bench.close()
            if error:
                shutil.copytree(bench.logs, args.out / "membership-logs", dirs_exist_ok=True)
    write_result(
        args.out / "membership.json",
        "membership",
        {"commands": bench.commands},
        {"checks": checks, "steps": rows},
        {},
        {**environment(), "error": error},
    )
    print(render_stored(args.out))
    return 0 if not error and all(c.passed for c in checks) else 1


def render_stored(out: Path) -> str:
    """Rewrite ``out/membership.md`` from ``out/membership.json``, measuring nothing."""
    doc = read_result(out / "membership.json", "membership")
    checks, steps = revive(list[Check], doc["rows"]["checks"]), doc["rows"]["steps"]
    text = render(checks, steps, doc["parameters"]["commands"], doc["environment"]["error"])
    (out / "membership.md").write_text(text, encoding="utf-8")
    return text


if __name__ == "__main__":
    sys.exit(main())
