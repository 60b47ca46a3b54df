#!/usr/bin/env python3
"""Helpers of bench/decode_order_ab.sh.

    decode_order_summary.py tag ORDER PAIR      # stdin: engine_run.sh's summary line
    decode_order_summary.py summary FILE        # FILE: the tagged lines of all runs

`tag` adds "order" and "pair" to one run's JSON line; `summary` prints one median line per
order and the per-pair ratio sequential / interleaved of decode tokens/s.
"""
import json
import statistics
import sys


def tag(order, pair):
    d = json.loads(sys.stdin.read())
    d["order"] = order
    d["pair"] = int(pair)
    print(json.dumps(d))


def summary(path):
    rows = [json.loads(line) for line in open(path)]
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
    print(json.dumps({"sequential_over_interleaved_decode_per_pair": [round(v, 3) for v in ratios],
                      "median": statistics.median(ratios)}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["tag"] and len(sys.argv) == 4:
        tag(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["summary"] and len(sys.argv) == 3:
        summary(sys.argv[2])
    else:
        sys.exit(__doc__)
