#!/usr/bin/env bash
# The suite's Python-version-sensitive part on Python 3.13 (Raspberry Pi OS Trixie's Python),
# in its own virtual environment (.venv-py313). Skipped, with a message, when no Python 3.13
# is found (on PATH or in pyenv's versions). The full suite runs on 3.11 (scripts/test.sh);
# this run covers the numerics, the wire format, topologies, sources, the CLI's argument
# handling and leaves with local sources on a real broker. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
py=""
for candidate in python3.13 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3.13; do
  if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 13)' >/dev/null 2>&1; then
    py=$candidate
    break
  fi
done
if [ -z "$py" ]; then
  echo "test-py313: no Python 3.13 found (PATH, pyenv), skipped" >&2
  exit 0
fi
if [ ! -x .venv-py313/bin/python ]; then
  "$py" -m venv .venv-py313
fi
.venv-py313/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]"
# Two pytest-xdist workers (EDGE_TEST_WORKERS): the subset is mostly numerics, one per core.
.venv-py313/bin/python -m pytest -q -m "not slow" -p no:cacheprovider \
  -n "${EDGE_TEST_WORKERS:-2}" --maxschedchunk 1 \
  tests/test_fpca_streaming.py tests/test_fpca_merge.py tests/test_fpca_gaussian.py \
  tests/test_fpca_privacy.py tests/test_analytic_gaussian.py tests/test_privacy_audit.py \
  tests/test_wire.py tests/test_topology.py tests/test_sources_core.py tests/test_sources.py \
  tests/test_cli_errors.py tests/test_leaf_sources.py "$@"
