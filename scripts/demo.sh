#!/usr/bin/env bash
# Set up (see scripts/setup.sh), then replay the Motes light data through a local
# Mosquitto into the 8-leaf federated PCA tree of topologies/motes-light.toml.
# Extra arguments go to `edge-runtime run`, e.g. `./scripts/demo.sh --rate 2000`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/edge-runtime run topologies/motes-light.toml "$@"
