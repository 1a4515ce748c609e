#!/usr/bin/env bash
# The oldest dependencies edge_runtime supports, natively. Two routes, each in a virtual
# environment cached outside the clone, in $TEST_OLDEST_CACHE, default
# ${XDG_CACHE_HOME:-~/.cache}/edge_runtime/oldest (rebuilt only when pyproject.toml's
# requirements, the versions pinned or the Python change), so a fresh clone (CI) reuses it.
# A venv holds the dependencies only, never the project: the code comes from this clone at
# run time (PYTHONPATH, and an `edge-runtime` script calling edge_runtime.cli), so clones at
# any path share the cache safely. One run at a time uses it (flock on $cache/.lock).
#
#   debian  Debian bookworm's own python3-numpy, python3-scipy and python3-msgpack (what
#           a 32-bit Raspberry Pi OS user gets from apt; PyPI has no armv7 wheels of
#           them) in a venv made with --system-site-packages by Debian's python3, the
#           pure-Python rest from PyPI. Installs the three packages with apt-get when
#           they are missing and this runs as root.
#   lowest  The lowest version of every requirement pyproject.toml declares (runtime and
#           the test extra), from PyPI: a constraints file pinning each `name>=X` to
#           `name==X`, on Python 3.11 (requires-python's floor).
#
# Both run the numerics (FPCA, FedPower, the analytic Gaussian mechanism), the wire
# format and the agents against a real Mosquitto; debian also the wire fuzzing,
# topologies and sources (with the agents, about scripts/test-py313.sh's subset and more).
# A route that cannot be built here (not Debian bookworm, no apt or root to install the
# packages, no Python 3.11, no network for a first build) is skipped with one message,
# exit 0. A route that builds but whose installed versions are not the ones intended,
# or whose tests fail, fails the script.
#
# Usage: scripts/test-oldest.sh [debian] [lowest] [-- PYTEST_ARGS...]  (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."

routes=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    debian | lowest) routes+=("$1") ;;
    --) shift; break ;;
    *) echo "test-oldest: unknown route '$1' (debian, lowest)" >&2; exit 2 ;;
  esac
  shift
done
[ "${#routes[@]}" -gt 0 ] || routes=(debian lowest)

repo=$(pwd)
# where the venvs are kept (not in the clone: CI starts from a clean clone every time)
cache=${TEST_OLDEST_CACHE:-${XDG_CACHE_HOME:-${HOME:-${TMPDIR:-/tmp}}/.cache}/edge_runtime/oldest}
recipe=2 # part of every venv's cache key: bump it when the way a venv is built changes
mkdir -p "$cache"
exec 9>"$cache/.lock"
if command -v flock >/dev/null; then
  flock 9 # another clone's run builds or uses the same venvs
fi
# What a venv installs: [project] dependencies and the test extra, from this clone.
requirements=$cache/requirements.txt
hostpy=python3 # any Python >= 3.11 (tomllib): setup.sh's venv, else the one on PATH
[ -x .venv/bin/python ] && hostpy=.venv/bin/python
"$hostpy" - >"$requirements" <<'EOF'
import tomllib
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["test"]))
EOF

numerics=(
  tests/test_fpca_centering.py tests/test_fpca_gaussian.py tests/test_fpca_linalg_fallback.py
  tests/test_fpca_memory.py tests/test_fpca_merge.py tests/test_fpca_merge_tree.py
  tests/test_fpca_metrics.py tests/test_fpca_privacy.py tests/test_fpca_scoring.py
  tests/test_fpca_state.py tests/test_fpca_streaming.py tests/test_analytic_gaussian.py
  tests/test_fedpower_numerics.py
)
wire=(tests/test_wire.py tests/test_wire_golden.py tests/test_fedpower_wire.py)
# 300 examples per property: ~25 s with msgpack's C extension, ~85 s with the pure-Python
# fallback that msgpack 1.0.3 from PyPI is on Python 3.11 (its C sources predate 3.11), so
# only the debian route (Debian's 1.0.3 is compiled) runs it.
wire_fuzz=(tests/test_wire_fuzz.py)
agents=(tests/test_agents.py)
topology_sources=(
  tests/test_topology.py tests/test_sources_core.py tests/test_sources.py tests/test_leaf_sources.py
)

