"""What the reports share: Done-when `Check` tables, Markdown tables, figures drawn without a
display (the Agg canvas, no pyplot state; matplotlib imported only by the figure functions),
and `prose` from the Markdown templates in ``benchmarks/templates/``."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "DPI", "Check", "checks_table", "figure", "mark", "number", "plain_log_axis", "prose",
    "save_figure", "table",
]  # fmt: skip

#: The Markdown templates of the reports' prose (`prose`).
TEMPLATES = Path(__file__).resolve().parent / "templates"

#: A line that starts a template block: ``<!-- NAME -->``.
_BLOCK = re.compile(r"<!-- ([a-z0-9-]+) -->")

#: Resolution of the report's PNGs (dots per inch).
DPI = 110

#: Separator cell of a column per alignment letter of `table` (left, right, centre).
_ALIGN = {"l": "---", "r": "---:", "c": ":---:"}


@dataclass(frozen=True)
class Check:
    """One Done-when item: what was measured, the target, and whether it was met."""

    item: str
    measured: str
    target: str
    passed: bool | None  # None: not checkable in this run


def mark(passed: bool | None) -> str:
    """The result column of a `Check`: ``pass``, ``**FAIL**`` or ``n/a`` (not checkable)."""
    return {True: "pass", False: "**FAIL**", None: "n/a"}[passed]


def number(value: float | None, fmt: str, *, scale: float = 1.0, missing: str = "n/a") -> str:
    """``value * scale`` in the format spec ``fmt`` (`format`), or ``missing`` for None, NaN and
    infinities."""
    return missing if value is None or not math.isfinite(value) else format(value * scale, fmt)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A Markdown table without a trailing newline: cells through ``str`` (no escaping: a cell
    may hold Markdown, not ``|``); ``align`` one letter per column, ``l``, ``r`` or ``c`` (None:
    ``|---|`` each), else ValueError."""
    if align is None:
        rule = "|" + "---|" * len(header)
    else:
        if len(align) != len(header) or set(align) - set(_ALIGN):
            raise ValueError(
                f"align must give one of l, r, c for each of the {len(header)} columns, "
                f"got {align!r}"
            )
        rule = "|" + "".join(_ALIGN[a] + "|" for a in align)
    lines = ["| " + " | ".join(header) + " |", rule]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def checks_table(checks: Sequence[Check], *, item: str = "item") -> str:
    """Done-when items as a Markdown table: item, measured, target, result (the first
    column titled ``item``)."""
    return table(
        [item, "measured", "target", "result"],
        [[c.item, c.measured, c.target, mark(c.passed)] for c in checks],
    )


def figure(
    nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float], squeeze: bool = True
) -> tuple[Figure, Any]:
    """A figure on the Agg canvas and its axes as `matplotlib.pyplot.subplots` returns them, but
    outside pyplot (nothing to close, the global backend untouched); ``figsize`` in inches."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, squeeze=squeeze)


def save_figure(fig: Figure, path: Path, *, dpi: float = DPI, tight: bool = False) -> Path:
    """Write ``fig`` to ``path`` as PNG at ``dpi``; ``tight`` crops the canvas to what is
    drawn (``bbox_inches="tight"``: legends outside the axes stay in). Returns ``path``."""
    fig.savefig(path, dpi=dpi, bbox_inches="tight" if tight else None)
    return path


def plain_log_axis(axis: Any) -> None:
    """Ticks of a log ``axis`` at 1, 2, 5 x 10^k labelled as plain numbers (``2,000``,
    ``0.05``), minor ticks unlabelled."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.10g}"))
    axis.set_minor_formatter(NullFormatter())


@functools.cache
def _blocks(template: str) -> dict[str, str]:
    """The blocks of ``templates/TEMPLATE.md`` by name: the lines after a ``<!-- NAME -->``
    line up to the next one, newline-joined."""
    blocks: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in (TEMPLATES / f"{template}.md").read_text(encoding="utf-8").splitlines():
        if match := _BLOCK.fullmatch(line):
            lines = blocks.setdefault(match.group(1), [])
        else:
            lines.append(line)
    return {name: "\n".join(lines) for name, lines in blocks.items()}


def prose(template: str, block: str, /, **values: Any) -> list[str]:
    """The Markdown lines of block ``block`` of ``templates/TEMPLATE.md``, its ``{name}`` fields
    filled from ``values`` (`str.format`); a block ending with an empty line ends with ``""``.
    KeyError for a missing block or field."""
    return _blocks(template)[block].format(**values).split("\n")
