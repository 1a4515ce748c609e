"""``python -m benchmarks.secagg_live``: see `benchmarks.secagg_live.run`."""

from benchmarks.secagg_live.run import main

raise SystemExit(main())
