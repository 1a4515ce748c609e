"""Section (g) of ``REPORT.md`` (the fleet benchmark) and issue 9's Done-when checks.

`checks` evaluates the Done-when items of issue 9 that the fleet benchmark measures;
`section` renders the Markdown of whichever parts ran; its plot ``PLOT`` is drawn by
`benchmarks.fleet.plot`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from benchmarks.fleet.dtype import DtypeResult
from benchmarks.fleet.live import AgentCostResult, LatencyResult, ProcessCost
from benchmarks.fleet.scaling import MotesResult, SweepResult, SweepRow
from benchmarks.reporting import Check, prose, table

__all__ = ["PLOT", "checks", "section"]

PLOT = "fleet.png"

#: Targets of issue 9's Done-when list.
DONE_K = 1024
DONE_K_BASE = 128
MAX_WALL_GROWTH = 12.0  # wall(1024) / wall(128); linear is 8
MAX_ERROR_RATIO = 1.001
MAX_MESSAGES_PER_READING = 0.05
MAX_SWEEP_PAYLOAD = 1 / 5
MAX_MOTES_PAYLOAD = 1 / 20
MIN_MOTES_READINGS_PER_S = 22_000.0


def _fmt(value: float | None, fmt: str, scale: float = 1.0) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return format(value * scale, fmt)


def _all(conditions: Sequence[bool | None]) -> bool | None:
    """False if any is False, else None if any is unknown, else True."""
    if any(c is False for c in conditions):
        return False
    return None if any(c is None for c in conditions) else True


def _at_most(value: float | None, bound: float) -> bool | None:
    return None if value is None or not math.isfinite(value) else value <= bound


def _row(sweep: SweepResult | None, k: int) -> SweepRow | None:
    if sweep is None:
        return None
    return next((r for r in sweep.rows if r.n_leaves == k), None)


def _wall_growth(sweep: SweepResult, k: int, base: int) -> float | None:
    hi, lo = _row(sweep, k), _row(sweep, base)
    if hi is None or lo is None:
        return None
    a, b = hi.medians.get("wall_s"), lo.medians.get("wall_s")
    return None if a is None or not b else a / b


def _runs_text(row: SweepRow) -> str:
    ok = sum(r.covered for r in row.runs)
    stalled = sum(r.returncode is None for r in row.runs)
    text = f"{ok}/{len(row.runs)}"
    return text + (f" ({stalled} stalled)" if stalled else "")


def _sweep_checks(sweep: SweepResult) -> list[Check]:
    out: list[Check] = []
    top = _row(sweep, DONE_K)
    if top is None:
        out.append(
            Check(
                f"k = {DONE_K} leaves in one run, defaults",
                f"not run (ks: {', '.join(str(r.n_leaves) for r in sweep.rows)})",
                "exit 0, covered, error ratio <= 1.001, 0 re-sent, 0 undelivered",
                None,
            )
        )
    else:
        m = top.medians
        exits = all(r.returncode == 0 for r in top.runs) and bool(top.runs)
        covered = all(r.covered for r in top.runs) and bool(top.runs)
        resent = m.get("resent")
        undelivered = m.get("undelivered")
        out.append(
            Check(
                f"k = {DONE_K} leaves in one run (fan-out {top.fan_out}, depth 2, "
                f"{top.readings_per_leaf} readings per leaf), defaults",
                f"exit 0 and covered in {_runs_text(top)} runs; error ratio "
                f"{_fmt(m.get('error_ratio'), '.6f')}; re-sent {_fmt(resent, '.0f')}; "
                f"publish_not_delivered {_fmt(undelivered, '.0f')}",
                "exit 0, covered, error ratio <= 1.001, 0 re-sent, 0 undelivered",
                _all(
                    [
                        exits,
                        covered,
                        _at_most(m.get("error_ratio"), MAX_ERROR_RATIO),
                        _at_most(resent, 0),
                        _at_most(undelivered, 0),
                    ]
                ),
            )
        )
    if sweep.large is not None:
        out.append(_large_check(sweep.large))
    growth = _wall_growth(sweep, DONE_K, DONE_K_BASE)
    out.append(
        Check(
            f"wall(k = {DONE_K}) / wall(k = {DONE_K_BASE}), same readings per leaf",
            "not measured" if growth is None else f"{growth:.2f} (linear: 8)",
            f"<= {MAX_WALL_GROWTH:g}",
            _at_most(growth, MAX_WALL_GROWTH),
        )
    )
    for key, bound, item, target in (
        (
            "messages_per_reading",
            MAX_MESSAGES_PER_READING,
            "Agent messages per reading at every k of the sweep",
            f"<= {MAX_MESSAGES_PER_READING}",
        ),
        (
            "payload_ratio",
            MAX_SWEEP_PAYLOAD,
            "Payload / raw bytes at every k of the sweep",
            "<= 1/5 (0.2)",
        ),
    ):
        values = [(r.n_leaves, r.medians.get(key)) for r in sweep.rows]
        known = [(k, v) for k, v in values if v is not None]
        if not known:
            out.append(Check(item, "n/a", target, None))
            continue
        k_max, v_max = max(known, key=lambda kv: kv[1])
        missing = [str(k) for k, v in values if v is None]
        out.append(
            Check(
                item,
                f"max {v_max:.4f} at k = {k_max}"
                + (f"; n/a at k = {', '.join(missing)}" if missing else ""),
                target,
                _all([v_max <= bound, None if missing else True]),
            )
        )
    return out


def _motes_checks(motes: MotesResult) -> list[Check]:
    m = motes.medians
    payload, ratio, rate = m.get("payload_ratio"), m.get("error_ratio"), m.get("readings_per_s")
    n = len(motes.runs)
    return [
        Check(
            f"Motes demo: payload / raw bytes at error ratio <= {MAX_ERROR_RATIO} (median of {n})",
            f"{_fmt(payload, '.4f')} at error ratio {_fmt(ratio, '.6f')}",
            "<= 1/20 (0.05)",
            _all([_at_most(payload, MAX_MOTES_PAYLOAD), _at_most(ratio, MAX_ERROR_RATIO)]),
        ),
        Check(
            f"Motes demo: readings/s end to end (median of {n})",
            _fmt(rate, ",.0f"),
            f">= {MIN_MOTES_READINGS_PER_S:,.0f}",
            None if rate is None else rate >= MIN_MOTES_READINGS_PER_S,
        ),
    ]


def _latency_check(lat: LatencyResult) -> Check:
    bound = lat.bound_s
    return Check(
        f"Latency at {lat.n_leaves} leaves, {lat.rate:g} readings/s, every node a process: "
        "p95 from a reading to the root",
        f"{_fmt(lat.p95_s, '.2f')} s (p50 {_fmt(lat.p50_s, '.2f')} s)"
        + ("" if lat.covered else "; the root did not cover every reading"),
        "<= max publish interval + 1 s"
        + ("" if bound is None else f" = {bound:g} s")
        + ("" if lat.max_publish_interval_s is not None else " (no such interval here)"),
        _all([lat.covered, None if bound is None else _at_most(lat.p95_s, bound)]),
    )


def checks(
    sweep: SweepResult | None, motes: MotesResult | None, latency: LatencyResult | None
) -> list[Check]:
    """Issue 9's Done-when items measured by the parts that ran (empty if none did)."""
    out: list[Check] = []
    if sweep is not None:
        out += _sweep_checks(sweep)
    if motes is not None:
        out += _motes_checks(motes)
    if latency is not None:
        out.append(_latency_check(latency))
    return out


