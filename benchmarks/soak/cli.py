"""The command line: the soak (or ``--io``), then its report."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks import soak as package
from benchmarks.soak.harness import Soak
from benchmarks.soak.io_probe import io_probe
from benchmarks.soak.report import write_report

#: (flag, type, default, help) of the command's valued options.
OPTIONS = (
    ("--minutes", float, 35.0, "minutes of the soak (--io: of the window)"),
    ("--leaves", int, 3, "leaves under site-a"), ("--rate", float, 20.0, "readings/s per leaf"),
    ("--batch", int, 10, "readings per message"), ("--fault-every", float, 240.0, "seconds"),
    ("--sample-every", float, 60.0, "seconds"),
    ("--out", Path, Path(__file__).resolve().parents[1] / "report" / "longevity", "report folder"),
    ("--checkpoint-interval", float, None, "the leaves' --checkpoint-interval (default: theirs)"),
    ("--warmup", float, 30.0, "--io: seconds before measuring"),
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=package.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, kind, default, text in OPTIONS:
        p.add_argument(flag, type=kind, default=default, help=text)
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--io", action="store_true",
                   help="instead: one leaf at --rate (use 100) for --minutes, /proc/PID/io")
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
            if proc.proc.poll() is None:
                proc.proc.kill()
        soak.broker.keep_dir = False
        with contextlib.suppress(Exception):
            soak.broker.stop()
    path = write_report(result, args.out, argv if argv is not None else sys.argv[1:])
    print(f"report: {path}\n{path.read_text()}")
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0
