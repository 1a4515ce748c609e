from benchmarks.secagg_live.run import main

raise SystemExit(main())
