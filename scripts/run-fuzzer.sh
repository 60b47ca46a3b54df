#!/usr/bin/env bash
# Runs one libFuzzer target of fuzz/ (built by `make fuzz`) for SECONDS, starting from the
# committed seeds in fuzz/corpus/NAME. New inputs go to build-fuzz/corpus/NAME (never into
# the committed corpus), findings to build-fuzz/findings/NAME/. Prints libFuzzer's log; the
# last "#N ... cov: C ft: F" line holds the executions and coverage docs/fuzzing.md quotes.
#   bash scripts/run-fuzzer.sh gguf_fuzzer 600
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: run-fuzzer.sh NAME SECONDS [libFuzzer options...]}
seconds=${2:?usage: run-fuzzer.sh NAME SECONDS [libFuzzer options...]}
shift 2
bin=${FUZZ_BUILD_DIR:-build-fuzz}/$name
[ -x "$bin" ] || { echo "run-fuzzer: $bin not found; run make fuzz first" >&2; exit 1; }
work=${FUZZ_BUILD_DIR:-build-fuzz}/corpus/$name
findings=${FUZZ_BUILD_DIR:-build-fuzz}/findings/$name
mkdir -p "$work" "$findings"
dict=fuzz/dicts/${name%_fuzzer}.dict
opts=(-max_total_time="$seconds" -artifact_prefix="$findings/" -rss_limit_mb=2048 -timeout=10
  -print_final_stats=1)
[ -f "$dict" ] && opts+=(-dict="$dict")
exec "$bin" "${opts[@]}" "$@" "$work" "fuzz/corpus/$name"
