// adamw.h: AdamW with decoupled weight decay, fp32 moments.
#pragma once
#include <stddef.h>

typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
} AdamW;

// One step (t counts from 1) over n parameters:
//   m = β1·m + (1−β1)·g,  v = β2·v + (1−β2)·g²
//   p −= lr·( m/(1−β1^t) / (sqrt(v/(1−β2^t)) + eps) + wd·p )
// Decay is decoupled: it is applied to the weights, not added to g. decay_mask
// (may be NULL: decay everything) marks with 1 the parameters that decay.
void adamw_step(const AdamW *opt, long t, float *params, const float *grads, float *m, float *v, size_t n,
                const unsigned char *decay_mask);

// Global L2 norm of grads; scales them in place to max_norm when above it
// (max_norm ≤ 0: no clipping). Returns the norm before clipping.
double grad_clip(float *grads, size_t n, double max_norm);
