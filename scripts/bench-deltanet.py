#!/usr/bin/env python3
"""bench-deltanet.py: times HF transformers' PyTorch chunked gated delta rule
(torch_chunk_gated_delta_rule of modeling_qwen3_next, the function itself, not a
kernel the hub or flash-linear-attention may put in its place) on the GPU, at
the Qwen3.5 linear-attention shapes that bench_deltanet_cuda times:

  qwen3.5-9b    16 key heads, 32 value heads, dk = dv = 128
  qwen3.5-0.8b  16 key heads, 16 value heads, dk = dv = 128

bf16 q, k, v; fp32 g and beta (as the model forms g); chunk 64; the L2 norm in the
kernel; the final state returned. CUDA events around each call, warm-up calls
first, then the median of --reps. When flash-linear-attention is importable, its
chunk_gated_delta_rule is timed the same way too (labelled "fla").

Before timing, the chunked reference is checked against HF's recurrent form
(torch_recurrent_gated_delta_rule) at T = 200 in fp32 on the same GPU.

  scripts/bench-deltanet.py [--T 32768,131072] [--shapes qwen3.5-9b,qwen3.5-0.8b]
                            [--reps 5] [--out results/bench-deltanet-torch.json] [--device cpu]

Writes the JSON to OUT.tmp and renames it. Exit 0; 1 without a GPU or when the
check fails; 2 on a usage error.
"""
import argparse
import json
import os
import statistics
import sys

SHAPES = {
    "qwen3.5-9b": dict(Hk=16, Hv=32, dk=128, dv=128),
    "qwen3.5-0.8b": dict(Hk=16, Hv=16, dk=128, dv=128),
}


