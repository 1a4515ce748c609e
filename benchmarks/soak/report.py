"""The report of a soak: ``SOAK.md`` and ``soak.json``."""

from __future__ import annotations

from pathlib import Path

from benchmarks.reporting import table
from benchmarks.schema import read_result, write_result

#: What a soak was asked to do (the rest of its result are the measured rows).
PARAMETERS = ("argv", "minutes", "leaves", "rate", "batch", "port", "workdir")


def _mb(x: int | None) -> str:
    return "-" if x is None else f"{x / 1e6:.1f}"


def _dash(x: object) -> object:
    return "-" if x is None else x


def _flat(p: dict) -> str:
    if p["flat_rss"] is None:
        return "n/a (< 5 min after warm-up)"
    return f"{'yes' if p['flat_rss'] else 'NO'}, {'yes' if p['flat_fd'] else 'NO'}"


#: The process table: (header, cell of a process row).
COLUMNS = (
    ("process", lambda p: p["node"]), ("pid", lambda p: p["pid"]), ("ended", lambda p: p["ended"]),
    ("life (s)", lambda p: f"{p['life_s']:.0f}"), ("samples", lambda p: p["samples"]),
    ("RSS first / at 2 min / last / max (MB)",
     lambda p: " / ".join(_mb(p[k]) for k in ("rss_first", "rss_base", "rss_last", "rss_max"))),
    ("open fds first / at 2 min / last / max",
     lambda p: " / ".join(str(_dash(p[k])) for k in ("fd_first", "fd_base", "fd_last", "fd_max"))),
    ("flat (RSS, fds)", _flat),
)


def render(out: Path) -> None:
    """Rewrite ``out/longevity/SOAK.md`` from the ``soak.json`` stored there, measuring nothing."""
    doc = read_result(out / "longevity" / "soak.json", "soak")
    result = {**doc["parameters"], **doc["rows"]}
    _write_markdown(result, out / "longevity", result["argv"])


def write_report(result: dict, out: Path, argv: list[str]) -> Path:
    """Store ``result`` as ``out/soak.json`` (the result schema) and write ``SOAK.md``."""
    result = {**result, "argv": argv}
    rows = {k: v for k, v in result.items() if k not in PARAMETERS}
    write_result(out / "soak.json", "soak", {k: result[k] for k in PARAMETERS}, rows, {})
    return _write_markdown(result, out, argv)


def _write_markdown(result: dict, out: Path, argv: list[str]) -> Path:
    sent = []
    for leaf in result["leaves"]:
        c, src = result["confirms"].get(leaf, {}), f"soak:{leaf}"
        sent.append([leaf, f"{result['sent'][leaf]:,}",
                     *(f"{c.get(k, {}).get(src, -1) + 1:,}" for k in ("ingested", "durable"))])
    md = [
        "# Soak: processes under faults, RSS and open files (issue 21, item 6)", "",
        f"`python -m benchmarks.soak {' '.join(argv)}`: {result['minutes']} minutes, Mosquitto, "
        f"`root`, `site-a` and {len(result['leaves'])} leaves (each `edge-runtime agent` with "
        f"`--state-dir`), fed {result['rate']} readings/s per leaf in messages of "
        f"{result['batch']}; a fault every few minutes. Method: the module docstring of "
        "`benchmarks/soak/__init__.py`.", "",
        "Faults: " + "; ".join(f"{t:.0f} s {what}" for t, what in result["faults"]) + ".", "",
        table([h for h, _ in COLUMNS], [[cell(p) for _, cell in COLUMNS]
                                        for p in result["processes"]], "lrlrrlll"),
        "", "Readings sent per leaf and its last confirmation (source `soak:<leaf>`):", "",
        table(["leaf", "sent", "ingested", "durable"], sent, "lrrr"), "",
        "Log lines per node over the whole soak (all incarnations): "
        + ", ".join(f"{k} {v}" for k, v in result["log_lines"].items())
        + f"; publisher reconnects {result['publisher_reconnects']}.", "",
    ]
    path = out / "SOAK.md"
    path.write_text("\n".join(md))
    return path
