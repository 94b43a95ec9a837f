// forward_cuda.h: the backbone forward pass on the GPU (only with
// SPINDLE_HAVE_CUDA), the CUDA twin of forward_hidden / forward_lm_head
// (model/forward.h): same layers, same order, built from the ops of
// kernels/ops_cuda.h. Dense attention only (no oracle, no indexer, no tap yet).
//
// Two precisions, chosen when the weights are uploaded:
//   fp32 (bf16 = 0): every weight and activation fp32, fp32 GEMMs (TF32 off).
//     The reference mode: it matches the CPU twin to fp32 rounding.
//   bf16 (bf16 = 1): stored in bf16 are the weight matrices (embedding table,
//     q/k/v/o projections, gate/up/down, lm_head) and the activations that feed
//     those GEMMs (normed x, attention output, SwiGLU product, final hidden),
//     rounded to bf16 (nearest even) right before each GEMM; the GEMMs
//     accumulate in fp32 and write fp32. Everything else stays fp32: the
//     residual stream, RMSNorm (and its weights), biases, q/k norm, RoPE
//     tables and rotation, attention (fp32 kernel, fp32 q/k/v), SwiGLU, logits.
//
// The weights live on the device from fwd_cuda_upload to fwd_cuda_free; a
// tied lm_head shares the embedding's copy. Activations are allocated per call
// and sized O(T·max(hidden, Hq·dh, intermediate)): never a T×T buffer.
#pragma once
#include <stdint.h>

#include "model.h"
#include "status.h"

typedef struct FwdCuda FwdCuda;

// Uploads m's weights to GPU 0 in fp32 (bf16 = 0) or bf16 (bf16 = 1). m must
// outlive the FwdCuda (its config is read, not copied). Returns 0 and *out, or
// -1 with st saying why (no usable GPU; a head_dim the attention kernel does not
// take) and *out = NULL. Caller frees with fwd_cuda_free.
int fwd_cuda_upload(const Model *m, int bf16, FwdCuda **out, Status *st);
void fwd_cuda_free(FwdCuda *f);
// Bytes of device memory the uploaded weights take.
size_t fwd_cuda_weight_bytes(const FwdCuda *f);

// forward_hidden on the GPU (dense): ids[0..T) (host, each < vocab) ->
// hidden_host[T, hidden], the final normed hidden states.
void fwd_cuda_hidden(FwdCuda *f, const int32_t *ids, int T, float *hidden_host);

// forward_lm_head on the GPU: logits_host[rows, vocab] =
// hidden_host[rows, hidden] · lm_headᵀ (host in, host out; call it per row chunk).
void fwd_cuda_lm_head(FwdCuda *f, const float *hidden_host, int rows, float *logits_host);
