#!/usr/bin/env python3
"""Decode weight streaming as a share of the mean measured bandwidth (bench/engine_run.sh).

    engine_share.py MEMBW_BEFORE_JSON BENCH_JSON MEMBW_AFTER_JSON
"""
import json, sys
b, r, a = (json.loads(x) for x in sys.argv[1:4])
bw = (b["read_gb_per_s"] + a["read_gb_per_s"]) / 2
print(json.dumps({"membw_gb_per_s": bw,
                  "decode_weight_gb_per_s": r["decode_weight_gb_per_s"],
                  "decode_share_of_bandwidth": r["decode_weight_gb_per_s"] / bw,
                  "decode_tokens_per_s": r["decode_tokens_per_s"],
                  "prefill_tokens_per_s": r["prefill_tokens_per_s"],
                  "load_ms": r["load_ms"]}))
