"""Compose models/README.md from the exported model, evaluate.py's JSON, analyze_routing.py's
markdown and the training metrics log.

  /usr/bin/python3 tools/train/write_model_readme.py --model models/olmoe-demo \
      --eval /var/tmp/moex-train/eval.json --routing /var/tmp/moex-train/routing.md \
      [--routing-init /var/tmp/moex-train/routing_init.md] --metrics /var/tmp/moex-train/run1/metrics.jsonl
"""
import argparse
import json
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def fmt_int(n):
    return f"{n:,}"


def lr_schedule_text(targs):
    """The learning-rate row: the original schedule, and the warm start's when the run had one."""
    first = "sessions 1–2 (steps 0–1,368): peak 0.001, linear warm-up 30 steps, then inverse-square-root decay"
    if not targs.get("warm_start_step"):
        return (f"peak {targs.get('lr')}, linear warm-up {targs.get('warmup')} steps, then inverse-square-root decay "
                "(no fixed horizon)")
    text = (f"{first}; then a warm start on a new machine (`--init-from`, fresh AdamW) at step "
            f"{targs['warm_start_step']:,}: re-warm-up over {targs.get('warmup')} steps to {targs.get('lr')}")
    if targs.get("min_lr_frac", 0) >= 1.0:
        text += ", constant"
    else:
        text += ", inverse-square-root decay"
    if targs.get("cooldown_start", -1) >= 0:
        text += (f", linear cool-down to 0 from step {targs['cooldown_start']:,} over "
                 f"{targs.get('cooldown_steps'):,} steps")
    return text


