"""Section (g) of ``REPORT.md``: issue 9's Done-when `checks` and the Markdown `section` of
whichever fleet parts ran (prose in ``templates/fleet.md``; ``PLOT`` by `benchmarks.fleet.plot`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from benchmarks.fleet.dtype import DtypeResult
from benchmarks.fleet.live import AgentCostResult, LatencyResult, ProcessCost
from benchmarks.fleet.scaling import MotesResult, SweepResult, SweepRow
from benchmarks.reporting import Check, number, prose, table

__all__ = ["PLOT", "checks", "section"]

PLOT = "fleet.png"
DONE_K, DONE_K_BASE = 1024, 128  #: issue 9's fleet size and the one its wall time grows from
MAX_WALL_GROWTH = 12.0  # wall(1024) / wall(128); linear is 8
MAX_ERROR_RATIO = 1.001
MAX_MESSAGES_PER_READING = 0.05
MAX_SWEEP_PAYLOAD = 1 / 5
MAX_MOTES_PAYLOAD = 1 / 20
MIN_MOTES_READINGS_PER_S = 22_000.0
#: (header, metric, format) of the metric columns of the sweep and Motes tables.
METRIC_COLUMNS = [
    ("wall s", "wall_s", ".2f"), ("readings/s", "readings_per_s", ",.0f"),
    ("agent msgs / reading", "messages_per_reading", ".4f"),
    ("payload / raw", "payload_ratio", ".3f"), ("re-sent", "resent", ",.0f"),
    ("undelivered", "undelivered", ",.0f"), ("peak RSS MiB", "peak_rss_bytes", ""),
    ("error ratio", "error_ratio", ".6f"), ("latency p50 s", "latency_p50_s", ".2f"),
    ("latency p95 s", "latency_p95_s", ".2f"),
]  # fmt: skip
COST_HEADER = [
    "node", "processes", "readings/s through it", "CPU ms / reading", "CPU share of a core",
    "RSS MiB", "peak RSS MiB",
]  # fmt: skip


def _mib(value: float | None) -> str:
    return number(value, ",.0f", scale=1 / 2**20)


def _all(conditions: Sequence[bool | None]) -> bool | None:
    """False if any is False, else None if any is unknown, else True."""
    if any(c is False for c in conditions):
        return False
    return None if any(c is None for c in conditions) else True


def _at_most(value: float | None, bound: float) -> bool | None:
    return None if value is None or not math.isfinite(value) else value <= bound


def _row(sweep: SweepResult, k: int) -> SweepRow | None:
    return next((r for r in sweep.rows if r.n_leaves == k), None)


def _wall_growth(sweep: SweepResult, k: int, base: int) -> float | None:
    hi, lo = _row(sweep, k), _row(sweep, base)
    if hi is None or lo is None:
        return None
    a, b = hi.medians.get("wall_s"), lo.medians.get("wall_s")
    return None if a is None or not b else a / b


def _runs_text(row: SweepRow) -> str:
    stalled = sum(r.returncode is None for r in row.runs)
    return f"{sum(r.covered for r in row.runs)}/{len(row.runs)}" + (
        f" ({stalled} stalled)" if stalled else ""
    )


def _ran(row: SweepRow) -> tuple[bool, bool]:
    """(every run exited 0, every run covered), False without runs."""
    runs = row.runs
    return bool(runs) and all(r.returncode == 0 for r in runs), bool(runs) and all(
        r.covered for r in runs
    )


def _sweep_checks(sweep: SweepResult) -> list[Check]:
    target = "exit 0, covered, error ratio <= 1.001, 0 re-sent, 0 undelivered"
    top = _row(sweep, DONE_K)
    if top is None:
        ks = ", ".join(str(r.n_leaves) for r in sweep.rows)
        item = f"k = {DONE_K} leaves in one run, defaults"
        out = [Check(item, f"not run (ks: {ks})", target, None)]
    else:
        m = top.medians
        resent, undelivered, ratio = m.get("resent"), m.get("undelivered"), m.get("error_ratio")
        bounds = [_at_most(resent, 0), _at_most(undelivered, 0)]
        out = [
            Check(
                f"k = {DONE_K} leaves in one run (fan-out {top.fan_out}, depth 2, "
                f"{top.readings_per_leaf} readings per leaf), defaults",
                f"exit 0 and covered in {_runs_text(top)} runs; error ratio "
                f"{number(ratio, '.6f')}; re-sent {number(resent, '.0f')}; "
                f"publish_not_delivered {number(undelivered, '.0f')}",
                target,
                _all([*_ran(top), _at_most(ratio, MAX_ERROR_RATIO), *bounds]),
            )
        ]
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
        ("messages_per_reading", MAX_MESSAGES_PER_READING, "Agent messages per reading", "<= 0.05"),
        ("payload_ratio", MAX_SWEEP_PAYLOAD, "Payload / raw bytes", "<= 1/5 (0.2)"),
    ):
        item += " at every k of the sweep"
        values = [(r.n_leaves, r.medians.get(key)) for r in sweep.rows]
        known = [(k, v) for k, v in values if v is not None]
        if not known:
            out.append(Check(item, "n/a", target, None))
            continue
        k_max, v_max = max(known, key=lambda kv: kv[1])
        missing = ", ".join(str(k) for k, v in values if v is None)
        measured = f"max {v_max:.4f} at k = {k_max}" + (missing and f"; n/a at k = {missing}")
        out.append(Check(item, measured, target, _all([v_max <= bound, None if missing else True])))
    return out


def _motes_checks(motes: MotesResult) -> list[Check]:
    m, n = motes.medians, len(motes.runs)
    payload, ratio, rate = m.get("payload_ratio"), m.get("error_ratio"), m.get("readings_per_s")
    return [
        Check(
            f"Motes demo: payload / raw bytes at error ratio <= {MAX_ERROR_RATIO} (median of {n})",
            f"{number(payload, '.4f')} at error ratio {number(ratio, '.6f')}",
            "<= 1/20 (0.05)",
            _all([_at_most(payload, MAX_MOTES_PAYLOAD), _at_most(ratio, MAX_ERROR_RATIO)]),
        ),
        Check(
            f"Motes demo: readings/s end to end (median of {n})",
            number(rate, ",.0f"),
            f">= {MIN_MOTES_READINGS_PER_S:,.0f}",
            None if rate is None else rate >= MIN_MOTES_READINGS_PER_S,
        ),
    ]


def _latency_check(lat: LatencyResult) -> Check:
    bound = lat.bound_s
    return Check(
        f"Latency at {lat.n_leaves} leaves, {lat.rate:g} readings/s, every node a process: "
        "p95 from a reading to the root",
        f"{number(lat.p95_s, '.2f')} s (p50 {number(lat.p50_s, '.2f')} s)"
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
    return (
        ([] if sweep is None else _sweep_checks(sweep))
        + ([] if motes is None else _motes_checks(motes))
        + ([] if latency is None else [_latency_check(latency)])
    )


def _reported(rows: Sequence[SweepRow] | Sequence[MotesResult], key: str) -> bool:
    """Whether some run of ``rows`` has ``key`` in its JSON summary."""
    return any(key in run.summary for row in rows for run in row.runs)


def _large_check(row: SweepRow) -> Check:
    """Issue 21: the echo check reports no snapshot the broker delivered, at 10,240 leaves."""
    m, logged = row.medians, row.medians.get("not_delivered_logged")
    return Check(
        f"k = {row.n_leaves:,} leaves in one run (fan-out {row.fan_out}, "
        f"{row.readings_per_leaf} readings per leaf): no publish_not_delivered for a "
        "snapshot the broker delivered (issue 21)",
        f"exit 0 and covered in {_runs_text(row)} runs; publish_not_delivered logged "
        f"{number(logged, '.0f')} (delivered late {number(m.get('delivered_late_logged'), '.0f')}, "
        f"undelivered {number(m.get('undelivered'), '.0f')}, connection_lost "
        f"{number(m.get('connection_lost_logged'), '.0f')})",
        "exit 0, covered, 0 publish_not_delivered",
        _all([*_ran(row), _at_most(logged, 0)]),
    )


def _metric_cells(
    m: dict[str, float | None], columns: Sequence[tuple[str, str, str]], marks: dict[str, str]
) -> list[str]:
    """The cells of ``columns`` (`METRIC_COLUMNS`); ``marks``: a footnote mark per metric,
    and under ``"rss"`` the metric shown as peak RSS."""
    return [
        (_mib(m.get(marks["rss"])) if key == "peak_rss_bytes" else number(m.get(key), fmt))
        + marks.get(key, "")
        for _, key, fmt in columns
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
    marks = {"rss": "process_total_rss_bytes" if own_rss else "peak_rss_bytes"}
    marks |= {"readings_per_s": "*"} if derived_rate else {}
    marks |= {"peak_rss_bytes": "†"} if own_rss else {}
    rows = [
        [
            f"{r.n_leaves} ({r.n_sites} x {r.fan_out})",
            _runs_text(r),
            *_metric_cells(r.medians, METRIC_COLUMNS, marks),
        ]
        for r in sweep.rows
    ]
    out.append(table(["k (sites x fan-out)", "runs", *(c[0] for c in METRIC_COLUMNS)], rows))
    notes = [prose("fleet", "derived-rate")[0]] if derived_rate else []
    notes += [prose("fleet", "own-rss")[0]] if own_rss else []
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
    if (row := sweep.large) is not None:
        m = row.medians
        out += prose(
            "fleet", "large", row=row, runs=_runs_text(row),
            outcome="not run" if not row.runs else f"exit {row.runs[0].returncode}",
            wall=number(m.get("wall_s"), ".1f"), ratio=number(m.get("error_ratio"), ".9f"),
            not_delivered=number(m.get("not_delivered_logged"), ".0f"),
            late=number(m.get("delivered_late_logged"), ".0f"),
            lost=number(m.get("connection_lost_logged"), ".0f"),
        )  # fmt: skip
    return out


def _motes_section(motes: MotesResult) -> list[str]:
    derived = not _reported([motes], "readings_per_s")
    columns = [
        (h, key, ".4f" if key == "payload_ratio" else fmt)
        for h, key, fmt in METRIC_COLUMNS
        if key not in ("undelivered", "peak_rss_bytes")
    ]
    cells = _metric_cells(motes.medians, columns, {"readings_per_s": "*"} if derived else {})
    uncovered = sum(not r.covered for r in motes.runs)
    out = prose(
        "fleet", "motes", n=len(motes.runs), s="s" if len(motes.runs) > 1 else "",
        uncovered=f", {uncovered} of them not covered" if uncovered else "",
        table=table([c[0] for c in columns], [cells]),
    )  # fmt: skip
    return out + ([prose("fleet", "derived-rate")[0], ""] if derived else [])


def _latency_section(lat: LatencyResult) -> list[str]:
    header = [
        "readings at root", "p50 s", "p95 s", "max s", "p50 s from publish",
        "p95 s from publish", "max publish interval s", "bound s",
    ]  # fmt: skip
    values = [lat.p50_s, lat.p95_s, lat.max_s, lat.p50_from_publish_s, lat.p95_from_publish_s]
    row = [f"{lat.readings_at_root} / {lat.readings}", *(number(v, ".2f") for v in values)]
    row += [number(lat.max_publish_interval_s, "g"), number(lat.bound_s, "g")]
    out = prose(
        "fleet", "latency", lat=lat, source=lat.interval_source or "n/a", table=table(header, [row])
    )
    return out + ([f"Problem: {lat.error}.", ""] if lat.error else [])


def _cost_rows(costs: Sequence[ProcessCost]) -> list[list[str]]:
    """One row per role (leaf, aggregator, root) present in ``costs``: medians (upper)."""

    def med(values: list[float]) -> float | None:
        values = sorted(v for v in values if math.isfinite(v))
        return values[len(values) // 2] if values else None

    out = []
    for role in ("leaf", "aggregator", "root"):
        if rows := [c for c in costs if c.role == role]:
            out.append([
                role, str(len(rows)), number(med([c.readings / c.window_s for c in rows]), ",.0f"),
                number(med([c.cpu_per_reading_s or math.nan for c in rows]), ".3f", scale=1e3),
                number(med([c.cpu_share for c in rows]), ".1%"),
                _mib(med([float(c.rss_bytes) for c in rows])),
                _mib(med([float(c.peak_rss_bytes) for c in rows])),
            ])  # fmt: skip
    return out


def _agent_section(agent: AgentCostResult | None, lat: LatencyResult | None) -> list[str]:
    out = prose("fleet", "cost-title")
    if agent is not None:
        out += prose("fleet", "agent", agent=agent)
        out += [table(COST_HEADER, _cost_rows(agent.costs)), ""]
        out += [f"Problem: {agent.error}.", ""] if agent.error else []
    if lat is not None and lat.costs:
        rows = table(COST_HEADER, _cost_rows(lat.costs))
        out += prose("fleet", "agent-latency", lat=lat, table=rows)
    return out


def _dtype_section(dt: DtypeResult) -> list[str]:
    header = [
        "data", "dtype", "root error ratio", "bytes per leaf snapshot",
        "bytes per aggregator snapshot", "angle to float64 (rad)",
    ]  # fmt: skip
    rows = [
        [r.data, r.dtype, f"{r.error_ratio:.9f}", number(r.leaf_bytes, ",.0f"),
         number(r.aggregator_bytes, ",.0f"), f"{r.max_angle_to_float64:.1e}"]
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
    out += [] if sweep is None else _sweep_section(sweep)
    out += [] if motes is None else _motes_section(motes)
    out += [] if latency is None else _latency_section(latency)
    if agent is not None or (latency is not None and latency.costs):
        out += _agent_section(agent, latency)
    return out + ([] if dtype is None else _dtype_section(dtype))
