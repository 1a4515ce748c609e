"""Tests of edge_runtime.checkpoint: exact round trips, atomic replacement, corrupt files."""

from __future__ import annotations

import io
import json
import os
import pickle
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge_runtime import checkpoint
from edge_runtime.checkpoint import (
    FORMAT_NAME,
    FORMAT_VERSION,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from edge_runtime.fpca import FPCAEdge


def leaf_state(seed: int = 0, n: int = 1037) -> tuple[dict[str, Any], np.ndarray]:
    """A realistic leaf checkpoint (d = 48, rank 10, b = 50, centred) and its stream."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6)) @ rng.normal(size=(6, 48)) + 0.1 * rng.normal(size=(n, 48))
    edge = FPCAEdge(48, 10, 50, center=True, adaptive=True, forget=0.999).partial_fit(x[:n])
    state: dict[str, Any] = edge.get_state()
    state.update(
        epoch="20240501T101500Z-3f9a",
        seq=412,
        ingested={"pi-01/temp": 1036, "pi-01/light": 17},
        meta={"node": "pi-01", "topology": "motes-light", "schema": [1, 2]},
    )
    return state, x


def assert_same(loaded: dict[str, Any], expected: dict[str, Any]) -> None:
    assert loaded.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, np.ndarray):
            assert isinstance(loaded[key], np.ndarray), key
            np.testing.assert_array_equal(loaded[key], value, err_msg=key, strict=True)
        else:
            assert loaded[key] == value, key
            assert type(loaded[key]) is type(value), key


def stray_files(directory: Path, name: str) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != name)


# -- round trips ---------------------------------------------------------------------------------


def test_a_leaf_state_round_trips_exactly_and_resumes_bitwise(tmp_path: Path) -> None:
    state, _ = leaf_state(n=1037)
    path = tmp_path / "pi-01.ckpt"
    written = save_checkpoint(path, state)
    assert written == path.stat().st_size
    loaded = load_checkpoint(path)
    assert loaded is not None
    assert_same(loaded, state)
    assert loaded["pending"].shape == (37, 48)

    more = np.random.default_rng(1).normal(size=(300, 48))
    full = FPCAEdge.from_state(state).partial_fit(more)
    resumed = FPCAEdge.from_state(loaded).partial_fit(more)
    np.testing.assert_array_equal(resumed.subspace.basis, full.subspace.basis, strict=True)
    np.testing.assert_array_equal(resumed.get_state()["basis"], full.get_state()["basis"])
    assert stray_files(tmp_path, path.name) == []


def test_arrays_keep_dtype_shape_and_bits_and_values_keep_their_json_types(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(2)
    state: dict[str, Any] = {
        "f64_fortran": np.asfortranarray(rng.normal(size=(5, 3))),
        "strided": rng.normal(size=(6, 4))[::2, ::-1],
        "int32": np.arange(7, dtype=np.int32),
        "bool": np.array([True, False]),
        "scalar": np.array(3.5),
        "empty": np.zeros((0, 48)),
        "complex": np.array([1 + 2j]),
        "specials": np.array([np.nan, np.inf, -0.0, 5e-324]),
        "none": None,
        "flag": True,
        "big": 2**70,
        "neg_zero": -0.0,
        "tiny": 5e-324,
        "third": 1 / 3,
        "text": "résumé ✓",
        "nested": {"a": [1, 2.5, None, {"b": "c"}], "d": {}},
        # Keys that are np.savez's own parameter names or the header's member name.
        "file": np.ones(2),
        "allow_pickle": np.ones(1),
        "header": "a value named like the header member",
        "a0": 7,
    }
    path = tmp_path / "values.ckpt"
    save_checkpoint(path, state)
    loaded = load_checkpoint(path)
    assert loaded is not None
    for key in ("f64_fortran", "strided"):
        state[key] = np.ascontiguousarray(state[key])  # same values; order is not kept
    assert_same(loaded, state)
    assert np.signbit(loaded["neg_zero"])


def test_numpy_scalars_and_tuples_come_back_as_python_values(tmp_path: Path) -> None:
    path = tmp_path / "c.ckpt"
    save_checkpoint(
        path, {"n": np.int64(5), "x": np.float32(0.5), "b": np.bool_(True), "t": (1, 2)}
    )
    assert load_checkpoint(path) == {"n": 5, "x": 0.5, "b": True, "t": [1, 2]}


@pytest.mark.parametrize(
    ("state", "error", "match"),
    [
        ({"a": np.array([object()], dtype=object)}, TypeError, "'a'.*object"),
        ({"a": float("nan")}, ValueError, "'a'"),
        ({"a": {"b": [1.0, float("inf")]}}, ValueError, r"\['b'\]\[1\]"),
        ({"a": {1: 2}}, TypeError, "non-str key"),
        ({1: 2}, TypeError, "keys must be str"),
        ({"a": {1, 2}}, TypeError, "set"),
        ({"a": b"bytes"}, TypeError, "bytes"),
        ([("a", 1)], TypeError, "mapping"),
    ],
)
def test_unstorable_state_is_refused_and_nothing_is_written(
    tmp_path: Path, state: Any, error: type[Exception], match: str
) -> None:
    path = tmp_path / "x.ckpt"
    save_checkpoint(path, {"old": 1})
    with pytest.raises(error, match=match):
        save_checkpoint(path, state)
    assert load_checkpoint(path) == {"old": 1}
    assert stray_files(tmp_path, path.name) == []


# -- files and directories -----------------------------------------------------------------------


def test_a_missing_file_loads_as_none_and_a_missing_directory_is_a_clear_error(
    tmp_path: Path,
) -> None:
    assert load_checkpoint(tmp_path / "none.ckpt") is None
    assert load_checkpoint(tmp_path / "no" / "dir.ckpt") is None
    missing = tmp_path / "no" / "such"
    with pytest.raises(FileNotFoundError, match=r"checkpoint directory .*no/such.* does not exist"):
        save_checkpoint(missing / "x.ckpt", {"a": 1})
    assert not missing.exists()


def test_a_directory_at_the_path_is_refused_on_save_and_on_load(tmp_path: Path) -> None:
    path = tmp_path / "x.ckpt"
    path.mkdir()
    with pytest.raises(OSError):
        save_checkpoint(path, {"a": 1})
    assert stray_files(tmp_path, path.name) == []
    with pytest.raises(CheckpointError, match="cannot read"):
        load_checkpoint(path)


def test_save_replaces_and_syncs_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.ckpt"
    save_checkpoint(path, {"v": 1})
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            events.append(("fsync dir", os.readlink(f"/proc/self/fd/{fd}")))
        else:
            name = Path(os.readlink(f"/proc/self/fd/{fd}")).name
            events.append(("fsync file", name))
            # Everything is written before the sync, and the checkpoint is still the old one.
            assert os.fstat(fd).st_size == len(payload)
            assert load_checkpoint(path) == {"v": 1}
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        events.append(("replace", Path(src).name))
        real_replace(src, dst)

    payload = checkpoint.serialise({"v": 2, "a": np.zeros(1000)})
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    save_checkpoint(path, {"v": 2, "a": np.zeros(1000)})
    monkeypatch.undo()
    assert [kind for kind, _ in events] == ["fsync file", "replace", "fsync dir"]
    temp = events[0][1]
    assert events[1][1] == temp
    assert temp.startswith(".x.ckpt.") and temp.endswith(".tmp")
    assert events[2][1] == str(tmp_path)
    assert load_checkpoint(path)["v"] == 2  # type: ignore[index]


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_a_failed_save_leaves_the_old_checkpoint_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    path = tmp_path / "x.ckpt"
    save_checkpoint(path, {"v": 1})

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(path, {"v": 2})
    monkeypatch.undo()
    assert load_checkpoint(path) == {"v": 1}
    assert stray_files(tmp_path, path.name) == []


def test_a_crash_mid_write_leaves_the_old_checkpoint_and_the_next_save_cleans_up(
    tmp_path: Path,
) -> None:
    state, _ = leaf_state()
    path = tmp_path / "pi-01.ckpt"
    save_checkpoint(path, {"v": 1})
    # What a save killed before its rename leaves: a partial temporary file beside the path.
    partial = checkpoint.serialise(state)[:5000]
    leftover = tmp_path / checkpoint.checkpoint_temp_name(path)
    leftover.write_bytes(partial)
    other = tmp_path / ".pi-01.ckpt.x.0123456789abcdef.tmp"  # another file's, kept
    other.write_bytes(b"")
    assert load_checkpoint(path) == {"v": 1}
    save_checkpoint(path, state)
    assert stray_files(tmp_path, path.name) == [other.name]
    assert_same(load_checkpoint(path), state)  # type: ignore[arg-type]


def test_a_reader_always_sees_the_old_or_the_new_complete_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "big.ckpt"
    rng = np.random.default_rng(3)
    versions = {tag: rng.normal(size=(400, 400)) for tag in ("a", "b")}  # 1.3 MB each
    save_checkpoint(path, {"tag": "a", "x": versions["a"]})
    done = threading.Event()
    seen: list[str] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            while not done.is_set() or not seen:
                loaded = load_checkpoint(path)
                assert loaded is not None
                np.testing.assert_array_equal(loaded["x"], versions[loaded["tag"]])
                seen.append(loaded["tag"])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    reader = threading.Thread(target=read, name="checkpoint-reader")
    reader.start()
    try:
        for i in range(12):
            tag = "ab"[i % 2]
            save_checkpoint(path, {"tag": tag, "x": versions[tag]})
    finally:
        done.set()
        reader.join(timeout=30)
    assert not reader.is_alive()
    assert errors == []
    assert len(seen) >= 1
    assert stray_files(tmp_path, path.name) == []


_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import numpy as np
    from edge_runtime.checkpoint import save_checkpoint
    path = Path(sys.argv[1])
    x = {tag: np.full((300, 300), float(i)) for i, tag in enumerate("ab")}
    i = 0
    while True:
        tag = "ab"[i % 2]
        save_checkpoint(path, {"tag": tag, "i": i, "x": x[tag]})
        print(i, flush=True)
        i += 1
    """
)


