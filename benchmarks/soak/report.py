"""The report of a soak: ``SOAK.md`` and ``soak.json``."""

from __future__ import annotations

from pathlib import Path

from benchmarks.reporting import table
from benchmarks.schema import read_result, write_result

#: What a soak was asked to do (the rest of its result are the measured rows).
PARAMETERS = ("argv", "minutes", "leaves", "rate", "batch", "port", "workdir")


def render(out: Path) -> None:
    """Rewrite ``out/longevity/SOAK.md`` from the ``soak.json`` stored there, measuring
    nothing."""
    doc = read_result(out / "longevity" / "soak.json", "soak")
    result = {**doc["parameters"], **doc["rows"]}
    _write_markdown(result, out / "longevity", result["argv"])


def write_report(result: dict[str, object], out: Path, argv: list[str]) -> Path:
    """Store ``result`` as ``out/soak.json`` (the result schema) and write ``SOAK.md``."""
    result = {**result, "argv": argv}
    parameters = {k: result[k] for k in PARAMETERS}
    rows = {k: v for k, v in result.items() if k not in PARAMETERS}
    write_result(out / "soak.json", "soak", parameters, rows, {})
    return _write_markdown(result, out, argv)


def _write_markdown(result: dict[str, object], out: Path, argv: list[str]) -> Path:
    procs: list[dict] = result["processes"]  # type: ignore[assignment]
    md = [
        "# Soak: processes under faults, RSS and open files (issue 21, item 6)",
        "",
        f"`python -m benchmarks.soak {' '.join(argv)}`: {result['minutes']} minutes, "
        f"Mosquitto, `root`, `site-a` and {len(result['leaves'])} leaves "  # type: ignore[arg-type]
        f"(each `edge-runtime agent` with `--state-dir`), fed {result['rate']} readings/s "
        f"per leaf in messages of {result['batch']}; a fault every few minutes. Method: "
        "the module docstring of `benchmarks/soak/__init__.py`.",
        "",
        "Faults: "
        + "; ".join(f"{t:.0f} s {what}" for t, what in result["faults"])  # type: ignore[union-attr]
        + ".",
        "",
    ]

    def mb(x: int | None) -> str:
        return "-" if x is None else f"{x / 1e6:.1f}"

    def flat(p: dict) -> str:
        if p["flat_rss"] is None:
            return "n/a (< 5 min after warm-up)"
        return f"{'yes' if p['flat_rss'] else 'NO'}, {'yes' if p['flat_fd'] else 'NO'}"

    header = [
        "process", "pid", "ended", "life (s)", "samples",
        "RSS first / at 2 min / last / max (MB)", "open fds first / at 2 min / last / max",
        "flat (RSS, fds)",
    ]  # fmt: skip
    rows = [
        [
            p["node"], p["pid"], p["ended"], f"{p['life_s']:.0f}", p["samples"],
            f"{mb(p['rss_first'])} / {mb(p['rss_base'])} / {mb(p['rss_last'])} / "
            f"{mb(p['rss_max'])}",
            f"{p['fd_first']} / {'-' if p['fd_base'] is None else p['fd_base']} / "
            f"{p['fd_last']} / {p['fd_max']}",
            flat(p),
        ]
        for p in procs
    ]  # fmt: skip
    md.append(table(header, rows, "lrlrrlll"))
    md += [
        "",
        "Readings sent per leaf and its last confirmation (source `soak:<leaf>`):",
        "",
    ]
    sent = []
    for leaf in result["leaves"]:  # type: ignore[union-attr]
        c = result["confirms"].get(leaf, {})  # type: ignore[union-attr]
        src = f"soak:{leaf}"
        sent.append([
            leaf, f"{result['sent'][leaf]:,}",  # type: ignore[index]
            f"{c.get('ingested', {}).get(src, -1) + 1:,}",
            f"{c.get('durable', {}).get(src, -1) + 1:,}",
        ])  # fmt: skip
    md.append(table(["leaf", "sent", "ingested", "durable"], sent, "lrrr"))
    md += [
        "",
        "Log lines per node over the whole soak (all incarnations): "
        + ", ".join(f"{k} {v}" for k, v in result["log_lines"].items())  # type: ignore[union-attr]
        + f"; publisher reconnects {result['publisher_reconnects']}.",
        "",
    ]
    path = out / "SOAK.md"
    path.write_text("\n".join(md))
    return path
