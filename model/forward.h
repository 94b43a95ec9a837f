// forward.h: the CPU forward pass of a llama/qwen2/qwen3 backbone, fp32.
#pragma once
#include <stdint.h>

#include "model.h"

// Seconds spent per part of the last forward (for `--profile` and docs).
typedef struct {
    double gemm, attention, other, lm_head;
} ForwardProfile;

// Runs the backbone over ids[0..T) and writes the final normed hidden states
// hidden[T, hidden_size]. prof may be NULL.
void forward_hidden(const Model *m, const int32_t *ids, int T, float *hidden, ForwardProfile *prof);

// logits[rows, vocab] = hidden[rows, hidden_size] · lm_headᵀ.
void forward_lm_head(const Model *m, const float *hidden, int rows, float *logits);
