// moe_cpu.c: the mixture-of-experts MLP's routed part and the sigmoid gates of
// Qwen3-Next / Qwen3.5 (kernels/ops.h), fp32. The reference is transformers'
// Qwen3NextTopKRouter, Qwen3NextExperts and Qwen3NextSparseMoeBlock.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe_route.h"
#include "ops.h"
#include "status.h"

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

void sigmoid_mul_cpu(float *x, const float *g, int64_t n) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) x[i] *= sigmoidf(g[i]);
}

void sigmoid_scale_rows_cpu(float *x, const float *g, int rows, int cols) {
#pragma omp parallel for
    for (int r = 0; r < rows; r++) {
        const float s = sigmoidf(g[r]);
        for (int c = 0; c < cols; c++) x[(int64_t)r * cols + c] *= s;
    }
}

void moe_route_cpu(int *idx, float *wt, const float *logits, int T, int E, int k, int renorm) {
#pragma omp parallel for
    for (int t = 0; t < T; t++)
        moe_route_row(idx + (int64_t)t * k, wt + (int64_t)t * k, logits + (int64_t)t * E, E, k, renorm);
}

void moe_bucket_cpu(int64_t *start, int64_t *slot, const int *idx, int64_t nk, int E) {
    int64_t *fill = xmalloc(sizeof *fill * (size_t)(E > 0 ? E : 1));
    for (int e = 0; e <= E; e++) start[e] = 0;
    for (int64_t i = 0; i < nk; i++) start[idx[i] + 1]++;
    for (int e = 0; e < E; e++) start[e + 1] += start[e], fill[e] = start[e];
    for (int64_t i = 0; i < nk; i++) slot[fill[idx[i]]++] = i;
    free(fill);
}

void moe_experts_cpu(float *out, const float *x, const int *idx, const float *wt, const float *const *w_gate,
                     const float *const *w_up, const float *const *w_down, int T, int H, int E, int inter, int k,
                     Act act) {
    memset(out, 0, sizeof(float) * (size_t)T * H);
    // The (token, slot) pairs bucketed by expert (a counting sort, tokens ascending
    // within each expert), so each expert reads only its own tokens.
    const int64_t nk = (int64_t)T * k;
    int64_t *start = xmalloc(sizeof *start * ((size_t)E + 1));
    int64_t *slot = xmalloc(sizeof *slot * (size_t)(nk > 0 ? nk : 1));
    moe_bucket_cpu(start, slot, idx, nk, E);
    int *rows = xmalloc(sizeof(int) * (size_t)T);
    float *rw = xmalloc(sizeof(float) * (size_t)T);
    float *xe = xmalloc(sizeof(float) * (size_t)T * H), *ye = xmalloc(sizeof(float) * (size_t)T * H);
    float *g = xmalloc(sizeof(float) * (size_t)T * inter), *u = xmalloc(sizeof(float) * (size_t)T * inter);
    for (int e = 0; e < E; e++) {  // experts in order, tokens in order: one fixed summation order
        const int n = (int)(start[e + 1] - start[e]);  // ≤ T: a token picks an expert at most once
        for (int i = 0; i < n; i++) {
            const int64_t sl = slot[start[e] + i];
            rows[i] = (int)(sl / k), rw[i] = wt[sl];
            memcpy(xe + (int64_t)i * H, x + (int64_t)rows[i] * H, sizeof(float) * (size_t)H);
        }
        if (!n) continue;
        matmul_forward_cpu(g, xe, w_gate[e], NULL, n, H, inter);
        matmul_forward_cpu(u, xe, w_up[e], NULL, n, H, inter);
        glu_forward_cpu(g, g, u, (int64_t)n * inter, act);
        matmul_forward_cpu(ye, g, w_down[e], NULL, n, inter, H);
        for (int i = 0; i < n; i++) {
            float *o = out + (int64_t)rows[i] * H;
            const float *y = ye + (int64_t)i * H;
            for (int c = 0; c < H; c++) o[c] += rw[i] * y[c];
        }
    }
    free(rows), free(rw), free(xe), free(ye), free(g), free(u), free(start), free(slot);
}
