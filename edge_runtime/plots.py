"""PNG plots of one ``edge-runtime run`` (``--plot DIR``): what the root's model did over time.

`RunRecorder` is fed by `edge_runtime.runner.run_topology` as the root's models arrive
(and, through `RunRecorder.listen`, the leaves' JSON status documents); `write_plots`
draws four PNGs from it:

==================  ==========================================================================
file                content
==================  ==========================================================================
``coverage.png``    samples the root's model covers (``n_samples``) over time since the run
                    started, as a fraction of the replayed rows; every model update is a point
``error-ratio.png`` error ratio of the root's model over time (definition below)
``scree.png``       singular values of the final root model, and their normalised cumulative
                    energy ``sum_{i<=k} s_i^2 / sum_i s_i^2`` (over the values the model carries)
``anomalies.png``   the leaves' ``extra.anomaly_rate`` (fraction of recent scored readings
                    flagged, in %) and ``extra.anomalies`` (count) from their status documents
                    over time; a run whose leaves do not score writes the PNG with the note
                    "no anomaly scores in this run" (the file set is the same for every run)
==================  ==========================================================================

Error ratio over time: ``error_ratio(X, U)`` of `edge_runtime.fpca` with ``X`` **all** the
rows of the run (not only those the model covers yet), i.e. how good the model of that moment
is for the whole data set, relative to the offline rank-r SVD (1.0 optimal); the final point
is the number in the run summary. Cost: the data's singular values are computed once (one
economy SVD); each point is then one projection, ``O(n_samples * n_features * rank)``. Points
are subsampled: the first model, then a model each time coverage grew by another
``1 / (max_points - 2)`` of the rows, and the final model: at most ``max_points`` (default
50) error ratios per run, whatever the number of updates.

matplotlib is an optional extra (``pip install './edge_runtime-<version>-py3-none-any.whl[plot]'``
with the wheel file, or ``pip install '.[plot]'`` in a clone), imported only by
`write_plots` / `require_matplotlib`; figures are drawn with the Agg canvas directly
(``matplotlib.backends.backend_agg``), so the global pyplot backend is left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomqtt
import numpy as np

from edge_runtime import __version__
from edge_runtime.aio import cancel_and_wait
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.fpca import error_ratio, projection_error
from edge_runtime.wire import SubspaceMessage, WireError, decode_status

__all__ = [
    "NO_ANOMALIES",
    "PLOT_FILES",
    "AnomalyPoint",
    "CoveragePoint",
    "ErrorPoint",
    "PlotError",
    "RunRecorder",
    "describe",
    "prepare_dir",
    "require_matplotlib",
    "write_plots",
]

PLOT_FILES = ("coverage.png", "error-ratio.png", "scree.png", "anomalies.png")
NO_ANOMALIES = "no anomaly scores in this run"
_EXTRA_HINT = (
    "install the plot extra into this environment from the edge-runtime wheel file: "
    f"{sys.executable} -m pip install '/path/to/edge_runtime-{__version__}-py3-none-any.whl"
    "[plot]' (in a clone of the repository: pip install '.[plot]'; edge-runtime is not on PyPI)"
)


class PlotError(EdgeRuntimeError):
    """A one-line reason why plots cannot be written (missing matplotlib, bad folder)."""


def require_matplotlib() -> None:
    """Import matplotlib now, so that ``--plot`` fails before the run, not after it.

    Raises
    ------
    PlotError
        If matplotlib (the ``plot`` extra) cannot be imported.
    """
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    except ImportError:
        raise PlotError(f"--plot needs matplotlib: {_EXTRA_HINT}") from None


def prepare_dir(path: Path) -> Path:
    """Create the output folder ``path`` (and parents) if needed; returns it.

    Raises
    ------
    PlotError
        If ``path`` exists and is not a folder, or cannot be created or written.
    """
    if path.exists() and not path.is_dir():
        raise PlotError(f"--plot {str(path)!r}: not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PlotError(f"--plot {str(path)!r}: {exc.strerror}") from None
    probe = path / ".edge-runtime-plot-probe"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise PlotError(f"--plot {str(path)!r}: {exc.strerror}") from None
    return path


@dataclass(frozen=True)
class CoveragePoint:
    """One root model: when it arrived and what it covers.

    Attributes
    ----------
    t_s : float
        Seconds since the run started (``time.monotonic``).
    n_samples : int
        Samples the model covers.
    fraction : float
        ``n_samples`` over the rows of the run, in [0, 1] (more after a double count).
    seq : int
        The model's publish counter.
    """

    t_s: float
    n_samples: int
    fraction: float
    seq: int


@dataclass(frozen=True)
class ErrorPoint:
    """The error ratio of one (subsampled) root model; ``t_s`` in seconds since the start."""

    t_s: float
    n_samples: int
    rank: int
    error_ratio: float


@dataclass(frozen=True)
class AnomalyPoint:
    """One leaf status document with anomaly counts.

    Attributes
    ----------
    t_s : float
        Seconds since the run started, when the document arrived.
    node : str
    anomaly_rate : float or None
        ``extra.anomaly_rate``: fraction (0..1) of the leaf's recent scored readings flagged.
    anomalies : int or None
        ``extra.anomalies``: readings flagged so far.
    """

    t_s: float
    node: str
    anomaly_rate: float | None
    anomalies: int | None


@dataclass
class RunRecorder:
    """What `write_plots` draws, recorded during `edge_runtime.runner.run_topology`.

    Parameters
    ----------
    data : ndarray of shape (n_samples, n_features)
        The rows the run replays (the error ratio is over all of them).
    max_points : int, default 50
        Most error-ratio points per run (>= 3); coverage is recorded for every model.

    Attributes
    ----------
    coverage : list of CoveragePoint
    errors : list of ErrorPoint
    anomalies : list of AnomalyPoint
    final : SubspaceMessage or None
        The root's final model (`finish`).
    """

    data: np.ndarray
    max_points: int = 50
    coverage: list[CoveragePoint] = field(default_factory=list)
    errors: list[ErrorPoint] = field(default_factory=list)
    anomalies: list[AnomalyPoint] = field(default_factory=list)
    final: SubspaceMessage | None = None
    _spectrum: np.ndarray | None = field(default=None, repr=False)
    _next_fraction: float = field(default=0.0, repr=False)
    _last: tuple[SubspaceMessage, float] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.max_points < 3:
            raise ValueError(f"max_points must be >= 3, got {self.max_points}")
        self.data = np.asarray(self.data, dtype=np.float64)

    @property
    def total(self) -> int:
        """Rows of the run."""
        return int(self.data.shape[0])

    def on_model(self, model: SubspaceMessage, t_s: float) -> None:
        """Record a root model that arrived ``t_s`` seconds after the start: its coverage
        always, its error ratio when coverage crossed the next step (module docstring)."""
        fraction = model.n_samples / self.total if self.total else 0.0
        self.coverage.append(CoveragePoint(t_s, model.n_samples, fraction, model.seq))
        self._last = (model, t_s)
        if fraction >= self._next_fraction and len(self.errors) < self.max_points - 1:
            self._record_error(model, t_s)
            step = 1.0 / (self.max_points - 2)
            self._next_fraction = (math.floor(fraction / step + 1e-9) + 1) * step

    def finish(self, model: SubspaceMessage | None, t_s: float) -> None:
        """Record the run's final root model (the last error-ratio point)."""
        self.final = model
        if model is None:
            return
        last = self.errors[-1] if self.errors else None
        if last is None or last.n_samples != model.n_samples or last.rank != model.rank:
            if self._last is not None and self._last[0] is model:
                t_s = self._last[1]
            self._record_error(model, t_s)

    def error_ratio_of(self, basis: np.ndarray) -> float:
        """``edge_runtime.fpca.error_ratio(data, basis)``, reusing the data's singular values.

        The offline rank-r error is ``sum_{i>r} s_i^2 / n_samples`` (Eckart-Young), so only
        the first call pays for the SVD.

        Parameters
        ----------
        basis : ndarray of shape (n_features, rank)
            Orthonormal columns (a model's ``subspace.basis``).

        Returns
        -------
        float
            Dimensionless, >= 1 up to rounding; NaN for an empty run or ``rank == 0``.
        """
        rank = basis.shape[1]
        if self.total == 0 or rank == 0:
            return float("nan")
        if self._spectrum is None:
            self._spectrum = np.linalg.svd(self.data, compute_uv=False)
        s2 = self._spectrum**2
        best = float(s2[rank:].sum()) / self.total
        mean_sq = float(s2.sum()) / self.total
        if best <= 1e-10 * mean_sq:  # (near) exact: the zero rules of error_ratio
            return error_ratio(self.data, basis)
        return projection_error(self.data, basis) / best

    def _record_error(self, model: SubspaceMessage, t_s: float) -> None:
        ratio = self.error_ratio_of(model.subspace.basis) if model.rank > 0 else float("nan")
        self.errors.append(ErrorPoint(t_s, model.n_samples, model.rank, ratio))

    def on_status(self, payload: bytes, t_s: float, *, max_bytes: int) -> None:
        """Record a leaf's status document if its ``extra`` carries anomaly counts."""
        try:
            doc = decode_status(payload, max_bytes=max_bytes)
        except WireError:
            return
        rate = doc.extra.get("anomaly_rate")
        count = doc.extra.get("anomalies")
        rate = float(rate) if isinstance(rate, int | float) and not isinstance(rate, bool) else None
        count = count if isinstance(count, int) and not isinstance(count, bool) else None
        if rate is not None or count is not None:
            self.anomalies.append(AnomalyPoint(t_s, doc.node_id, rate, count))

    @contextlib.asynccontextmanager
    async def listen(self, topology: Any, settings: Any, start: float) -> AsyncIterator[None]:
        """Follow the leaves' status documents (``status/detail``) while the block runs.

        Parameters
        ----------
        topology : Topology
        settings : AgentSettings
        start : float
            ``time.monotonic()`` of the run's start (times are recorded relative to it).
        """
        topics = {topology.status_detail_topic(leaf) for leaf in topology.leaves()}

        async def follow(client: aiomqtt.Client) -> None:
            async for message in client.messages:
                payload = message.payload
                if str(message.topic) in topics and isinstance(payload, bytes | bytearray):
                    self.on_status(
                        bytes(payload),
                        time.monotonic() - start,
                        max_bytes=settings.max_payload_bytes,
                    )

        async with aiomqtt.Client(**settings.client_kwargs()) as client:
            for topic in sorted(topics):
                await client.subscribe(topic, qos=1)
            task = asyncio.create_task(follow(client), name="plot-status-recorder")
            try:
                yield
            finally:
                await cancel_and_wait(task)  # bounded, and a cancellation of the caller stays


