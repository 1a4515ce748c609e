"""The async local sources against real parts: subprocesses, files being appended to,
truncated and rotated, named pipes, and a pseudo-terminal standing in for a serial port.

Every wait is bounded (`asyncio.wait_for`); settings are shrunk so restarts and polls take
milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from structlog.testing import capture_logs

from edge_runtime.sources import (
    FileSource,
    Source,
    SourceError,
    SourceSettings,
    SourceSpec,
    open_source,
)
from edge_runtime.sources.command import CommandProtocol, CommandSource, pipes_closed
from edge_runtime.wire import SensorReadings

FAST = SourceSettings(
    poll_interval_s=0.02,
    restart_initial_s=0.02,
    restart_max_s=0.1,
    kill_timeout_s=0.5,
    cursor_interval_s=0.05,
    cursor_every_readings=16,
    serial_timeout_s=0.05,
)
STEP_S = 5.0  # bound of any one wait for readings


async def take(source: Source, rows: int, timeout: float = STEP_S) -> list[SensorReadings]:
    """Batches from ``source`` until ``rows`` readings arrived (fails after ``timeout``)."""
    got: list[SensorReadings] = []

    async def collect() -> None:
        n = 0
        async for readings in source.readings():
            got.append(readings)
            n += len(readings.values)
            if n >= rows:
                return

    await asyncio.wait_for(collect(), timeout)
    return got


def rows_of(batches: list[SensorReadings]) -> tuple[list[int], np.ndarray]:
    """(sequence number of every row, all rows), checking each batch is consecutive."""
    seqs: list[int] = []
    for batch in batches:
        assert batch.seq is not None
        seqs += range(batch.seq, batch.seq + len(batch.values))
    return seqs, np.vstack([b.values for b in batches])


def python(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


def append(path: Path, text: str) -> None:
    with open(path, "a") as file:
        file.write(text)


# ---------------------------------------------------------------------------- command
async def test_command_source_reads_csv_and_json_lines_and_counts_bad_ones() -> None:
    script = (
        "print('temp,hum')\n"
        "print('1.5,2.5')\n"
        "print('[3, 4]')\n"
        'print(\'{"t": 1, "x": [5, 6]}\')\n'
        "print('7,nan')\n"
        "print('8,9,10')\n"
        "print('11,12')\n"
    )
    rejected: list[tuple[str, str]] = []
    spec = SourceSpec(kind="command", command=python(script), restart="never")
    source = open_source(
        spec,
        node_id="pi-07",
        start_seq=lambda sid: {"command:pi-07": 40}[sid],
        on_reject=lambda sid, reason: rejected.append((sid, reason)),
        settings=FAST,
    )
    async with source:
        assert source.source_id == "command:pi-07"
        batches = await take(source, 4)
        seqs, values = rows_of(batches)
        assert seqs == [40, 41, 42, 43]
        np.testing.assert_array_equal(values, [[1.5, 2.5], [3, 4], [5, 6], [11, 12]])
        assert all(b.source == "command:pi-07" for b in batches)
        with pytest.raises(StopAsyncIteration):  # restart = "never": the source ends
            await asyncio.wait_for(source.readings().__anext__(), STEP_S)
    assert source.rejects == Counter({"not_numeric": 1, "non_finite": 1, "width": 1})
    assert sorted(r for _, r in rejected) == ["non_finite", "not_numeric", "width"]
    assert source.status()["next_seq"] == 44 and source.status()["returncode"] == 0


async def test_command_is_restarted_with_backoff_and_seq_continues() -> None:
    script = "import sys\nfor i in range(3): print(f'{i},{i * 10}', flush=True)\nsys.exit(3)"
    spec = SourceSpec(kind="command", command=python(script))
    source = open_source(spec, node_id="n", start_seq=5, settings=FAST, rng=random.Random(0))
    with capture_logs() as logs:
        async with source:
            seqs, values = rows_of(await take(source, 9))
            starts = source.starts
    assert seqs[:9] == list(range(5, 14))
    np.testing.assert_array_equal(values[:9, 0], [0, 1, 2] * 3)
    assert starts >= 3
    exits = [e for e in logs if e["event"] == "command_exited"]
    assert len(exits) >= 2
    assert all(e["returncode"] == 3 and e["log_level"] == "warning" for e in exits)
    assert all(0 < e["restart_in_s"] <= FAST.restart_max_s for e in exits)


async def test_a_command_that_exits_zero_is_not_restarted_under_on_failure() -> None:
    spec = SourceSpec(kind="command", command=python("print('1,2')"), restart="on-failure")
    async with open_source(spec, node_id="n", settings=FAST) as source:
        batches = await asyncio.wait_for(_all(source), STEP_S)
    assert rows_of(batches)[0] == [0] and source.starts == 1


async def _all(source: Source) -> list[SensorReadings]:
    return [batch async for batch in source.readings()]


async def test_command_stderr_is_logged_rate_limited() -> None:
    script = "import sys\nfor i in range(50): print(f'oops {i}', file=sys.stderr)\nprint('1,2')"
    spec = SourceSpec(kind="command", command=python(script), restart="never")
    settings = SourceSettings(stderr_lines_per_interval=3, log_interval_s=60.0)
    with capture_logs() as logs:
        async with open_source(spec, node_id="n", settings=settings) as source:
            await asyncio.wait_for(_all(source), STEP_S)
    lines = [e["line"] for e in logs if e["event"] == "command_stderr"]
    assert lines == ["oops 0", "oops 1", "oops 2"]
    summary = [e for e in logs if e["event"] == "command_stderr_suppressed"]
    assert [e["suppressed"] for e in summary] == [47]


async def test_closing_a_command_source_terminates_then_kills_its_process_group() -> None:
    # A shell that ignores SIGTERM, with a child of its own: both must be gone after close.
    script = "trap '' TERM; echo 1,2; sleep 60 & echo $! >&2; wait"
    spec = SourceSpec(kind="command", command=("sh", "-c", script))
    settings = dataclasses.replace(FAST, kill_timeout_s=0.2)
    with capture_logs() as logs:
        source = open_source(spec, node_id="n", settings=settings)
        await take(source, 1)
        for _ in range(100):  # the child's pid arrives on stderr
            if any(e["event"] == "command_stderr" for e in logs):
                break
            await asyncio.sleep(0.02)
        child = int(next(e["line"] for e in logs if e["event"] == "command_stderr"))
        started = time.monotonic()
        await asyncio.wait_for(source.aclose(), STEP_S)
        took = time.monotonic() - started
    assert settings.kill_timeout_s <= took < settings.kill_timeout_s + 2
    assert any(e["event"] == "command_killed" for e in logs)
    for _ in range(100):  # SIGKILL is delivered asynchronously
        if not alive(child):
            break
        await asyncio.sleep(0.02)
    assert not alive(child)


async def test_a_close_that_lands_as_a_runs_clean_up_completes_is_never_lost() -> None:
    # The clean-up after a run (`_stop`) is cancelled at each of its first loop iterations in
    # turn, the run already over (the command exited, its pipes closed), so each wait there
    # completes at once. Whenever the cancellation reached the task before it ended, the task
    # must end cancelled: Python 3.11's asyncio.wait_for returned normally instead (CPython
    # gh-86296), and the producer then restarted the command and blocked for ever on its full
    # queue with `aclose` waiting for it (the restart test hung under load, 4 of 30 runs).
    source = open_source(SourceSpec(kind="command", command=("true",)), node_id="n", settings=FAST)
    assert isinstance(source, CommandSource)
    loop = asyncio.get_running_loop()
    lost = []
    for hops in range(12):
        protocol = CommandProtocol(loop, FAST.read_chunk_bytes, lambda line: None)
        transport, _ = await loop.subprocess_exec(
            lambda protocol=protocol: protocol, "true",
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(STEP_S):
            while not (protocol.exited.done() and protocol.stdout_eof):
                await asyncio.sleep(0.01)
        assert await pipes_closed(transport, STEP_S)
        stop = loop.create_task(source._stop(transport, protocol))
        for _ in range(hops):
            await asyncio.sleep(0)
        requested = stop.cancel()
        try:
            async with asyncio.timeout(STEP_S):
                await stop
        except asyncio.CancelledError:
            continue
        finally:
            transport.close()  # a task cancelled before its first step never ran `_stop`
        if requested:
            lost.append(hops)
    assert lost == [], f"cancellation lost when it came after {lost} loop iterations"


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_a_missing_command_fails_at_open_in_one_line() -> None:
    spec = SourceSpec(kind="command", command=("no-such-sensor-reader-xyz",))
    with pytest.raises(SourceError) as info:
        open_source(spec, node_id="n")
    assert "no-such-sensor-reader-xyz" in str(info.value) and "\n" not in str(info.value)


async def test_cancelling_a_waiting_consumer_loses_no_reading() -> None:
    script = "import time\nprint('1,1', flush=True)\ntime.sleep(0.3)\nprint('2,2', flush=True)"
    spec = SourceSpec(kind="command", command=python(script), restart="never")
    async with open_source(spec, node_id="n", settings=FAST) as source:
        first = await take(source, 1)
        consumer = asyncio.create_task(take(source, 1))
        await asyncio.sleep(0.05)  # waiting for the second reading
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
        second = await take(source, 1)
    assert rows_of(first + second)[0] == [0, 1]
    assert second[0].values.tolist() == [[2.0, 2.0]]


async def test_a_closed_source_ends_its_iteration_and_refuses_to_restart() -> None:
    spec = SourceSpec(kind="command", command=("sleep", "30"))
    source = open_source(spec, node_id="n", settings=FAST)
    consumer = asyncio.create_task(_all(source))
    await asyncio.sleep(0.1)
    await asyncio.wait_for(source.aclose(), STEP_S)
    assert await asyncio.wait_for(consumer, STEP_S) == []
    with pytest.raises(RuntimeError, match="closed"):
        source.readings()


# ---------------------------------------------------------------------------- file
async def test_file_source_follows_appends_truncation_and_rotation(tmp_path: Path) -> None:
    path = tmp_path / "readings.csv"
    path.write_text("1,1\n2,2\nbad line\n")
    spec = SourceSpec(kind="file", path=path)
    source = open_source(spec, node_id="n", settings=FAST, n_features=2)
    assert isinstance(source, FileSource)
    async with source:
        assert source.source_id == f"file:{path}"
        got = await take(source, 2)
        append(path, "3,3\n4,4,4\n5,")  # a line being written...
        got += await take(source, 1)
        append(path, "5\n")  # ...completed later
        got += await take(source, 1)
        path.write_text("6,6\n")  # truncated in place (copytruncate) and rewritten
        got += await take(source, 1)
        path.rename(tmp_path / "readings.csv.1")  # rotated: renamed, then recreated
        append(tmp_path / "readings.csv.1", "7,7\n")  # the writer's last line in the old file
        path.write_text("8,8\n9,9\n")
        got += await take(source, 3)
        seqs, values = rows_of(got)
        assert seqs == list(range(8))
        assert values[:, 0].tolist() == [1, 2, 3, 5, 6, 7, 8, 9]
        assert source.truncations == 1 and source.rotations == 1
    assert source.rejects == Counter({"not_numeric": 1, "width": 1})


async def test_file_source_without_follow_ends_at_the_end_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("".join(f"{i},{i}\n" for i in range(150)) + "150,150")  # no final newline
    spec = SourceSpec(kind="file", path=path, follow=False)
    async with open_source(spec, node_id="n", settings=FAST) as source:
        batches = await asyncio.wait_for(_all(source), STEP_S)
    seqs, values = rows_of(batches)
    assert seqs == list(range(151)) and values[-1].tolist() == [150, 150]
    assert max(len(b.values) for b in batches) == FAST.max_batch_rows  # batched, not per row


@pytest.mark.parametrize("with_state_dir", [True, False])
async def test_file_source_resumes_exactly_once_after_a_restart(
    tmp_path: Path, with_state_dir: bool
) -> None:
    path = tmp_path / "r.csv"
    lines = [f"{i},{-i}" if i % 7 else "rejected" for i in range(1, 301)]
    path.write_text("\n".join(lines[:200]) + "\n")
    expected = [float(line.split(",")[0]) for line in lines if line != "rejected"]
    state_dir = tmp_path / "state" if with_state_dir else None
    if state_dir:
        state_dir.mkdir()
    spec = SourceSpec(kind="file", path=path)
    delivered: list[float] = []
    consumed = 0  # what a leaf's checkpoint says: readings 0 .. consumed - 1 are applied
    for run in range(3):
        source = open_source(
            spec, node_id="n", start_seq=consumed, settings=FAST, state_dir=state_dir
        )
        async with source:
            batches = await take(source, 60)
            seqs, values = rows_of(batches)
            assert seqs[0] == consumed  # continues exactly where the consumer stopped
            delivered += values[:, 0].tolist()
            consumed = seqs[-1] + 1
            if run == 0:
                append(path, "\n".join(lines[200:]) + "\n")
                await asyncio.sleep(0.1)  # read some of it, more than was consumed
            if run == 1:
                assert source.resumed_at is not None
                # Re-read lines before the resume point are not reported as rejects again.
                first_line = [i for i, v in enumerate(lines) if v != "rejected"][seqs[0]]
                later = lines[first_line:].count("rejected")
                assert 0 < source.rejects["not_numeric"] <= later
                if with_state_dir:  # resumed from a cursor, not the start of the file
                    assert source.resumed_at[0] > 0
    assert delivered == expected[: len(delivered)] and len(delivered) == consumed >= 180


async def test_file_replaced_while_stopped_is_read_from_its_start_as_new_readings(
    tmp_path: Path,
) -> None:
    path = tmp_path / "r.csv"
    path.write_text("".join(f"{i},0\n" for i in range(10)))
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    spec = SourceSpec(kind="file", path=path)
    async with open_source(spec, node_id="n", settings=FAST, state_dir=state_dir) as source:
        assert rows_of(await take(source, 10))[0] == list(range(10))
    path.rename(tmp_path / "r.csv.1")
    path.write_text("100,0\n101,0\n")
    with capture_logs() as logs:
        async with open_source(
            spec, node_id="n", start_seq=10, settings=FAST, state_dir=state_dir
        ) as source:
            seqs, values = rows_of(await take(source, 2))
    assert seqs == [10, 11] and values[:, 0].tolist() == [100, 101]
    assert any(e["event"] == "file_replaced_while_stopped" for e in logs)


async def test_file_resume_cost_on_100k_lines_is_measured(tmp_path: Path) -> None:
    """Resuming at the end of a 100,000-line file: re-reading it (no state_dir) versus
    seeking to a saved cursor (state_dir). The timings are printed (``-s``)."""
    path = tmp_path / "big.csv"
    path.write_bytes(b"0.123456,-1.5,2.25,3e-3,-0.5,10.125,7.75,-8.0\n" * 100_000)
    append(path, "1,2,3,4,5,6,7,8\n")  # reading 100,000: the one a restart waits for
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    spec = SourceSpec(kind="file", path=path)
    timings = {}
    async with open_source(spec, node_id="n", start_seq=99_990, state_dir=state_dir) as first:
        await take(first, 11)  # saves a cursor near the end when it reaches it
    for label, directory in (("re-read", None), ("cursor", state_dir)):
        started = time.perf_counter()
        async with open_source(spec, node_id="n", start_seq=100_000, state_dir=directory) as source:
            batches = await take(source, 1, timeout=30)
        timings[label] = time.perf_counter() - started
        assert batches[0].seq == 100_000 and batches[0].values[0, 0] == 1.0
    print(f"\nresume at reading 100,000 of 8 values: {timings}")
    assert timings["cursor"] < timings["re-read"]


async def test_named_pipe_source_reads_from_writers_that_come_and_go(tmp_path: Path) -> None:
    fifo = tmp_path / "sensor.fifo"
    os.mkfifo(fifo)
    spec = SourceSpec(kind="file", path=fifo)
    async with open_source(spec, node_id="n", start_seq=7, settings=FAST) as source:
        reader = asyncio.create_task(take(source, 5))
        await asyncio.sleep(0.05)  # the source has the pipe open
        for text in ("1,1\n2,2\n", "oops\n3,3\n", "4,4\n5,5\n"):  # three writers in turn
            fd = await asyncio.to_thread(os.open, fifo, os.O_WRONLY)
            os.write(fd, text.encode())
            os.close(fd)
            await asyncio.sleep(0.02)
        seqs, values = rows_of(await asyncio.wait_for(reader, STEP_S))
    assert seqs == list(range(7, 12)) and values[:, 0].tolist() == [1, 2, 3, 4, 5]
    assert source.rejects == Counter({"not_numeric": 1})


async def test_a_missing_file_is_waited_for_when_followed(tmp_path: Path) -> None:
    path = tmp_path / "later.csv"
    spec = SourceSpec(kind="file", path=path)
    async with open_source(spec, node_id="n", settings=FAST) as source:
        reader = asyncio.create_task(take(source, 1))
        await asyncio.sleep(0.1)
        path.write_text("1,2\n")
        assert rows_of(await asyncio.wait_for(reader, STEP_S))[0] == [0]
    spec = SourceSpec(kind="file", path=path.with_name("never.csv"), follow=False)
    async with open_source(spec, node_id="n", settings=FAST) as source:
        with pytest.raises(SourceError, match="does not exist"):
            await asyncio.wait_for(_all(source), STEP_S)


async def test_a_file_full_of_garbage_is_rejected_line_by_line_never_fatal(
    tmp_path: Path,
) -> None:
    path = tmp_path / "garbage.csv"
    path.write_bytes(
        b"\x00\xff\xfe binary\n"
        + b"9" * (70 * 1024)  # a line far beyond 64 KiB
        + b'\n[1, 2\n\n1,inf\n{"x": [1, 2]}\n3,4\n'
    )
    spec = SourceSpec(kind="file", path=path, follow=False)
    async with open_source(spec, node_id="n", settings=FAST) as source:
        seqs, values = rows_of(await asyncio.wait_for(_all(source), STEP_S))
    assert seqs == [0, 1] and values.tolist() == [[1, 2], [3, 4]]
    assert source.rejects == Counter(
        {"not_numeric": 1, "too_long": 1, "json": 1, "empty": 1, "non_finite": 1}
    )


# ---------------------------------------------------------------------------- serial
async def test_serial_source_reads_a_pseudo_terminal() -> None:
    pytest.importorskip("serial", reason="pyserial (the 'serial' extra) is not installed")
    controller, device = os.openpty()
    try:
        port = os.ttyname(device)
        spec = SourceSpec(kind="serial", port=port, baudrate=115200)
        async with open_source(spec, node_id="n", start_seq=3, settings=FAST) as source:
            assert source.source_id == f"serial:{port}"
            reader = asyncio.create_task(take(source, 3))
            await asyncio.sleep(0.2)  # the port is open (and its input flushed)
            # The first line after opening is dropped: it may be the tail of a reading.
            os.write(controller, b"5,1013.2\r\n1.5,2\r\nnot a reading\r\n3,4\r\n")
            os.write(controller, b"5,6\r\n")
            seqs, values = rows_of(await asyncio.wait_for(reader, STEP_S))
        assert seqs == [3, 4, 5] and values.tolist() == [[1.5, 2], [3, 4], [5, 6]]
        assert source.rejects == Counter({"not_numeric": 1})
    finally:
        os.close(controller)
        os.close(device)


def test_a_serial_source_without_pyserial_names_the_extra_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "serial", None)  # what Python does for a missing module
    with pytest.raises(SourceError) as info:
        open_source(SourceSpec(kind="serial", port="/dev/ttyUSB0"), node_id="n")
    message = str(info.value)
    assert "\n" not in message
    assert "pyserial" in message and ".whl[serial]'" in message and "'edge-runtime[" not in message
