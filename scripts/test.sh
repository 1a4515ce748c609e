#!/usr/bin/env bash
# Set up (see scripts/setup.sh), then lint and run the whole test suite against a
# real Mosquitto that the test fixtures start on free loopback ports.
# Extra arguments go to pytest, e.g. `./scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
