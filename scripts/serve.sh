#!/usr/bin/env bash
# The main job on its embedded defaults: build, then `sandboxd serve` on 127.0.0.1:8080
# with data under ./sandboxd-data and a development token printed at start.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec ./build/sandboxd serve "$@"
