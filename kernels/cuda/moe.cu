// moe.cu: CUDA twins of kernels/cpu/moe_cpu.c — the sigmoid gates of gated
// attention and of the shared expert, the MoE router and the routed experts.
//   sigmoid gates   one thread per element (per row for the row scale)
//   router          one thread per token running the CPU twin's moe_route_row
//                   (kernels/moe_route.h), so the same experts and ties
//   experts         the (token, slot) pairs are bucketed by expert on the host
//                   by the CPU twin's moe_bucket_cpu (T·k ints cross the bus),
//                   the tokens gathered expert by
//                   expert into one buffer, each expert's GEMMs (cuBLAS, fp32)
//                   over its rows, then per token its k contributions added in
//                   ascending expert order: the CPU twin's summation order.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.cuh"
#include "moe_route.h"
extern "C" {
#include "ops.h"
}
#include "device_util.cuh"
#include "ops_cuda.h"

// Host allocations of the dispatch: abort with the line on failure (never a user's error).
#define HOST_ALLOC_CHECK(ok)                                                            \
    do {                                                                                \
        if (!(ok)) {                                                                    \
            fprintf(stderr, "moe.cu:%d: host allocation failed\n", __LINE__);          \
            abort();                                                                    \
        }                                                                               \
    } while (0)

__global__ void sigmoid_mul_kernel1(float *x, const float *g, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= 1.0f / (1.0f + expf(-g[i]));
}

__global__ void sigmoid_scale_rows_kernel1(float *x, const float *g, int rows, int cols) {
    const int64_t n = (int64_t)rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= 1.0f / (1.0f + expf(-g[i / cols]));
}

__global__ void moe_route_kernel1(int *idx, float *wt, const float *logits, int T, int E, int k, int renorm) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    moe_route_row(idx + (int64_t)t * k, wt + (int64_t)t * k, logits + (int64_t)t * E, E, k, renorm);
}

// xe[r, :] = x[rows[r], :] for r < n.
__global__ void gather_rows_kernel1(float *xe, const float *x, const int *rows, int n, int H) {
    const int64_t total = (int64_t)n * H;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        xe[i] = x[(int64_t)rows[i / H] * H + i % H];
}

// out[t, c] = Σ_j wt_s[t, j] · ye[pos[t, j], c], j in ascending expert order.
__global__ void combine_kernel1(float *out, const float *ye, const int *pos, const float *wt_s, int T, int H, int k) {
    const int64_t total = (int64_t)T * H;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / H, c = i % H;
        float acc = 0;
        for (int j = 0; j < k; j++) acc += wt_s[t * k + j] * ye[(int64_t)pos[t * k + j] * H + c];
        out[i] = acc;
    }
}

