// sdpa_cuda.h: dense causal GQA attention in bf16 on the GPU through cuDNN's
// fused scaled-dot-product attention (the cuDNN backend/graph C API), the fast
// twin of attention_forward_cpu (only with SPINDLE_HAVE_CUDA).
// q [T, Hq·dh], k/v [T, Hkv·dh], out [T, Hq·dh] in bf16 (void*, 2 bytes per
// element, device); lse [Hq, T] fp32 (natural-log log-sum-exp of scale·q·k per
// row, as attention_forward_cpu), may be NULL. Causal: key j visible to query
// t iff j ≤ t. Every pointer must be 16-byte aligned (cudaMalloc's are).
// One cuDNN execution plan per (T, Hq, Hkv, dh), built on first use and kept
// (building may take a while: cuDNN compiles its fused kernel at run time).
// Default stream; not thread-safe. SPINDLE_SDPA_DEBUG=1 prints each plan
// build (engine configs tried, why each was rejected, the one kept) to stderr.
// The cuDNN graph is described at the top of kernels/cuda/sdpa.cu.
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// 1 when cuDNN's fused SDPA takes this shape on this device (checked once per
// shape and cached), else 0 with a one-line reason in why (may be NULL):
// "<step that failed>: <cuDNN status>: <cuDNN's message>". Never aborts
// (without a GPU it returns 0 with cudnnCreate's error).
int sdpa_supported(int T, int Hq, int Hkv, int dh, char *why, size_t len);

// Runs it. Aborts (file and line) on a cuDNN failure: call sdpa_supported first.
void attention_forward_bf16_cuda(void *out, float *lse, const void *q, const void *k, const void *v, int T, int Hq,
                                 int Hkv, int dh, float scale);

#ifdef __cplusplus
}
#endif
