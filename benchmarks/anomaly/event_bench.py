"""The event benchmark: streaming detectors against injected faults, pooled over seeds.

``python -m benchmarks anomaly-events [--seeds 20] [--data FILE ...] [--epoch S] [--warmup N]
[--only NAME ...] [--jobs 2] [--out DIR]``. Per dataset (rows = readings, columns = sensors):
each detector is built from the clean warm-up rows (Motes light: the first device-day, 2,787
readings, dropouts filled; a ``--data`` matrix: its first third) and fed the other rows one by
one, ``update(x, t)`` with ``t = row * epoch`` seconds; once on the clean rows (alarm events
per device-day) and once per seed on the rows with that seed's faults (`inject`). Metrics
(`events`) are pooled over the seeds; NAB (`nab`) sums the seeds before normalising. A fault's
NAB window runs from its first faulty row for ``max(0.1 * n_scored / n_faults, window + 1)``
readings, cut before the next fault; detections after it while the fault lasts (plus
`events.TAIL`), or in an invisible fault, are neutral.
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import io
import lzma
import multiprocessing
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from benchmarks.anomaly import events as ev
from benchmarks.anomaly.baselines import HalfSpaceTreesDetector, RobustZ, StaticLimits
from benchmarks.anomaly.faults import fill_dropouts
from benchmarks.anomaly.inject import CONSTANT_KINDS, KINDS, Fault, FaultConfig, inject, noise_sigma
from benchmarks.anomaly.nab import Stream, nab_score
from benchmarks.registry import REPORT_DIR
from benchmarks.reporting import Check, checks_table, figure, number, prose, save_figure, table
from benchmarks.schema import read_result, revive, write_result
from edge_runtime.cli.argtypes import positive_float, positive_int
from edge_runtime.datasets import load_dataset

__all__ = ["DAPHNET", "DAY_S", "Dataset", "Detector", "DetectorResult", "detectors",
           "evaluate", "load_matrix", "main", "motes", "nab_stream", "plot", "provenance", "render",
           "run_stream"]

DAY_S = 86400.0  # seconds in a device-day
MOTES_EPOCH = 31.0  # Motes light's epoch (s): 2,787 readings per device-day
RESULT_FILE = "anomaly_events.json"
#: The second real dataset shipped with the benchmark (see data/README.md); 64 Hz.
DAPHNET = Path(__file__).with_name("data") / "daphnet-s06r02e0.csv.xz"
DAPHNET_EPOCH = 1.0 / 64.0
#: The runtime's fault detector; its row is skipped while it is absent.
FAULT_DETECTOR = ("edge_runtime.fpca.faults", "FaultDetector")
NEW = "FaultDetector (issue 25)"
#: Kind groups of the tables and the plot.
GROUPS = {"SHORT": ("short",), "NOISE": ("noise",), "CONSTANT": CONSTANT_KINDS,
          "DRIFT": ("drift",)}


class Detector(Protocol):
    """A streaming detector: one reading in, (alarm, suspected sensor or -1) out."""

    def update(self, x: np.ndarray, t: float) -> tuple[bool, int]: ...


Factory = Callable[[np.ndarray], Detector]


@dataclass(frozen=True)
class Dataset:
    """A clean matrix (n_samples, n_features), its warm-up length and epoch (s)."""

    name: str
    data: np.ndarray
    warmup: int
    epoch: float


@dataclass
class DetectorResult:
    """Everything measured for one detector on one dataset (pooled over seeds); counts of
    faults per kind, delays in readings."""

    name: str
    visible: dict[str, int] = field(default_factory=dict)
    injected: dict[str, int] = field(default_factory=dict)
    detected: dict[str, int] = field(default_factory=dict)
    delays: dict[str, list[int]] = field(default_factory=dict)
    identified: int = 0
    n_detected: int = 0
    true_events: int = 0
    false_events: int = 0
    neutral_events: int = 0
    clean_events: int = 0
    clean_readings: int = 0
    clean_days: float = float("nan")
    clean_share: float = float("nan")
    nab: float = float("nan")
    nab_seeds: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def recall(self, kinds: tuple[str, ...]) -> float:
        """Detected / visible faults over ``kinds`` (NaN when none was visible)."""
        v = sum(self.visible.get(k, 0) for k in kinds)
        return sum(self.detected.get(k, 0) for k in kinds) / v if v else float("nan")

    @property
    def clean_per_day(self) -> float:
        """Alarm events per device-day on the clean stream."""
        return self.clean_events / self.clean_days

    @property
    def precision(self) -> float:
        """True / (true + false) alarm events on the faulty streams."""
        n = self.true_events + self.false_events
        return self.true_events / n if n else float("nan")

    @property
    def identification(self) -> float:
        """Share of detected faults whose event named the faulty sensor."""
        return self.identified / self.n_detected if self.n_detected else float("nan")

    @property
    def median_delay(self) -> float:
        """Median delay (readings) over detected faults other than spikes."""
        d = [x for k, v in self.delays.items() if k != "short" for x in v]
        return float(np.median(d)) if d else float("nan")

    def add_clean(self, alarms: np.ndarray, start: int, epoch: float) -> None:
        """Count the clean run: ``alarms`` (n,) bool, rows from ``start`` scored."""
        self.clean_events = len(ev.merge_alarms(alarms[start:], np.zeros(len(alarms) - start, int)))
        self.clean_readings = len(alarms) - start
        self.clean_days = self.clean_readings * epoch / DAY_S
        self.clean_share = float(alarms[start:].mean())

    def add_faulty(
        self, alarms: np.ndarray, sensors: np.ndarray, faults: list[Fault], start: int
    ) -> Stream:
        """Count one faulty run (alarm and suspect per row, (n,)); its NAB `Stream`."""
        events = ev.merge_alarms(alarms, sensors)
        for f in faults:
            self.injected[f.kind] = self.injected.get(f.kind, 0) + 1
        for m in ev.match_faults(faults, events):
            k = m.fault.kind
            self.visible[k] = self.visible.get(k, 0) + 1
            if m.detected:
                self.detected[k] = self.detected.get(k, 0) + 1
                self.delays.setdefault(k, []).append(int(m.delay or 0))
                self.n_detected += 1
                self.identified += int(bool(m.identified))
        n_true, n_false, n_neutral = ev.classify_events(events, faults)
        self.true_events += n_true
        self.false_events += n_false
        self.neutral_events += n_neutral
        return nab_stream(events, faults, len(alarms) - start, len(alarms))


def motes() -> Dataset:
    """Motes light (7712 x 48 lux), dropouts filled, warm-up = the first device-day."""
    data = fill_dropouts(np.asarray(load_dataset("motes-light"), dtype=np.float64))
    return Dataset("Motes light", data, round(DAY_S / MOTES_EPOCH), MOTES_EPOCH)


def load_matrix(path: Path, epoch: float, warmup: int | None = None) -> Dataset:
    """Rows of readings from ``.npy`` or text (comma or whitespace separated, an optional
    header line, ``.xz``/``.gz``); ``epoch`` in s; ``warmup`` rows (None: a third)."""
    if path.suffix == ".npy":
        data = np.load(path).astype(np.float64)
    else:
        with {".xz": lzma.open, ".gz": gzip.open}.get(path.suffix, open)(path, "rt") as fh:
            text = fh.read()
        first = text.split("\n", 1)[0]
        try:
            [float(v) for v in first.replace(",", " ").split()]
            skip = 0
        except ValueError:
            skip = 1
        delimiter = "," if "," in first else None
        data = np.loadtxt(io.StringIO(text), delimiter=delimiter, skiprows=skip, ndmin=2)
    return Dataset(path.name, data, data.shape[0] // 3 if warmup is None else warmup, epoch)


def detectors() -> tuple[dict[str, Factory], str]:
    """The detector factories, and a note on the runtime's detector if it is absent."""
    out: dict[str, Factory] = {}
    note = ""
    try:
        cls = getattr(importlib.import_module(FAULT_DETECTOR[0]), FAULT_DETECTOR[1])
    except (ImportError, AttributeError) as exc:
        note = f"`{'.'.join(FAULT_DETECTOR)}` not available ({exc}): its row is skipped."
    else:
        out[NEW] = cls.from_warmup if hasattr(cls, "from_warmup") else cls
    out["static Q/T^2 limits (today)"] = StaticLimits
    out["robust z of first differences"] = RobustZ
    out["HalfSpaceTrees + QuantileFilter"] = HalfSpaceTreesDetector
    return out, note


