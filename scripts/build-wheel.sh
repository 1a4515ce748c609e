#!/usr/bin/env bash
# Build the edge-runtime wheel (what a device installs, see devices/INSTALL.md) into
# dist/ (or the folder given as the first argument) and print its path on stdout.
#
#   scripts/build-wheel.sh              # -> dist/edge_runtime-<version>-py3-none-any.whl
#   scripts/build-wheel.sh /tmp/out     # -> /tmp/out/edge_runtime-...whl
#
# The wheel is built with `pip wheel . --no-deps`, which needs nothing beyond pip: pip
# fetches the build backend (setuptools, wheel: [build-system] in pyproject.toml) into
# an isolated build environment. The source is copied to a temporary folder first, so
# a stale build/ folder of the working tree can never leak deleted modules into the
# wheel and concurrent builds do not share one build/ folder.
#
# An sdist (.tar.gz) is built as well when the `build` package is importable by the
# chosen Python (`pip install build`); a device needs only the wheel.
#
# Python: $PYTHON if set, else .venv/bin/python if present, else python3.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

out="${1:-$root/dist}"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python=python3; fi
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/edge-runtime-build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# A clean copy of the source: no virtual environment, git data, caches or old builds.
mkdir -p "$tmp/src" "$tmp/out"
tar -C "$root" \
  --exclude=./.git --exclude=./.venv --exclude=./build --exclude=./dist \
  --exclude='*.egg-info' --exclude=__pycache__ --exclude=.pytest_cache \
  --exclude=.ruff_cache --exclude=.hypothesis \
  -cf - . | tar -C "$tmp/src" -xf -

"$python" -m pip wheel --quiet --no-deps --disable-pip-version-check \
  --wheel-dir "$tmp/out" "$tmp/src" >&2

if "$python" -c 'import build' >/dev/null 2>&1; then
  "$python" -m build --sdist --outdir "$tmp/out" "$tmp/src" >&2
else
  echo "build-wheel: sdist skipped (the 'build' package is not installed: pip install build)" >&2
fi

mkdir -p "$out"
wheel=""
for file in "$tmp/out"/*; do
  [ -e "$file" ] || continue
  cp -f "$file" "$out/"
  case "$file" in *.whl) wheel="$out/$(basename "$file")" ;; esac
done
if [ -z "$wheel" ]; then
  echo "build-wheel: no wheel was built" >&2
  exit 1
fi
# Absolute path, so the output can be passed straight to pip install.
echo "$(cd "$(dirname "$wheel")" && pwd)/$(basename "$wheel")"
