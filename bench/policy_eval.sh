#!/bin/bash
# EVALUATION.md's protocol for every offloading policy, from scratch: records the demo
# model's ShareGPT (500), GSM8K (first 500) and MT-Bench (80) traces with everything a
# policy may read, splits each 70/30 by request, then replays the test parts through the
# baselines and the given policies at 10/25/50 % budgets, costed as OLMoE-1B-7B on a CPU
# profile and on the RTX 4090 profile. Policies learn (--learn-from) from the same set's
# first 70 %, and across sets from all of ShareGPT.
#
#   bench/policy_eval.sh BUILD_DIR OUT_DIR [EXTRA_POLICY_SPECS]
#
# EXTRA_POLICY_SPECS: comma-separated specs added to the baselines ("moe-infinity,moepic").
# CPU_PROFILE: built-in name or profile JSON measured on this host (default
# bench/hardware/amd-epyc-zen5-2vcpu.json); BUDGETS (default 10%,25%,50%); PROMPTS (the
# prompt sets' directory, default ../shared/data/prompts beside the repository); BASELINES
# (default lru,lfu,nextgate+lru,belady,oracle+belady; keep lru and oracle+belady for the
# gap column); CASES (default all five, e.g. "sharegpt gsm8k" for fewer); LIMIT (at
# most this many prompts of each set, for a shorter run on a busy machine; default: all);
# STATIC: specs that learn nothing from traces (e.g. "lru,lfu,belady"), replayed once per
# case without --learn-from (same results, without re-reading the learning trace for each
# budget) and merged into the same results; PROFILES (default "cpu rtx4090": which of the
# two profiles to replay).
# Traces are kept in OUT_DIR/traces and reused; tables go to OUT_DIR/tables.md.
set -euo pipefail
usage="usage: policy_eval.sh BUILD_DIR OUT_DIR [EXTRA_POLICY_SPECS]"
build=${1:?$usage}
out=${2:?$usage}
extra=${3:-}
root=$(cd "$(dirname "$0")/.." && pwd)
prompts=${PROMPTS:-$root/../shared/data/prompts}
cpu_profile=${CPU_PROFILE:-$root/bench/hardware/amd-epyc-zen5-2vcpu.json}
budgets=${BUDGETS:-10%,25%,50%}
moex="$build/moex"
# `ondemand` is `lru` here (on-demand fetching, LRU eviction), so it is not replayed twice.
policies=${BASELINES:-lru,lfu,nextgate+lru,belady,oracle+belady}${extra:+,$extra}
traces="$out/traces"
mkdir -p "$traces" "$out/results"

for set in sharegpt:sharegpt_v3_filtered_500.json:500 gsm8k:gsm8k_test.jsonl:500 \
  mtbench:mt_bench_question.jsonl:80; do
  IFS=: read -r name file count <<<"$set"
  if [ -n "${LIMIT:-}" ] && [ "$LIMIT" -lt "$count" ]; then count=$LIMIT; fi
  if [ ! -f "$traces/$name.trace" ]; then
    echo "recording $name ($count prompts)" >&2
    "$moex" trace record --model "$root/models/olmoe-demo" --prompts "$prompts/$file" \
      --limit "$count" --max-prompt-tokens 256 --max-tokens 32 --probs f16 --hidden f32 \
      --pooled --out "$traces/$name.trace" --json >"$traces/$name-record.json"
  fi
  if [ ! -f "$traces/$name.test.trace" ]; then
    "$moex" trace split "$traces/$name.trace" --learn "$traces/$name.learn.trace" \
      --test "$traces/$name.test.trace" --json >"$traces/$name-split.json"
  fi
done

# case name : test trace : learning trace
cases="sharegpt:sharegpt.test:sharegpt.learn gsm8k:gsm8k.test:gsm8k.learn
mtbench:mtbench.test:mtbench.learn gsm8k-from-sharegpt:gsm8k.test:sharegpt
mtbench-from-sharegpt:mtbench.test:sharegpt"
for c in $cases; do
  IFS=: read -r name test learn <<<"$c"
  if [ -n "${CASES:-}" ] && [[ " $CASES " != *" $name "* ]]; then continue; fi
  for hw in cpu:"$cpu_profile" rtx4090:rtx4090; do
    label=${hw%%:*}
    if [[ " ${PROFILES:-cpu rtx4090} " != *" $label "* ]]; then continue; fi
    echo "replaying $name on $label" >&2
    "$moex" sim --trace "$traces/$test.trace" --learn-from "$traces/$learn.trace" \
      --policy "$policies" --budget "$budgets" --hardware "${hw#*:}" --scale-to olmoe:full \
      --json >"$out/results/$name-$label.json"
    if [ -n "${STATIC:-}" ]; then
      "$moex" sim --trace "$traces/$test.trace" --policy "$STATIC" --budget "$budgets" \
        --hardware "${hw#*:}" --scale-to olmoe:full --json >"$out/results/$name-$label.static.json"
      python3 - "$out/results/$name-$label.json" "$out/results/$name-$label.static.json" <<'PY'
import json, sys
main, static = (json.load(open(p)) for p in sys.argv[1:3])
def results(j):  # `moex sim --json` prints one result as the object itself.
    return j["results"] if "results" in j else [j]
merged = {k: main[k] for k in ("trace", "model", "hardware")}
merged["results"] = results(static) + results(main)
json.dump(merged, open(sys.argv[1], "w"), indent=1)
PY
      rm "$out/results/$name-$label.static.json"
    fi
  done
done
python3 "$root/tools/bench/policy_eval_table.py" "$out" --summary >"$out/tables.md"
python3 "$root/tools/bench/policy_eval_table.py" "$out" >>"$out/tables.md"
echo "tables: $out/tables.md" >&2
