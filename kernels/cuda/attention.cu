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

// ---- attention over a decoding cache -------------------------------------------------

// attention_cached_cpu on the device, for the few queries of a decoding step:
// split over the keys ("flash decoding"), so that one query at 32K–128K keys
// spreads over the whole GPU instead of one block per head walking every key.
// Pass 1, one block per (query i, KV head kh, group of at most DC_MAXG of its
// query heads, chunk of DC_CHUNK visible keys): the group's q rows in shared
// memory; warp w scores keys w, w + DC_WARPS, … of the chunk, its lanes reading
// each key row once, coalesced, for every query head of the group (the GQA
// heads share the row), into a shared score tile; then per head the chunk's
// max m and Σ exp(s − m), and per output dim the unnormalised Σ exp(s − m)·v
// (threads across dims, coalesced V rows). Pass 2 (one block per (i, h),
// threads across dims) merges the chunks: out = Σ_c e^{m_c − M} o_c / Σ_c e^{m_c − M} l_c.
// A chunk past a query's last visible key writes m = −inf and is skipped.
enum { DC_THREADS = 128, DC_WARPS = DC_THREADS / 32, DC_CHUNK = 256, DC_MAXG = 8, DC_MAXR = 8 };  // dh ≤ 256

__global__ void __launch_bounds__(DC_THREADS)
    attention_cached_part_kernel(float *part_o, float *part_ml, const float *q, const float *kc, const float *vc,
                                 int p0, int Hq, int Hkv, int dh, float scale, int window, int n_chunks) {
    extern __shared__ float sm[];  // qs [DC_MAXG][dh], then sc [DC_MAXG][DC_CHUNK]
    __shared__ float m_s[DC_MAXG], l_s[DC_MAXG];
    const int G = Hq / Hkv, n_hg = (G + DC_MAXG - 1) / DC_MAXG;
    const int hg = blockIdx.x % n_hg, kh = (blockIdx.x / n_hg) % Hkv, i = blockIdx.x / (n_hg * Hkv);
    const int c = blockIdx.y, g0 = hg * DC_MAXG, GB = G - g0 < DC_MAXG ? G - g0 : DC_MAXG, h0 = kh * G + g0;
    const int t = p0 + i, lo = window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;
    const int j0 = lo + c * DC_CHUNK, j1 = j0 + DC_CHUNK - 1 < t ? j0 + DC_CHUNK - 1 : t, nk = j1 - j0 + 1;
    const int64_t nq = (int64_t)Hq * dh, nkv = (int64_t)Hkv * dh;
    // Partial (i, h, c) at ((i·Hq + h)·n_chunks + c).
    const int64_t slot0 = ((int64_t)i * Hq + h0) * n_chunks + c;
    if (nk <= 0) {
        for (int g = threadIdx.x; g < GB; g += DC_THREADS)
            part_ml[2 * (slot0 + (int64_t)g * n_chunks)] = -INFINITY, part_ml[2 * (slot0 + (int64_t)g * n_chunks) + 1] = 0.0f;
        return;
    }
    float *qs = sm, *sc = sm + DC_MAXG * dh;
    for (int e = threadIdx.x; e < GB * dh; e += DC_THREADS) qs[e] = q[i * nq + (int64_t)h0 * dh + e];
    __syncthreads();
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    for (int jj = w; jj < nk; jj += DC_WARPS) {
        const float *kr = kc + (int64_t)(j0 + jj) * nkv + (int64_t)kh * dh;
        float kd[DC_MAXR];
#pragma unroll
        for (int r = 0; r < DC_MAXR; r++) kd[r] = lane + 32 * r < dh ? kr[lane + 32 * r] : 0.0f;
#pragma unroll
        for (int g = 0; g < DC_MAXG; g++) {
            if (g >= GB) break;
            float a = 0.0f;
#pragma unroll
            for (int r = 0; r < DC_MAXR; r++)
                if (lane + 32 * r < dh) a += qs[g * dh + lane + 32 * r] * kd[r];
            a = warp_sum(a);
            if (lane == 0) sc[g * DC_CHUNK + jj] = scale * a;
        }
    }
    __syncthreads();
    for (int g = w; g < GB; g += DC_WARPS) {  // the chunk's max and Σ exp per head; sc becomes exp(s − m)
        float *row = sc + g * DC_CHUNK, mx = -INFINITY, sum = 0.0f;
        for (int jj = lane; jj < nk; jj += 32) mx = fmaxf(mx, row[jj]);
        mx = warp_max(mx);
        for (int jj = lane; jj < nk; jj += 32) sum += (row[jj] = expf(row[jj] - mx));
        sum = warp_sum(sum);
        if (lane == 0) m_s[g] = mx, l_s[g] = sum;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < dh; d += DC_THREADS) {
        float acc[DC_MAXG];
#pragma unroll
        for (int g = 0; g < DC_MAXG; g++) acc[g] = 0.0f;
        const float *vr = vc + (int64_t)j0 * nkv + (int64_t)kh * dh + d;
        for (int jj = 0; jj < nk; jj++) {
            const float vv = vr[(int64_t)jj * nkv];
#pragma unroll
            for (int g = 0; g < DC_MAXG; g++)
                if (g < GB) acc[g] += sc[g * DC_CHUNK + jj] * vv;
        }
#pragma unroll
        for (int g = 0; g < DC_MAXG; g++)
            if (g < GB) part_o[(slot0 + (int64_t)g * n_chunks) * dh + d] = acc[g];
    }
    if (threadIdx.x < GB) {
        part_ml[2 * (slot0 + (int64_t)threadIdx.x * n_chunks)] = m_s[threadIdx.x];
        part_ml[2 * (slot0 + (int64_t)threadIdx.x * n_chunks) + 1] = l_s[threadIdx.x];
    }
}

