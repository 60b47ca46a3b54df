#!/bin/bash
# Measured against modelled: decode tok/s of the engine on an OLMoE-1B-7B-shaped model whose
# MoE layers follow a recorded trace's routing (--replay-routing), next to the simulator's
# modelled figure for the same trace, policy, budget and a hardware profile measured on this
# host (EVALUATION.md, "Then measured, not modelled").
#
#   bench/replay_vs_sim.sh BUILD_DIR MODEL_DIR TRACE PROFILE OUT_DIR [BUDGETS] [POLICIES]
#
# MODEL_DIR: `moex random-model --arch olmoe --size full --out MODEL_DIR` (its expert store is
# packed on the first run). TRACE: one request recorded with --hidden f32 (so next-gate
# speculation can run), e.g.
#   moex trace record --prompts one.txt --prompt-format text --max-tokens 161 --hidden f32
# The engine runs that request's prompt length and pass count, so engine and simulator replay
# exactly the same passes from a cold cache (both hit rates are printed to show it).
# BUDGETS default "10% 25%", POLICIES "lru nextgate+lru". LEARN_FROM: traces (comma-separated)
# that learning policies (moe-infinity, moepic, fmoe) learn from first, in both runs.
# Writes OUT_DIR/<policy>-<budget>.{engine,sim}.json and prints one line per run.
set -euo pipefail
usage="usage: replay_vs_sim.sh BUILD_DIR MODEL_DIR TRACE PROFILE OUT_DIR [BUDGETS] [POLICIES]"
build=${1:?$usage}
model=${2:?$usage}
trace=${3:?$usage}
profile=${4:?$usage}
out=${5:?$usage}
budgets=${6:-10% 25%}
policies=${7:-lru nextgate+lru}
learn=()
if [ -n "${LEARN_FROM:-}" ]; then learn=(--learn-from "$LEARN_FROM"); fi
mkdir -p "$out"
# A request of P prompt tokens and I passes (one prefill, I-1 decodes) holds P+I-1 tokens.
read -r prompt_tokens gen_tokens < <("$build/moex" trace info "$trace" --json | python3 -c '
import json, sys
c = json.load(sys.stdin)["counts"]
if c["requests"] != 1:
    sys.exit("replay_vs_sim.sh: the trace has %d requests; record one, so that " % c["requests"] +
             "engine and simulator replay the same passes")
print(c["tokens"] - c["iterations"] + 1, c["iterations"])')
printf '%-14s %6s %12s %12s %8s %10s %10s\n' policy budget "engine tok/s" "model tok/s" ratio \
  "engine hit" "model hit"
for policy in $policies; do
  for budget in $budgets; do
    name="${policy//[:,=]/_}-${budget%\%}"
    "$build/moex" bench --model "$model" --host-budget "$budget" --policy "$policy" \
      --replay-routing "$trace" --prompt-tokens "$prompt_tokens" --gen-tokens "$gen_tokens" \
      "${learn[@]}" --json >"$out/$name.engine.json"
    "$build/moex" sim --trace "$trace" --policy "$policy" --budget "$budget" \
      --hardware "$profile" --scale-to olmoe:full "${learn[@]}" --json >"$out/$name.sim.json"
    python3 - "$out/$name.engine.json" "$out/$name.sim.json" "$policy" "$budget" <<'PY'
import json, sys
engine = json.load(open(sys.argv[1]))
sim = json.load(open(sys.argv[2]))
sim = sim["results"][0] if "results" in sim else sim
replay = engine["routing_replay"]
if replay["replayed_tokens"] != replay["trace_tokens"]:
    sys.exit(f"replay_vs_sim.sh: the engine replayed {replay['replayed_tokens']} rows of the "
             f"trace's {replay['trace_tokens']}")
measured = engine["decode_tokens_per_s"]
modelled = sim["modelled"]["decode_tokens_per_s"]
print(f"{sys.argv[3]:<14} {sys.argv[4]:>6} {measured:12.2f} {modelled:12.2f} "
      f"{measured / modelled:8.2f} {engine['offload']['hit_rate']:10.3f} {sim['hit_rate']:10.3f}")
PY
  done
done
