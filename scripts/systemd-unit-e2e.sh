#!/usr/bin/env bash
# The Debian package's unit under a real systemd as PID 1, for machines where systemd
# is not PID 1 (this one, CI): a container of the bookworm base with systemd, started
# with the privileges of the container image (scripts/container-privileges.sh), in
# which the .deb is installed with dpkg -i. Checks that the postinst enables and starts
# the unit, that Type=notify reaches "active" with STATUS "ready", the unit's hardening
# lets sandboxes start (a command and a file round trip), `systemctl reload` (SIGHUP),
# an upgrade to the same build as version+1 (the postinst restarts it; files kept),
# then purge (stopped, nothing left), and that nothing leaked on the host.
#   bash scripts/systemd-unit-e2e.sh
# Root only; needs build/container/base.tar (scripts/container-image.sh makes it) and
# deb.debian.org (apt-get install systemd). Not part of scripts/test.sh (see docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
source "$repo/scripts/container-privileges.sh"
log() { echo "systemd-unit-e2e: $*"; }
fail() { echo "systemd-unit-e2e: FAIL: $*" >&2; exit 1; }

[ -f build/container/base.tar ] || fail "no build/container/base.tar: run scripts/container-image.sh first"
command -v dockerd >/dev/null || fail "no dockerd: scripts/container-e2e.sh installs docker.io"
deb=$(bash scripts/package.sh | tail -1)
version=$(dpkg-deb -f "$deb" Version)
IFS=. read -r major minor patch <<<"$version"
next_version="$major.$minor.$((patch + 1))"
work=$(mktemp -d /var/tmp/sandboxd-systemd-e2e.XXXXXX)
cp "$deb" "$work/sandboxd.deb"
cp "$(bash scripts/package.sh --version "$next_version" | tail -1)" "$work/sandboxd-next.deb"
rm -f "$(dirname "$deb")/sandboxd_${next_version}_"*.deb

