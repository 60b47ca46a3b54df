#!/bin/bash
# ProMoE's evidence (issue 14) on EVALUATION.md's traces, after bench/policy_eval.sh has
# recorded and split them into OUT_DIR/traces:
#  1. predictors side by side (§3.2, Fig. 8): learned, skip-based and token-based, at
#     distance 1 and 2 (stride), on every set's test split, learning from the set's first 70 %:
#     precision, recall and GoodPred of the platform's prediction metrics, and the learned
#     predictor's held-out accuracy;
#  2. the ablation of Fig. 12 on a set's test split (GSM8K) at 25 %, costed as OLMoE-1B-7B on the CPU
#     and RTX 4090 profiles: LRU, per-layer LRU, + prefetch (whole-expert transfers),
#     + chunking (three chunks per expert, as the paper), + early preemption, and moex's
#     default chunk; TTFT (prefill) and TPOT (decode) separately.
#
#   bench/promoe_eval.sh BUILD_DIR OUT_DIR
#
# CPU_PROFILE as in policy_eval.sh; for a shorter run, SETS (default "sharegpt gsm8k
# mtbench") for step 1 and ABLATION_SET (default gsm8k) for step 2. Results go to OUT_DIR/promoe/, tables to
# OUT_DIR/promoe/tables.md.
set -euo pipefail
usage="usage: promoe_eval.sh BUILD_DIR OUT_DIR"
build=${1:?$usage}
out=${2:?$usage}
root=$(cd "$(dirname "$0")/.." && pwd)
cpu_profile=${CPU_PROFILE:-$root/bench/hardware/amd-epyc-zen5-2vcpu.json}
moex="$build/moex"
traces="$out/traces"
res="$out/promoe"
mkdir -p "$res"
for set in sharegpt gsm8k mtbench; do
  for f in "$traces/$set.test.trace" "$traces/$set.learn.trace"; do
    [ -f "$f" ] || { echo "missing $f: run bench/policy_eval.sh first" >&2; exit 1; }
  done
done

predictors="promoe,promoe:distance=1,promoe:predictor=skip,promoe:predictor=skip,distance=1"
predictors+=",promoe:predictor=token"
for set in ${SETS:-sharegpt gsm8k mtbench}; do
  echo "predictors on $set" >&2
  "$moex" sim --trace "$traces/$set.test.trace" --learn-from "$traces/$set.learn.trace" \
    --policy "$predictors" --budget 25% --hardware rtx4090 --scale-to olmoe:full \
    --json >"$res/predictors-$set.json"
done

# OLMoE-1B-7B's experts have 1024 neurons: 1024 = one chunk, 342 = three (the paper's).
ladder="lru,promoe:prefetch=0,preempt=none,promoe:preempt=none,promoe"
aset=${ABLATION_SET:-gsm8k}
for hw in cpu:"$cpu_profile" rtx4090:rtx4090; do
  label=${hw%%:*}
  for chunk in 1024 342 0; do
    echo "ablation on $label, chunk $chunk" >&2
    "$moex" sim --trace "$traces/$aset.test.trace" --learn-from "$traces/$aset.learn.trace" \
      --policy "$ladder" --budget 25% --hardware "${hw#*:}" --scale-to olmoe:full \
      --chunk-neurons "$chunk" --json >"$res/ablation-$label-chunk$chunk.json"
  done
done
python3 "$root/tools/bench/promoe_eval_table.py" "$res" >"$res/tables.md"
echo "tables: $res/tables.md" >&2
