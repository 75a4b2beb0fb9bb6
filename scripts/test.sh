#!/usr/bin/env bash
# Builds everything and runs every test under CTest. Tests need root (namespaces, cgroups,
# loop devices), as in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 "$@"
