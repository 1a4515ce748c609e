"""How far any per-reading statistic can go under the clean-alarm budget, in hindsight.

``python -m benchmarks anomaly-oracle [--seeds 20] [--out DIR]``. Each per-sensor statistic
(`statistics`: causal, from a model of the warm-up) alarms at threshold ``c`` when its max
over the sensors exceeds ``c``; consecutive alarms are one event. Its *hindsight limit* at a
budget of B clean events per device-day is the smallest ``c`` such that every threshold
``>= c`` gives at most B events per device-day on the clean scored rows (the count is not
monotone in ``c``): computed on the stream it is applied to, so no limit a detector computes
can be better calibrated. At that ``c`` each seed's faulty stream (the event benchmark's
protocol and seeds) is scored with `events.merge_alarms` and `events.match_faults`; the recall
is taken at the limit, not maximised over thresholds (it is not monotone either).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import numpy as np

from benchmarks.anomaly.event_bench import DAY_S, GROUPS, Dataset, motes
from benchmarks.anomaly.events import DELAY_WINDOW, match_faults, merge_alarms
from benchmarks.anomaly.inject import CONSTANT_KINDS, FaultConfig, inject, noise_sigma
from benchmarks.registry import REPORT_DIR
from benchmarks.reporting import prose, table
from benchmarks.schema import read_result, revive, write_result
from edge_runtime.cli.argtypes import positive_int

__all__ = ["BUDGETS", "GROUPS", "TARGETS", "Model", "OracleResult", "evaluate", "fit_model",
           "hindsight_threshold", "main", "render", "statistics"]

#: Clean alarm events per device-day at which the hindsight limit is taken (the target: 2).
BUDGETS = (2.0, 5.0, 20.0)
#: The recall targets at 2 clean events per device-day, by kind group (`GROUPS`).
TARGETS = {"SHORT": 0.95, "NOISE": 0.8, "CONSTANT": 0.9}
#: As FaultDetector's: directions of the cross-sensor models of changes and of log levels;
#: readings of the local RMS and its floor (x global); NOISE windows, their context and the
#: clip of |z| (a spike is not noise); CONSTANT's min_run and mute_after; rows between refits
#: of the refitted level model; the score where a rule is certain (0 for MIN_RUN readings).
RANK, LEVEL_RANK, LOCAL, LOCAL_FLOOR = 8, 2, 30, 0.3
NOISE_WINDOWS, NOISE_CONTEXT, CLIP = (5, 10, 20), 100, 6.0
MIN_RUN, MUTE_AFTER, REFIT, CERTAIN = 3, 100, 1024, 1e6


@dataclass(frozen=True)
class Model:
    """What the statistics take from the warm-up (rows ``[0, start)``)."""

    start: int
    sigma: np.ndarray  # (d,) robust sigma of non-zero first differences (inject's)
    rail: np.ndarray  # (d,) largest warm-up reading
    log_offset: float
    domains: dict[str, dict[str, np.ndarray]]  # "lux"/"log" -> V, h, scales
    level: dict[str, np.ndarray]  # log-level model: mu, V, h, rms


def _transform(x: np.ndarray, domain: str, c: float) -> np.ndarray:
    return x if domain == "lux" else np.log(np.maximum(x, 0.0) + c)


def _diff(x: np.ndarray) -> np.ndarray:
    """First differences with a zero first row: ``out[t] = x[t] - x[t - 1]``."""
    return np.concatenate([np.zeros_like(x[:1]), np.diff(x, axis=0)])


def _loo_basis(z: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Top ``rank`` right singular vectors of ``z`` (n, d) and their leverages (d,)."""
    v = np.linalg.svd(z, full_matrices=False)[2][: min(rank, z.shape[1] - 1)].T
    return v, np.minimum((v**2).sum(1), 0.99)


