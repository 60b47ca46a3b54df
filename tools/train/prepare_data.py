"""Tokenize the training corpus once into per-domain train/val token streams (.npy, uint16).

Domains: the six files of ../shared/data/corpus plus the King James Bible from Debian's
bible-kjv-text package (public domain). Each domain is one token stream; documents (one per
line for books/C4, one per question for GSM8K, one per book for the Bible, the whole file for
the others) are separated by <|endoftext|> (50279). The last --val-frac of each domain's
stream (at least --val-min tokens) is held out as its validation split.

Output (default /var/tmp/moex-train/data): {domain}.train.npy, {domain}.val.npy, meta.json.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bpe import Tokenizer  # noqa: E402

EOS = 50279
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SHARED = os.path.abspath(os.path.join(REPO, "..", "shared", "data"))
TOKENIZER = os.path.join(SHARED, "tokenizers", "olmoe-gpt-neox-olmo-dolma-v1_5.tokenizer.json")


def chunks_at_paragraphs(text, size=4000):
    """Split a long text into pieces ending just after a newline that precedes a non-space
    character, so pre-tokenization (whitespace runs) is the same as on the whole text."""
    pos = 0
    n = len(text)
    while pos < n:
        end = min(n, pos + size)
        while end < n and not (text[end - 1] == "\n" and not text[end].isspace()):
            end += 1
        yield text[pos:end]
        pos = end


def docs_for(domain):
    c = os.path.join(SHARED, "corpus")
    if domain == "arxiv":
        yield open(os.path.join(c, "arxiv_texts.txt"), encoding="utf-8").read()
    elif domain == "github":
        yield open(os.path.join(c, "github_oss_with_stack_texts.txt"), encoding="utf-8").read()
    elif domain == "wikipedia":
        yield open(os.path.join(c, "wikipedia_texts.txt"), encoding="utf-8").read()
    elif domain in ("books", "c4"):
        fn = "b3g_texts.txt" if domain == "books" else "c4_texts.txt"
        for line in open(os.path.join(c, fn), encoding="utf-8"):
            line = line.rstrip("\n")
            if line.strip():
                yield line
    elif domain == "gsm8k":
        for line in open(os.path.join(c, "gsm8k_train.jsonl"), encoding="utf-8"):
            r = json.loads(line)
            yield "Question: " + r["question"] + "\nAnswer: " + r["answer"]
    elif domain == "bible":
        out = subprocess.run(["bible", "-f", "Ge1:1-Re22:21"], capture_output=True, text=True, check=True).stdout
        # lines look like "Ge1:1 In the beginning ..."; group by book (the letters before the chapter)
        book, cur = None, []
        for line in out.splitlines():
            if not line.strip():
                continue
            ref, _, verse = line.partition(" ")
            b = ref.rstrip("0123456789:")
            if b != book and cur:
                yield "\n".join(cur)
                cur = []
            book = b
            cur.append(ref[len(b):] + " " + verse)
        if cur:
            yield "\n".join(cur)
    else:
        raise ValueError(domain)


DOMAINS = ["arxiv", "books", "c4", "github", "wikipedia", "gsm8k", "bible"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/var/tmp/moex-train/data")
    ap.add_argument("--tokenizer", default=TOKENIZER)
    ap.add_argument("--val-frac", type=float, default=0.05)
    ap.add_argument("--val-min", type=int, default=16384)
    ap.add_argument("--domains", default=",".join(DOMAINS))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tk = Tokenizer(a.tokenizer)
    meta = {"tokenizer": os.path.basename(a.tokenizer), "eos": EOS, "domains": {}}
    for d in a.domains.split(","):
        t0 = time.time()
        ids = []
        nchars = 0
        ndocs = 0
        for doc in docs_for(d):
            ndocs += 1
            nchars += len(doc)
            for piece in chunks_at_paragraphs(doc):
                ids.extend(tk.encode(piece))
            ids.append(EOS)
        arr = np.asarray(ids, dtype=np.uint16)
        nval = max(a.val_min, int(len(arr) * a.val_frac))
        # start the validation split at a document boundary if one is near
        cut = len(arr) - nval
        eos_pos = np.nonzero(arr[cut - 4096:cut + 4096] == EOS)[0]
        if len(eos_pos):
            cut = cut - 4096 + int(eos_pos[np.argmin(np.abs(eos_pos - 4096))]) + 1
        np.save(os.path.join(a.out, f"{d}.train.npy"), arr[:cut])
        np.save(os.path.join(a.out, f"{d}.val.npy"), arr[cut:])
        meta["domains"][d] = {"docs": ndocs, "chars": nchars, "tokens": int(len(arr)),
                              "train_tokens": int(cut), "val_tokens": int(len(arr) - cut)}
        print(f"{d}: {ndocs} docs, {nchars} chars, {len(arr)} tokens (train {cut}, val {len(arr)-cut}) "
              f"in {time.time()-t0:.1f}s", flush=True)
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
