"""The command line: the soak (or ``--io``), then its report."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
from pathlib import Path

from benchmarks import soak as package
from benchmarks.soak.harness import Soak
from benchmarks.soak.io_probe import io_probe
from benchmarks.soak.report import write_report

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "report" / "longevity"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description=package.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--minutes", type=float, default=35.0)
    p.add_argument("--leaves", type=int, default=3)
    p.add_argument("--rate", type=float, default=20.0, help="readings/s per leaf")
    p.add_argument("--batch", type=int, default=10, help="readings per message")
    p.add_argument("--fault-every", type=float, default=240.0, help="seconds")
    p.add_argument("--sample-every", type=float, default=60.0, help="seconds")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument(
        "--io",
        action="store_true",
        help="instead: one leaf at --rate (use 100) for --minutes, /proc/PID/io",
    )
    p.add_argument(
        "--checkpoint-interval",
        type=float,
        default=None,
        help="the leaves' --checkpoint-interval (default: the agent's own)",
    )
    p.add_argument("--warmup", type=float, default=30.0, help="--io: seconds before measuring")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="edge-soak-"))
    if args.io:
        io = asyncio.run(io_probe(args, workdir))
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "proc_io.json").write_text(json.dumps(io, indent=1))
        print(json.dumps({k: v for k, v in io.items() if k != "strace"}, indent=1))
        print(io.get("strace") or "")
        return 0
    soak = Soak(args, workdir)
    print(f"soak: {args.minutes} min, broker 127.0.0.1:{soak.port}, work dir {workdir}", flush=True)
    try:
        result = asyncio.run(soak.run())
    finally:
        for proc in soak.procs.values():
            if proc.poll() is None:
                proc.kill()
        with contextlib.suppress(Exception):
            soak.broker.keep_dir = False
            soak.broker.stop()
    path = write_report(result, args.out, argv if argv is not None else sys.argv[1:])
    print(f"report: {path}")
    print(path.read_text())
    if not args.keep:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return 0
