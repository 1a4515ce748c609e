"""Processes for the fleet benchmark: run ``edge-runtime`` commands, read their cost in /proc.

`run_command` runs one command to completion or to a time limit and returns its exit
status, wall time, CPU seconds (from ``wait4``: the process and the children it reaped,
e.g. the Mosquitto that ``edge-runtime run`` starts) and peak memory (``VmHWM`` of the
process and of each descendant, polled; ``wait4``'s ``ru_maxrss`` would count the parent's
pages the child held between fork and exec). A run that
exceeds the limit is interrupted (SIGINT, as Ctrl-C: ``run`` then stops its broker), then
killed with its process group; its other descendants (the broker runs in a session of its
own) are killed by pid. `ProcessSample` reads one live process's CPU time and memory from
``/proc/PID/stat`` and ``/proc/PID/status`` (Linux only).
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

__all__ = [
    "CommandResult",
    "ProcessSample",
    "edge_runtime_command",
    "log_events_of",
    "run_command",
    "sample_process",
    "stop_processes",
]

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_POLL_S = 0.05
#: Seconds between two polls of the memory of a running command's processes.
MEMORY_POLL_S = 0.5
#: Seconds a process gets to exit after SIGINT / SIGTERM before SIGKILL.
GRACE_S = 15.0


def edge_runtime_command() -> list[str]:
    """``edge-runtime`` as this interpreter runs it: ``python -m edge_runtime.cli``.

    The same entry point as the installed ``edge-runtime`` script, importing
    ``edge_runtime`` the way this process does (the repository's tree when run from its
    root).
    """
    return [sys.executable, "-m", "edge_runtime.cli"]


@dataclass(frozen=True)
class CommandResult:
    """How one command ended.

    Attributes
    ----------
    returncode : int or None
        Exit status; None when it was stopped at the time limit.
    wall_s : float
        Seconds from start to exit (or to the stop).
    cpu_s : float or None
        User plus system CPU seconds of the process and the children it reaped.
    max_rss_bytes : int or None
        Largest peak resident set (``VmHWM``) of one process of the tree, bytes.
    total_rss_bytes : int or None
        Sum over the processes of the tree of their peak resident sets, bytes: an upper
        bound of the memory the command needed at once.
    stdout : str
    stderr_tail : str
        The last lines of stderr (at most 2,000 characters).
    log_events : dict of str to int
        How many structured (JSON) log lines of each ``event`` stderr held, e.g.
        ``publish_not_delivered`` (`log_events_of`).
    """

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


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/PID/stat`` after the command name (field 3 on), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _descendants(pid: int) -> list[tuple[int, str]]:
    """``(pid, start time)`` of every live descendant of ``pid`` (scan of /proc)."""
    parents: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            parents[int(entry.name)] = (int(fields[1]), fields[19])
    found: list[tuple[int, str]] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, started) in parents.items():
            if ppid == parent:
                found.append((child, started))
                frontier.append(child)
    return found


def _kill_if_same(pid: int, started: str) -> None:
    """SIGKILL ``pid`` if it is still the process that started at ``started``."""
    fields = _stat_fields(pid)
    if fields is not None and fields[19] == started:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _peak_rss(pid: int) -> int | None:
    """``VmHWM`` of ``pid`` in bytes; None if it is gone (or a zombie)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def _reap(
    pid: int, deadline: float, peaks: dict[int, int] | None = None
) -> tuple[int, os.struct_rusage] | None:
    """``wait4`` ``pid`` until ``deadline`` (monotonic); None if it is still running.

    With ``peaks``, records the largest ``VmHWM`` of ``pid`` and of each descendant every
    `MEMORY_POLL_S` seconds (pid -> bytes).
    """
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
            for member in [pid, *(p for p, _ in _descendants(pid))]:
                peak = _peak_rss(member)
                if peak is not None:
                    peaks[member] = max(peaks.get(member, 0), peak)
        time.sleep(_POLL_S)


def run_command(args: Sequence[str], timeout_s: float, *, cwd: Path | None = None) -> CommandResult:
    """Run ``args`` until it exits or ``timeout_s`` seconds pass (then stop it).

    stdout and stderr go to temporary files (no pipe can fill up and block the child).

    Parameters
    ----------
    args : sequence of str
    timeout_s : float
        Time limit in seconds, > 0.
    cwd : Path, optional

    Returns
    -------
    CommandResult
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(list(args), stdout=out, stderr=err, cwd=cwd, start_new_session=True)
        peaks: dict[int, int] = {}
        try:
            reaped = _reap(proc.pid, start + timeout_s, peaks)
            if reaped is None:
                family = _descendants(proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGINT)
                reaped = _reap(proc.pid, time.monotonic() + GRACE_S)
                if reaped is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    reaped = _reap(proc.pid, time.monotonic() + GRACE_S)
                for pid, started in family:
                    _kill_if_same(pid, started)
                code = None
            else:
                code = reaped[0]
        except BaseException:  # e.g. Ctrl-C in the benchmark: leave nothing running
            family = _descendants(proc.pid)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            for pid, started in family:
                _kill_if_same(pid, started)
            raise
        wall = time.monotonic() - start
        proc.returncode = -9 if reaped is None else reaped[0]  # reaped here, not by Popen
        usage = None if reaped is None else reaped[1]
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    return CommandResult(
        returncode=code,
        wall_s=wall,
        cpu_s=None if usage is None else usage.ru_utime + usage.ru_stime,
        max_rss_bytes=max(peaks.values()) if peaks else None,
        total_rss_bytes=sum(peaks.values()) if peaks else None,
        stdout=stdout,
        stderr_tail=stderr[-2000:],
        log_events=log_events_of(stderr),
    )


def log_events_of(text: str) -> dict[str, int]:
    """Count the structured log lines of ``text`` (one JSON object per line, as the
    runtime logs when its stderr is not a terminal) by their ``event``; other lines are
    skipped."""
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if not line.startswith("{") or '"event"' not in line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        event = record.get("event") if isinstance(record, dict) else None
        if isinstance(event, str):
            counts[event] += 1
    return dict(sorted(counts.items()))


@dataclass(frozen=True)
class ProcessSample:
    """One reading of a live process's counters.

    Attributes
    ----------
    cpu_s : float
        User plus system CPU seconds so far (``/proc/PID/stat`` utime + stime).
    rss_bytes : int
        Resident set now (``VmRSS``).
    peak_rss_bytes : int
        Largest resident set so far (``VmHWM``).
    """

    cpu_s: float
    rss_bytes: int
    peak_rss_bytes: int


def sample_process(pid: int) -> ProcessSample | None:
    """CPU time and memory of ``pid`` now; None if it is gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    memory = {
        line.split(":")[0]: int(line.split()[1]) * 1024
        for line in status.splitlines()
        if line.startswith(("VmRSS:", "VmHWM:"))
    }
    return ProcessSample(
        cpu_s=(int(fields[11]) + int(fields[12])) / _TICKS,
        rss_bytes=memory.get("VmRSS", 0),
        peak_rss_bytes=memory.get("VmHWM", 0),
    )


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
