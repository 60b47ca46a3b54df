"""Compares two raw float32 logit files ([n_tokens, vocab], as `moex logits`,
tools/reference/logits.py and bench/llamacpp's llama-logits write them).

  /usr/bin/python3 tools/reference/compare_logits.py A B VOCAB [LABEL]

Prints one JSON line: the largest |A - B| over all positions, the largest |A| (for
scale), the largest KL(softmax A || softmax B) in nats over positions, the share of
positions whose argmax agrees, and the last position's top-5 ids of each.
"""
import json
import sys

import numpy as np


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    vocab = int(sys.argv[3])
    a = np.fromfile(sys.argv[1], "<f4")
    b = np.fromfile(sys.argv[2], "<f4")
    if a.size != b.size or a.size % vocab != 0 or a.size == 0:
        sys.exit(f"sizes differ or are not rows of {vocab}: {a.size} vs {b.size} floats")
    a, b = a.reshape(-1, vocab), b.reshape(-1, vocab)
    la, lb = log_softmax(a), log_softmax(b)
    kl = (np.exp(la) * (la - lb)).sum(-1)
    print(json.dumps({
        "label": sys.argv[4] if len(sys.argv) == 5 else "",
        "tokens": a.shape[0],
        "max_abs_diff": float(np.abs(a - b).max()),
        "max_abs_a": float(np.abs(a).max()),
        "max_kl_nats": float(kl.max()),
        "argmax_agree": float((a.argmax(-1) == b.argmax(-1)).mean()),
        "top5_last_a": a[-1].argsort()[::-1][:5].tolist(),
        "top5_last_b": b[-1].argsort()[::-1][:5].tolist(),
    }))


if __name__ == "__main__":
    main()
