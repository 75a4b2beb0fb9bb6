#!/usr/bin/env bash
# The Debian package, installed on this machine, as an operator gets it:
#   tests/package_test.sh BUILD_DIR
# builds the .deb from BUILD_DIR with CPack (and the same build as version+1), checks it
# with dpkg-deb and lintian, installs it with dpkg -i, starts the unit's ExecStartPre and
# ExecStart lines as systemd would (when systemd is not PID 1 here: the unit's
# capability bounding set, no_new_privs, umask and a private mount namespace with /usr,
# /etc read-only and a private /tmp, and $NOTIFY_SOCKET, whose READY=1 it waits for),
# checks /health, /ready, a command and a file round trip, upgrades to version+1 with
# the server running and a container holding files, restarts it (what the postinst asks
# systemd for), checks the files and the edited conffile are kept, stops it, checks
# nothing leaked (mounts, loop devices, cgroups), purges and checks nothing is left.
# Where systemd is PID 1, the unit itself is started and restarted with systemctl.
# Root only. Refuses to touch a machine where sandboxd is already installed or its
# directories exist (exit 77: skipped), and removes everything it installed.
set -euo pipefail
build_dir=$(realpath "$1")
unit_name=sandboxd.service
# Not under /tmp: the service gets a private /tmp (PrivateTmp), and the notify socket
# must be reachable from it, as systemd's is under /run.
work=$(mktemp -d /run/sandboxd-package-test.XXXXXX)
server_pid=""
installed=0

log() { echo "package_test: $*"; }
fail() { echo "package_test: FAIL: $*" >&2; exit 1; }

if dpkg-query -W -f='${Status}' sandboxd 2>/dev/null | grep -q installed ||
   [ -e /etc/sandboxd ] || [ -e /var/lib/sandboxd ]; then
  echo "package_test: sandboxd is already installed here (or /etc/sandboxd, /var/lib/sandboxd exist); not touching it"
  exit 77
fi

