"""What the command line prints about a run and a model: the self-overwriting progress
line of ``run``, its text summary, and the model line of ``watch``.
"""

from __future__ import annotations

import sys
import time

from edge_runtime.monitor import privacy_of
from edge_runtime.runner import Progress, RunSummary
from edge_runtime.wire import PrivacyParams, SubspaceMessage

__all__ = ["ProgressLine", "model_line", "print_summary", "privacy_text"]


class ProgressLine:
    """One self-overwriting status line on a terminal, at most 10 times a second.

    Parameters
    ----------
    enabled : bool
        False: calls and `close` print nothing (``--json``, or stderr not a terminal).
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._last = 0.0

    def __call__(self, p: Progress) -> None:
        """Rewrite the line with ``p`` (on stderr), unless the last one is under 0.1 s old."""
        now = time.monotonic()
        if not self.enabled or now - self._last < 0.1:
            return
        self._last = now
        sys.stderr.write(
            f"\rreplayed {p.samples_replayed}/{p.samples_total} samples | "
            f"leaves reporting {p.leaves_reporting}/{p.leaves_total} | "
            f"root rank {p.root_rank}, n={p.root_n_samples} | {p.elapsed_s:.1f} s  "
        )
        sys.stderr.flush()

    def close(self) -> None:
        """End the line (a newline on stderr), when enabled."""
        if self.enabled:
            sys.stderr.write("\n")


def print_summary(s: RunSummary) -> None:
    """Print the text summary of ``run`` on stdout: one aligned ``label  value`` line per
    figure (``--json`` prints `RunSummary.as_dict` instead)."""
    ratio = s.payload_bytes / s.raw_bytes if s.raw_bytes else float("nan")
    lines = [
        f"samples replayed    {s.samples} x {s.n_features} features",
        f"leaves reporting    {s.leaves_reporting}/{s.leaves_total}",
        f"root rank           {s.rank} (covers {s.root_n_samples} samples)",
        f"error ratio         {s.error_ratio:.6f}  (vs offline rank-{s.rank} SVD"
        + (f" of the {s.samples - s.out_of_range} accepted readings" if s.out_of_range else "")
        + "; 1.0 optimal)",
        *(
            [f"out of range        {s.out_of_range} readings rejected by the leaves' valid_range"]
            if s.out_of_range
            else []
        ),
        f"MQTT messages       {s.messages} ({s.payload_bytes} payload bytes, "
        f"{ratio:.2f}x the {s.raw_bytes} bytes of the raw readings)",
        f"sensor messages     {s.sensor_messages} ({s.sensor_bytes} bytes)",
        f"merges              {s.merges}"
        if s.rounds is None
        else f"rounds              {s.rounds} (FedPower; the root's model is round {s.rounds})",
        f"rejected messages   {s.rejects}",
        f"privacy             {privacy_text(s.privacy)}",
        f"throughput          {_maybe(s.readings_per_s, '.0f')} readings/s "
        "(first reading sent to the root covering every reading)",
        f"latency to root     p50 {_maybe(s.latency_p50_s, '.3f')} s, "
        f"p95 {_maybe(s.latency_p95_s, '.3f')} s",
        f"re-sent readings    {s.resent}",
        f"undelivered         {s.undelivered} snapshots",
        f"peak memory         {s.peak_rss_bytes / 2**20:.0f} MiB ({_hosts_text(s.workers)})",
        f"wall time           {s.wall_s:.2f} s",
    ]
    print("\n".join(lines))


def privacy_text(privacy: PrivacyParams | None) -> str:
    """The guarantee line of `run`: budget per reading, neighbouring relation, mechanism,
    clip norm (`privacy_of`)."""
    if privacy is None:
        return "none (some leaf publishes without noise)"
    return (
        f"({privacy.epsilon:g}, {privacy.delta:g})-DP per reading, "
        f"{privacy.neighbours} neighbours, mechanism {privacy.mechanism}, "
        f"clip norm {privacy.clip_norm:g}"
    )


def model_line(model: SubspaceMessage) -> dict[str, object]:
    """The root model as ``watch`` reports it: ``n_samples``, ``rank``,
    ``leaves_covered`` (sorted leaf ids with samples), ``seq``, ``epoch``, ``timestamp``
    (Unix seconds) and ``privacy`` (`privacy_of` as `PrivacyParams.to_json`, None without
    a guarantee)."""
    privacy = privacy_of(model)
    return {
        "n_samples": model.n_samples,
        "rank": model.rank,
        "leaves_covered": sorted(k for k, v in model.provenance.items() if v > 0),
        "seq": model.seq,
        "epoch": model.epoch,
        "timestamp": model.timestamp,
        "privacy": None if privacy is None else privacy.to_json(),
    }


def _maybe(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _hosts_text(workers: int) -> str:
    if workers == 1:
        return "this process, hosting every agent"
    return f"sum over this process and {workers} worker processes hosting the agents"
