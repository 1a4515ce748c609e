"""``python -m benchmarks [NAME [ARGS ...]]``: the one entry point; without a name it lists the
benchmarks, ``NAME --help`` gives a benchmark's options."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from benchmarks.registry import BENCHMARKS


def _listing() -> str:
    width = max(len(name) for name in BENCHMARKS)
    lines = ["usage: python -m benchmarks NAME [ARGS ...]   (NAME --help for its options)", ""]
    lines += [f"  {name:<{width}}  {b.summary}" for name, b in BENCHMARKS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark ``argv[0]`` with the rest; its exit status, 2 for an unknown name."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "list"):
        print(_listing())
        return 0
    bench = BENCHMARKS.get(args[0])
    if bench is None:
        print(f"unknown benchmark {args[0]!r}\n\n{_listing()}", file=sys.stderr)
        return 2
    module_name, _, function = bench.entry.partition(":")
    sys.argv = [f"python -m benchmarks {args[0]}", *args[1:]]
    status = getattr(importlib.import_module(module_name), function)(args[1:])
    return int(status or 0)


if __name__ == "__main__":
    raise SystemExit(main())
