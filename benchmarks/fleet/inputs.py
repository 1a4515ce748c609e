"""Inputs of the fleet benchmark: a depth-2 topology of ``k`` leaves and its synthetic data.

``python -m benchmarks.fleet.inputs K FOLDER`` writes ``fleet-<k>.toml`` and
``fleet-<k>.csv``, for ``edge-runtime run fleet-<k>.toml --data fleet-<k>.csv --json``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from benchmarks.synth import low_rank

__all__ = ["fleet_topology_text", "write_fleet_inputs"]


def fleet_topology_text(
    k: int, *, fan_out: int | None = None, rank: int = 10, block_size: int = 50
) -> str:
    """TOML of root -> ``ceil(k / fan_out)`` aggregators -> ``k`` leaves dealt to them in
    turn (``fan_out`` default ``round(sqrt(k))``), every node of ``rank`` and
    ``block_size``, rows split contiguously. Raises ValueError if ``k`` or ``fan_out`` < 1."""
    fan_out = max(1, round(math.sqrt(k))) if fan_out is None else fan_out
    if k < 1 or fan_out < 1:
        raise ValueError(f"need k >= 1 and fan_out >= 1, got k={k}, fan_out={fan_out}")
    sites = math.ceil(k / fan_out)
    lines = [f'name = "fleet-{k}"', "[defaults]", f"rank = {rank}", f"block_size = {block_size}"]
    lines += ["[data]", 'split = "contiguous"', "[[nodes]]", 'id = "root"']
    site_id = [f"site-{s:0{len(str(sites - 1))}d}" for s in range(sites)]
    for site in site_id:
        lines += ["[[nodes]]", f'id = "{site}"', 'parent = "root"']
    for leaf in range(k):
        lines += ["[[nodes]]", f'id = "leaf-{leaf:0{len(str(k - 1))}d}"']
        lines.append(f'parent = "{site_id[leaf % sites]}"')
    return "\n".join(lines) + "\n"


def write_fleet_inputs(
    k: int,
    folder: str | Path,
    readings_per_leaf: int = 200,
    fan_out: int | None = None,
    *,
    n_features: int = 48,
    seed: int = 0,
) -> tuple[Path, Path]:
    """Write ``fleet-<k>.toml`` (`fleet_topology_text`) and ``fleet-<k>.csv`` (``k *
    readings_per_leaf`` rows of `low_rank` data, ``n_features`` columns, rank 10 plus
    noise, 9 significant digits) into ``folder``; return both paths. Raises ValueError if a
    size is below 1."""
    if readings_per_leaf < 1 or n_features < 1:
        raise ValueError(f"need sizes >= 1, got {readings_per_leaf} readings, {n_features}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    topology, path = folder / f"fleet-{k}.toml", folder / f"fleet-{k}.csv"
    topology.write_text(fleet_topology_text(k, fan_out=fan_out), encoding="utf-8")
    data = low_rank(k * readings_per_leaf, n_features, min(10, n_features), seed=seed)
    np.savetxt(path, data, fmt="%.9g", delimiter=",")
    return topology, path


def main(argv: list[str] | None = None) -> None:
    """``python -m benchmarks.fleet.inputs K FOLDER [--readings N] [--features D]``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet.inputs")
    parser.add_argument("k", type=int, help="number of leaves")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--readings", type=int, default=200, help="readings per leaf")
    parser.add_argument("--features", type=int, default=48, help="reading width d")
    parser.add_argument("--fan-out", type=int, help="leaves per aggregator (default sqrt(k))")
    a = parser.parse_args(argv)
    paths = write_fleet_inputs(a.k, a.folder, a.readings, a.fan_out, n_features=a.features)
    print(*paths, sep="\n")


if __name__ == "__main__":
    main()
