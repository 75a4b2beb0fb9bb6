#!/usr/bin/env bash
# Builds (Release) and runs every benchmark, printing figures and ratios against peers
# measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_TYPE=Release bash scripts/build.sh
./build/bench/sandboxd_runtime_bench
echo
./build/bench/sandboxd_server_bench
echo
./build/bench/sandboxd_image_bench