def run_stream(
    detector: Detector, data: np.ndarray, start: int, epoch: float
) -> tuple[np.ndarray, np.ndarray]:
    """Feed rows ``[start, n)`` of ``data`` (n, d) to ``detector``: alarm (bool, False on
    the warm-up) and suspected sensor (int, -1 for none) per row, both shape (n,)."""
    n = data.shape[0]
    alarms = np.zeros(n, dtype=bool)
    sensors = np.full(n, -1, dtype=np.int64)
    for i in range(start, n):
        alarm, sensor = detector.update(data[i], i * epoch)
        alarms[i] = bool(alarm)
        sensors[i] = int(sensor) if alarm else -1
    return alarms, sensors


def nab_stream(events: list[ev.AlarmEvent], faults: list[Fault], n_scored: int, n: int) -> Stream:
    """The NAB view of one faulty run of ``n`` rows, ``n_scored`` after the warm-up, its
    ``faults`` sorted by start (windows and neutral spans as in the module)."""
    visible = [f for f in faults if f.onset is not None]
    size = max(1, int(0.1 * n_scored / max(len(visible), 1)))
    windows, neutral = [], []
    starts = [f.start for f in faults] + [n]
    for k, f in enumerate(faults):
        if f.onset is None:
            neutral.append((f.start, f.end + ev.TAIL - 1))
            continue
        right = min(f.onset + max(size, ev.DELAY_WINDOW[f.kind] + 1) - 1, starts[k + 1] - 1, n - 1)
        windows.append((f.start, right))
        span_end = max(f.end, f.onset + ev.DELAY_WINDOW[f.kind] + 1) + ev.TAIL - 1
        if span_end > right:
            neutral.append((right + 1, span_end))
    return Stream([e.start for e in events], windows, neutral)


