"""The open-file limit: counted before `run` opens its connections, raised or refused clearly."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edge_runtime import limits
from edge_runtime.limits import (
    RESERVED_DESCRIPTORS,
    LimitError,
    descriptors_needed,
    ensure_descriptors,
    run_descriptors_needed,
)

ROOT = Path(__file__).resolve().parent.parent


def star_topology_text(leaves: int) -> str:
    lines = ['name = "star"', "[defaults]", "rank = 2", "block_size = 4", "[[nodes]]", 'id = "r"']
    for i in range(leaves):
        lines += ["[[nodes]]", f'id = "l{i}"', 'parent = "r"']
    return "\n".join(lines) + "\n"


def with_nofile(soft: int, hard: int):
    """A preexec_fn that sets the child's RLIMIT_NOFILE before it starts."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return apply


def test_descriptors_needed_adds_ten_percent_and_the_reserve():
    assert descriptors_needed(0) == RESERVED_DESCRIPTORS
    assert descriptors_needed(100) == 110 + RESERVED_DESCRIPTORS
    assert descriptors_needed(1057) == 1163 + RESERVED_DESCRIPTORS


def test_descriptors_needed_rejects_a_negative_count():
    with pytest.raises(ValueError, match="-1"):
        descriptors_needed(-1)


def test_a_local_broker_needs_every_connection_whatever_the_workers():
    # 1057 agents (k=1024, fan-out 32) + replay + watcher + the retained-clear client
    assert run_descriptors_needed(1057, 1, local_broker=True) == descriptors_needed(1060)
    assert run_descriptors_needed(1057, 2, local_broker=True) == descriptors_needed(1060)


def test_with_a_remote_broker_workers_divide_what_one_process_needs():
    assert run_descriptors_needed(1057, 1, local_broker=False) == descriptors_needed(1060)
    assert run_descriptors_needed(1057, 2, local_broker=False) == descriptors_needed(529)
    assert run_descriptors_needed(10, 4, local_broker=False) == descriptors_needed(3)


class FakeLimits:
    def __init__(self, soft: int, hard: int) -> None:
        self.soft, self.hard = soft, hard
        self.set_to: tuple[int, int] | None = None

    def getrlimit(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.soft, self.hard

    def setrlimit(self, which: int, limits: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE
        self.set_to = limits


@pytest.fixture
def fake(monkeypatch):
    def make(soft: int, hard: int) -> FakeLimits:
        fake = FakeLimits(soft, hard)
        monkeypatch.setattr(limits.resource, "getrlimit", fake.getrlimit)
        monkeypatch.setattr(limits.resource, "setrlimit", fake.setrlimit)
        return fake

    return make


def test_a_sufficient_soft_limit_is_left_alone(fake):
    limits_now = fake(4096, 4096)
    assert ensure_descriptors(1000) == 4096
    assert limits_now.set_to is None


def test_a_low_soft_limit_is_raised_to_the_hard_limit(fake):
    limits_now = fake(1024, 524288)
    assert ensure_descriptors(1230) == 524288
    assert limits_now.set_to == (524288, 524288)


def test_an_unlimited_hard_limit_raises_the_soft_limit_to_what_is_needed(fake):
    limits_now = fake(1024, resource.RLIM_INFINITY)
    assert ensure_descriptors(1230) == 1230
    assert limits_now.set_to == (1230, resource.RLIM_INFINITY)


def test_a_low_hard_limit_is_one_line_naming_both_numbers_and_the_fix(fake):
    fake(1024, 1024)
    with pytest.raises(LimitError) as raised:
        ensure_descriptors(1230)
    message = str(raised.value)
    assert "\n" not in message
    for needle in ("1230", "1024", "ulimit -n 1230", "LimitNOFILE=1230"):
        assert needle in message


def test_the_soft_limit_of_a_real_process_is_raised_up_to_its_hard_limit():
    code = (
        "import resource; from edge_runtime.limits import ensure_descriptors; "
        "print(ensure_descriptors(300), resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=with_nofile(200, 400),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["400", "400"]


def test_run_with_more_agents_than_the_limit_allows_exits_2_in_one_line(tmp_path):
    topology = tmp_path / "star.toml"
    topology.write_text(star_topology_text(150), encoding="utf-8")
    data = tmp_path / "data.csv"
    np.savetxt(data, np.random.default_rng(0).standard_normal((300, 4)), delimiter=",")
    proc = subprocess.run(
        [sys.executable, "-m", "edge_runtime.cli", "run", str(topology), "--data", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        preexec_fn=with_nofile(128, 128),
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    needed = str(run_descriptors_needed(151, 1, local_broker=True))
    for needle in ("edge-runtime: error:", needed, "128", f"ulimit -n {needed}"):
        assert needle in lines[0]
    assert proc.stdout == ""
