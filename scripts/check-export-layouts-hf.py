#!/usr/bin/env python3
"""check-export-layouts-hf.py INDEXER [--k K] [--ctx T] [--seed S]: a dsa or qsa export in transformers' own modules.

Builds transformers' indexer module of the export's layout (deepseek_v32's DeepseekV32Indexer for dsa,
qwen4_exp's Qwen4ExpTextQSAIndexer for qsa) from the export's config.json keys alone, loads the layer's
tensors into it with load_state_dict(strict=True) (every tensor the module has, no other), runs it on a
seeded random input x [T, d_model] at positions 0..T-1 (cos/sin as transformers' default rotary embedding
forms them), and compares its per-query top-k with python/spindle_indexer.py's on the same x: dsa against
spindle's formula (they are the same score), qsa against its native one (Qwen4-Exp's query norm and
ReLU) and, for information, against spindle's. Exit 1 if a comparison that must match is below 0.999
(ties aside: a key whose score is within 1e-5 of the k-th counts as a tie). Needs torch and transformers.
"""
import argparse
import json
import math
import os
import sys
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import spindle_indexer as si  # noqa: E402


def cos_sin(T, d_rope, theta):
    """transformers' default rotary embedding: emb = cat(freqs, freqs), [1, T, d_rope]."""
    inv = 1.0 / (theta ** (torch.arange(0, d_rope, 2, dtype=torch.int64).float() / d_rope))
    freqs = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)[None]
    return emb.cos(), emb.sin()


def sets_vs(rows_hf, ix, layer, x, k):
    """Overlap of transformers' per-query supports with the module's, ties aside."""
    want = ix.select(layer, x, k=k, bsel=1)
    s = ix.scores(layer, x)
    hit = tie = tot = 0
    for t, got in enumerate(rows_hf):
        sw = set(want[t][want[t] >= 0].tolist())
        sg = set(j for j in got if 0 <= j <= t)
        tot += len(sw)
        hit += len(sw & sg)
        fin = s[t, :t + 1]
        scale = np.abs(fin).max()
        kth = min(s[t, j] for j in sw) if sw else 0
        tie += sum(1 for j in sg - sw if abs(s[t, j] - kth) <= 1e-5 * scale)
    return hit / max(1, tot), (hit + tie) / max(1, tot)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("indexer")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.indexer, "config.json")))
    layout = cfg.get("layout", "spindle")
    w = si.read_safetensors(os.path.join(a.indexer, "model.safetensors"))
    T, k = a.ctx, a.k
    x = np.random.default_rng(a.seed).standard_normal((T, cfg["hidden_size"])).astype(np.float32)
    xt = torch.from_numpy(x)[None]
    theta = cfg["rope_parameters"]["rope_theta"]
    bad = []
    for layer in cfg["layers"]:
        pre = f"model.layers.{layer}.self_attn.indexer."
        sd = {n[len(pre):]: torch.from_numpy(v.copy()) for n, v in w.items() if n.startswith(pre)}
        if layout == "dsa":
            from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Indexer

            c = SimpleNamespace(hidden_size=cfg["hidden_size"], index_n_heads=cfg["index_n_heads"],
                                index_head_dim=cfg["index_head_dim"], qk_rope_head_dim=cfg["qk_rope_head_dim"],
                                index_topk=k, q_lora_rank=cfg["q_lora_rank"])
            m = DeepseekV32Indexer(c, layer).eval()
            m.load_state_dict(sd, strict=True)
            cos, sin = cos_sin(T, cfg["qk_rope_head_dim"], theta)
            mask = torch.ones(T, T, dtype=torch.bool).tril()[None]
            with torch.no_grad():
                idx = m(xt, xt, (cos, sin), mask, None)[0].tolist()
            raw, ta = sets_vs(idx, si.load(a.indexer), layer, x, k)
            print(f"dsa layer {layer}: DeepseekV32Indexer vs spindle_indexer, per query k {k}, T {T}: overlap "
                  f"{raw:.5f}, ties aside {ta:.5f}")
            if ta < 0.999:
                bad.append(layer)
        elif layout == "qsa":
            from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpTextQSAIndexer

            c = SimpleNamespace(hidden_size=cfg["hidden_size"], indexer_n_heads=cfg["indexer_n_heads"],
                                indexer_kv_heads=cfg["indexer_kv_heads"], indexer_head_dim=cfg["indexer_head_dim"],
                                indexer_budget=k, indexer_compress_ratio=cfg["indexer_compress_ratio"],
                                rms_norm_eps=cfg["rms_norm_eps"])
            m = Qwen4ExpTextQSAIndexer(c, layer).eval()
            m.load_state_dict(sd, strict=True)
            cos, sin = cos_sin(T, cfg["indexer_rotary_dim"], theta)
            mask = torch.ones(T, T, dtype=torch.bool).tril()[None, None]
            with torch.no_grad():
                sel = m(xt, (cos, sin), mask, None)[0, 0]
            rows = [torch.nonzero(sel[t]).flatten().tolist() for t in range(T)]
            raw, ta = sets_vs(rows, si.load(a.indexer, native=True), layer, x, k)
            raw_s, ta_s = sets_vs(rows, si.load(a.indexer), layer, x, k)
            print(f"qsa layer {layer}: Qwen4ExpTextQSAIndexer vs spindle_indexer (native), per query k {k}, T {T}: "
                  f"overlap {raw:.5f}, ties aside {ta:.5f}; vs spindle's formula {raw_s:.5f} ({ta_s:.5f})")
            if ta < 0.999:
                bad.append(layer)
        else:
            raise SystemExit(f"{a.indexer}: layout {layout}: only dsa and qsa have transformers modules")
    if bad:
        print(f"FAIL: layers {bad} below 0.999", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