def evaluate(
    name: str, factory: Factory, ds: Dataset, seeds: int, config: FaultConfig | None = None,
    log: Callable[[str], None] = print,
) -> DetectorResult:
    """One detector on one dataset: the clean run and ``seeds`` faulty runs."""
    t0 = time.perf_counter()
    res, start = DetectorResult(name), ds.warmup
    warm = ds.data[:start]
    sigma = noise_sigma(warm)
    res.add_clean(run_stream(factory(warm), ds.data, start, ds.epoch)[0], start, ds.epoch)
    streams = []
    for seed in range(seeds):
        inj = inject(ds.data, start=start, seed=seed, sigma=sigma, config=config)
        alarms, sensors = run_stream(factory(warm), inj.data, start, ds.epoch)
        streams.append(res.add_faulty(alarms, sensors, inj.faults, start))
    res.nab = nab_score(streams)
    res.nab_seeds = [nab_score([s]) for s in streams]
    res.seconds = time.perf_counter() - t0
    log(f"  {name}: {res.seconds:.1f} s")
    return res


def _f(x: float, digits: int = 2) -> str:
    return number(x, f".{digits}f")


def _numbers(r: DetectorResult) -> list[str]:
    return [*(_f(r.recall(kinds)) for kinds in GROUPS.values()), _f(r.clean_per_day, 1),
            _f(r.precision), _f(r.median_delay, 1), _f(r.identification), _f(r.nab, 1)]


def main_table(results: list[DetectorResult]) -> str:
    """One row per detector: recall per kind (window), clean events/day, precision,
    median delay, identification, NAB."""
    w = ev.DELAY_WINDOW
    header = ["detector", f"SHORT recall (delay {w['short']})", f"NOISE recall (<= {w['noise']})",
              f"CONSTANT recall (<= {w['stuck_rail']})", f"DRIFT recall (<= {w['drift']})",
              "clean alarm events / device-day", "event precision", "median delay (readings)",
              "identification", "NAB (standard)"]
    return table(header, [[r.name, *_numbers(r)] for r in results], align="l" + "r" * 9)


def _detail(r: DetectorResult) -> list[str]:
    cells = [r.name]
    for k in KINDS:
        d, vis, inj = r.delays.get(k, []), r.visible.get(k, 0), r.injected.get(k, 0)
        seen = f"{vis}" if vis == inj else f"{vis} of {inj}"
        cells.append(f"{r.detected.get(k, 0)}/{seen}" + (f", {np.median(d):.0f}" if d else ""))
    s = r.nab_seeds
    nab = f"{np.nanmedian(s):.1f} [{np.nanmin(s):.1f}, {np.nanmax(s):.1f}]" if s else "n/a"
    return [*cells, f"{r.true_events} / {r.false_events} / {r.neutral_events}",
            f"{1000 * r.clean_events / max(r.clean_readings, 1):.2f}", f"{r.clean_share:.4f}",
            nab, f"{r.seconds:.0f}"]


def detail_table(results: list[DetectorResult]) -> str:
    """Per kind: detected / visible (injected) and median delay; events and timing."""
    header = ["detector", *KINDS, "true / false / neutral events", "clean events / 1000 readings",
              "clean alarm share", "NAB per seed: median [min, max]", "s"]
    return table(header, [_detail(r) for r in results], align="l" + "r" * (len(header) - 1))


