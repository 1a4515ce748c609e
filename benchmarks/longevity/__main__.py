"""``python -m benchmarks.longevity``: the command (see `benchmarks.longevity.cli`)."""

from __future__ import annotations

from benchmarks.longevity.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
