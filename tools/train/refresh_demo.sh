#!/usr/bin/env bash
# After training: export a checkpoint as the shipped demo model and regenerate everything
# derived from its weights, in order (each step reads the previous one's output):
#   1. models/olmoe-demo (export.py)          2. validation losses and samples (evaluate.py)
#   3. routing analysis, trained and at init, and its concentration beside the real OLMoE's
#   4. models/README.md (write_model_readme.py)
#   5. the three shipped routing traces (tests/demo_traces_test.cc checks they match)
#   6. the policy sweep (bench/sim_sweep.sh) into bench/results/sim_sweep
#
#   tools/train/refresh_demo.sh CKPT BUILD_DIR [WORK_DIR]
# CKPT: the training checkpoint (OUT/ckpt.pt); BUILD_DIR: a built moex; WORK_DIR (default
# /var/tmp/moex-train) receives the intermediate JSON/markdown and the run's metrics are
# read from CKPT's directory. Paste the tables it prints into docs/benchmarks.md
# ("Policy sweep") afterwards.
set -euo pipefail
ckpt=${1:?usage: refresh_demo.sh CKPT BUILD_DIR [WORK_DIR]}
build=${2:?usage: refresh_demo.sh CKPT BUILD_DIR [WORK_DIR]}
work=${3:-/var/tmp/moex-train}
root=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
model=$root/models/olmoe-demo
prompts=$root/../shared/data/prompts
mkdir -p "$work"
cd "$root"

echo "== export" >&2
$py tools/train/export.py --ckpt "$ckpt" --out "$model"
echo "== evaluate" >&2
$py tools/train/evaluate.py --model "$model" --threads 2 --max-seqs 4 --samples 40 --out "$work/eval.json"
echo "== routing (trained, then the step-0 initialisation of the same seed)" >&2
$py tools/train/analyze_routing.py --model "$model" --threads 2 --max-seqs 8 --out-md "$work/routing.md" \
  --out-json "$work/routing.json"
if [[ ! -f $work/init/ckpt.pt ]]; then
  $py tools/train/train.py --out "$work/init" --max-steps 0 >/dev/null
fi
$py tools/train/analyze_routing.py --model "$work/init/ckpt.pt" --threads 2 --max-seqs 8 \
  --out-md "$work/routing_init.md" --out-json "$work/routing_init.json"
echo "== routing concentration (every validation token, one domain at a time), beside the real OLMoE's" >&2
$py tools/train/routing_concentration.py --model "$model" --threads 2 \
  --real-log "$root/../shared/data/routing/olmoe-1b-7b-0924_layer0_gsm8k_vllm.jsonl" \
  --out-json "$work/concentration.json" >"$work/concentration.md"
echo "== models/README.md" >&2
$py tools/train/write_model_readme.py --model "$model" --eval "$work/eval.json" \
  --routing "$work/routing.md" --routing-init "$work/routing_init.md" \
  --metrics "$(dirname "$ckpt")/metrics.jsonl" --concentration "$work/concentration.json" --notes tools/train/model_readme_notes.md
echo "== routing traces" >&2
for spec in sharegpt:sharegpt_v3_filtered_500.json:50 gsm8k:gsm8k_test.jsonl:50 \
  mtbench:mt_bench_question.jsonl:40; do
  IFS=: read -r name file limit <<<"$spec"
  "$build/moex" trace record --model "$model" --prompts "$prompts/$file" --limit "$limit" \
    --max-prompt-tokens 256 --max-tokens 32 --probs none --out "$model/traces/$name.trace" >&2
  "$build/moex" trace info "$model/traces/$name.trace" --json >"$work/$name-info.json"
done
echo "== policy sweep" >&2
bench/sim_sweep.sh "$build" "$work/sweep" 100
mkdir -p bench/results/sim_sweep
cp "$work"/sweep/*.json "$work"/sweep/*.html bench/results/sim_sweep/
