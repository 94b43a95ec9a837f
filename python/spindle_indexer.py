"""spindle_indexer: spindle's exported indexers outside spindle (numpy; torch optional).

Loads an export of any layout (`spindle export --layout spindle|dsa|qsa`, docs/formats.md "Export
layouts"), computes q^I, k^I and the scores of one layer for that layer's normed attention input x
[T, d_model], and selects the supports sparse prefill uses, exactly as docs/design.md defines them:

    collapsed  score[t, j] = q[t] . k[j] / sqrt(d_index)
    expanded   score[t, j] = sum_h w[t, h] * relu(q[t, h] . k[j]),  w = ww x
    q = R(Wq x),  k = R(N(Wk x)),  R = rotate-half RoPE on the first d_rope dims, N = key norm
    per query (bsel 1):  S_t = top-k of score[t, j] over j <= t (all when t + 1 <= k)
    per block (bsel s):  S_B = top-k of A_B(j) = sum_{t in B, t >= j} Q_t(j) over j < end(B),
                         Q_t = softmax over j <= t of score[t, .]; query t attends S_B ∩ [0, t] or {t}
    ties: the larger value first, then the lower index.

numpy is the only requirement. safetensors files are read with the `safetensors` package when it
is importable, else with the small reader below. With torch installed, `Indexer.torch_select`
computes the same supports from a torch tensor (on its device).

    import spindle_indexer as si
    ix = si.load("INDEXER")                 # any layout
    sel = ix.select(layer, x, k=256, bsel=1)  # [T, k] key indices ascending, then -1
    mask = si.support_mask(sel, T, bsel=1)  # [T, T] bool: query t may attend key j
"""
import json
import math
import os
import struct

import numpy as np

__all__ = ["load", "read_safetensors", "Indexer", "LayerParams", "support_mask", "overlap"]

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read_safetensors(path, use_package=None):
    """{name: numpy array} of a safetensors file: the `safetensors` package when importable (or
    use_package=True), else this reader (F64/F32/F16/BF16/I64/I32). Env SPINDLE_INDEXER_NO_SAFETENSORS=1
    forces this reader."""
    if use_package is None:
        use_package = os.environ.get("SPINDLE_INDEXER_NO_SAFETENSORS") != "1"
    if use_package:
        try:
            from safetensors.numpy import load_file
        except ImportError:
            pass
        else:
            return dict(load_file(path))
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than its header length)")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise ValueError(f"{path}: header length {n} beyond the file")
    header = json.loads(raw[8:8 + n])
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        shape = tuple(t["shape"])
        if t["dtype"] == "BF16":
            u = np.frombuffer(data[a:b], dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        elif t["dtype"] in _DTYPES:
            arr = np.frombuffer(data[a:b], dtype=np.dtype(_DTYPES[t["dtype"]]).newbyteorder("<")).copy()
        else:
            raise ValueError(f"{path}: tensor {name}: dtype {t['dtype']} not supported")
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"{path}: tensor {name}: {arr.size} values for shape {list(shape)}")
        out[name] = arr.reshape(shape)
    return out


class LayerParams:
    """One layer's indexer in spindle's terms: wq [H*d, d_model], wk [d, d_model], key-norm gain g and
    bias b ([d] or None), ww [H, d_model] (expanded) or None; plus, for a qsa file scored natively, the
    query-norm gain qg."""

    def __init__(self, wq, wk, g=None, b=None, ww=None, qg=None):
        self.wq, self.wk, self.g, self.b, self.ww, self.qg = wq, wk, g, b, ww, qg


