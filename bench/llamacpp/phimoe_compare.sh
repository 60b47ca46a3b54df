#!/usr/bin/env bash
# Phi-3.5-MoE logits of moex, llama.cpp and the PyTorch reference on the same random tiny
# phimoe (f32; the HF checkpoint and the GGUF hold the same weights: same seed), and of the
# reference with each of llama.cpp's divergences from HF alone
# (tools/reference/phimoe_llamacpp.py), to tell which side follows HF and why the other
# differs. One JSON line per comparison (tools/reference/compare_logits.py). Never run in CI.
#
#   bench/llamacpp/phimoe_compare.sh BUILD_DIR LLAMA_LOGITS [WORK=/tmp/moex-phimoe-llamacpp]
#
# LLAMA_LOGITS: bench/llamacpp/llama_logits.c built against libllama (get_llamacpp.sh puts
# it at /work/data/llama.cpp/build/bin/llama-logits). Cases: original context 256 with 24
# ids (both sides use the short factors) and 300 ids (both long), original 32 with 24 ids
# (HF short, llama.cpp long: its context of 24 is padded to 256 > 32).
set -euo pipefail
build=$(cd "${1:?usage: phimoe_compare.sh BUILD_DIR LLAMA_LOGITS [WORK]}" && pwd)
llama_logits=${2:?usage: phimoe_compare.sh BUILD_DIR LLAMA_LOGITS [WORK]}
work=${3:-/tmp/moex-phimoe-llamacpp}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=/usr/bin/python3
ref=$root/tools/reference
moex=$build/moex
vocab=512  # the tiny phimoe's
mkdir -p "$work"

ids() {  # N: N fixed pseudo-random ids in [3, 512)
  "$py" -c "import random; random.seed(7); print(','.join(str(random.randrange(3, 512)) for _ in range($1)))"
}
compare() {  # A B LABEL
  "$py" "$ref/compare_logits.py" "$1" "$2" "$vocab" "$3"
}

for case in 256:24 256:300 32:24; do
  orig=${case%%:*} n=${case##*:}
  hf=$work/phimoe-tiny-o$orig gguf=$work/phimoe-tiny-o$orig.gguf
  [[ -f $hf/config.json ]] || "$moex" random-model --arch phimoe --size tiny --dtype f32 \
    --rope-original "$orig" --no-tokenizer --out "$hf" >&2
  [[ -f $gguf ]] || "$moex" random-model --arch phimoe --size tiny --dtype f32 \
    --rope-original "$orig" --format gguf --out "$gguf" >&2
  p=$work/o$orig-n$n
  list=$(ids "$n")
  "$moex" logits --threads 2 --model "$hf" --prompt-ids "$list" --out "$p.moex-hf.f32" >/dev/null
  "$moex" logits --threads 2 --model "$gguf" --prompt-ids "$list" --out "$p.moex-gguf.f32" >/dev/null
  "$llama_logits" "$gguf" "$list" "$p.llama.f32" "$n" 2 2>/dev/null
  "$py" "$ref/logits.py" --model "$hf" --ids "$list" --out "$p.hf.f32" 2>/dev/null
  for parts in norm router rope norm,router,rope; do
    "$py" "$ref/phimoe_llamacpp.py" --model "$hf" --ids "$list" --as-llamacpp "$parts" \
      --n-ctx "$n" --out "$p.as-llamacpp-$parts.f32" 2>/dev/null
  done
  tag="original $orig, $n ids"
  compare "$p.hf.f32" "$p.moex-hf.f32" "$tag: HF reference vs moex (HF checkpoint)"
  compare "$p.hf.f32" "$p.moex-gguf.f32" "$tag: HF reference vs moex (GGUF)"
  compare "$p.hf.f32" "$p.llama.f32" "$tag: HF reference vs llama.cpp (GGUF)"
  compare "$p.as-llamacpp-norm,router,rope.f32" "$p.llama.f32" \
    "$tag: reference with llama.cpp's norm+router+rope vs llama.cpp"
  for parts in norm router rope; do
    compare "$p.hf.f32" "$p.as-llamacpp-$parts.f32" "$tag: HF reference vs only llama.cpp's $parts"
  done
done
