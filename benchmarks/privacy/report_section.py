"""Section (f) of ``REPORT.md`` from `benchmarks.privacy.section.PrivacyResults`: the Markdown
lines (prose in ``templates/privacy.md``, every number from the results); ``PLOT`` is drawn by
`benchmarks.privacy.plot`."""

from __future__ import annotations

import itertools
import math

from benchmarks.measure import Summary
from benchmarks.privacy import horizon as hz
from benchmarks.privacy import motes_tree as mt
from benchmarks.privacy import section as sec
from benchmarks.privacy.synth_table import random_level
from benchmarks.reporting import prose, table
from edge_runtime.fpca.private_gram import release_noise_std

__all__ = ["PLOT", "section"]

#: File name of the section's plot.
PLOT = "privacy_utility.png"


def _med(s: Summary | None) -> str:
    """3 decimals below 100, 4 significant digits above; n/a without values."""
    if s is None or s.n == 0:
        return "n/a"
    return f"{s.median:.3f}" if abs(s.median) < 100 else f"{s.median:.4g}"


def _iqr(s: Summary) -> str:
    return f"{s.p25:.3f}-{s.p75:.3f}"


def _bytes(n: int) -> str:
    return f"{n:,} ({n / 1024:.1f} KiB)"


def _sigma(p: sec.PrivacyResults) -> float:
    return release_noise_std(p.epsilon, p.delta, 1)


def _motes(p: sec.PrivacyResults) -> list[str]:
    n_leaf = p.motes_shape[0] // max(p.leaves, 1)
    rows = [
        [
            r.label,
            {n_leaf: f"{n_leaf} (all)", 0: "-"}.get(r.block_size, r.block_size),
            r.horizon if r.kind == mt.GAUSSIAN else "-",
            r.releases if r.block_size else "-",
            "-" if not math.isfinite(r.noise_std)
            else f"{r.noise_std:.2f}" if r.noise_std < 100 else f"{r.noise_std:.3g}",
            f"**{r.error.median:.3f}**", _iqr(r.error), f"{r.error.mean:.3f}",
        ]
        for r in p.motes
    ]
    header = ["method", "block (rows)", "H", "releases per leaf", "noise std (Gram units)",
              "median", "IQR", "mean"]  # fmt: skip
    blocks = ", ".join(f"{b} at H = {h}" for h, b in p.default_blocks.items() if h in ("1", "64"))
    (lo1, hi1), (lor, hir) = p.leaf_top_eigenvalue, p.leaf_rank_eigenvalue
    spectrum = "" if not math.isfinite(lo1) else prose(
        "privacy", "spectrum", lo1=lo1, hi1=hi1, rank=p.rank, lor=lor, hir=hir,
        norm=_sigma(p) * math.sqrt(2 * p.motes_shape[1]),
    )[0]  # fmt: skip
    med = {r.label: r.error.median for r in p.motes}
    get = {k: med.get(m.label, math.nan) for k, m in (
        ("one", sec.ONE_RELEASE), ("central", sec.CENTRAL), ("b241", sec.BLOCKS_241),
        ("c241", sec.CONTINUAL_241), ("b31", sec.BLOCKS_31), ("c31", sec.CONTINUAL_31),
        ("eq8", sec.EQ8_241), ("rnd", sec.RANDOM), ("dpd", sec.DPDISPCA))}  # fmt: skip
    eq8 = p.row(sec.EQ8_241.label)
    ratio = math.nan if eq8 is None else eq8.noise_std / _sigma(p)
    return prose(
        "privacy", "noise-std", epsilon=p.epsilon, delta=p.delta, table=table(header, rows),
        blocks=blocks, spectrum=spectrum,
    ) + prose("privacy", "findings", **get, ratio=ratio, precision=_precision(p))  # fmt: skip


def _precision(p: sec.PrivacyResults) -> str:
    """How far a median over `seeds` seeds moves with the seeds (Done-when precision)."""
    if not p.precision or not all(q.group_medians for q in p.precision):
        return ""
    parts = "; ".join(
        f"{q.label}: {q.error.median:.3f} over {q.error.n} seeds, {p.seeds}-seed medians "
        f"{min(q.group_medians):.3f}-{max(q.group_medians):.3f} "
        f"({len(q.group_medians)} disjoint groups)"
        for q in p.precision
    )
    half = max((max(q.group_medians) - min(q.group_medians)) / 2 for q in p.precision)
    return prose("privacy", "precision", seeds=p.seeds, half=half, parts=parts)[0]