stop_server() {
  [ -n "$server_pid" ] || return 0
  kill -TERM "$server_pid" 2>/dev/null || true
  local status=0
  wait "$server_pid" || status=$?
  server_pid=""
  return "$status"
}
cleanup() {
  local rc=$?
  stop_server || true
  if ((installed)); then dpkg --purge sandboxd >/dev/null 2>&1 || true; fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT

# --- build: the .deb, and the same build as version+1 -------------------------------
log "cpack"
(cd "$build_dir" && cpack -G DEB -B "$work/v1" >"$work/cpack1.log" 2>&1) || { cat "$work/cpack1.log"; fail "cpack"; }
deb=$(ls "$work"/v1/sandboxd_*.deb)
version=$(dpkg-deb -f "$deb" Version)
IFS=. read -r major minor patch <<<"$version"
next_version="$major.$minor.$((patch + 1))"
(cd "$build_dir" && cpack -G DEB -B "$work/v2" -R "$next_version" >"$work/cpack2.log" 2>&1) ||
  { cat "$work/cpack2.log"; fail "cpack -R $next_version"; }
deb_next=$(ls "$work"/v2/sandboxd_"$next_version"_*.deb)
arch=$(dpkg --print-architecture)
[ "$(basename "$deb")" = "sandboxd_${version}_${arch}.deb" ] || fail "package name $(basename "$deb")"

# --- what is in it ---------------------------------------------------------------------
log "dpkg-deb -I/-c $(basename "$deb")"
dpkg-deb -I "$deb" >"$work/info"
depends=$(dpkg-deb -f "$deb" Depends)
for dep in libc6 libstdc++6 libseccomp2 libsystemd0 libsqlite3-0 libcurl4 libyaml-cpp0.7 e2fsprogs; do
  grep -q "\b$dep\b" <<<"$depends" || fail "Depends lacks $dep: $depends"
done
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | grep -qx /etc/sandboxd/config.yaml || fail "conffiles"
dpkg-deb -c "$deb" | awk '{print $1, $6}' >"$work/contents"
for entry in "-rwxr-xr-x ./usr/bin/sandboxd" "-rwxr-xr-x ./usr/lib/sandboxd/sandboxd-init" \
             "-rw------- ./etc/sandboxd/config.yaml" "-rw-r--r-- ./lib/systemd/system/sandboxd.service" \
             "-rw-r--r-- ./usr/share/man/man1/sandboxd.1.gz" "-rw-r--r-- ./usr/share/doc/sandboxd/copyright"; do
  grep -qxF -- "$entry" "$work/contents" || fail "not in the package: $entry"
done
for folder in web skills; do
  if [ -d "$(dirname "$0")/../$folder" ]; then
    grep -q " ./usr/share/sandboxd/$folder/" "$work/contents" || fail "the $folder folder is not in the package"
  fi
done

log "lintian"
lintian --fail-on error,warning --display-info "$deb" >"$work/lintian" 2>&1 || { cat "$work/lintian"; fail "lintian"; }
cat "$work/lintian"

# --- install -----------------------------------------------------------------------------
log "dpkg -i"
installed=1
dpkg -i "$deb" >"$work/dpkg-i" 2>&1 || { cat "$work/dpkg-i"; fail "dpkg -i"; }
[ "$(stat -c %a /var/lib/sandboxd)" = 700 ] || fail "/var/lib/sandboxd is not 0700"
/usr/bin/sandboxd version | grep -qx "sandboxd $version" || fail "sandboxd version: $(/usr/bin/sandboxd version)"
/usr/bin/sandboxd version | grep -qE '^commit: ([0-9a-f]{40}(-dirty)?|unknown)$' || fail "no commit in sandboxd version"
zcat /usr/share/man/man1/sandboxd.1.gz | grep -q "^.BI \"image import " || fail "the man page"
/usr/bin/sandboxd config check /etc/sandboxd/config.yaml | grep -q ": ok" || fail "the default config"

# The operator's edits: a port of its own (nothing else here is disturbed) and a token.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
token="sbx_pkgtest_$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
sed -i "s/^  listen: \"127.0.0.1:8080\"$/  listen: \"127.0.0.1:$port\"/; s/^  tokens: \[\]$/  tokens: [ { token: \"$token\", owner: pkgtest } ]/" \
    /etc/sandboxd/config.yaml
grep -q "$token" /etc/sandboxd/config.yaml || fail "editing the conffile"

# --- the unit's command lines, started as systemd would ----------------------------------
unit=/lib/systemd/system/$unit_name
unit_value() { sed -n "s/^$1=//p" "$unit"; }
exec_start_pre=$(unit_value ExecStartPre)
exec_start=$(unit_value ExecStart)
bounding=$(unit_value CapabilityBoundingSet | tr ' ' '\n' | sed 's/^CAP_//' | tr 'A-Z' 'a-z' | paste -sd, | sed 's/,/,+/g')
[ "$(unit_value NoNewPrivileges)" = yes ] && [ "$(unit_value ProtectSystem)" = full ] &&
  [ "$(unit_value PrivateTmp)" = yes ] || fail "the unit's hardening changed: update this test's emulation"
umask_value=$(unit_value UMask)

# The mount namespace systemd gives the service (ProtectSystem=full, ProtectHome,
# PrivateTmp), then the unit's credentials, then the command line itself.
cat >"$work/as-the-unit.sh" <<EOF
set -e
mount --make-rslave /
mount -o bind,ro /usr /usr; mount -o remount,bind,ro /usr
mount -o bind /etc /etc; mount -o remount,bind,ro /etc
for d in /home /root; do [ -d "\$d" ] && mount -t tmpfs -o mode=000,size=4k none "\$d"; done
mount -t tmpfs -o mode=1777 none /tmp
umask $umask_value
exec setpriv --no-new-privs --inh-caps=-all --bounding-set=-all,+$bounding -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 NOTIFY_SOCKET="\$NOTIFY_SOCKET" "\$@"
EOF

start_server() {
  rm -f "$work/notify.sock" "$work/notify.log"
  # A datagram socket, as systemd's: READY=1, STATUS=..., STOPPING=1 land in notify.log.
  python3 - "$work/notify.sock" "$work/notify.log" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "a", buffering=1) as log:
    while True:
        data = s.recv(4096).decode()
        log.write(data.replace("\n", "|") + "\n")
        if "STOPPING=1" in data:
            break
PY
  notify_pid=$!
  for _ in $(seq 50); do [ -S "$work/notify.sock" ] && break; sleep 0.1; done
  # ExecStartPre, then ExecStart: split as systemd splits these (plain words).
  NOTIFY_SOCKET="$work/notify.sock" unshare --mount --propagation unchanged \
    bash "$work/as-the-unit.sh" $exec_start_pre >"$work/pre.log" 2>&1 || { cat "$work/pre.log"; fail "ExecStartPre"; }
  NOTIFY_SOCKET="$work/notify.sock" unshare --mount --propagation unchanged \
    bash "$work/as-the-unit.sh" $exec_start >>"$work/server.log" 2>&1 &
  server_pid=$!
  # Type=notify: started once READY=1 arrives (TimeoutStartSec bounds it).
  local timeout
  timeout=$(unit_value TimeoutStartSec)
  for _ in $(seq $((timeout * 10))); do
    grep -q "READY=1" "$work/notify.log" 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; fail "the server exited before READY=1"; }
    sleep 0.1
  done
  grep -q "READY=1" "$work/notify.log" || { cat "$work/server.log"; fail "no READY=1 within TimeoutStartSec"; }
}

