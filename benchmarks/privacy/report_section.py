"""Section (f) of ``REPORT.md``, from `benchmarks.privacy.section.PrivacyResults`.

`section` returns the Markdown lines (tables and the findings, every number from the
results); its plot ``PLOT`` is drawn by `benchmarks.privacy.plot`.
"""

from __future__ import annotations

import math

from benchmarks.privacy import horizon as hz
from benchmarks.privacy import motes_tree as mt
from benchmarks.privacy import section as sec
from benchmarks.privacy.stats import Summary
from benchmarks.privacy.synth_table import random_level
from benchmarks.reporting import prose, table
from edge_runtime.fpca.private_gram import release_noise_std

__all__ = ["PLOT", "section"]

#: File name of the section's plot.
PLOT = "privacy_utility.png"


def _num(value: float) -> str:
    """3 decimals below 100, 4 significant digits above (error ratios of noisy snapshots)."""
    return f"{value:.3f}" if abs(value) < 100 else f"{value:.4g}"


def _med(s: Summary | None) -> str:
    return "n/a" if s is None or s.n == 0 else _num(s.median)


def _iqr(s: Summary) -> str:
    return f"{s.p25:.3f}-{s.p75:.3f}"


def _bytes(n: int) -> str:
    return f"{n:,} ({n / 1024:.1f} KiB)"


def _block(row: sec.TreeRow, n_leaf: int) -> str:
    if row.block_size == 0:
        return "-"
    return f"{row.block_size} (all)" if row.block_size == n_leaf else str(row.block_size)


def _intro(p: sec.PrivacyResults) -> list[str]:
    n, d = p.motes_shape
    sigma = release_noise_std(p.epsilon, p.delta, 1)
    return prose(
        "privacy", "intro", epsilon=p.epsilon, delta=p.delta, sigma=sigma, n=n, d=d,
        leaves=p.leaves, leaf_rows=n // max(p.leaves, 1), clip_norm=p.clip_norm,
        clipped_rows=p.clipped_rows, rank=p.rank, seeds=p.seeds,
    )  # fmt: skip


def _noise_cell(value: float) -> str:
    return f"{value:.2f}" if value < 100 else f"{value:.3g}"


def _motes_table(p: sec.PrivacyResults) -> list[str]:
    n_leaf = p.motes_shape[0] // max(p.leaves, 1)
    blocks = ", ".join(f"{b} at H = {h}" for h, b in p.default_blocks.items() if h in ("1", "64"))
    rows = []
    for r in p.motes:
        noise = "-" if not math.isfinite(r.noise_std) else _noise_cell(r.noise_std)
        h = str(r.horizon) if r.kind == mt.GAUSSIAN else "-"
        rows.append(
            [
                r.label,
                _block(r, n_leaf),
                h,
                r.releases if r.block_size else "-",
                noise,
                f"**{r.error.median:.3f}**",
                _iqr(r.error),
                f"{r.error.mean:.3f}",
            ]
        )
    return [
        f"### Motes light tree: root error ratio at eps = {p.epsilon:g}, delta = {p.delta:g}",
        "",
        table(
            [
                "method",
                "block (rows)",
                "H",
                "releases per leaf",
                "noise std (Gram units)",
                "median",
                "IQR",
                "mean",
            ],
            rows,
        ),
        "",
        *prose("privacy", "noise-std", blocks=blocks, spectrum=_spectrum_text(p)),
    ]


def _spectrum_text(p: sec.PrivacyResults) -> str:
    """How the leaves' spectrum compares with one release's noise."""
    lo1, hi1 = p.leaf_top_eigenvalue
    lor, hir = p.leaf_rank_eigenvalue
    if not math.isfinite(lo1):
        return ""
    d = p.motes_shape[1]
    sigma = release_noise_std(p.epsilon, p.delta, 1)
    norm = sigma * math.sqrt(2 * d)
    return prose(
        "privacy", "spectrum", lo1=lo1, hi1=hi1, rank=p.rank, lor=lor, hir=hir, norm=norm
    )[0]


