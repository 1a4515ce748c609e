"""``python -m benchmarks.pi_budget``: see the package docstring."""

import sys

from benchmarks.pi_budget.run import main

sys.exit(main())
