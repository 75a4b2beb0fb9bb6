#!/usr/bin/env bash
# Builds (Release) and runs every benchmark, printing figures and ratios against peers
# measured in the same run: bubblewrap with the same mounts, a bare spawn of the same
# bash (one at a time and by 8 threads), cp and md5sum, and Docker. Docker is part of
# every full run: Debian's docker.io is installed when missing, a dockerd of the run's
# own is started when no engine answers (and stopped after), and its image is a minimal
# one built here (`sandboxd image build --minimal`) and `docker import`ed, no registry.
#
#   SANDBOXD_BENCH_ONLY=runtime | image | idle | storage  that benchmark alone (storage:
#                                    storage.backend s3 against local and s3rver, which
#                                    `npm ci --prefix tests/s3` installs)
#   SANDBOXD_BENCH_ONLY=metadata     file calls with 8 connections, metadata.backend
#                                    sqlite against postgres (a PostgreSQL of its own)
#   SANDBOXD_BENCH_ONLY=cluster      3 replicas on one PostgreSQL and s3rver, 10,000
#                                    leases each: renewal, database stalls, a takeover
#                                    (the build's test hooks: SANDBOXD_TEST_HOOKS=ON)
#   SANDBOXD_BENCH_ONLY=messages | relay | throughput | transfer | mcp | python | cost | surfaces
#                                    the server benchmark's executions and that part
#                                    (cost: CPU and callgrind instructions per warm
#                                    command, valgrind from scripts/setup.sh, and throughput;
#                                    surfaces: callgrind instructions per call through MCP and
#                                    /messages against the direct endpoints)
#   SANDBOXD_BENCH_ONLY=e2b          E2B's SDKs (tests/e2b, `npm ci`ed) against sandboxd's
#                                    own HTTP API on one server: create + run, warm run,
#                                    warm runCode
#   SANDBOXD_BENCH_ONLY=egress       HTTPS from a sandbox through the egress path (its
#                                    own address for the name, the HTTP proxy, and a
#                                    name whose header rule sandboxd's TLS relay sets)
#                                    against curl on the host: time to first byte and a
#                                    100 MiB download, as ratios
#   SANDBOXD_BENCH_ONLY=isolation    the native tier against the gvisor tier (cold start,
#                                    warm command) and the gvisor tier's memory: pause and
#                                    resume of a sandbox holding 100 MiB, against its cold start
#   SANDBOXD_BENCH_IDLE=N            also, in a full run, N idle running sandboxes (the
#                                    idle part defaults to 1,000 and takes minutes)
#   SANDBOXD_BENCH_NO_DOCKER=1       leave Docker out (no install, no engine)
set -euo pipefail
cd "$(dirname "$0")/.."
# The test hooks (POST /admin/test/leases) hold the cluster benchmark's leases.
BUILD_TYPE=Release SANDBOXD_TEST_HOOKS=ON bash scripts/build.sh
only="${SANDBOXD_BENCH_ONLY:-}"
work=$(mktemp -d /var/tmp/sandboxd-bench.XXXXXX)
dockerd_pid=""
docker_image=""