def _motes_findings(p: sec.PrivacyResults) -> list[str]:
    def med(label: str) -> float:
        r = p.row(label)
        return math.nan if r is None else r.error.median

    one, central = med(sec.ONE_RELEASE.label), med(sec.CENTRAL.label)
    b241, c241 = med(sec.BLOCKS_241.label), med(sec.CONTINUAL_241.label)
    b31, c31 = med(sec.BLOCKS_31.label), med(sec.CONTINUAL_31.label)
    eq8, rnd = med(sec.EQ8_241.label), med(sec.RANDOM.label)
    dpd = med(sec.DPDISPCA.label)
    eq8_row = p.row(sec.EQ8_241.label)
    ratio = (
        math.nan
        if eq8_row is None
        else eq8_row.noise_std / release_noise_std(p.epsilon, p.delta, 1)
    )
    return prose(
        "privacy", "findings", one=one, central=central, dpd=dpd, b241=b241, b31=b31,
        c241=c241, c31=c31, eq8=eq8, rnd=rnd, ratio=ratio, precision=_precision_text(p),
    )  # fmt: skip


def _precision_text(p: sec.PrivacyResults) -> str:
    """How far a median over `seeds` seeds moves with the seeds (Done-when precision)."""
    if not p.precision:
        return ""
    if not all(q.group_medians for q in p.precision):
        return ""
    parts = [
        f"{q.label}: {q.error.median:.3f} over {q.error.n} seeds, {p.seeds}-seed medians "
        f"{min(q.group_medians):.3f}-{max(q.group_medians):.3f} "
        f"({len(q.group_medians)} disjoint groups)"
        for q in p.precision
    ]
    half = max((max(q.group_medians) - min(q.group_medians)) / 2 for q in p.precision)
    return (
        f" A median over {p.seeds} seeds is itself noisy, by about +-{half:.2f} here: "
        + "; ".join(parts)
        + ". Targets within that distance of a number are met or missed by the draw."
    )


def _curve_table(p: sec.PrivacyResults) -> list[str]:
    rows = [
        [f"{e:g}", *[_med(c.errors[i]) for c in p.curves]] for i, e in enumerate(p.curve_epsilons)
    ]
    return [
        f"### Root error ratio against epsilon (median over {p.seeds} seeds)",
        "",
        table(["epsilon", *[c.label for c in p.curves]], rows),
        "",
        f"![Private mode: error ratio against epsilon]({PLOT})",
        "",
    ]


def _state_section(p: sec.PrivacyResults) -> list[str]:
    if not p.state_choice:
        return []
    names = {
        "a": "(a) running noisy d x d sum, top eigenpairs published (what FPCAEdge keeps)",
        "b": "(b) per-block releases truncated to r + 10 eigenpairs, merged (FPCA merge)",
    }
    rows = [
        [
            names[r.state],
            r.block_size,
            r.horizon,
            f"**{r.error.median:.3f}**",
            _iqr(r.error),
            _bytes(r.retained_bytes),
            _bytes(r.peak_bytes),
        ]
        for r in p.state_choice
    ]
    header = ["state", "block", "H", "median", "IQR", "retained (bytes)", "peak (bytes)"]
    out = prose(
        "privacy", "state", leaf_rows=p.motes_shape[0] // max(p.leaves, 1), d=p.motes_shape[1],
        table=table(header, rows),
    )  # fmt: skip
    a = {(r.block_size, r.horizon): r for r in p.state_choice if r.state == "a"}
    b = {r.block_size: r for r in p.state_choice if r.state == "b"}
    pairs = [
        (
            blk,
            a[(blk, 1)],
            b[blk],
            next((r for k, r in a.items() if k[0] == blk and k[1] > 1), None),
        )
        for blk in b
        if (blk, 1) in a
    ]
    if pairs:
        text = "; ".join(
            f"blocks of {blk}: (a) {ra.error.median:.3f} at H 1"
            + (f", {rc.error.median:.3f} at H {rc.horizon}" if rc is not None else "")
            + f", (b) {rb.error.median:.3f}"
            for blk, ra, rb, rc in pairs
        )
        d = p.motes_shape[1]
        paired = "; ".join(
            f"blocks of {blk}: {rb.paired.median:+.3f} (IQR {rb.paired.p25:+.3f} to "
            f"{rb.paired.p75:+.3f}), (b) worse in {rb.b_worse} of {rb.paired.n} seeds"
            for blk, _, rb, _ in pairs
            if rb.paired is not None
        )
        out += prose(
            "privacy", "chosen", text=text, paired=paired, low=16 * d * d, high=24 * d * d,
            d=d, subspace=8 * d * (p.rank + 10), rank_b=p.rank + 10,
        )  # fmt: skip
    return out


