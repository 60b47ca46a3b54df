"""Routing paths of a moex trace (docs/trace-format.md), for the ExpertFlow predictor study.

read_trace(path) -> (header, requests): every request in order of its request_begin, as a
dict with `id`, `prompt` (token ids), `tokens` (every routed token in pass order: the prompt,
then one generated token per decode pass), `passes` (token count of each of its passes) and
`ids` (uint16 [tokens, moe_layers, top_k]: each token's routed experts per MoE layer).
Only ids are kept; weights, probabilities and hidden states are skipped.
"""
import json
import struct

import numpy as np

_SIZES = {"none": 0, "f32": 4, "f16": 2, "bf16": 2}


def read_trace(path):
    with open(path, "rb") as f:
        if f.read(8) != b"MOEXTRC\n":
            raise ValueError(f"{path}: not a moex trace")
        version, json_len = struct.unpack("<II", f.read(8))
        header = json.loads(f.read(json_len))
        if version >= 2:
            f.read(8)  # header checksum
        model = header["model"]
        moe_layers = model["moe_layers"]
        experts, d = model["num_experts"], model["hidden_size"]
        probs, hidden = _SIZES[header.get("probs", "none")], _SIZES[header.get("hidden", "none")]
        pooled = bool(header.get("pooled", False))
        requests, order = {}, []
        while True:
            frame = f.read(24)
            if len(frame) < 24:
                raise ValueError(f"{path}: truncated")
            tag, _, length, _ = struct.unpack("<IIQQ", frame)
            payload = f.read(length)
            if tag == 5:
                break
            if tag == 2:
                rid, n = struct.unpack_from("<qq", payload, 0)
                prompt = np.frombuffer(payload, "<i4", n, 16).astype(np.int64)
                requests[rid] = {"id": rid, "prompt": prompt, "tokens": [], "passes": [], "ids": []}
                order.append(rid)
            elif tag == 3:
                _, n = struct.unpack_from("<qq", payload, 0)
                at = 16
                rids = np.frombuffer(payload, "<i8", n, at); at += 8 * n
                counts = np.frombuffer(payload, "<i8", n, at); at += 8 * n
                total = int(counts.sum())
                tokens = np.frombuffer(payload, "<i4", total, at); at += 4 * total
                if pooled:
                    at += 4 * n * d
                (n_gates,) = struct.unpack_from("<i", payload, at); at += 4
                gate_ids = []
                for _ in range(n_gates):
                    _, k = struct.unpack_from("<ii", payload, at); at += 8
                    gate_ids.append(np.frombuffer(payload, "<u2", total * k, at).reshape(total, k))
                    at += 2 * total * k + 4 * total * k + probs * total * experts + hidden * total * d
                per_token = np.stack(gate_ids, axis=1)  # [tokens, layers, k]
                start = 0
                for rid, c in zip(rids, counts):
                    c = int(c)
                    r = requests.setdefault(int(rid), {"id": int(rid), "prompt": np.zeros(0, np.int64),
                                                       "tokens": [], "passes": [], "ids": []})
                    r["tokens"].extend(int(t) for t in tokens[start:start + c])
                    r["passes"].append(c)
                    r["ids"].append(per_token[start:start + c])
                    start += c
        out = []
        for rid in order:
            r = requests[rid]
            r["tokens"] = np.array(r["tokens"], np.int64)
            r["ids"] = np.concatenate(r["ids"]) if r["ids"] else np.zeros((0, len(moe_layers), 1), np.uint16)
            out.append(r)
        return header, out


def paths(ids, experts):
    """Bool [tokens, layers, experts] from [tokens, layers, k] expert ids."""
    t, l, _ = ids.shape
    p = np.zeros((t, l, experts), bool)
    for j in range(ids.shape[2]):
        np.put_along_axis(p, ids[:, :, j:j + 1].astype(np.int64), True, axis=2)
    return p
