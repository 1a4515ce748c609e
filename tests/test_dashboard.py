"""The live dashboard: its view-model core on a virtual clock, its HTTP endpoints against a
real Mosquitto fed with the real encoders, and the page in a real headless Chromium."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiomqtt
import numpy as np
import pytest

from edge_runtime.broker import LocalMosquitto
from edge_runtime.dashboard import DashboardState, liveness
from edge_runtime.fpca.subspace import Subspace
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology, load_topology
from edge_runtime.wire import (
    PrivacyParams,
    PrivacyStatus,
    StatusDetail,
    SubspaceMessage,
    encode_status,
    encode_subspace,
)

ROOT = Path(__file__).resolve().parent.parent
MOTES = ROOT / "topologies" / "motes-light.toml"
CHROMIUM = Path("/usr/bin/chromium")


# ---------------------------------------------------------------------------- messages
def detail(
    node: str, *, n: int = 100, rank: int = 3, online: bool = True, **extra: object
) -> bytes:
    privacy = PrivacyStatus(epsilon=1.0, delta=1e-5, clip_norm=2.0) if node == "pi-02" else None
    return encode_status(
        StatusDetail(
            node_id=node,
            role="leaf" if node.startswith("pi") else "aggregator",
            online=online,
            rank=rank,
            n_samples=n,
            seq=1,
            epoch="e1",
            rejects={},
            uptime_s=1.0,
            extra=extra,
            privacy=privacy,
        )
    )


def model(topology: Topology, sv: list[float], n: int = 800) -> bytes:
    rng = np.random.default_rng(0)
    basis, _ = np.linalg.qr(rng.standard_normal((48, len(sv))))
    leaves = topology.leaves()
    return encode_subspace(
        SubspaceMessage(
            node_id=topology.root,
            epoch="e1",
            seq=7,
            subspace=Subspace(basis, np.array(sv), n),
            timestamp=time.time(),
            privacy=PrivacyParams(1.0, 1e-5, 2.0),
            provenance={leaf: n // len(leaves) for leaf in leaves},
            deployment=topology.name,
        )
    )


@pytest.fixture
def motes() -> Topology:
    return load_topology(MOTES)


# ---------------------------------------------------------------------------- the core
def test_liveness_rules() -> None:
    assert liveness(None, None, 10.0, 5.0) == "unknown"
    assert liveness(False, 9.0, 10.0, 5.0) == "offline"
    assert liveness(True, 9.0, 10.0, 5.0) == "online"
    assert liveness(True, 4.0, 10.0, 5.0) == "stale"


def test_core_liveness_transitions_on_a_virtual_clock(motes: Topology) -> None:
    state = DashboardState(motes, stale_after_s=30.0)
    assert state.order[:2] == ["root", "site-a"] and len(state.order) == 11
    assert set(state.states(0.0).values()) == {"unknown"}
    topic = motes.status_topic("pi-01")
    assert state.fold(topic, b"online", now=100.0)
    assert state.states(100.0)["pi-01"] == "online"
    assert state.states(130.0)["pi-01"] == "online"  # exactly stale_after_s: still online
    assert state.states(130.5)["pi-01"] == "stale"
    # a status document is a sign of life
    assert state.fold(motes.status_detail_topic("pi-01"), detail("pi-01"), now=131.0)
    assert state.states(131.0)["pi-01"] == "online"
    # the Last Will
    assert state.fold(topic, b"offline", now=140.0)
    assert state.states(140.0)["pi-01"] == "offline"
    assert state.states(10_000.0)["pi-01"] == "offline"
    snap = state.snapshot(140.0)
    assert snap["counts"] == {"online": 0, "stale": 0, "offline": 1, "unknown": 10}
    json.dumps(snap, allow_nan=False)


def test_core_coverage_privacy_scree_and_anomaly(motes: Topology) -> None:
    state = DashboardState(motes)
    for t, node in enumerate(motes.leaves()):
        state.fold(motes.status_detail_topic(node), detail(node, n=100 + t, rank=4), now=float(t))
    state.fold(motes.status_detail_topic("pi-03"), detail("pi-03", anomaly_rate=0.25), now=20.0)
    state.fold(motes.status_detail_topic("pi-03"), detail("pi-03", anomaly_rate=0.5), now=21.0)
    state.fold(motes.model_topic(), model(motes, [4.0, 2.0, 1.0, 1.0]), now=22.0)
    snap = state.snapshot(22.0)
    nodes = {n["id"]: n for n in snap["nodes"]}  # type: ignore[union-attr]
    assert nodes["pi-01"]["n_samples"] == 100 and nodes["pi-08"]["n_samples"] == 107
    assert nodes["pi-01"]["rank"] == 4 and nodes["site-a"]["depth"] == 1
    assert nodes["pi-02"]["privacy"]["epsilon"] == 1.0 and nodes["pi-01"]["privacy"] is None
    assert nodes["pi-03"]["anomaly_rate"] == 0.5 and nodes["pi-01"]["anomaly_rate"] is None
    assert snap["anomaly"] == {"pi-03": [[20.0, 0.25], [21.0, 0.5]]}
    m = snap["model"]
    assert m["rank"] == 4 and m["n_samples"] == 800 and len(m["leaves_covered"]) == 8
    assert np.allclose(m["explained"], np.array([16, 4, 1, 1]) / 22)
    assert m["privacy"]["epsilon"] == 1.0
    json.dumps(snap, allow_nan=False)


def test_core_rejects_bad_payloads_and_foreign_topics(motes: Topology) -> None:
    state = DashboardState(motes)
    assert not state.fold("elsewhere/x", b"online", now=0.0)
    assert not state.fold(motes.status_topic("root"), b"maybe", now=0.0)
    assert not state.fold(motes.status_detail_topic("root"), b"{not json", now=0.0)
    assert not state.fold(motes.status_detail_topic("root"), detail("pi-01"), now=0.0)
    assert not state.fold(motes.model_topic(), b"\x93garbage", now=0.0)
    assert not state.fold(motes.status_topic("root"), b"", now=0.0)
    assert sum(state.rejects.values()) == 4 and state.version == 0
    assert state.states(0.0)["root"] == "unknown"


# ---------------------------------------------------------------------------- real broker
async def publish_retained(broker: LocalMosquitto, messages: dict[str, bytes]) -> None:
    async with aiomqtt.Client(broker.host, broker.port) as client:
        for topic, payload in messages.items():
            await client.publish(topic, payload, qos=1, retain=True)


def fleet_messages(topology: Topology, offline: tuple[str, ...] = ()) -> dict[str, bytes]:
    messages: dict[str, bytes] = {}
    for i, node in enumerate(topology.nodes):
        up = node not in offline
        messages[topology.status_topic(node)] = b"online" if up else b"offline"
        messages[topology.status_detail_topic(node)] = detail(
            node, n=1000 + i, rank=5, online=up, anomaly_rate=0.01 * i
        )
    messages[topology.model_topic()] = model(topology, [9.0, 5.0, 3.0, 2.0, 1.5, 1.0, 0.5])
    return messages


@contextlib.asynccontextmanager
async def dashboard(
    topology: Topology, broker: LocalMosquitto, stale_after_s: float = 75.0
) -> AsyncIterator[str]:
    from edge_runtime.dashboard.server import serve_dashboard

    stop = asyncio.Event()
    url: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    settings = AgentSettings(host=broker.host, port=broker.port)
    task = asyncio.create_task(
        serve_dashboard(
            topology,
            settings,
            "127.0.0.1",
            0,
            stop=stop,
            stale_after_s=stale_after_s,
            on_ready=url.set_result,
        )
    )
    try:
        yield await asyncio.wait_for(asyncio.shield(url), 10.0)
    finally:
        stop.set()
        await asyncio.wait_for(task, 15.0)


async def get(url: str) -> tuple[int, str, bytes]:
    def fetch() -> tuple[int, str, bytes]:
        with urllib.request.urlopen(url, timeout=5.0) as response:
            return response.status, response.headers["Content-Type"], response.read()

    return await asyncio.to_thread(fetch)


async def state_until(
    base: str, predicate: Callable[[dict], bool], timeout_s: float = 10.0
) -> dict:
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / 0.1) + 1):
        _, _, body = await get(base + "state.json")
        snap = json.loads(body)
        if predicate(snap) or time.monotonic() > deadline:
            return snap
        await asyncio.sleep(0.1)
    return snap


async def test_endpoints_against_a_real_broker(motes: Topology, mosquitto: LocalMosquitto) -> None:
    pytest.importorskip("aiohttp", reason="the dashboard extra (aiohttp) is not installed")
    await publish_retained(mosquitto, fleet_messages(motes, offline=("pi-08",)))
    async with dashboard(motes, mosquitto) as base:
        snap = await state_until(
            base, lambda s: s["counts"]["online"] == 10 and s["model"] is not None
        )
        assert snap["connected"] is True
        assert snap["counts"] == {"online": 10, "stale": 0, "offline": 1, "unknown": 0}
        states = {n["id"]: n["state"] for n in snap["nodes"]}
        assert states["pi-08"] == "offline" and states["root"] == "online"
        assert snap["model"]["rank"] == 7 and snap["model"]["n_samples"] == 800
        assert set(snap["anomaly"]) == set(motes.nodes)

        status, ctype, page = await get(base)
        assert status == 200 and ctype.startswith("text/html")
        assert (
            b"EventSource" in page and b"<svg" in page and b"http" not in page.split(b"<script>")[1]
        )

        # server-sent events: the first event is the whole snapshot; a change comes next
        def first_events(n: int) -> list[dict]:
            events: list[dict] = []
            with urllib.request.urlopen(base + "events", timeout=5.0) as response:
                assert response.headers["Content-Type"].startswith("text/event-stream")
                for _ in range(200):
                    line = response.readline()
                    if line.startswith(b"data: "):
                        events.append(json.loads(line[6:]))
                        if len(events) == n:
                            break
            return events

        reader = asyncio.create_task(asyncio.to_thread(first_events, 3))
        await asyncio.sleep(0.3)
        await publish_retained(mosquitto, {motes.status_topic("pi-08"): b"online"})
        events = await asyncio.wait_for(reader, 10.0)
        assert events[0]["counts"]["offline"] == 1
        assert events[-1]["counts"]["online"] == 11


# ---------------------------------------------------------------------------- the browser
def chromium(
    args: list[str], profile: Path, timeout_s: float = 60.0
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--window-size=1280,900",
            *args,
        ],
        capture_output=True,
        timeout=timeout_s,
        check=False,
    )


@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium absent (apt-get install chromium)"
)
async def test_screenshot_shows_every_node_of_the_motes_tree(
    motes: Topology, mosquitto: LocalMosquitto, tmp_path: Path
) -> None:
    pytest.importorskip("aiohttp", reason="the dashboard extra (aiohttp) is not installed")
    await publish_retained(mosquitto, fleet_messages(motes, offline=("pi-08",)))
    silent = "pi-05"  # heard once, then silent: stale
    expected = {node: "online" for node in motes.nodes} | {"pi-08": "offline", silent: "stale"}
    stop_beat = asyncio.Event()

    async def heartbeat() -> None:
        async with aiomqtt.Client(mosquitto.host, mosquitto.port) as client:
            for beat in range(600):  # bounded: 600 x 0.2 s
                for i, node in enumerate(motes.nodes):
                    if node not in ("pi-08", silent):
                        rate = 0.02 * (i % 4) + 0.01 * ((beat + i) % 5)
                        await client.publish(
                            motes.status_detail_topic(node),
                            detail(node, n=1000 + 10 * beat, rank=5, anomaly_rate=rate),
                            qos=0,
                        )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop_beat.wait(), 0.2)
                if stop_beat.is_set():
                    return

    async with dashboard(motes, mosquitto, stale_after_s=2.0) as base:
        beats = asyncio.create_task(heartbeat())
        try:
            snap = await state_until(
                base,
                lambda s: (
                    {n["id"]: n["state"] for n in s["nodes"]} == expected and s["model"] is not None
                ),
                timeout_s=15.0,
            )
            assert {n["id"]: n["state"] for n in snap["nodes"]} == expected
            dom = await asyncio.to_thread(
                chromium, ["--timeout=4000", "--dump-dom", base], tmp_path / "p1"
            )
            html = dom.stdout.decode("utf-8", "replace")
            assert dom.returncode == 0, dom.stderr.decode()[-2000:]
            rows = dict(re.findall(r'<tr data-node="([^"]+)" data-state="([a-z]+)">', html))
            assert rows == expected, html[-3000:]
            drawn = dict(
                re.findall(r'<g class="node" data-node="([^"]+)" data-state="([a-z]+)">', html)
            )
            assert drawn == expected
            for node, state in expected.items():
                assert re.search(rf">{re.escape(node)}</text><text [^>]*>{state}</text>", html)
            assert len(re.findall(r'<rect class="scree-bar" x="[0-9.]+"', html)) == 7  # scree bars
            png = tmp_path / "dashboard.png"
            shot = await asyncio.to_thread(
                chromium,
                ["--timeout=4000", f"--screenshot={png}", base],
                tmp_path / "p2",
            )
            assert shot.returncode == 0, shot.stderr.decode()[-2000:]
        finally:
            stop_beat.set()
            await asyncio.wait_for(beats, 10.0)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 900)
    target = os.environ.get("EDGE_DASHBOARD_SCREENSHOT")  # e.g. docs/dashboard.png
    if target:
        shutil.copyfile(png, target)


# ------------------------------------------------------- issue 21: a refused login is shown
def test_core_shows_why_the_broker_is_not_connected_until_it_is(motes: Topology) -> None:
    state = DashboardState(motes)
    state.set_connected(False, "the broker at h:1 refused user 'dashboard' (Not authorized)")
    snap = state.snapshot(0.0)
    assert snap["connected"] is False and "refused user 'dashboard'" in str(snap["broker_error"])
    state.set_connected(True)
    assert state.snapshot(0.0)["broker_error"] is None


def test_the_page_shows_the_broker_error() -> None:
    from edge_runtime.dashboard.page import PAGE_HTML

    assert 'id="problem"' in PAGE_HTML and "s.broker_error" in PAGE_HTML


@pytest.fixture
def password_broker(tmp_path: Path):
    """Mosquitto with one user (dashboard: "right"), no anonymous clients, on a free
    loopback port; stopped by pid."""
    passwd = tmp_path / "passwd"
    passwd.write_text("dashboard:right\n", encoding="utf-8")
    subprocess.run(["mosquitto_passwd", "-U", str(passwd)], check=True, timeout=30)
    port = 0
    while port <= 20000:  # the tests' rule: loopback ports above 20000
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        f"user root\nallow_anonymous false\npassword_file {passwd}\nlistener {port} 127.0.0.1\n"
        "use_username_as_clientid true\n",
        encoding="utf-8",
    )
    proc = subprocess.Popen(
        ["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(
    ("username", "password", "expected"),
    [
        ("dashboard", "wrong", "refused user 'dashboard'"),
        (None, None, "requires a user name and password"),
    ],
)
async def test_a_refused_login_is_on_the_page_and_told_once_not_every_node_unknown(
    motes: Topology, password_broker: int, username: str | None, password: str | None,
    expected: str,
) -> None:  # fmt: skip
    pytest.importorskip("aiohttp", reason="the dashboard extra (aiohttp) is not installed")
    from edge_runtime.dashboard.server import serve_dashboard

    problems: list[str | None] = []
    stop = asyncio.Event()
    url: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    settings = AgentSettings(
        host="127.0.0.1", port=password_broker, username=username, password=password,
        reconnect_min_s=0.1, reconnect_max_s=0.3,
    )  # fmt: skip
    task = asyncio.create_task(
        serve_dashboard(
            motes, settings, "127.0.0.1", 0, stop=stop, on_ready=url.set_result,
            on_problem=problems.append,
        )
    )  # fmt: skip
    try:
        base = await asyncio.wait_for(asyncio.shield(url), 10.0)
        snap = await state_until(base, lambda s: s["broker_error"] is not None)
        await asyncio.sleep(1.0)  # several failed attempts: still one line
    finally:
        stop.set()
        await asyncio.wait_for(task, 15.0)
    assert snap["connected"] is False and expected in snap["broker_error"]
    assert len(problems) == 1 and problems[0] is not None and expected in problems[0]


def test_an_aggregator_row_shows_its_rank_and_the_directions_it_tracks(motes: Topology) -> None:
    """Issue 21: status documents of aggregators carry rank + oversample (20 in the Motes
    tree), leaves their rank (10); the model has the configured rank (10). The row says
    "10 (20 tracked)", not a bare 20 beside a model of rank 10."""
    state = DashboardState(motes)
    state.fold(motes.status_detail_topic("site-a"), detail("site-a", rank=20), 0.0)
    state.fold(motes.status_detail_topic("pi-01"), detail("pi-01", rank=10), 0.0)
    rows = {n["id"]: n for n in state.snapshot(0.0)["nodes"]}
    assert (rows["site-a"]["rank"], rows["site-a"]["tracked"]) == (10, 20)
    assert (rows["pi-01"]["rank"], rows["pi-01"]["tracked"]) == (10, None)
    assert (rows["root"]["rank"], rows["root"]["tracked"]) == (None, None)
    from edge_runtime.dashboard.page import PAGE_HTML

    assert '" tracked)"' in PAGE_HTML


def test_watch_names_the_directions_the_roots_snapshot_tracks(motes: Topology) -> None:
    """``watch``'s "rank=10 (of 20 tracked)": the model's rank, and the root's status
    document's when it is more (`ModelWatcher.tracked`)."""
    from edge_runtime.monitor import ModelWatcher
    from edge_runtime.wire import decode_subspace

    watcher = ModelWatcher(motes, AgentSettings(), watch_nodes=True)
    assert watcher.tracked() is None
    watcher.model = decode_subspace(model(motes, [9.0, 5.0, 3.0]))
    watcher._fold_detail("root", detail("root", rank=6))
    assert watcher.tracked() == 6
    watcher._fold_detail("root", detail("root", rank=3))
    assert watcher.tracked() is None  # not more than the model's rank: nothing to add