def _horizon_section(p: sec.PrivacyResults) -> list[str]:
    if not p.noise_factors:
        return []
    hs, ks = p.horizons, p.releases
    best = [min(row[j] for row in p.noise_factors) for j in range(len(ks))]
    rows = []
    for h, factors in zip(hs, p.noise_factors, strict=True):
        regret = max(f / b for f, b in zip(factors, best, strict=True))
        cells = [
            f"**{f:.2f}**" if f <= b + 1e-12 else f"{f:.2f}"
            for f, b in zip(factors, best, strict=True)
        ]
        rows.append([f"H = {h}", *cells, f"{regret:.2f}"])
    header = ["", *[f"k = {k}" for k in ks], "max / best"]
    out = prose("privacy", "horizon", table=table(header, rows))
    if p.horizon_lines:
        lines = [
            [
                f"blocks of {ln.block_size} ({ln.releases} releases per leaf)",
                *[_med(e) for e in ln.errors],
            ]
            for ln in p.horizon_lines
        ]
        out += [
            f"Motes light, median root error ratio against H (eps = {p.epsilon:g}):",
            "",
            table(["", *[f"H = {h}" for h in hs]], lines),
            "",
        ]
    if p.blocks:
        header = ["block (rows)", "releases per leaf"]
        header += [f"first snapshot, H = {h}" for h in p.block_horizons]
        header += [f"root, H = {h}" for h in p.block_horizons]
        rows = [
            [
                b.block_size,
                b.releases,
                *[_med(s) for s in b.first_snapshot],
                *[_med(s) for s in b.root],
            ]
            for b in p.blocks
        ]
        out += prose("privacy", "blocks", table=table(header, rows))
    out += _defaults_text(p)
    return out


def _regret(p: sec.PrivacyResults, h: int) -> float:
    """Largest ratio of H's noise to the least of the table's H over the table's k."""
    row = p.noise_factors[p.horizons.index(h)]
    best = [min(r[j] for r in p.noise_factors) for j in range(len(p.releases))]
    return max(f / b for f, b in zip(row, best, strict=True))


def _crossover(low: int, high: int, limit: int = 4096) -> int | None:
    """The smallest k at which horizon ``high`` is less noisy than ``low`` (None: none)."""
    return next(
        (k for k in range(1, limit + 1) if hz.noise_factor(high, k) < hz.noise_factor(low, k)),
        None,
    )


def _horizon_text(p: sec.PrivacyResults) -> str:
    hs, h0 = p.horizons, sec.DEFAULT_HORIZON
    if h0 not in hs or 1 not in hs:
        return ""
    text = (
        f"**Horizon.** The best H is about the number of releases a leaf makes (bold in "
        f"the table). H = "
        f"{h0} costs {hz.noise_factor(h0, 1):.2f} times the noise of H = 1 at the first "
        f"release, breaks even by k = 4 ({hz.noise_factor(h0, 4):.2f} against "
        f"{hz.noise_factor(1, 4):.2f}) and is the best of the table at k = 64 "
        f"({hz.noise_factor(h0, 64):.2f}; H = 1: {hz.noise_factor(1, 64):.2f})."
    )
    big = max(hs)
    if big > h0:
        cross = _crossover(h0, big)
        worse = max(hz.noise_factor(big, k) / hz.noise_factor(h0, k) for k in range(1, h0 + 1))
        text += (
            f" H = {big} is at most {worse - 1:.0%} noisier up to k = {h0} and less noisy "
            f"from k = {cross} on (k = 256: {hz.noise_factor(big, 256):.2f} against "
            f"{hz.noise_factor(h0, 256):.2f}; k = 1024: {hz.noise_factor(big, 1024):.2f} "
            f"against {hz.noise_factor(h0, 1024):.2f}); over the table both are within "
            f"{_regret(p, h0):.2f} and {_regret(p, big):.2f} times the best H, and a release "
            f"at step t of a segment regenerates t noise matrices (O(t d^2) work, up to "
            f"{big // h0} times more at H = {big})."
        )
    for ln in p.horizon_lines:
        errs = dict(zip(hs, ln.errors, strict=True))
        if h0 in errs and 1 in errs:
            best_h = min(errs, key=lambda h, e=errs: e[h].median)
            text += (
                f" On Motes with blocks of {ln.block_size} ({ln.releases} releases per "
                f"leaf): H {h0} {errs[h0].median:.3f}, H 1 {errs[1].median:.3f}, best H "
                f"{best_h} ({errs[best_h].median:.3f})."
            )
    block = p.default_blocks.get(str(h0))
    return text + (
        f" So H = {h0} suits a leaf that makes up to about {h0} releases per segment; one "
        f"that runs longer (at the default block of {block} rows and one reading a "
        f"second, {h0} releases take {h0 * (block or 0) / 3600:.0f} hours) would have less "
        f"noise with a longer horizon, and one that makes only a few releases with H = "
        "1-4 would do better (the runtime defaults on this short Motes stream, 2 releases "
        "per leaf: "
        f"{_med(_row_error(p, h0))}, against {_med(_row_error(p, 1))} for the default "
        "block at H = 1). Which default is better depends on the expected stream length; "
        "these numbers do not make another one clearly better for every stream."
    )


