#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang, ASan+UBSan) into ./build-fuzz and runs them.
#   scripts/fuzz.sh --smoke          every target for a short bounded time (the test suite)
#   scripts/fuzz.sh TARGET [SECONDS] one target for as long as you like (default 300 s)
#   scripts/fuzz.sh --list           the targets
# Each target starts from its seed corpus in fuzz/corpus/TARGET/ (regression inputs
# included); new interesting inputs go to build-fuzz/corpus/TARGET/, crashes to
# build-fuzz/crashes/TARGET/. A crash found becomes a regression input: fix the bug and
# copy the crash file into fuzz/corpus/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/build-fuzz
targets=(router multipart keys header_values tool_input messages_request sse tar config skill_archive mcp_envelope
  connect_envelope destination_peek)
smoke_seconds=${FUZZ_SMOKE_SECONDS:-3}

build() {
  # ccache, where the machine has it, as scripts/build.sh does (paths hashed relative to
  # the tree): a fresh clone's fuzz build is then seconds instead of minutes of clang
  # with sanitizers.
  local launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
  fi
  if [ ! -f "$out/CMakeCache.txt" ]; then
    CC=clang CXX=clang++ cmake -S fuzz -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
  fi
  cmake --build "$out" -j"${JOBS:-2}" >/dev/null
}

# run TARGET SECONDS: fuzzes from the seed corpus; non-zero on a crash, leak or timeout.
run() {
  local target=$1 seconds=$2
  local seeds=$root/fuzz/corpus/$target work=$out/corpus/$target crashes=$out/crashes/$target
  mkdir -p "$work" "$crashes"
  echo "fuzz: $target for ${seconds}s"
  # The seeds first, one by one (every regression input must pass), then fuzzing.
  "$out/fuzz_$target" -runs=0 "$seeds" >"$out/$target.log" 2>&1 || { cat "$out/$target.log"; return 1; }
  "$out/fuzz_$target" "$work" "$seeds" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$crashes/" -print_final_stats=1 >>"$out/$target.log" 2>&1 || {
    tail -60 "$out/$target.log"
    echo "fuzz: $target FAILED; the input is in $crashes/"
    return 1
  }
  grep -E "stat::number_of_executed_units" "$out/$target.log" | tail -1 | sed "s/^/fuzz: $target /"
}

case "${1:-}" in
  --list) printf '%s\n' "${targets[@]}" ;;
  --smoke)
    build
    failed=0
    for target in "${targets[@]}"; do run "$target" "$smoke_seconds" || failed=1; done
    exit $failed
    ;;
  "" | -h | --help) sed -n '2,9p' "$0" ;;
  *)
    [[ " ${targets[*]} " == *" $1 "* ]] || { echo "unknown target '$1' (--list)" >&2; exit 2; }
    build
    run "$1" "${2:-300}"
    ;;
esac
