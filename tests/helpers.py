"""Test helpers: small topologies with unique topic prefixes, synthetic data, MQTT probes,
the clean-up after failed TLS connections, and no garbage collection inside `ast.parse`."""

from __future__ import annotations

import asyncio
import gc
import uuid
import warnings
from collections.abc import Iterator

import aiomqtt
import numpy as np

from edge_runtime.topology import Topology, parse_topology


def tree_topology(
    *,
    sites: int = 2,
    leaves_per_site: int = 2,
    rank: int = 3,
    block_size: int = 10,
    prefix: str | None = None,
    idle_flush_s: float = 0.2,
    split: str = "contiguous",
) -> Topology:
    """root -> `sites` aggregators -> `leaves_per_site` leaves each, unique prefix and topics."""
    prefix = prefix or f"t{uuid.uuid4().hex[:10]}"
    lines = [
        'name = "test-tree"',
        f'prefix = "{prefix}"',
        "[defaults]",
        f"rank = {rank}",
        f"block_size = {block_size}",
        f"idle_flush_s = {idle_flush_s}",
        "[data]",
        f'split = "{split}"',
        "[[nodes]]",
        'id = "root"',
    ]
    for s in range(sites):
        lines += ["[[nodes]]", f'id = "site-{s}"', 'parent = "root"']
        for leaf in range(leaves_per_site):
            node = f"leaf-{s}-{leaf}"
            lines += [
                "[[nodes]]",
                f'id = "{node}"',
                f'parent = "site-{s}"',
                f'sensor_topic = "{prefix}-sensors/{node}"',
            ]
    return parse_topology("\n".join(lines) + "\n")


def low_rank_data(
    n_samples: int, n_features: int, rank: int, *, noise: float = 0.05, seed: int = 0
) -> np.ndarray:
    """Rows of a rank-``rank`` signal plus Gaussian noise, shape (n_samples, n_features)."""
    rng = np.random.default_rng(seed)
    scales = np.linspace(10.0, 2.0, rank)
    factors = rng.standard_normal((n_samples, rank)) * scales
    mixing = np.linalg.qr(rng.standard_normal((n_features, rank)))[0].T
    return factors @ mixing + noise * rng.standard_normal((n_samples, n_features))


async def collect_retained(host: str, port: int, topic: str, timeout_s: float = 2.0) -> bytes:
    """The retained payload on ``topic`` (b"" if none arrives within ``timeout_s`` s)."""
    async with aiomqtt.Client(host, port, timeout=timeout_s) as client:
        await client.subscribe(topic, qos=1)
        try:
            async with asyncio.timeout(timeout_s):
                async for message in client.messages:
                    return bytes(message.payload)  # type: ignore[arg-type]
        except TimeoutError:
            return b""
    return b""


def collect_failed_tls_sockets() -> Iterator[None]:
    """The body of an autouse fixture for a module whose tests make TLS connections fail:
    after each test, collect the TLS sockets paho-mqtt leaves to the garbage collector when
    a connection fails or is refused, with their ``ResourceWarning`` ignored (as
    `connect_error` in test_security.py does). Collected later, in another test of the same
    worker, the strict warning filter would make that test fail.

    Use: ``_collect_failed_tls_sockets = pytest.fixture(autouse=True)(collect_failed_tls_sockets)``.
    """
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def garbage_collected_first() -> Iterator[None]:
    """The body of an autouse fixture for a module that parses source with `ast.parse`:
    collect the garbage earlier tests left (aiomqtt/paho clients whose finalizer raises
    "Event loop is closed") before the test, and collect none during it. Python 3.11.7's
    AST conversion keeps its recursion depth in shared state (CPython gh-106905): a
    finalizer run by a collection inside `ast.parse` that formats a traceback (3.11's
    `traceback` parses the line for its carets) made the outer parse fail with
    "SystemError: AST constructor recursion depth mismatch"."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
