from benchmarks.longevity.cli import main

raise SystemExit(main())
