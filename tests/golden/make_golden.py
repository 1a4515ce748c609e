"""Write the golden wire fixtures: every message kind's bytes as this release encodes them.

Run only when a new version is released, and only to *add* files: never regenerate
existing files. A fixture is what a node of that release put on the wire, and every later
release must decode it (``tests/test_wire_golden.py``); rewriting one with a newer encoder
would hide exactly the incompatibility it is there to catch. This script writes the files
of `CASES` that are missing and leaves every existing file untouched.

When a kind's layout changes: raise its version constant (``SUBSPACE_VERSION``, ...; the
rule is in the `edge_runtime.wire` docstring, "Schema versions and rolling upgrades"), add
cases named ``<kind>-v<new version>[-<variant>].<ext>`` to `CASES` with the fields the new
encoder writes, run ``python tests/golden/make_golden.py`` and commit the new files. Keep
the cases of older versions as they are: their ``fields`` are what the test expects the
fixture to decode to, with the decoders of every later release.

Every input is fixed (no random numbers, no clock): the basis is two columns of the 4 x 4
Hadamard matrix over 2, whose entries +-0.5 are exact in float32 and float64, and every
other number is a binary fraction, so a float32 fixture decodes to exactly these values.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from edge_runtime.fpca import Subspace
from edge_runtime.wire import (
    ConfirmMessage,
    PrivacyParams,
    PrivacyStatus,
    StatusDetail,
    SubspaceMessage,
    encode_confirm,
    encode_readings,
    encode_status,
    encode_subspace,
)
from edge_runtime.wire.fedpower import ReplyMessage, RoundMessage, encode_reply, encode_round

GOLDEN_DIR = Path(__file__).resolve().parent

_BASIS = [[0.5, 0.5], [0.5, -0.5], [0.5, 0.5], [0.5, -0.5]]
_PRIVACY = {
    "epsilon": 1.5,
    "delta": 1e-5,
    "clip_norm": 2.0,
    "mechanism": "gaussian",
    "neighbours": "replace-one",
}

CASES: dict[str, dict[str, Any]] = {
    # A private leaf's centred float64 snapshot with every optional key.
    "subspace-v1.msgpack": {
        "kind": "subspace",
        "version": 1,
        "options": {"dtype": "float64"},
        "fields": {
            "node_id": "pi-01",
            "epoch": "epoch-pi-01",
            "seq": 7,
            "basis": _BASIS,
            "singular_values": [3.0, 1.5],
            "n_samples": 12,
            "mean": [0.25, -0.5, 1.0, 2.0],
            "timestamp": 1_700_000_000.25,
            "privacy": _PRIVACY,
            "provenance": {"pi-01": 12},
            "sources": {"sensor-a": 11},
            "deployment": "motes-light",
        },
    },
    # An aggregator's float32 snapshot: no mean, privacy, sources or deployment.
    "subspace-v1-float32.msgpack": {
        "kind": "subspace",
        "version": 1,
        "options": {"dtype": "float32"},
        "fields": {
            "node_id": "site-a",
            "epoch": "epoch-site-a",
            "seq": 3,
            "basis": _BASIS,
            "singular_values": [4.0, 0.75],
            "n_samples": 42,
            "mean": None,
            "timestamp": 1_700_000_100.5,
            "privacy": None,
            "provenance": {"pi-01": 12, "pi-02": 30},
            "sources": {},
            "deployment": None,
        },
    },
    # Sequenced readings of a gateway or the replay: the msgpack map form, two rows.
    "readings-v1.msgpack": {
        "kind": "readings",
        "version": 1,
        "options": {"fmt": "msgpack"},
        "fields": {
            "values": [[1.5, -2.0, 0.25, 4.0], [0.0, 1.0, 2.0, 3.0]],
            "source": "sensor-a",
            "seq": 5,
        },
    },
    # A third-party sensor's reading: a bare JSON array.
    "readings-v1-array.json": {
        "kind": "readings",
        "version": 1,
        "options": {"fmt": "json"},
        "fields": {"values": [[1.5, -2.0, 0.25, 4.0]], "source": None, "seq": None},
    },
    "status-v1.json": {
        "kind": "status",
        "version": 1,
        "options": {},
        "fields": {
            "node_id": "pi-01",
            "role": "leaf",
            "online": True,
            "rank": 2,
            "n_samples": 12,
            "seq": 7,
            "epoch": "epoch-pi-01",
            "rejects": {"width": 2, "version_newer": 1},
            "uptime_s": 3600.5,
            "extra": {"ingested": {"sensor-a": 11}, "anomaly_rate": None, "tags": ["a", 1]},
            "privacy": {
                "epsilon": 1.5,
                "delta": 1e-5,
                "clip_norm": 2.0,
                "noise_std": 0.125,
                "block_size": 10,
                "chunk_size": 5,
                "mechanism": "gaussian",
                "neighbours": "replace-one",
                "horizon": 100,
                "releases": 3,
                "clipped": 0,
            },
        },
    },
    "confirm-v1.json": {
        "kind": "confirm",
        "version": 1,
        "options": {},
        "fields": {
            "node_id": "pi-01",
            "epoch": "epoch-pi-01",
            "session": "session-1",
            "connection": 2,
            "ingested": {"sensor-a": 11, "sensor-b": -1},
            "durable": {"sensor-a": 9, "sensor-b": -1},
            "gaps": {"sensor-a": 13},
        },
    },
    # A FedPower round with the global basis.
    "round-v1.msgpack": {
        "kind": "round",
        "version": 1,
        "options": {"dtype": "float64"},
        "fields": {
            "root": "root",
            "epoch": "epoch-root",
            "round": 4,
            "rank": 2,
            "basis": _BASIS,
            "local_steps": 3,
            "timeout_s": 30.0,
            "seed": 0,
            "timestamp": 1_700_000_200.5,
            "deployment": "motes-light",
        },
    },
    # The first round of a root that does not know ``d`` yet: no basis, a seed.
    "round-v1-first.msgpack": {
        "kind": "round",
        "version": 1,
        "options": {"dtype": "float32"},
        "fields": {
            "root": "root",
            "epoch": "epoch-root",
            "round": 1,
            "rank": 2,
            "basis": None,
            "local_steps": 1,
            "timeout_s": 12.5,
            "seed": 42,
            "timestamp": 1_700_000_150.0,
            "deployment": None,
        },
    },
    "reply-v1.msgpack": {
        "kind": "reply",
        "version": 1,
        "options": {"dtype": "float32"},
        "fields": {
            "node_id": "pi-02",
            "epoch": "epoch-pi-02",
            "round": 4,
            "y": [[1.5, -2.0], [0.25, 3.0], [4.0, 0.125], [-1.0, 0.5]],
            "n_samples": 30,
            "timestamp": 1_700_000_201.75,
            "privacy": None,
            "sources": {"sensor-b": 29},
            "deployment": "motes-light",
        },
    },
}
"""Fixture file name -> ``kind``, ``version`` (the kind's schema version when the file was
written), encoder ``options`` and ``fields``: the message's values, as plain data."""