def _loo(z: np.ndarray, v: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Leave-one-out residual of ``z`` (n, d) off the basis ``v`` with leverages ``h``."""
    return (z - (z @ v) @ v.T) / (1.0 - h)


def _rms(a: np.ndarray) -> np.ndarray:
    return np.sqrt(np.mean(a**2, axis=0)) + 1e-12


def _level_model(y: np.ndarray) -> dict[str, np.ndarray]:
    """The rank-`LEVEL_RANK` model of log levels ``y`` (n, d): mean, basis, leverages, RMS."""
    mu = y.mean(0)
    v, h = _loo_basis(y - mu, LEVEL_RANK)
    return {"mu": mu, "V": v, "h": h, "rms": _rms(_loo(y - mu, v, h))}


def fit_model(warm: np.ndarray, log_offset: float | None = None) -> Model:
    """The statistics' warm-up quantities from clean rows ``warm`` (n, d), non-negative;
    ``log_offset`` None: the median of the sensors' robust sigma (14.4 lux on Motes light)."""
    warm = np.asarray(warm, dtype=np.float64)
    sigma = noise_sigma(warm)
    c = float(np.median(sigma)) if log_offset is None else float(log_offset)
    domains = {}
    for dom in ("lux", "log"):
        y = _transform(warm, dom, c)
        dy = np.diff(y, axis=0)
        v, h = _loo_basis(dy, RANK)
        domains[dom] = {"V": v, "h": h, "sigma": noise_sigma(y) if dom == "log" else sigma,
                        "rms": _rms(dy), "loo_rms": _rms(_loo(dy, v, h))}
    level = _level_model(_transform(warm, "log", c))
    return Model(warm.shape[0], sigma, warm.max(0), c, domains, level)


def _rolling_mean(a: np.ndarray, w: int, lag: int = 0) -> np.ndarray:
    """Mean of ``a[t - lag - w + 1 .. t - lag]`` per row (fewer rows at the top), axis 0."""
    cs = np.zeros((a.shape[0] + 1, a.shape[1]))
    np.cumsum(a, axis=0, out=cs[1:])
    hi = np.clip(np.arange(a.shape[0]) - lag + 1, 0, None)
    lo = np.clip(hi - w, 0, None)
    return (cs[hi] - cs[lo]) / np.maximum(hi - lo, 1)[:, None]


def _run_lengths(same: np.ndarray) -> np.ndarray:
    """Consecutive True values ending at each row, per column (``same`` (n, d) bool)."""
    t = np.arange(same.shape[0])[:, None]
    last_break = np.maximum.accumulate(np.where(same, -1, t), axis=0)
    return t - last_break


def statistics(x: np.ndarray, model: Model) -> dict[str, np.ndarray]:
    """Every statistic on readings ``x`` (n, d): name -> (n, d), >= 0; row ``t`` uses rows
    ``<= t`` and ``model``. Per domain (``lux``, ``log``: ``log(x + c)``): SHORT, |change|
    over the global or local RMS, and the leave-one-out residual ``loo`` of a rank-8 PCA of
    the changes (what the other sensors do not explain); NOISE, RMS over 5, 10, 20 readings;
    CONSTANT, run lengths of repeated values, the move the other sensors predicted over a run,
    and the rank-2 log-level residual's move over a run or at the rail or 0."""
    x = np.asarray(x, dtype=np.float64)
    out: dict[str, np.ndarray] = {}
    dx = _diff(x)
    same = np.zeros(x.shape, dtype=bool)
    same[1:] = dx[1:] == 0
    run = _run_lengths(same)
    live = (run >= MIN_RUN) & (run < MUTE_AFTER)
    at_zero = _run_lengths(x <= 0.0)
    for dom, m in model.domains.items():
        y = _transform(x, dom, model.log_offset)
        d = dx if dom == "lux" else _diff(y)
        loo = _loo(d, m["V"], m["h"])
        ad = np.abs(d)
        local_d, local_l = (
            np.maximum(np.sqrt(_rolling_mean(v**2, LOCAL, lag=1)), LOCAL_FLOOR * m[key])
            for v, key in ((d, "rms"), (loo, "loo_rms"))
        )
        out[f"{dom} abs(diff) / sigma"] = ad / m["sigma"]
        out[f"{dom} abs(diff) / local RMS"] = ad / local_d
        out[f"{dom} abs(loo) / RMS (PCA of changes)"] = np.abs(loo) / m["loo_rms"]
        out[f"{dom} abs(loo) / local RMS"] = np.abs(loo) / local_l
        z2 = (d / m["sigma"]) ** 2
        zl2 = np.minimum((loo / m["loo_rms"]) ** 2, CLIP**2)
        for w in NOISE_WINDOWS:
            ctx = np.maximum(np.sqrt(_rolling_mean(d**2, NOISE_CONTEXT, lag=w)), m["sigma"])
            out[f"{dom} RMS{w}(diff) / sigma"] = np.sqrt(_rolling_mean(z2, w))
            out[f"{dom} RMS{w}(clip loo / RMS)"] = np.sqrt(_rolling_mean(zl2, w))
            rms = np.sqrt(_rolling_mean(d**2, w))
            out[f"{dom} RMS{w}(diff) / RMS of the 100 before"] = rms / ctx
        # CONSTANT: the change the other sensors predicted while this one repeated.
        pred = d - loo
        cs = np.zeros((x.shape[0] + 1, x.shape[1]))
        np.cumsum(pred, axis=0, out=cs[1:])
        t = np.arange(x.shape[0])[:, None]
        acc = cs[1:] - cs[t + 1 - run, np.arange(x.shape[1])]
        drift = np.where(live, np.abs(acc) / m["loo_rms"], 0.0)
        out[f"{dom} abs(predicted move) over run"] = drift
        certain = (at_zero >= MIN_RUN) & (run < MUTE_AFTER)
        out[f"{dom} abs(predicted move) over run, or 0 for 3"] = np.where(certain, CERTAIN, drift)
    out["run length"] = run.astype(np.float64)
    out["run length (< 100)"] = np.where(run < MUTE_AFTER, run, 0).astype(np.float64)
    lv = model.level
    yc = _transform(x, "log", model.log_offset) - lv["mu"]
    res = _loo(yc, lv["V"], lv["h"]) / lv["rms"]
    rows = np.arange(x.shape[0])[:, None]
    begin = np.maximum(rows - run, 0)
    out["abs(level residual move) over run"] = np.where(
        live, np.abs(res - res[begin, np.arange(x.shape[1])]), 0.0
    )
    tol = 1e-6 * np.maximum(np.abs(x), 1.0)
    at_rail = (_run_lengths(x >= model.rail - tol) >= 2) | (at_zero >= 2)
    at_rail &= run < MUTE_AFTER
    out["abs(level residual) at rail or 0 (2+)"] = np.where(at_rail, np.abs(res), 0.0)
    refit = np.abs(_refit_level_residual(x, model))
    out["abs(level residual, refit) at rail or 0 (2+)"] = np.where(at_rail, refit, 0.0)
    return out


def _refit_level_residual(x: np.ndarray, model: Model) -> np.ndarray:
    """Leave-one-out log-level residual over its RMS, the rank-2 model refitted every
    `REFIT` rows on the `start` rows before (causal; the warm-up model until then)."""
    y = _transform(x, "log", model.log_offset)
    out = np.zeros_like(y)
    for lo in range(model.start, y.shape[0], REFIT):
        lv = _level_model(y[lo - model.start : lo]) if lo > model.start else model.level
        out[lo : lo + REFIT] = _loo(y[lo : lo + REFIT] - lv["mu"], lv["V"], lv["h"]) / lv["rms"]
    return out


def hindsight_threshold(score: np.ndarray, max_events: float) -> float:
    """Smallest ``c`` such that every threshold ``>= c`` alarms (``score > c``) in at most
    ``max_events`` runs of consecutive readings, ``score`` (n,) the max over the sensors on
    the clean scored rows; one of its values (the largest when nothing may alarm)."""
    s = np.asarray(score, dtype=np.float64)
    prev = np.concatenate([[-np.inf], s[:-1]])
    starts = prev < s  # an event starts at t for thresholds in [prev, s)
    a, b, cand = np.sort(prev[starts]), np.sort(s[starts]), np.unique(s)
    count = np.searchsorted(a, cand, "right") - np.searchsorted(b, cand, "right")
    bad = np.flatnonzero(count > max_events)
    return float(cand[min(bad[-1] + 1, cand.size - 1)] if bad.size else cand[0])


RESULT_FILE = "anomaly_oracle.json"


Union = tuple[tuple[str, ...], dict[str, int]]  # statistics ORed, detected faults per kind


@dataclass
class OracleResult:
    """Per statistic and budget: the hindsight limit and detected / visible per kind;
    ``unions[group][budget]``: the best OR of 2 or 3 statistics (the max of each over its own
    limit, thresholded at its hindsight limit) found, its names and detected counts."""

    clean_days: float
    seeds: int
    budgets: tuple[float, ...] = BUDGETS
    thresholds: dict[str, dict[float, float]] = field(default_factory=dict)
    detected: dict[str, dict[float, dict[str, int]]] = field(default_factory=dict)
    visible: dict[str, int] = field(default_factory=dict)
    unions: dict[str, dict[float, Union]] = field(default_factory=dict)
    seconds: float = 0.0

    def ratio(self, got: dict[str, int], kinds: tuple[str, ...]) -> float:
        """Faults of ``kinds`` in ``got`` / visible ones (NaN if none was visible)."""
        v = sum(self.visible.get(k, 0) for k in kinds)
        return sum(got.get(k, 0) for k in kinds) / v if v else float("nan")

    def recall(self, stat: str, budget: float, kinds: tuple[str, ...]) -> float:
        """Detected / visible faults of ``kinds`` (NaN if none was visible)."""
        return self.ratio(self.detected[stat][budget], kinds)

    def best(self, budget: float, kinds: tuple[str, ...]) -> tuple[float, list[str]]:
        """The best recall over the statistics and the statistics reaching it (NaN and
        none when no fault of ``kinds`` was visible)."""
        recalls = {s: self.recall(s, budget, kinds) for s in self.thresholds}
        if not sum(self.visible.get(k, 0) for k in kinds):
            return float("nan"), []
        top = max(recalls.values())
        return top, [s for s, r in recalls.items() if r == top]

    def union(self, group: str, budget: float) -> tuple[float, tuple[str, ...]]:
        """Recall of the best OR found for ``group`` (a key of `GROUPS`) and its members."""
        names, got = self.unions[group][budget]
        return self.ratio(got, GROUPS[group]), names


UNION_TOP = 5  # the best single statistics per group whose pairs and triples are ORed
PER_SENSOR = ", per sensor / warm-up q99.9"


def _scored(alarms: np.ndarray, start: int) -> np.ndarray:
    """Alarms of the scored rows, padded with ``start`` quiet warm-up rows."""
    return np.concatenate([np.zeros(start, dtype=bool), alarms])


def _with_per_sensor(stats: dict[str, np.ndarray], norms: dict) -> dict[str, np.ndarray]:
    return {**stats, **{name + PER_SENSOR: s / norms[name] for name, s in stats.items()}}


def _count(faults: list, alarms: np.ndarray, got: dict[str, int]) -> None:
    events = merge_alarms(alarms, np.zeros(alarms.size, dtype=np.int64))
    for m in match_faults(faults, events):
        if m.detected:
            got[m.fault.kind] = got.get(m.fault.kind, 0) + 1


def evaluate(
    ds: Dataset, seeds: int, budgets: tuple[float, ...] = BUDGETS,
    config: FaultConfig | None = None,
) -> OracleResult:
    """The hindsight limit of every statistic on ``ds``'s clean stream and its recall on
    ``seeds`` faulty streams (the event benchmark's seeds 0..); each statistic also comes
    divided, per sensor, by its 99.9 % quantile over the warm-up rows."""
    t0, start = time.perf_counter(), ds.warmup
    warm = ds.data[:start]
    model = fit_model(warm)
    days = (ds.data.shape[0] - start) * ds.epoch / DAY_S
    res = OracleResult(days, seeds, tuple(budgets))
    clean = statistics(ds.data, model)
    norms = {}
    for name, s in clean.items():
        q = np.quantile(s[1:start], 0.999, axis=0)
        pos = q[q > 0]
        norms[name] = np.where(q > 0, q, pos.min() if pos.size else 1.0)
    clean_max = {name: s[start:].max(1) for name, s in _with_per_sensor(clean, norms).items()}
    for name, ms in clean_max.items():
        res.thresholds[name] = {b: hindsight_threshold(ms, b * days) for b in budgets}
        res.detected[name] = {b: {} for b in budgets}
    sigma = noise_sigma(warm)
    runs = []
    for seed in range(seeds):
        inj = inject(ds.data, start=start, seed=seed, sigma=sigma, config=config)
        for f in inj.faults:
            if f.onset is not None:
                res.visible[f.kind] = res.visible.get(f.kind, 0) + 1
        stats = _with_per_sensor(statistics(inj.data, model), norms)
        kept = {name: s[start:].max(1) for name, s in stats.items()}
        for name, ms in kept.items():
            for b, c in res.thresholds[name].items():
                _count(inj.faults, _scored(ms > c, start), res.detected[name][b])
        runs.append((inj.faults, kept))
    for group, kinds in GROUPS.items():
        res.unions[group] = {}
        for b in budgets:
            top = sorted(res.thresholds, key=lambda s: -res.recall(s, b, kinds))[:UNION_TOP]
            for k in kinds:  # and the best for each kind of the group (CONSTANT's three)
                own = max(res.thresholds, key=lambda s, k=k: res.recall(s, b, (k,)))
                if own not in top:
                    top.append(own)
            best: Union = ((), {})
            best_r = -1.0
            for names in (*combinations(top, 2), *combinations(top, 3)):
                scale = {s: max(res.thresholds[s][b], 1e-12) for s in names}
                union = np.max([clean_max[s] / c for s, c in scale.items()], axis=0)
                limit = hindsight_threshold(union, b * days)
                got: dict[str, int] = {}
                for faults, kept in runs:
                    u = np.max([kept[s] / c for s, c in scale.items()], axis=0)
                    _count(faults, _scored(u > limit, start), got)
                r = res.ratio(got, kinds)
                if r > best_r:
                    best, best_r = (names, got), r
            res.unions[group][b] = best
    res.seconds = time.perf_counter() - t0
    return res


def _clean_glitches(ds: Dataset, res: OracleResult, k: int = 10) -> tuple[str, str]:
    """The name of the best SHORT statistic (per-sensor variants aside) at the first budget
    and a table of its ``k`` largest clean-stream events: what a spike limit must exceed."""
    budget = res.budgets[0]
    name = sorted((s for s in res.thresholds if not s.endswith(PER_SENSOR)),
                  key=lambda s: -res.recall(s, budget, ("short",)))[0]
    start = ds.warmup
    z = statistics(ds.data, fit_model(ds.data[:start]))[name]
    limit = res.thresholds[name][budget]
    ms = z[start:].max(1)
    rows, seen = [], []
    for i in np.argsort(-ms):
        t = int(i) + start
        if any(abs(t - u) < 5 for u in seen):
            continue
        seen.append(t)
        j = int(z[t].argmax())
        vals = ", ".join(f"{v:.0f}" for v in ds.data[max(t - 2, 0) : t + 3, j])
        rows.append([t, j, f"{z[t, j] / limit:.2f}", int((z[t] > limit).sum()), vals])
        if len(rows) == k:
            break
    header = ["row", "sensor", "score / limit", "sensors over the limit", "readings t-2 .. t+2"]
    return name, table(header, rows, align="rrrrl")


def render(ds: Dataset, res: OracleResult, note: str = "", stamp: str | None = None) -> str:
    """The Markdown report; ``stamp``: when the run was made (default: now, UTC)."""
    (n, d), cfg, budgets = ds.data.shape, FaultConfig(), res.budgets
    rows = []
    for g, kinds in GROUPS.items():
        for b in budgets:
            r, names = res.best(b, kinds)
            if not names:  # no visible fault of the kind
                continue
            more = f" (+{len(names) - 1} tie)" if len(names) > 1 else ""
            ru, members = res.union(g, b)
            target = f">= {TARGETS[g]:g}" if g in TARGETS and b == 2.0 else "-"
            rows.append([f"{g} ({DELAY_WINDOW[kinds[0]]})", f"{b:g}", target, f"**{r:.2f}**",
                         names[0] + more, f"{ru:.2f}", " OR ".join(members)])
    head = ["fault kind (window, readings)", "clean events / device-day", "target",
            "best single statistic: recall", "which", "best OR of 2-3: recall", "which"]
    verdicts = []
    for g, target in TARGETS.items():
        got = {b: max(res.best(b, GROUPS[g])[0], res.union(g, b)[0]) for b in budgets}
        if any(np.isnan(v) for v in got.values()):
            continue
        within = [b for b in budgets if got[b] >= target]
        reached = "not reached at any budget"
        reached = f"reached from {within[0]:g} events/day" if within else reached
        each = ", ".join(f"{v:.2f} at {b:g}" for b, v in got.items())
        verdicts.append(f"- {g}: at most {got[budgets[0]]:.2f} at {budgets[0]:g} events/day "
                        f"against {target:g} ({reached}, {each}).")
    best_of = [(k, [res.best(b, (k,)) for b in budgets]) for k in CONSTANT_KINDS]
    sub_rows = [[k, str(res.visible.get(k, 0)),
                 *(f"{r:.2f} {names[0]}" if names else "n/a" for r, names in best)]
                for k, best in best_of]
    per_stat = [[s, *(" / ".join(f"{res.recall(s, b, kinds):.2f}" for b in budgets)
                      for kinds in GROUPS.values()),
                 " / ".join(f"{res.thresholds[s][b]:.3g}" for b in budgets)]
                for s in res.thresholds]
    kinds_line = ", ".join(f"{k} {res.visible.get(k, 0)}" for ks in GROUPS.values() for k in ks)
    run = f"Run {stamp or time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {res.seeds} seeds"
    constant_header = ["kind", "visible", *(f"{b:g} events/day" for b in budgets)]
    glitch_stat, glitch_table = _clean_glitches(ds, res)
    parts = prose(
        "anomaly_oracle", "report", last_seed=res.seeds - 1, name=ds.name, n=n, d=d,
        last_warm=ds.warmup - 1, warmup=ds.warmup, last_row=n - 1, days=res.clean_days,
        allowed=int(2 * res.clean_days), seeds=res.seeds, kinds=kinds_line,
        spike_lo=cfg.short_size[0], spike_hi=cfg.short_size[1],
        best_table=table(head, rows, align="lrlrlrl"), verdicts="\n".join(verdicts),
        constant_table=table(constant_header, sub_rows, align="lr" + "l" * len(budgets)),
        budgets=" / ".join(f"{b:g}" for b in budgets),
        stat_table=table(["statistic", *GROUPS, "threshold"], per_stat,
                         align="l" + "r" * (len(GROUPS) + 1)),
        budget=budgets[0], glitch_stat=glitch_stat, limit=res.thresholds[glitch_stat][budgets[0]],
        glitch_table=glitch_table, run=f"{run}, {res.seconds:.0f} s. {note}".rstrip(),
    )
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks anomaly-oracle")
    parser.add_argument("--seeds", type=positive_int, default=20, help="fault seeds (default 20)")
    parser.add_argument("--out", type=Path, default=REPORT_DIR)
    args = parser.parse_args(argv)
    ds = motes()
    parameters = {"seeds": args.seeds, "dataset": ds.name}
    write_result(args.out / RESULT_FILE, "anomaly-oracle", parameters,
                 {"result": evaluate(ds, args.seeds)}, {})
    print(render_stored(args.out))
    print(f"wrote {args.out / 'anomaly_oracle.md'}")


def render_stored(out: Path) -> str:
    """Rewrite ``out/anomaly_oracle.md`` from ``out/anomaly_oracle.json`` and the Motes light
    matrix (the clean stream of the glitch table), measuring nothing; ValueError if the
    results are of another dataset."""
    doc = read_result(out / RESULT_FILE, "anomaly-oracle")
    ds = motes()
    if doc["parameters"]["dataset"] != ds.name:
        raise ValueError(f"{out / RESULT_FILE} is of {doc['parameters']['dataset']}, not {ds.name}")
    text = render(ds, revive(OracleResult, doc["rows"]["result"]), stamp=doc["environment"]["time"])
    (out / "anomaly_oracle.md").write_text(text)
    return text


if __name__ == "__main__":
    main()
