"""The dashboard shows the sensor a leaf's fault detector suspects (issue 25, item 2): the
view model on a virtual clock, and the page's column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_runtime.dashboard import DashboardState
from edge_runtime.dashboard.page import PAGE_HTML
from edge_runtime.topology import Topology, load_topology
from edge_runtime.wire import StatusDetail, encode_status

MOTES = Path(__file__).resolve().parent.parent / "topologies" / "motes-light.toml"


@pytest.fixture
def motes() -> Topology:
    return load_topology(MOTES)


def detail(node: str, **extra: object) -> bytes:
    return encode_status(
        StatusDetail(
            node_id=node,
            role="leaf",
            online=True,
            rank=3,
            n_samples=100,
            seq=1,
            epoch="e1",
            rejects={},
            uptime_s=1.0,
            extra=extra,
        )
    )


def test_each_leaf_shows_the_sensor_its_detector_suspects_beside_its_anomaly_rate(
    motes: Topology,
) -> None:
    state = DashboardState(motes)
    suspect = {"sensor": 17, "fault": "short", "seq": 3207, "ts": 1732421712.125}
    state.fold(motes.status_detail_topic("pi-01"), detail("pi-01", anomaly_rate=0.01), now=1.0)
    state.fold(
        motes.status_detail_topic("pi-02"),
        detail("pi-02", anomaly_rate=0.02, suspect=suspect),
        now=2.0,
    )
    state.fold(
        motes.status_detail_topic("pi-03"),
        detail("pi-03", anomaly_rate=0.0, suspect={"sensor": "x", "fault": 3}),  # malformed
        now=3.0,
    )
    nodes = {n["id"]: n for n in state.snapshot(4.0)["nodes"]}  # type: ignore[union-attr]
    assert nodes["pi-02"]["suspect"] == {"sensor": 17, "fault": "short"}
    assert nodes["pi-02"]["anomaly_rate"] == 0.02
    assert nodes["pi-01"]["suspect"] is None  # a static scorer names no sensor
    assert nodes["pi-03"]["suspect"] is None and nodes["pi-04"]["suspect"] is None
    state.fold(motes.status_detail_topic("pi-02"), detail("pi-02", suspect=None), now=5.0)
    nodes = {n["id"]: n for n in state.snapshot(5.0)["nodes"]}  # type: ignore[union-attr]
    assert nodes["pi-02"]["suspect"] is None  # the alarm is no longer recent
    json.dumps(state.snapshot(5.0), allow_nan=False)


def test_the_page_has_a_suspect_column_after_the_anomaly_rate() -> None:
    header = PAGE_HTML.index("<th>anomaly rate</th><th>suspect</th>")
    assert header > 0 and "data-suspect" in PAGE_HTML and "function suspectText" in PAGE_HTML
