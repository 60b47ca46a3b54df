"""Cross-check bpe.py against HF's Rust `tokenizers` (through its npm build, since there is
no Python package here) on the corpus, llama.cpp's tokenizer test strings and edge cases.

  mkdir -p /var/tmp/tokcheck && (cd /var/tmp/tokcheck && npm install @anush008/tokenizers@0.6.0)
  /usr/bin/python3 tools/train/check_tokenizer.py [--node-dir /var/tmp/tokcheck]

Last run: 355 texts, 262,083 tokens, 0 mismatches.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bpe import Tokenizer  # noqa: E402
from prepare_data import SHARED, TOKENIZER  # noqa: E402


def texts():
    t = ["Hello world! It's 2024.", "    def foo(x):\n        return x  # hi", "Sosa steht für:\n\n* Sosa",
         "<|endoftext|>The end", "e\u0301 caf\u00e9 \u212b  \t\t x\u00a0y  \u3000z", "a" * 50 + "   " + " " * 30 + "b",
         "|||IP_ADDRESS||| and |||EMAIL_ADDRESS|||x", "😀 emoji 你好世界 ١٢٣ 𝔘𝔫𝔦"]
    inp = os.path.join(SHARED, "gguf-vocab", "ggml-vocab-llama-spm.gguf.inp")
    t += open(inp, encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
    for f, n in [("github_oss_with_stack_texts.txt", 300000), ("arxiv_texts.txt", 150000),
                 ("wikipedia_texts.txt", 150000), ("b3g_texts.txt", 150000), ("c4_texts.txt", 150000)]:
        s = open(os.path.join(SHARED, "corpus", f), encoding="utf-8").read()
        t += [s[i:i + 3000] for i in range(0, n, 3000)]
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--node-dir", default="/var/tmp/tokcheck")
    a = ap.parse_args()
    T = texts()
    tin = os.path.join(a.node_dir, "texts.json")
    tout = os.path.join(a.node_dir, "ref.json")
    json.dump(T, open(tin, "w"))
    js = os.path.join(HERE, "tokcheck", "enc.js")
    subprocess.run(["node", js, TOKENIZER, tin, tout], check=True, cwd=a.node_dir,
                   env=dict(os.environ, NODE_PATH=os.path.join(a.node_dir, "node_modules")))
    ref = json.load(open(tout))
    tk = Tokenizer(TOKENIZER)
    bad = 0
    for t, r in zip(T, ref):
        m = tk.encode(t)
        if m != r:
            bad += 1
            if bad <= 5:
                print("MISMATCH", repr(t[:80]), m[:20], r[:20])
    print(f"{len(T)} texts, {sum(map(len, ref))} tokens, {bad} mismatches")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
