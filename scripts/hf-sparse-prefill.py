#!/usr/bin/env python3
"""hf-sparse-prefill.py: sparse prefill in HF transformers with an exported spindle indexer, against spindle.

  hf-sparse-prefill.py --model HF_DIR --indexer INDEXER --ids IDS [--ctx T] [--k K --bsel S]
                       [--spindle BIN] [--reference-indexer SPINDLE_LAYOUT_DIR] [--spindle-device cpu|cuda]
                       [--device cpu|cuda] [--dtype fp32|bf16] [--tol X] [--json OUT]

Loads the checkpoint with transformers (torch), installs the indexers of INDEXER (any layout:
spindle, dsa, qsa; python/spindle_indexer.py reads them) on its full-attention layers through a
custom attention function: at each indexed layer the layer's normed attention input (captured by a
pre-hook on self_attn) gives the supports (per query, or shared by blocks of S queries:
docs/design.md), and every head attends with the softmax restricted to them (S_B ∩ [0, t], or {t}
when empty); the other layers run as the model defines them. Then it compares with spindle on the
same ids:
  - logits: `spindle logits --indexer REF --k K --bsel S` vs the transformers sparse prefill
    (max |Δ|, mean |Δ|, top-1 agreement), and dense vs dense as the floor;
  - selections: the torch supports at every indexed layer vs the numpy reference on the same input,
    and, at the first indexed layer (whose input is the dense one), vs `spindle scores
    --dump-selection` on a `spindle teacher --x-dtype fp32` shard of the ids.
Exit 1 when max |Δlogit| exceeds --tol or a selection overlap falls below --min-overlap (defaults
2e-3 and 0.999 in fp32). In bf16 (no --tol) the logits are judged against the floor the two stacks
set without sparsity, the dense pair's difference: the sparse pair's mean |Δlogit| at most
--floor-factor (2) times the dense pair's, and its top-1 agreement at most --top1-drop (0.02) below
the dense pair's; the torch supports must still match the numpy reference on the same input
(overlap ≥ 0.999), while the first layer's overlap with spindle (whose input is fp32) is reported
only. On the GPU machine:
  hf-sparse-prefill.py ... --device cuda --dtype bf16 --spindle build-cuda/spindle --spindle-device cuda
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import spindle_indexer as si  # noqa: E402


def read_ids(path, ctx):
    ids = [int(t) for t in open(path).read().replace(",", " ").split()]
    return ids[:ctx] if ctx else ids


def support_mask_torch(sel, T, bsel):
    """[T, T] bool on sel's device: query t may attend key j (S_t; or S_B ∩ [0, t], {t} when empty)."""
    dev = sel.device
    rows = sel[torch.arange(T, device=dev) // bsel]
    idx = torch.where(rows >= 0, rows, torch.full_like(rows, T))
    m = torch.zeros(T, T + 1, dtype=torch.bool, device=dev).scatter_(1, idx, True)[:, :T]
    m &= torch.ones(T, T, dtype=torch.bool, device=dev).tril()
    empty = ~m.any(1)
    m[empty, torch.arange(T, device=dev)[empty]] = True
    return m


class SparsePrefill:
    """Installs an Indexer on a transformers causal LM: pre-hooks capture each indexed layer's normed
    input, and the attention function "spindle_sparse" attends on the supports there."""

    def __init__(self, model, ix, k, bsel):
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        self.model, self.ix, self.k, self.bsel = model, ix, k, bsel
        self.x, self.sel = {}, {}
        self.dense = sdpa_attention_forward
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        types = getattr(cfg, "layer_types", None)
        for l in ix.layers:
            if types is not None and types[l] != "full_attention":
                raise SystemExit(f"hf-sparse-prefill: layer {l} is {types[l]}, not full attention")
        layers = model.model.layers if hasattr(model, "model") and hasattr(model.model, "layers") else None
        if layers is None:
            layers = model.model.language_model.layers
        for l in ix.layers:
            layers[l].self_attn.register_forward_pre_hook(self._capture(l), with_kwargs=True)
        AttentionInterface.register("spindle_sparse", self._attention)
        AttentionMaskInterface.register("spindle_sparse", sdpa_mask)

    def _capture(self, l):
        def hook(module, args, kwargs):
            self.x[l] = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        return hook

    def _attention(self, module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        l = module.layer_idx
        if l not in self.ix.layers:
            return self.dense(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
        B, H, T, d = query.shape
        assert B == 1, "one sequence at a time"
        x = self.x[l][0]
        sel = self.ix.torch_select(l, x, self.k, self.bsel)
        self.sel[l] = (sel.cpu().numpy(), x.float().cpu().numpy())
        mask = support_mask_torch(sel, T, self.bsel)
        G = H // key.shape[1]
        kk = key.float().repeat_interleave(G, dim=1)
        vv = value.float().repeat_interleave(G, dim=1)
        s = query.float() @ kk.transpose(-1, -2) * (scaling if scaling is not None else d ** -0.5)
        if kwargs.get("softcap") is not None:
            s = torch.tanh(s / kwargs["softcap"]) * kwargs["softcap"]
        s = s.masked_fill(~mask, float("-inf"))
        o = torch.softmax(s, dim=-1) @ vv
        return o.transpose(1, 2).to(query.dtype).contiguous(), None


def hf_logits(model, ids, device):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], device=device), use_cache=False)
    return out.logits[0].float().cpu().numpy()


