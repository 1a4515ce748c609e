from benchmarks.soak.cli import main

raise SystemExit(main())
