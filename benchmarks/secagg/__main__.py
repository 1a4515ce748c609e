"""``python -m benchmarks.secagg``: see `benchmarks.secagg.run`."""

from benchmarks.secagg.run import main

raise SystemExit(main())
