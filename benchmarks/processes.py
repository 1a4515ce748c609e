"""Process sampling for every benchmark, done once with psutil: run a command to an end or a
time limit, read a process's CPU time, memory, open files and I/O, stop what was started.

`run_command` takes CPU seconds from ``wait4`` (the process and the children it reaped) and peak
memory from each descendant's ``VmHWM``, polled (``ru_maxrss`` would count the parent's pages a
child held between fork and exec). At the limit it sends SIGINT (``run`` then stops its broker),
then SIGKILL to the process group and to each other descendant still the process found.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

__all__ = [
    "CommandResult", "ProcessSample", "descendants", "edge_runtime_command", "io_counters",
    "log_events_of", "run_command", "sample_process", "stop_processes",
]  # fmt: skip

_POLL_S = 0.05
#: Seconds between two polls of the memory of a running command's processes.
MEMORY_POLL_S = 0.5
#: Seconds a process gets to exit after SIGINT / SIGTERM before SIGKILL.
GRACE_S = 15.0


def edge_runtime_command() -> list[str]:
    """``edge-runtime`` as this interpreter runs it: ``python -m edge_runtime.cli`` (the
    installed script's entry point, importing ``edge_runtime`` as this process does)."""
    return [sys.executable, "-m", "edge_runtime.cli"]


@dataclass(frozen=True)
class ProcessSample:
    """One reading of a live process: user + system CPU seconds, resident set now and its peak
    (``VmHWM``; 0 where the kernel does not say), in bytes, open file descriptors, and bytes it
    caused to be written to storage (``/proc/PID/io``; None where not counted)."""

    cpu_s: float
    rss_bytes: int
    peak_rss_bytes: int
    fds: int
    write_bytes: int | None


def _peak_rss(pid: int) -> int:
    """``VmHWM`` of ``pid`` in bytes; 0 if the kernel does not report it."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def sample_process(pid: int | None = None) -> ProcessSample | None:
    """CPU time, memory, open files and written bytes of ``pid`` (default: this process) now;
    None if it is gone or a zombie."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            cpu = proc.cpu_times()
            rss = proc.memory_info().rss
            fds = proc.num_fds()
            try:
                written: int | None = proc.io_counters().write_bytes
            except (psutil.AccessDenied, AttributeError):
                written = None
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    return ProcessSample(cpu.user + cpu.system, rss, _peak_rss(proc.pid), fds, written)


def io_counters(pid: int | None = None) -> dict[str, int]:
    """I/O counters of ``pid`` (default: this process) by their ``/proc/PID/io`` names (bytes
    through system calls, the calls, bytes from / to storage); psutil.NoSuchProcess if gone."""
    io = psutil.Process(pid).io_counters()
    names = {"rchar": "read_chars", "wchar": "write_chars", "syscr": "read_count",
             "syscw": "write_count", "read_bytes": "read_bytes", "write_bytes": "write_bytes"}
    return {proc_name: getattr(io, name) for proc_name, name in names.items()}


def descendants(pid: int) -> list[tuple[int, float]]:
    """``(pid, creation time)`` of every live descendant of ``pid``."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            found.append((child.pid, child.create_time()))
    return found


def _kill_if_same(pid: int, created: float) -> None:
    """SIGKILL ``pid`` if it is still the process created at ``created``."""
    with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
        proc = psutil.Process(pid)
        if proc.create_time() == created:
            proc.kill()


@dataclass(frozen=True)
class CommandResult:
    """How one command ended: exit status (None: stopped at the time limit), wall seconds, CPU
    seconds of it and the children it reaped, the largest and the summed peak resident sets
    (``VmHWM``, bytes) of its process tree, stdout, the last 2,000 characters of stderr, and
    how many JSON log lines of each ``event`` stderr held (`log_events_of`)."""

    returncode: int | None
    wall_s: float
    cpu_s: float | None
    max_rss_bytes: int | None
    total_rss_bytes: int | None
    stdout: str
    stderr_tail: str
    log_events: dict[str, int] = field(default_factory=dict)

    @property
    def stalled(self) -> bool:
        """Whether the command was stopped at its time limit."""
        return self.returncode is None


def _reap(
    pid: int, deadline: float, peaks: dict[int, int] | None = None
) -> tuple[int, os.struct_rusage] | None:
    """``wait4`` ``pid`` until ``deadline`` (monotonic); None if it still runs. Records the peak
    ``VmHWM`` of it and its descendants in ``peaks`` (pid -> bytes) every `MEMORY_POLL_S`."""
    polled = -math.inf
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done == pid:
            return os.waitstatus_to_exitcode(status), usage
        now = time.monotonic()
        if now >= deadline:
            return None
        if peaks is not None and now - polled >= MEMORY_POLL_S:
            polled = now
            for member in [pid, *(p for p, _ in descendants(pid))]:
                peak = _peak_rss(member)
                if peak:
                    peaks[member] = max(peaks.get(member, 0), peak)
        time.sleep(_POLL_S)


def _kill_tree(pid: int, family: list[tuple[int, float]]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for member, created in family:
        _kill_if_same(member, created)


def run_command(args: Sequence[str], timeout_s: float, *, cwd: Path | None = None) -> CommandResult:
    """Run ``args`` until it exits or ``timeout_s`` seconds (> 0) pass, then stop it; output
    goes to temporary files (no pipe can fill up and block the child)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(list(args), stdout=out, stderr=err, cwd=cwd, start_new_session=True)
        peaks: dict[int, int] = {}
        try:
            reaped = _reap(proc.pid, start + timeout_s, peaks)
            code = None if reaped is None else reaped[0]
            if reaped is None:
                family = descendants(proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGINT)
                reaped = _reap(proc.pid, time.monotonic() + GRACE_S)
                if reaped is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    reaped = _reap(proc.pid, time.monotonic() + GRACE_S)
                for member, created in family:
                    _kill_if_same(member, created)
        except BaseException:  # e.g. Ctrl-C in the benchmark: leave nothing running
            _kill_tree(proc.pid, descendants(proc.pid))
            raise
        wall = time.monotonic() - start
        proc.returncode = -9 if reaped is None else reaped[0]  # reaped here, not by Popen
        usage = None if reaped is None else reaped[1]
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    cpu = None if usage is None else usage.ru_utime + usage.ru_stime
    peak, total = (max(peaks.values()), sum(peaks.values())) if peaks else (None, None)
    tail, events = stderr[-2000:], log_events_of(stderr)
    return CommandResult(code, wall, cpu, peak, total, stdout, tail, events)


def log_events_of(text: str) -> dict[str, int]:
    """Count the JSON log lines of ``text`` (the runtime's stderr off a terminal) by
    ``event``; other lines are skipped."""
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if not line.startswith("{") or '"event"' not in line:
            continue
        with contextlib.suppress(json.JSONDecodeError):
            record = json.loads(line)
            event = record.get("event") if isinstance(record, dict) else None
            if isinstance(event, str):
                counts[event] += 1
    return dict(sorted(counts.items()))


def stop_processes(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process (agents stop cleanly on it), SIGKILL what is left after
    `GRACE_S` seconds, and reap them all."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
