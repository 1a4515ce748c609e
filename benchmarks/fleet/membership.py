"""Enrol, join and forget leaves as deployed against a dynsec Mosquitto (``python -m
benchmarks.fleet.membership [--out DIR]``, about a minute): the Motes tree with open sites,
one ``edge-runtime agent`` process per node with its own user; during the replay ``enroll
pi-09`` joins (time to the root model naming it, same PIDs), after it ``retire pi-04
--forget`` (the root's ``n_samples`` drops by its count in time) and the control ``retire
pi-08``. Writes ``membership.json`` and ``membership.md`` in ``--out``.
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
from typing import TypeVar

import aiomqtt
import numpy as np

from benchmarks.processes import edge_runtime_command, stop_processes
from benchmarks.registry import REPORT_DIR
from benchmarks.reporting import Check, checks_table, prose, table
from benchmarks.schema import environment, read_result, revive, write_result
from edge_runtime.agents.common.core.policy import LEAF_PUBLISH
from edge_runtime.broker import LocalMosquitto
from edge_runtime.broker.dynsec import Acl, DynsecClient
from edge_runtime.datasets import load_dataset
from edge_runtime.fpca import error_ratio
from edge_runtime.runner import screen_data
from edge_runtime.topology import load_topology
from edge_runtime.wire import SubspaceMessage, decode_subspace, encode_readings

SOURCE_TOPOLOGY = REPORT_DIR.parents[1] / "topologies" / "motes-light.toml"
INFRA = ("root", "site-a", "site-b", "replay", "bench")  #: users of the role "bench-infra"
NEWCOMER, NEWCOMER_PARENT, NEWCOMER_ROWS = "pi-09", "site-a", 640
FORGOTTEN, KEPT = "pi-04", "pi-08"
RATE = 200.0  #: readings/s of the replay and of the newcomer's feed
CLI_TIMEOUT_S, ONLINE_TIMEOUT_S, REPLAY_TIMEOUT_S, COVER_TIMEOUT_S = 60.0, 60.0, 240.0, 120.0
T = TypeVar("T")


class StepError(RuntimeError):
    """A step that did not happen within its bound; the message says which."""


async def _until(found: Callable[[], T | None], timeout_s: float, error: Callable[[], str]) -> T:
    """Poll ``found`` every 20 ms until it returns something; `StepError` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (value := found()) is not None:
            return value
        await asyncio.sleep(0.02)
    raise StepError(error())


def open_variant(text: str) -> str:
    """The topology's text with ``open = true`` on site-a and site-b (the rest as is)."""
    for site in ("site-a", "site-b"):
        block = f'id = "{site}"\nparent = "root"\n'
        if block not in text:
            raise StepError(f"{SOURCE_TOPOLOGY}: no [[nodes]] block {block!r}")
        text = text.replace(block, block + "open = true\n")
    return text


def _describe(model: SubspaceMessage | None) -> str:
    if model is None:
        return "none"
    return f"n_samples {model.n_samples}, provenance {dict(model.provenance)}"


class Observer:
    """The client of user ``bench``: follows the root's model and the newcomer's snapshot
    and status (times from `time.monotonic`), and publishes the newcomer's readings."""

    def __init__(self, broker: LocalMosquitto, password: str, prefix: str) -> None:
        self.client = aiomqtt.Client(
            broker.host, broker.port, username="bench", password=password, timeout=10
        )
        self.model_topic = f"{prefix}/root/model"
        self.newcomer_topic = f"{prefix}/root/{NEWCOMER_PARENT}/{NEWCOMER}"
        self.models: list[tuple[float, SubspaceMessage]] = []
        self.newcomer_first: float | None = None
        self.newcomer_online = False

    async def __aenter__(self) -> Observer:
        await self.client.__aenter__()
        for topic in ("subspace", "status"):
            await self.client.subscribe(f"{self.newcomer_topic}/{topic}", qos=1)
        await self.client.subscribe(self.model_topic, qos=1)
        self._task = asyncio.create_task(self._listen())
        return self

    async def __aexit__(self, *exc: object) -> None:
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
        seen = max(0, len(self.models) - 1)

        def found() -> tuple[float, SubspaceMessage] | None:
            return next(((at, m) for at, m in self.models[seen:] if test(m)), None)

        def error() -> str:
            return f"no root model {what} within {timeout_s:.0f} s (last: {_describe(self.model)})"

        return await _until(found, timeout_s, error)


