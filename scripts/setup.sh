#!/usr/bin/env bash
# Set up everything edge_runtime needs on a Debian / Raspberry Pi OS machine:
# Mosquitto and python3-venv from Debian's packages (only when missing), then a
# virtual environment in .venv with the package and its test extras.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: Python >= 3.11 is required, found $(python3 --version 2>&1)" >&2
  exit 1
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

packages=()
if ! command -v mosquitto >/dev/null 2>&1 && [ ! -x /usr/sbin/mosquitto ]; then
  packages+=(mosquitto)
fi
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  packages+=(python3-venv)
fi
if [ "${#packages[@]}" -gt 0 ]; then
  echo "setup: installing ${packages[*]} from Debian's packages" >&2
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${packages[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test,bench]"
