#!/usr/bin/env python3
"""emulate-mixed.py: a float32 numpy Gemma 3 forward over the golden folders
(tests/goldens/gemma3_*), in spindle's GPU precisions, compared with the HF
transformers logits (logits.npy).

  fp32   every step in float32, as HF computes the reference (sanity: matches
         logits.npy to ~1e-5).
  mixed  what `spindle logits --device cuda --precision mixed` computes
         (model/forward_cuda.h): the layer weight matrices (q/k/v/o,
         gate/up/down) rounded to bf16 (f16 for an F16 checkpoint), and the
         activation feeding each of those GEMMs rounded the same way just
         before it; the GEMM accumulates and writes fp32. Everything else
         fp32: embedding (× sqrt(hidden) as fp32), the tied LM head, all
         RMSNorms ((1 + w) gains), RoPE, attention, GELU-tanh, the residual
         stream, the logit soft-cap.
  bf16   an approximation of --precision bf16: mixed, plus q, k, v (after
         q/k norm and RoPE) and the attention probabilities (unnormalised, as
         a flash kernel feeds P·V) rounded to bf16, and the gate and up GEMMs
         writing bf16. cuDNN's exact internals are not modelled.

The rounding itself is selectable (--round): rne (round to nearest, ties to
even: what the GPU does), trunc (round toward zero), and --round-what picks
which operands round (weights, activations, both), to see where the distance
comes from. --jitter N repeats mixed N times with the fp32 reference
activations perturbed by one ulp of fp32 noise before each rounding
(equivalent-rounding spread: how much nmse / top-1 move for a computation
just as legitimate as the GPU's), reporting min / max.

Output, one line per case and mode: max|Δ| against logits.npy, nmse
Σ(x − ref)² / Σ ref², top-1 agreement, and the flipped rows with the
reference's top-2 margin (the same measures tests/test_goldens_cuda.sh prints).
--per-layer also prints, per layer, the relative rms distance of the mixed
residual stream from the fp32 one.

Reads only config.json + model.safetensors (raw safetensors parsing; BF16 and
F16 widened to float32 exactly). Needs numpy only.

  python3 scripts/emulate-mixed.py                  # every gemma3_* golden, fp32 + mixed
  python3 scripts/emulate-mixed.py --round trunc tests/goldens/gemma3_legacy_w4
"""
import argparse
import glob
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from goldens_np import gemma3_layout, read_safetensors  # noqa: E402

F32 = np.float32


def round_bf16(x, how):
    """float32 -> nearest bf16 value (as float32). rne: nearest, ties to even; trunc: toward zero."""
    x = np.ascontiguousarray(x, dtype=F32)
    u = x.view(np.uint32)
    if how == "rne":
        u = u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
    elif how != "trunc":
        raise ValueError(how)
    return (u & np.uint32(0xFFFF0000)).view(F32)


def round_f16(x, how):
    x = np.asarray(x, dtype=F32)
    if how == "rne":
        return x.astype(np.float16).astype(F32)
    # toward zero: nearest, then step back one ulp where that moved away from zero
    h = x.astype(np.float16)
    away = np.abs(h.astype(F32)) > np.abs(x)
    h = np.where(away, np.nextafter(h, np.float16(0)), h)
    return h.astype(F32)


def rope_tables(rp, hd, T):
    """cos, sin [T, hd] in float32 as transformers computes them (default and linear RoPE)."""
    theta = F32(rp.get("rope_theta", 10000.0))
    i = np.arange(0, hd, 2, dtype=np.int64).astype(F32)
    inv = (F32(1.0) / (theta ** (i / F32(hd)))).astype(F32)
    rtype = rp.get("rope_type", "default")
    if rtype == "linear":
        inv = (inv / F32(rp["factor"])).astype(F32)
    elif rtype != "default":
        raise ValueError(f"rope_type {rtype} not emulated (the gemma3 goldens use default and linear)")
    ang = (np.arange(T, dtype=F32)[:, None] * inv[None, :]).astype(F32)
    emb = np.concatenate([ang, ang], 1)
    return np.cos(emb).astype(F32), np.sin(emb).astype(F32)


