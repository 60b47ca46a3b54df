"""Convert a training checkpoint to an HF OLMoE checkpoint directory (what
OlmoeForCausalLM.save_pretrained would write, in bfloat16):

  /usr/bin/python3 tools/train/export.py --ckpt /var/tmp/moex-train/run1/ckpt.pt --out models/olmoe-demo

Writes config.json, generation_config.json, model.safetensors (BF16), tokenizer.json,
tokenizer_config.json, special_tokens_map.json, and training_state.json (step/tokens of the
checkpoint).  With tie_word_embeddings, lm_head.weight is omitted, as save_pretrained does.
"""
import argparse
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
from safetensors_io import save_file  # noqa: E402

TOKENIZER = os.path.abspath(os.path.join(HERE, "..", "..", "..", "shared", "data", "tokenizers",
                                         "olmoe-gpt-neox-olmo-dolma-v1_5.tokenizer.json"))
EOS, PAD = 50279, 1


def hf_config(c):
    return {
        "architectures": ["OlmoeForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": None,
        "clip_qkv": None,
        "eos_token_id": EOS,
        "hidden_act": "silu",
        "hidden_size": c["hidden_size"],
        "initializer_range": c["initializer_range"],
        "intermediate_size": c["intermediate_size"],
        "max_position_embeddings": c["max_position_embeddings"],
        "model_type": "olmoe",
        "norm_topk_prob": c["norm_topk_prob"],
        "num_attention_heads": c["num_attention_heads"],
        "num_experts": c["num_experts"],
        "num_experts_per_tok": c["num_experts_per_tok"],
        "num_hidden_layers": c["num_hidden_layers"],
        "num_key_value_heads": c["num_key_value_heads"],
        "output_router_logits": False,
        "pad_token_id": PAD,
        "rms_norm_eps": c["rms_norm_eps"],
        "rope_scaling": None,
        "rope_theta": c["rope_theta"],
        "router_aux_loss_coef": c["router_aux_loss_coef"],
        "tie_word_embeddings": c["tie_word_embeddings"],
        "torch_dtype": "bfloat16",
        "transformers_version": "4.46.0",
        "use_cache": True,
        "vocab_size": c["vocab_size"],
    }


def hf_tensors(sd, c):
    """Training state_dict -> {HF name: tensor}."""
    out = {}
    F = c["intermediate_size"]
    for k, v in sd.items():
        if k.startswith("layers."):
            parts = k.split(".")
            i = parts[1]
            rest = ".".join(parts[2:])
            pre = f"model.layers.{i}."
            if rest == "mlp.w_gate_up":
                for e in range(v.shape[0]):
                    out[pre + f"mlp.experts.{e}.gate_proj.weight"] = v[e, :, :F].t()
                    out[pre + f"mlp.experts.{e}.up_proj.weight"] = v[e, :, F:].t()
            elif rest == "mlp.w_down":
                for e in range(v.shape[0]):
                    out[pre + f"mlp.experts.{e}.down_proj.weight"] = v[e].t()
            else:
                out[pre + rest] = v
        elif k == "lm_head.weight":
            out["lm_head.weight"] = v
        else:
            out["model." + k] = v
    return out


def training_state_dict(tensors, c):
    """Inverse of hf_tensors: {HF name: tensor} -> training state_dict (float32)."""
    sd = {}
    E = c["num_experts"]
    for k, v in tensors.items():
        if ".mlp.experts." in k:
            continue
        if k.startswith("model."):
            sd[k[len("model."):]] = v
        elif k == "lm_head.weight" and not c.get("tie_word_embeddings", False):
            sd[k] = v
    for i in range(c["num_hidden_layers"]):
        pre = f"model.layers.{i}.mlp.experts."
        g = torch.stack([tensors[pre + f"{e}.gate_proj.weight"].t() for e in range(E)])
        u = torch.stack([tensors[pre + f"{e}.up_proj.weight"].t() for e in range(E)])
        d = torch.stack([tensors[pre + f"{e}.down_proj.weight"].t() for e in range(E)])
        sd[f"layers.{i}.mlp.w_gate_up"] = torch.cat([g, u], dim=2).contiguous()
        sd[f"layers.{i}.mlp.w_down"] = d.contiguous()
    return sd


def write_tokenizer_files(out, tokenizer_path):
    shutil.copyfile(tokenizer_path, os.path.join(out, "tokenizer.json"))
    tk = json.load(open(tokenizer_path))
    dec = {}
    for a in tk["added_tokens"]:
        dec[str(a["id"])] = {"content": a["content"], "lstrip": a["lstrip"], "normalized": a["normalized"],
                             "rstrip": a["rstrip"], "single_word": a["single_word"], "special": a["special"]}
    tc = {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": dec,
        "bos_token": None,
        "clean_up_tokenization_spaces": True,
        "eos_token": "<|endoftext|>",
        "model_max_length": 4096,
        "pad_token": "<|padding|>",
        "tokenizer_class": "GPTNeoXTokenizer",
        "unk_token": None,
    }
    # The chat template (written for moex, see models/LICENSES.md) is not training output:
    # keep the one the directory already ships.
    old_tc = os.path.join(out, "tokenizer_config.json")
    if os.path.exists(old_tc):
        template = json.load(open(old_tc)).get("chat_template")
        if template:
            tc["chat_template"] = template
    json.dump(tc, open(os.path.join(out, "tokenizer_config.json"), "w"), indent=2)
    json.dump({"eos_token": {"content": "<|endoftext|>", "lstrip": False, "normalized": False, "rstrip": False,
                             "single_word": False},
               "pad_token": {"content": "<|padding|>", "lstrip": False, "normalized": False, "rstrip": False,
                             "single_word": False}},
              open(os.path.join(out, "special_tokens_map.json"), "w"), indent=2)


def export(ckpt_path, out, tokenizer_path=TOKENIZER):
    ck = torch.load(ckpt_path, map_location="cpu")
    c = ck["config"]
    os.makedirs(out, exist_ok=True)
    tensors = hf_tensors(ck["model"], c)
    save_file(tensors, os.path.join(out, "model.safetensors"), "BF16", {"format": "pt"})
    json.dump(hf_config(c), open(os.path.join(out, "config.json"), "w"), indent=2)
    json.dump({"_from_model_config": True, "eos_token_id": EOS, "pad_token_id": PAD,
               "transformers_version": "4.46.0"}, open(os.path.join(out, "generation_config.json"), "w"), indent=2)
    write_tokenizer_files(out, tokenizer_path)
    st = dict(ck["state"])
    st.pop("balance_counts", None)  # stop-32 checkpoints kept the balancing window's counts here
    st["train_args"] = {k: v for k, v in ck["args"].items() if k != "given"}
    json.dump(st, open(os.path.join(out, "training_state.json"), "w"), indent=1)
    n = sum(t.numel() for t in tensors.values())
    print(f"exported step {st['step']} ({st['tokens']} tokens): {len(tensors)} tensors, {n:,} params -> {out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default="/var/tmp/moex-train/run1/ckpt.pt")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "models", "olmoe-demo"))
    ap.add_argument("--tokenizer", default=TOKENIZER)
    a = ap.parse_args()
    export(a.ckpt, a.out, a.tokenizer)


if __name__ == "__main__":
    main()


def load_model(path):
    """An Olmoe training-module instance from a training checkpoint (.pt) or an HF directory."""
    from model import Config, Olmoe
    from safetensors_io import load_dir
    if os.path.isdir(path):
        hc = json.load(open(os.path.join(path, "config.json")))
        keys = set(Config().to_dict().keys())
        c = Config(**{k: v for k, v in hc.items() if k in keys})
        m = Olmoe(c)
        m.load_state_dict(training_state_dict(load_dir(path), hc))
        info = {}
        ts = os.path.join(path, "training_state.json")
        if os.path.exists(ts):
            info = json.load(open(ts))
    else:
        ck = torch.load(path, map_location="cpu")
        m = Olmoe(Config(**ck["config"]))
        m.load_state_dict(ck["model"])
        info = dict(ck["state"])
    m.eval()
    return m, info