skip() { # route, reason
  echo "test-oldest: $1 route skipped: $2" >&2
}

# pip install into venv $1 with constraints $2 the project's requirements (not the project:
# see the top) and write its console script; on failure, "skip" (exit 3) when the package
# index is unreachable, else fail.
install() {
  local venv=$1 constraints=$2 log
  log=$(mktemp)
  if "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --retries 1 \
    --timeout 20 -c "$constraints" -r "$requirements" >"$log" 2>&1; then
    rm -f "$log"
    # [project.scripts]'s console script; edge_runtime itself comes from PYTHONPATH
    printf '#!%s\nimport sys\nfrom edge_runtime.cli import main\nif __name__ == "__main__":\n    sys.exit(main())\n' \
      "$venv/bin/python" >"$venv/bin/edge-runtime"
    chmod +x "$venv/bin/edge-runtime"
    return 0
  fi
  if ! "$venv/bin/python" -m pip index versions pip --disable-pip-version-check --retries 0 \
    --timeout 10 >/dev/null 2>&1; then
    rm -f "$log"
    return 3 # the index is unreachable: no network
  fi
  grep -v '^WARNING: Location' "$log" >&2 || true
  rm -f "$log"
  return 1
}

# Build (or reuse) venv $2 for route $1; $3 the stamp text that keys the cache.
ensure_venv() {
  local route=$1 venv=$2 stamp=$3 constraints=$4 make_venv=$5 status=0
  if [ -f "$venv/.stamp" ] && [ "$(cat "$venv/.stamp")" = "$stamp" ]; then
    return 0
  fi
  echo "test-oldest: building the $route venv ($venv)" >&2
  rm -rf "$venv"
  $make_venv "$venv" || return 1
  install "$venv" "$constraints" || status=$?
  if [ "$status" -ne 0 ]; then
    rm -rf "$venv"
    return "$status"
  fi
  printf '%s' "$stamp" >"$venv/.stamp"
}

run_tests() { # route, python, test files...
  local route=$1 py=$2
  shift 2
  "$py" - "$route" <<'EOF' || return 1
import sys, numpy, scipy, msgpack, structlog
def where(module):
    return "debian" if module.__file__.startswith("/usr/lib/python3/") else "pypi"
c_ext = "C" if msgpack.Unpacker.__module__ == "msgpack._cmsgpack" else "pure Python"
print(
    f"test-oldest: {sys.argv[1]}: Python {sys.version.split()[0]},",
    f"numpy {numpy.__version__} ({where(numpy)}), scipy {scipy.__version__} ({where(scipy)}),",
    f"msgpack {'.'.join(map(str, msgpack.version))} ({where(msgpack)}, {c_ext}),",
    f"structlog {structlog.__version__}",
    file=sys.stderr,
)
EOF
  # Two pytest-xdist workers (EDGE_TEST_WORKERS): mostly numerics, one per core. The code
  # under test is this clone's (children inherit the path).
  PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$py" -m pytest -q -m "not slow" -p no:cacheprovider -n "${EDGE_TEST_WORKERS:-2}" \
    --maxschedchunk 1 "$@"
}

