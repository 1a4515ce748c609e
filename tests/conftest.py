"""Shared fixtures: real Mosquitto brokers and MQTT topics unique to each test.

The broker fixtures start `edge_runtime.broker.LocalMosquitto` (a private Mosquitto
on 127.0.0.1 with its own port and temporary directory) and never skip: when
Mosquitto is missing or does not start, the test fails with the reason (CI installs
Mosquitto). Teardown always runs in a ``finally``: `LocalMosquitto.stop`, and if that
fails, SIGKILL to the broker's pid, so no test leaves a broker process behind.

Which broker a test gets:

- ``shared_mosquitto``: the broker of this process (one per pytest-xdist worker, on a free
  port > 20000), for tests isolated by topic prefix (`helpers.tree_topology`, a uuid in the
  prefix, ``unique_topic``) that do not stop, freeze or reconfigure the broker. A module
  whose tests all qualify overrides ``mosquitto`` with it (see `test_agents.py`).
- ``mosquitto``: a broker of the test's own (a fixed prefix, a count of everything the
  broker carries, its log).
- ``make_mosquitto``: unstarted brokers for tests that control their lifecycle (kill,
  restart, freeze, TLS, passwords, ACL, bridges, dynamic security).

Under pytest-xdist every worker is a process of its own: the session fixtures, ports and
temporary directories below are per worker, and nothing is written into the repository.
`pytest_collection_modifyitems` runs the longest tests first (`schedule.LONGEST_S`), so that
with several workers none of them is left alone with a long test at the end.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import structlog
from schedule import longest_first

from edge_runtime.broker import BrokerError, LocalMosquitto

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def _load_blas_with_one_thread() -> None:
    """Load numpy's and scipy's BLAS with one thread each (unless the caller chose a number).

    What the runtime does too (`edge_runtime.cli`, the worker pool): the test processes
    are several on few cores (pytest-xdist), and OpenBLAS threads on top of them spin
    against each other: one privacy benchmark test took 38 s with 2 threads, 7 s with 1.
    The variables are restored afterwards, so the processes the tests start inherit the
    caller's environment.
    """
    saved = {name: os.environ.get(name) for name in BLAS_THREAD_VARIABLES}
    os.environ.update({name: "1" for name, value in saved.items() if value is None})
    try:
        import numpy  # noqa: F401  (loads its BLAS now)
        import scipy.linalg  # noqa: F401  (scipy's own BLAS)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)


_load_blas_with_one_thread()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests that take longest first (collection order otherwise)."""
    items[:] = longest_first(items)


@pytest.fixture(autouse=True)
def _structlog_as_found() -> Iterator[None]:
    """Give the next test structlog's configuration as this one found it.

    A test that runs a command in-process (``configure_logging``, e.g. at level warning)
    would otherwise leave a filtering logger behind, and a later test in the same worker
    would see no info lines in `structlog.testing.capture_logs`.
    """
    saved = structlog.get_config()
    try:
        yield
    finally:
        structlog.configure(**saved)


def _stop_by_pid(broker: LocalMosquitto) -> None:
    """Stop ``broker`` and remove its directory; SIGKILL its pid if the orderly stop fails."""
    broker.keep_dir = False
    try:
        broker.stop()
    finally:
        # After a successful stop the pid is None (the process was reaped). If it is still
        # set, the process was never reaped, so the pid cannot belong to anyone else yet.
        pid = broker.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _start(broker: LocalMosquitto) -> LocalMosquitto:
    try:
        broker.start()
    except BrokerError as exc:
        pytest.fail(f"cannot start Mosquitto for the test: {exc}", pytrace=False)
    return broker


@pytest.fixture
def mosquitto() -> Iterator[LocalMosquitto]:
    """A started `LocalMosquitto` for this test only (stopped by pid at teardown)."""
    broker = LocalMosquitto()
    try:
        yield _start(broker)
    finally:
        _stop_by_pid(broker)


@pytest.fixture(scope="session")
def mosquitto_session() -> Iterator[LocalMosquitto]:
    """A started `LocalMosquitto` shared by the whole session (one per xdist worker);
    isolate tests by topic. Prefer ``shared_mosquitto``, which checks it is still up."""
    broker = LocalMosquitto()
    try:
        yield _start(broker)
    finally:
        _stop_by_pid(broker)


@pytest.fixture
def shared_mosquitto(mosquitto_session: LocalMosquitto) -> Iterator[LocalMosquitto]:
    """This worker's broker, for a test isolated by topic prefix.

    Restarted (on a new port) if an earlier test left it stopped; the test fails at
    teardown if it stopped the broker itself, since the tests after it share it.
    """
    if not mosquitto_session.running:
        _stop_by_pid(mosquitto_session)
        _start(mosquitto_session)
    yield mosquitto_session
    if not mosquitto_session.running:
        pytest.fail("the test stopped the shared broker; use `mosquitto` or `make_mosquitto`")


@pytest.fixture
def make_mosquitto() -> Iterator[Callable[..., LocalMosquitto]]:
    """Factory of *unstarted* `LocalMosquitto` (same arguments), all stopped at teardown.

    For tests that control the lifecycle themselves (restarts, ``keep_dir``, fault
    injection). Teardown stops each one by pid and removes its directory, even with
    ``keep_dir=True``.
    """
    brokers: list[LocalMosquitto] = []

    def make(*args: Any, **kwargs: Any) -> LocalMosquitto:
        broker = LocalMosquitto(*args, **kwargs)
        brokers.append(broker)
        return broker

    try:
        yield make
    finally:
        errors: list[BaseException] = []
        for broker in brokers:
            try:
                _stop_by_pid(broker)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> str:
    """A topic prefix no other test uses, e.g. ``"test/test_round_trip-1f0c9a2b"``.

    Built from the test's name (characters other than letters, digits, ``_`` and ``-``
    replaced, so it is a valid topic without wildcards) and a random suffix.
    """
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:40].strip("-")
    return f"test/{name}-{uuid.uuid4().hex[:8]}"
