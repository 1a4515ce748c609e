"""What every section of the benchmark reports shares: the Done-when `Check`, Markdown
tables, and figures drawn without a display.

`Check` is one Done-when item; `checks_table` renders a list of them (item, measured,
target, result). `table` renders a Markdown table: every cell through ``str``, no
escaping, so a cell may hold Markdown (``**FAIL**``) and must not hold ``|``. `figure`
makes a matplotlib figure on the Agg canvas: no global backend switch, no pyplot state,
so importing a report module never changes how anyone else's plots are drawn (and needs
no display). `save_figure` writes it as PNG; `plain_log_axis` labels a log axis with
plain numbers. matplotlib is imported only inside those three: modules that build checks
or tables do not need it. `prose` reads a report's fixed text from a Markdown template in
``benchmarks/templates/`` and fills in the measured numbers.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "DPI",
    "Check",
    "checks_table",
    "figure",
    "mark",
    "plain_log_axis",
    "prose",
    "save_figure",
    "table",
]

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


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A Markdown table, one line per row, without a trailing newline.

    Parameters
    ----------
    header : sequence of str
        The column titles.
    rows : sequence of sequences
        The cells, each written with ``str`` (no escaping, no padding).
    align : str or None
        One letter per column, ``l`` (left), ``r`` (right) or ``c`` (centre); None: the
        renderer's default (``|---|`` for every column).

    Raises
    ------
    ValueError
        If ``align`` does not give one known letter per column.
    """
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
    """A new figure on the Agg canvas and its axes, as `matplotlib.pyplot.subplots` returns
    them (one `Axes` for 1 x 1 with ``squeeze``, else an array), but outside pyplot: nothing
    to close, the global backend untouched. ``figsize`` in inches (width, height)."""
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
    """Ticks of a log ``axis`` (``ax.xaxis`` or ``ax.yaxis``) at 1, 2, 5 x 10^k, labelled as
    plain numbers with thousands separators (``2,000``, ``0.05``; no ``6 x 10^1``), minor
    ticks unlabelled."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.10g}"))
    axis.set_minor_formatter(NullFormatter())


@functools.cache
def _blocks(template: str) -> dict[str, str]:
    """The blocks of ``templates/TEMPLATE.md`` by name: every line after a ``<!-- NAME -->``
    line up to the next one (or the end of the file), newline-joined."""
    blocks: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in (TEMPLATES / f"{template}.md").read_text(encoding="utf-8").splitlines():
        if match := _BLOCK.fullmatch(line):
            lines = blocks.setdefault(match.group(1), [])
        else:
            lines.append(line)
    return {name: "\n".join(lines) for name, lines in blocks.items()}


def prose(template: str, block: str, /, **values: Any) -> list[str]:
    """The Markdown lines of one block of a report's template, filled in.

    Parameters
    ----------
    template : str
        File name without ``.md`` in ``benchmarks/templates/``.
    block : str
        The block's name (its ``<!-- NAME -->`` line); a block ending with an empty line
        returns a last line ``""``, as the report's line lists do.
    **values
        The ``{name}`` / ``{name:format}`` fields of the block (`str.format`; a literal
        brace is doubled).

    Raises
    ------
    KeyError
        If the block or one of its fields is missing.
    """
    return _blocks(template)[block].format(**values).split("\n")