cleanup() {
  local rc=$?
  if [ -n "$docker_image" ]; then docker rmi -f "$docker_image" >/dev/null 2>&1 || true; fi
  if [ -n "$dockerd_pid" ]; then
    kill -TERM "$dockerd_pid" 2>/dev/null || true
    wait "$dockerd_pid" 2>/dev/null || true
  fi
  # dockerd leaves its data root's own mounts (overlay, netns) when killed hard.
  { grep -o " $work[^ ]*" /proc/self/mountinfo || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$work" || true
  exit "$rc"
}
trap cleanup EXIT

# The minimal image: the image benchmark compares it with the host image, and Docker
# runs the same root filesystem.
image_data="$work/images" image_name="bench/minimal:1"
build_image() {
  [ -d "$image_data/images" ] && return 0
  echo "building $image_name (debootstrap minbase + python3-minimal + bash-static) ..."
  if ! ./build/sandboxd image build "$image_name" --minimal --packages python3-minimal,bash-static \
      --data-dir "$image_data" >"$work/image-build.log" 2>&1; then
    echo "the image build failed:"; tail -20 "$work/image-build.log"; return 1
  fi
}

start_docker() {
  [ -n "${SANDBOXD_BENCH_NO_DOCKER:-}" ] && return 0
  if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
    echo "installing docker.io (Debian's engine; its service is not started)"
    export DEBIAN_FRONTEND=noninteractive
    local own_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends docker.io >/dev/null
    ((own_policy)) && rm -f /usr/sbin/policy-rc.d
  fi
  if ! docker info >/dev/null 2>&1; then
    echo "starting a dockerd for this run"
    export DOCKER_HOST="unix://$work/docker.sock"
    dockerd --host "$DOCKER_HOST" --data-root "$work/docker" --exec-root "$work/docker-exec" \
      --pidfile "$work/docker.pid" --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
      --userland-proxy=false >"$work/dockerd.log" 2>&1 &
    dockerd_pid=$!
    for _ in $(seq 300); do docker info >/dev/null 2>&1 && break; sleep 0.1; done
    docker info >/dev/null 2>&1 || { tail -20 "$work/dockerd.log"; echo "dockerd did not start"; return 1; }
  fi
  build_image
  docker_image="sandboxd-bench/minimal:$$"
  tar -C "$image_data/images/bench+minimal@1/rootfs" -c . | docker import - "$docker_image" >/dev/null
  export SANDBOXD_BENCH_DOCKER_IMAGE="$docker_image"
  SANDBOXD_BENCH_DOCKER="$(command -v docker)"
  export SANDBOXD_BENCH_DOCKER
}

run_egress_bench() {
  SANDBOXD_PATH="$PWD/build/sandboxd" node bench/egress_bench.mjs
}

run_e2b_bench() {
  npm ci --prefix tests/e2b --no-audit --no-fund --loglevel=error >/dev/null
  SANDBOXD_PATH="$PWD/build/sandboxd" node bench/e2b_bench.mjs
}

case "$only" in
  runtime) start_docker; ./build/bench/sandboxd_runtime_bench ;;
  image) build_image; BENCH_DATA_DIR="$image_data" BENCH_IMAGE="$image_name" ./build/bench/sandboxd_image_bench ;;
  idle) ./build/bench/sandboxd_idle_bench ;;
  metadata) ./build/bench/sandboxd_metadata_bench ;;
  cluster) npm ci --prefix tests/s3 --no-audit --no-fund --loglevel=error >/dev/null; ./build/bench/sandboxd_cluster_bench ;;
  storage) npm ci --prefix tests/s3 --no-audit --no-fund --loglevel=error >/dev/null; ./build/bench/sandboxd_storage_bench ;;
  messages | relay | throughput | transfer | mcp | python | cost | surfaces) ./build/bench/sandboxd_server_bench ;;
  e2b) run_e2b_bench ;;
  egress) run_egress_bench ;;
  isolation) ./build/bench/sandboxd_isolation_bench ;;
  "")
    start_docker
    ./build/bench/sandboxd_runtime_bench
    echo
    ./build/bench/sandboxd_server_bench
    echo
    build_image
    BENCH_DATA_DIR="$image_data" BENCH_IMAGE="$image_name" ./build/bench/sandboxd_image_bench
    echo
    npm ci --prefix tests/s3 --no-audit --no-fund --loglevel=error >/dev/null
    ./build/bench/sandboxd_storage_bench
    echo
    ./build/bench/sandboxd_metadata_bench
    echo
    ./build/bench/sandboxd_cluster_bench
    echo
    run_e2b_bench
    echo
    run_egress_bench
    echo
    ./build/bench/sandboxd_isolation_bench
    if [ -n "${SANDBOXD_BENCH_IDLE:-}" ]; then
      echo
      ./build/bench/sandboxd_idle_bench
    fi
    ;;
  *) echo "SANDBOXD_BENCH_ONLY: runtime, image, idle, storage, metadata, cluster, messages, relay, throughput, transfer, mcp, python, cost, surfaces, e2b, egress or isolation" >&2; exit 2 ;;
esac
