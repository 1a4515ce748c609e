from benchmarks.pi_budget.run import main

raise SystemExit(main())
