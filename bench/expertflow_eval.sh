#!/bin/bash
# ExpertFlow's evidence (issue 17) on EVALUATION.md's traces, after bench/policy_eval.sh has
# recorded and split them into OUT_DIR/traces:
#  1. the routing-path predictor's batch-level accuracy (Eq. 7, defined in
#     src/policy/expertflow/routing_path_accuracy.h) on each set's held-out 30 %, learning from its
#     first 70 % (and GSM8K / MT-Bench learning from ShareGPT), for batches of 1, 8, 16, 32
#     requests, beside the most-frequent-experts and previous-token predictors;
#     (a case bench/policy_eval.sh already replayed with expertflow is read from its
#     results, OUT_DIR/results/CASE-rtx4090.json, at 25 %, rather than replayed again);
#  2. ablations at 25 % on one set, costed as OLMoE-1B-7B on the CPU and RTX 4090 profiles:
#     lru, PLEC with the frequency predictor, PLEC with the learned predictor (sigma >= 0.5
#     and top-k binarisation), without cancelling mis-prefetches, and oracle+belady;
#  3. optionally (T5=1, needs python3-torch) the paper's T5-style encoder-decoder trained on
#     the same split (tools/expertflow/t5_predictor.py), for the predictor's justification.
#
#   bench/expertflow_eval.sh BUILD_DIR OUT_DIR
#
# CPU_PROFILE as in policy_eval.sh; SETS (default "sharegpt gsm8k mtbench") for step 1,
# ABLATION_SET (default sharegpt) for step 2, T5_EPOCHS (default 30). Results go to
# OUT_DIR/expertflow/, tables to OUT_DIR/expertflow/tables.md.
set -euo pipefail
usage="usage: expertflow_eval.sh BUILD_DIR OUT_DIR"
build=${1:?$usage}
out=${2:?$usage}
root=$(cd "$(dirname "$0")/.." && pwd)
cpu_profile=${CPU_PROFILE:-$root/bench/hardware/amd-epyc-zen5-2vcpu.json}
moex="$build/moex"
traces="$out/traces"
res="$out/expertflow"
mkdir -p "$res"
for set in ${SETS:-sharegpt gsm8k mtbench}; do
  for f in "$traces/$set.test.trace" "$traces/$set.learn.trace"; do
    [ -f "$f" ] || { echo "missing $f: run bench/policy_eval.sh first" >&2; exit 1; }
  done
done

# case : test split : learning trace
cases=""
for set in ${SETS:-sharegpt gsm8k mtbench}; do cases+=" $set:$set.test:$set.learn"; done
if [ -f "$traces/sharegpt.trace" ]; then
  for set in ${SETS:-sharegpt gsm8k mtbench}; do
    [ "$set" = sharegpt ] || cases+=" $set-from-sharegpt:$set.test:sharegpt"
  done
fi
for c in $cases; do
  IFS=: read -r name test learn <<<"$c"
  if grep -qs '"expertflow"' "$out/results/$name-rtx4090.json"; then
    echo "predictor accuracy on $name: from $out/results/$name-rtx4090.json" >&2
    continue
  fi
  echo "predictor accuracy on $name" >&2
  "$moex" sim --trace "$traces/$test.trace" --learn-from "$traces/$learn.trace" \
    --policy expertflow --budget 25% --hardware rtx4090 --scale-to olmoe:full \
    --json >"$res/accuracy-$name.json"
done

aset=${ABLATION_SET:-sharegpt}
ladder="lru,expertflow:predictor=frequency,expertflow,expertflow:threshold=0"
ladder+=",expertflow:cancel=0,oracle+belady"
for hw in cpu:"$cpu_profile" rtx4090:rtx4090; do
  label=${hw%%:*}
  echo "ablation on $label" >&2
  "$moex" sim --trace "$traces/$aset.test.trace" --learn-from "$traces/$aset.learn.trace" \
    --policy "$ladder" --budget 25% --hardware "${hw#*:}" --scale-to olmoe:full \
    --json >"$res/ablation-$label.json"
done

if [ "${T5:-0}" = 1 ]; then
  echo "T5-style reference predictor on $aset" >&2
  /usr/bin/python3 "$root/tools/expertflow/t5_predictor.py" "$traces/$aset.learn.trace" \
    "$traces/$aset.test.trace" --epochs "${T5_EPOCHS:-30}" --json "$res/t5-$aset.json"
fi
python3 "$root/tools/bench/expertflow_eval_table.py" "$res" "$out/results" >"$res/tables.md"
echo "tables: $res/tables.md" >&2
