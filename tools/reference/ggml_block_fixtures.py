"""Writes the fixtures that check moex's GGML block decoders against llama.cpp's own Python
reference (gguf-py's `gguf.quants.dequantize`), an implementation moex shares no code with.

  /usr/bin/python3 tools/reference/ggml_block_fixtures.py --gguf-py PATH --out tests/data/ggml_blocks

PATH is llama.cpp's gguf-py directory (e.g. from the llama.cpp source that npm's
node-llama-cpp ships as llama/gitRelease.bundle: `git clone` it). For each format it writes
NAME.blocks (random blocks, then adversarial ones: zero scales, the largest and subnormal
f16 scales, all-zero and all-one code bytes) and NAME.f32 (gguf-py's decoding of them,
little-endian float32). tests/quant_format_test.cc decodes the blocks and compares.
"""
import argparse
import os
import sys

import numpy as np

# name, GGML type name, block bytes, offsets of f16 scales in a block (E8M0 for mxfp4).
FORMATS = [
    ("q4_0", "Q4_0", 18, [0]),
    ("q4_1", "Q4_1", 20, [0, 2]),
    ("q5_0", "Q5_0", 22, [0]),
    ("q5_1", "Q5_1", 24, [0, 2]),
    ("q8_0", "Q8_0", 34, [0]),
    ("q2_K", "Q2_K", 84, [80, 82]),
    ("q3_K", "Q3_K", 110, [108]),
    ("q4_K", "Q4_K", 144, [0, 2]),
    ("q5_K", "Q5_K", 176, [0, 2]),
    ("q6_K", "Q6_K", 210, [208]),
    ("iq4_nl", "IQ4_NL", 18, [0]),
    ("iq4_xs", "IQ4_XS", 136, [0]),
    ("mxfp4", "MXFP4", 17, None),
]


def put_half(block, offset, value):
    block[offset:offset + 2] = np.frombuffer(np.float16(value).tobytes(), dtype=np.uint8)


def blocks_for(name, size, scales, rng):
    out = []
    for i in range(24):  # Random blocks with finite scales.
        b = rng.integers(0, 256, size, dtype=np.uint8)
        if scales is None:
            b[0] = rng.integers(100, 150)
        else:
            for off in scales:
                put_half(b, off, rng.normal(0, 0.05))
        out.append(b)
    for special in ("zero", "max", "subnormal", "codes0", "codes1"):
        b = rng.integers(0, 256, size, dtype=np.uint8)
        if special == "codes0":
            b[:] = 0
        elif special == "codes1":
            b[:] = 0xFF
        if scales is None:
            b[0] = {"zero": 0, "max": 254, "subnormal": 1, "codes0": 0, "codes1": 254}[special]
        else:
            value = {"zero": 0.0, "max": 65504.0, "subnormal": 2.0 ** -20, "codes0": 0.0,
                     "codes1": -0.5}[special]
            for off in scales:
                put_half(b, off, value)
        out.append(b)
    return np.stack(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf-py", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20261125)
    a = ap.parse_args()
    sys.path.insert(0, a.gguf_py)
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    for name, ggml_name, size, scales in FORMATS:
        blocks = blocks_for(name, size, scales, rng)
        with np.errstate(over="ignore", invalid="ignore"):
            values = dequantize(blocks.reshape(-1), GGMLQuantizationType[ggml_name]).astype("<f4")
        blocks.tofile(os.path.join(a.out, f"{name}.blocks"))
        values.tofile(os.path.join(a.out, f"{name}.f32"))
        print(f"{name}: {len(blocks)} blocks, {values.size} weights")


if __name__ == "__main__":
    main()
