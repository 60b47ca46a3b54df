#!/usr/bin/env bash
# The two decode row orders (src/kernels/decode_order.h) side by side on one model:
#   bench/decode_order_ab.sh BUILD_DIR MODEL [PAIRS] [PROMPT_TOKENS] [GEN_TOKENS]
# Alternates bench/engine_run.sh with MOEX_DECODE_ORDER=interleaved and =sequential, PAIRS
# times, each run in its own autogroup at nice -20 when allowed; prints one JSON line per
# run (engine_run.sh's summary plus "order" and "pair") and a median line per order.
set -euo pipefail
build=${1:?usage: decode_order_ab.sh BUILD_DIR MODEL [PAIRS] [PROMPT_TOKENS] [GEN_TOKENS]}
model=${2:?usage: decode_order_ab.sh BUILD_DIR MODEL [PAIRS] [PROMPT_TOKENS] [GEN_TOKENS]}
pairs=${3:-3}
prompt=${4:-128}
gen=${5:-32}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for pair in $(seq 1 "$pairs"); do
  for order in interleaved sequential; do
    line=$(MOEX_DECODE_ORDER=$order setsid bash -c \
      'echo -20 > /proc/self/autogroup 2>/dev/null || true; exec "$0" "$@"' \
      "$here/engine_run.sh" "$build" "$model" "$prompt" "$gen" | tail -1)
    echo "$line" | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); d["order"]=sys.argv[1]; d["pair"]=int(sys.argv[2]); print(json.dumps(d))' "$order" "$pair" | tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for order in ("interleaved", "sequential"):
    r = [x for x in rows if x["order"] == order]
    print(json.dumps({"order": order, "runs": len(r),
                      "median_decode_tokens_per_s": statistics.median(x["decode_tokens_per_s"] for x in r),
                      "median_decode_weight_gb_per_s": statistics.median(x["decode_weight_gb_per_s"] for x in r),
                      "median_share_of_bandwidth": statistics.median(x["decode_share_of_bandwidth"] for x in r)}))
pairs = {}
for x in rows:
    pairs.setdefault(x["pair"], {})[x["order"]] = x["decode_tokens_per_s"]
ratios = [p["sequential"] / p["interleaved"] for p in pairs.values() if len(p) == 2]
print(json.dumps({"sequential_over_interleaved_decode_per_pair": [round(r, 3) for r in ratios],
                  "median": statistics.median(ratios)}))
PY
