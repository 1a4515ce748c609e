"""``python -m edge_runtime.cli``: the same as the ``edge-runtime`` command."""

import sys

from edge_runtime.cli import main

sys.exit(main())