def write_plots(recorder: RunRecorder, out_dir: Path) -> list[Path]:
    """Draw the four PNGs of `PLOT_FILES` into ``out_dir`` (created if needed).

    Returns
    -------
    list of Path
        The files written, in `PLOT_FILES` order.

    Raises
    ------
    PlotError
        If matplotlib is missing or ``out_dir`` cannot be written.
    """
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    prepare_dir(out_dir)

    def figure() -> tuple[Any, Any]:
        fig = Figure(figsize=(7.0, 4.0), dpi=110, layout="constrained")
        FigureCanvasAgg(fig)
        return fig, fig.add_subplot()

    written: list[Path] = []

    def save(fig: Any, name: str) -> None:
        path = out_dir / name
        try:
            fig.savefig(path, format="png")
        except OSError as exc:
            raise PlotError(f"--plot {str(path)!r}: {exc.strerror}") from None
        written.append(path)

    n = recorder.total
    fig, ax = figure()
    if recorder.coverage:
        t = [p.t_s for p in recorder.coverage]
        ax.step(t, [100 * p.fraction for p in recorder.coverage], where="post", marker=".")
    ax.set_ylim(0, 105)
    ax.set_xlim(left=0)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel(f"rows covered by the root's model (% of {n})")
    ax.set_title("Root coverage")
    ax.grid(alpha=0.3)
    save(fig, PLOT_FILES[0])

    fig, ax = figure()
    points = [p for p in recorder.errors if math.isfinite(p.error_ratio)]
    if points:
        ax.plot([p.t_s for p in points], [p.error_ratio for p in points], marker="o")
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="offline SVD (1.0)")
        ratios = [p.error_ratio for p in points]
        if max(ratios) > 20 * min(ratios):  # log only for a wide range
            ax.set_yscale("log")
        ax.set_xlim(left=0)
        ax.legend()
        last = points[-1]
        ax.annotate(
            f"final {last.error_ratio:.4f}",
            (last.t_s, last.error_ratio),
            textcoords="offset points",
            xytext=(-60, 10),
        )
    else:
        ax.text(0.5, 0.5, "no root model in this run", ha="center", transform=ax.transAxes)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("error ratio on all rows (1.0 optimal)")
    ax.set_title("Root model error ratio vs offline rank-r SVD")
    ax.grid(alpha=0.3, which="both")
    save(fig, PLOT_FILES[1])

    fig, ax = figure()
    model = recorder.final
    if model is not None and model.rank > 0:
        s = np.asarray(model.subspace.singular_values, dtype=np.float64)
        k = np.arange(1, s.size + 1)
        ax.bar(k, s, color="tab:blue", label="singular value")
        ax.set_xlabel("component")
        ax.set_ylabel("singular value (units of the data x sqrt(samples))")
        ax.set_xticks(k)
        energy = np.cumsum(s**2) / float(np.sum(s**2))
        right = ax.twinx()
        right.plot(k, energy, color="tab:orange", marker="o", label="cumulative energy")
        right.set_ylim(0, 1.05)
        right.set_ylabel("normalised cumulative energy")
        ax.set_title(f"Scree plot of the final root model (rank {model.rank}, n={model.n_samples})")
    else:
        ax.text(0.5, 0.5, "no root model in this run", ha="center", transform=ax.transAxes)
        ax.set_title("Scree plot of the final root model")
    save(fig, PLOT_FILES[2])

    fig, ax = figure()
    by_node: dict[str, list[AnomalyPoint]] = {}
    for p in recorder.anomalies:
        by_node.setdefault(p.node, []).append(p)
    rates = {k: [p for p in v if p.anomaly_rate is not None] for k, v in by_node.items()}
    counts = {k: [p for p in v if p.anomalies is not None] for k, v in by_node.items()}
    if any(rates.values()):
        for node, pts in sorted(rates.items()):
            if pts:
                y = [100 * (p.anomaly_rate or 0.0) for p in pts]
                ax.step([p.t_s for p in pts], y, where="post", marker=".", label=node)
        ax.set_ylabel("anomaly rate (% of recent readings)")
        ax.legend(fontsize="small", ncol=2)
    elif any(counts.values()):
        for node, pts in sorted(counts.items()):
            if pts:
                y = [p.anomalies or 0 for p in pts]
                ax.step([p.t_s for p in pts], y, where="post", marker=".", label=node)
        ax.set_ylabel("readings flagged")
        ax.legend(fontsize="small", ncol=2)
    else:
        ax.text(0.5, 0.5, NO_ANOMALIES, ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
    ax.set_xlabel("time since start (s)")
    ax.set_title("Anomaly timeline (leaves' status documents)")
    save(fig, PLOT_FILES[3])
    return written


def has_anomalies(recorder: RunRecorder) -> bool:
    """Whether any leaf reported anomaly counts during the run."""
    return bool(recorder.anomalies)


def describe(written: list[Path], recorder: RunRecorder) -> Mapping[str, str]:
    """File name -> what it shows (for the run summary)."""
    notes = {
        PLOT_FILES[0]: "root coverage over time",
        PLOT_FILES[1]: f"root error ratio over time ({len(recorder.errors)} points)",
        PLOT_FILES[2]: "scree plot of the final root model",
        PLOT_FILES[3]: "anomaly timeline"
        + ("" if has_anomalies(recorder) else f" ({NO_ANOMALIES})"),
    }
    return {str(p): notes.get(p.name, "") for p in written}