__global__ void attention_cached_merge_kernel(float *out, const float *part_o, const float *part_ml, int dh,
                                              int n_chunks) {
    const int64_t row = blockIdx.x;  // i·Hq + h
    const float *ml = part_ml + 2 * row * n_chunks, *po = part_o + row * n_chunks * dh;
    float M = -INFINITY;
    for (int c = 0; c < n_chunks; c++) M = fmaxf(M, ml[2 * c]);  // finite: every query sees its own key
    float L = 0.0f;
    for (int c = 0; c < n_chunks; c++)
        if (ml[2 * c] > -INFINITY) L += expf(ml[2 * c] - M) * ml[2 * c + 1];
    for (int d = threadIdx.x; d < dh; d += blockDim.x) {
        float o = 0.0f;
        for (int c = 0; c < n_chunks; c++)
            if (ml[2 * c] > -INFINITY) o += expf(ml[2 * c] - M) * po[(int64_t)c * dh + d];
        out[row * dh + d] = o / L;
    }
}

extern "C" void attention_cached_cuda(float *out, const float *q, const float *k_cache, const float *v_cache, int p0,
                                      int n, int Hq, int Hkv, int dh, float scale, int window) {
    if (n <= 0) return;
    if (dh <= 0 || dh > 32 * DC_MAXR || Hkv <= 0 || Hq % Hkv != 0 || window < 0 || p0 < 0) {
        fprintf(stderr, "spindle: attention_cached_cuda: unsupported shape Hq=%d Hkv=%d dh=%d window=%d p0=%d (%s:%d)\n",
                Hq, Hkv, dh, window, p0, __FILE__, __LINE__);
        abort();
    }
    // The most keys one query sees: the last one's, all p0 + n of them or its window.
    const int most = window > 0 && window < p0 + n ? window : p0 + n;
    const int n_chunks = (most + DC_CHUNK - 1) / DC_CHUNK, G = Hq / Hkv, n_hg = (G + DC_MAXG - 1) / DC_MAXG;
    const int64_t slots = (int64_t)n * Hq * n_chunks;
    float *part = (float *)cuda_malloc(sizeof(float) * (size_t)(slots * (dh + 2)));
    float *part_o = part, *part_ml = part + slots * dh;
    const dim3 grid((unsigned)(n * Hkv * n_hg), (unsigned)n_chunks);
    const size_t smem = sizeof(float) * (size_t)DC_MAXG * (size_t)(dh + DC_CHUNK);
    attention_cached_part_kernel<<<grid, DC_THREADS, smem>>>(part_o, part_ml, q, k_cache, v_cache, p0, Hq, Hkv, dh,
                                                             scale, window, n_chunks);
    CUDA_CHECK(cudaGetLastError());
    attention_cached_merge_kernel<<<(unsigned)(n * Hq), dh < 256 ? ((dh + 31) / 32) * 32 : 256>>>(out, part_o, part_ml,
                                                                                             dh, n_chunks);
    CUDA_CHECK(cudaGetLastError());
    cuda_free(part);  // stream-ordered: after the kernels
}