extern "C" void sigmoid_mul_cuda(float *x, const float *g, int64_t n) {
    if (n <= 0) return;
    sigmoid_mul_kernel1<<<grid_for(n, 256), 256>>>(x, g, n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void sigmoid_scale_rows_cuda(float *x, const float *g, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    sigmoid_scale_rows_kernel1<<<grid_for((int64_t)rows * cols, 256), 256>>>(x, g, rows, cols);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void moe_route_cuda(int *idx, float *wt, const float *logits, int T, int E, int k, int renorm) {
    if (T <= 0) return;
    moe_route_kernel1<<<(T + 127) / 128, 128>>>(idx, wt, logits, T, E, k, renorm);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void moe_experts_cuda(float *out, const float *x, const int *idx, const float *wt,
                                 const float *const *w_gate, const float *const *w_up, const float *const *w_down,
                                 int T, int H, int E, int inter, int k, Act act) {
    if (T <= 0) return;
    const int64_t n = (int64_t)T * k;
    int *h_idx = (int *)malloc(sizeof(int) * n), *h_pos = (int *)malloc(sizeof(int) * n);
    int *h_rows = (int *)malloc(sizeof(int) * n);
    int64_t *start = (int64_t *)malloc(sizeof(int64_t) * ((size_t)E + 1)), *slot = (int64_t *)malloc(sizeof(int64_t) * n);
    float *h_wt = (float *)malloc(sizeof(float) * n), *h_wts = (float *)malloc(sizeof(float) * n);
    HOST_ALLOC_CHECK(h_idx && h_pos && h_rows && start && slot && h_wt && h_wts);
    CUDA_CHECK(cudaMemcpy(h_idx, idx, sizeof(int) * n, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(h_wt, wt, sizeof(float) * n, cudaMemcpyDeviceToHost));
    moe_bucket_cpu(start, slot, h_idx, n, E);  // the CPU twin's buckets: tokens in order within each expert
    for (int64_t r = 0; r < n; r++) {
        h_rows[r] = (int)(slot[r] / k);
        h_pos[slot[r]] = (int)r;
    }
    // per token, its slots in ascending expert order (the CPU twin adds them so)
    for (int t = 0; t < T; t++) {
        int *ps = h_pos + (int64_t)t * k;
        float *ws = h_wts + (int64_t)t * k;
        const float *wsrc = h_wt + (int64_t)t * k;
        for (int j = 0; j < k; j++) ws[j] = wsrc[j];
        for (int a = 1; a < k; a++)  // insertion sort of k ≤ E slots by their row (rows grow with the expert)
            for (int b = a; b > 0 && ps[b] < ps[b - 1]; b--) {
                int ti = ps[b]; ps[b] = ps[b - 1]; ps[b - 1] = ti;
                float tf = ws[b]; ws[b] = ws[b - 1]; ws[b - 1] = tf;
            }
    }
    int *d_rows = (int *)cuda_malloc(sizeof(int) * n), *d_pos = (int *)cuda_malloc(sizeof(int) * n);
    float *d_wts = (float *)cuda_malloc(sizeof(float) * n);
    float *xe = (float *)cuda_malloc(sizeof(float) * n * H), *ye = (float *)cuda_malloc(sizeof(float) * n * H);
    float *g = (float *)cuda_malloc(sizeof(float) * n * inter), *u = (float *)cuda_malloc(sizeof(float) * n * inter);
    CUDA_CHECK(cudaMemcpy(d_rows, h_rows, sizeof(int) * n, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_pos, h_pos, sizeof(int) * n, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_wts, h_wts, sizeof(float) * n, cudaMemcpyHostToDevice));
    gather_rows_kernel1<<<grid_for(n * H, 256), 256>>>(xe, x, d_rows, (int)n, H);
    CUDA_CHECK(cudaGetLastError());
    for (int e = 0; e < E; e++) {
        const int r0 = (int)start[e], ne = (int)(start[e + 1] - start[e]);
        if (!ne) continue;
        matmul_forward_cuda(g + (int64_t)r0 * inter, xe + (int64_t)r0 * H, w_gate[e], NULL, ne, H, inter);
        matmul_forward_cuda(u + (int64_t)r0 * inter, xe + (int64_t)r0 * H, w_up[e], NULL, ne, H, inter);
        glu_forward_cuda(g + (int64_t)r0 * inter, g + (int64_t)r0 * inter, u + (int64_t)r0 * inter,
                         (int64_t)ne * inter, act);
        matmul_forward_cuda(ye + (int64_t)r0 * H, g + (int64_t)r0 * inter, w_down[e], NULL, ne, inter, H);
    }
    combine_kernel1<<<grid_for((int64_t)T * H, 256), 256>>>(out, ye, d_pos, d_wts, T, H, k);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());  // the scratch goes back before returning
    cuda_free(d_rows), cuda_free(d_pos), cuda_free(d_wts), cuda_free(xe), cuda_free(ye), cuda_free(g), cuda_free(u);
    free(h_idx), free(h_pos), free(h_rows), free(start), free(slot), free(h_wt), free(h_wts);
}
