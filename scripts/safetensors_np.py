"""safetensors_np.py: read a safetensors checkpoint with numpy alone (no torch, no safetensors package).

read_safetensors(folder) -> {name: (float32 array, stored dtype)} from model.safetensors or the shards of
model.safetensors.index.json. F32, F16 and BF16 are widened to float32 exactly. The format: an 8-byte
little-endian header length, the JSON header (dtype, shape, data_offsets per tensor), then the raw data.
Used by scripts/make-goldens.py's independent numpy forward and scripts/emulate-mixed.py.
"""
import json
import os

import numpy as np


def read_safetensors(folder):
    idx = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        with open(os.path.join(folder, fn), "rb") as f:
            buf = f.read()
        n = int.from_bytes(buf[:8], "little")
        hdr = json.loads(buf[8:8 + n])
        base = 8 + n
        for k, v in hdr.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            raw = buf[base + a:base + b]
            dt = v["dtype"]
            if dt == "F32":
                x = np.frombuffer(raw, "<f4").astype(np.float32)
            elif dt == "F16":
                x = np.frombuffer(raw, "<f2").astype(np.float32)
            elif dt == "BF16":
                x = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
            else:
                raise ValueError(f"{os.path.join(folder, fn)}: {k}: dtype {dt} not handled")
            out[k] = (x.reshape(v["shape"]).copy(), dt)
    return out