async def test_a_dashboard_cancelled_as_it_stops_ends_cancelled_with_its_follower_ended(
    motes: Topology, shared_mosquitto: LocalMosquitto
) -> None:
    # The serving task is cancelled at each of its first loop iterations after ``stop`` in
    # turn, so while it waits for its follower to end and in the moment the follower does:
    # whenever the cancel was requested before the task ended, the task must end cancelled
    # (asyncio.wait_for on Python 3.11 returned normally there, gh-86296, and a suppressed
    # CancelledError lost it too), and the follower must have ended, not left running.
    pytest.importorskip("aiohttp", reason="the dashboard extra (aiohttp) is not installed")
    from edge_runtime.dashboard.server import serve_dashboard

    settings = AgentSettings(host=shared_mosquitto.host, port=shared_mosquitto.port)
    lost = []
    for hops in range(16):
        stop = asyncio.Event()
        url: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            serve_dashboard(motes, settings, "127.0.0.1", 0, stop=stop, on_ready=url.set_result)
        )
        async with asyncio.timeout(10.0):
            await asyncio.wait([url, task], return_when=asyncio.FIRST_COMPLETED)
        stop.set()
        for _ in range(hops):
            await asyncio.sleep(0)
        requested = task.cancel()
        async with asyncio.timeout(15.0):
            await asyncio.wait([task])
        if requested and not task.cancelled():
            lost.append(hops)
        assert not task.done() or task.cancelled() or task.exception() is None
        assert [t for t in asyncio.all_tasks() if t.get_name() == "dashboard-follower"] == []
        # A follower cancelled while aiomqtt connects leaves paho's socket to its garbage
        # collection, which needs the loop still open.
        gc.collect()
    assert lost == [], f"cancellation lost when it came after {lost} loop iterations"
