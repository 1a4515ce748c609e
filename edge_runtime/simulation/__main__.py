"""``python -m edge_runtime.simulation``: run one simulation and print its result as JSON."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from edge_runtime.agents.leaf.core.durability import CHECKPOINT_INTERVAL_S
from edge_runtime.simulation.config import Faults, Feed, Link, SimulationConfig
from edge_runtime.simulation.engine import Simulation
from edge_runtime.simulation.fleet import balanced_topology, low_rank_data

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m edge_runtime.simulation``: one run, a JSON summary on stdout.

    Returns the exit status: 0 if the run settled with exact coverage and every reading
    confirmed durable (what ``edge-runtime replay`` exits 0 for), 1 if not, 2 for a bad
    argument.
    """
    parser = argparse.ArgumentParser(
        prog="python -m edge_runtime.simulation",
        description=(
            "Simulate a federation of agent cores with drops, duplicates, reordering, crashes "
            "and stragglers; print the result as JSON."
        ),
    )
    parser.add_argument("--leaves", type=int, default=10_000)
    parser.add_argument("--fanout", type=int, default=100)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--block-size", type=int, default=50)
    parser.add_argument(
        "--readings-per-leaf",
        type=int,
        default=230,
        help="readings each leaf gets (default 230: not a whole number of blocks, so each "
        "leaf ends with a tail that only an idle checkpoint makes durable)",
    )
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between batches")
    parser.add_argument("--stragglers", type=float, default=0.1)
    parser.add_argument("--drop", type=float, default=0.01)
    parser.add_argument("--duplicate", type=float, default=0.02)
    parser.add_argument("--leaf-crashes", type=float, default=0.01)
    parser.add_argument("--aggregator-crashes", type=int, default=3)
    parser.add_argument("--root-crash", action="store_true")
    parser.add_argument(
        "--restore",
        choices=("checkpoint", "snapshot"),
        default="checkpoint",
        help="checkpoint (default): every leaf has a state directory, as deployed; snapshot: "
        "none (durable once published, restarts from the retained snapshot)",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        help="also checkpoint after this many blocks (default: by time only, as the agent)",
    )
    parser.add_argument(
        "--checkpoint-interval",
        type=float,
        default=CHECKPOINT_INTERVAL_S,
        help=f"most seconds between checkpoints (default {CHECKPOINT_INTERVAL_S:g}, as the agent)",
    )
    parser.add_argument(
        "--unordered-readings",
        action="store_true",
        help="let the delays reorder the readings to a leaf (MQTT keeps them in order)",
    )
    parser.add_argument("--wire-sample", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        topology = balanced_topology(
            args.leaves, args.fanout, rank=args.rank, block_size=args.block_size
        )
        data = low_rank_data(
            args.leaves * args.readings_per_leaf, args.features, args.rank, seed=args.seed
        )
        link = Link(drop=args.drop, duplicate=args.duplicate)
        readings = Link(
            drop=args.drop, duplicate=args.duplicate, ordered=not args.unordered_readings
        )
        config = SimulationConfig(
            seed=args.seed,
            feed=Feed(
                batch_size=args.batch_size, interval_s=args.interval, stragglers=args.stragglers
            ),
            snapshots=link,
            readings=readings,
            faults=Faults(
                leaf_crashes=args.leaf_crashes,
                aggregator_crashes=args.aggregator_crashes,
                root_crash=args.root_crash,
            ),
            restore=args.restore,
            checkpoint_every=args.checkpoint_every,
            checkpoint_interval_s=args.checkpoint_interval,
            wire_sample=args.wire_sample,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    result = Simulation(topology, data, config).run()
    summary = {"wall_s": round(time.perf_counter() - start, 2), **result.summary()}
    print(json.dumps(summary, indent=2))
    ok = result.finished and result.coverage_exact and not result.counters.get("unconfirmed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
