// sparse_attention.cu: attention over given supports (support_attention_cuda,
// oracle_cuda.h), the CUDA twin of support_attention_cpu
// (kernels/cpu/oracle_cpu.c), fp32. Row b = t / bsel of sel holds n_sel[b]
// sorted key indices; query t attends with every head to those ≤ t (a prefix,
// found by binary search), or to {t} alone when there is none. The restricted
// softmax is computed directly by an online softmax over the gathered keys
// (max m, sum l, output accumulator rescaled per tile), which equals the CPU
// twin's "full softmax renormalised over the support".
//
// Block-shared (bsel > 1), support_attention_block_kernel1: every query of a
// block B shares one gathered key set, so a thread block takes SB_ROWS = 16
// (query, head) rows of one block B and one KV head kh (rows ordered query
// major, the G heads of the group minor; SB_RW = 2 rows per warp), stages each
// tile of SB_BK = 32 gathered K and V rows in shared memory once and lets all
// 16 rows consume it (lane j scores key j against the row's q, as in
// attention.cu). A row stops at its own visible prefix of the key set.
//
// Per query (bsel = 1), support_attention_query_kernel1: one thread block per
// query, one warp per head; for each key the warp reads its row coalesced (lane
// i holds dims i, i+32, …), reduces the dot product by shuffles and lane j keeps
// key j's score — each key row read once per head (the G heads of a group hit
// the same rows in L1/L2), five shuffles per key and head. The shared-tile
// kernel with one query per thread block (its rows the G heads of one KV head,
// sharing each staged tile of the query's keys) is kept for comparison
// (support_attention_query_tile_cuda): on an H200 it is the slower of the two
// (synthetic Qwen3-8B, k 2048: 1,228 ms against 824 ms at 128K; docs/performance.md),
// the staging and barriers costing more than the key rows the heads re-read.
//
// Recall: when recall is not NULL, each (t, h) row also sums
// exp(s·q·k − lse_{h,t}) over its support into a [T, Hq] scratch, and
// support_attention_counts_kernel1 adds (1/Hq)·Σ_h of it to recall[t] (the
// teacher mass Σ_{j∈S_t} P_t(j)) and |S_t| to support[t], one thread per query:
// deterministic, no atomics.
//
// Under SPINDLE_CUDA_EMULATION (tests/emu) the launches and the dynamic shared
// memory go through the emulation's stand-ins (scripts/emulate-cuda.sh
// support_attention); nothing else differs.
#include <math.h>
#include <stdint.h>

#include "cuda_check.cuh"
#include "device_util.cuh"
#include "oracle_cuda.h"
#include "ops_cuda.h"

enum {
    SQ_WARPS = 8,              // per-query kernel: warps (heads in flight) per block
    SB_WARPS = 8, SB_RW = 2,   // block kernel: warps, rows per warp
    SB_ROWS = SB_WARPS * SB_RW,
    SB_BK = 32,                // gathered keys per shared-memory tile
};

// ---- device helpers ------------------------------------------------------------------

// ---- kernels ------------------------------------------------------------------------

