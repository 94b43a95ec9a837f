// adamw.c: see adamw.h. Sequential loops in index order, so a step gives the
// same bits for the same inputs whatever the thread count.
#include "adamw.h"

#include <math.h>

void adamw_step(const AdamW *opt, long t, float *params, const float *grads, float *m, float *v, size_t n,
                const unsigned char *decay_mask) {
    const double bc1 = 1.0 - pow(opt->beta1, (double)t), bc2 = 1.0 - pow(opt->beta2, (double)t);
    const float b1 = (float)opt->beta1, b2 = (float)opt->beta2;
    for (size_t i = 0; i < n; i++) {
        const float g = grads[i];
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        const double mhat = m[i] / bc1, vhat = v[i] / bc2;
        const double wd = (!decay_mask || decay_mask[i]) ? opt->weight_decay : 0.0;
        params[i] -= (float)(opt->lr * (mhat / (sqrt(vhat) + opt->eps) + wd * params[i]));
    }
}

double grad_clip(float *grads, size_t n, double max_norm) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)grads[i] * grads[i];
    const double norm = sqrt(ss);
    if (max_norm > 0 && norm > max_norm) {
        const float s = (float)(max_norm / norm);
        for (size_t i = 0; i < n; i++) grads[i] *= s;
    }
    return norm;
}
