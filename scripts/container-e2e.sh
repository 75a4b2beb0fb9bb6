#!/usr/bin/env bash
# End to end through the container image, with Debian's docker engine and no registry:
#   bash scripts/container-e2e.sh [IMAGE_TARBALL]
# (without an argument it builds one with scripts/container-image.sh). Installs docker.io
# when missing (without starting its service), starts a dockerd of its own by hand (its
# own socket, data root and exec root, no bridge, no iptables rules on the host),
# `docker load`s the tarball, runs the image with exactly the privileges docs/install.md
# documents, checks /ready, a command and a file round trip through the API, stops it
# (SIGTERM: exit 0), checks that nothing leaked on the host (loop devices, mounts,
# cgroups, processes), removes everything and stops that dockerd. Root only.
#
# The engine here has no network for containers (--bridge=none), so the API is reached
# from inside the container (`docker exec ... curl`); a real deployment publishes the
# port (-p 127.0.0.1:8080:8080): the image listens on 0.0.0.0:8080.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
tarball="${1:-}"
[ -n "$tarball" ] || tarball=$(bash scripts/container-image.sh | tail -1)
tarball=$(realpath "$tarball")

# The privileges docs/install.md documents ("The container image"), and nothing more.
# shellcheck source=container-privileges.sh
source "$repo/scripts/container-privileges.sh"

log() { echo "container-e2e: $*"; }
fail() { echo "container-e2e: FAIL: $*" >&2; exit 1; }

if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
  log "installing docker.io (Debian's engine; its service is not started)"
  export DEBIAN_FRONTEND=noninteractive
  # Keep the package's init script from starting a daemon: this script runs its own.
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends docker.io >/dev/null
  ((own_policy)) && rm -f /usr/sbin/policy-rc.d
fi

work=$(mktemp -d /var/tmp/sandboxd-container-e2e.XXXXXX)
sock="$work/docker.sock"
docker_pid=""
container=sandboxd-e2e-$$
volume=sandboxd-e2e-data-$$
d() { docker -H "unix://$sock" "$@"; }

# What the host has before: loop devices, mounts, cgroup folders.
snapshot() {
  losetup -l -n -O NAME,BACK-FILE 2>/dev/null | sort >"$work/$1.loops" || true
  awk '{print $5}' /proc/self/mountinfo | sort >"$work/$1.mounts"
  find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | sort >"$work/$1.cgroups"
}

