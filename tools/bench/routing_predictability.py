#!/usr/bin/env python3
"""How much of a trace's decode routing an online predictor can know ahead (issue 39).

    routing_predictability.py TRACE [EXPERTS ...]

For each cache size in experts (default: 10 %, 25 % and 50 % of layers x experts), over the
decode tokens of every request (the prompt is routing too, but not scored):

* static-hindsight: the best fixed set of that many (layer, expert) pairs for the whole
  trace, chosen knowing every decode token (an upper bound for any frequency rule that does
  not adapt per request);
* request-hindsight: the best fixed set per request, knowing its decode tokens;
* online-frequency: before each decode token, the pairs with the highest routing rate per
  decode token over the earlier requests plus the rate over this request's decode tokens so
  far, re-chosen at every token for free (no loads, no cycle): how well rates predict (a
  prompt's routing predicted decode routing worse than these on the demo model, so prompts
  are left out);
* persistence: P(routed at token t+1 | routed at t) against the uniform rate top-k / experts.

Each figure is a share of the routed (token, layer) choices it covers, comparable with a
decode hit rate. Reads the trace with tools/expertflow/trace_paths.py (ids only).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "expertflow"))
from trace_paths import read_trace  # noqa: E402


def routed_matrix(ids, layers, experts):
    """Bool [tokens, layers * experts] from [tokens, layers, k] ids."""
    t = ids.shape[0]
    m = np.zeros((t, layers * experts), bool)
    rows = np.repeat(np.arange(t), ids.shape[1] * ids.shape[2])
    cols = (np.arange(layers)[None, :, None] * experts + ids.astype(np.int64)).reshape(-1)
    m[rows, cols] = True
    return m


def top(scores, n):
    # Ties go to the lower index, so the choice is reproducible.
    order = np.lexsort((np.arange(scores.size), -scores))
    return order[:n]


def main():
    header, requests = read_trace(sys.argv[1])
    model = header["model"]
    layers, experts, k = len(model["moe_layers"]), model["num_experts"], model["top_k"]
    keys = layers * experts
    sizes = [int(a) for a in sys.argv[2:]] or [keys // 10, keys // 4, keys // 2]
    per_request = []
    for r in requests:
        m = routed_matrix(r["ids"], layers, experts)
        per_request.append((m[: len(r["prompt"])], m[len(r["prompt"]):]))
    decode = sum(d.shape[0] for _, d in per_request)
    choices = decode * layers * k
    print(f"{sys.argv[1]}: {len(requests)} requests, {decode} decode tokens, "
          f"{layers} MoE layers x {experts} experts, top-{k}")
    all_decode = np.concatenate([d for _, d in per_request if len(d)])
    counts = all_decode.sum(0)
    same = sum((d[1:] & d[:-1]).sum() for _, d in per_request if len(d) > 1)
    before = sum(d[:-1].sum() for _, d in per_request if len(d) > 1)
    print(f"persistence: P(routed at t+1 | routed at t) = {same / max(before, 1):.3f} "
          f"(uniform {k / experts:.3f})")
    for n in sizes:
        static = counts[top(counts.astype(float), n)].sum() / choices
        request = sum(np.sort(d.sum(0))[::-1][:n].sum() for _, d in per_request) / choices
        seen, seen_tokens, online = np.zeros(keys), 0, 0
        for _, d in per_request:
            mine = np.zeros(keys)
            for t in range(d.shape[0]):
                rate = seen / max(seen_tokens, 1) + mine / max(t, 1)
                online += d[t, top(rate, n)].sum()
                mine += d[t]
            seen += mine
            seen_tokens += d.shape[0]
        print(f"{n} experts ({100 * n / keys:.0f} %): static-hindsight {static:.3f}, "
              f"request-hindsight {request:.3f}, online-frequency {online / choices:.3f}")


if __name__ == "__main__":
    main()