#: The Done-when items of the runtime's detector that are a share at least a target.
AT_LEAST: list[tuple[str, Callable[[DetectorResult], float], float]] = [
    ("SHORT recall at the faulty reading", lambda r: r.recall(("short",)), 0.95),
    ("NOISE recall within 20 readings", lambda r: r.recall(("noise",)), 0.8),
    ("CONSTANT recall within 10 readings of the truth moving away",
     lambda r: r.recall(CONSTANT_KINDS), 0.9),
    ("identification of detected events", lambda r: r.identification, 0.9),
    ("event precision", lambda r: r.precision, 0.8),
]


def done_when(results: list[DetectorResult]) -> list[Check]:
    """The Done-when items of the runtime's detector (one n/a item when it is absent)."""
    new = next((r for r in results if r.name == NEW), None)
    if new is None:
        return [Check(f"{NEW} present", "absent", "present", None)]
    best = max((r.nab for r in results if r.name != NEW), default=float("nan"))
    day = new.clean_per_day
    out = [Check("clean alarm events / device-day", _f(day), "<= 2", day <= 2)]
    out += [Check(item, _f(get(new)), f">= {t:g}", get(new) >= t) for item, get, t in AT_LEAST]
    nab = f"{_f(new.nab, 1)} vs best baseline {_f(best, 1)}"
    return [*out, Check("NAB score above every baseline", nab, "> best baseline", new.nab > best)]


def _remarks(ds: Dataset, results: list[DetectorResult]) -> list[str]:
    """Lines (each followed by a blank) on silent detectors and fast sensors."""
    out = []
    for r in results:
        if r.clean_events == 0 and r.true_events + r.false_events + r.neutral_events == 0:
            out += [f"{r.name} raised no alarm at all: its NAB is the null detector's.", ""]
    day = DAY_S / ds.epoch
    if day > 100_000:
        out += [f"At {1 / ds.epoch:g} readings per second a device-day is {day:,.0f} readings: "
                "compare clean events per 1000 readings.", ""]
    return out


Section = tuple[Dataset, list[DetectorResult], int]


def render(sections: list[Section], note: str) -> str:
    """The Markdown report: per (dataset, results, seeds) the main table, details, checks."""
    cfg = FaultConfig()
    counts = ", ".join(f"{v} {k}" for k, v in cfg.counts.items())
    parts = prose("anomaly_events", "intro", counts=counts, cfg=cfg, tail=ev.TAIL)
    parts += ["", note] if note else []
    for ds, results, seeds in sections:
        n, d = ds.data.shape
        parts += prose(
            "anomaly_events", "dataset", ds=ds, n=n, d=d, day=DAY_S / ds.epoch,
            last_warm=ds.warmup - 1, last_row=n - 1, days=(n - ds.warmup) * ds.epoch / DAY_S,
            seeds=seeds, main_table=main_table(results), detail_table=detail_table(results),
        )
        parts += [*_remarks(ds, results), f"Done-when (issue 25), {ds.name}:", "",
                  checks_table(done_when(results))]
    return "\n".join(parts) + "\n"


def plot(sections: list[Section], path: Path) -> Path:
    """Recall per fault kind and NAB score per detector, one panel row per dataset (PNG)."""
    fig, axes = figure(len(sections), 2, figsize=(11.0, 3.2 * len(sections)), squeeze=False)
    for row, (ds, results, _) in enumerate(sections):
        ax_r, ax_n = axes[row]
        width = 0.8 / max(len(results), 1)
        for k, r in enumerate(results):
            recalls = [np.nan_to_num(r.recall(g)) for g in GROUPS.values()]
            ax_r.bar(np.arange(len(GROUPS)) + k * width, recalls, width, label=r.name)
        ax_r.set_xticks(np.arange(len(GROUPS)) + 0.4 - width / 2, list(GROUPS))
        ax_r.set_ylim(0, 1)
        ax_r.set_ylabel("recall within the window")
        ax_r.set_title(ds.name)
        ax_n.barh([r.name for r in results], [np.nan_to_num(r.nab) for r in results])
        ax_n.axvline(0, color="black", linewidth=0.8)
        ax_n.set_xlabel("NAB score (standard profile; null 0, perfect 100)")
        ax_n.invert_yaxis()
        if row == 0:
            ax_r.legend(fontsize="small")
    fig.tight_layout()
    return save_figure(fig, path)