# Where systemd is PID 1 the postinst has started the unit: it is driven with systemctl
# (restart picks up the edited configuration; an upgrade's postinst restarts it).
under_systemd=0
[ -d /run/systemd/system ] && under_systemd=1
if ((under_systemd)); then
  start_server() {
    systemctl restart sandboxd.service
    systemctl is-active --quiet sandboxd.service || { journalctl -u sandboxd --no-pager | tail -30; fail "the unit is not active"; }
  }
  stop_server() { systemctl stop sandboxd.service; }
fi

api() { curl -sS --max-time 60 -H "Authorization: Bearer $token" "$@"; }
base="http://127.0.0.1:$port"

log "start (ExecStartPre, ExecStart under the unit's hardening; systemctl where systemd runs)"
start_server
[ "$(curl -s -o /dev/null -w '%{http_code}' "$base/health")" = 200 ] || fail "/health"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$base/ready")" = 200 ] || fail "/ready: $(curl -s "$base/ready")"
# The unit's capabilities let sandboxes be made from the template mount namespace (no
# fallback to copying the server's: docs/architecture.md).
if ((!under_systemd)); then
  ! grep -q "mount-template could not" "$work/server.log" || fail "the template mount namespace: $(grep mount-template "$work/server.log")"
fi

log "a command and a file round trip"
api -X PUT --data-binary "uploaded bytes" "$base/api/gpt/v1/files/in.txt?scope_id=pkg" >/dev/null
result=$(api -X POST "$base/api/gpt/v1/containers/pkg/tools/bash_code_execution" \
  -d '{"command": "cat /mnt/user-data/uploads/in.txt; echo; whoami; echo made-in-sandbox > /mnt/user-data/outputs/out.txt"}')
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["return_code"]==0 and r["stdout"]=="uploaded bytes\nagent\n", r' "$result" ||
  fail "the command: $result"
file_id=$(api "$base/api/gpt/v1/files?scope_id=pkg" |
  python3 -c 'import json,sys; print(next(f["id"] for f in json.load(sys.stdin)["data"] if f["filename"].endswith("out.txt")))')
[ "$(api "$base/api/gpt/v1/files/$file_id/content?scope_id=pkg")" = "made-in-sandbox" ] || fail "downloading the output"

# --- upgrade with the server running and the container's sandbox up ---------------------
log "upgrade to $next_version while serving"
dpkg -i "$deb_next" >"$work/dpkg-up" 2>&1 || { cat "$work/dpkg-up"; fail "dpkg -i (upgrade)"; }
[ "$(dpkg-query -W -f='${Version}' sandboxd)" = "$next_version" ] || fail "the upgraded version"
grep -q "$token" /etc/sandboxd/config.yaml || fail "the upgrade lost the conffile's edits"
[ ! -e /etc/sandboxd/config.yaml.dpkg-dist ] || fail "the upgrade asked about an unchanged conffile"
# What the postinst asks systemd for on an upgrade: a restart.
if ((under_systemd)); then
  systemctl is-active --quiet sandboxd.service || fail "the postinst did not restart the unit"
else
  stop_server || fail "the server did not exit 0 on SIGTERM"
  grep -q "STOPPING=1" "$work/notify.log" || fail "no STOPPING=1"
  start_server
fi
result=$(api -X POST "$base/api/gpt/v1/containers/pkg/tools/bash_code_execution" \
  -d '{"command": "cat /mnt/user-data/outputs/out.txt /mnt/user-data/uploads/in.txt"}')
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["stdout"]=="made-in-sandbox\nuploaded bytes", r' "$result" ||
  fail "files after the upgrade: $result"

# --- stop: nothing left running or mounted -------------------------------------------------
log "stop"
stop_server || fail "the server did not exit 0 on SIGTERM"
grep -q " /var/lib/sandboxd" /proc/self/mountinfo && fail "mounts left under /var/lib/sandboxd"
losetup -l -n -O BACK-FILE 2>/dev/null | grep -q "^/var/lib/sandboxd" && fail "loop devices left on /var/lib/sandboxd"
# The runtime's instance is named after the data directory (see src/ops/serve.cc).
instance="s$(printf %s /var/lib/sandboxd | sha256sum | cut -c1-16)"
for dir in /sys/fs/cgroup/sandboxd/"$instance" /sys/fs/cgroup/*/sandboxd/"$instance"; do
  [ ! -e "$dir" ] || fail "cgroup left: $dir"
done

# --- purge -------------------------------------------------------------------------------
log "purge"
dpkg --purge sandboxd >"$work/purge" 2>&1 || { cat "$work/purge"; fail "dpkg --purge"; }
installed=0
for path in /var/lib/sandboxd /etc/sandboxd /usr/bin/sandboxd /usr/lib/sandboxd "$unit" \
            /usr/share/man/man1/sandboxd.1.gz /usr/share/doc/sandboxd /usr/share/sandboxd; do
  [ ! -e "$path" ] || fail "$path is left after purge"
done
dpkg-query -W -f='${Status}' sandboxd 2>/dev/null | grep -q "installed" && fail "dpkg still knows the package"
log "ok"
