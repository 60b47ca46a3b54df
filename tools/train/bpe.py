"""Pure-Python byte-level BPE for HF `tokenizers` tokenizer.json files (GPT-NeoX / OLMoE style).

Implements exactly the pipeline of the OLMoE tokenizer (allenai gpt-neox-olmo-dolma-v1_5):
  1. split on added tokens (non-normalized ones on the raw text, then NFC, then the normalized
     ones), leftmost-longest as HF's AddedVocabulary does;
  2. NFC normalisation;
  3. ByteLevel pre-tokenizer (GPT-2 regex, add_prefix_space=false);
  4. BPE merges by rank; no unk, no dropout.
No post-processor tokens are added (OLMoE adds no BOS/EOS).

Needs Debian's python3-regex (for \\p{L}/\\p{N}).
"""
import json
import unicodedata

import regex

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


class Tokenizer:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
        m = t["model"]
        assert m["type"] == "BPE"
        self.vocab = m["vocab"]
        self.id_to_token = {i: s for s, i in self.vocab.items()}
        merges = m["merges"]
        self.ranks = {}
        for i, mg in enumerate(merges):
            a, b = mg.split(" ") if isinstance(mg, str) else mg
            self.ranks[(a, b)] = i
        self.added = {a["content"]: a["id"] for a in t.get("added_tokens", [])}
        for a in t.get("added_tokens", []):
            self.id_to_token[a["id"]] = a["content"]
        raw = [a["content"] for a in t.get("added_tokens", []) if not a["normalized"]]
        norm = [a["content"] for a in t.get("added_tokens", []) if a["normalized"]]
        self.raw_re = self._alt(raw)
        self.norm_re = self._alt(norm)
        self.pat = regex.compile(GPT2_PATTERN)
        self.b2u = bytes_to_unicode()
        self.u2b = {v: k for k, v in self.b2u.items()}
        self.cache = {}
        nz = t.get("normalizer")
        assert nz is None or nz.get("type") == "NFC", nz
        self.nfc = nz is not None

    @staticmethod
    def _alt(tokens):
        if not tokens:
            return None
        # longest first: Python's alternation is leftmost-first, so this gives leftmost-longest
        toks = sorted(tokens, key=len, reverse=True)
        return regex.compile("|".join(regex.escape(x) for x in toks))

    def _bpe(self, word):
        ids = self.cache.get(word)
        if ids is not None:
            return ids
        parts = list(word)
        ranks = self.ranks
        while len(parts) > 1:
            best = None
            best_rank = None
            for i in range(len(parts) - 1):
                r = ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best_rank = r
                    best = (parts[i], parts[i + 1])
            if best is None:
                break
            a, b = best
            out = []
            i = 0
            n = len(parts)
            while i < n:
                if i < n - 1 and parts[i] == a and parts[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            parts = out
        ids = [self.vocab[p] for p in parts]
        if len(self.cache) < 2_000_000:
            self.cache[word] = ids
        return ids

    def _encode_plain(self, text, out):
        b2u = self.b2u
        for piece in self.pat.findall(text):
            word = "".join(b2u[b] for b in piece.encode("utf-8"))
            out.extend(self._bpe(word))

    def _split(self, rx, text):
        """Yield (is_added, segment)."""
        if rx is None:
            yield False, text
            return
        pos = 0
        for m in rx.finditer(text):
            if m.start() > pos:
                yield False, text[pos:m.start()]
            yield True, m.group(0)
            pos = m.end()
        if pos < len(text):
            yield False, text[pos:]

    def encode(self, text):
        out = []
        for is_add, seg in self._split(self.raw_re, text):
            if is_add:
                out.append(self.added[seg])
                continue
            if self.nfc:
                seg = unicodedata.normalize("NFC", seg)
            for is_add2, seg2 in self._split(self.norm_re, seg):
                if is_add2:
                    out.append(self.added[seg2])
                else:
                    self._encode_plain(seg2, out)
        return out

    def decode(self, ids, skip_special=False):
        bs = bytearray()
        for i in ids:
            tok = self.id_to_token.get(int(i))
            if tok is None:
                continue
            if tok in self.added:
                if skip_special and tok in ("<|padding|>", "<|endoftext|>"):
                    continue
                bs.extend(tok.encode("utf-8"))
            else:
                bs.extend(self.u2b[c] for c in tok)
        return bs.decode("utf-8", errors="replace")


if __name__ == "__main__":
    import argparse
    import sys

    ap = argparse.ArgumentParser(description="tokenize text with a tokenizer.json (prints ids as JSON)")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--text", default=None)
    a = ap.parse_args()
    tk = Tokenizer(a.tokenizer)
    text = a.text if a.text is not None else sys.stdin.read()
    print(json.dumps(tk.encode(text)))