def test_sigkill_during_saves_leaves_a_complete_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "killed.ckpt"
    rng = np.random.default_rng(4)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    for attempt in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path)],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        try:
            assert child.stdout is not None
            first = child.stdout.readline()  # one save completed
            assert first.strip() == "0" or attempt > 0
            time.sleep(float(rng.uniform(0.0, 0.05)))
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=10)
            if child.stdout is not None:
                child.stdout.close()
        loaded = load_checkpoint(path)
        assert loaded is not None
        value = "ab".index(loaded["tag"])
        assert loaded["i"] % 2 == value
        np.testing.assert_array_equal(loaded["x"], np.full((300, 300), float(value)))
    save_checkpoint(path, {"v": 1})
    assert stray_files(tmp_path, path.name) == []


# -- damaged and foreign files -------------------------------------------------------------------


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _with_header(header: dict[str, Any], **arrays: np.ndarray) -> bytes:
    raw = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    return _npz(header=raw, **arrays)


_GOOD = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "arrays": {"x": "a0"}, "values": {}}


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty"),
        (b"\x00" * 100, "no zip signature"),
        (b"PK\x03\x04" + b"\x00" * 60, "corrupt or truncated"),
        (pickle.dumps({"x": 1}), "no zip signature"),
        (_npz(x=np.ones(3)), "no header"),
        (_with_header({**_GOOD, "format": "other"}, a0=np.ones(1)), "foreign header"),
        (_with_header({**_GOOD, "version": 2}, a0=np.ones(1)), "version 2 is newer"),
        (_with_header({**_GOOD, "version": "1"}, a0=np.ones(1)), "invalid format version"),
        (_with_header({**_GOOD, "arrays": []}, a0=np.ones(1)), "malformed header"),
        (_with_header({**_GOOD, "values": {"x": 1}}, a0=np.ones(1)), "both an array"),
        (_with_header(_GOOD), "do not match"),
        (_with_header(_GOOD, a0=np.ones(1), a1=np.ones(1)), "do not match"),
        (_with_header({**_GOOD, "arrays": {"x": ["a0"]}}, a0=np.ones(1)), "corrupt"),
        (_npz(header=np.ones(3)), "header is not a byte array"),
        (_npz(header=np.frombuffer(b"\xff\xfe{", dtype=np.uint8)), "corrupt"),
        (_npz(header=np.frombuffer(b"[1, 2]", dtype=np.uint8)), "foreign header"),
    ],
)
def test_damaged_or_foreign_files_raise_checkpoint_error_with_a_one_line_reason(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "bad.ckpt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=reason) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message


def test_a_plain_npy_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "array.npy"
    np.save(path, np.ones(4))
    with pytest.raises(CheckpointError, match="no zip signature"):
        load_checkpoint(path)


def test_every_truncation_is_detected(tmp_path: Path) -> None:
    state, _ = leaf_state(n=90)
    data = checkpoint.serialise(state)
    path = tmp_path / "t.ckpt"
    rng = np.random.default_rng(5)
    lengths = {*range(0, 64), *range(len(data) - 200, len(data))}
    lengths |= set(rng.integers(0, len(data), size=200).tolist())
    for length in sorted(lengths):
        path.write_bytes(data[:length])
        with pytest.raises(CheckpointError):
            load_checkpoint(path)


def test_corrupted_bytes_are_detected_or_harmless(tmp_path: Path) -> None:
    # Any single damaged byte either raises CheckpointError or (zip metadata that carries
    # no data, e.g. a timestamp) loads the same content: never silently different data.
    state, _ = leaf_state(n=90)
    data = checkpoint.serialise(state)
    path = tmp_path / "c.ckpt"
    rng = np.random.default_rng(6)
    detected = 0
    for position in rng.choice(len(data), size=600, replace=False):
        damaged = bytearray(data)
        damaged[position] ^= int(rng.integers(1, 256))
        path.write_bytes(bytes(damaged))
        try:
            loaded = load_checkpoint(path)
        except CheckpointError:
            detected += 1
            continue
        assert loaded is not None
        assert_same(loaded, state)
    assert detected > 500


def test_a_file_larger_than_max_bytes_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "x.ckpt"
    size = save_checkpoint(path, {"x": np.zeros(1000)})
    assert load_checkpoint(path, max_bytes=size) is not None
    with pytest.raises(CheckpointError, match="exceeds max_bytes"):
        load_checkpoint(path, max_bytes=size - 1)


def test_an_archive_unpacking_beyond_max_bytes_is_refused(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, header=np.zeros(10**6, dtype=np.uint8))  # ~1 KB packed
    path = tmp_path / "bomb.ckpt"
    path.write_bytes(buffer.getvalue())
    with pytest.raises(CheckpointError, match="unpack"):
        load_checkpoint(path, max_bytes=100_000)


def test_checkpoint_error_is_a_value_error() -> None:
    assert issubclass(CheckpointError, ValueError)
    assert set(checkpoint.__all__) == {
        "DEFAULT_MAX_BYTES",
        "FORMAT_NAME",
        "FORMAT_VERSION",
        "CheckpointError",
        "load_checkpoint",
        "save_checkpoint",
    }