def forward(folder, ids, mode, how="rne", what="both", jitter_rng=None, trace=None):
    """Gemma 3 logits [T, vocab] in float32. mode fp32 | mixed; how/what: the rounding (mixed only)."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "gemma3_text":
        raise ValueError(f"{folder}: model_type {cfg.get('model_type')} (only gemma3_text is emulated)")
    W = read_safetensors(folder)
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim", 256)
    eps = F32(cfg.get("rms_norm_eps", 1e-6))
    window = cfg["sliding_window"]
    scale = F32(float(cfg.get("query_pre_attn_scalar", 256)) ** -0.5)
    softcap = cfg.get("final_logit_softcapping")
    types, rps = gemma3_layout(cfg)
    T = len(ids)
    cs = {lt: rope_tables(rp, hd, T) for lt, rp in rps.items()}
    G = nh // nkv
    layer_dt = {W[k][1] for k in W if ".layers." in k and k.endswith("_proj.weight")}
    f16 = layer_dt == {"F16"}
    rnd = (lambda x: round_f16(x, how)) if f16 else (lambda x: round_bf16(x, how))
    mixed = mode in ("mixed", "bf16")
    b16 = mode == "bf16"
    rw = mixed and what in ("both", "weights")
    ra = mixed and what in ("both", "activations")

    def wt(name):
        return W[name][0]

    def proj(name):
        w = wt(name + ".weight")
        return rnd(w) if rw else w

    def gemm(x, name):
        x = x.astype(F32)
        if ra:
            if jitter_rng is not None:
                # one fp32 ulp of noise: an equally legitimate fp32 computation of the input
                x = (x + x * F32(2.0 ** -23) * jitter_rng.choice(np.array([-1, 0, 1], F32), x.shape)).astype(F32)
            x = rnd(x)
        return (x @ proj(name).T).astype(F32)

    def rms(x, w):
        x = x.astype(F32)
        var = (x * x).mean(-1, keepdims=True, dtype=F32)
        return (x * (F32(1.0) / np.sqrt(var + eps))).astype(F32) * (F32(1.0) + w)

    def rope(x, lt):
        cos, sin = cs[lt]
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return (x * cos[:, None, :] + np.concatenate([-x2, x1], -1) * sin[:, None, :]).astype(F32)

    c_gelu = F32(math.sqrt(2.0 / math.pi))

    def gelu_tanh(x):
        return (F32(0.5) * x * (F32(1.0) + np.tanh(c_gelu * (x + F32(0.044715) * x * x * x)))).astype(F32)

    t_idx, j_idx = np.arange(T)[:, None], np.arange(T)[None, :]
    causal = j_idx <= t_idx
    masks = {"full_attention": causal, "sliding_attention": causal & (j_idx > t_idx - window)}
    emb = wt("model.embed_tokens.weight")
    x = (emb[np.asarray(ids)] * F32(math.sqrt(H))).astype(F32)
    for l, lt in enumerate(types):
        p = f"model.layers.{l}."
        h = rms(x, wt(p + "input_layernorm.weight"))
        q = rms(gemm(h, p + "self_attn.q_proj").reshape(T, nh, hd), wt(p + "self_attn.q_norm.weight"))
        k = rms(gemm(h, p + "self_attn.k_proj").reshape(T, nkv, hd), wt(p + "self_attn.k_norm.weight"))
        v = gemm(h, p + "self_attn.v_proj").reshape(T, nkv, hd)
        q, k = rope(q, lt), rope(k, lt)
        if b16:
            q, k, v = rnd(q), rnd(k), rnd(v)
        o = np.empty((T, nh, hd), F32)
        for hh in range(nh):
            s = ((q[:, hh] @ k[:, hh // G].T) * scale).astype(F32)
            s = np.where(masks[lt], s, F32(-np.inf))
            s = np.exp(s - s.max(-1, keepdims=True)).astype(F32)
            if b16:
                o[:, hh] = (rnd(s) @ v[:, hh // G]) / s.sum(-1, keepdims=True, dtype=F32)
            else:
                o[:, hh] = (s / s.sum(-1, keepdims=True, dtype=F32)) @ v[:, hh // G]
        x = (x + rms(gemm(o.reshape(T, nh * hd), p + "self_attn.o_proj"),
                     wt(p + "post_attention_layernorm.weight"))).astype(F32)
        h = rms(x, wt(p + "pre_feedforward_layernorm.weight"))
        g, u = gemm(h, p + "mlp.gate_proj"), gemm(h, p + "mlp.up_proj")
        if b16:
            g, u = rnd(g), rnd(u)
        m = gemm(gelu_tanh(g) * u, p + "mlp.down_proj")
        x = (x + rms(m, wt(p + "post_feedforward_layernorm.weight"))).astype(F32)
        if trace is not None:
            trace.append(x.copy())
    x = rms(x, wt("model.norm.weight"))
    logits = (x @ emb.T).astype(F32)
    if softcap:
        sc = F32(softcap)
        logits = (np.tanh(logits / sc) * sc).astype(F32)
    return logits


def measure(got, ref):
    got, ref = got.astype(np.float64), ref.astype(np.float64)
    max_abs = float(np.abs(got - ref).max())
    nmse = float(((got - ref) ** 2).sum() / (ref ** 2).sum())
    flips = np.nonzero(got.argmax(1) != ref.argmax(1))[0]
    srt = np.sort(ref, axis=1)
    margin = srt[:, -1] - srt[:, -2]
    top1 = 1.0 - len(flips) / ref.shape[0]
    fl = " ".join(f"t={t}(margin {margin[t]:.2g})" for t in flips[:8]) + (" ..." if len(flips) > 8 else "")
    return max_abs, nmse, top1, fl


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="*", help="golden folders (default: tests/goldens/gemma3_*)")
    ap.add_argument("--modes", default="fp32,mixed", help="comma list of fp32, mixed, bf16 (default fp32,mixed)")
    ap.add_argument("--round", default="rne", choices=["rne", "trunc"], help="rounding of mixed (default rne)")
    ap.add_argument("--round-what", default="both", choices=["both", "weights", "activations"])
    ap.add_argument("--jitter", type=int, default=0, help="N extra mixed runs with 1-ulp fp32 input noise")
    ap.add_argument("--per-layer", action="store_true", help="relative rms of the mixed residual per layer")
    a = ap.parse_args()
    cases = a.cases or sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "..", "tests", "goldens", "gemma3_*")))
    modes = a.modes.split(",")
    for m in modes:
        if m not in ("fp32", "mixed", "bf16"):
            ap.error(f"--modes: {m}")
    print(f"{'case':<28} {'mode':<12} {'T':>5} {'vocab':>6} {'max|diff|':>11} {'nmse':>11} {'top1':>9}")
    for d in cases:
        d = os.path.normpath(d)
        name = os.path.basename(d)
        with open(os.path.join(d, "ids.txt")) as f:
            ids = [int(t) for t in f.read().split()]
        ref = np.load(os.path.join(d, "logits.npy"))
        T, V = ref.shape
        for m in modes:
            tr = [] if (a.per_layer and m != "fp32") else None
            got = forward(d, ids, m, a.round, a.round_what, trace=tr)
            mx, nmse, top1, fl = measure(got, ref)
            label = m if m == "fp32" else f"{m}/{a.round}" + ("" if a.round_what == "both" else f"/{a.round_what[0]}")
            print(f"{name:<28} {label:<12} {T:5d} {V:6d} {mx:11.3e} {nmse:11.3e} {100 * top1:8.2f}%"
                  + (f"  flips: {fl}" if fl else ""))
            if tr is not None:
                base = []
                forward(d, ids, "fp32", trace=base)
                rel = [float(np.sqrt(((u.astype(np.float64) - b) ** 2).mean() / (b.astype(np.float64) ** 2).mean()))
                       for u, b in zip(tr, base)]
                print(f"{'':<28} per-layer residual rel-rms vs fp32: " + " ".join(f"{r:.2e}" for r in rel))
            if m != "fp32" and a.jitter > 0:
                rng = np.random.default_rng(0)
                res = [measure(forward(d, ids, m, a.round, a.round_what, jitter_rng=rng), ref)
                       for _ in range(a.jitter)]
                ns, ts = [r[1] for r in res], [r[2] for r in res]
                print(f"{'':<28} jitter x{a.jitter}: nmse {min(ns):.3e} .. {max(ns):.3e}, "
                      f"top1 {100 * min(ts):.2f}% .. {100 * max(ts):.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
