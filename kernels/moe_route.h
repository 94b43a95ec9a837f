// moe_route.h: one token's router decision (Qwen3NextTopKRouter), written once
// for both twins: moe_route_cpu (kernels/cpu/moe_cpu.c) calls it per token on
// the host, moe_route_kernel1 (kernels/cuda/moe.cu) per token on the device.
#pragma once
#include <math.h>

#ifdef __CUDACC__
#define MOE_HOST_DEVICE __host__ __device__
#else
#define MOE_HOST_DEVICE
#endif

// z [E] logits → ix [k] the k largest (descending; the lower expert index first
// among equal logits, by insertion into k sorted slots) and w [k] their softmax
// probabilities (the sum in double, each weight rounded to fp32 as torch's),
// renormalised to sum 1 when renorm.
static inline MOE_HOST_DEVICE void moe_route_row(int *ix, float *w, const float *z, int E, int k, int renorm) {
    float mx = z[0];
    for (int e = 1; e < E; e++) mx = z[e] > mx ? z[e] : mx;
    double sum = 0;
    for (int e = 0; e < E; e++) sum += exp((double)(z[e] - mx));
    int n = 0;
    for (int e = 0; e < E; e++) {
        int pos = n < k ? n : k;
        while (pos > 0 && z[e] > z[ix[pos - 1]]) pos--;
        if (pos >= k) continue;
        const int last = n < k ? n : k - 1;
        for (int j = last; j > pos; j--) ix[j] = ix[j - 1];
        ix[pos] = e;
        if (n < k) n++;
    }
    float tot = 0;
    for (int j = 0; j < k; j++) {
        w[j] = (float)(exp((double)(z[ix[j]] - mx)) / sum);
        tot += w[j];
    }
    if (renorm)
        for (int j = 0; j < k; j++) w[j] /= tot;
}
