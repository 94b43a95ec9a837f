#!/usr/bin/env python3
"""The counterfactual of the Q/K row order: the converted Qwen2 folder with llama's un-permutation applied.

  permute-qk.py SRC/model.safetensors DST/model.safetensors   Q/K weights and biases re-ordered as the
                                                              llama path of scripts/gguf_to_hf.py would
  permute-qk.py --nll IDS LOGITS.npy                          next-token NLL (nats/token) and top-1 accuracy

DST gets the other files of SRC as symlinks by hand; `spindle logits` on DST then says what the permutation
would cost (docs/qwen25coder.md).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../scripts"))
import gguf_to_hf as g  # noqa: E402


def nll(ids_path, logits_path):
    ids = [int(x) for x in open(ids_path).read().replace(",", " ").split()]
    z = np.load(logits_path, mmap_mode="r")
    total, top, n = 0.0, 0, len(ids) - 1
    for lo in range(0, n, 256):
        hi = min(lo + 256, n)
        x = np.array(z[lo:hi], dtype=np.float64)
        m = x.max(1)
        lse = np.log(np.exp(x - m[:, None]).sum(1)) + m
        t = np.array(ids[lo + 1:hi + 1])
        total += float((lse - x[np.arange(hi - lo), t]).sum())
        top += int((x.argmax(1) == t).sum())
    print(f"{logits_path}: NLL {total / n:.6f} nats/token, top-1 next-token accuracy {top}/{n}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--nll":
        return nll(sys.argv[2], sys.argv[3])
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1:]
    with open(os.path.join(os.path.dirname(src), "config.json")) as f:
        import json
        cfg = json.load(f)
    heads = {".q_proj.": cfg["num_attention_heads"], ".k_proj.": cfg["num_key_value_heads"]}
    t = g.read_safetensors(src)
    items = []
    for name in sorted(t):
        dt, w = t[name]
        nh = next((h for k, h in heads.items() if k in name), 0)

        def make(w=w, nh=nh):
            w = np.array(w, dtype=np.float32)
            return g.unpermute(w, nh) if nh else w
        items.append((name, dt, tuple(w.shape), make))
    g.write_safetensors(dst, items)


if __name__ == "__main__":
    main()
