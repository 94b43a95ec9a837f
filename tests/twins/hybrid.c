// hybrid.c: twin checks (see twins.h) of the ops of the Qwen3-Next / Qwen3.5
// layers other than Gated DeltaNet (kernels/cuda/moe.cu against
// kernels/cpu/moe_cpu.c):
//
//   sigmoid_mul         x · sigmoid(g), the gated attention's output gate
//   sigmoid_scale_rows  x[r, :] · sigmoid(g[r]), the shared expert's gate
//   moe_route           softmax top-k per token, E ∈ {4, 64, 512}, k ∈ {1, 2, 10},
//                       with and without renormalisation; rows of tied logits
//                       (the lower index first on both) and distinct ones. The
//                       chosen experts must be identical; the weights within fp32.
//   moe_experts         the routed sum over tokens routed by moe_route_cpu
//                       (the same idx and wt on both twins), T ∈ {1, 7, 130, 1000},
//                       E 8 with k 2 and E 64 with k 10 (some experts get no token),
//                       both activations.
//
// Tolerances: the gates are one fp32 expf and multiply (F32_MAX relative); the
// router's weights come from a double sum on both twins (1e-6); the experts'
// GEMMs are cuBLAS fp32 against OpenBLAS (F32_NMSE / F32_MAX, as every GEMM
// here), the k contributions added in the same order on both.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "ops_cuda.h"
#include "twins.h"

static void check_gates(int64_t n, int rows) {
    char shape[64];
    float *x = randn(n, 1.0f), *g = randn(n, 3.0f), *ref = host_alloc(n);
    memcpy(ref, x, sizeof(float) * (size_t)n);
    sigmoid_mul_cpu(ref, g, n);
    float *dx = dev_from(x, n), *dg = dev_from(g, n);
    sigmoid_mul_cuda(dx, dg, n);
    float *got = host_from_dev(dx, n);
    snprintf(shape, sizeof shape, "n=%lld", (long long)n);
    compare("sigmoid_mul", shape, got, ref, n, F32_NMSE, F32_MAX);
    free(got);
    const int cols = (int)(n / rows);
    memcpy(ref, x, sizeof(float) * (size_t)n);
    sigmoid_scale_rows_cpu(ref, g, rows, cols);
    cuda_to_device(dx, x, sizeof(float) * (size_t)n);
    sigmoid_scale_rows_cuda(dx, dg, rows, cols);
    got = host_from_dev(dx, (int64_t)rows * cols);
    snprintf(shape, sizeof shape, "%dx%d", rows, cols);
    compare("sigmoid_scale_rows", shape, got, ref, (int64_t)rows * cols, F32_NMSE, F32_MAX);
    free(got), free(x), free(g), free(ref);
    cuda_free(dx), cuda_free(dg);
}

static void check_route(int T, int E, int k, int renorm) {
    char shape[96];
    float *z = randn((int64_t)T * E, 2.0f);
    for (int t = 0; t < T; t += 5)  // every 5th row: ties (logits on a coarse grid)
        for (int e = 0; e < E; e++) z[(int64_t)t * E + e] = (float)((int)(z[(int64_t)t * E + e] * 2)) / 2;
    int *idx = malloc(sizeof(int) * (size_t)T * k);
    float *wt = host_alloc((int64_t)T * k);
    moe_route_cpu(idx, wt, z, T, E, k, renorm);
    float *dz = dev_from(z, (int64_t)T * E), *dw = dev_poisoned((int64_t)T * k);
    int32_t *di = dev_from_i32((const int32_t *)idx, (int64_t)T * k);
    cuda_memset(di, 0xFF, sizeof(int) * (size_t)T * k);
    moe_route_cuda((int *)di, dw, dz, T, E, k, renorm);
    int32_t *gi = host_from_dev_i32(di, (int64_t)T * k);
    float *gw = host_from_dev(dw, (int64_t)T * k);
    int same = 0;
    for (int64_t i = 0; i < (int64_t)T * k; i++) same += gi[i] == idx[i];
    snprintf(shape, sizeof shape, "T=%d E=%d k=%d%s", T, E, k, renorm ? " renorm" : "");
    char detail[96];
    snprintf(detail, sizeof detail, "%d of %lld experts identical", same, (long long)T * k);
    record("moe_route idx", shape, same == T * k, detail);
    compare("moe_route wt", shape, gw, wt, (int64_t)T * k, 1e-12, 1e-6);
    free(z), free(idx), free(wt), free(gi), free(gw);
    cuda_free(dz), cuda_free(dw), cuda_free(di);
}

