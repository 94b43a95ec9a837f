#!/usr/bin/env python3
"""check-export.py SPINDLE INDEXER SHARD LAYER [SEQ]: proof that another stack can use an export.

Loads INDEXER/model.safetensors with the `safetensors` package and INDEXER/config.json, reads the
layer's normed attention input x for sequence SEQ of a teacher SHARD with h5py, recomputes the
indexer scores in numpy from the definitions in config.json (docs/indexer.md), and compares them
with `spindle scores` on the same positions. Exits 1 if the max relative difference exceeds 1e-4.
"""
import json
import subprocess
import sys
import tempfile

import h5py
import numpy as np
from safetensors.numpy import load_file


def rope(v, pos, d_rope, theta):
    """Rotate-half RoPE on the first d_rope dims of v [n, ..., d] at positions pos [n]."""
    if d_rope == 0:
        return v
    half = d_rope // 2
    inv = (1.0 / theta ** (np.arange(half, dtype=np.float64) * 2 / d_rope)).astype(np.float32)
    ang = pos.astype(np.float32)[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    shape = (len(pos),) + (1,) * (v.ndim - 2) + (half,)
    cos, sin = cos.reshape(shape), sin.reshape(shape)
    out = v.copy()
    a, b = v[..., :half], v[..., half:d_rope]
    out[..., :half] = a * cos - b * sin
    out[..., half:d_rope] = b * cos + a * sin
    return out


def main():
    spindle, idx_dir, shard, layer = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    seq = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    cfg = json.load(open(f"{idx_dir}/config.json"))
    w = load_file(f"{idx_dir}/model.safetensors")
    p = f"model.layers.{layer}.self_attn.indexer."
    with h5py.File(shard, "r") as f:
        x = f[f"layer_{layer}/x"][seq]  # [T, d_model]
        if f.attrs["x_dtype"] == "bfloat16":  # stored as the upper 16 bits of float32 (docs/formats.md)
            x = (x.astype(np.uint32) << 16).view(np.float32)
        x = x.astype(np.float64)
    T, d_i, h = x.shape[0], cfg["d_index"], cfg["n_heads"]
    positions = sorted({0, 1, T // 3, T // 2, T - 2, T - 1})
    pos_all = np.arange(T)

    u = x @ w[p + "wk.weight"].T.astype(np.float64)  # [T, d_I]
    if cfg["key_norm"] == "layer":
        u = (u - u.mean(1, keepdims=True)) / np.sqrt(u.var(1, keepdims=True) + cfg["norm_eps"])
        u = u * w[p + "k_norm.weight"] + w[p + "k_norm.bias"]
    elif cfg["key_norm"] == "rms":
        u = u / np.sqrt((u * u).mean(1, keepdims=True) + cfg["norm_eps"]) * w[p + "k_norm.weight"]
    k = rope(u, pos_all, cfg["d_rope"], cfg["rope_theta"])
    q = (x[positions] @ w[p + "wq.weight"].T.astype(np.float64)).reshape(len(positions), h, d_i)
    q = rope(q, np.array(positions), cfg["d_rope"], cfg["rope_theta"])
    if cfg["variant"] == "collapsed":
        scores = q[:, 0, :] @ k.T / np.sqrt(d_i)
    else:
        wt = x[positions] @ w[p + "ww.weight"].T.astype(np.float64)  # [n, H]
        scores = np.einsum("nh,nhj->nj", wt, np.maximum(np.einsum("nhd,jd->nhj", q, k), 0))
    for r, t in enumerate(positions):
        scores[r, t + 1:] = -np.inf

    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/scores.npy"
        subprocess.run([spindle, "scores", "--indexer", idx_dir, "--shard", shard, "--seq", str(seq), "--layer",
                        str(layer), "--positions", ",".join(map(str, positions)), "--out", out], check=True)
        got = np.load(out).astype(np.float64)
    fin = np.isfinite(scores)
    assert (np.isfinite(got) == fin).all(), "masks differ"
    rel = np.abs(got[fin] - scores[fin]).max() / max(1e-12, np.abs(scores[fin]).max())
    print(f"check-export: layer {layer}, {len(positions)} positions x {T} keys, variant {cfg['variant']}, "
          f"key norm {cfg['key_norm']}: max |spindle - numpy| / max|score| = {rel:.2e}")
    sys.exit(0 if rel <= 1e-4 else 1)


if __name__ == "__main__":
    main()