def spindle_logits(binary, model_dir, ids_file, out, device, indexer=None, k=None, bsel=None):
    cmd = [binary, "logits", "--model", model_dir, "--ids", ids_file, "--out", out, "--device", device]
    if indexer:
        cmd += ["--indexer", indexer, "--k", str(k), "--bsel", str(bsel)]
    r = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:  # spindle's own message names the file and the problem
        sys.exit(f"hf-sparse-prefill: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return np.load(out)


def diff(a, b):
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return {"max_abs": float(d.max()), "mean_abs": float(d.mean()),
            "top1_agree": float((a.argmax(-1) == b.argmax(-1)).mean())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--indexer", required=True, help="exported indexer, any layout")
    ap.add_argument("--ids", required=True, help="token ids file (integers, commas/whitespace)")
    ap.add_argument("--ctx", type=int, default=0, help="first T ids (default: all)")
    ap.add_argument("--k", type=int, default=0, help="keys per support (default: the export's)")
    ap.add_argument("--bsel", type=int, default=0, help="queries per shared block (default: the export's)")
    ap.add_argument("--spindle", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                      "spindle"))
    ap.add_argument("--reference-indexer", help="the same indexer in the spindle layout (default: --indexer)")
    ap.add_argument("--spindle-device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--tol", type=float, help="max |Δlogit| allowed (default 2e-3 in fp32; in bf16 the dense-floor rule above)")
    ap.add_argument("--min-overlap", type=float,
                    help="least selection overlap allowed (default 0.999 in fp32; none in bf16)")
    ap.add_argument("--floor-factor", type=float, default=2.0,
                    help="bf16: the sparse pair's mean |Δlogit| at most this times the dense pair's (default 2)")
    ap.add_argument("--top1-drop", type=float, default=0.02,
                    help="bf16: the sparse pair's top-1 agreement at most this below the dense pair's (default 0.02)")
    ap.add_argument("--json", help="write the numbers here")
    a = ap.parse_args()
    from transformers import AutoModelForCausalLM

    ix = si.load(a.indexer)
    ref = a.reference_indexer or a.indexer
    if json.load(open(os.path.join(ref, "config.json"))).get("layout", "spindle") != "spindle":
        raise SystemExit("hf-sparse-prefill: spindle reads the spindle layout: give --reference-indexer")
    k, bsel = a.k or ix.cfg["default_k"], a.bsel or ix.cfg["default_bsel"]
    ids = read_ids(a.ids, a.ctx)
    T = len(ids)
    dtype = torch.float32 if a.dtype == "fp32" else torch.bfloat16
    tol = a.tol if a.tol is not None else (2e-3 if a.dtype == "fp32" else None)
    min_ov = a.min_overlap if a.min_overlap is not None else 0.999
    first_ov = a.min_overlap if a.min_overlap is not None else (0.999 if a.dtype == "fp32" else None)
    res = {"model": a.model, "indexer": a.indexer, "layout": ix.layout, "ctx": T, "k": k, "bsel": bsel,
           "device": a.device, "dtype": a.dtype, "spindle_device": a.spindle_device}
    with tempfile.TemporaryDirectory() as tmp:
        ids_file = os.path.join(tmp, "ids.txt")
        open(ids_file, "w").write(" ".join(map(str, ids)) + "\n")
        sp_dense = spindle_logits(a.spindle, a.model, ids_file, os.path.join(tmp, "d.npy"), a.spindle_device)
        sp_sparse = spindle_logits(a.spindle, a.model, ids_file, os.path.join(tmp, "s.npy"), a.spindle_device, ref,
                                   k, bsel)
        first = min(ix.layers)
        subprocess.run([a.spindle, "teacher", "--model", a.model, "--ids", ids_file, "--ctx", str(T), "--out",
                        os.path.join(tmp, "sh"), "--layers", str(first), "--x-dtype", "fp32"], check=True,
                       stderr=subprocess.DEVNULL)
        sel_file = os.path.join(tmp, "sel.npy")
        subprocess.run([a.spindle, "scores", "--indexer", ref, "--shard", os.path.join(tmp, "sh", "shard-00000.h5"),
                        "--layer", str(first), "--dump-selection", sel_file, "--k", str(k), "--bsel", str(bsel)],
                       check=True, stderr=subprocess.DEVNULL)
        sp_sel = np.load(sel_file).astype(np.int64)

    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype, attn_implementation="sdpa").to(a.device)
    model.eval()
    hf_dense = hf_logits(model, ids, a.device)
    sp = SparsePrefill(model, ix, k, bsel)
    try:
        model.set_attn_implementation("spindle_sparse")
    except Exception:  # older transformers: the config field is read at each forward
        model.config._attn_implementation = "spindle_sparse"
    hf_sparse = hf_logits(model, ids, a.device)

    res["dense_vs_spindle_dense"] = diff(hf_dense, sp_dense)
    res["sparse_vs_spindle_sparse"] = diff(hf_sparse, sp_sparse)
    res["sparse_vs_dense_hf"] = diff(hf_sparse, hf_dense)
    ov = {}
    for l, (sel, x) in sorted(sp.sel.items()):
        ov[l] = si.overlap(ix.select(l, x, k, bsel), sel)
    res["selection_overlap_torch_vs_numpy"] = {"min": min(ov.values()), "mean": float(np.mean(list(ov.values()))),
                                               "layers": len(ov)}
    res["selection_overlap_first_layer_vs_spindle"] = {"layer": first, "overlap": si.overlap(sp_sel, sp.sel[first][0])}
    fl, sv = res["dense_vs_spindle_dense"], res["sparse_vs_spindle_sparse"]
    if tol is None:  # bf16: judged against the dense pair's floor
        res["bf16_floor"] = {"mean_ratio": sv["mean_abs"] / max(fl["mean_abs"], 1e-30),
                             "top1_drop": fl["top1_agree"] - sv["top1_agree"],
                             "floor_factor": a.floor_factor, "top1_drop_allowed": a.top1_drop}
    print(json.dumps(res, indent=1))
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)
    bad = []
    if tol is not None and sv["max_abs"] > tol:
        bad.append(f"max |Δlogit| {sv['max_abs']:.3g} > {tol}")
    if tol is None:
        print(f"hf-sparse-prefill: bf16 floor: mean |Δlogit| {sv['mean_abs']:.4g} = "
              f"{res['bf16_floor']['mean_ratio']:.2f}x the dense pair's {fl['mean_abs']:.4g}; top-1 "
              f"{sv['top1_agree']:.4f} vs {fl['top1_agree']:.4f}")
        if res["bf16_floor"]["mean_ratio"] > a.floor_factor:
            bad.append(f"mean |Δlogit| {sv['mean_abs']:.4g} > {a.floor_factor} x the dense pair's {fl['mean_abs']:.4g}")
        if res["bf16_floor"]["top1_drop"] > a.top1_drop:
            bad.append(f"top-1 agreement {sv['top1_agree']:.4f} more than {a.top1_drop} below the dense pair's "
                       f"{fl['top1_agree']:.4f}")
    if res["selection_overlap_torch_vs_numpy"]["min"] < min_ov:
        bad.append(f"torch supports differ from the numpy reference (overlap < {min_ov})")
    if first_ov is not None and res["selection_overlap_first_layer_vs_spindle"]["overlap"] < first_ov:
        bad.append(f"the first layer's supports differ from spindle's (overlap < {first_ov})")
    for b in bad:
        print(f"hf-sparse-prefill: FAIL: {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
