#!/usr/bin/env python3
"""PyTorch / HF transformers anchors for the GPU benchmark (docs/anchors.md).

Run on the same card, in the same job, as `spindle bench`, so that spindle's numbers sit next to the
numbers of the stacks it is compared with. Shapes are Qwen3-8B's attention (Hq=32, Hkv=8, d_h=128),
bf16, causal, batch 1; lengths from --ctx (default 8192,32768,131072).

Sections (--sections, default all, in this order):
  sdpa     torch SDPA with the cuDNN backend and with the FlashAttention-2 backend: ms and TFLOP/s
  hf       HF transformers prefill TTFT: one forward of T tokens, random bf16 weights, sdpa attention,
           logits_to_keep=1 (time to first token needs only the last row of logits)
  indexer  single-head indexer (d_I=128): scores q_I.k_I for every causal key + top-k per query,
           chunked over queries
  oracle   head-averaged attention probabilities P_t(j) = (1/Hq) sum_h exp(s q.k - lse_h,t) + top-k per
           query, chunked; lse pass and P pass timed apart and together (8K and 32K; 128K with
           --oracle-128k)
  flex     torch FlexAttention (compiled) with a 128-block BlockMask that keeps ~k keys per query
           (the diagonal block plus a fixed random choice of earlier blocks), and dense causal flex
           (32K by default; --flex-ctx)

Timing: CUDA events around each call, after warm-up; median of the repeats (the count adapts to the
time of one call, within per-section bounds; --target-s). Inputs are standard-normal bf16 (never zero).
FLOP convention for attention: a causal pass costs 4*T^2*d_h*Hq/2 = 2*T^2*d_h*Hq FLOPs (the two GEMMs
of T^2*d_h*Hq multiply-adds each, halved by the causal mask); TFLOP/s = that / time.

Output: --json PATH (written to PATH.tmp, then renamed; rewritten after each section with
"complete": false, and a last time with "complete": true) and a table on stdout. Progress goes to
stderr. A measurement that fails (backend unavailable, out of memory, ...) records its error string and
the run goes on; the exit status is 0 unless the arguments are bad (2) or nothing could run (1).

Examples:
  python3 scripts/bench-anchors.py --json results/anchors.json
  python3 scripts/bench-anchors.py --quick --json /tmp/anchors-quick.json
  python3 scripts/bench-anchors.py --device cpu --quick --sections hf,indexer,oracle --json /tmp/a.json
"""
import argparse
import datetime
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

SCHEMA = "spindle-bench-anchors/1"
FLOP_CONVENTION = ("causal attention FLOPs = 4*T^2*d_h*Hq/2 = 2*T^2*d_h*Hq (QK^T and PV, 2 FLOPs per "
                   "multiply-add, half of the T x T pairs under the causal mask; Hq query heads, batch 1); "
                   "block-sparse flex counts 4*d_h*Hq per (query, key) pair it computes")
SECTIONS = ("sdpa", "hf", "indexer", "oracle", "flex")

MODEL_PRESETS = {
    # Qwen3-8B (config.json of Qwen/Qwen3-8B)
    "qwen3-8b": dict(arch="qwen3", hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                     rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False),
    "qwen3-1.7b": dict(arch="qwen3", hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                       rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True),
    # The Qwen3.5 hybrid shapes of `spindle bench --synthetic qwen3.5-9b / qwen3.5-0.8b` (cli/bench.c):
    # Gated DeltaNet layers, every 4th layer gated full attention, d_h 256, partial RoPE 0.25
    "qwen3.5-9b": dict(arch="qwen3_5", hidden_size=4096, intermediate_size=12288, num_hidden_layers=32,
                       num_attention_heads=16, num_key_value_heads=4, head_dim=256, vocab_size=248320,
                       rope_theta=1e7, rms_norm_eps=1e-6, tie_word_embeddings=False, linear_num_key_heads=16,
                       linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
                       linear_conv_kernel_dim=4, full_attention_interval=4),
    "qwen3.5-0.8b": dict(arch="qwen3_5", hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
                         num_attention_heads=8, num_key_value_heads=2, head_dim=256, vocab_size=248320,
                         rope_theta=1e7, rms_norm_eps=1e-6, tie_word_embeddings=True, linear_num_key_heads=16,
                         linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
                         linear_conv_kernel_dim=4, full_attention_interval=4),
    "smollm2-135m": dict(arch="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, head_dim=64, vocab_size=49152,
                         rope_theta=1e5, rms_norm_eps=1e-5, tie_word_embeddings=True),
}

torch = None  # imported in main(), after the arguments are checked