static void check_experts(int T, int H, int E, int I, int k, Act act) {
    char shape[96];
    float *x = randn((int64_t)T * H, 1.0f), *z = randn((int64_t)T * E, 1.0f);
    int *idx = malloc(sizeof(int) * (size_t)T * k);
    float *wt = host_alloc((int64_t)T * k), *ref = host_alloc((int64_t)T * H);
    moe_route_cpu(idx, wt, z, T, E, k, 1);
    float **hg = malloc(sizeof(float *) * E), **hu = malloc(sizeof(float *) * E), **hd = malloc(sizeof(float *) * E);
    float **dg = malloc(sizeof(float *) * E), **du = malloc(sizeof(float *) * E), **dd = malloc(sizeof(float *) * E);
    const float sd = 1.0f / sqrtf((float)H);
    for (int e = 0; e < E; e++) {
        hg[e] = randn((int64_t)I * H, sd), hu[e] = randn((int64_t)I * H, sd), hd[e] = randn((int64_t)H * I, sd);
        dg[e] = dev_from(hg[e], (int64_t)I * H), du[e] = dev_from(hu[e], (int64_t)I * H);
        dd[e] = dev_from(hd[e], (int64_t)H * I);
    }
    moe_experts_cpu(ref, x, idx, wt, (const float *const *)hg, (const float *const *)hu, (const float *const *)hd, T,
                    H, E, I, k, act);
    float *dx = dev_from(x, (int64_t)T * H), *dw = dev_from(wt, (int64_t)T * k), *dout = dev_poisoned((int64_t)T * H);
    int32_t *di = dev_from_i32((const int32_t *)idx, (int64_t)T * k);
    moe_experts_cuda(dout, dx, (const int *)di, dw, (const float *const *)dg, (const float *const *)du,
                     (const float *const *)dd, T, H, E, I, k, act);
    float *got = host_from_dev(dout, (int64_t)T * H);
    snprintf(shape, sizeof shape, "T=%d H=%d E=%d I=%d k=%d %s", T, H, E, I, k, act == ACT_SILU ? "silu" : "gelu");
    compare("moe_experts", shape, got, ref, (int64_t)T * H, F32_NMSE, F32_MAX);
    for (int e = 0; e < E; e++) {
        free(hg[e]), free(hu[e]), free(hd[e]);
        cuda_free(dg[e]), cuda_free(du[e]), cuda_free(dd[e]);
    }
    free(hg), free(hu), free(hd), free(dg), free(du), free(dd);
    free(x), free(z), free(idx), free(wt), free(ref), free(got);
    cuda_free(dx), cuda_free(dw), cuda_free(dout), cuda_free(di);
}

void twins_hybrid(int quick) {
    check_gates(7, 1);
    check_gates(130 * 96, 130);
    if (!quick) check_gates((int64_t)1000 * 4096, 1000);
    check_route(1, 4, 1, 1);
    check_route(130, 64, 2, 1);
    check_route(130, 64, 10, 0);
    if (!quick) check_route(1000, 512, 10, 1);
    check_experts(1, 32, 8, 24, 2, ACT_SILU);
    check_experts(7, 32, 8, 24, 2, ACT_GELU_TANH);
    check_experts(130, 64, 64, 48, 10, ACT_SILU);
    if (!quick) check_experts(1000, 256, 64, 128, 10, ACT_SILU);
}
