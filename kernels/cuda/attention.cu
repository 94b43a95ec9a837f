// attention.cu: causal GQA attention forward with log-sum-exp, CUDA twin, fp32,
// with an optional sliding window (W > 0: key j visible to query t iff
// t − W < j ≤ t, as attention_forward_cpu).
//
// Flash style, as the CPU twin: no T×T buffer; an online softmax keeps each
// query row's running max m and sum l while key tiles stream past.
// One block = ATT_WARPS consecutive query positions of one query head h
// (grid: ceil(T / ATT_WARPS) × Hq); one warp = one query row. Per tile of
// ATT_BK = 32 keys the block stages K and V of key/value head h / (Hq/Hkv) in
// shared memory; lane j scores key j0 + j against the warp's query
// (s = scale·q·k, masked to −inf past the diagonal), the warp reduces max and
// sum by shuffles, and lane i accumulates output dims i, i + 32, … (NR per
// lane, NR = ceil(dh/32) a template constant so acc stays in registers).
// At the end out = acc / l and lse = m + log l.
// Window: the block's keys start at t0 − W + 1 (tiles wholly before the first
// row's window are never staged), and each row scores only the part of a tile
// inside its own band [t − W + 1, t] (passed to flash_row_tile as an offset
// into the staged tile).
//
// Plain fp32 FMAs, no tensor cores: the fp32 reference on the GPU. The bf16
// forward uses cuDNN's SDPA (sdpa.cu), which is judged against this kernel
// and the CPU twin.
#include <math.h>

#include "cuda_check.cuh"
#include "device_util.cuh"
#include "ops_cuda.h"

enum { ATT_WARPS = 8, ATT_BK = 32 };

// ---- kernels ------------------------------------------------------------------------

// Shared memory (dynamic): Ks [ATT_BK][dh + 1] (padded: lane j reads row j,
// column d, and the +1 puts the 32 lanes in 32 banks), Vs [ATT_BK][dh],
// Qs [ATT_WARPS][dh].
template <int NR>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attention_forward_kernel1(float *out, float *lse, const float *q, const float *k, const float *v, int T,
                              int Hq, int Hkv, int dh, float scale, int W) {
    extern __shared__ float smem[];
    const int ks_stride = dh + 1;
    float *Ks = smem;
    float *Vs = Ks + ATT_BK * ks_stride;
    float *Qs = Vs + ATT_BK * dh;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int h = blockIdx.y, kh = h / (Hq / Hkv);
    const int t0 = blockIdx.x * ATT_WARPS, t = t0 + warp;
    const int64_t nq = (int64_t)Hq * dh, nkv = (int64_t)Hkv * dh;
    const int n_keys = min(T, t0 + ATT_WARPS);  // keys before n_keys are visible to some row here …
    const int j_first = W > 0 ? max(0, t0 - W + 1) : 0;  // … and none before j_first

    float *qrow = Qs + warp * dh;
    if (t < T)
        for (int d = lane; d < dh; d += 32) qrow[d] = q[t * nq + (int64_t)h * dh + d];

    float m = -INFINITY, l = 0.0f, acc[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.0f;

    for (int j0 = j_first; j0 < n_keys; j0 += ATT_BK) {
        __syncthreads();  // the last tile is consumed (and Qs written, first time)
        const int nk = min(ATT_BK, n_keys - j0);
        for (int e = threadIdx.x; e < nk * dh; e += blockDim.x) {
            const int j = e / dh, d = e % dh;
            const int64_t g = (int64_t)(j0 + j) * nkv + (int64_t)kh * dh + d;
            Ks[j * ks_stride + d] = k[g];
            Vs[j * dh + d] = v[g];
        }
        __syncthreads();
        if (t >= T) continue;
        // Keys lo .. hi of the tile are visible to row t (warp-uniform: one row per warp).
        const int lo = W > 0 ? max(j0, t - W + 1) : j0, hi = min(j0 + nk - 1, t);
        if (lo > hi) continue;
        flash_row_tile<NR>(qrow, Ks + (lo - j0) * ks_stride, ks_stride, Vs + (lo - j0) * dh, dh, hi - lo + 1, scale,
                           m, l, acc);
    }
    if (t >= T) return;
    const float inv = 1.0f / l;
    float *o = out + t * nq + (int64_t)h * dh;
#pragma unroll
    for (int r = 0; r < NR; r++) {
        const int d = lane + 32 * r;
        if (d < dh) o[d] = acc[r] * inv;
    }
    if (lse && lane == 0) lse[(int64_t)h * T + t] = m + logf(l);
}

// ---- launcher ------------------------------------------------------------------------

template <int NR>
static void attention_launch(float *out, float *lse, const float *q, const float *k, const float *v, int T,
                             int Hq, int Hkv, int dh, float scale, int W) {
    const size_t smem = sizeof(float) * ((size_t)ATT_BK * (dh + 1) + (size_t)ATT_BK * dh + (size_t)ATT_WARPS * dh);
    CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel1<NR>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem));
    dim3 grid((T + ATT_WARPS - 1) / ATT_WARPS, Hq);
    attention_forward_kernel1<NR><<<grid, ATT_WARPS * 32, smem>>>(out, lse, q, k, v, T, Hq, Hkv, dh, scale, W);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void attention_forward_cuda(float *out, float *lse, const float *q, const float *k, const float *v,
                                       int T, int Hq, int Hkv, int dh, float scale, int window) {
    if (T <= 0) return;
    const int W = window > 0 && window < T ? window : 0;  // 0: causal
    if (dh <= 0 || dh > 256 || Hkv <= 0 || Hq % Hkv != 0 || window < 0) {
        fprintf(stderr, "spindle: attention_forward_cuda: unsupported shape Hq=%d Hkv=%d dh=%d window=%d (%s:%d)\n", Hq,
                Hkv, dh, window, __FILE__, __LINE__);
        abort();
    }
    if (dh <= 32) attention_launch<1>(out, lse, q, k, v, T, Hq, Hkv, dh, scale, W);
    else if (dh <= 64) attention_launch<2>(out, lse, q, k, v, T, Hq, Hkv, dh, scale, W);
    else if (dh <= 128) attention_launch<4>(out, lse, q, k, v, T, Hq, Hkv, dh, scale, W);
    else attention_launch<8>(out, lse, q, k, v, T, Hq, Hkv, dh, scale, W);
}
