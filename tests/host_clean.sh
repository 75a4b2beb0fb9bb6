#!/usr/bin/env bash
# What the test suite leaves on the host: CTest runs `record` before every test (the
# fixture host_clean's setup) and `check` after the last one (its cleanup), and `check`
# fails when something of the tests' kind is there that was not before the run: a mount
# or a loop device below a test's temporary folder ($TMPDIR/sandboxd-*), a cgroup folder
# of a sandboxd instance (/sys/fs/cgroup/**/sandboxd/<instance>/<sandbox>), or a process
# running a binary of this build (sandboxd, sandboxd-init: a stuck PID 1). What the
# machine had before (a previous run's leftovers on a developer's machine) is in the
# baseline and does not count.
#
#   host_clean.sh record|check STATE_FILE BUILD_DIR
set -u
mode=$1 state=$2 build=$(realpath "$3")
tmp=$(realpath "${TMPDIR:-/tmp}")

snapshot() {
  awk -v prefix="$tmp/sandboxd-" 'index($5, prefix) == 1 { print "mount " $5 }' /proc/self/mountinfo
  for file in /sys/block/loop*/loop/backing_file; do
    [ -r "$file" ] || continue
    backing=$(cat "$file" 2>/dev/null) || continue
    case $backing in "$tmp"/sandboxd-*) echo "loop-device ${file#/sys/block/} -> ${backing%% (deleted)}" ;; esac
  done
  for instance in /sys/fs/cgroup/*/sandboxd/* /sys/fs/cgroup/sandboxd/*; do
    [ -d "$instance" ] || continue
    find "$instance" -mindepth 0 -maxdepth 1 -type d -printf 'cgroup %p\n' 2>/dev/null
  done
  find /proc -mindepth 2 -maxdepth 2 -name exe -lname "$build/*" -printf 'process %h %l\n' 2>/dev/null
}

case $mode in
  record)
    snapshot | sort -u >"$state"
    echo "host baseline: $(wc -l <"$state") entries of the tests' kind before the run"
    ;;
  check)
    [ -f "$state" ] || { echo "no baseline at $state (run with the fixture's setup, host_baseline)"; exit 1; }
    # What a test's last server or sandbox ends on its own goes within a few seconds.
    deadline=$((SECONDS + 15))
    while :; do
      left=$(snapshot | sort -u | comm -13 "$state" -)
      [ -z "$left" ] && { echo "the tests left the host as they found it"; exit 0; }
      [ $SECONDS -ge $deadline ] && break
      sleep 0.5
    done
    echo "the tests left these on the host (not there before the run):"
    echo "$left"
    exit 1
    ;;
  *)
    echo "usage: host_clean.sh record|check STATE_FILE BUILD_DIR" >&2
    exit 2
    ;;
esac
