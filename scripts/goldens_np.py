"""goldens_np.py: the torch-free pieces of the golden tooling (scripts/make-goldens.py's independent
numpy forward and scripts/emulate-mixed.py), with numpy alone (no torch, no safetensors package).

read_safetensors(folder) -> {name: (float32 array, stored dtype)} from model.safetensors or the shards of
model.safetensors.index.json. F32, F16 and BF16 are widened to float32 exactly. The format: an 8-byte
little-endian header length, the JSON header (dtype, shape, data_offsets per tensor), then the raw data.
gemma3_layout(cfg) -> (layer types, {layer type: RoPE parameters}) of a gemma3_text config.json in either
style (layer_types + rope_parameters, or the legacy sliding_window_pattern + rope_theta /
rope_local_base_freq / rope_scaling).
numpy_forward(folder, ids, oracle=(k, bsel), bf16=False) -> float64 logits of a llama / qwen2 / qwen3 folder:
the independent check of scripts/make-goldens.py, the oracle goldens' reference, and with bf16=True an
emulation of spindle's GPU bf16 mode (scripts/oracle-bf16-emulate.py).
"""
import json
import math
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


# ----------------------------------------------------------------------------------------------
# Independent check: a float64 numpy forward that reads only the files on disk (raw safetensors
# parsing, both config styles) and follows docs/goldens.md literally. It proves the documented
# rules reproduce the transformers reference within the test tolerance.
# ----------------------------------------------------------------------------------------------
def bf16_round(a):
    """a rounded to the nearest bfloat16 (ties to even), as float64."""
    b = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


def read_safetensors_raw(folder):
    """{name: float64 array} of the files on disk (scripts/goldens_np.py, widened exactly)."""
    return {k: x.astype(np.float64) for k, (x, _) in read_safetensors(folder).items()}


