// forward.h: the CPU forward pass of a llama/qwen2/qwen3 backbone, fp32.
#pragma once
#include <stdint.h>

#include "model.h"

// Seconds spent per part of the last forward (for `--profile` and docs).
typedef struct {
    double gemm, attention, other, lm_head;
} ForwardProfile;

// Sparse attention at every full-attention layer (NULL: dense everywhere).
typedef struct {
    int topk;  // keys kept per support
    int bsel;  // queries sharing one support (1 = per query)
} Sparsity;

// What the sparse supports kept, summed over layers (either may be NULL):
// recall[t] += Σ_{j∈S_t} P_t(j), support[t] += |S_t|, per layer.
typedef struct {
    float *recall;   // [T]
    float *support;  // [T]
} SparseStats;

// Runs the backbone over ids[0..T) and writes the final normed hidden states
// hidden[T, hidden_size]. With sp the attention-mass oracle picks each layer's
// support along the sparse trajectory. stats and prof may be NULL.
void forward_hidden(const Model *m, const int32_t *ids, int T, const Sparsity *sp, float *hidden,
                    SparseStats *stats, ForwardProfile *prof);

// logits[rows, vocab] = hidden[rows, hidden_size] · lm_headᵀ.
void forward_lm_head(const Model *m, const float *hidden, int rows, float *logits);
