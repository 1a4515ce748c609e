#!/usr/bin/env bash
# Set up (see scripts/setup.sh), then lint and run the whole test suite against a
# real Mosquitto that the test fixtures start on free loopback ports.
# Extra arguments go to pytest, e.g. `./scripts/test.sh -m "not slow"`; without them the run
# ends with scripts/test-py313.sh (Python 3.13), scripts/test-oldest.sh (the oldest numpy/scipy
# pyproject.toml allows, and Debian bookworm's own) and scripts/test-arm.sh (aarch64 and armhf
# under qemu user-mode emulation); each skips with one line where it cannot be set up.
# Each part's time is printed at the end ("test.sh: ... s").
set -euo pipefail
cd "$(dirname "$0")/.."
times=()
timed() {  # NAME COMMAND...: run it, note its time
  local name=$1 t0=$SECONDS
  shift
  "$@"
  times+=("$name $((SECONDS - t0)) s")
}
report() { [ ${#times[@]} -eq 0 ] || echo "test.sh: $(IFS=','; echo "${times[*]}" | sed 's/,/, /g')"; }
trap report EXIT
timed setup scripts/setup.sh
timed ruff .venv/bin/ruff check .
# pytest-xdist: $EDGE_TEST_WORKERS processes (default: twice the cores, 4 on a 2-core
# machine), each with its own brokers and temporary directories, handed one test at a time
# when free (--maxschedchunk 1) in the order tests/schedule.py gives (the longest first).
# Many tests mostly wait on a broker, a subprocess or a timer, so more workers than cores
# pays (measured on 2 cores: 6 min 48 s with 4 workers; 12 min 41 s with 2, under other
# load). `-n 0` in the arguments runs the suite in this one process.
workers=${EDGE_TEST_WORKERS:-$(($(nproc) * 2))}
timed pytest .venv/bin/python -m pytest -n "$workers" --maxschedchunk 1 "$@"
# A full run (no arguments) also runs the version-sensitive part on Python 3.13, when present.
if [ "$#" -eq 0 ]; then
  timed py313 scripts/test-py313.sh
  timed oldest scripts/test-oldest.sh
  timed arm scripts/test-arm.sh
fi
