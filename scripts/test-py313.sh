#!/usr/bin/env bash
# The suite's Python-version-sensitive part on Python 3.13 (Raspberry Pi OS Trixie's Python),
# in a virtual environment of its own. Skipped, with a message, when no Python 3.13 is found
# (on PATH or in pyenv's versions). The full suite runs on 3.11 (scripts/test.sh); this run
# covers the numerics, the wire format, topologies, sources, the CLI's argument handling and
# leaves with local sources on a real broker. Extra arguments go to pytest.
#
# The venv is cached outside the clone, in $TEST_PY313_CACHE, default
# ${XDG_CACHE_HOME:-~/.cache}/edge_runtime/py313-<key> (the key: pyproject.toml's
# requirements and the Python version), so a fresh clone (CI) reuses it. It holds the
# dependencies only, never the project: the code comes from this clone at run time
# (PYTHONPATH, and an `edge-runtime` script calling edge_runtime.cli), so clones at any path
# share it. One run at a time uses the cache (flock); older keys are removed.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
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
cache=${TEST_PY313_CACHE:-${XDG_CACHE_HOME:-${HOME:-${TMPDIR:-/tmp}}/.cache}/edge_runtime}
mkdir -p "$cache"
exec 9>"$cache/.lock-py313"
if command -v flock >/dev/null; then
  flock 9 # another clone's run builds or uses the same venv
fi
requirements=$("$py" - <<'PY'
import tomllib
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["test"]))
PY
)
key=$(printf '%s\n' "$("$py" -V 2>&1)" "$requirements" | sha256sum | cut -c1-12)
venv=$cache/py313-$key
if [ ! -f "$venv/.complete" ]; then
  echo "test-py313: building $venv" >&2
  rm -rf "$venv"
  "$py" -m venv "$venv"
  printf '%s\n' "$requirements" >"$venv/requirements.txt"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$venv/requirements.txt"
  # [project.scripts]'s console script; edge_runtime itself comes from PYTHONPATH
  printf '#!%s\nimport sys\nfrom edge_runtime.cli import main\nif __name__ == "__main__":\n    sys.exit(main())\n' \
    "$venv/bin/python" >"$venv/bin/edge-runtime"
  chmod +x "$venv/bin/edge-runtime"
  touch "$venv/.complete"
  for old in "$cache"/py313-*; do # the cache holds one
    [ "$old" = "$venv" ] || rm -rf "$old"
  done
fi
# Two pytest-xdist workers (EDGE_TEST_WORKERS): the subset is mostly numerics, one per core.
PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$venv/bin/python" -m pytest -q -m "not slow" \
  -p no:cacheprovider -n "${EDGE_TEST_WORKERS:-2}" --maxschedchunk 1 \
  tests/test_fpca_streaming.py tests/test_fpca_merge.py tests/test_fpca_gaussian.py \
  tests/test_fpca_privacy.py tests/test_analytic_gaussian.py tests/test_privacy_audit.py \
  tests/test_wire.py tests/test_topology.py tests/test_sources_core.py tests/test_sources.py \
  tests/test_cli_errors.py tests/test_leaf_sources.py "$@"
