#!/usr/bin/env bash
# Configures and builds sandboxd into ./build (RelWithDebInfo unless BUILD_TYPE says
# otherwise; -j2: CI has two cores). This is the build the tests use: failpoints on
# (base/failpoint.h; SANDBOXD_FAILPOINTS=OFF for one without). The package is built by
# scripts/package.sh, with none.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The web page's libraries from web/package-lock.json into web/assets/vendor/.
bash scripts/web-vendor.sh
# ccache, where the machine has it, makes a rebuild in another clone of the tree cheap.
launcher=()
# Paths are hashed relative to the tree (CCACHE_BASEDIR) and the build folder is left out
# of the hash (CCACHE_NOHASHDIR: debug info may then name another clone's folder), so that
# a fresh clone in another folder, as CI makes, finds what this machine compiled before.
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
fi
# SANDBOXD_TEST_HOOKS=ON: the /admin/test/ endpoints the cluster benchmark uses (never
# in a build that is shipped; scripts/bench.sh turns them on). SANDBOXD_FAILPOINTS=ON:
# the failpoints the tests use (base/failpoint.h; scripts/package.sh turns them off).
cmake -S . -B build -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" -DSANDBOXD_TEST_HOOKS="${SANDBOXD_TEST_HOOKS:-OFF}" \
  -DSANDBOXD_FAILPOINTS="${SANDBOXD_FAILPOINTS:-ON}" "${launcher[@]}" >/dev/null
cmake --build build -j"${JOBS:-2}"