def _reported(rows: Sequence[SweepRow] | Sequence[MotesResult], key: str) -> bool:
    """Whether some run of ``rows`` has ``key`` in its JSON summary."""
    return any(key in run.summary for row in rows for run in row.runs)


def _mib(value: float | None) -> str:
    return _fmt(value, ",.0f", 1 / 2**20)


def _large_check(row: SweepRow) -> Check:
    """Issue 21: the echo check reports no snapshot the broker delivered, at 10,240 leaves."""
    m = row.medians
    exits = all(r.returncode == 0 for r in row.runs) and bool(row.runs)
    covered = all(r.covered for r in row.runs) and bool(row.runs)
    logged = m.get("not_delivered_logged")
    return Check(
        f"k = {row.n_leaves:,} leaves in one run (fan-out {row.fan_out}, "
        f"{row.readings_per_leaf} readings per leaf): no publish_not_delivered for a "
        "snapshot the broker delivered (issue 21)",
        f"exit 0 and covered in {_runs_text(row)} runs; publish_not_delivered logged "
        f"{_fmt(logged, '.0f')} (delivered late {_fmt(m.get('delivered_late_logged'), '.0f')}, "
        f"undelivered {_fmt(m.get('undelivered'), '.0f')}, connection_lost "
        f"{_fmt(m.get('connection_lost_logged'), '.0f')})",
        "exit 0, covered, 0 publish_not_delivered",
        _all([exits, covered, _at_most(logged, 0)]),
    )