route_debian() {
  local sys_py=/usr/bin/python3 venv=$cache/debian pkgs=(python3-numpy python3-scipy python3-msgpack)
  if ! grep -qs '^VERSION_CODENAME=bookworm' /etc/os-release; then
    skip debian "not Debian bookworm (/etc/os-release)"
    return 0
  fi
  if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
    skip debian "no dpkg/apt-get"
    return 0
  fi
  local missing=()
  for p in "${pkgs[@]}" python3-venv; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
      skip debian "${missing[*]} not installed and not root (apt-get install ${missing[*]})"
      return 0
    fi
    echo "test-oldest: apt-get install ${missing[*]}" >&2
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null 2>&1; then
      if ! { apt-get update -qq >/dev/null 2>&1 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
          "${missing[@]}" >/dev/null 2>&1; }; then
        skip debian "apt-get install ${missing[*]} failed (no network or repository?)"
        return 0
      fi
    fi
  fi
  # Pin the three to Debian's versions, so that pip can only keep the system's copies.
  local constraints=$cache/debian-constraints.txt
  "$sys_py" -c 'import numpy, scipy, msgpack
print(f"numpy=={numpy.__version__}\nscipy=={scipy.__version__}")
print("msgpack==" + ".".join(map(str, msgpack.version)))' >"$constraints" || return 1
  local stamp
  stamp="$(cat "$constraints" "$requirements" | sha256sum | cut -d' ' -f1) $("$sys_py" -V 2>&1) $recipe"
  make_debian_venv() { "$sys_py" -m venv --system-site-packages "$1"; }
  local status=0
  ensure_venv debian "$venv" "$stamp" "$constraints" make_debian_venv || status=$?
  if [ "$status" -eq 3 ]; then
    skip debian "PyPI is unreachable (no network) for the first build of $venv"
    return 0
  elif [ "$status" -ne 0 ]; then
    echo "test-oldest: debian: pip install failed with Debian's packages pinned" >&2
    return 1
  fi
  # Debian's copies, not PyPI's: pyproject.toml's lower bounds must admit them.
  "$venv/bin/python" -c 'import numpy, scipy, msgpack, sys
bad = [m.__name__ for m in (numpy, scipy, msgpack) if not m.__file__.startswith("/usr/lib/python3/")]
sys.exit(f"not Debian'"'"'s: {bad} (pyproject.toml excludes bookworm'"'"'s version?)" if bad else 0)' ||
    return 1
  run_tests debian "$venv/bin/python" "${numerics[@]}" "${wire[@]}" "${wire_fuzz[@]}" \
    "${topology_sources[@]}" "${agents[@]}" "${pytest_args[@]}"
}

route_lowest() {
  local venv=$cache/lowest py=""
  for candidate in python3.11 /usr/bin/python3.11 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.11*/bin/python3.11; do
    if "$candidate" -c 'import sys, venv, ensurepip; assert sys.version_info[:2] == (3, 11)' \
      >/dev/null 2>&1; then
      py=$candidate
      break
    fi
  done
  if [ -z "$py" ]; then
    skip lowest "no Python 3.11 with venv/ensurepip found"
    return 0
  fi
  # Every `name>=X` (or ==, ~=) of [project] dependencies and the test extra, as name==X.
  local constraints=$cache/lowest-constraints.txt
  "$py" - >"$constraints" <<'EOF' || return 1
import re, sys, tomllib
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
for req in project["dependencies"] + project["optional-dependencies"]["test"]:
    name, spec = re.fullmatch(r"([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*(.*)", req.strip()).groups()
    low = re.findall(r"(?:>=|==|~=)\s*([^,;\s]+)", spec)
    if not low:
        sys.exit(f"test-oldest: {req!r} in pyproject.toml has no lower bound")
    print(f"{name}=={low[0]}")
EOF
  local stamp
  stamp="$(cat "$constraints" "$requirements" | sha256sum | cut -d' ' -f1) $("$py" -V 2>&1) $recipe"
  make_lowest_venv() { "$py" -m venv "$1"; }
  local status=0
  ensure_venv lowest "$venv" "$stamp" "$constraints" make_lowest_venv || status=$?
  if [ "$status" -eq 3 ]; then
    skip lowest "PyPI is unreachable (no network) for the first build of $venv"
    return 0
  elif [ "$status" -ne 0 ]; then
    echo "test-oldest: lowest: pip install of pyproject.toml's lower bounds failed" >&2
    return 1
  fi
  run_tests lowest "$venv/bin/python" "${numerics[@]}" "${wire[@]}" "${agents[@]}" \
    "${pytest_args[@]}"
}

pytest_args=("$@")
failed=()
for route in "${routes[@]}"; do
  start=$SECONDS
  if ! "route_$route"; then
    failed+=("$route")
  fi
  echo "test-oldest: $route route took $((SECONDS - start)) s" >&2
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "test-oldest: FAILED: ${failed[*]}" >&2
  exit 1
fi