def log(msg):
    print(f"[anchors {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_int_list(text, what):
    try:
        vals = [int(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: expected integers separated by commas, got {text!r}")
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"{what}: expected positive integers, got {text!r}")
    return vals


# ---------------------------------------------------------------------------------------------------
# Timing and bookkeeping


class Bench:
    """Device-aware timer, results list, budget and JSON writer for one run."""

    def __init__(self, args, env):
        self.args = args
        self.dev = torch.device(args.device)
        self.cuda = self.dev.type == "cuda"
        self.env = env
        self.results = []
        self.t0 = time.monotonic()

    # -- time one callable: warm-up, then `reps` timed calls; reps adapt to the first warm call
    def time_fn(self, fn, warmup, min_reps, max_reps, target_s=None):
        target_s = self.args.target_s if target_s is None else target_s
        for _ in range(warmup):
            fn()
        self.sync()
        first = self._one(fn)
        reps = max(min_reps, min(max_reps, int(target_s * 1000.0 / max(first, 1e-3))))
        times = [first]
        for _ in range(reps - 1):
            times.append(self._one(fn))
        return times

    def _one(self, fn):
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end))
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1000.0

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def reset_peak(self):
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def peak(self):
        return int(torch.cuda.max_memory_allocated()) if self.cuda else None

    def over_budget(self):
        return self.args.budget_s > 0 and time.monotonic() - self.t0 > self.args.budget_s

    def elapsed(self):
        return time.monotonic() - self.t0

    # -- one record per measurement (or per failure / skip)
    def add(self, section, name, ctx, ms_all=None, flops=None, peak=None, notes="", error=None,
            skipped=None, **extra):
        rec = {"section": section, "name": name, "ctx": ctx,
               "ms_median": None, "ms_all": None, "reps": 0, "tflops": None,
               "peak_mem_bytes": peak, "notes": notes, "error": error, "skipped": skipped}
        if ms_all:
            rec["ms_all"] = [round(x, 4) for x in ms_all]
            rec["ms_median"] = round(statistics.median(ms_all), 4)
            rec["reps"] = len(ms_all)
            if flops:
                rec["tflops"] = round(flops / (rec["ms_median"] * 1e-3) / 1e12, 2)
        rec.update(extra)
        self.results.append(rec)
        if error:
            log(f"  {name} ctx={ctx}: ERROR {error}")
        elif skipped:
            log(f"  {name} ctx={ctx}: skipped ({skipped})")
        else:
            tf = f", {rec['tflops']} TFLOP/s" if rec["tflops"] is not None else ""
            pk = f", peak {peak / 2**30:.2f} GiB" if peak else ""
            log(f"  {name} ctx={ctx}: {rec['ms_median']} ms (median of {rec['reps']}){tf}{pk}")
        return rec

    def run_one(self, section, name, ctx, body, notes="", **extra):
        """Run body() -> dict(ms_all=..., flops=..., notes=..., extra...) with error capture."""
        if self.over_budget():
            return self.add(section, name, ctx, notes=notes,
                            skipped=f"time budget of {self.args.budget_s:.0f} s spent", **extra)
        self.reset_peak()
        msg = None
        try:
            out = body()
        except Exception as e:  # noqa: BLE001 - every failure is recorded, the run goes on
            msg = f"{type(e).__name__}: {e}"
            if len(msg) > 800:
                msg = msg[:800] + " ..."
        peak = self.peak()
        if msg is not None:  # out of the except block: the traceback's frames (and tensors) are gone
            self.reset_peak()
            return self.add(section, name, ctx, peak=peak, notes=notes, error=msg, **extra)
        note = out.pop("notes", "")
        if note:
            notes = f"{notes}; {note}" if notes else note
        ms_all = out.pop("ms_all", None)
        flops = out.pop("flops", None)
        extra.update(out)
        rec = self.add(section, name, ctx, ms_all=ms_all, flops=flops, peak=peak, notes=notes, **extra)
        self.reset_peak()
        return rec

    def write_json(self, complete):
        if not self.args.json:
            return
        doc = {"schema": SCHEMA, "complete": complete, "env": self.env,
               "flop_convention": FLOP_CONVENTION,
               "shapes": {"Hq": self.args.heads, "Hkv": self.args.kv_heads, "d_h": self.args.head_dim,
                          "dtype": "bfloat16", "batch": 1, "causal": True},
               "args": {k: v for k, v in vars(self.args).items()},
               "wall_s": round(self.elapsed(), 1), "results": self.results}
        path = self.args.json
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)


def attn_flops(T, d_h, hq):
    """Causal attention FLOPs, the 4*T^2*d_h*Hq/2 convention."""
    return 2.0 * T * T * d_h * hq


def randn(shape, b, dtype=None):
    return torch.randn(*shape, device=b.dev, dtype=dtype or torch.bfloat16)


# ---------------------------------------------------------------------------------------------------
# 1. SDPA, cuDNN and FlashAttention-2 backends


