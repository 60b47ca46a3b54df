#!/usr/bin/env bash
# Writes tests/data/llamacpp-archs/ from llama.cpp's own toy models: builds llama.cpp's
# tests/test-llama-archs (the source get_llamacpp.sh checked out), saves one tiny MoE GGUF
# per architecture moex supports (`test-llama-archs -s SEED -o DIR`: written and read by
# llama.cpp itself), runs llama-logits on each for fixed ids, and keeps each file's head and
# llama.cpp's logits (tools/reference/llamacpp_arch_fixtures.py says why not the files).
# tests/llamacpp_archs_test.cc regenerates the files from the heads and compares moex's
# logits with llama.cpp's. With BUILD_DIR it also prints moex's agreement on the real files.
# Never run in CI.
#
#   bench/llamacpp/arch_fixtures.sh [LLAMA_CPP=/work/data/llama.cpp] [BUILD_DIR]
#
# Environment: SEED (1), STDEV (0.1; test-llama-archs' default), WORK (/tmp/moex-arch-fixtures).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
src=${1:-/work/data/llama.cpp}
build=${2:-}
seed=${SEED:-1}
stdev=${STDEV:-0.1}
work=${WORK:-/tmp/moex-arch-fixtures}
out=$root/tests/data/llamacpp-archs
py=/usr/bin/python3
archs=(llama olmoe qwen2moe qwen3moe deepseek deepseek2 phimoe glm4moe gpt-oss minimax-m2 qwen3next
  qwen35moe llama4)
# 24 ids below the toy vocabulary (128), fixed.
ids=82,38,101,12,18,24,93,14,54,9,22,111,107,17,61,23,108,15,31,57,15,101,12,56

[[ -x $src/build/bin/llama-logits ]] || { echo "run bench/llamacpp/get_llamacpp.sh first" >&2; exit 1; }
cmake -S "$src" -B "$src/build" -DLLAMA_BUILD_TESTS=ON >/dev/null
nice cmake --build "$src/build" -j "${JOBS:-2}" --target test-llama-archs
rm -rf "$work" && mkdir -p "$work/toy" "$work/logits"
regex="^($(IFS='|'; echo "${archs[*]}"))\$"
"$src/build/bin/test-llama-archs" -s "$seed" -d "$stdev" -o "$work/toy" -a "$regex"
for a in "${archs[@]}"; do
  "$src/build/bin/llama-logits" "$work/toy/$a-moe.gguf" "$ids" "$work/logits/$a.logits" >/dev/null
done
commit=$(git -C "$src" rev-parse --short HEAD)
rm -rf "$out"
PYTHONPATH=$src/gguf-py "$py" "$root/tools/reference/llamacpp_arch_fixtures.py" "$work/toy" \
  "$work/logits" "$out" --seed "$seed" --stdev "$stdev" --ids "$ids" --llama-cpp "$commit" \
  "${archs[@]}"
du -sh "$out"
if [[ -n $build ]]; then
  for a in "${archs[@]}"; do
    "$build/moex" logits -m "$work/toy/$a-moe.gguf" --prompt-ids "$ids" \
      --out "$work/logits/$a.moex" --force >/dev/null 2>&1
    "$py" "$root/tools/reference/compare_logits.py" "$work/logits/$a.logits" \
      "$work/logits/$a.moex" 128 "$a"
  done
fi