def _evaluate_safe(task: tuple[str, Factory, Dataset, int]) -> tuple[DetectorResult | None, str]:
    """`evaluate` of (name, factory, dataset, seeds); a detector's exception comes back as
    text (its row is skipped) rather than ending the benchmark."""
    try:
        return evaluate(*task), ""
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def provenance(seeds: int) -> str:
    """When and on what the run was made (commit, and the detector module's git state)."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10)
        except OSError:
            return ""
        return done.stdout.strip()

    module = FAULT_DETECTOR[0].replace(".", "/") + ".py"
    state = git("status", "--porcelain", "--", module)
    state = {"": "as committed", "??": "not yet committed"}.get(state[:2].strip(), "modified")
    return (f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {seeds} seeds, at commit "
            f"{git('rev-parse', '--short', 'HEAD') or 'unknown'}; `{module}` {state}.")


def main(argv: list[str] | None = None) -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks anomaly-events")
    add = parser.add_argument
    add("--seeds", type=positive_int, default=20, help="fault seeds (default 20)")
    add("--data", type=Path, action="append", default=[],
        help="also run on this matrix (rows = readings; .npy, .csv, .txt, .xz, .gz)")
    add("--epoch", type=positive_float, default=None, help="seconds per --data reading")
    add("--warmup", type=positive_int, default=None, help="warm-up rows of --data")
    add("--no-motes", action="store_true", help="skip Motes light")
    add("--out", type=Path, default=REPORT_DIR)
    add("--only", action="append", default=[],
        help="run only detectors whose name contains this (e.g. FaultDetector, HalfSpace)")
    add("--jobs", type=positive_int, default=2,
        help="detectors run in parallel processes (default 2)")
    args = parser.parse_args(argv)
    datasets = [] if args.no_motes else [motes()]
    for path in args.data:
        daphnet = path.resolve() == DAPHNET.resolve()
        epoch = args.epoch or (DAPHNET_EPOCH if daphnet else MOTES_EPOCH)
        datasets.append(load_matrix(path, epoch, args.warmup))
    factories, note = detectors()
    if args.only:
        factories = {k: v for k, v in factories.items()
                     if any(o.lower() in k.lower() for o in args.only)}
    notes = [note] if note else []
    if note:
        print(note)
    sections = []
    for ds in datasets:
        print(f"{ds.name}: {ds.data.shape}, {args.seeds} seeds")
        tasks = [(name, factory, ds, args.seeds) for name, factory in factories.items()]
        if args.jobs > 1:
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(args.jobs, mp_context=ctx) as pool:
                outcomes = list(pool.map(_evaluate_safe, tasks))
        else:
            outcomes = [_evaluate_safe(task) for task in tasks]
        results = []
        for name, (res, error) in zip(factories, outcomes, strict=True):
            if res is None:
                print(f"  {name} raised on {ds.name}: {error}")
                notes.append(f"{name} raised on {ds.name}: {error} (its row is skipped).")
            else:
                results.append(res)
        sections.append((ds, results, args.seeds))
    notes.append(provenance(args.seeds))
    stored = [{"dataset": {"name": ds.name, "shape": ds.data.shape, "warmup": ds.warmup,
                           "epoch": ds.epoch}, "seeds": seeds, "detectors": results}
              for ds, results, seeds in sections]
    nabs = {f"{s['dataset']['name']}: {r.name}": r.nab for s in stored for r in s["detectors"]}
    write_result(args.out / RESULT_FILE, "anomaly-events",
                 {"seeds": args.seeds, "note": " ".join(notes)}, {"sections": stored}, nabs)
    print(render_stored(args.out))
    print(f"wrote {args.out / 'anomaly_events.md'}")


def render_stored(out: Path) -> str:
    """Rewrite ``out/anomaly_events.md`` and ``.png`` from ``out/anomaly_events.json``,
    measuring nothing; the Markdown (the PNG is skipped without matplotlib)."""
    doc = read_result(out / RESULT_FILE, "anomaly-events")
    sections = []
    for section in doc["rows"]["sections"]:
        info = section["dataset"]
        # the report reads only the matrix's shape: a zero-size stand-in of that shape
        data = np.broadcast_to(np.float64(0.0), tuple(info["shape"]))
        ds = Dataset(info["name"], data, info["warmup"], info["epoch"])
        sections.append((ds, revive(list[DetectorResult], section["detectors"]), section["seeds"]))
    text = render(sections, doc["parameters"]["note"])
    (out / "anomaly_events.md").write_text(text)
    try:
        plot(sections, out / "anomaly_events.png")
    except ImportError:  # matplotlib is in the bench extra; the tables do not need it
        print("matplotlib not installed: no plot")
    return text