def _state(p: sec.PrivacyResults) -> list[str]:
    if not p.state_choice:
        return []
    names = {
        "a": "(a) running noisy d x d sum, top eigenpairs published (what FPCAEdge keeps)",
        "b": "(b) per-block releases truncated to r + 10 eigenpairs, merged (FPCA merge)",
    }
    rows = [
        [names[r.state], r.block_size, r.horizon, f"**{r.error.median:.3f}**", _iqr(r.error),
         _bytes(r.retained_bytes), _bytes(r.peak_bytes)]
        for r in p.state_choice
    ]  # fmt: skip
    header = ["state", "block", "H", "median", "IQR", "retained (bytes)", "peak (bytes)"]
    n, d = p.motes_shape
    out = prose("privacy", "state", leaf_rows=n // max(p.leaves, 1), d=d, table=table(header, rows))
    a = {(r.block_size, r.horizon): r for r in p.state_choice if r.state == "a"}
    pairs = [
        (blk, a[(blk, 1)], rb, next((r for k, r in a.items() if k[0] == blk and k[1] > 1), None))
        for blk, rb in {r.block_size: r for r in p.state_choice if r.state == "b"}.items()
        if (blk, 1) in a
    ]
    if not pairs:
        return out
    text = "; ".join(
        f"blocks of {blk}: (a) {ra.error.median:.3f} at H 1"
        + (f", {rc.error.median:.3f} at H {rc.horizon}" if rc is not None else "")
        + f", (b) {rb.error.median:.3f}"
        for blk, ra, rb, rc in pairs
    )
    paired = "; ".join(
        f"blocks of {blk}: {rb.paired.median:+.3f} (IQR {rb.paired.p25:+.3f} to "
        f"{rb.paired.p75:+.3f}), (b) worse in {rb.b_worse} of {rb.paired.n} seeds"
        for blk, _, rb, _ in pairs
        if rb.paired is not None
    )
    return out + prose(
        "privacy", "chosen", text=text, paired=paired, low=16 * d * d, high=24 * d * d, d=d,
        subspace=8 * d * (p.rank + 10), rank_b=p.rank + 10,
    )  # fmt: skip


def _best(p: sec.PrivacyResults) -> list[float]:
    """The least noise factor of the table's H at each of its k."""
    return [min(row[j] for row in p.noise_factors) for j in range(len(p.releases))]


def _regret(p: sec.PrivacyResults, factors: list[float]) -> float:
    """Largest ratio of a row of noise factors to the least of the table's H, over the k."""
    return max(f / b for f, b in zip(factors, _best(p), strict=True))


def _horizon(p: sec.PrivacyResults) -> list[str]:
    if not p.noise_factors:
        return []
    hs, best = p.horizons, _best(p)
    rows = [
        [f"H = {h}", *[f"**{f:.2f}**" if f <= b + 1e-12 else f"{f:.2f}"
                       for f, b in zip(factors, best, strict=True)], f"{_regret(p, factors):.2f}"]
        for h, factors in zip(hs, p.noise_factors, strict=True)
    ]  # fmt: skip
    out = prose("privacy", "horizon", table=table(["", *[f"k = {k}" for k in p.releases],
                                                   "max / best"], rows))  # fmt: skip
    if p.horizon_lines:
        lines = [[f"blocks of {ln.block_size} ({ln.releases} releases per leaf)",
                  *[_med(e) for e in ln.errors]] for ln in p.horizon_lines]  # fmt: skip
        out += prose("privacy", "horizon-lines", epsilon=p.epsilon,
                     table=table(["", *[f"H = {h}" for h in hs]], lines))  # fmt: skip
    if p.blocks:
        header = ["block (rows)", "releases per leaf", *[f"first snapshot, H = {h}" for h in
                  p.block_horizons], *[f"root, H = {h}" for h in p.block_horizons]]  # fmt: skip
        rows = [[b.block_size, b.releases, *map(_med, b.first_snapshot), *map(_med, b.root)]
                for b in p.blocks]  # fmt: skip
        out += prose("privacy", "blocks", table=table(header, rows))
    for text in (_horizon_text(p), _block_text(p)):
        if text:
            out += [text, ""]
    return out


def _horizon_text(p: sec.PrivacyResults) -> str:
    hs, h0, f = p.horizons, sec.DEFAULT_HORIZON, hz.noise_factor
    if h0 not in hs or 1 not in hs:
        return ""
    text = prose("privacy", "horizon-text", h0=h0, h0_1=f(h0, 1), h0_4=f(h0, 4),
                 one_4=f(1, 4), h0_64=f(h0, 64), one_64=f(1, 64))[0]  # fmt: skip
    big = max(hs)
    if big > h0:
        text += prose(
            "privacy", "horizon-big", big=big, h0=h0,
            worse=max(f(big, k) / f(h0, k) for k in range(1, h0 + 1)) - 1,
            cross=next((k for k in range(1, 4097) if f(big, k) < f(h0, k)), None),
            big_256=f(big, 256), h0_256=f(h0, 256), big_1024=f(big, 1024), h0_1024=f(h0, 1024),
            regret_h0=_regret(p, p.noise_factors[hs.index(h0)]),
            regret_big=_regret(p, p.noise_factors[hs.index(big)]), times=big // h0,
        )[0]  # fmt: skip
    for ln in p.horizon_lines:
        errs = {h: e.median for h, e in zip(hs, ln.errors, strict=True)}
        if h0 in errs and 1 in errs:
            best = min(errs, key=errs.__getitem__)
            text += prose(
                "privacy", "horizon-motes", block=ln.block_size, releases=ln.releases, h0=h0,
                e_h0=errs[h0], e_one=errs[1], best=best, e_best=errs[best],
            )[0]  # fmt: skip
    block = p.default_blocks.get(str(h0))
    return text + prose(
        "privacy", "horizon-end", h0=h0, block=block, hours=h0 * (block or 0) / 3600,
        e_default=_med(_row_error(p, h0)), e_one=_med(_row_error(p, 1)),
    )[0]  # fmt: skip


def _row_error(p: sec.PrivacyResults, horizon: int) -> Summary | None:
    """The root error of the default-block row of the Motes table at ``horizon``."""
    block = p.default_blocks.get(str(horizon))
    return next((r.error for r in p.motes if r.block_size == block and r.horizon == horizon
                 and "default block" in r.label), None)  # fmt: skip


def _block_text(p: sec.PrivacyResults) -> str:
    if not p.blocks or 1 not in p.block_horizons:
        return ""
    i = p.block_horizons.index(1)
    first = {b.block_size: b.first_snapshot[i].median for b in p.blocks}
    root = {b.block_size: b.root[i].median for b in p.blocks}
    pairs = itertools.pairwise(p.blocks)
    same = [prose("privacy", "block-same", a=a.block_size, b=b.block_size, k=a.releases)[0]
            for a, b in pairs if a.releases == b.releases]  # fmt: skip
    default, small, large = p.default_blocks.get("1"), min(first), max(first)
    text = prose(
        "privacy", "block-text", same=same[0] if same else "", root_large=root[large],
        large=large, root_small=root[small], small=small,
        firsts=", ".join(f"{t}: {v:.3g}" for t, v in first.items()),
    )[0]  # fmt: skip
    if default in first:
        text += prose(
            "privacy", "block-default", default=default,
            default_64=p.default_blocks.get("64", "?"), times=first[default] / first[large],
            large=large, share=default / large,
        )[0]  # fmt: skip
    return text


def _synth(p: sec.PrivacyResults) -> list[str]:
    if not p.synth:
        return []
    d, n = p.synth_shape
    level = random_level(d)
    rows = [
        [f"{e:g}", *[f"{c.q[i].mean:.4f} ± {c.q[i].std:.4f}" for c in p.synth], f"{level:.3f}"]
        for i, e in enumerate(p.synth_epsilons)
    ]
    return prose(
        "privacy", "synth", trials=p.synth_trials, d=d, n=n, delta=p.synth_delta,
        rank=p.synth_rank, block=math.ceil(n / 5), sigma=release_noise_std(0.1, p.synth_delta, 1),
        classical=math.sqrt(2 * math.log(1.25 / p.synth_delta)) / 0.1,
        table=table(["epsilon", *[c.label for c in p.synth], "random direction"], rows),
    )  # fmt: skip


def section(p: sec.PrivacyResults) -> list[str]:
    """The Markdown lines of section (f)."""
    n, d = p.motes_shape
    out = prose(
        "privacy", "intro", epsilon=p.epsilon, delta=p.delta, sigma=_sigma(p), n=n, d=d,
        leaves=p.leaves, leaf_rows=n // max(p.leaves, 1), clip_norm=p.clip_norm,
        clipped_rows=p.clipped_rows, rank=p.rank, seeds=p.seeds,
    )  # fmt: skip
    if p.motes:
        out += _motes(p)
    if p.curves:
        rows = [[f"{e:g}", *[_med(c.errors[i]) for c in p.curves]]
                for i, e in enumerate(p.curve_epsilons)]  # fmt: skip
        header = ["epsilon", *[c.label for c in p.curves]]
        out += prose("privacy", "curves", seeds=p.seeds, table=table(header, rows), plot=PLOT)
    out += _state(p) + _horizon(p) + _synth(p)
    return [*out, f"Wall time of this section: {p.seconds:.0f} s.", ""]