cleanup() {
  local rc=$?
  if [ -n "$docker_pid" ]; then
    d rm -f "$container" >/dev/null 2>&1 || true
    d volume rm -f "$volume" >/dev/null 2>&1 || true
    d rmi -f "sandboxd:$version" >/dev/null 2>&1 || true
    kill -TERM "$docker_pid" 2>/dev/null || true
    wait "$docker_pid" 2>/dev/null || true
  fi
  # dockerd leaves its data root's own mounts (overlay, netns) when killed hard.
  { grep -o " $work[^ ]*" /proc/self/mountinfo || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$work" || true
  exit "$rc"
}
trap cleanup EXIT

version=$(tar -xOf "$tarball" manifest.json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["RepoTags"][0].split(":")[1])')
snapshot before

log "starting dockerd by hand ($sock)"
dockerd --host "unix://$sock" --data-root "$work/data" --exec-root "$work/exec" --pidfile "$work/docker.pid" \
  --bridge=none --iptables=false --ip6tables=false --ip-masq=false --userland-proxy=false \
  >"$work/dockerd.log" 2>&1 &
docker_pid=$!
for _ in $(seq 300); do d version >/dev/null 2>&1 && break; sleep 0.1; done
d version >/dev/null 2>&1 || { cat "$work/dockerd.log"; fail "dockerd did not start"; }

log "docker load -i $(basename "$tarball")"
d load -i "$tarball"
labels=$(d image inspect "sandboxd:$version" --format '{{json .Config.Labels}}')
grep -q "\"org.opencontainers.image.version\":\"$version\"" <<<"$labels" || fail "labels: $labels"
[ "$(d image inspect "sandboxd:$version" --format '{{json .Config.Entrypoint}}')" = '["/usr/bin/sandboxd","serve"]' ] ||
  fail "entrypoint"

log "docker run ${SANDBOXD_CONTAINER_PRIVILEGES[*]}"
d volume create "$volume" >/dev/null
d run -d --name "$container" --network none -v "$volume:/var/lib/sandboxd" \
  "${SANDBOXD_CONTAINER_PRIVILEGES[@]}" "sandboxd:$version" >/dev/null
in_container() { d exec "$container" "$@"; }
deadline=$((SECONDS + 90))
while ((SECONDS < deadline)); do
  in_container curl -fsS -o /dev/null http://127.0.0.1:8080/ready 2>/dev/null && break
  [ "$(d inspect "$container" --format '{{.State.Running}}')" = true ] || { d logs "$container"; fail "the container exited"; }
  sleep 0.2
done
in_container curl -fsS http://127.0.0.1:8080/ready ||
  { d logs "$container" 2>&1 | grep -v ' route=ops.ready$'; in_container curl -sS http://127.0.0.1:8080/ready; fail "/ready"; }
echo
d logs "$container" 2>&1 | grep -q "listening on http://0.0.0.0:8080" || { d logs "$container"; fail "not listening on 0.0.0.0:8080"; }
# No tokens in the image's configuration: the server printed a development token.
token=$(d logs "$container" 2>&1 | grep -o 'sbx_dev_[A-Za-z0-9_]*' | head -1)
[ -n "$token" ] || { d logs "$container"; fail "no development token in the log"; }
api() { in_container curl -sS --max-time 60 -H "Authorization: Bearer $token" "$@"; }
base=http://127.0.0.1:8080

log "a command and a file round trip"
api -X PUT --data-binary "uploaded into a container" "$base/api/gpt/v1/files/in.txt?scope_id=e2e" >/dev/null
result=$(api -X POST "$base/api/gpt/v1/containers/e2e/tools/bash_code_execution" \
  -d '{"command": "cat /mnt/user-data/uploads/in.txt; echo; whoami; python3 -c \"print(6*7)\" > /mnt/user-data/outputs/answer.txt"}')
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["return_code"]==0 and r["stdout"]=="uploaded into a container\nagent\n", r' "$result" ||
  { d logs "$container"; fail "the command: $result"; }
file_id=$(api "$base/api/gpt/v1/files?scope_id=e2e" |
  python3 -c 'import json,sys; print(next(f["id"] for f in json.load(sys.stdin)["data"] if f["filename"].endswith("answer.txt")))')
[ "$(api "$base/api/gpt/v1/files/$file_id/content?scope_id=e2e")" = "42" ] || fail "downloading the output"

log "docker stop (SIGTERM)"
d stop -t 90 "$container" >/dev/null
[ "$(d inspect "$container" --format '{{.State.ExitCode}}')" = 0 ] || { d logs "$container"; fail "exit code"; }
container_id=$(d inspect "$container" --format '{{.Id}}')
d rm "$container" >/dev/null
d volume rm "$volume" >/dev/null
d rmi "sandboxd:$version" >/dev/null
kill -TERM "$docker_pid"; wait "$docker_pid" || true; docker_pid=""

log "nothing leaked on the host"
snapshot after
# Loop devices of other work on this machine come and go too.
comm -13 "$work/before.loops" "$work/after.loops" | grep -E "$work|/var/lib/sandboxd" >&2 && fail "loop devices left (above)"
# Mounts and cgroups of other work on this machine come and go; only what names this
# run's engine, container or sandboxes counts.
comm -13 "$work/before.mounts" "$work/after.mounts" | grep -E "$work|$container_id" >&2 && fail "mounts left (above)"
# The container's sandboxd keeps its cgroups in the host's tree (the bind of
# /sys/fs/cgroup) under sandboxd/<instance>, the instance named after its data directory.
instance="s$(printf %s /var/lib/sandboxd | sha256sum | cut -c1-16)"
comm -13 "$work/before.cgroups" "$work/after.cgroups" | grep -E "$container_id|docker|/sandboxd/$instance" >&2 &&
  fail "cgroups left (above)"
grep -l "$container_id" /proc/[0-9]*/cgroup 2>/dev/null | head -3 | grep . >&2 && fail "processes left in the container's cgroup"
log "ok"
