"""10,000 fuzzed payloads through a real Mosquitto into a running leaf and aggregator.

Issue 4, "Done when": *10,000 fuzzed payloads on subspace and sensor topics: zero crashes,
zero state changes, every one counted as rejected.*

One leaf (``leaf-0-0``) and its parent aggregator (``site-0``) run in this process, each with
its own MQTT connection. They are given valid state first (readings for the leaf, whose
snapshot reaches the aggregator, and a hand-made snapshot of the sibling ``leaf-0-1``), then
a deterministic corpus (seeded ``numpy`` generator, materialised into a list before anything
is published) goes out with QoS 1 from one client with a bounded in-flight window:

- 5,000 on the leaf's sensor topic: random bytes, truncations, bit flips and byte edits of
  valid readings, wrong widths, ragged and nested arrays, NaN/inf (msgpack floats, JSON
  literals, out-of-range numbers), strings, bools, wrong map schemas, ext types, deep
  nesting, payloads above ``max_payload_bytes``;
- 5,000 on subspace topics below the aggregator (both children's, and 5% on a topic of a
  node that is not its child): random bytes, truncations, bit flips and byte edits of valid
  snapshots, wrong schema (missing keys, wrong types, versions), wrong shapes and byte
  lengths, non-orthonormal bases, NaN/inf, bad singular values, privacy and provenance,
  snapshots whose node id does not match the topic, valid snapshots with the wrong
  ``n_features``, payloads above ``max_payload_bytes``.

Every candidate payload is classified offline with the same decoder call and the same
checks as the receiving agent; one that would be *accepted* (a state change, or a duplicate)
is not fuzz and is regenerated (those are counted and printed). So the exact reason
breakdown each agent must report is known in advance and asserted, not just the total.

Agents also subscribe to their own snapshot topic (to see their snapshots echoed), so the
payloads on ``leaf-0-0``'s subspace topic reach the leaf as well: it must ignore them
without crashing or changing state (they are counted as received, not as rejected).

Zero-length payloads are kept out of the 10,000 and sent separately: on a subspace topic an
empty payload is a retained deletion that aggregators ignore without counting (10 sent: 5
retained deletions, 5 plain), on the sensor topic it is an invalid reading (10 sent,
counted ``not_msgpack``). Completion is detected with the agents' ``messages_received``
counters, so those ignored messages are accounted for too.

The tests after the big one pin down, each with its exact payload, the bugs the fuzz found.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping

import aiomqtt
import msgpack
import numpy as np
import pytest
import structlog
from helpers import collect_retained, low_rank_data, tree_topology

from edge_runtime.agents.aggregator.shell.agent import AggregatorAgent
from edge_runtime.agents.leaf.shell.agent import LeafAgent
from edge_runtime.fpca import FPCAEdge
from edge_runtime.settings import AgentSettings
from edge_runtime.wire import (
    SubspaceMessage,
    WireError,
    decode_readings,
    decode_subspace,
    encode_readings,
    encode_subspace,
)

pytestmark = [pytest.mark.mqtt, pytest.mark.timeout(120)]

SEED = 20_240_604
N_SENSOR = 5_000
N_SUBSPACE = 5_000
UNKNOWN_CHILD_SHARE = 0.05
N_EMPTY = 10  # zero-length payloads per kind, outside the 10,000
MAX_PAYLOAD = 4096  # the agents' max_payload_bytes; every valid payload here is < 1 KiB
D = 8  # n_features
RANK = 3  # leaves track RANK + oversample (= RANK) = 6 directions
BLOCK = 10
SETUP_ROWS = 40  # four complete blocks: nothing pending, so no idle flush during the fuzz
LEAF, SIBLING, PARENT, STRANGER = "leaf-0-0", "leaf-0-1", "site-0", "leaf-9-9"
IN_FLIGHT = 64  # unacknowledged publishes at once
MAX_LAG = 2_000  # published but not yet received by an agent, before the publisher waits
FUZZ_DEADLINE_S = 40.0
STEP_DEADLINE_S = 10.0
NEST_DEPTHS = (850, 1100)  # nesting around msgpack's 1024 and Python's 1000 (see `nested`)

Payloads = list[tuple[str, bytes, str]]  # (topic, payload, predicted reject reason)


# --------------------------------------------------------------------------- predictions
def predict_sensor(payload: bytes) -> str | None:
    """The reason the leaf (n_features fixed to D) rejects ``payload``; None if it accepts."""
    try:
        decode_readings(payload, n_features=D, max_bytes=MAX_PAYLOAD)
    except WireError as exc:
        return exc.reason
    except Exception as exc:  # a decoder bug: a label no agent reason can match
        return f"decoder raised {type(exc).__name__}"
    return None


def predict_subspace(payload: bytes, child: str) -> str | None:
    """The reason the aggregator rejects ``payload`` on ``child``'s subspace topic.

    None when it would take it (as a newer snapshot: a state change; or as a duplicate).
    Mirrors `AggregatorAgent.handle` with both children present, each with D features.
    """
    assert payload, "zero-length payloads are sent separately"
    if child not in (LEAF, SIBLING):
        return "unknown_child"
    try:
        msg = decode_subspace(payload, max_bytes=MAX_PAYLOAD)
    except WireError as exc:
        return exc.reason
    except Exception as exc:  # a decoder bug: a label no agent reason can match
        return f"decoder raised {type(exc).__name__}"
    if msg.node_id != child:
        return "node_mismatch"
    if msg.n_features != D:
        return "n_features"
    return None


# --------------------------------------------------------------------------- generators
def orthonormal(rng: np.random.Generator, d: int, r: int) -> np.ndarray:
    return np.linalg.qr(rng.standard_normal((d, r)))[0]


def snapshot_obj(
    rng: np.random.Generator, node: str, *, d: int = D, r: int = 2 * RANK, dtype: str = "<f8"
) -> dict[str, object]:
    """A valid, *newer* snapshot map of ``node`` (fresh epoch, future timestamp), unpacked."""
    sv = np.sort(rng.uniform(0.5, 50.0, r))[::-1]
    obj: dict[str, object] = {
        "v": 1,
        "node": node,
        "epoch": "fuzz-epoch",
        "seq": int(rng.integers(1, 10**9)),
        "n": int(rng.integers(1, 10**6)),
        "d": d,
        "r": r,
        "dtype": "float64" if dtype == "<f8" else "float32",
        "basis": orthonormal(rng, d, r).astype(dtype).tobytes(),
        "sv": sv.astype(dtype).tobytes(),
        "ts": 4.0e9,
        "privacy": None,
        "prov": {node: 100},
    }
    return obj


def pack(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def pack_map_header(n: int) -> bytes:
    """msgpack map header for ``n`` entries (n < 16: fixmap)."""
    assert n < 16
    return bytes([0x80 | n])


def f64(values: np.ndarray) -> bytes:
    return np.ascontiguousarray(values, dtype="<f8").tobytes()


def truncate(rng: np.random.Generator, payload: bytes) -> bytes:
    return payload[: int(rng.integers(1, len(payload)))]


def bit_flips(rng: np.random.Generator, payload: bytes) -> bytes:
    data = bytearray(payload)
    for _ in range(int(rng.integers(1, 9))):
        i = int(rng.integers(len(data)))
        data[i] ^= 1 << int(rng.integers(8))
    return bytes(data)


def byte_edits(rng: np.random.Generator, payload: bytes) -> bytes:
    data = bytearray(payload)
    for _ in range(int(rng.integers(1, 5))):
        i = int(rng.integers(len(data) + 1))
        op = int(rng.integers(3))
        if op == 0 and len(data) > 1:
            del data[min(i, len(data) - 1)]
        elif op == 1:
            data[i:i] = rng.bytes(int(rng.integers(1, 5)))
        else:
            data[min(i, len(data) - 1)] = int(rng.integers(256))
    return bytes(data)


def json_depth(rng: np.random.Generator) -> int:
    """A JSON nesting depth whose outcome does not depend on the caller's stack depth.

    ``json.loads`` recurses in C against Python's recursion limit (1000), so whether a
    document nested ~900-1000 deep parses depends on how deep the caller's stack already
    is (the test's predictor and the agents differ by a few frames). Depths up to 600
    always parse; from 1200 on they never do (``too_deep``).
    """
    return int(rng.integers(100, 601)) if rng.random() < 0.5 else int(rng.integers(1200, 2001))


def nested(rng: np.random.Generator, *, as_json: bool = False) -> bytes:
    """One value nested deep (arrays or maps), msgpack or JSON text.

    msgpack: ``NEST_DEPTHS`` deep. msgpack unpacks up to 1024 levels and Python's ``repr``
    stops at 1000 frames, so these depths probe the gap between the parser's limit and
    anything that walks the parsed value recursively. JSON: see `json_depth`.
    """
    if as_json:
        depth = json_depth(rng)
        if rng.random() < 0.5 or depth > 600:  # maps 6 bytes a level: > 600 is too large
            return b"[" * depth + b"1" + b"]" * depth
        return b'{"a":' * depth + b"1" + b"}" * depth
    depth = int(rng.integers(*NEST_DEPTHS))
    if rng.random() < 0.5:
        return b"\x91" * depth + b"\x01"
    return b"\x81\xa1a" * depth + b"\x01"


def random_bytes(rng: np.random.Generator) -> bytes:
    return rng.bytes(int(rng.integers(1, 2001)))


def oversized(rng: np.random.Generator, body: bytes) -> bytes:
    """``body`` padded past ``MAX_PAYLOAD`` (JSON whitespace, or random bytes)."""
    extra = int(rng.integers(MAX_PAYLOAD + 1, 3 * MAX_PAYLOAD)) - len(body)
    pad = b" " * extra if body[:1] in (b"[", b"{") else rng.bytes(extra)
    return body + pad


def valid_reading(rng: np.random.Generator) -> bytes:
    rows = int(rng.integers(1, 6))
    values = rng.standard_normal((rows, D)) * 10 if rows > 1 else rng.standard_normal(D)
    fmt = "json" if rng.random() < 0.5 else "msgpack"
    if rng.random() < 0.5:
        return encode_readings(values, source="fz", seq=int(rng.integers(10**6)), fmt=fmt)
    return encode_readings(values, fmt=fmt)


def readings_body(rng: np.random.Generator, body: object, *, as_json: bool | None = None) -> bytes:
    """``body`` (any object) as a sensor payload, JSON or msgpack, maybe in the map form."""
    if rng.random() < 0.3:
        body = {"src": "fz", "seq": int(rng.integers(10**6)), "x": body}
    use_json = rng.random() < 0.5 if as_json is None else as_json
    if use_json:
        try:
            return json.dumps(body, allow_nan=True).encode()
        except (TypeError, ValueError):
            pass
    return pack(body)


def sensor_candidates(rng: np.random.Generator) -> list[Callable[[], bytes]]:
    """Generators of (mostly) invalid sensor payloads, one per fuzz category."""

    def row(width: int = D) -> list[float]:
        return [float(v) for v in rng.standard_normal(width)]

    def wrong_width() -> bytes:
        width = int(rng.choice([w for w in range(1, 21) if w != D]))
        rows = int(rng.integers(1, 4))
        values = row(width) if rows == 1 else [row(width) for _ in range(rows)]
        return readings_body(rng, values)

    def ragged() -> bytes:
        rows = [row(D) for _ in range(int(rng.integers(2, 5)))]
        rows[int(rng.integers(len(rows)))] = row(int(rng.integers(1, 2 * D)) or 1)
        if all(len(r) == D for r in rows):
            rows[0] = row(D + 1)
        return readings_body(rng, rows)

    def non_finite() -> bytes:
        values = row()
        values[int(rng.integers(D))] = [math.nan, math.inf, -math.inf][int(rng.integers(3))]
        if rng.random() < 0.5:
            return readings_body(rng, values, as_json=False)
        return json.dumps(values, allow_nan=True).encode()  # NaN / Infinity / -Infinity

    def huge_number() -> bytes:
        values: list[object] = [1.0] * D
        values[int(rng.integers(D))] = "__BIG__"
        big = "9" * int(rng.integers(401, 900)) if rng.random() < 0.5 else "1e999"
        return json.dumps(values).replace('"__BIG__"', big).encode()

    def strings() -> bytes:
        choices: list[object] = [
            "hello",
            ["a"] * D,
            [*row(D - 1), "1.0"],
            {"x": "1,2,3"},
            {"x": [row(D), "row"]},
        ]
        return readings_body(rng, choices[int(rng.integers(len(choices)))])

    def wrong_types() -> bytes:
        choices: list[object] = [
            [True] * D,
            [None] * D,
            [*row(D - 1), {"v": 1}],
            [*row(D - 1), b"\x01"],
            42,
            1.5,
            None,
            True,
            b"bytes",
            {"x": None},
            {"x": True},
            {"x": {"a": 1}},
        ]
        return readings_body(rng, choices[int(rng.integers(len(choices)))], as_json=False)

    def wrong_schema() -> bytes:
        x = row()
        choices: list[object] = [
            {},
            {"y": x},
            {"values": x, "src": "s"},
            {"x": x, "seq": -1},
            {"x": x, "seq": 2**63},
            {"x": x, "seq": 1.5},
            {"x": x, "seq": True},
            {"x": x, "seq": "7"},
            {"x": x, "src": ""},
            {"x": x, "src": "s" * 129},
            {"x": x, "src": 5},
            {"x": x, "src": ["s"]},
        ]
        body = choices[int(rng.integers(len(choices)))]
        return json.dumps(body).encode() if rng.random() < 0.5 else pack(body)

    def shapes() -> bytes:
        choices: list[object] = [
            [],
            [[]],
            [[], []],
            [[row(D)]],
            [row(D), 1.0],
            [1.0, row(D)],
            [[[1.0] * D]] * 2,
        ]
        return readings_body(rng, choices[int(rng.integers(len(choices)))])

    def ext_types() -> bytes:
        ext: object = msgpack.ExtType(int(rng.integers(0, 128)), rng.bytes(int(rng.integers(9))))
        if rng.random() < 0.5:
            ext = msgpack.Timestamp(int(rng.integers(2**31)), 0)
        x: list[object] = list(row())
        x[int(rng.integers(D))] = ext
        return pack(x if rng.random() < 0.7 else {"x": row(), "src": ext})

    def deep() -> bytes:
        if rng.random() < 0.5:
            depth = json_depth(rng)
            return b"[" * depth + b"1" + b"]" * min(depth, MAX_PAYLOAD - depth - 1)
        return b"\x91" * int(rng.integers(600, 3000)) + b"\x01"

    def deeply_nested() -> bytes:
        as_json = rng.random() < 0.5
        value = nested(rng, as_json=as_json)
        field = ["", "x", "src", "seq"][int(rng.integers(4))]
        if not field:
            return value
        row = json.dumps([1.0] * D).encode()
        fields = {"x": row, "src": b'"fz"', "seq": b"1"}
        if as_json:
            fields[field] = value
            return b"{" + b",".join(b'"%s":%s' % (k.encode(), v) for k, v in fields.items()) + b"}"
        packed = {"x": pack([1.0] * D), "src": pack("fz"), "seq": pack(1)}
        packed[field] = value
        return b"\x83" + b"".join(pack(k) + v for k, v in packed.items())

    def trailing() -> bytes:
        base = valid_reading(rng)
        return base + (b"]" if base[:1] in (b"[", b"{") else b"\x00") + rng.bytes(3)

    def too_large() -> bytes:
        if rng.random() < 0.5:
            rows = MAX_PAYLOAD // (9 * D) + int(rng.integers(1, 40))
            return encode_readings(rng.standard_normal((rows, D)))
        return oversized(rng, valid_reading(rng))

    def json_garbage() -> bytes:
        start = [b"[", b"{", b" \t[", b"\n{"][int(rng.integers(4))]
        return start + rng.bytes(int(rng.integers(1, 500)))

    return [
        lambda: random_bytes(rng),
        json_garbage,
        lambda: truncate(rng, valid_reading(rng)),
        lambda: bit_flips(rng, valid_reading(rng)),
        lambda: byte_edits(rng, valid_reading(rng)),
        wrong_width,
        ragged,
        non_finite,
        huge_number,
        strings,
        wrong_types,
        wrong_schema,
        shapes,
        ext_types,
        deep,
        deeply_nested,
        trailing,
        too_large,
    ]


def subspace_candidates(rng: np.random.Generator, child: Callable[[], str]) -> list[Callable]:
    """Generators of (mostly) invalid subspace payloads: each returns ``(child, payload)``."""
    bad_values: list[object] = [
        True,
        False,
        None,
        "text",
        "",
        1.5,
        -1,
        0,
        2**63,
        2**64 - 1,
        -(2**63),
        b"\x00" * 8,
        [1, 2],
        {"a": 1},
        math.nan,
        math.inf,
    ]

    def base(node: str | None = None, **kw: object) -> tuple[str, dict[str, object]]:
        c = child()
        return c, snapshot_obj(rng, node or c, **kw)  # type: ignore[arg-type]

    def mutated(fn: Callable[[np.random.Generator, bytes], bytes]) -> Callable:
        def gen() -> tuple[str, bytes]:
            c, obj = base()
            if rng.random() < 0.3:
                obj["dtype"] = "float32"
                obj["basis"] = np.frombuffer(obj["basis"], "<f8").astype("<f4").tobytes()
                obj["sv"] = np.frombuffer(obj["sv"], "<f8").astype("<f4").tobytes()
            return c, fn(rng, pack(obj))

        return gen

    def missing_key() -> tuple[str, bytes]:
        c, obj = base()
        for key in rng.choice(list(obj), size=int(rng.integers(1, 4)), replace=False):
            del obj[str(key)]
        return c, pack(obj)

    def wrong_type() -> tuple[str, bytes]:
        c, obj = base()
        key = str(rng.choice(list(obj)))
        obj[key] = bad_values[int(rng.integers(len(bad_values)))]
        return c, pack(obj)

    def version() -> tuple[str, bytes]:
        c, obj = base()
        obj["v"] = [0, 2, 99, -1, True, "1", 1.0, None][int(rng.integers(8))]
        return c, pack(obj)

    def not_a_map() -> tuple[str, bytes]:
        c, obj = base()
        choices: list[bytes] = [
            pack(list(obj.values())),
            pack(42),
            pack("subspace"),
            pack(None),
            pack(obj["basis"]),
            json.dumps({k: v for k, v in obj.items() if not isinstance(v, bytes)}).encode(),
            pack({1: 2, **{k: v for k, v in obj.items()}}),
        ]
        return c, choices[int(rng.integers(len(choices)))]

    def bad_ids() -> tuple[str, bytes]:
        c, obj = base()
        if rng.random() < 0.6:
            obj["node"] = ["", "a/b", "+", "#", "x\x00y", "n" * 129, f"{c}/", "é" * 200][
                int(rng.integers(8))
            ]
        else:
            obj["epoch"] = ["", "e" * 65][int(rng.integers(2))]
        return c, pack(obj)

    def counters() -> tuple[str, bytes]:
        c, obj = base()
        key = ["seq", "n"][int(rng.integers(2))]
        obj[key] = [-1, 2**63, 2**64 - 1, -(2**63)][int(rng.integers(4))]
        return c, pack(obj)

    def shapes() -> tuple[str, bytes]:
        c, obj = base()
        r = 2 * RANK
        choice = int(rng.integers(7))
        if choice == 0:
            obj["d"] = 0
        elif choice == 1:
            obj["d"] = int(rng.integers(2**20 + 1, 2**40))
        elif choice == 2:
            obj["r"] = int(rng.integers(D + 1, 100))
        elif choice == 3:
            obj["r"] = int(rng.choice([k for k in range(0, D + 1) if k != r]))
        elif choice == 4:
            obj["d"] = int(rng.choice([k for k in range(r, 20) if k != D]))
        elif choice == 5:
            obj["basis"] = obj["basis"][: -8 * int(rng.integers(1, 5))]
        else:
            obj["sv"] = obj["sv"] + rng.bytes(8 * int(rng.integers(1, 3)))
        return c, pack(obj)

    def dtypes() -> tuple[str, bytes]:
        c, obj = base()
        if rng.random() < 0.5:
            obj["dtype"] = ["float16", "f8", "<f8", "float", "FLOAT64", "int64"][
                int(rng.integers(6))
            ]
        else:
            obj["dtype"] = "float32"  # with float64 bytes: twice the expected length
        return c, pack(obj)

    def non_orthonormal() -> tuple[str, bytes]:
        c, obj = base()
        basis = np.frombuffer(obj["basis"], "<f8").reshape(D, 2 * RANK).copy()
        choice = int(rng.integers(5))
        if choice == 0:
            basis = rng.standard_normal(basis.shape)
        elif choice == 1:
            basis *= 1.0 + float(rng.uniform(1e-5, 0.5)) * float(rng.choice([-1, 1]))
        elif choice == 2:
            basis[:, 1] = basis[:, 0]
        elif choice == 3:
            basis[:, int(rng.integers(2 * RANK))] = 0.0
        else:
            basis[int(rng.integers(D)), int(rng.integers(2 * RANK))] += float(
                rng.uniform(1e-4, 1.0)
            )
        obj["basis"] = f64(basis)
        return c, pack(obj)

    def non_finite() -> tuple[str, bytes]:
        c, obj = base()
        bad = [math.nan, math.inf, -math.inf][int(rng.integers(3))]
        choice = int(rng.integers(5))
        if choice == 0:
            basis = np.frombuffer(obj["basis"], "<f8").copy()
            basis[int(rng.integers(basis.size))] = bad
            obj["basis"] = f64(basis)
        elif choice == 1:
            sv = np.frombuffer(obj["sv"], "<f8").copy()
            sv[int(rng.integers(sv.size))] = bad
            obj["sv"] = f64(sv)
        elif choice == 2:
            obj["ts"] = bad
        elif choice == 3:
            mean = rng.standard_normal(D)
            mean[int(rng.integers(D))] = bad
            obj["mean"] = f64(mean)
        else:
            obj["privacy"] = {"epsilon": bad, "delta": 0.1, "clip_norm": 1.0}
        return c, pack(obj)

    def singular_values() -> tuple[str, bytes]:
        c, obj = base()
        sv = np.frombuffer(obj["sv"], "<f8").copy()
        if rng.random() < 0.5:
            sv[int(rng.integers(sv.size))] = -float(rng.uniform(1e-9, 10.0))
        else:
            sv = sv[::-1].copy()
        obj["sv"] = f64(sv)
        return c, pack(obj)

    def privacy_provenance() -> tuple[str, bytes]:
        c, obj = base()
        choices: list[tuple[str, object]] = [
            ("privacy", {"epsilon": 0.0, "delta": 0.1, "clip_norm": 1.0}),
            ("privacy", {"epsilon": 1.0, "delta": 1.5, "clip_norm": 1.0}),
            ("privacy", {"epsilon": 1.0, "delta": 0.1, "clip_norm": -1.0}),
            ("privacy", {"epsilon": 1.0, "delta": 0.1}),
            ("privacy", {"epsilon": True, "delta": 0.1, "clip_norm": 1.0}),
            ("privacy", "dp"),
            ("prov", {"": 5}),
            ("prov", {c: -1}),
            ("prov", {"a/b": 1}),
            ("prov", {c: 2**63}),
            ("prov", {c: 1.5}),
            ("prov", [c, 1]),
            ("mean", f64(rng.standard_normal(D + 1))),
            ("mean", "mean"),
        ]
        key, value = choices[int(rng.integers(len(choices)))]
        obj[key] = value
        return c, pack(obj)

    def node_mismatch() -> tuple[str, bytes]:
        c = child()
        node = [n for n in (LEAF, SIBLING, PARENT, "root", STRANGER, "other") if n != c]
        msg = snapshot_obj(rng, str(rng.choice(node)))
        return c, pack(msg)

    def wrong_n_features() -> tuple[str, bytes]:
        d = int(rng.choice([k for k in range(1, 40) if k != D]))
        r = int(rng.integers(0, min(d, 2 * RANK) + 1))
        c = child()
        return c, pack(snapshot_obj(rng, c, d=d, r=r))

    def ext_and_deep() -> tuple[str, bytes]:
        c, obj = base()
        if rng.random() < 0.5:
            key = str(rng.choice(list(obj)))
            obj[key] = (
                msgpack.Timestamp(1, 0)
                if rng.random() < 0.5
                else msgpack.ExtType(int(rng.integers(128)), b"x")
            )
            return c, pack(obj)
        depth = int(rng.integers(600, 3000))
        return c, b"\x81\xa1a" * (depth // 3) + b"\xc0"

    def too_large() -> tuple[str, bytes]:
        c = child()
        if rng.random() < 0.5:
            d = int(rng.integers(MAX_PAYLOAD // (8 * 2 * RANK) + 1, 200))
            return c, pack(snapshot_obj(rng, c, d=d))
        obj = snapshot_obj(rng, c)
        obj["pad"] = rng.bytes(int(rng.integers(MAX_PAYLOAD, 3 * MAX_PAYLOAD)))
        return c, pack(obj)

    def deeply_nested() -> tuple[str, bytes]:
        c, obj = base()
        value = nested(rng)
        if rng.random() < 0.3:
            return c, value
        key = str(rng.choice(list(obj)))
        fields = {k: pack(v) for k, v in obj.items()}
        fields[key] = value
        return c, pack_map_header(len(fields)) + b"".join(pack(k) + v for k, v in fields.items())

    def trailing() -> tuple[str, bytes]:
        c, obj = base()
        return c, pack(obj) + rng.bytes(int(rng.integers(1, 10)))

    return [
        lambda: (child(), random_bytes(rng)),
        mutated(truncate),
        mutated(bit_flips),
        mutated(byte_edits),
        missing_key,
        wrong_type,
        version,
        not_a_map,
        bad_ids,
        counters,
        shapes,
        dtypes,
        non_orthonormal,
        non_finite,
        singular_values,
        privacy_provenance,
        node_mismatch,
        wrong_n_features,
        ext_and_deep,
        deeply_nested,
        too_large,
        trailing,
    ]


def build_corpus(
    sensor_topic: str, subspace_topic: Callable[[str], str]
) -> tuple[Payloads, Counter[str]]:
    """The 10,000 fuzz payloads (shuffled) and the candidates dropped for being valid."""
    rng = np.random.default_rng(SEED)
    excluded: Counter[str] = Counter()
    corpus: Payloads = []

    sensors = sensor_candidates(rng)
    for attempt in range(20 * N_SENSOR):
        if len(corpus) == N_SENSOR:
            break
        payload = sensors[attempt % len(sensors)]()
        if not payload:
            excluded["sensor: zero-length"] += 1
            continue
        reason = predict_sensor(payload)
        if reason is None:
            excluded["sensor: valid reading"] += 1
            continue
        corpus.append((sensor_topic, payload, reason))
    assert len(corpus) == N_SENSOR

    def child() -> str:
        if rng.random() < UNKNOWN_CHILD_SHARE:
            return STRANGER
        return LEAF if rng.random() < 0.5 else SIBLING

    subspaces = subspace_candidates(rng, child)
    for attempt in range(20 * N_SUBSPACE):
        if len(corpus) == N_SENSOR + N_SUBSPACE:
            break
        target, payload = subspaces[attempt % len(subspaces)]()
        if not payload:
            excluded["subspace: zero-length"] += 1
            continue
        reason = predict_subspace(payload, target)
        if reason is None:
            excluded["subspace: accepted snapshot"] += 1
            continue
        corpus.append((subspace_topic(target), payload, reason))
    assert len(corpus) == N_SENSOR + N_SUBSPACE
    order = rng.permutation(len(corpus))
    return [corpus[i] for i in order], excluded


# --------------------------------------------------------------------------- state
def fingerprint(obj: object, depth: int = 0) -> object:
    """A comparable, bit-exact image of ``obj`` (arrays by bytes, floats by hex)."""
    assert depth < 20, "fingerprint: structure too deep"
    if isinstance(obj, np.ndarray):
        return ("ndarray", obj.dtype.str, obj.shape, obj.tobytes())
    if obj is None or isinstance(obj, bool | int | str | bytes):
        return obj
    if isinstance(obj, float | np.floating):
        return ("float", float(obj).hex())
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, Mapping):
        items = sorted(obj.items(), key=lambda kv: repr(kv[0]))
        return ("map", tuple((repr(k), fingerprint(v, depth + 1)) for k, v in items))
    if isinstance(obj, list | tuple):
        return (type(obj).__name__, tuple(fingerprint(v, depth + 1) for v in obj))
    if hasattr(obj, "__dict__"):
        return (type(obj).__qualname__, fingerprint(vars(obj), depth + 1))
    return ("repr", type(obj).__qualname__, repr(obj))


def leaf_state(leaf: LeafAgent) -> dict[str, object]:
    est = leaf.estimator
    assert est is not None
    tracked = est.tracked_subspace
    return {
        "estimator": fingerprint(vars(est)),
        "basis": tracked.basis.tobytes(),
        "sv": tracked.singular_values.tobytes(),
        "n_samples": tracked.n_samples,
        "ingested": dict(leaf.ingested),
        # per-source sequencing: last seq, held rows, gaps, duplicates; what is durable
        "sequencer": fingerprint(vars(getattr(leaf, "sequencer", None) or object())),
        "durable": dict(getattr(leaf, "durable", {})),
        "n_features": leaf.n_features,
        "snapshot": id(leaf.snapshot),
        "seq": leaf.seq,
        "epoch": leaf.epoch,
        "duplicates": leaf.stats.duplicates,
        "reconnects": leaf.stats.reconnects,
    }


def aggregator_state(agg: AggregatorAgent) -> dict[str, object]:
    return {
        "snapshot": id(agg.snapshot),
        "snapshot_image": fingerprint(vars(agg.snapshot)),
        "seq": agg.seq,
        "epoch": agg.epoch,
        "children": {c: id(r.snapshot) for c, r in agg.children.items()},
        "children_image": fingerprint({c: vars(r.snapshot) for c, r in agg.children.items()}),
        "records": {c: (r.arrived, r.stale, r.merged) for c, r in agg.children.items()},
        "tree": fingerprint(vars(agg.tree)),
        "unpublished": agg.core.unpublished,
        "merges": agg.merges,
        "duplicates": agg.stats.duplicates,
        "reconnects": agg.stats.reconnects,
    }


async def wait_for(condition: Callable[[], bool], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.02)


async def wait_stable(states: Callable[[], object], timeout_s: float) -> object:
    """The state once two reads 0.5 s apart agree (bounded)."""
    deadline = time.monotonic() + timeout_s
    previous = states()
    while True:
        await asyncio.sleep(0.5)
        current = states()
        if current == previous:
            return current
        if time.monotonic() > deadline:
            raise AssertionError("agents' state did not settle before the fuzz")
        previous = current


async def watch_live(
    host: str, port: int, topic: str, seen: list[bytes], ready: asyncio.Event
) -> None:
    """Append every live (non-retained) message on ``topic`` to ``seen`` until cancelled."""
    async with aiomqtt.Client(host, port, timeout=5) as client:
        await client.subscribe(topic, qos=1)
        ready.set()
        async for message in client.messages:
            if not message.retain:
                seen.append(bytes(message.payload))  # type: ignore[arg-type]


@pytest.fixture
def captured_logs():
    """structlog entries of this test (warnings and above pass whatever others configured)."""
    old = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        with structlog.testing.capture_logs() as entries:
            yield entries
    finally:
        structlog.configure(wrapper_class=old["wrapper_class"])


# --------------------------------------------------------------------------- the tests
@pytest.mark.slow
async def test_10000_fuzzed_payloads_are_all_rejected_and_change_nothing(mosquitto, captured_logs):
    started = time.monotonic()
    topology = tree_topology(sites=1, leaves_per_site=2, rank=RANK, block_size=BLOCK)
    assert topology.children(PARENT) == [LEAF, SIBLING]
    sensor_topic = topology.nodes[LEAF].sensor_topic
    assert sensor_topic is not None

    def subspace_topic(child: str) -> str:  # also for STRANGER, which is not in the topology
        return f"{topology.subspace_topic(PARENT).removesuffix('/subspace')}/{child}/subspace"

    assert subspace_topic(LEAF) == topology.subspace_topic(LEAF)
    assert subspace_topic(SIBLING) == topology.subspace_topic(SIBLING)
    corpus, excluded = build_corpus(sensor_topic, subspace_topic)
    generated_s = time.monotonic() - started
    expected = {
        "leaf": Counter(reason for topic, _, reason in corpus if topic == sensor_topic),
        "aggregator": Counter(reason for topic, _, reason in corpus if topic != sensor_topic),
    }
    n_to = {name: sum(c.values()) for name, c in expected.items()}
    assert n_to == {"leaf": N_SENSOR, "aggregator": N_SUBSPACE}
    empty_reason = predict_sensor(b"")
    assert empty_reason is not None

    settings = AgentSettings(
        host=mosquitto.host, port=mosquitto.port, timeout_s=5, max_payload_bytes=MAX_PAYLOAD
    )
    host, port = mosquitto.host, mosquitto.port
    live: list[bytes] = []  # the aggregator's snapshots published while we watch
    watching = asyncio.Event()
    watcher = asyncio.create_task(
        watch_live(host, port, topology.subspace_topic(PARENT), live, watching), name="watch"
    )
    try:
        async with (
            AggregatorAgent(topology, PARENT, settings) as agg,
            LeafAgent(topology, LEAF, settings) as leaf,
        ):
            assert isinstance(agg, AggregatorAgent) and isinstance(leaf, LeafAgent)
            await wait_for(watching.is_set, "the watcher to subscribe", STEP_DEADLINE_S)
            await agg.wait_connected(STEP_DEADLINE_S)
            await leaf.wait_connected(STEP_DEADLINE_S)

            # ---- valid state first: readings for the leaf, a snapshot for the sibling
            data = low_rank_data(SETUP_ROWS + 1, D, RANK, seed=11)
            sibling_rows = low_rank_data(90, D, RANK, seed=12)
            est = FPCAEdge(D, RANK, block_size=BLOCK).partial_fit(sibling_rows[:50])
            sibling = SubspaceMessage(
                node_id=SIBLING,
                epoch="setup",
                seq=1,
                subspace=est.tracked_subspace,
                timestamp=time.time(),
                provenance={SIBLING: 50},
            )
            async with aiomqtt.Client(host, port, timeout=5) as client:
                for i in range(SETUP_ROWS):
                    payload = encode_readings(data[i], source="setup", seq=i)
                    await client.publish(sensor_topic, payload, qos=1)
                await client.publish(
                    subspace_topic(SIBLING), encode_subspace(sibling), qos=1, retain=True
                )
            await wait_for(
                lambda: (
                    agg.coverage() == {LEAF: SETUP_ROWS, SIBLING: 50}
                    and leaf.snapshot is not None
                    and leaf.snapshot.n_samples == SETUP_ROWS
                ),
                "the leaf's snapshot and the sibling's to be merged",
                STEP_DEADLINE_S,
            )
            await wait_for(lambda: len(live) >= 1, "the aggregator's publish", STEP_DEADLINE_S)
            assert leaf.n_features == D
            assert sum(leaf.rejects.values()) == sum(agg.rejects.values()) == 0

            def states() -> tuple[dict[str, object], dict[str, object]]:
                return leaf_state(leaf), aggregator_state(agg)

            before = await wait_stable(states, STEP_DEADLINE_S)
            assert not agg.core.unpublished
            live_before = len(live)
            received0 = {"leaf": leaf.stats.messages_received, "agg": agg.stats.messages_received}
            connections0 = {"leaf": leaf.core.connections, "agg": agg.core.connections}
            rejects0 = {"leaf": Counter(leaf.rejects), "agg": Counter(agg.rejects)}
            logged0 = len(captured_logs)

            # ---- the fuzz: 10,000 payloads, then the zero-length ones
            fuzz_started = time.monotonic()
            deadline = fuzz_started + FUZZ_DEADLINE_S
            window = asyncio.Semaphore(IN_FLIGHT)
            sent = {"leaf": 0, "agg": 0}
            agents = {"leaf": leaf, "agg": agg}
            # Agents also subscribe to their own snapshot topic (the echo check), so the
            # leaf receives what is published on LEAF's subspace topic as well.
            own = getattr(leaf, "_own_topic", None)
            topics = {
                "leaf": {sensor_topic} | ({own} if own else set()),
                "agg": {subspace_topic(c) for c in (LEAF, SIBLING, STRANGER)},
            }

            def received(name: str) -> int:
                return agents[name].stats.messages_received - received0[name]

            def death() -> str | None:
                for name, agent in agents.items():
                    task = agent._task
                    assert task is not None
                    if task.done():
                        error = None if task.cancelled() else task.exception()
                        return f"the {name} agent died: {error!r}"
                return None

            def check_alive() -> None:
                message = death()
                assert message is None, message

            async def send(client: aiomqtt.Client, topic: str, payload: bytes, retain: bool):
                try:
                    await client.publish(topic, payload, qos=1, retain=retain, timeout=5)
                finally:
                    window.release()

            # (topic, payload, retain): the corpus, then the zero-length payloads
            outgoing = [(topic, payload, False) for topic, payload, _ in corpus]
            outgoing += [(sensor_topic, b"", False)] * N_EMPTY
            # A zero-length payload on a child's topic forgets the child (issue 23,
            # tests/test_aggregator_membership.py); on a stranger's topic it changes nothing.
            outgoing += [(subspace_topic(STRANGER), b"", False)] * 5
            outgoing += [(subspace_topic(STRANGER), b"", True)] * 5  # retained deletions
            async with (
                aiomqtt.Client(host, port, timeout=5, max_inflight_messages=IN_FLIGHT) as client,
                asyncio.TaskGroup() as group,
            ):
                client.pending_calls_threshold = IN_FLIGHT + 1
                for topic, payload, retain in outgoing:
                    to = [name for name in agents if topic in topics[name]]
                    assert to, topic
                    while any(sent[name] - received(name) > MAX_LAG for name in to):
                        if death() or time.monotonic() > deadline:
                            break  # bounded backlog: wait for the agents to catch up
                        await asyncio.sleep(0.01)
                    if death() or time.monotonic() > deadline:
                        break
                    async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                        await window.acquire()
                    group.create_task(send(client, topic, payload, retain))
                    for name in to:
                        sent[name] += 1
            published_s = time.monotonic() - fuzz_started
            check_alive()
            on_own_topic = sum(1 for topic, _, _ in outgoing if topic == own)
            assert sent == {
                "leaf": N_SENSOR + N_EMPTY + on_own_topic,
                "agg": N_SUBSPACE + 10,
            }

            def all_received() -> bool:
                check_alive()
                return all(received(name) >= sent[name] for name in agents)

            await wait_for(
                all_received,
                "every fuzzed payload to be received",
                max(1.0, deadline - time.monotonic()),
            )
            fuzz_s = time.monotonic() - fuzz_started
            await asyncio.sleep(0.3)  # anything the fuzz set off would show now
            after = states()

            # ---- what the agents counted
            got = {
                "leaf": Counter(leaf.rejects) - rejects0["leaf"],
                "aggregator": Counter(agg.rejects) - rejects0["agg"],
            }
            print(f"\ncorpus generated in {generated_s:.2f} s; dropped as valid: {dict(excluded)}")
            print(f"published in {published_s:.2f} s, all received after {fuzz_s:.2f} s")
            for name in ("leaf", "aggregator"):
                print(f"{name} rejects ({sum(got[name].values())}):")
                for reason, count in sorted(got[name].items(), key=lambda kv: -kv[1]):
                    print(f"  {reason:16} {count:5}")
            crashes = Counter(
                (e["node"], e["error"])
                for e in captured_logs[logged0:]
                if e["event"] == "handler_failed"
            )
            for (node, error), count in crashes.items():
                print(f"handler_failed on {node} ({count}x): {error}")
            print(
                f"undelivered (echo check): leaf {getattr(leaf, 'undelivered', '-')}, "
                f"aggregator {getattr(agg, 'undelivered', '-')}"
            )
            for name in ("leaf", "agg"):
                # QoS 1 is at least once: an agent that lost its connection under load (the
                # keep-alive) gets its unacknowledged messages again, and a leaf re-publishes
                # its snapshot, echoed to it. Then more arrive than were sent, never fewer.
                if agents[name].core.connections > connections0[name]:
                    assert received(name) >= sent[name], name
                else:
                    assert received(name) == sent[name], name

            # ---- zero crashes, zero state changes, no publish by the aggregator
            for agent in (leaf, agg):
                assert agent._task is not None and not agent._task.done()
                assert agent.connected.is_set()
            assert after[0] == before[0], "the leaf's state changed"
            assert after[1] == before[1], "the aggregator's state changed"
            assert len(live) == live_before, "the aggregator published during the fuzz"

            # ---- and both still work: one more reading, one more sibling snapshot (more
            # samples in the same epoch: n_samples never decreases within one, issue 14)
            newer = SubspaceMessage(
                node_id=SIBLING,
                epoch="setup",
                seq=2,
                subspace=FPCAEdge(D, RANK, block_size=BLOCK)
                .partial_fit(sibling_rows)
                .tracked_subspace,
                timestamp=time.time(),
                provenance={SIBLING: 90},
            )
            async with aiomqtt.Client(host, port, timeout=5) as client:
                reading = encode_readings(data[SETUP_ROWS], source="setup", seq=SETUP_ROWS)
                await client.publish(sensor_topic, reading, qos=1)
                await client.publish(subspace_topic(SIBLING), encode_subspace(newer), qos=1)
            await wait_for(
                lambda: agg.coverage() == {LEAF: SETUP_ROWS + 1, SIBLING: 90},
                "the aggregator to merge the leaf's next snapshot and the sibling's",
                STEP_DEADLINE_S,
            )
            assert leaf.n_samples == SETUP_ROWS + 1
            assert leaf.ingested == {"setup": SETUP_ROWS}
            assert agg.children[SIBLING].snapshot.seq == 2
            await wait_for(lambda: len(live) > live_before, "a publish", STEP_DEADLINE_S)
            assert decode_subspace(live[-1]).node_id == PARENT

            # ---- every payload counted as rejected, for the predicted reason
            internal = {name: got[name]["internal_error"] for name in ("leaf", "aggregator")}
            assert internal == {"leaf": 0, "aggregator": 0}, f"internal errors: {dict(crashes)}"
            assert got["leaf"] == expected["leaf"] + Counter({empty_reason: N_EMPTY})
            assert got["aggregator"] == expected["aggregator"]  # empties ignored, uncounted
            assert sum(got["leaf"].values()) + sum(got["aggregator"].values()) == 10_000 + N_EMPTY
            # logging is rate-limited: one line per reason per interval, carrying the count
            rejected_logs = Counter(
                (e["node"], e["reason"])
                for e in captured_logs[logged0:]
                if e["event"] == "message_rejected"
            )
            assert set(rejected_logs) == {(LEAF, r) for r in got["leaf"]} | {
                (PARENT, r) for r in got["aggregator"]
            }
            assert sum(rejected_logs.values()) < sum(got["leaf"].values()) / 10
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    print(f"total {time.monotonic() - started:.2f} s")
    assert time.monotonic() - started < 60


NESTED_1000 = b"\x91" * 1000 + b"\x01"  # [[[...[1]...]]], 1000 levels: 1001 bytes of msgpack


async def test_payloads_nested_1000_deep_are_rejected_with_a_reason_not_internal_errors(
    mosquitto,
):
    """Found by the fuzz above: values nested ~1000 deep make the decoders raise
    RecursionError (``wire._show`` reprs the parsed value for the error message; msgpack
    unpacks up to 1024 levels, repr gives up at Python's recursion limit), which the agents
    count as ``internal_error`` instead of a wire reason."""
    topology = tree_topology(sites=1, leaves_per_site=2, rank=RANK, block_size=BLOCK)
    sensor_topic = topology.nodes[LEAF].sensor_topic
    assert sensor_topic is not None
    # {"x": [1.0] * D, "src": <NESTED_1000>, "seq": 1}
    reading = b"\x83\xa1x" + pack([1.0] * D) + b"\xa3src" + NESTED_1000 + b"\xa3seq\x01"
    settings = AgentSettings(
        host=mosquitto.host, port=mosquitto.port, timeout_s=5, max_payload_bytes=MAX_PAYLOAD
    )
    async with (
        AggregatorAgent(topology, PARENT, settings) as agg,
        LeafAgent(topology, LEAF, settings, n_features=D) as leaf,
    ):
        await agg.wait_connected(STEP_DEADLINE_S)
        await leaf.wait_connected(STEP_DEADLINE_S)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            await client.publish(topology.subspace_topic(SIBLING), NESTED_1000, qos=1)
            await client.publish(sensor_topic, reading, qos=1)
        await wait_for(
            lambda: agg.stats.messages_received == leaf.stats.messages_received == 1,
            "both payloads to arrive",
            STEP_DEADLINE_S,
        )
        await asyncio.sleep(0.1)
        leaf_rejects, agg_rejects = dict(leaf.rejects), dict(agg.rejects)
    assert "internal_error" not in agg_rejects, f"aggregator rejects: {agg_rejects}"
    assert "internal_error" not in leaf_rejects, f"leaf rejects: {leaf_rejects}"
    assert sum(agg_rejects.values()) == sum(leaf_rejects.values()) == 1


async def test_a_deeply_nested_payload_on_an_agents_own_snapshot_topic_does_not_kill_it(
    mosquitto,
):
    """Found by the fuzz above: agents subscribe to their own snapshot topic to see their
    snapshots echoed (`Agent._on_echo`), which decodes *outside* the guard of `_receive`; a
    payload that makes the decoder raise anything but WireError (`NESTED_1000`, through the
    unbounded repr) while a snapshot awaits its echo ends the agent's task."""
    topology = tree_topology(sites=1, leaves_per_site=1, rank=RANK, block_size=BLOCK)
    leaf_id = topology.leaves()[0]
    settings = AgentSettings(host=mosquitto.host, port=mosquitto.port, timeout_s=5)
    async with LeafAgent(topology, leaf_id, settings, n_features=D) as leaf:
        await leaf.wait_connected(STEP_DEADLINE_S)
        # a snapshot awaiting its echo, as after every publish (set directly: deterministic)
        leaf.core.echo.sent("pending", 1, time.monotonic())
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            await client.publish(topology.subspace_topic(leaf_id), NESTED_1000, qos=1)
        await wait_for(lambda: leaf.stats.messages_received >= 1, "the payload", STEP_DEADLINE_S)
        await asyncio.sleep(0.2)
        task = leaf._task
        assert task is not None
        died = task.done()
        error = task.exception() if died and not task.cancelled() else None
    assert not died, f"the leaf agent died: {error!r}"


async def test_a_snapshot_echoed_by_the_broker_is_not_reported_undelivered(mosquitto):
    """Found while fuzzing: with a plain local Mosquitto (no ACL, no size limit) every
    snapshot is reported ``publish_not_delivered``. Mosquitto sends the echo of a QoS 1
    publish to its own publisher before the PUBACK, so `Agent._on_echo` sees it while
    ``_awaiting_echo`` is still empty; `publish_snapshot` registers the (epoch, seq) only
    after the PUBACK, and it then expires."""
    topology = tree_topology(sites=1, leaves_per_site=1, rank=RANK, block_size=BLOCK)
    leaf_id = topology.leaves()[0]
    settings = AgentSettings(
        host=mosquitto.host, port=mosquitto.port, timeout_s=5, echo_timeout_s=1.0
    )
    data = low_rank_data(BLOCK, D, RANK, seed=13)
    async with LeafAgent(topology, leaf_id, settings) as leaf:
        await leaf.wait_connected(STEP_DEADLINE_S)
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, timeout=5) as client:
            for i, row in enumerate(data):
                payload = encode_readings(row, source="s", seq=i)
                await client.publish(topology.nodes[leaf_id].sensor_topic, payload, qos=1)
        await wait_for(lambda: leaf.snapshot is not None, "the snapshot", STEP_DEADLINE_S)
        await asyncio.sleep(2.0)  # twice echo_timeout_s
        undelivered = leaf.undelivered
    published = decode_subspace(
        await collect_retained(mosquitto.host, mosquitto.port, topology.subspace_topic(leaf_id))
    )
    assert published.n_samples == BLOCK  # it was delivered (and retained)
    assert undelivered == 0