def doc_rope(cfg, head_dim):
    """RoPE parameters and inv_freq exactly as docs/goldens.md describes (float64)."""
    rp = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}   # rope_scaling wins if both
    rp = dict(rp)
    theta = float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    rtype = rp.get("rope_type", rp.get("type", "default"))
    prf = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    if rtype != "default" and prf not in (None, 1.0):
        raise ValueError("partial_rotary_factor != 1 unsupported for llama/qwen2/qwen3")
    dim = head_dim
    i = np.arange(0, dim, 2, dtype=np.float64)
    inv = 1.0 / theta ** (i / dim)
    attn = 1.0
    if rtype in ("llama3", "yarn"):
        orig = cfg.get("original_max_position_embeddings",
                       rp.get("original_max_position_embeddings", cfg["max_position_embeddings"]))
    if rtype == "default":
        pass
    elif rtype == "linear":
        inv = inv / rp["factor"]
    elif rtype == "llama3":
        f, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
        lo_wl, hi_wl = orig / lo, orig / hi
        wl = 2 * math.pi / inv
        smooth = (orig / wl - lo) / (hi - lo)
        new = np.where(wl > lo_wl, inv / f, inv)
        mid = (wl >= hi_wl) & (wl <= lo_wl)
        new = np.where(mid, (1 - smooth) * inv / f + smooth * inv, new)
        inv = new
    elif rtype == "yarn":
        f = rp.get("factor") or cfg["max_position_embeddings"] / orig
        bf = rp.get("beta_fast") or 32
        bs = rp.get("beta_slow") or 1

        def corr(nrot):
            return dim * math.log(orig / (nrot * 2 * math.pi)) / (2 * math.log(theta))
        lo, hi = corr(bf), corr(bs)
        if rp.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(dim // 2) - lo) / (hi - lo), 0, 1)
        extra = 1 - ramp
        inv = (inv / f) * (1 - extra) + inv * extra
        af = rp.get("attention_factor")
        if af is None:
            def gm(s, m=1.0):
                return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
            ms, msa = rp.get("mscale"), rp.get("mscale_all_dim")
            af = gm(f, ms) / gm(f, msa) if (ms and msa) else gm(f)
        attn = af
    else:
        raise ValueError(rtype)
    return inv, attn


def _np_teacher_P(q, k, mask, G, scale):
    """The teacher P of docs/design.md: the head average of each head's causal softmax (q [T, Hq, d],
    k [T, Hkv, d], G = Hq / Hkv, mask additive [T, T]), [T, T]."""
    T, nh = q.shape[0], q.shape[1]
    P = np.zeros((T, T))
    for hh in range(nh):
        s = (q[:, hh] @ k[:, hh // G].T) * scale + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        P += s / s.sum(-1, keepdims=True)
    return P / nh


def _np_oracle_mask(P, k, bsel):
    T = P.shape[0]
    M = np.zeros((T, T), dtype=bool)
    for lo in range(0, T, bsel):
        hi = min(lo + bsel, T)
        A = P[lo:hi, :hi].sum(0)
        S = np.zeros(hi, dtype=bool)
        S[np.argsort(-A, kind="stable")[:min(k, hi)]] = True
        for t in range(lo, hi):
            if S[:t + 1].any():
                M[t, :t + 1] = S[:t + 1]
            else:
                M[t, t] = True
    return M


def numpy_forward(folder, ids, window=None, oracle=None, bf16=False):
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    W = read_safetensors_raw(folder)
    mt = cfg["model_type"]
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    if mt == "qwen3":
        hd = cfg.get("head_dim", 128)
    else:
        hd = cfg.get("head_dim") or H // nh
    eps = cfg.get("rms_norm_eps", 1e-6)
    rnd = bf16_round if bf16 else (lambda a: a)
    inv, attn_factor = doc_rope(cfg, hd)
    T = len(ids)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, 1) * attn_factor
    sin = np.concatenate([np.sin(ang)] * 2, 1) * attn_factor

    def rms(x, w):
        return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))

    def lin(x, p):  # bf16: operands rounded to bfloat16, products summed in float64 (bf16 GEMMs)
        y = rnd(x) @ rnd(W[p + ".weight"]).T
        return y + W[p + ".bias"] if p + ".bias" in W else y

    def rope(x):  # [T, heads, hd]
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * cos[:, None, :] + np.concatenate([-x2, x1], -1) * sin[:, None, :]
    x = W["model.embed_tokens.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    if window is not None:   # only for the sensitivity check: what a wrongly applied window would give
        mask = mask + np.tril(np.full((T, T), -np.inf), -window)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, W[p + "input_layernorm.weight"])
        q = lin(h, p + "self_attn.q_proj").reshape(T, nh, hd)
        k = lin(h, p + "self_attn.k_proj").reshape(T, nkv, hd)
        v = lin(h, p + "self_attn.v_proj").reshape(T, nkv, hd)
        if mt == "qwen3":
            q = rms(q, W[p + "self_attn.q_norm.weight"])
            k = rms(k, W[p + "self_attn.k_norm.weight"])
        q, k, v = rnd(rope(q)), rnd(rope(k)), rnd(v)  # bf16: attention (and the oracle's P) on bf16 q, k, v
        G = nh // nkv
        o = np.empty((T, nh, hd))
        lmask = mask
        if oracle is not None:   # oracle goldens: teacher P from this layer's q/k, then restricted softmax
            lmask = np.where(_np_oracle_mask(_np_teacher_P(q, k, mask, G, hd ** -0.5), *oracle), 0.0, -np.inf)
        for hh in range(nh):
            s = (q[:, hh] @ k[:, hh // G].T) * hd ** -0.5 + lmask
            s = np.exp(s - s.max(-1, keepdims=True))
            o[:, hh] = (s / s.sum(-1, keepdims=True)) @ v[:, hh // G]
        x = x + lin(o.reshape(T, nh * hd), p + "self_attn.o_proj")
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        g = lin(h, p + "mlp.gate_proj")
        x = x + lin((g / (1 + np.exp(-g))) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms(x, W["model.norm.weight"])
    lm = W.get("lm_head.weight") if not cfg.get("tie_word_embeddings", False) else None
    if lm is None:
        lm = W["model.embed_tokens.weight"]
    return x @ lm.T