def section_sdpa(b):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    a = b.args
    hq, hkv, d = a.heads, a.kv_heads, a.head_dim
    G = hq // hkv
    backends = [("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash2", SDPBackend.FLASH_ATTENTION)]
    for T in a.ctx:
        log(f"sdpa: ctx {T}")
        try:
            q = randn((1, hq, T, d), b)
            k = randn((1, hkv, T, d), b)
            v = randn((1, hkv, T, d), b)
        except Exception as e:  # noqa: BLE001
            for name, _ in backends:
                b.add("sdpa", name, T, error=f"inputs: {type(e).__name__}: {e}")
            continue
        choice = None
        try:  # which backend PyTorch itself would pick here (private API; informative only)
            idx = torch._fused_sdp_choice(q, k, v, is_causal=True, enable_gqa=True)
            try:
                choice = SDPBackend(idx).name
            except Exception:  # noqa: BLE001
                choice = str(idx)
        except Exception:  # noqa: BLE001
            pass
        outs = {}
        kx = vx = None
        for name, backend in backends:
            state = {}

            def body(name=name, backend=backend, state=state):
                nonlocal kx, vx
                # GQA: enable_gqa=True when the backend accepts it, else K/V expanded to Hq heads
                # (outside the timed region).
                with sdpa_kernel([backend]):
                    try:
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                        gqa = "enable_gqa=True"
                        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,  # noqa: E731
                                                                    enable_gqa=True)
                    except RuntimeError as e1:
                        first_err = f"{type(e1).__name__}: {str(e1)[:200]}"
                        if kx is None:
                            kx = k.repeat_interleave(G, dim=1)
                            vx = v.repeat_interleave(G, dim=1)
                        o = F.scaled_dot_product_attention(q, kx, vx, is_causal=True)
                        gqa = f"expanded K/V to {hq} heads (enable_gqa refused: {first_err})"
                        fn = lambda: F.scaled_dot_product_attention(q, kx, vx, is_causal=True)  # noqa: E731
                    state["out"] = o[:, :, -4096:].clone()  # the longest rows, for the cross-check
                    del o
                    ms = b.time_fn(fn, warmup=a.warmup, min_reps=5, max_reps=50)
                res = {"ms_all": ms, "flops": attn_flops(T, d, hq), "gqa": gqa}
                if not bool(torch.isfinite(state["out"]).all()):
                    res["notes"] = "output has non-finite values"
                return res

            rec = b.run_one("sdpa", name, T, body, default_backend_choice=choice)
            if "out" in state and rec.get("error") is None:
                outs[name] = state["out"]
            state.clear()
        if len(outs) == 2:
            o1, o2 = list(outs.values())
            diff = float((o1.float() - o2.float()).abs().max())
            b.results[-1]["max_abs_diff_vs_sdpa_cudnn"] = diff
            log(f"  cuDNN vs FA2 output max |diff| over the last 4096 queries = {diff:.3g}")
        del q, k, v, kx, vx, outs
        b.reset_peak()


# ---------------------------------------------------------------------------------------------------
# 2. HF transformers prefill TTFT with random weights


def build_hf_model(b, preset, layers, max_pos):
    import transformers
    p = dict(MODEL_PRESETS[preset])
    arch = p.pop("arch")
    theta = p.pop("rope_theta")
    p["num_hidden_layers"] = layers or p["num_hidden_layers"]
    p["max_position_embeddings"] = max_pos
    p["initializer_range"] = 0.02
    p["use_cache"] = False
    rope = {"rope_type": "default", "rope_theta": theta}
    if arch == "qwen3":
        cfg_cls, model_cls = transformers.Qwen3Config, transformers.Qwen3ForCausalLM
    elif arch == "qwen3_5":
        cfg_cls, model_cls = transformers.Qwen3_5TextConfig, transformers.Qwen3_5ForCausalLM
        rope["partial_rotary_factor"] = 0.25
    else:
        cfg_cls, model_cls = transformers.LlamaConfig, transformers.LlamaForCausalLM
    try:  # transformers 5.x
        cfg = cfg_cls(rope_parameters=rope, **p)
    except TypeError:  # transformers 4.x
        cfg = cfg_cls(rope_theta=theta, **p)
    cfg._attn_implementation = "sdpa"
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with b.dev:
            model = model_cls(cfg)
    finally:
        torch.set_default_dtype(old)
    model.to(device=b.dev, dtype=torch.bfloat16)
    model.eval()
    # Our own init, so activations are sane whatever the library version does: every matrix
    # N(0, 0.02), every norm gain 1 (a zero-centred norm's weight 0), biases 0.
    zero_centred = arch == "qwen3_5"
    g = torch.Generator(device=b.dev)
    g.manual_seed(b.args.seed)
    with torch.no_grad():
        for pname, prm in model.named_parameters():
            if prm.dim() >= 2:
                prm.normal_(0.0, 0.02, generator=g)
            elif "norm" in pname:
                prm.fill_(0.0 if zero_centred and "linear_attn.norm" not in pname else 1.0)
            else:
                prm.zero_()
    n_params = sum(prm.numel() for prm in model.parameters())
    return model, cfg, n_params