def concentration_section(w, c):
    """Per-domain top-8 share / max share / load entropy per layer, beside the real OLMoE's figures."""
    doms = list(c["domains"])
    # max_seqs: None (or absent, in files written before it was recorded) = the whole split.
    seq, total = c.get("seq", 256), sum(c["tokens"].values())
    toks = (f"every {seq}-token window of each domain's validation split, {total:,} tokens in all"
            if c.get("max_seqs") is None else
            f"the first {c['max_seqs']} {seq}-token windows of each domain's validation split, {total:,} tokens in all")
    w("**Routing concentration beside the real OLMoE** (`routing_concentration.py`: teacher-forced validation text "
      f"of one domain at a time, every layer; {toks}). Each cell: top-8 share "
      "(the domain's assignments that go to its 8 busiest experts; uniform 12.5 %) / max share (its busiest "
      "expert's) / load entropy H/log 64.\n")
    w("| layer | " + " | ".join(doms) + " | dead experts |")
    w("|---:|" + "---|" * len(doms) + "---:|")
    for l in range(len(c["dead_experts"])):
        cells = [f"{100 * c['domains'][d][l]['top8_share']:.1f} / {100 * c['domains'][d][l]['max_share']:.1f} / "
                 f"{c['domains'][d][l]['entropy']:.3f}" for d in doms]
        w(f"| {l} | " + " | ".join(cells) + f" | {c['dead_experts'][l]} |")
    means = [sum(r["top8_share"] for r in c["domains"][d][4:]) / len(c["domains"][d][4:]) for d in doms]
    w("| mean 4–15, top-8 | " + " | ".join(f"{100 * m:.1f}" for m in means) + " | |\n")
    real = c.get("real")
    w("The real OLMoE-1B-7B, for comparison: " +
      (f"layer 0 on GSM8K ({real['model']}, vLLM routing log in `../shared/data/routing`, {real['tokens']:,} tokens): "
       f"top-8 {100 * real['top8_share']:.1f} % / max {100 * real['max_share']:.1f} % / entropy {real['entropy']:.3f}; "
       if real else "") +
      "in the middle and late layers, from the OLMoE paper's routing analysis as issue 21 quotes it, about "
      "20–24 % top-8 share on C4 and 45–50 % on arXiv, GitHub and Wikipedia.\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "olmoe-demo"))
    ap.add_argument("--eval", required=True)
    ap.add_argument("--routing", required=True)
    ap.add_argument("--routing-init", default=None)
    ap.add_argument("--metrics", default="/var/tmp/moex-train/run1/metrics.jsonl")
    ap.add_argument("--data", default="/var/tmp/moex-train/data")
    ap.add_argument("--routing-bf16", action="store_true", help="the routing analysis ran under bf16 autocast")
    ap.add_argument("--concentration", default=None,
                    help="routing_concentration.py --out-json of the same model (with --real-log): the per-domain, "
                         "per-layer table beside the real OLMoE's figures")
    ap.add_argument("--notes", default=None, help="extra markdown appended under 'Status'")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "models", "README.md"))
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    st = json.load(open(os.path.join(a.model, "training_state.json")))
    targs = st.get("train_args", {})
    ev = json.load(open(a.eval))
    meta = json.load(open(os.path.join(a.data, "meta.json")))
    size = os.path.getsize(os.path.join(a.model, "model.safetensors"))
    d, f, L, E, K = (cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["num_experts"],
                     cfg["num_experts_per_tok"])
    V = cfg["vocab_size"]
    attn = L * 4 * d * d
    experts = L * E * 3 * d * f
    router = L * E * d
    norms = L * (2 * d + 2 * d) + d
    emb = V * d
    head = 0 if cfg["tie_word_embeddings"] else V * d
    total = attn + experts + router + norms + emb + head
    active = attn + L * K * 3 * d * f + router + norms + emb + (head or 0)
    recs = [json.loads(l) for l in open(a.metrics)] if os.path.exists(a.metrics) else []
    steps = [r for r in recs if "loss" in r]
    last = steps[-50:]
    train_loss = sum(r["loss"] for r in last) / max(1, len(last))
    toks_s = sum(r["tok_s"] for r in last) / max(1, len(last))
    L_ = []
    w = L_.append
    w("# models/\n")
    w("## olmoe-demo\n")
    w("A small OLMoE trained from scratch on this project's CPU machines (no pretrained MoE weights can be "
      "downloaded here) and shipped as moex's default model. It has OLMoE's real topology — 16 layers, "
      "64 experts per layer, top-8 routing without renormalisation, q/k RMSNorm over the whole projected "
      "q/k, SwiGLU experts, rotate-half RoPE, OLMoE's GPT-NeoX-based tokenizer — at a small width. "
      "It is an HF checkpoint directory that `transformers`' `OlmoeForCausalLM` loads as is.\n")
    w("| file | |\n|---|---|")
    w(f"| config.json | `model_type: olmoe`, `tie_word_embeddings: {str(cfg['tie_word_embeddings']).lower()}` |")
    w(f"| model.safetensors | BF16, {size / 1e6:.1f} MB, {fmt_int(total)} parameters |")
    w("| tokenizer.json, tokenizer_config.json, special_tokens_map.json | OLMoE's tokenizer (allenai gpt-neox-olmo-dolma-v1_5), unchanged |")
    w("| generation_config.json | eos 50279 (`<\\|endoftext\\|>`), pad 1 |")
    w("| training_state.json | step, tokens and hyper-parameters of the exported checkpoint |\n")
    w("Reference logits for the engine's tests: `/usr/bin/python3 tools/reference/logits.py --model models/olmoe-demo "
      "--ids 510,990 --out FILE` (raw little-endian float32, [tokens, 50304], float32 compute from the BF16 weights). "
      "Note `tie_word_embeddings: true`: there is no `lm_head.weight`; the output projection is `model.embed_tokens.weight`.\n")
    w("### Shape\n")
    w("| | |\n|---|---|")
    w(f"| hidden size | {d} ({cfg['num_attention_heads']} heads × {d // cfg['num_attention_heads']}, no GQA) |")
    w(f"| layers | {L} |")
    w(f"| experts | {E} per layer, top-{K}, `norm_topk_prob: false`; expert width (intermediate_size) {f} |")
    w(f"| vocabulary | {V} (50,280 tokens padded to {V}, as OLMoE) |")
    w(f"| embeddings | tied input/output (`lm_head.weight` is not stored; OLMoE itself is untied — tying halves the "
      f"{emb * 2 / 1e6:.0f} M embedding parameters to fit the 100 MB budget) |")
    w(f"| RoPE θ, RMSNorm ε | {cfg['rope_theta']}, {cfg['rms_norm_eps']} |")
    w(f"| context | trained on {targs.get('seq', 256)}-token windows; `max_position_embeddings` {cfg['max_position_embeddings']} as OLMoE, but quality beyond {targs.get('seq', 256)} tokens is untested |")
    w(f"| parameters | {fmt_int(total)} total: experts {fmt_int(experts)}, attention {fmt_int(attn)}, router {fmt_int(router)}, embeddings {fmt_int(emb)}, norms {fmt_int(norms)} |")
    w(f"| active per token | {fmt_int(active)} (of which {fmt_int(L * K * 3 * d * f)} expert) |")
    w(f"| one expert | 3 × {d} × {f} = {fmt_int(3 * d * f)} parameters, {3 * d * f * 2 // 1024} KiB in BF16 |\n")
    w("### Recipe\n")
    w("Code: `tools/train/` (see its README for how to run, resume and export). Debian's python3-torch 1.13 on "
      "2 CPU cores (`--threads 2`, `nice -n 19`), sharing the machine with C++ builds and benchmarks.\n")
    w("| hyper-parameter | value |\n|---|---|")
    rows = [
        ("optimizer", f"AdamW, β=(0.9, {targs.get('beta2')}), ε=1e-8, weight decay {targs.get('wd')} (not on norms), grad clip {targs.get('clip')}"),
        ("learning rate", lr_schedule_text(targs)),
        ("batch", f"{targs.get('batch')} sequences × {targs.get('seq')} tokens = {targs.get('batch', 0) * targs.get('seq', 0)} tokens/step"),
        ("precision", "fp32 master weights, " + ("bf16 autocast for matmuls, fp32 softmax/norms/loss" if targs.get("bf16", 1)
                                                  else "fp32 throughout in the last run (`--bf16 0`; the status notes say what earlier runs used)")),
        ("router losses", f"load-balancing loss (Switch/OLMoE: E·Σ f_e·P_e per layer) × {targs.get('aux_coef')} (OLMoE: 0.01), router z-loss (mean logsumexp² per layer) × {targs.get('z_coef')}, summed over layers; "
         + (f"f_e counted over the last {targs['balance_window']} steps ({targs['balance_window'] * targs.get('batch', 0)} sequences: global-batch balancing), P_e over this step's batch"
            if targs.get("balance_window", 1) > 1 else "f_e and P_e over each step's batch")),
        ("expert dispatch (training only)", "dropless (every assignment computed, as OLMoE)" if not targs.get("capacity_factor")
         else f"capacity-based batched dispatch, capacity factor {targs.get('capacity_factor')} (overflow assignments dropped; evaluation/export are dropless)"),
        ("init", "truncated normal (±3σ): σ=0.02 for q/k/v, router, experts' gate/up; σ=0.02/√(2·layers) for o_proj and experts' down; σ=0.1 for the tied embedding; final norm weight 0.2, other norms 1 (see `model.py` `reset_parameters`: HF's plain 0.02 gives rank-collapsed hidden states and collapsed routing at init)"),
        ("router", f"learning-rate multiplier {targs.get('router_lr_mult')}; the balancing loss's gradient reaches only the router weights (router input detached)"),
        ("seed", f"{targs.get('seed')} (batches are a function of (seed, step))"),
    ]
    for k, v in rows:
        w(f"| {k} | {v} |")
    w("")
    w("### Data\n")
    w("Tokenized once with `tools/train/bpe.py` (a pure-Python byte-level BPE, checked token-for-token against HF "
      "`tokenizers` by `tools/train/check_tokenizer.py`). Each domain is one token stream with documents separated "
      "by `<|endoftext|>`; its last 5% (at least 16,384 tokens) is the held-out validation split. Training samples "
      f"random {targs.get('seq', 256)}-token windows, domain chosen with probability ∝ tokens^{targs.get('domain_temp')}.\n")
    w("| domain | source | documents | train tokens | val tokens |\n|---|---|---:|---:|---:|")
    src = {"arxiv": "shared/data/corpus/arxiv_texts.txt", "books": "shared/data/corpus/b3g_texts.txt (books, one per line)",
           "c4": "shared/data/corpus/c4_texts.txt", "github": "shared/data/corpus/github_oss_with_stack_texts.txt",
           "wikipedia": "shared/data/corpus/wikipedia_texts.txt", "gsm8k": "shared/data/corpus/gsm8k_train.jsonl as `Question: …\\nAnswer: …`",
           "bible": "King James Bible, Debian packages bible-kjv and bible-kjv-text (public domain), one document per book"}
    tt = tv = 0
    for dm, m in meta["domains"].items():
        w(f"| {dm} | {src.get(dm, '')} | {fmt_int(m['docs'])} | {fmt_int(m['train_tokens'])} | {fmt_int(m['val_tokens'])} |")
        tt += m["train_tokens"]
        tv += m["val_tokens"]
    w(f"| total | | | {fmt_int(tt)} | {fmt_int(tv)} |\n")
    w("### Training so far\n")
    hours = st.get("train_seconds", 0) / 3600
    w(f"Exported checkpoint: step {fmt_int(st['step'])}, {fmt_int(st['tokens'])} tokens "
      f"({st['tokens'] / tt:.2f} epochs of the training data), {hours:.2f} h of training wall time. "
      f"Recent throughput {toks_s:.0f} tokens/s (mean of the last steps logged); "
      f"train loss (mean of the last {len(last)} steps) {train_loss:.3f}.\n")
    w(f"**Validation** (exact dropless float32 forward of the exported BF16 weights, first "
      f"{list(ev['val'].values())[0]['tokens']} tokens of each domain's validation split in {targs.get('seq', 256)}-token windows; "
      "unigram: add-one-smoothed token frequencies of all training splits):\n")
    w("| domain | val loss | val ppl | unigram loss | unigram ppl |\n|---|---:|---:|---:|---:|")
    for dm, v in ev["val"].items():
        u = ev["unigram"][dm]
        w(f"| {dm} | {v['loss']:.3f} | {v['ppl']:.1f} | {u:.3f} | {math.exp(u):.1f} |")
    w(f"| mean | {ev['val_mean']:.3f} | | {ev['unigram_mean']:.3f} | |\n")
    if ev.get("samples"):
        w("**Samples** (temperature 0.8, top-40, up to 40 tokens):\n")
        for s in ev["samples"]:
            w("```")
            w(s["prompt"] + "⟪" + s["completion"] + "⟫")
            w("```")
        w("")
    w("### Routing\n")
    w("Measured by `tools/train/analyze_routing.py` on the validation splits (dropless routing" +
      (", matmuls under bf16 autocast for speed, so a few near-tied top-8 choices may differ from the float32 forward"
       if a.routing_bf16 else ", float32") + ").\n")
    w(open(a.routing).read())
    if a.concentration:
        concentration_section(w, json.load(open(a.concentration)))
    if a.routing_init:
        w("For comparison, the same measurements of the untrained model (random initialisation, same seed):\n")
        w(open(a.routing_init).read())
    if a.notes:
        w("### Status\n")
        w(open(a.notes).read())
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    open(a.out, "w").write("\n".join(L_) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
