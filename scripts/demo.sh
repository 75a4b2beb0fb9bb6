#!/usr/bin/env bash
# The main job on embedded defaults: build, then run a small demo in a fresh sandbox.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec ./build/sandboxd run -- 'echo "hello from $(whoami) in $(pwd)"; python3 -c "import sys; print(sys.version.split()[0])"; ls /mnt/user-data'
