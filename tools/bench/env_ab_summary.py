#!/usr/bin/env python3
"""Helpers of bench/env_ab.sh.

    env_ab_summary.py tag VAR VALUE PAIR     # stdin: engine_run.sh's summary line
    env_ab_summary.py summary FILE           # FILE: the tagged lines of all runs

`tag` adds "var", "value" and "pair" to one run's JSON line; `summary` prints one line of
medians per value (in the order the values first ran) and, per pair, each value's decode
tokens/s and load time over the first value's.
"""
import json
import statistics
import sys


def tag(var, value, pair):
    d = json.loads(sys.stdin.read())
    d["var"] = var
    d["value"] = value
    d["pair"] = int(pair)
    print(json.dumps(d))


def summary(path):
    rows = [json.loads(line) for line in open(path)]
    values = list(dict.fromkeys(x["value"] for x in rows))
    for value in values:
        r = [x for x in rows if x["value"] == value]
        print(json.dumps({"var": r[0]["var"], "value": value, "runs": len(r),
                          **{"median_" + k: statistics.median(x[k] for x in r)
                             for k in ("decode_tokens_per_s", "prefill_tokens_per_s", "load_ms",
                                       "decode_weight_gb_per_s", "decode_share_of_bandwidth")}}))
    pairs = {}
    for x in rows:
        pairs.setdefault(x["pair"], {})[x["value"]] = x
    base = values[0]
    for value in values[1:]:
        for key in ("decode_tokens_per_s", "load_ms"):
            ratios = [p[value][key] / p[base][key] for p in pairs.values()
                      if base in p and value in p and p[base][key] > 0]
            if ratios:
                print(json.dumps({"ratio": f"{key} {value} / {base}",
                                  "per_pair": [round(v, 3) for v in ratios],
                                  "median": round(statistics.median(ratios), 3)}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["tag"] and len(sys.argv) == 5:
        tag(*sys.argv[2:5])
    elif sys.argv[1:2] == ["summary"] and len(sys.argv) == 3:
        summary(sys.argv[2])
    else:
        sys.exit(__doc__)