def probe_sdpa(fn):
    """Call fn() once with torch.nn.functional.scaled_dot_product_attention wrapped, and describe the
    first SDPA call made inside (what HF really passes: mask or is_causal, GQA mode, the backend
    PyTorch's dispatcher would pick for it)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend
    seen = {}
    orig = F.scaled_dot_product_attention

    def wrapper(*args, **kw):
        if not seen:
            try:
                q, k = args[0], args[1]
                m = kw.get("attn_mask", args[3] if len(args) > 3 else None)
                seen.update(q_shape=list(q.shape), k_shape=list(k.shape),
                            attn_mask=None if m is None else f"{list(m.shape)} {m.dtype}",
                            is_causal=bool(kw.get("is_causal", False)),
                            enable_gqa=bool(kw.get("enable_gqa", False)))
                try:
                    seen["backend"] = SDPBackend(torch._fused_sdp_choice(*args, **kw)).name
                except Exception as e:  # noqa: BLE001
                    seen["backend"] = f"unknown ({type(e).__name__})"
            except Exception as e:  # noqa: BLE001
                seen["probe_error"] = f"{type(e).__name__}: {e}"
        return orig(*args, **kw)

    F.scaled_dot_product_attention = wrapper
    try:
        out = fn()
    finally:
        F.scaled_dot_product_attention = orig
    return out, seen


def section_hf(b):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    a = b.args
    preset = a.model_size
    layers = a.layers
    log(f"hf: building {preset} ({layers or MODEL_PRESETS[preset]['num_hidden_layers']} layers), "
        f"random bf16 weights on {b.dev}")
    t = time.monotonic()
    b.reset_peak()
    try:
        model, cfg, n_params = build_hf_model(b, preset, layers, max(a.ctx))
    except Exception as e:  # noqa: BLE001
        for T in a.ctx:
            b.add("hf", f"hf_{preset}_ttft", T, error=f"model build: {type(e).__name__}: {e}")
        return
    build_s = time.monotonic() - t
    weight_bytes = int(torch.cuda.memory_allocated()) if b.cuda else None
    log(f"  built in {build_s:.1f} s, {n_params / 1e9:.3f} B parameters")
    bk = {"default": None, "cudnn": SDPBackend.CUDNN_ATTENTION,
          "flash": SDPBackend.FLASH_ATTENTION}[a.hf_sdpa_backend]
    base_notes = ("one forward of T random token ids, torch.inference_mode, use_cache=False, "
                  "logits_to_keep=1 (TTFT needs only the last row of logits); random weights N(0,0.02); "
                  f"attn_implementation=sdpa, SDPA backend: {a.hf_sdpa_backend}")
    if MODEL_PRESETS[preset]["arch"] == "qwen3_5":
        import importlib.util
        fla = importlib.util.find_spec("fla") is not None
        base_notes += ("; Gated DeltaNet layers through " + ("flash-linear-attention's Triton chunk kernel" if fla
                       else "transformers' PyTorch fallback (torch_chunk_gated_delta_rule; fla not installed)"))
    for T in a.ctx:
        log(f"hf: ctx {T}")
        gen = torch.Generator(device="cpu")
        gen.manual_seed(a.seed + T)
        ids = torch.randint(0, cfg.vocab_size, (1, T), generator=gen).to(b.dev)

        def body(ids=ids, T=T):
            def fn():
                if bk is None:
                    return model(input_ids=ids, logits_to_keep=1, use_cache=False)
                with sdpa_kernel([bk]):
                    return model(input_ids=ids, logits_to_keep=1, use_cache=False)
            out, sdpa_call = probe_sdpa(fn)  # first call: untimed, also tells what HF passes to SDPA
            b.sync()
            logits = out.logits
            finite = bool(torch.isfinite(logits).all())
            shape = list(logits.shape)
            del out, logits
            slow = T >= 65536
            ms = b.time_fn(fn, warmup=0 if slow else 1, min_reps=2 if slow else 3,
                           max_reps=3 if slow else 10, target_s=a.target_s * 2)
            res = {"ms_all": ms, "tokens_per_s": round(T / (statistics.median(ms) * 1e-3), 1),
                   "logits_shape": shape, "sdpa_call": sdpa_call}
            if not finite:
                res["notes"] = "logits have non-finite values"
            if slow:
                res["notes"] = (res.get("notes", "") + "; " if res.get("notes") else "") + \
                    "warm-up = the untimed first call only (a call takes seconds)"
            return res

        b.run_one("hf", f"hf_{preset}_ttft", T, body, notes=base_notes,
                  model=preset, layers=cfg.num_hidden_layers, n_params=n_params,
                  weights_bytes=weight_bytes, build_s=round(build_s, 1),
                  transformers_config={k: getattr(cfg, k, None) for k in (
                      "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                      "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps",
                      "tie_word_embeddings", "max_position_embeddings")})
        del ids
    del model
    b.reset_peak()


# ---------------------------------------------------------------------------------------------------
# 3. Single-head indexer scores + top-k, chunked over queries


def indexer_topk(q, k, K, chunk, tri):
    """q, k [T, d_I] bf16. For each chunk of queries [c0, c1): scores against keys [0, c1) (the causal
    part), keys j > t set to -inf, top-K per row (fewer when the row has fewer than K columns)."""
    T = q.shape[0]
    last = None
    for c0 in range(0, T, chunk):
        c1 = min(T, c0 + chunk)
        C = c1 - c0
        s = q[c0:c1] @ k[:c1].T  # [C, c1], bf16 out, fp32 accumulate
        s[:, c0:c1].masked_fill_(tri[:C, :C], float("-inf"))
        last = torch.topk(s, min(K, c1), dim=-1)
    return last


def section_indexer(b):
    a = b.args
    d = a.indexer_dim
    for T in a.ctx:
        log(f"indexer: ctx {T}")

        def body(T=T):
            q = randn((T, d), b)
            k = randn((T, d), b)
            chunk = min(a.indexer_chunk, T)
            tri = torch.ones(chunk, chunk, dtype=torch.bool, device=b.dev).triu_(1)
            fn = lambda: indexer_topk(q, k, a.topk, chunk, tri)  # noqa: E731
            ms = b.time_fn(fn, warmup=a.warmup, min_reps=5, max_reps=30)
            return {"ms_all": ms, "chunk": chunk}

        b.run_one("indexer", "indexer_scores_topk", T, body, d_I=d, k=a.topk,
                  notes=(f"one head, d_I={d}: scores q_I.k_I via bf16 GEMM (fp32 accumulate, bf16 out) "
                         "over the causal key prefix of each query chunk, -inf above the diagonal, "
                         f"torch.topk k={a.topk} per row (no softmax: top-k is order-only); "
                         "rows with t+1 < k keep -inf entries"))


# ---------------------------------------------------------------------------------------------------
# 4. Oracle: head-averaged P + top-k, chunked; lse computed first


def oracle_chunks(T, chunk):
    return [(c0, min(T, c0 + chunk)) for c0 in range(0, T, chunk)]


def oracle_scores(q, k, c0, c1, scale, tri):
    """q [Hkv, G, T, d], k [Hkv, T, d] bf16 -> fp32 scores [Hkv, G, C, c1] for queries [c0, c1),
    causal keys only (j > t is -inf)."""
    hkv, G, _, d = q.shape
    C = c1 - c0
    s = torch.matmul(q[:, :, c0:c1].reshape(hkv, G * C, d), k[:, :c1].transpose(1, 2))
    s = s.float().mul_(scale).view(hkv, G, C, c1)
    s[..., c0:c1].masked_fill_(tri[:C, :C], float("-inf"))
    return s


def oracle_lse(q, k, scale, chunk, tri, lse):
    """Pass 1: lse[Hkv, G, T] = logsumexp over j <= t of s q.k, per head (fp32)."""
    T = q.shape[2]
    for c0, c1 in oracle_chunks(T, chunk):
        s = oracle_scores(q, k, c0, c1, scale, tri)
        lse[:, :, c0:c1] = torch.logsumexp(s, dim=-1)
        del s


def oracle_p_topk(q, k, scale, chunk, tri, lse, K):
    """Pass 2: P_t(j) = (1/Hq) sum_h exp(s q_h,t.k_j - lse_h,t) (fp32), then top-K per query."""
    hkv, G, T, _ = q.shape
    last = None
    for c0, c1 in oracle_chunks(T, chunk):
        s = oracle_scores(q, k, c0, c1, scale, tri)
        s.sub_(lse[:, :, c0:c1].unsqueeze(-1)).exp_()  # -inf -> 0
        P = s.sum(dim=(0, 1)).mul_(1.0 / (hkv * G))  # [C, c1]
        del s
        last = torch.topk(P, min(K, c1), dim=-1)
    return last


def section_oracle(b):
    a = b.args
    hq, hkv, d = a.heads, a.kv_heads, a.head_dim
    G = hq // hkv
    scale = 1.0 / math.sqrt(d)
    for T in a.ctx:
        names = ("oracle_lse", "oracle_P_topk", "oracle_total")
        if T > 32768 and not a.oracle_128k:
            for n in names:
                b.add("oracle", n, T, skipped="longer than 32K: slow, run with --oracle-128k")
            continue
        log(f"oracle: ctx {T}")
        # chunk: the largest power of two <= --oracle-chunk whose fp32 score tile [Hq, C, T] fits the
        # --oracle-tile-gib budget
        chunk = min(a.oracle_chunk, T)
        while chunk > 64 and hq * chunk * T * 4 > a.oracle_tile_gib * 2**30:
            chunk //= 2
        try:
            q = randn((hkv, G, T, d), b)
            k = randn((hkv, T, d), b)
            tri = torch.ones(chunk, chunk, dtype=torch.bool, device=b.dev).triu_(1)
            lse = torch.empty(hkv, G, T, dtype=torch.float32, device=b.dev)
        except Exception as e:  # noqa: BLE001
            for n in names:
                b.add("oracle", n, T, error=f"inputs: {type(e).__name__}: {e}")
            continue
        common = dict(k=a.topk, chunk=chunk)
        desc = (f"Hq={hq}, Hkv={hkv}, d_h={d}, chunk {chunk} queries; scores via bf16 GEMM "
                "(fp32 accumulate, bf16 out), then fp32")

        def body_lse():
            ms = b.time_fn(lambda: oracle_lse(q, k, scale, chunk, tri, lse), warmup=1,
                           min_reps=3, max_reps=15)
            return {"ms_all": ms}

        def body_p():
            oracle_lse(q, k, scale, chunk, tri, lse)
            ms = b.time_fn(lambda: oracle_p_topk(q, k, scale, chunk, tri, lse, a.topk), warmup=1,
                           min_reps=3, max_reps=15)
            # sanity: each P_t sums to 1 over j <= t (check the last query row of the last chunk)
            s = oracle_scores(q, k, T - 1, T, scale, tri)
            s.sub_(lse[:, :, T - 1:T].unsqueeze(-1)).exp_()
            total = float(s.sum(dim=(0, 1)).mul_(1.0 / hq).sum())
            del s
            return {"ms_all": ms, "p_row_sum_check": round(total, 5)}

        def body_total():
            def fn():
                oracle_lse(q, k, scale, chunk, tri, lse)
                oracle_p_topk(q, k, scale, chunk, tri, lse, a.topk)
            ms = b.time_fn(fn, warmup=1, min_reps=3, max_reps=15)
            return {"ms_all": ms}

        b.run_one("oracle", "oracle_lse", T, body_lse,
                  notes="pass 1 only: per-head lse over causal keys (" + desc + ")", **common)
        b.run_one("oracle", "oracle_P_topk", T, body_p,
                  notes=("pass 2 only, lse given (as the teacher forward provides it): head-averaged "
                         "P + torch.topk (" + desc + ")"), **common)
        b.run_one("oracle", "oracle_total", T, body_total,
                  notes="lse pass + P/top-k pass (" + desc + ")", **common)
        del q, k, tri, lse
        b.reset_peak()


# ---------------------------------------------------------------------------------------------------
# 5. FlexAttention: block-sparse BlockMask (~k keys per query) and dense causal, compiled


def causal_mask_mod(b_, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def selection_mask_mod(sel, bs):
    """mask_mod that agrees with the block selection: causal and block (q//bs, kv//bs) selected.
    The BlockMask's block lists only let the compiled kernel skip blocks; eager flex_attention and
    the partial blocks apply mask_mod alone, so it must carry the selection too."""
    def mask_mod(b_, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & sel[q_idx // bs, kv_idx // bs]
    return mask_mod


def flex_block_lists(nblk, keep, seed):
    """Per query block i: the diagonal block (partial: causal mask inside) and up to keep-1 earlier
    blocks (full). Dense causal when keep >= nblk. Returns a list of sorted lists of earlier blocks."""
    import random
    rng = random.Random(seed)
    out = []
    for i in range(nblk):
        if i <= keep - 1:
            out.append(list(range(i)))
        else:
            out.append(sorted(rng.sample(range(i), keep - 1)))
    return out


def flex_block_mask(full_lists, T, bs, device):
    from torch.nn.attention.flex_attention import BlockMask
    n = len(full_lists)
    kv_num = torch.ones(1, 1, n, dtype=torch.int32)
    kv_idx = torch.zeros(1, 1, n, n, dtype=torch.int32)
    kv_idx[0, 0, :, 0] = torch.arange(n, dtype=torch.int32)
    full_num = torch.tensor([len(x) for x in full_lists], dtype=torch.int32).view(1, 1, n)
    full_idx = torch.zeros(1, 1, n, n, dtype=torch.int32)
    for i, lst in enumerate(full_lists):
        if lst:
            full_idx[0, 0, i, :len(lst)] = torch.tensor(lst, dtype=torch.int32)
    dense = all(len(x) == i for i, x in enumerate(full_lists))
    if dense:
        mm = causal_mask_mod
    else:
        sel = torch.zeros(n, n, dtype=torch.bool)
        for i, lst in enumerate(full_lists):
            sel[i, i] = True
            sel[i, lst] = True
        mm = selection_mask_mod(sel.to(device), bs)
    kw = dict(BLOCK_SIZE=bs, mask_mod=mm)
    try:
        bm = BlockMask.from_kv_blocks(kv_num.to(device), kv_idx.to(device), full_num.to(device),
                                      full_idx.to(device), seq_lengths=(T, T), **kw)
    except TypeError:  # older signature without seq_lengths
        bm = BlockMask.from_kv_blocks(kv_num.to(device), kv_idx.to(device), full_num.to(device),
                                      full_idx.to(device), **kw)
    pairs = sum(len(x) for x in full_lists) * bs * bs + n * bs * (bs + 1) // 2
    return bm, pairs


def flex_reference_mask(full_lists, T, bs, device):
    """Dense boolean [T, T] mask equal to the block mask (for the small-T correctness check)."""
    allowed_blk = torch.zeros(len(full_lists), len(full_lists), dtype=torch.bool)
    for i, lst in enumerate(full_lists):
        allowed_blk[i, i] = True
        for j in lst:
            allowed_blk[i, j] = True
    m = allowed_blk.repeat_interleave(bs, 0).repeat_interleave(bs, 1)
    m &= torch.ones(T, T, dtype=torch.bool).tril_()
    return m.to(device)


def section_flex(b):
    a = b.args
    from torch.nn.attention.flex_attention import flex_attention
    import torch.nn.functional as F
    hq, hkv, d = a.heads, a.kv_heads, a.head_dim
    G = hq // hkv
    bs = a.flex_block
    keep = max(1, a.topk // bs)
    fa = torch.compile(flex_attention, dynamic=False) if a.flex_compile else flex_attention
    for T in a.flex_ctx:
        log(f"flex: ctx {T} ({'compiled' if a.flex_compile else 'eager'})")
        if T % bs:
            for n in ("flex_block_sparse", "flex_dense_causal"):
                b.add("flex", n, T, error=f"ctx {T} is not a multiple of the block size {bs}")
            continue
        n = T // bs
        try:
            q = randn((1, hq, T, d), b)
            k = randn((1, hkv, T, d), b)
            v = randn((1, hkv, T, d), b)
        except Exception as e:  # noqa: BLE001
            for nm in ("flex_block_sparse", "flex_dense_causal"):
                b.add("flex", nm, T, error=f"inputs: {type(e).__name__}: {e}")
            continue
        gqa = {"mode": None}

        def call(bm):
            if gqa["mode"] == "expanded":
                return fa(q, gqa["k"], gqa["v"], block_mask=bm)
            return fa(q, k, v, block_mask=bm, enable_gqa=True)

        def first_call(bm):
            if gqa["mode"] is None:
                try:
                    o = fa(q, k, v, block_mask=bm, enable_gqa=True)
                    gqa["mode"] = "enable_gqa=True"
                    return o
                except Exception as e1:  # noqa: BLE001
                    gqa["mode"] = "expanded"
                    gqa["why"] = f"{type(e1).__name__}: {str(e1)[:200]}"
                    gqa["k"] = k.repeat_interleave(G, dim=1)
                    gqa["v"] = v.repeat_interleave(G, dim=1)
            return call(bm)

        for name, kk in (("flex_block_sparse", keep), ("flex_dense_causal", n)):
            lists = flex_block_lists(n, kk, a.seed)

            def body(lists=lists, kk=kk, name=name):
                t = time.monotonic()
                bm, pairs = flex_block_mask(lists, T, bs, b.dev)
                o = first_call(bm)
                b.sync()
                first_s = time.monotonic() - t
                res = {}
                if T <= 4096:  # exact check against SDPA (math) with the same dense mask
                    from torch.nn.attention import SDPBackend, sdpa_kernel
                    m = flex_reference_mask(lists, T, bs, b.dev)
                    with sdpa_kernel([SDPBackend.MATH]):
                        ref = F.scaled_dot_product_attention(
                            q.float(), k.float().repeat_interleave(G, 1),
                            v.float().repeat_interleave(G, 1), attn_mask=m)
                    res["max_abs_diff_vs_sdpa_math_fp32"] = float((o.float() - ref).abs().max())
                    del ref, m
                del o
                ms = b.time_fn(lambda: call(bm), warmup=a.warmup, min_reps=5, max_reps=30)
                res.update(ms_all=ms, flops=4.0 * d * hq * pairs, pairs=pairs,
                           keys_per_query_mean=round(pairs / T, 1),
                           density=round(pairs / (T * (T + 1) / 2), 4),
                           first_call_s=round(first_s, 1), gqa=gqa["mode"] if gqa["mode"] != "expanded"
                           else f"expanded K/V (enable_gqa refused: {gqa.get('why')})")
                return res

            if name == "flex_block_sparse":
                note = (f"{bs}-token blocks; query block i keeps its diagonal block (causal mask "
                        f"inside) plus {kk - 1} earlier blocks chosen at random (seed {a.seed}), all "
                        f"earlier blocks when i < {kk}; ~{kk * bs} keys per query")
            else:
                note = f"dense causal BlockMask, {bs}-token blocks (diagonal partial, the rest full)"
            note += ("; torch.compile(flex_attention, dynamic=False); first_call_s includes compilation; "
                     "tflops counts only the (query, key) pairs computed")
            b.run_one("flex", name, T, body, notes=note, block=bs, keep_blocks=kk,
                      compiled=bool(a.flex_compile))
        del q, k, v, gqa
        b.reset_peak()


# ---------------------------------------------------------------------------------------------------


def environment(args):
    import transformers
    env = {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host": platform.node(), "python": platform.python_version(),
           "torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "transformers": transformers.__version__, "device": args.device}
    try:
        env["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        env["cudnn"] = None
    if args.device == "cuda":
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, gpu_mem_bytes=int(p.total_memory), gpu_cc=f"{p.major}.{p.minor}",
                   gpu_sms=p.multi_processor_count)
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            env["nvidia_smi"] = r.stdout.strip() or None
        except Exception:  # noqa: BLE001
            env["nvidia_smi"] = None
    return env


def print_table(b):
    print(f"\nanchors: {b.env.get('gpu', b.env['device'])}, torch {b.env['torch']}, "
          f"transformers {b.env['transformers']}, cuDNN {b.env.get('cudnn')}")
    print(f"{'name':<24} {'ctx':>7} {'ms':>11} {'TFLOP/s':>8} {'peak GiB':>9}  note")
    for r in b.results:
        ms = f"{r['ms_median']:.3f}" if r["ms_median"] is not None else "-"
        tf = f"{r['tflops']:.0f}" if r["tflops"] is not None else "-"
        pk = f"{r['peak_mem_bytes'] / 2**30:.2f}" if r.get("peak_mem_bytes") else "-"
        if r["error"]:
            note = "ERROR " + r["error"][:70]
        elif r["skipped"]:
            note = "skipped: " + r["skipped"]
        else:
            note = r.get("gqa") or ""
            if "tokens_per_s" in r:
                note = f"{r['tokens_per_s']:.0f} tok/s, {r['layers']} layers"
            if "keys_per_query_mean" in r:
                note = f"{r['keys_per_query_mean']:.0f} keys/query, first call {r['first_call_s']} s"
        print(f"{r['name']:<24} {r['ctx']:>7} {ms:>11} {tf:>8} {pk:>9}  {note}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--json", help="write results here (via PATH.tmp + rename)")
    ap.add_argument("--ctx", type=lambda s: parse_int_list(s, "--ctx"), default=None,
                    help="lengths (default 8192,32768,131072; --quick: 1024)")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma list of {','.join(SECTIONS)} (default all)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: ctx 1024, 2 layers, flex at 1024 keeping 4 blocks")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu is a debug path for tiny shapes (host timers, no cuDNN/FA2)")
    ap.add_argument("--heads", type=int, default=32, help="Hq of the attention anchors (Qwen3-8B: 32)")
    ap.add_argument("--kv-heads", type=int, default=8, help="Hkv (Qwen3-8B: 8)")
    ap.add_argument("--head-dim", type=int, default=128, help="d_h (Qwen3-8B: 128)")
    ap.add_argument("--topk", type=int, default=2048, help="k of the indexer, oracle and flex anchors")
    ap.add_argument("--model-size", default="qwen3-8b", choices=sorted(MODEL_PRESETS),
                    help="HF TTFT model preset (default qwen3-8b)")
    ap.add_argument("--layers", type=int, default=None, help="HF model layers (default: the preset's)")
    ap.add_argument("--hf-sdpa-backend", default="default", choices=("default", "cudnn", "flash"),
                    help="SDPA backend inside the HF forward (default: PyTorch's own choice)")
    ap.add_argument("--indexer-dim", type=int, default=128, help="d_I (default 128)")
    ap.add_argument("--indexer-chunk", type=int, default=2048, help="queries per chunk (default 2048)")
    ap.add_argument("--oracle-chunk", type=int, default=1024, help="queries per chunk, at most")
    ap.add_argument("--oracle-tile-gib", type=float, default=8.0,
                    help="the oracle chunk shrinks until its fp32 scores [Hq, chunk, T] fit this")
    ap.add_argument("--oracle-128k", action="store_true", help="also run the oracle above 32K")
    ap.add_argument("--flex-ctx", type=lambda s: parse_int_list(s, "--flex-ctx"), default=None,
                    help="flex lengths (default 32768; --quick: 1024)")
    ap.add_argument("--flex-128k", action="store_true", help="add 131072 to the flex lengths")
    ap.add_argument("--flex-block", type=int, default=128, help="BlockMask block size (default 128)")
    ap.add_argument("--flex-keep-blocks", type=int, default=None,
                    help="blocks kept per query block (default topk/block = 16; --quick: 4)")
    ap.add_argument("--no-flex-compile", dest="flex_compile", action="store_false",
                    help="run flex_attention eagerly (debug; slow, materialises scores)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls before timing (default 3)")
    ap.add_argument("--target-s", type=float, default=1.5,
                    help="aim for this much timed work per measurement (default 1.5 s)")
    ap.add_argument("--budget-s", type=float, default=330.0,
                    help="skip measurements once this much time has passed (0: no limit)")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    secs = [s.strip() for s in args.sections.split(",") if s.strip()]
    bad = [s for s in secs if s not in SECTIONS]
    if bad:
        ap.error(f"--sections: unknown {','.join(bad)} (choose from {','.join(SECTIONS)})")
    args.sections = ",".join(secs)
    if args.ctx is None:
        args.ctx = [1024] if args.quick else [8192, 32768, 131072]
    if args.quick and args.layers is None:
        args.layers = 2
    if args.flex_ctx is None:
        args.flex_ctx = [1024] if args.quick else [32768]
    if args.flex_128k and 131072 not in args.flex_ctx:
        args.flex_ctx.append(131072)
    if args.heads % args.kv_heads:
        ap.error(f"--heads {args.heads} is not a multiple of --kv-heads {args.kv_heads}")
    if args.layers is not None and args.layers <= 0:
        ap.error("--layers must be positive")

    global torch
    import torch as _torch
    torch = _torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench-anchors: --device cuda but torch sees no CUDA device (use --device cpu to debug)",
              file=sys.stderr)
        return 1
    torch.manual_seed(args.seed)

    env = environment(args)
    b = Bench(args, env)
    log(f"{env.get('gpu', 'cpu')}; torch {env['torch']}, transformers {env['transformers']}, "
        f"cuDNN {env.get('cudnn')}; ctx {args.ctx}; sections {args.sections}")

    # flex keeps its own k: --flex-keep-blocks, or 4 blocks in --quick so 1024 tokens are sparse
    flex_args_topk = args.topk
    if args.flex_keep_blocks is not None:
        flex_args_topk = args.flex_keep_blocks * args.flex_block
    elif args.quick:
        flex_args_topk = 4 * args.flex_block

    funcs = {"sdpa": section_sdpa, "hf": section_hf, "indexer": section_indexer,
             "oracle": section_oracle, "flex": section_flex}
    with torch.inference_mode():
        for s in secs:
            log(f"== {s} (t = {b.elapsed():.0f} s)")
            saved = args.topk
            if s == "flex":
                args.topk = flex_args_topk
            try:
                funcs[s](b)
            except Exception as e:  # noqa: BLE001 - a section that dies records it and the run goes on
                msg = f"{type(e).__name__}: {e}"
                b.add(s, f"{s}_section", None, error=msg[:800])
            finally:
                args.topk = saved
                b.reset_peak()
            b.write_json(complete=False)
    b.write_json(complete=True)
    print_table(b)
    log(f"done in {b.elapsed():.0f} s" + (f"; wrote {args.json}" if args.json else ""))
    ok = any(r["ms_median"] is not None for r in b.results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