sock="$work/docker.sock" docker_pid="" container=sandboxd-systemd-e2e-$$ image=sandboxd-systemd-e2e:$$
rootfs="$work/rootfs"
d() { docker -H "unix://$sock" "$@"; }
cleanup() {
  local rc=$?
  mountpoint -q "$rootfs/proc" 2>/dev/null && umount -l "$rootfs/proc"
  if [ -n "$docker_pid" ]; then
    d rm -f "$container" >/dev/null 2>&1 || true
    d rmi -f "$image" >/dev/null 2>&1 || true
    kill -TERM "$docker_pid" 2>/dev/null || true
    wait "$docker_pid" 2>/dev/null || true
  fi
  { grep -o " $work[^ ]*" /proc/self/mountinfo || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$work" || true
  exit "$rc"
}
trap cleanup EXIT

log "a bookworm root filesystem with systemd (and the package's dependencies)"
mkdir -p "$rootfs"
tar --numeric-owner -C "$rootfs" -xf build/container/base.tar
cp "$work/sandboxd.deb" "$rootfs/tmp/sandboxd.deb"
printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d" && chmod 755 "$rootfs/usr/sbin/policy-rc.d"
mount -t proc proc "$rootfs/proc"
chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive sh -ec '
  apt-get -qq update
  apt-get -qq -y install systemd systemd-sysv curl python3 /tmp/sandboxd.deb >/dev/null
  dpkg --purge sandboxd >/dev/null' >"$work/chroot.log" 2>&1 || { cat "$work/chroot.log"; fail "apt-get in the chroot"; }
umount "$rootfs/proc"
rm -f "$rootfs/usr/sbin/policy-rc.d" "$rootfs/tmp/sandboxd.deb"
find "$rootfs/dev" -mindepth 1 -delete
[ ! -e "$rootfs/var/lib/sandboxd" ] || fail "the chroot's purge left /var/lib/sandboxd"

instance="s$(printf %s /var/lib/sandboxd | sha256sum | cut -c1-16)"
find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | sort >"$work/before.cgroups"

log "dockerd (its own socket and data root; no bridge, no iptables rules)"
dockerd --host "unix://$sock" --data-root "$work/data" --exec-root "$work/exec" --pidfile "$work/docker.pid" \
  --bridge=none --iptables=false --ip6tables=false --ip-masq=false --userland-proxy=false >"$work/dockerd.log" 2>&1 &
docker_pid=$!
for _ in $(seq 300); do d version >/dev/null 2>&1 && break; sleep 0.1; done
tar --numeric-owner -C "$rootfs" -c . | d import - "$image" >/dev/null
rm -rf --one-file-system "$rootfs"
d run -d --name "$container" --network none --tmpfs /run --tmpfs /run/lock \
  "${SANDBOXD_CONTAINER_PRIVILEGES[@]}" "$image" /sbin/init >/dev/null
in_c() { d exec "$container" "$@"; }
for _ in $(seq 100); do in_c systemctl is-system-running 2>/dev/null | grep -qE 'running|degraded' && break; sleep 0.3; done

wait_active() {
  for _ in $(seq 240); do
    [ "$(in_c systemctl is-active sandboxd || true)" = active ] && return 0
    sleep 0.5
  done
  in_c systemctl status sandboxd --no-pager || true
  fail "sandboxd.service is not active"
}
api() {
  local token
  token=$(in_c journalctl -u sandboxd --no-pager | grep -o 'sbx_dev_[a-z0-9]*' | tail -1)
  in_c curl -sS --max-time 60 -H "Authorization: Bearer $token" "$@"
}
base=http://127.0.0.1:8080

log "dpkg -i: the postinst enables and starts the unit"
d cp "$work/sandboxd.deb" "$container:/tmp/sandboxd.deb"
d cp "$work/sandboxd-next.deb" "$container:/tmp/sandboxd-next.deb"
in_c dpkg -i /tmp/sandboxd.deb >/dev/null 2>&1
wait_active
[ "$(in_c systemctl is-enabled sandboxd)" = enabled ] || fail "not enabled"
in_c systemctl show sandboxd -p StatusText | grep -q "StatusText=ready" || fail "STATUS is not ready"

log "a command and a file round trip under the unit's hardening"
api -X PUT --data-binary "through systemd" "$base/api/gpt/v1/files/in.txt?scope_id=u" | grep -q '"id"' || fail "PUT"
result=$(api -X POST "$base/api/gpt/v1/containers/u/tools/bash_code_execution" \
  -d '{"command": "cat /mnt/user-data/uploads/in.txt; echo; whoami; echo kept > /mnt/user-data/outputs/o.txt"}')
[ "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["stdout"], end="")' "$result")" = $'through systemd\nagent' ] ||
  fail "the command: $result"

log "systemctl reload (SIGHUP)"
in_c systemctl reload sandboxd
for _ in $(seq 50); do in_c journalctl -u sandboxd --no-pager | grep -q "SIGHUP: configuration reloaded" && break; sleep 0.2; done
in_c journalctl -u sandboxd --no-pager | grep -q "SIGHUP: configuration reloaded" || fail "no reload in the journal"

log "upgrade to $next_version: restarted by the postinst, files kept"
pid_before=$(in_c systemctl show sandboxd -p MainPID --value)
in_c dpkg -i /tmp/sandboxd-next.deb >/dev/null
wait_active
[ "$(in_c systemctl show sandboxd -p MainPID --value)" != "$pid_before" ] || fail "not restarted"
[ "$(in_c dpkg-query -W -f='${Version}' sandboxd)" = "$next_version" ] || fail "version"
result=$(api -X POST "$base/api/gpt/v1/containers/u/tools/bash_code_execution" \
  -d '{"command": "cat /mnt/user-data/outputs/o.txt /mnt/user-data/uploads/in.txt"}')
[ "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["stdout"], end="")' "$result")" = $'kept\nthrough systemd' ] ||
  fail "files after the upgrade: $result"

log "purge: stopped, nothing left"
in_c dpkg --purge sandboxd >/dev/null
[ "$(in_c systemctl is-active sandboxd || true)" != active ] || fail "still active after purge"
for path in /var/lib/sandboxd /etc/sandboxd /usr/bin/sandboxd /lib/systemd/system/sandboxd.service \
            /etc/systemd/system/multi-user.target.wants/sandboxd.service; do
  in_c test ! -e "$path" || fail "$path left after purge"
done
in_c sh -c 'ls /proc/[0-9]*/exe -l 2>/dev/null | grep -q sandboxd' && fail "sandboxd processes left"
d rm -f "$container" >/dev/null  # systemd as PID 1 ignores docker's SIGTERM

find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | sort >"$work/after.cgroups"
comm -13 "$work/before.cgroups" "$work/after.cgroups" | grep -E "/sandboxd/$instance" >&2 && fail "cgroups left (above)"
log "ok"
