"""goldens_np.py: the torch-free pieces of the golden tooling (scripts/make-goldens.py's independent
numpy forward and scripts/emulate-mixed.py), with numpy alone (no torch, no safetensors package).

read_safetensors(folder) -> {name: (float32 array, stored dtype)} from model.safetensors or the shards of
model.safetensors.index.json. F32, F16 and BF16 are widened to float32 exactly. The format: an 8-byte
little-endian header length, the JSON header (dtype, shape, data_offsets per tensor), then the raw data.
gemma3_layout(cfg) -> (layer types, {layer type: RoPE parameters}) of a gemma3_text config.json in either
style (layer_types + rope_parameters, or the legacy sliding_window_pattern + rope_theta /
rope_local_base_freq / rope_scaling).
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


def gemma3_pattern_types(n_layers, pattern):
    """The legacy sliding_window_pattern: layer i is full attention iff (i + 1) % pattern == 0."""
    return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n_layers)]


def gemma3_layout(cfg):
    """(layer types, {layer type: RoPE parameters}) from a gemma3_text config.json in either style."""
    n = cfg["num_hidden_layers"]
    types = cfg.get("layer_types")
    if not types:
        types = gemma3_pattern_types(n, cfg.get("sliding_window_pattern", 6))
    rp = cfg.get("rope_parameters")
    if rp and "full_attention" in rp:
        full, slid = dict(rp["full_attention"]), dict(rp["sliding_attention"])
    else:
        full = dict(cfg.get("rope_scaling") or {})
        if "type" in full and "rope_type" not in full:
            full["rope_type"] = full.pop("type")
        full.setdefault("rope_type", "default")
        full["rope_theta"] = cfg.get("rope_theta", 1000000.0)
        slid = {"rope_type": "default", "rope_theta": cfg.get("rope_local_base_freq", 10000.0)}
    return list(types), {"full_attention": full, "sliding_attention": slid}