// One block per query t (any bsel: row t / bsel), warps over heads. mass [T, Hq] or NULL.
template <int NR>
__global__ void __launch_bounds__(SQ_WARPS * 32)
    support_attention_query_kernel1(float *out, float *mass, const float *q, const float *k, const float *v,
                                    const float *lse, int T, int Hq, int Hkv, int dh, float scale, int topk,
                                    int bsel, const int32_t *sel, const int32_t *n_sel) {
    const int t = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int G = Hq / Hkv, b = t / bsel;
    const int64_t nq = (int64_t)Hq * dh, nkv = (int64_t)Hkv * dh;
    const int32_t *keys = sel + (int64_t)b * topk;
    const int n_vis = count_le(keys, min(max(n_sel[b], 0), topk), t);
    const bool self = n_vis == 0;  // no selected key ≤ t: attend to t alone
    const int n = self ? 1 : n_vis;

    for (int h = warp; h < Hq; h += SQ_WARPS) {
        const int64_t kvo = (int64_t)(h / G) * dh;
        float qv[NR], acc[NR];
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const int d = lane + 32 * r;
            qv[r] = d < dh ? q[t * nq + (int64_t)h * dh + d] : 0.0f;
            acc[r] = 0.0f;
        }
        const float l_h = mass ? lse[(int64_t)h * T + t] : 0.0f;
        float m = -INFINITY, l = 0.0f, ms = 0.0f;
        for (int c0 = 0; c0 < n; c0 += 32) {
            const int nk = min(32, n - c0);
            const int my_key = lane < nk ? (self ? t : keys[c0 + lane]) : 0;
            float s = -INFINITY;
            for (int j = 0; j < nk; j++) {
                const float *kr = k + __shfl_sync(0xffffffffu, my_key, j) * nkv + kvo;
                float part = 0.0f;
#pragma unroll
                for (int r = 0; r < NR; r++) {
                    const int d = lane + 32 * r;
                    if (d < dh) part += qv[r] * kr[d];
                }
                part = warp_sum(part);
                if (lane == j) s = scale * part;
            }
            const float m_new = fmaxf(m, warp_max(s));  // finite: lane 0 holds a key
            const float corr = expf(m - m_new);          // 0 on the first tile
            const float p = lane < nk ? expf(s - m_new) : 0.0f;
            l = l * corr + warp_sum(p);
            m = m_new;
            if (mass && lane < nk) ms += expf(s - l_h);
#pragma unroll
            for (int r = 0; r < NR; r++) acc[r] *= corr;
            for (int j = 0; j < nk; j++) {
                const float pj = __shfl_sync(0xffffffffu, p, j);
                const float *vr = v + __shfl_sync(0xffffffffu, my_key, j) * nkv + kvo;
#pragma unroll
                for (int r = 0; r < NR; r++) {
                    const int d = lane + 32 * r;
                    if (d < dh) acc[r] += pj * vr[d];
                }
            }
        }
        const float inv = 1.0f / l;
        float *o = out + t * nq + (int64_t)h * dh;
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const int d = lane + 32 * r;
            if (d < dh) o[d] = acc[r] * inv;
        }
        if (mass) {
            ms = warp_sum(ms);
            if (lane == 0) mass[(int64_t)t * Hq + h] = ms;
        }
    }
}

// Block b = blockIdx.x, KV head kh = blockIdx.z, rows r = blockIdx.y·ROWS + …
// of the block's |B|·G (query, head) rows: t = b·bsel + r / G, h = kh·G + r % G;
// ROWS = WARPS·RW (RW rows a warp). Shared memory (dynamic): Qs [ROWS][dh],
// Ks [SB_BK][dh + 1], Vs [SB_BK][dh].
template <int NR, int WARPS, int RW>
__global__ void __launch_bounds__(WARPS * 32)
    support_attention_block_kernel1(float *out, float *mass, const float *q, const float *k, const float *v,
                                    const float *lse, int T, int Hq, int Hkv, int dh, float scale, int topk,
                                    int bsel, const int32_t *sel, const int32_t *n_sel) {
    constexpr int ROWS = WARPS * RW;
    DYNAMIC_SMEM(smem);
    const int ks_stride = dh + 1;
    float *Qs = smem;
    float *Ks = Qs + ROWS * dh;
    float *Vs = Ks + SB_BK * ks_stride;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = blockIdx.x, kh = blockIdx.z, G = Hq / Hkv;
    const int t0 = b * bsel, nt = min(bsel, T - t0), n_rows = nt * G;
    const int r0 = blockIdx.y * ROWS;
    if (r0 >= n_rows) return;
    const int64_t nq = (int64_t)Hq * dh, nkv = (int64_t)Hkv * dh, kvo = (int64_t)kh * dh;
    const int32_t *keys = sel + (int64_t)b * topk;
    const int n_all = min(max(n_sel[b], 0), topk);

    // Stage q of the block's rows; rows past n_rows stay unused.
    for (int e = threadIdx.x; e < ROWS * dh; e += blockDim.x) {
        const int i = e / dh, d = e % dh, r = r0 + i;
        if (r < n_rows) Qs[e] = q[(t0 + r / G) * nq + (int64_t)(kh * G + r % G) * dh + d];
    }
    // Keys visible to some row here: those ≤ the last row's query.
    const int n_tile_keys = count_le(keys, n_all, t0 + (min(r0 + ROWS, n_rows) - 1) / G);

    int n_vis[RW];
    float m[RW], l[RW], ms[RW], l_h[RW], acc[RW][NR];
#pragma unroll
    for (int i = 0; i < RW; i++) {
        const int r = r0 + warp * RW + i;
        n_vis[i] = r < n_rows ? count_le(keys, n_all, t0 + r / G) : 0;
        l_h[i] = r < n_rows && mass ? lse[(int64_t)(kh * G + r % G) * T + t0 + r / G] : 0.0f;
        m[i] = -INFINITY, l[i] = 0.0f, ms[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < NR; c++) acc[i][c] = 0.0f;
    }

    for (int c0 = 0; c0 < n_tile_keys; c0 += SB_BK) {
        __syncthreads();  // the last tile is consumed (and Qs written, first time)
        const int nk = min(SB_BK, n_tile_keys - c0);
        for (int e = threadIdx.x; e < nk * dh; e += blockDim.x) {
            const int j = e / dh, d = e % dh;
            const int64_t g = (int64_t)keys[c0 + j] * nkv + kvo + d;
            Ks[j * ks_stride + d] = k[g];
            Vs[j * dh + d] = v[g];
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < RW; i++) {
            if (c0 >= n_vis[i]) continue;  // warp-uniform: the row's keys are done (or it has none)
            const int nv = min(nk, n_vis[i] - c0);
            const float *qrow = Qs + (warp * RW + i) * dh;
            const float s = flash_row_tile<NR>(qrow, Ks, ks_stride, Vs, dh, nv, scale, m[i], l[i], acc[i]);
            if (mass && lane < nv) ms[i] += expf(s - l_h[i]);
        }
    }
    __syncthreads();  // Qs complete even when no tile ran

#pragma unroll
    for (int i = 0; i < RW; i++) {
        const int r = r0 + warp * RW + i;
        if (r >= n_rows) continue;
        const int t = t0 + r / G, h = kh * G + r % G;
        float *o = out + t * nq + (int64_t)h * dh;
        if (n_vis[i] == 0) {  // no selected key ≤ t: the row attends to t alone, weight 1
            const float *vr = v + t * nkv + kvo;
            for (int d = lane; d < dh; d += 32) o[d] = vr[d];
            if (mass) {
                const float *kr = k + t * nkv + kvo, *qrow = Qs + (warp * RW + i) * dh;
                float part = 0.0f;
                for (int d = lane; d < dh; d += 32) part += qrow[d] * kr[d];
                part = warp_sum(part);
                if (lane == 0) mass[(int64_t)t * Hq + h] = expf(scale * part - l_h[i]);
            }
            continue;
        }
        const float inv = 1.0f / l[i];
#pragma unroll
        for (int c = 0; c < NR; c++) {
            const int d = lane + 32 * c;
            if (d < dh) o[d] = acc[i][c] * inv;
        }
        if (mass) {
            const float s = warp_sum(ms[i]);
            if (lane == 0) mass[(int64_t)t * Hq + h] = s;
        }
    }
}

