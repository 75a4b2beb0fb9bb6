#!/usr/bin/env bash
# Formats the C++ tree (src, tests, bench, fuzz) with its own .clang-format, or with
# --check lists the files that differ and fails (the CTest test source_format runs the
# check, so an unformatted change fails the suite).
set -euo pipefail
cd "$(dirname "$0")/.."
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files 'src/*.cc' 'src/*.h' 'tests/*.cc' 'tests/*.h' 'bench/*.cc' 'bench/*.h' 'fuzz/*.cc')
else  # a tree without git (an unpacked source archive): the same folders, no npm packages
  mapfile -t files < <(find src tests bench fuzz -name node_modules -prune -o \( -name '*.cc' -o -name '*.h' \) -print)
fi
if [[ "${1:-}" == --check ]]; then
  # One clang-format for every file (a process per file costs a minute under load): each
  # difference is a "FILE:LINE:COL: warning: code should be clang-formatted" line; the files are those lines' first fields.
  report=$(clang-format --dry-run "${files[@]}" 2>&1) || { echo "$report" >&2; exit 1; }
  mapfile -t differ < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: warning: code should be clang-formatted.*/\1/p' <<<"$report" | sort -u)
  if ((${#differ[@]})); then
    printf 'not formatted (scripts/format.sh formats them): %s\n' "${differ[@]}"
    exit 1
  fi
  echo "format: ${#files[@]} files formatted"
else
  clang-format -i "${files[@]}"
fi
