#!/usr/bin/env bash
# Installs the Debian packages sandboxd builds and tests with. Idempotent and quiet when
# everything is already present; non-interactive, so it runs the same in CI.
set -euo pipefail
packages=(
  build-essential cmake pkg-config
  ccache  # scripts/build.sh compiles through it: a rebuild, or a build in another clone, is cheap
  libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev
  libyaml-cpp-dev libseccomp-dev libsqlite3-dev libpq-dev libcurl4-openssl-dev libssl-dev
  libexpat1-dev  # the S3 storage backend parses the bucket's XML answers
  libmagic-dev libspdlog-dev libsystemd-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libgoogle-perftools-dev  # tcmalloc_minimal, linked statically into the server (CMakeLists.txt)
  e2fsprogs util-linux iproute2 bubblewrap curl wrk
  valgrind  # the server benchmark counts the server's instructions per command with callgrind
  bash-static  # sandboxes run it for /bin/bash: the same bash, no dynamic linking per command
  runsc  # runtime.isolation: gvisor runs every sandbox under gVisor (tests/gvisor_test.cc)
  zlib1g-dev debootstrap  # images: gzip layers; `sandboxd image build`; E2B gzip uploads
  prometheus  # promtool checks the /metrics output in the tests
  postgresql  # metadata.backend: postgres in the tests; an allow-listed service the network tests query
  nginx  # the load balancer in front of three replicas in the cluster tests (run by the test itself)
  chromium  # the Workspace web page's browser test (driven by playwright-core)
  python3-openpyxl python3-reportlab  # the browser test's model makes an XLSX and a PDF in the sandbox
  lintian python3  # the package test checks the .deb; package and image scripts write JSON
  openssl  # the scripted Kubernetes API server of the network-peers test makes its certificate
  # The persistent Python (code_execution) runs IPython in sandboxes, which see the host's
  # /usr; its tests draw a matplotlib figure and a pandas DataFrame.
  python3-ipykernel python3-matplotlib-inline python3-matplotlib python3-pandas
  clang libclang-rt-dev  # the fuzz targets (scripts/fuzz.sh): libFuzzer, ASan, UBSan
  clang-format  # scripts/format.sh: the C++ tree in its .clang-format (a CTest test checks it)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Node.js and npm run the client-compatibility tests (the official Anthropic SDK). A
# machine that has them (from any source) keeps its own; otherwise Debian's.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup: installing nodejs npm"
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
