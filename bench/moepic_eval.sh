#!/bin/bash
# MoEpic's evidence (issue 15) on EVALUATION.md's traces, after bench/policy_eval.sh has
# recorded and split them into OUT_DIR/traces (or OUT_DIR/traces is a link to them):
#  1. the ablation ladder of the paper's Table 3 (and the split extremes of §2.3) on every
#     set's test split at 10/25/50 %, costed as OLMoE-1B-7B on the CPU and RTX 4090
#     profiles, each learning from the set's first 70 %;
#  2. memory efficiency as in Fig. 8: moepic and lru (and nextgate+lru) over budgets from
#     5 % to 60 %, and the smallest budget that reaches each target modelled TPOT;
#  3. the sweep's HTML page, with moepic's per-layer budgets and splits drawn.
#
#   bench/moepic_eval.sh BUILD_DIR OUT_DIR
#
# CPU_PROFILE as in policy_eval.sh. For a shorter run on a busy machine: SETS (default
# "sharegpt gsm8k mtbench") and LADDER_BUDGETS (default 10%,25%,50%) for step 1, SWEEP_SET
# (default sharegpt) for step 2. Results go to OUT_DIR/moepic/, tables to
# OUT_DIR/moepic/tables.md.
set -euo pipefail
usage="usage: moepic_eval.sh BUILD_DIR OUT_DIR"
build=${1:?$usage}
out=${2:?$usage}
root=$(cd "$(dirname "$0")/.." && pwd)
cpu_profile=${CPU_PROFILE:-$root/bench/hardware/amd-epyc-zen5-2vcpu.json}
moex="$build/moex"
traces="$out/traces"
res="$out/moepic"
mkdir -p "$res"
for set in sharegpt gsm8k mtbench; do
  for f in "$traces/$set.test.trace" "$traces/$set.learn.trace"; do
    [ -f "$f" ] || { echo "missing $f: run bench/policy_eval.sh first" >&2; exit 1; }
  done
done

ladder="moepic,moepic:prefetch=random,moepic:evict=random,moepic:budgets=uniform,theta=0.5"
ladder+=",moepic:evict=lru,moepic:evict=lfu,moepic:theta=1,moepic:theta=0"
ladder+=",moepic:theta=1,prefetch=none,lru,oracle+belady"
for set in ${SETS:-sharegpt gsm8k mtbench}; do
  for hw in cpu:"$cpu_profile" rtx4090:rtx4090; do
    label=${hw%%:*}
    echo "ablations: $set on $label" >&2
    "$moex" sim --trace "$traces/$set.test.trace" --learn-from "$traces/$set.learn.trace" \
      --policy "$ladder" --budget "${LADDER_BUDGETS:-10%,25%,50%}" --hardware "${hw#*:}" --scale-to olmoe:full \
      --json >"$res/ablation-$set-$label.json"
  done
done

sweep=5%,10%,15%,20%,25%,30%,40%,50%,60%
sweep_set=${SWEEP_SET:-sharegpt}
for hw in cpu:"$cpu_profile" rtx4090:rtx4090; do
  label=${hw%%:*}
  echo "memory sweep: $sweep_set on $label" >&2
  "$moex" sim --trace "$traces/$sweep_set.test.trace" --learn-from "$traces/$sweep_set.learn.trace" \
    --policy moepic,lru,nextgate+lru --budget "$sweep" --hardware "${hw#*:}" \
    --scale-to olmoe:full --json --html "$res/sweep-$sweep_set-$label.html" \
    >"$res/sweep-$sweep_set-$label.json"
done
python3 "$root/tools/bench/moepic_eval_table.py" "$res" >"$res/tables.md"
echo "tables: $res/tables.md" >&2
