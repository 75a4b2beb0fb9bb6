#!/usr/bin/env bash
# Builds the Debian package: build/packages/sandboxd_<version>_<arch>.deb (CPack), and
# prints its path. `--version V` packages the same build as version V (the install
# tests use it for an upgrade).
set -euo pipefail
cd "$(dirname "$0")/.."
version=""
while (($#)); do
  case "$1" in
    --version) version="$2"; shift 2 ;;
    *) echo "usage: scripts/package.sh [--version V]" >&2; exit 2 ;;
  esac
done
bash scripts/setup.sh
bash scripts/web-vendor.sh  # the web page's libraries, which the package carries
# The build tree the tests use (CPack strips the installed copies).
build_dir="${PACKAGE_BUILD_DIR:-build}"
# Neither failpoints nor test hooks in what is shipped (base/failpoint.h): no variable can
# make it fail on purpose. (scripts/build.sh turns failpoints back on for the tests.)
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" -DSANDBOXD_FAILPOINTS=OFF \
  -DSANDBOXD_TEST_HOOKS=OFF >/dev/null
cmake --build "$build_dir" -j"${JOBS:-2}" --target sandboxd sandboxd-init sandboxd-gvisor-preload sandboxd_package_docs >&2
cd "$build_dir"
args=(-G DEB)
[ -n "$version" ] && args+=(-R "$version")
cpack "${args[@]}" >cpack.log 2>&1 || { cat cpack.log >&2; exit 1; }
# CPack names it DEB-DEFAULT style; the newest one for this version is the one just made.
deb=$(sed -n 's/^CPack: - package: \(.*\.deb\) generated\.$/\1/p' cpack.log | tail -1)
[ -f "$deb" ] || { cat cpack.log >&2; echo "package.sh: no .deb in CPack's output" >&2; exit 1; }
echo "$deb"