// recall[t] += (1/Hq)·Σ_h mass[t, h] (mass may be NULL: recall is then NULL too),
// support[t] += |S_t|.
__global__ void support_attention_counts_kernel1(float *recall, float *support, const float *mass, int T, int Hq,
                                                 int topk, int bsel, const int32_t *sel, const int32_t *n_sel) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    if (support) {
        const int b = t / bsel, n = count_le(sel + (int64_t)b * topk, min(max(n_sel[b], 0), topk), t);
        support[t] += (float)(n > 0 ? n : 1);
    }
    if (recall) {
        float s = 0.0f;
        for (int h = 0; h < Hq; h++) s += mass[(int64_t)t * Hq + h];
        recall[t] += s * (1.0f / Hq);
    }
}

// ---- launchers ------------------------------------------------------------------------

// The shared-tile kernel for (bsel, G): WARPS warps of RW rows each.
template <int NR, int WARPS, int RW>
static void support_attention_block_launch(float *out, float *mass, const float *q, const float *k, const float *v,
                                           const float *lse, int T, int Hq, int Hkv, int dh, float scale, int topk,
                                           int bsel, const int32_t *sel, const int32_t *n_sel) {
    const size_t smem = sizeof(float) * ((size_t)WARPS * RW * dh + (size_t)SB_BK * (dh + 1) + (size_t)SB_BK * dh);
    CUDA_CHECK(cudaFuncSetAttribute(support_attention_block_kernel1<NR, WARPS, RW>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int n_blocks = (T + bsel - 1) / bsel, G = Hq / Hkv;
    const int64_t rows_per_block = (int64_t)(bsel < T ? bsel : T) * G;
    dim3 grid(n_blocks, (unsigned)((rows_per_block + WARPS * RW - 1) / (WARPS * RW)), Hkv);
    launch_checked(support_attention_block_kernel1<NR, WARPS, RW>, grid, dim3(WARPS * 32), smem, out, mass, q, k, v,
                   lse, T, Hq, Hkv, dh, scale, topk, bsel, sel, n_sel);
}

// Per query (bsel 1) the warp kernel, or with tile_kernel the shared-tile kernel,
// one thread block per (query, KV head): the query's gathered K/V tiles staged
// once for the G heads of the group (a warp a head while G ≤ 8).
template <int NR>
static void support_attention_launch(float *out, float *mass, const float *q, const float *k, const float *v,
                                     const float *lse, int T, int Hq, int Hkv, int dh, float scale, int topk,
                                     int bsel, const int32_t *sel, const int32_t *n_sel, int tile_kernel) {
    if (bsel == 1 && !tile_kernel) {
        launch_checked(support_attention_query_kernel1<NR>, dim3(T), dim3(SQ_WARPS * 32), 0, out, mass, q, k, v, lse, T,
                       Hq, Hkv, dh, scale, topk, bsel, sel, n_sel);
        return;
    }
    const int G = Hq / Hkv;
    if (bsel == 1 && G <= 4)
        support_attention_block_launch<NR, 4, 1>(out, mass, q, k, v, lse, T, Hq, Hkv, dh, scale, topk, bsel, sel, n_sel);
    else if (bsel == 1 && G <= 8)
        support_attention_block_launch<NR, 8, 1>(out, mass, q, k, v, lse, T, Hq, Hkv, dh, scale, topk, bsel, sel, n_sel);
    else
        support_attention_block_launch<NR, SB_WARPS, SB_RW>(out, mass, q, k, v, lse, T, Hq, Hkv, dh, scale, topk, bsel,
                                                            sel, n_sel);
}

static void support_attention_run(float *out, float *recall, float *support, const float *q, const float *k,
                                  const float *v, const float *lse, int T, int Hq, int Hkv, int dh, float scale,
                                  int topk, int bsel, const int32_t *sel, const int32_t *n_sel, int tile_kernel) {
    if (T <= 0) return;
    if (dh <= 0 || dh > 256 || Hkv <= 0 || Hq % Hkv != 0 || topk < 1 || bsel < 1 || (recall && !lse)) {
        fprintf(stderr,
                "spindle: support_attention_cuda: unsupported call Hq=%d Hkv=%d dh=%d topk=%d bsel=%d%s (%s:%d)\n",
                Hq, Hkv, dh, topk, bsel, recall && !lse ? " (recall needs lse)" : "", __FILE__, __LINE__);
        abort();
    }
    float *mass = recall ? (float *)cuda_malloc(sizeof(float) * (size_t)T * Hq) : NULL;
#define SA_LAUNCH(NR) \
    support_attention_launch<NR>(out, mass, q, k, v, lse, T, Hq, Hkv, dh, scale, topk, bsel, sel, n_sel, tile_kernel)
    if (dh <= 32) SA_LAUNCH(1);
    else if (dh <= 64) SA_LAUNCH(2);
    else if (dh <= 128) SA_LAUNCH(4);
    else SA_LAUNCH(8);
#undef SA_LAUNCH
    support_attention_counts_cuda(recall, support, mass, T, Hq, topk, bsel, sel, n_sel);
    cuda_free(mass);  // cudaFree waits for the kernels that use it
}

extern "C" void support_attention_counts_cuda(float *recall, float *support, const float *mass, int T, int Hq,
                                              int topk, int bsel, const int32_t *sel, const int32_t *n_sel) {
    if (T <= 0 || (!recall && !support)) return;
    if (recall && !mass) {
        fprintf(stderr, "spindle: support_attention_counts_cuda: recall needs the rows' masses (%s:%d)\n", __FILE__,
                __LINE__);
        abort();
    }
    launch_checked(support_attention_counts_kernel1, dim3((T + 255) / 256), dim3(256), 0, recall, support, mass, T, Hq,
                   topk, bsel, sel, n_sel);
}

extern "C" void support_attention_cuda(float *out, float *recall, float *support, const float *q, const float *k,
                                       const float *v, const float *lse, int T, int Hq, int Hkv, int dh,
                                       float scale, int topk, int bsel, const int32_t *sel,
                                       const int32_t *n_sel) {
    support_attention_run(out, recall, support, q, k, v, lse, T, Hq, Hkv, dh, scale, topk, bsel, sel, n_sel, 0);
}

extern "C" void support_attention_query_tile_cuda(float *out, float *recall, float *support, const float *q,
                                                  const float *k, const float *v, const float *lse, int T, int Hq,
                                                  int Hkv, int dh, float scale, int topk, const int32_t *sel,
                                                  const int32_t *n_sel) {
    support_attention_run(out, recall, support, q, k, v, lse, T, Hq, Hkv, dh, scale, topk, 1, sel, n_sel, 1);
}
