#!/usr/bin/env bash
# Checks the locking rules with clang's thread-safety analysis (docs/design.md, "Rules the
# compiler checks"): `clang++ -fsyntax-only -Wthread-safety -Werror` over the sources that
# lock, with each file's flags from the build's compile_commands.json. Run by ctest as
# `thread_safety`; prints clang's diagnostics (file:line) and exits 1 if any.
#
#   check-thread-safety.sh BUILD_DIR          the sources of that build that lock (below)
#   check-thread-safety.sh --files FILE...    just these files, with src/ on the include path
#
# Which sources: a .cc file under src/ that names core/mutex.h or a thread annotation, or
# that includes a src/ header that does (one level: a header's inline code is checked in
# the .cc files that include it, among them its own class's). The rest of src/ cannot touch
# a guarded member, and skipping it keeps the check to about 2 CPU-minutes (docs/design.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/src"

clang=""
for c in clang++ clang++-14 clang++-15 clang++-16; do
  if command -v "$c" >/dev/null; then clang=$c; break; fi
done
if [ -z "$clang" ]; then
  echo "check-thread-safety: clang++ not found (bash scripts/install-deps.sh installs it)" >&2
  exit 1
fi
# Warnings other than the analysis are GCC's business (the build has its own flags).
analysis=(-fsyntax-only -fno-crash-diagnostics -Wno-everything -Wthread-safety -Werror)

# Sources clang 14 cannot compile for reasons other than locking, each with why; they lock
# nothing. Listed in the output, never skipped silently.
declare -A unparsable=(
  ["model/random_model.cc"]="clang 14 cannot capture structured bindings (C++20 P1091, clang 16)"
)

markers='core/mutex\.h|GUARDED_BY|REQUIRES\(|EXCLUDES\(|ACQUIRE\(|RELEASE\('

# One file per line on stdin, "FILE<TAB>FLAGS": clang on each, as many at once as cores.
check_one() {
  local file=${1%%$'\t'*} flags=${1#*$'\t'} out
  # shellcheck disable=SC2086  # FLAGS is a word list.
  out=$("$CLANG" $flags $ANALYSIS "$file" 2>&1) || { printf '%s\n' "$out"; return 1; }
}
run() {
  export -f check_one
  CLANG=$clang ANALYSIS="${analysis[*]}" xargs -d '\n' -r -P "$(nproc 2>/dev/null || echo 2)" \
    -I{} bash -c 'check_one "$1"' _ {}
}

if [ "${1:-}" = "--files" ]; then
  shift
  [ "$#" -gt 0 ] || { echo "check-thread-safety: --files needs files" >&2; exit 2; }
  list=$(for f in "$@"; do printf '%s\t%s\n' "$f" "-std=c++20 -I$src"; done)
  count=$#
else
  build=${1:?usage: check-thread-safety.sh BUILD_DIR | --files FILE...}
  db="$build/compile_commands.json"
  if [ ! -f "$db" ]; then
    echo "check-thread-safety: $db not found (configure with CMAKE_EXPORT_COMPILE_COMMANDS)" >&2
    exit 1
  fi
  command -v jq >/dev/null || { echo "check-thread-safety: jq not found" >&2; exit 1; }
  # Headers under src/ that declare locked state or lock.
  mapfile -t headers < <(cd "$src" && grep -rlE "$markers" --include='*.h' . | sed 's|^\./||')
  header_re=$(printf '%s\n' "${headers[@]}" | sed 's/[.]/\\./g' | paste -sd '|')
  wanted() {
    grep -qE "$markers" "$1" && return 0
    [ -n "$header_re" ] && grep -qE "^#include \"($header_re)\"" "$1"
  }
  list=""
  count=0
  while IFS=$'\t' read -r file command; do
    case "$file" in "$src"/*.cc) ;; *) continue ;; esac
    wanted "$file" || continue
    if [ -n "${unparsable[${file#"$src"/}]:-}" ]; then
      echo "check-thread-safety: not checked: ${file#"$src"/}: ${unparsable[${file#"$src"/}]}"
      continue
    fi
    # The compile command less the compiler, its output and input and GCC's precompiled
    # header (CMake's cmake_pch.hxx; the sources include what they use); GCC's own -W flags
    # and options clang lacks are harmless under -Wno-everything.
    flags=$(printf '%s\n' "$command" | tr ' ' '\n' |
      awk 'NR == 1 { next } skip { skip = 0; next } $0 == "-o" { skip = 1; next }
           include { include = 0; if ($0 ~ /cmake_pch/) next; print "-include" }
           $0 == "-include" { include = 1; next }
           $0 == "-c" || /^-W/ { next } { print }' | grep -vxF "$file" | paste -sd ' ')
    list+="$file"$'\t'"$flags"$'\n'
    count=$((count + 1))
  done < <(jq -r '.[] | [.file, .command] | @tsv' "$db")
  if [ "$count" -eq 0 ]; then
    echo "check-thread-safety: no source in $db locks anything: is this moex's build?" >&2
    exit 1
  fi
fi

# The headers nearly every checked file includes, parsed once: a precompiled header for the
# flags most files share (a third of the check's time), used by the files with those flags.
# A file whose flags differ (another -march, say) is checked without it.
common=$(printf '%s' "$list" | cut -f2 | sort | uniq -c | sort -rn | head -1 | sed 's/^ *[0-9]* //')
if [ -n "$common" ]; then
  pch_dir=$(mktemp -d)
  trap 'rm -rf "$pch_dir"' EXIT
  printf '#include <%s>\n' algorithm atomic chrono condition_variable cstdint deque functional \
    map memory mutex optional set string thread unordered_map vector nlohmann/json.hpp \
    > "$pch_dir/common.h"
  # shellcheck disable=SC2086  # A word list.
  if "$clang" $common -x c++-header "$pch_dir/common.h" -o "$pch_dir/common.pch" 2>/dev/null; then
    list=$(printf '%s' "$list" | awk -F '\t' -v c="$common" -v p="$pch_dir/common.pch" \
      '$2 == c { $2 = $2 " -include-pch " p } { print $1 "\t" $2 }')$'\n'
  fi
fi

if ! printf '%s' "$list" | run; then
  echo "check-thread-safety: FAILED (clang -Wthread-safety, $count files)"
  exit 1
fi
echo "check-thread-safety: $count files pass clang's thread-safety analysis ($clang)"
