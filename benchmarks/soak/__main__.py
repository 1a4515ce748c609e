"""``python -m benchmarks.soak``: the command (see `benchmarks.soak.cli`)."""

from __future__ import annotations

from benchmarks.soak.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