class Indexer:
    """An exported indexer: cfg (spindle's fields: variant, d_model, d_index, d_rope, n_heads, key_norm,
    norm_eps, rope_theta, default_k, default_bsel), layout, and layers {l: LayerParams}."""

    def __init__(self, cfg, layout, layers, native=False):
        self.cfg, self.layout, self.layers, self.native = cfg, layout, layers, native

    # --- projections -------------------------------------------------------------------------------------
    def _rope(self, v, pos):
        """Rotate-half RoPE on the first d_rope dims of v [n, ..., d] at positions pos [n] (spindle's fp32
        angles: inv_freq in double rounded to fp32, angle = fp32(t) * inv_freq in fp32)."""
        d_rope, theta = self.cfg["d_rope"], self.cfg["rope_theta"]
        if d_rope == 0:
            return v
        half = d_rope // 2
        inv = (1.0 / np.float64(theta) ** (np.arange(half, dtype=np.float64) * 2.0 / d_rope)).astype(np.float32)
        ang = (np.asarray(pos).astype(np.float32)[:, None] * inv[None, :]).astype(np.float64)
        shape = (len(pos),) + (1,) * (v.ndim - 2) + (half,)
        cos, sin = np.cos(ang).reshape(shape), np.sin(ang).reshape(shape)
        out = v.copy()
        a, b = v[..., :half], v[..., half:d_rope]
        out[..., :half] = a * cos - b * sin
        out[..., half:d_rope] = b * cos + a * sin
        return out

    def project(self, layer, x, dtype=np.float64):
        """q [T, H, d], k [T, d] and (expanded) w [T, H] of layer for x [T, d_model] (positions 0..T-1)."""
        p, c = self.layers[layer], self.cfg
        x = np.asarray(x, dtype=dtype)
        T, H, d = x.shape[0], c["n_heads"], c["d_index"]
        pos = np.arange(T)
        u = x @ p.wk.T.astype(dtype)
        eps = c["norm_eps"]
        if c["key_norm"] == "layer":
            u = (u - u.mean(1, keepdims=True)) / np.sqrt(u.var(1, keepdims=True) + eps) * p.g + p.b
        elif c["key_norm"] == "rms":
            u = u / np.sqrt((u * u).mean(1, keepdims=True) + eps) * p.g
        k = self._rope(u, pos)
        q = (x @ p.wq.T.astype(dtype)).reshape(T, H, d)
        if self.native and p.qg is not None:  # Qwen4-Exp's query RMSNorm (qsa scored natively)
            q = q / np.sqrt((q * q).mean(-1, keepdims=True) + eps) * p.qg
        q = self._rope(q, pos)
        w = x @ p.ww.T.astype(dtype) if p.ww is not None else None
        return q, k, w

    def score_rows(self, q, k, w, rows):
        """score[t, j] for t in rows (array), every j < T; -inf for j > t."""
        c = self.cfg
        rows = np.asarray(rows)
        if c["variant"] == "collapsed" and self.native and self.layout == "qsa":
            # Qwen4-Exp: sum over query heads of ReLU(q_h . k) / sqrt(d)
            s = np.maximum(np.einsum("nhd,jd->nhj", q[rows], k), 0).sum(1) / math.sqrt(c["d_index"])
        elif c["variant"] == "collapsed":
            s = np.einsum("nhd,jd->nj", q[rows], k) / math.sqrt(c["d_index"])
        else:
            s = np.einsum("nh,nhj->nj", w[rows], np.maximum(np.einsum("nhd,jd->nhj", q[rows], k), 0))
        s[np.arange(k.shape[0])[None, :] > rows[:, None]] = -np.inf
        return s

    def scores(self, layer, x, dtype=np.float64):
        """score [T, T] of layer for x (fine for short T; use score_rows in chunks for long ones)."""
        q, k, w = self.project(layer, x, dtype)
        return self.score_rows(q, k, w, np.arange(q.shape[0]))

    # --- selection ---------------------------------------------------------------------------------------
    @staticmethod
    def _topk_sorted(v, k):
        """Indices of the k largest of v (ties: the lower index), ascending."""
        order = np.argsort(-v, kind="stable")[:k]
        return np.sort(order)

    def select(self, layer, x, k=None, bsel=None, dtype=np.float64, chunk=256):
        """Supports of layer on x: [T, k] (bsel 1) or [ceil(T/bsel), k] rows of key indices ascending,
        padded with -1 (docs/design.md "Indexer at inference"). k, bsel default to the export's."""
        k = k or self.cfg["default_k"]
        bsel = bsel or self.cfg["default_bsel"]
        q, kk, w = self.project(layer, x, dtype)
        T = q.shape[0]
        k = min(k, T)
        rows = (T + bsel - 1) // bsel
        sel = np.full((rows, k), -1, dtype=np.int64)
        for r0 in range(0, rows, max(1, chunk // bsel)):
            r1 = min(rows, r0 + max(1, chunk // bsel))
            t0, t1 = r0 * bsel, min(T, r1 * bsel)
            s = self.score_rows(q, kk, w, np.arange(t0, t1))
            if bsel == 1:
                for i, t in enumerate(range(t0, t1)):
                    idx = np.arange(t + 1) if t + 1 <= k else self._topk_sorted(s[i, :t + 1], k)
                    sel[t, :len(idx)] = idx
                continue
            m = s.max(1, keepdims=True)
            e = np.exp(s - m)
            Q = e / e.sum(1, keepdims=True)
            for b in range(r0, r1):
                lo, hi = b * bsel - t0, min(T, (b + 1) * bsel) - t0
                end = t0 + hi
                if end <= k:
                    idx = np.arange(end)
                else:
                    A = Q[lo:hi, :end].sum(0)  # Q_t(j) = 0 for j > t: the causal sum
                    idx = self._topk_sorted(A, k)
                sel[b, :len(idx)] = idx
        return sel

    def torch_select(self, layer, x, k=None, bsel=None):
        """select() for a torch tensor x [T, d_model] (computed in fp32 on x's device); returns a torch
        int64 tensor [rows, k] of the same form."""
        import torch

        c, p = self.cfg, self.layers[layer]
        k = k or c["default_k"]
        bsel = bsel or c["default_bsel"]
        dev = x.device
        x = x.float()
        T, H, d = x.shape[0], c["n_heads"], c["d_index"]
        f = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float32, device=dev)  # noqa: E731
        u = x @ f(p.wk).T
        eps = c["norm_eps"]
        if c["key_norm"] == "layer":
            u = (u - u.mean(1, keepdim=True)) / torch.sqrt(u.var(1, unbiased=False, keepdim=True) + eps) * f(p.g) + f(p.b)
        elif c["key_norm"] == "rms":
            u = u / torch.sqrt((u * u).mean(1, keepdim=True) + eps) * f(p.g)
        q = (x @ f(p.wq).T).reshape(T, H, d)
        if self.native and p.qg is not None:
            q = q / torch.sqrt((q * q).mean(-1, keepdim=True) + eps) * f(p.qg)
        dr = c["d_rope"]
        if dr:
            half = dr // 2
            inv = f((1.0 / np.float64(c["rope_theta"]) ** (np.arange(half) * 2.0 / dr)).astype(np.float32))
            ang = torch.arange(T, device=dev, dtype=torch.float32)[:, None] * inv[None, :]
            cos, sin = torch.cos(ang), torch.sin(ang)

            def rot(v, cos, sin):
                v = v.clone()
                a, b = v[..., :half].clone(), v[..., half:dr].clone()
                v[..., :half], v[..., half:dr] = a * cos - b * sin, b * cos + a * sin
                return v

            u = rot(u, cos, sin)
            q = rot(q, cos[:, None, :], sin[:, None, :])
        if c["variant"] == "collapsed" and self.native and self.layout == "qsa":
            s = torch.relu(torch.einsum("thd,jd->thj", q, u)).sum(1) / math.sqrt(d)
        elif c["variant"] == "collapsed":
            s = q[:, 0, :] @ u.T / math.sqrt(d)
        else:
            w = x @ f(p.ww).T
            s = torch.einsum("th,thj->tj", w, torch.relu(torch.einsum("thd,jd->thj", q, u)))
        causal = torch.ones(T, T, dtype=torch.bool, device=dev).tril()
        s = s.masked_fill(~causal, float("-inf"))
        k = min(k, T)
        rows = (T + bsel - 1) // bsel
        sel = torch.full((rows, k), -1, dtype=torch.int64, device=dev)
        if bsel == 1:
            vals = s
            n_cand = torch.arange(1, T + 1, device=dev)
        else:
            Q = torch.softmax(s, dim=1)
            # A block's sum in a fixed order (index_add_ on a GPU adds with atomics, in no fixed order, which
            # breaks the exact ties of keys every query of the block scores alike, e.g. ReLU sums of 0).
            Q = torch.cat([Q, Q.new_zeros(rows * bsel - T, T)]) if rows * bsel > T else Q
            vals = Q.reshape(rows, bsel, T).sum(1)
            end = torch.clamp((torch.arange(rows, device=dev) + 1) * bsel, max=T)
            vals = vals.masked_fill(torch.arange(T, device=dev)[None, :] >= end[:, None], float("-inf"))
            n_cand = end
        # Ties: the larger value first, then the lower index (a stable sort of the negated values).
        order = torch.sort(-vals, dim=1, stable=True).indices[:, :k]
        take = torch.arange(k, device=dev)[None, :] < n_cand[:, None]
        order = torch.where(take, order, torch.full_like(order, T))
        order = torch.sort(order, dim=1).values
        return torch.where(order < T, order, torch.full_like(order, -1))


def _spindle_cfg(c):
    keys = ("variant", "d_model", "d_index", "d_rope", "n_heads", "key_norm", "norm_eps", "rope_theta", "default_k",
            "default_bsel")
    return {key: c[key] for key in keys if key in c}


def load(folder, native=False):
    """The Indexer of an export folder (config.json + model.safetensors) of any layout. native=True scores
    a qsa file with Qwen4-Exp's own formula (query RMSNorm, ReLU) instead of spindle's; the other layouts
    score natively what spindle scores."""
    cfg = json.load(open(os.path.join(folder, "config.json")))
    w = read_safetensors(os.path.join(folder, "model.safetensors"))
    layout = cfg.get("layout", "spindle")
    sp = cfg.get("spindle", {})
    pre = "model.layers.{}.self_attn.indexer."
    layers = {}
    if layout == "spindle":
        c = _spindle_cfg(cfg)
        for l in cfg["layers"]:
            p = pre.format(l)
            layers[l] = LayerParams(w[p + "wq.weight"], w[p + "wk.weight"], w.get(p + "k_norm.weight"),
                                    w.get(p + "k_norm.bias"), w.get(p + "ww.weight"))
    elif layout == "dsa":
        H, d = cfg["index_n_heads"], cfg["index_head_dim"]
        rp = cfg.get("rope_parameters", {})
        c = {"variant": "expanded", "d_model": cfg["hidden_size"], "d_index": d, "d_rope": cfg["qk_rope_head_dim"],
             "n_heads": H, "key_norm": "layer", "norm_eps": 1e-6, "rope_theta": rp.get("rope_theta", 10000.0),
             "default_k": cfg["index_topk"], "default_bsel": sp.get("default_bsel", 1)}
        for l in cfg["layers"]:
            p = pre.format(l)
            # DeepSeek-V3.2 scales the weights by H^-1/2 and the dot products by d^-1/2: spindle's ww.
            ww = (w[p + "weights_proj.weight"].astype(np.float64) / math.sqrt(H * d)).astype(np.float32)
            layers[l] = LayerParams(w[p + "wq_b.weight"], w[p + "wk.weight"], w[p + "k_norm.weight"],
                                    w[p + "k_norm.bias"], ww)
    elif layout == "qsa":
        H, d = cfg["indexer_n_heads"], cfg["indexer_head_dim"]
        if cfg.get("indexer_kv_heads", 1) != 1 or cfg.get("indexer_compress_ratio", 1) != 1:
            raise ValueError(f"{folder}: qsa with indexer_kv_heads or indexer_compress_ratio other than 1 is not "
                             "a per-token indexer")
        if H != 1 and not native:
            raise ValueError(f"{folder}: qsa with {H} query heads has no spindle form (load with native=True)")
        rp = cfg.get("rope_parameters", {})
        c = {"variant": "collapsed", "d_model": cfg["hidden_size"], "d_index": d, "d_rope": cfg["indexer_rotary_dim"],
             "n_heads": H, "key_norm": "rms", "norm_eps": cfg["rms_norm_eps"],
             "rope_theta": rp.get("rope_theta", 10000.0), "default_k": cfg["indexer_budget"],
             "default_bsel": sp.get("default_bsel", 1)}
        for l in cfg["layers"]:
            p = pre.format(l)
            qk = w[p + "index_qk_proj.weight"]
            g = (1.0 + w[p + "k_layernorm.weight"].astype(np.float64)).astype(np.float32)
            qg = (1.0 + w[p + "q_layernorm.weight"].astype(np.float64)).astype(np.float32)
            if not native and np.any(qg != 1):
                raise ValueError(f"{folder}: layer {l}: q_layernorm is not the identity gain; spindle's query "
                                 "has no norm (load with native=True)")
            layers[l] = LayerParams(qk[:H * d], qk[H * d:], g, None, None, qg)
    else:
        raise ValueError(f"{folder}: unknown layout {layout!r}")
    return Indexer(c, layout, layers, native)


def support_mask(sel, T, bsel=1):
    """[T, T] bool: query t may attend key j. Per query: S_t. Per block: S_B ∩ [0, t], or {t} when empty."""
    sel = np.asarray(sel)
    m = np.zeros((T, T), dtype=bool)
    for t in range(T):
        row = sel[t // bsel]
        row = row[(row >= 0) & (row <= t)]
        if len(row) == 0:
            m[t, t] = True
        else:
            m[t, row] = True
    return m


def overlap(a, b):
    """Fraction of the keys of supports a found in supports b (row by row; -1 padding ignored)."""
    a, b = np.asarray(a), np.asarray(b)
    hit = tot = 0
    for ra, rb in zip(a, b):
        sa, sb = set(ra[ra >= 0].tolist()), set(rb[rb >= 0].tolist())
        hit += len(sa & sb)
        tot += len(sa)
    return hit / max(1, tot)
