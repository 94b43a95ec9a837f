// sdpa_cuda.h: dense causal GQA attention in bf16 on the GPU through cuDNN's
// fused scaled-dot-product attention (the cuDNN backend/graph C API), the fast
// twin of attention_forward_cpu (only with SPINDLE_HAVE_CUDA).
// q [T, Hq·dh], k/v [T, Hkv·dh], out [T, Hq·dh] in bf16 (void*, 2 bytes per
// element, device); lse [Hq, T] fp32 (natural-log log-sum-exp of scale·q·k per
// row, as attention_forward_cpu), may be NULL. window 0: causal, key j visible
// to query t iff j ≤ t; W > 0: sliding window, iff t − W < j ≤ t (W ≥ T is
// causal). Every pointer must be 16-byte aligned (cudaMalloc's are).
// One cuDNN execution plan per (Tb, Hq, Hkv, dh, window), built on first use and
// kept (building may take a while: cuDNN compiles its fused kernel at run time);
// Tb is T rounded up to a multiple of SPINDLE_SDPA_BUCKET (default 1024), the
// pass padded to it on copies when T is not one (sdpa.cu, "Lengths in buckets"):
// prompts of many lengths share a few plans.
// Where cuDNN does not take a shape, the op falls back by itself to the fp32
// flash kernel (attention_forward_cuda) on widened copies, output rounded to bf16.
// Default stream; not thread-safe. SPINDLE_SDPA_DEBUG=1 prints each plan
// build (engine configs tried, why each was rejected, the one kept) to stderr.
// The cuDNN graph is described at the top of kernels/cuda/sdpa.cu.
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// 1 when cuDNN's fused SDPA takes this shape and window on this device (checked
// once per shape and cached), else 0 with a one-line reason in why (may be NULL):
// "<step that failed>: <cuDNN status>: <cuDNN's message>" — then
// attention_forward_bf16_cuda takes the fp32 fallback. Never aborts (without a
// GPU it returns 0 with cudnnCreate's error). For callers and benchmarks that
// report which path runs; nobody needs to call it first.
int sdpa_supported(int T, int Hq, int Hkv, int dh, int window, char *why, size_t len);

// Runs it: cuDNN where sdpa_supported says so, else the fallback. Aborts (file
// and line) on a cuDNN execution failure, and on shapes no path takes (dh > 256,
// Hq not a multiple of Hkv).
void attention_forward_bf16_cuda(void *out, float *lse, const void *q, const void *k, const void *v, int T, int Hq,
                                 int Hkv, int dh, float scale, int window);

#ifdef __cplusplus
}
#endif