def _row_error(p: sec.PrivacyResults, horizon: int) -> Summary | None:
    """The root error of the default-block row of the Motes table at ``horizon``."""
    row = next(
        (
            r
            for r in p.motes
            if r.block_size == p.default_blocks.get(str(horizon))
            and r.horizon == horizon
            and "default block" in r.label
        ),
        None,
    )
    return None if row is None else row.error


def _block_text(p: sec.PrivacyResults) -> str:
    if not p.blocks or 1 not in p.block_horizons:
        return ""
    i = p.block_horizons.index(1)
    first = {b.block_size: b.first_snapshot[i].median for b in p.blocks}
    root = {b.block_size: b.root[i].median for b in p.blocks}
    same = [
        (a.block_size, b.block_size, a.releases)
        for a, b in zip(p.blocks, p.blocks[1:], strict=False)
        if a.releases == b.releases
    ]
    default = p.default_blocks.get("1")
    small, large = min(first), max(first)
    text = (
        "**Block size.** After all rows the root depends on the block size only through "
        "the number of releases per leaf (the final sum is the exact Gram matrix plus the "
        "releases' noise"
        + (
            f": blocks of {same[0][0]} and {same[0][1]} both make {same[0][2]} releases and "
            "give the same root"
            if same
            else ""
        )
        + f"), so larger blocks are always as accurate or more (H = 1: {root[large]:.3f} "
        f"with {large} rows, {root[small]:.3f} with {small}). What the block size buys is "
        "latency: a leaf publishes its first snapshot after one block, and that snapshot's "
        "error ratio falls steeply with T ("
        + ", ".join(f"{t}: {v:.3g}" for t, v in first.items())
        + " at H = 1)."
    )
    if default in first:
        text += (
            f" The default, {default} rows at H = 1 ({p.default_blocks.get('64', '?')} at "
            f"H = 64), is where the release noise's spectral norm is a tenth of the "
            "largest eigenvalue a block can have; on Motes its first snapshot is "
            f"{first[default] / first[large]:.1f} times the error of a {large}-row one at "
            f"{default / large:.0%} of the wait. It is a point on a monotone trade-off, not "
            "an optimum, and nothing here makes another default clearly better."
        )
    return text


def _defaults_text(p: sec.PrivacyResults) -> list[str]:
    out = []
    for text in (_horizon_text(p), _block_text(p)):
        if text:
            out += [text, ""]
    return out


def _synth_section(p: sec.PrivacyResults) -> list[str]:
    if not p.synth:
        return []
    d, n = p.synth_shape
    level = random_level(d)
    rows = []
    for i, e in enumerate(p.synth_epsilons):
        cells = [f"{c.q[i].mean:.4f} ± {c.q[i].std:.4f}" for c in p.synth]
        rows.append([f"{e:g}", *cells, f"{level:.3f}"])
    return prose(
        "privacy", "synth", trials=p.synth_trials, d=d, n=n, delta=p.synth_delta,
        rank=p.synth_rank, block=math.ceil(n / 5),
        sigma=release_noise_std(0.1, p.synth_delta, 1),
        classical=math.sqrt(2 * math.log(1.25 / p.synth_delta)) / 0.1,
        table=table(["epsilon", *[c.label for c in p.synth], "random direction"], rows),
    )  # fmt: skip


def section(p: sec.PrivacyResults) -> list[str]:
    """The Markdown lines of section (f)."""
    out = _intro(p)
    if p.motes:
        out += _motes_table(p) + _motes_findings(p)
    if p.curves:
        out += _curve_table(p)
    out += _state_section(p) + _horizon_section(p) + _synth_section(p)
    out.append(f"Wall time of this section: {p.seconds:.0f} s.")
    out.append("")
    return out
