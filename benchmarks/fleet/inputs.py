"""Inputs of the fleet benchmark: a depth-2 topology of ``k`` leaves and its synthetic data.

`write_fleet_inputs` writes ``fleet-<k>.toml`` (root -> about sqrt(k) aggregators -> k
leaves, leaves dealt to the aggregators in turn, rank 10, block 50 as in issue 9) and
``fleet-<k>.csv`` (``readings_per_leaf * k`` rows of `benchmarks.synth.low_rank` data,
``n_features`` columns, rank 10 plus noise); the rows are split contiguously, so each
leaf gets exactly ``readings_per_leaf`` of them. Then::

    edge-runtime run fleet-128.toml --data fleet-128.csv --json

From the shell: ``python -m benchmarks.fleet.inputs K FOLDER``.
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
    """TOML of root -> ``ceil(k / fan_out)`` aggregators -> ``k`` leaves.

    Parameters
    ----------
    k : int
        Number of leaves, >= 1.
    fan_out : int, optional
        Leaves per aggregator (the last may have fewer); default ``round(sqrt(k))``.
    rank, block_size : int
        The ``[defaults]`` of every node.

    Raises
    ------
    ValueError
        If ``k`` or ``fan_out`` is below 1.
    """
    fan_out = max(1, round(math.sqrt(k))) if fan_out is None else fan_out
    if k < 1 or fan_out < 1:
        raise ValueError(f"need k >= 1 and fan_out >= 1, got k={k}, fan_out={fan_out}")
    sites = math.ceil(k / fan_out)
    lines = [
        f'name = "fleet-{k}"',
        "[defaults]",
        f"rank = {rank}",
        f"block_size = {block_size}",
        "[data]",
        'split = "contiguous"',
        "[[nodes]]",
        'id = "root"',
    ]
    width = len(str(k - 1))
    for s in range(sites):
        lines += ["[[nodes]]", f'id = "site-{s:0{len(str(sites - 1))}d}"', 'parent = "root"']
    for leaf in range(k):
        site = f"site-{leaf % sites:0{len(str(sites - 1))}d}"
        lines += ["[[nodes]]", f'id = "leaf-{leaf:0{width}d}"', f'parent = "{site}"']
    return "\n".join(lines) + "\n"


def write_fleet_inputs(
    k: int,
    folder: str | Path,
    *,
    readings_per_leaf: int = 200,
    n_features: int = 48,
    fan_out: int | None = None,
    seed: int = 0,
) -> tuple[Path, Path]:
    """Write ``fleet-<k>.toml`` and ``fleet-<k>.csv`` into ``folder``; return both paths.

    The data has shape ``(k * readings_per_leaf, n_features)`` (comma-separated text, 9
    significant digits).

    Raises
    ------
    ValueError
        If a size is below 1.
    """
    if readings_per_leaf < 1 or n_features < 1:
        raise ValueError(
            f"need readings_per_leaf >= 1 and n_features >= 1, got {readings_per_leaf}, "
            f"{n_features}"
        )
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    topology = folder / f"fleet-{k}.toml"
    topology.write_text(fleet_topology_text(k, fan_out=fan_out), encoding="utf-8")
    data = low_rank(k * readings_per_leaf, n_features, min(10, n_features), seed=seed)
    path = folder / f"fleet-{k}.csv"
    np.savetxt(path, data, fmt="%.9g", delimiter=",")
    return topology, path


def main(argv: list[str] | None = None) -> None:
    """``python -m benchmarks.fleet.inputs K FOLDER [--readings N] [--features D]``."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fleet.inputs", description=__doc__.splitlines()[0]
    )
    parser.add_argument("k", type=int, help="number of leaves")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--readings", type=int, default=200, help="readings per leaf")
    parser.add_argument("--features", type=int, default=48, help="reading width d")
    parser.add_argument("--fan-out", type=int, help="leaves per aggregator (default sqrt(k))")
    args = parser.parse_args(argv)
    for path in write_fleet_inputs(
        args.k,
        args.folder,
        readings_per_leaf=args.readings,
        n_features=args.features,
        fan_out=args.fan_out,
    ):
        print(path)


if __name__ == "__main__":
    main()