def int_list(s):
    out = []
    for part in s.split(","):
        try:
            v = int(part, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {part!r}")
        if v < 1:
            raise argparse.ArgumentTypeError(f"must be positive: {v}")
        out.append(v)
    return out


def shape_list(s):
    names = s.split(",")
    for n in names:
        if n not in SHAPES:
            raise argparse.ArgumentTypeError(f"unknown shape {n!r} (one of {', '.join(SHAPES)})")
    return names


def positive(s):
    try:
        v = int(s, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {s!r}")
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be positive: {v}")
    return v


def inputs(torch, T, Hk, Hv, dk, dv, dtype, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    def u(shape, lo, hi, dt):
        return (torch.rand(shape, generator=g, device=device, dtype=torch.float32) * (hi - lo) + lo).to(dt)
    q = u((1, T, Hk, dk), -1, 1, dtype)
    k = u((1, T, Hk, dk), -1, 1, dtype)
    v = u((1, T, Hv, dv), -1, 1, dtype)
    gg = u((1, T, Hv), -1, 0, torch.float32)
    beta = u((1, T, Hv), 0.05, 0.95, torch.float32)
    if Hv != Hk:  # key heads repeated to the value heads before the call, as the model does in
        # transformers 5.17 (later versions repeat inside the function; with equal heads, a no-op there)
        q, k = q.repeat_interleave(Hv // Hk, dim=2), k.repeat_interleave(Hv // Hk, dim=2)
    return q, k, v, gg, beta


def time_ms(torch, fn, warmup, reps, device):
    for _ in range(warmup):
        fn()
    ms = []
    if device == "cpu":  # the smoke test: wall clock
        import time
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            ms.append((time.perf_counter() - t) * 1e3)
        return statistics.median(ms), ms
    torch.cuda.synchronize()
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    return statistics.median(ms), ms


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--T", type=int_list, default=[32768, 131072])
    ap.add_argument("--shapes", type=shape_list, default=list(SHAPES))
    ap.add_argument("--reps", type=positive, default=5)
    ap.add_argument("--warmup", type=positive, default=1)
    ap.add_argument("--out", default="results/bench-deltanet-torch.json")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: a smoke test of this script (wall clock, no GPU), not a measurement")
    args = ap.parse_args()

    import torch
    import transformers
    from transformers.models.qwen3_next import modeling_qwen3_next as m

    dv_ = args.device
    if dv_ == "cuda" and not torch.cuda.is_available():
        print("bench-deltanet: no CUDA device", file=sys.stderr)
        return 1
    # The decorator may have swapped in a hub or fla kernel; __wrapped__ is HF's own function.
    chunked = getattr(m.torch_chunk_gated_delta_rule, "__wrapped__", m.torch_chunk_gated_delta_rule)
    recurrent = getattr(m.torch_recurrent_gated_delta_rule, "__wrapped__", m.torch_recurrent_gated_delta_rule)
    impls = {"torch": chunked}
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk
        impls["fla"] = fla_chunk
    except Exception:
        pass

    # The reference against the recurrence, fp32, T = 200 (three chunks and a partial one).
    q, k, v, gg, beta = inputs(torch, 200, 2, 4, 128, 128, torch.float32, 7, dv_)
    o1, s1 = chunked(q, k, v, gg, beta, chunk_size=64, output_final_state=True, use_qk_l2norm_in_kernel=True)
    o2, s2 = recurrent(q, k, v, gg, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
    check = max(((o1 - o2).abs().max() / o2.abs().max().clamp(min=1)).item(),
                ((s1 - s2).abs().max() / s2.abs().max().clamp(min=1)).item())
    print(f"bench-deltanet: chunked vs recurrent (fp32, T 200): max err {check:.2e}")
    if not check <= 1e-4:
        print("bench-deltanet: the chunked reference disagrees with the recurrence", file=sys.stderr)
        return 1

    dev = torch.cuda.get_device_name(0) if dv_ == "cuda" else "cpu (smoke test)"
    print(f"bench-deltanet: {dev}; torch {torch.__version__}, transformers {transformers.__version__}; "
          f"bf16 q/k/v; implementations: {', '.join(impls)}; median of {args.reps}")
    runs = []
    for name in args.shapes:
        s = SHAPES[name]
        for T in args.T:
            q, k, v, gg, beta = inputs(torch, T, s["Hk"], s["Hv"], s["dk"], s["dv"], torch.bfloat16, 1, dv_)
            nq, nv, ng = T * s["Hk"] * s["dk"], T * s["Hv"] * s["dv"], T * s["Hv"]
            for impl, fn in impls.items():
                if impl == "fla":
                    call = lambda: fn(q, k, v, gg, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
                else:
                    call = lambda: fn(q, k, v, gg, beta, chunk_size=64, output_final_state=True,
                                      use_qk_l2norm_in_kernel=True)
                if dv_ == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                try:
                    ms, all_ms = time_ms(torch, call, args.warmup, args.reps, dv_)
                except torch.cuda.OutOfMemoryError:
                    print(f"{name:13s} T {T:7d} {impl}: out of memory")
                    runs.append(dict(shape=name, T=T, impl=impl, error="out of memory", **s))
                    torch.cuda.empty_cache()
                    continue
                except Exception as e:  # e.g. a kernel that does not take these head counts
                    if impl == "torch":
                        raise
                    print(f"{name:13s} T {T:7d} {impl}: failed: {e}")
                    runs.append(dict(shape=name, T=T, impl=impl, error=str(e)[:200], **s))
                    continue
                out_bytes = 2 * nv  # the output in the input's dtype (bf16)
                nbytes = 2 * (2 * nq + nv) + 4 * 2 * ng + out_bytes + 4 * s["Hv"] * s["dk"] * s["dv"]
                peak = torch.cuda.max_memory_allocated() / 1e9 if dv_ == "cuda" else 0.0
                print(f"{name:13s} T {T:7d} {impl:5s}: {ms:10.3f} ms  {nbytes / ms / 1e6:8.1f} GB/s effective  "
                      f"peak {peak:.2f} GB")
                runs.append(dict(shape=name, T=T, impl=impl, ms=ms, all_ms=all_ms, bytes=nbytes,
                                 gb_s=nbytes / ms / 1e6, peak_gb=peak, **s))
            del q, k, v, gg, beta
            if dv_ == "cuda":
                torch.cuda.empty_cache()

    out = dict(device=dev, torch=torch.__version__, transformers=transformers.__version__, inputs="bf16",
               chunk=64, reps=args.reps, warmup=args.warmup, check_vs_recurrent=check, runs=runs)
    d = os.path.dirname(args.out)
    if d:
        os.makedirs(d, exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    os.replace(tmp, args.out)
    print(f"bench-deltanet: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
