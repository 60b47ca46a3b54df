"""Minimal safetensors reader/writer (numpy/torch), no third-party package needed.

File layout: u64 little-endian header length N, N bytes of JSON header
{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the raw data.
"""
import json
import os
import struct

import numpy as np
import torch

_NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32,
       "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    return hdr, 8 + n


def load_file(path, names=None):
    """Return {name: float32 torch tensor} (BF16/F16 upcast to float32, exactly)."""
    hdr, base = read_header(path)
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__" or (names is not None and k not in names):
            continue
        b, e = v["data_offsets"]
        raw = mm[base + b:base + e]
        shape = v["shape"]
        if v["dtype"] == "BF16":
            u = raw.view(np.uint16).astype(np.uint32) << 16
            arr = u.view(np.float32).reshape(shape)
        else:
            arr = raw.view(_NP[v["dtype"]]).reshape(shape)
            if arr.dtype != np.float32 and np.issubdtype(arr.dtype, np.floating):
                arr = arr.astype(np.float32)
        out[k] = torch.from_numpy(np.array(arr))
    return out


def load_dir(model_dir):
    """All tensors of an HF directory: model.safetensors, or the shards listed in
    model.safetensors.index.json, or every *.safetensors file."""
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"no safetensors in {model_dir}")
    out = {}
    for f in files:
        out.update(load_file(os.path.join(model_dir, f)))
    return out


def save_file(tensors, path, dtype="BF16", metadata=None):
    """tensors: {name: torch tensor}; written in sorted name order, 8-byte aligned header."""
    hdr = {}
    blobs = []
    off = 0
    for k in sorted(tensors):
        t = tensors[k].detach().contiguous().cpu()
        if dtype == "BF16":
            b = t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
        elif dtype == "F32":
            b = t.to(torch.float32).numpy().tobytes()
        elif dtype == "F16":
            b = t.to(torch.float16).numpy().tobytes()
        else:
            raise ValueError(dtype)
        hdr[k] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hdr["__metadata__"] = metadata or {"format": "pt"}
    hj = json.dumps(hdr, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