class Bench:
    """The broker, the processes and their credentials; `close` stops them all."""

    def __init__(self, work: Path) -> None:
        self.work, self.logs = work, work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.broker = LocalMosquitto(dynsec=True)
        self.topology_path = work / "motes-light-open.toml"
        self.passwords: dict[str, str] = {}
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.others: list[subprocess.Popen[bytes]] = []
        self.commands: list[str] = []

    def env(self, user: str | None) -> dict[str, str]:
        """This environment as ``user`` (None: the broker's admin), with its password."""
        if user is None:
            user = str(self.broker.admin_username)
            self.passwords.setdefault(user, str(self.broker.admin_password))
        env = {k: v for k, v in os.environ.items() if not k.startswith("EDGE_MQTT_")}
        env["EDGE_MQTT_USERNAME"] = user
        if (password_file := self.work / f"{user}.password").exists():
            env["EDGE_MQTT_PASSWORD_FILE"] = str(password_file)
        else:
            env["EDGE_MQTT_PASSWORD"] = self.passwords[user]
        return env

    async def cli(self, *args: str, user: str | None = None) -> str:
        """``edge-runtime ARGS --broker URL`` as ``user`` (default the admin), bounded; its
        stdout. A non-zero exit raises `StepError` with the command and its output."""
        shown = "edge-runtime " + " ".join(args) + f" --broker {self.broker.url}"
        self.commands.append(shown)
        proc = await asyncio.create_subprocess_exec(
            *edge_runtime_command(), *args, "--broker", self.broker.url, env=self.env(user),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
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
        self.commands.append(f"EDGE_MQTT_USERNAME={user} edge-runtime " + " ".join(args))
        with (self.logs / f"{name}.log").open("wb") as log:
            return subprocess.Popen(
                [*edge_runtime_command(), *args, "--broker", self.broker.url], env=self.env(user),
                stdout=log, stderr=subprocess.STDOUT, cwd=self.work, start_new_session=True,
            )  # fmt: skip

    def start_agent(self, node: str, state: bool = True) -> None:
        args = ["agent", "--node", node]
        if state:
            (self.work / "state" / node).mkdir(parents=True, exist_ok=True)
            args += ["--state-dir", str(self.work / "state" / node)]
        self.agents[node] = self.spawn(node, args, node)

    def pids(self) -> dict[str, int | None]:
        """The broker's and every agent's pid, None for one that has exited."""
        found = {"broker": self.broker.pid if self.broker.running else None}
        return found | {n: p.pid if p.poll() is None else None for n, p in self.agents.items()}

    def close(self) -> None:
        stop_processes([*self.others, *self.agents.values()])
        self.broker.stop()

    async def setup(self, leaves: list[str]) -> None:
        """Broker, clients, deployment, enrolment, the 11 agents (bullet 1's set-up)."""
        self.broker.start()
        self.topology_path.write_text(open_variant(SOURCE_TOPOLOGY.read_text()), encoding="utf-8")
        kinds = ("publishClientSend", "publishClientReceive", "subscribePattern")
        broker = self.broker
        async with DynsecClient(
            broker.host, broker.port, username=broker.admin_username, password=broker.admin_password
        ) as dynsec:
            role = "bench-infra"
            await dynsec.create_role(
                role, [Acl(k, "#") for k in kinds], textdescription="aggregators, replay, bench"
            )
            for user in INFRA:
                self.passwords[user] = secrets.token_urlsafe(18)
                await dynsec.create_client(user, password=self.passwords[user], roles=[role])
        await self.cli("deploy", str(self.topology_path))
        topology = load_topology(self.topology_path)
        for leaf in leaves:
            await self.enroll(leaf, topology.nodes[leaf].parent or "")
        for node in ("root", "site-a", "site-b", *leaves):
            self.start_agent(node)

    async def enroll(self, leaf: str, parent: str) -> Path:
        """``edge-runtime enroll LEAF``; the file its password went to."""
        credentials = self.work / f"{leaf}.password"
        args = ["--parent", parent, "--topology", str(self.topology_path)]
        await self.cli("enroll", leaf, *args, "--credentials-file", str(credentials))
        return credentials

    async def retire(self, leaf: str, *forget: str) -> str:
        """``edge-runtime retire LEAF [--forget]``; its output as one cell."""
        out = await self.cli("retire", leaf, *forget, "--topology", str(self.topology_path))
        return " / ".join(out.strip().splitlines())


async def measure(bench: Bench, rows: list[list[str]], checks: list[Check]) -> None:
    """Bullets 1 and 2; appends what it measured to ``rows`` and ``checks``."""
    topology = load_topology(SOURCE_TOPOLOGY)
    leaves, data = topology.leaves(), load_dataset("motes-light")
    screen = screen_data(topology, data)
    leaf_max = topology.nodes[leaves[0]].publish_max_interval_s or LEAF_PUBLISH.max_interval_s
    bound_s = leaf_max + 1.0
    await bench.setup(leaves)
    async with Observer(bench.broker, bench.passwords["bench"], topology.prefix) as obs:
        replay_args = ["replay", "--topology", str(bench.topology_path), "--rate", f"{RATE:g}"]
        replay = bench.spawn("replay", replay_args, "replay")
        bench.others.append(replay)
        await obs.wait_model(lambda m: m.n_samples > 0, ONLINE_TIMEOUT_S, "with any samples")
        before = bench.pids()
        rows.append(["pids before enroll", _pids(before)])

        # Bullet 1: a device joins during the replay.
        await bench.enroll(NEWCOMER, NEWCOMER_PARENT)
        bench.start_agent(NEWCOMER, state=False)
        online = f"{NEWCOMER} online: not within {ONLINE_TIMEOUT_S:.0f} s"
        await _until(lambda: obs.newcomer_online or None, ONLINE_TIMEOUT_S, lambda: online)
        fed = data[np.arange(NEWCOMER_ROWS) * (data.shape[0] // NEWCOMER_ROWS)]
        for lo in range(0, NEWCOMER_ROWS, 64):
            payload = encode_readings(fed[lo : lo + 64], source=f"bench:{NEWCOMER}", seq=lo)
            await obs.client.publish(f"sensors/{NEWCOMER}", payload, qos=1)
            await asyncio.sleep(64 / RATE)
        late = f"{NEWCOMER}'s first snapshot: not within {bound_s * 4:.0f} s"
        first = await _until(lambda: obs.newcomer_first, bound_s * 4, lambda: late)
        seen_at, _ = await obs.wait_model(
            lambda m: m.provenance.get(NEWCOMER, 0) > 0, bound_s * 4, f"naming {NEWCOMER}"
        )
        latency = seen_at - first
        checks.append(Check(
            f"{NEWCOMER} enrolled under {NEWCOMER_PARENT}, started with URL, credentials "
            "and node id: its first snapshot -> root model with it in its provenance",
            f"{latency:.2f} s (replay still running: {replay.poll() is None})",
            f"<= publish_max_interval_s + 1 = {bound_s:g} s", latency <= bound_s,
        ))  # fmt: skip
        after = bench.pids()
        rows.append(["pids after pi-09 joined", _pids(after)])
        checks.append(Check(
            "no broker or agent restarted (same PIDs before and after)",
            f"{sum(after[k] == v for k, v in before.items())}/{len(before)} same", "all same",
            all(after[k] == v and v is not None for k, v in before.items()),
        ))  # fmt: skip

        # Everything replayed and covered before the retirements.
        try:
            await asyncio.to_thread(replay.wait, REPLAY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise StepError(f"replay did not finish within {REPLAY_TIMEOUT_S:.0f} s") from None
        rows.append(["replay exit code", str(replay.returncode)])
        full = {**screen.accepted, NEWCOMER: NEWCOMER_ROWS}
        _, model = await obs.wait_model(
            lambda m: dict(m.provenance) == full, COVER_TIMEOUT_S, f"covering {full}"
        )
        rows.append(["root before retire", _describe(model)])

        # Bullet 2: retire pi-04 --forget.
        count, n_before, started = model.provenance[FORGOTTEN], model.n_samples, time.monotonic()
        rows.append([f"retire {FORGOTTEN} --forget", await bench.retire(FORGOTTEN, "--forget")])
        returned = time.monotonic()
        seen_at, model = await obs.wait_model(
            lambda m: FORGOTTEN not in m.provenance, bound_s * 4, f"without {FORGOTTEN}"
        )
        kept = [leaf for leaf in leaves if leaf != FORGOTTEN]
        split = topology.split_rows(data.shape[0])
        reference = np.concatenate([data[split[lf][screen.kept[lf]]] for lf in kept] + [fed])
        ratio = error_ratio(reference, model.subspace.basis)
        drop, waited = n_before - model.n_samples, seen_at - started
        checks.append(Check(
            f"retire {FORGOTTEN} --forget: root n_samples drops by exactly its count",
            f"{n_before} -> {model.n_samples} (-{drop}; {FORGOTTEN} had {count})", f"-{count}",
            drop == count and dict(model.provenance) == {k: full[k] for k in [*kept, NEWCOMER]},
        ))  # fmt: skip
        checks.append(Check(
            f"retire {FORGOTTEN} --forget: time to the root model without it, and its "
            "error ratio on the remaining leaves' rows",
            f"{waited:.2f} s from the command's start (the command took "
            f"{returned - started:.2f} s); error ratio {ratio:.6f} on {reference.shape[0]} rows",
            f"<= {bound_s:g} s; <= 1.001", waited <= bound_s and ratio <= 1.001,
        ))  # fmt: skip

        # Control: retire without --forget changes nothing.
        n_kept, mark = model.n_samples, len(obs.models)
        rows.append([f"retire {KEPT}", await bench.retire(KEPT)])
        await asyncio.sleep(bound_s)
        later, final = [m.n_samples for _, m in obs.models[mark:]], obs.model
        assert final is not None
        checks.append(Check(
            f"control: retire {KEPT} (no --forget) leaves the root's n_samples as is",
            f"{n_kept} -> {final.n_samples} over {bound_s:g} s ({len(later)} models, "
            f"{KEPT} still {final.provenance.get(KEPT)})", "unchanged",
            all(n == n_kept for n in later) and final.provenance.get(KEPT) == full[KEPT],
        ))  # fmt: skip
        rows.append(["pids at the end", _pids(bench.pids())])


def _pids(pids: dict[str, int | None]) -> str:
    return ", ".join(f"{k} {v}" for k, v in pids.items())


def render(checks: list[Check], rows: list[list[str]], commands: list[str], error: str) -> str:
    """The Markdown of ``membership.md``: checks, what stopped it, steps, commands."""
    stopped = ["**Stopped early:**", "", "```", error.strip(), "```", ""] if error else []
    steps = table(["step", "observed"], [[k, re.sub(r"[|\n]", " ", v)] for k, v in rows])
    return "\n".join(prose(
        "membership", "report", checks=checks_table(checks, item="Done-when"),
        stopped="".join(f"{line}\n" for line in stopped), steps=steps,
        commands="\n".join(["```", *commands, "```"]),
    ))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.fleet.membership``: run, write ``membership.md`` and print it;
    exit 0 when every step ran and every check passes."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet.membership")
    parser.add_argument("--out", type=Path, default=REPORT_DIR, help="report folder")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[list[str]] = []
    checks: list[Check] = []
    error = ""
    with tempfile.TemporaryDirectory(prefix="membership-") as work:
        bench = Bench(Path(work))
        try:
            asyncio.run(measure(bench, rows, checks))
        except (StepError, aiomqtt.MqttError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            bench.close()
            if error:
                shutil.copytree(bench.logs, args.out / "membership-logs", dirs_exist_ok=True)
    write_result(
        args.out / "membership.json", "membership", {"commands": bench.commands},
        {"checks": checks, "steps": rows}, {}, {**environment(), "error": error},
    )  # fmt: skip
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