def _array(values: list[Any] | None) -> np.ndarray | None:
    return None if values is None else np.array(values, dtype=np.float64)


def build(name: str) -> object:
    """The message of case ``name``, built with this release's classes.

    Raises
    ------
    KeyError
        For a name not in `CASES`.
    WireError
        If the case's fields are not a valid message for this release.
    """
    case = CASES[name]
    f = dict(case["fields"])
    kind = case["kind"]
    if kind == "subspace":
        subspace = Subspace(
            _array(f.pop("basis")),
            _array(f.pop("singular_values")),
            f.pop("n_samples"),
            _array(f.pop("mean")),
        )
        privacy = None if f["privacy"] is None else PrivacyParams(**f["privacy"])
        return SubspaceMessage(subspace=subspace, **{**f, "privacy": privacy})
    if kind == "status":
        privacy = None if f["privacy"] is None else PrivacyStatus(**f["privacy"])
        return StatusDetail(**{**f, "privacy": privacy})
    if kind == "confirm":
        return ConfirmMessage(**f)
    if kind == "round":
        return RoundMessage(**{**f, "basis": _array(f["basis"])})
    if kind == "reply":
        privacy = None if f["privacy"] is None else PrivacyParams(**f["privacy"])
        return ReplyMessage(**{**f, "y": _array(f["y"]), "privacy": privacy})
    raise ValueError(f"case {name!r} has no message class (kind {kind!r})")


def encode(name: str) -> bytes:
    """The bytes this release's encoder writes for case ``name``.

    Raises
    ------
    KeyError
        For a name not in `CASES`.
    WireError
        If the case's fields are not a valid message for this release.
    """
    case = CASES[name]
    options = case["options"]
    if case["kind"] == "readings":
        f = case["fields"]
        values = f["values"][0] if len(f["values"]) == 1 else f["values"]
        return encode_readings(values, source=f["source"], seq=f["seq"], **options)
    encoders = {
        "subspace": encode_subspace,
        "status": encode_status,
        "confirm": encode_confirm,
        "round": encode_round,
        "reply": encode_reply,
    }
    return encoders[case["kind"]](build(name), **options)  # type: ignore[operator]


def main() -> int:
    """Write the fixtures of `CASES` that do not exist yet; never touch an existing one."""
    for name in CASES:
        path = GOLDEN_DIR / name
        if path.exists():
            print(f"kept     {name} (existing fixtures are never rewritten)")
            continue
        path.write_bytes(encode(name))
        print(f"written  {name} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
