from benchmarks.secagg.run import main

raise SystemExit(main())