def _large_section(row: SweepRow) -> list[str]:
    m = row.medians
    outcome = "not run" if not row.runs else f"exit {row.runs[0].returncode}"
    return [
        f"**k = {row.n_leaves:,} leaves in one run** ({row.n_sites} sites x fan-out "
        f"{row.fan_out}, {row.readings_per_leaf} readings per leaf, issue 21): {outcome}, "
        f"covered {_runs_text(row)}, wall {_fmt(m.get('wall_s'), '.1f')} s, error ratio "
        f"{_fmt(m.get('error_ratio'), '.9f')}; publish_not_delivered logged "
        f"{_fmt(m.get('not_delivered_logged'), '.0f')}, publish_delivered_late "
        f"{_fmt(m.get('delivered_late_logged'), '.0f')}, connection_lost "
        f"{_fmt(m.get('connection_lost_logged'), '.0f')} (log lines of the run at level "
        "warning); the echo check's bound follows the load (`EchoTracker`).",
        "",
    ]


def _sweep_section(sweep: SweepResult) -> list[str]:
    derived_rate = not _reported(sweep.rows, "readings_per_s")
    own_rss = not _reported(sweep.rows, "peak_rss_bytes")
    used = {r.medians.get("workers") for r in sweep.rows} - {None}
    workers = "the runtime's default" if sweep.workers is None else str(sweep.workers)
    if sweep.workers is None and len(used) == 1:
        workers += f", {used.pop():g} here"
    out = prose(
        "fleet", "sweep", workers=workers, readings=sweep.readings_per_leaf,
        d=sweep.n_features, timeout=sweep.run_timeout_s,
    )  # fmt: skip
    rows = []
    for r in sweep.rows:
        m = r.medians
        rows.append(
            [
                f"{r.n_leaves} ({r.n_sites} x {r.fan_out})",
                _runs_text(r),
                _fmt(m.get("wall_s"), ".2f"),
                _fmt(m.get("readings_per_s"), ",.0f") + ("*" if derived_rate else ""),
                _fmt(m.get("messages_per_reading"), ".4f"),
                _fmt(m.get("payload_ratio"), ".3f"),
                _fmt(m.get("resent"), ",.0f"),
                _fmt(m.get("undelivered"), ",.0f"),
                _mib(m.get("process_total_rss_bytes" if own_rss else "peak_rss_bytes"))
                + ("†" if own_rss else ""),
                _fmt(m.get("error_ratio"), ".6f"),
                _fmt(m.get("latency_p50_s"), ".2f"),
                _fmt(m.get("latency_p95_s"), ".2f"),
            ]
        )
    out.append(
        table(
            [
                "k (sites x fan-out)",
                "runs",
                "wall s",
                "readings/s",
                "agent msgs / reading",
                "payload / raw",
                "re-sent",
                "undelivered",
                "peak RSS MiB",
                "error ratio",
                "latency p50 s",
                "latency p95 s",
            ],
            rows,
        )
    )
    notes = []
    if derived_rate:
        notes.append("\\* samples / wall s (the run does not report `readings_per_s`).")
    if own_rss:
        notes.append(
            "† sum of the peak resident sets (`VmHWM`, polled every 0.5 s) of the run's "
            "processes (the run, its Mosquitto, its workers); the run does not report "
            "`peak_rss_bytes`."
        )
    growth = [
        f"wall(k = {r.n_leaves}) / wall(k = {r.n_leaves // 8}) = {g:.2f}"
        for r in sweep.rows
        if r.n_leaves % 8 == 0 and (g := _wall_growth(sweep, r.n_leaves, r.n_leaves // 8))
    ]
    if growth:
        notes.append("Growth with 8x the leaves (linear: 8): " + "; ".join(growth) + ".")
    failures = [
        f"k = {r.n_leaves} run {i + 1}: {run.error or f'exit {run.returncode}'}"
        for r in sweep.rows
        for i, run in enumerate(r.runs)
        if not run.covered
    ]
    if failures:
        notes.append("Runs that did not cover every leaf: " + "; ".join(failures) + ".")
    out += ["", *[n + "\n" for n in notes], f"![Fleet sweep]({PLOT})", ""]
    if sweep.large is not None:
        out += _large_section(sweep.large)
    return out


def _motes_section(motes: MotesResult) -> list[str]:
    m = motes.medians
    derived = not _reported([motes], "readings_per_s")
    out = [
        "### Motes demo",
        "",
        "`edge-runtime run topologies/motes-light.toml --json` (7712 readings of d = 48 over 8 "
        f"leaves, 2 sites), medians of {len(motes.runs)} run{'s' if len(motes.runs) > 1 else ''}"
        + (
            f", {sum(not r.covered for r in motes.runs)} of them not covered"
            if any(not r.covered for r in motes.runs)
            else ""
        )
        + ".",
        "",
        table(
            [
                "wall s",
                "readings/s",
                "agent msgs / reading",
                "payload / raw",
                "re-sent",
                "error ratio",
                "latency p50 s",
                "latency p95 s",
            ],
            [
                [
                    _fmt(m.get("wall_s"), ".2f"),
                    _fmt(m.get("readings_per_s"), ",.0f") + ("*" if derived else ""),
                    _fmt(m.get("messages_per_reading"), ".4f"),
                    _fmt(m.get("payload_ratio"), ".4f"),
                    _fmt(m.get("resent"), ",.0f"),
                    _fmt(m.get("error_ratio"), ".6f"),
                    _fmt(m.get("latency_p50_s"), ".2f"),
                    _fmt(m.get("latency_p95_s"), ".2f"),
                ]
            ],
        ),
        "",
    ]
    if derived:
        out += ["\\* samples / wall s (the run does not report `readings_per_s`).", ""]
    return out


def _latency_section(lat: LatencyResult) -> list[str]:
    header = [
        "readings at root", "p50 s", "p95 s", "max s", "p50 s from publish",
        "p95 s from publish", "max publish interval s", "bound s",
    ]  # fmt: skip
    row = [
        f"{lat.readings_at_root} / {lat.readings}", _fmt(lat.p50_s, ".2f"),
        _fmt(lat.p95_s, ".2f"), _fmt(lat.max_s, ".2f"), _fmt(lat.p50_from_publish_s, ".2f"),
        _fmt(lat.p95_from_publish_s, ".2f"), _fmt(lat.max_publish_interval_s, "g"),
        _fmt(lat.bound_s, "g"),
    ]  # fmt: skip
    out = prose(
        "fleet", "latency", lat=lat, source=lat.interval_source or "n/a",
        table=table(header, [row]),
    )  # fmt: skip
    if lat.error:
        out += [f"Problem: {lat.error}.", ""]
    return out


def _cost_rows(costs: Sequence[ProcessCost], role: str) -> list[str] | None:
    rows = [c for c in costs if c.role == role]
    if not rows:
        return None

    def med(values: list[float]) -> float | None:
        values = [v for v in values if math.isfinite(v)]
        return sorted(values)[len(values) // 2] if values else None

    return [
        role,
        str(len(rows)),
        _fmt(med([c.readings / c.window_s for c in rows]), ",.0f"),
        _fmt(med([c.cpu_per_reading_s or math.nan for c in rows]), ".3f", 1e3),
        _fmt(med([c.cpu_share for c in rows]), ".1%"),
        _mib(med([float(c.rss_bytes) for c in rows])),
        _mib(med([float(c.peak_rss_bytes) for c in rows])),
    ]


def _agent_section(agent: AgentCostResult | None, lat: LatencyResult | None) -> list[str]:
    out = ["### Cost of one agent process (what a Raspberry Pi pays)", ""]
    header = [
        "node",
        "processes",
        "readings/s through it",
        "CPU ms / reading",
        "CPU share of a core",
        "RSS MiB",
        "peak RSS MiB",
    ]
    if agent is not None:
        out += prose("fleet", "agent", agent=agent)
        rows = [
            r for role in ("leaf", "aggregator", "root") if (r := _cost_rows(agent.costs, role))
        ]
        out += [table(header, rows), ""]
        if agent.error:
            out += [f"Problem: {agent.error}.", ""]
    if lat is not None and lat.costs:
        rows = [r for role in ("leaf", "aggregator", "root") if (r := _cost_rows(lat.costs, role))]
        out += prose("fleet", "agent-latency", lat=lat, table=table(header, rows))
    return out


def _dtype_section(dt: DtypeResult) -> list[str]:
    header = [
        "data", "dtype", "root error ratio", "bytes per leaf snapshot",
        "bytes per aggregator snapshot", "angle to float64 (rad)",
    ]  # fmt: skip
    rows = [
        [
            r.data, r.dtype, f"{r.error_ratio:.9f}", _fmt(r.leaf_bytes, ",.0f"),
            _fmt(r.aggregator_bytes, ",.0f"), f"{r.max_angle_to_float64:.1e}",
        ]
        for r in dt.rows
    ]  # fmt: skip
    return prose("fleet", "dtype", dt=dt, table=table(header, rows))


def section(
    sweep: SweepResult | None,
    motes: MotesResult | None,
    latency: LatencyResult | None,
    agent: AgentCostResult | None,
    dtype: DtypeResult | None,
) -> list[str]:
    """Markdown lines of section (g) for the parts that ran (empty if none did)."""
    if all(p is None for p in (sweep, motes, latency, agent, dtype)):
        return []
    out = prose("fleet", "intro")
    if sweep is not None:
        out += _sweep_section(sweep)
    if motes is not None:
        out += _motes_section(motes)
    if latency is not None:
        out += _latency_section(latency)
    if agent is not None or (latency is not None and latency.costs):
        out += _agent_section(agent, latency)
    if dtype is not None:
        out += _dtype_section(dtype)
    return out
