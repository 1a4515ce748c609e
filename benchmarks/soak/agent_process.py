"""One ``edge-runtime agent`` process as a device runs it, for the benchmarks that start their
own (the soak, the Pi budget): started by pid, its stdout and stderr (the JSON log) appended to a
log file, waited for until it logs ``connected``, stopped by pid."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchmarks.processes import edge_runtime_command


class AgentProcess:
    """``COMMAND agent --topology T --node N --broker URL [EXTRA ...]`` in ``cwd`` with ``env``
    (None: this process's); ``command`` defaults to `edge_runtime_command`; ``log`` None: a
    temporary file, removed by `stop`."""

    def __init__(self, topology: Path, node: str, url: str, log: Path | None,
                 extra: Sequence[str] = (), *, command: Sequence[str] | None = None,
                 cwd: Path | None = None, env: Mapping[str, str] | None = None) -> None:
        self.temporary, self.terminated = log is None, False
        if log is None:
            fd, name = tempfile.mkstemp(prefix=f"agent-{node}-", suffix=".log")
            os.close(fd)
            log = Path(name)
        self.node, self.log, self.started = node, log, time.monotonic()
        self._offset = log.stat().st_size if log.exists() else 0
        argv = [*(command or edge_runtime_command()), "agent", "--topology", str(topology),
                "--node", node, "--broker", url, *extra]
        with log.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                                         env=None if env is None else dict(env))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        """What this process logged so far."""
        with self.log.open("rb") as f:
            f.seek(self._offset)
            return f.read().decode("utf-8", "replace")

    def wait_connected(self, timeout_s: float) -> bool:
        """Whether it logged ``connected`` within ``timeout_s`` seconds (False if it exited)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            if '"connected"' in self.text():
                return True
            time.sleep(0.05)
        return False

    def kill(self) -> None:
        """SIGKILL, reaped."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self) -> None:
        """SIGTERM once (an agent stops cleanly on it), if it is running."""
        if self.proc.poll() is None and not self.terminated:
            self.proc.terminate()
            self.terminated = True

    def stop(self, grace_s: float = 10.0) -> None:
        """`terminate`, SIGKILL after ``grace_s`` seconds; reaped."""
        self.terminate()
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.temporary:
            self.log.unlink(missing_ok=True)
