// sparse_attention_tc.cu: attention over block-shared supports on tensor cores
// (support_attention_block_tc_cuda, oracle_cuda.h). Same semantics as
// support_attention_cuda / support_attention_cpu for bsel > 1: row b = t / bsel
// of sel holds n_sel[b] sorted key indices; query t attends with every head to
// those ≤ t, or to {t} alone when there is none. q, k, v are bf16, the output
// and every accumulation fp32; no recall / support statistics (those stay with
// support_attention_cuda). Judged against the CPU twin on bf16-rounded inputs
// by tests/twins/oracle.c ("support_attention_block_tc"; first passed on an
// H200 on 2026-11-29). The bf16 forward uses it for block-shared supports.
//
// Why tensor cores fit here: every query of a block shares one key set, so for
// one query head the block is a dense (bsel × |S_B|) attention problem over
// gathered keys — the shape of a flash-attention tile, with the causal mask
// replaced by "key index ≤ query position".
//
// support_attention_block_tc_kernel1: one thread block (8 warps) per (block b,
// query head h), M = bsel query rows (a multiple of 16, ≤ 128), head dim D
// (64 or 128, a template parameter). Heads are the fastest grid index, so the
// G heads of a KV group (which gather the same K/V rows) run side by side and
// the second to fourth gathers hit L2. Shared memory (dynamic; 192,000 bytes at
// M = 128, D = 128 — one block per SM — and 113,408 at M = 64, D = 128 — two;
// every region starts on a 128-byte boundary):
//   Qs [M][D+8]  bf16   the block's q rows of head h (zero rows past the end of T)
//   Ks [64][D+8] bf16   one tile of 64 gathered key rows (zero rows past n)
//   Vs [64][D+8] bf16   the same tile's value rows
//   Ss [M][64+4] fp32   S = Q·Ksᵀ (raw dot products)
//   Ps [M][64+8] bf16   P = exp(scale·S − m), rounded to bf16 for the P·V product
//   Os [M][D+4]  fp32   the output accumulator
//   nvis[M], row_m[M], row_l[M]: visible prefix of the key set per row, running
//   max (log2 units) and running sum.
// Row paddings keep every row a multiple of 16 bytes (WMMA's ldm rule: a
// multiple of 8 bf16 / 4 fp32 elements), shift consecutive rows by 4 banks,
// and keep every 16-row / 16-column fragment origin 32-byte aligned (row
// strides × 16 and column offsets × 16 are multiples of 32 bytes).
//
// Per tile of 64 gathered keys (c0 = 0, 64, … < n, n = the keys ≤ the block's
// last query):
//   1. S = Q·Kᵀ: 16×16 output tiles over the warps, WMMA bf16 m16n16k16 with
//      fp32 accumulation; A = Qs row-major, B = Kᵀ read as col-major from the
//      row-major Ks (element (d, j) at Ks[j·ld + d]).
//   2. The next tile's K rows are gathered into Ks (cp.async, 16-byte chunks)
//      while the softmax and P·V run.
//   3. Online softmax, one warp per row (lane i holds columns i and i + 32):
//      column j is visible to row r iff c0 + j < nvis[r] (keys are sorted, so
//      the visible set of every row is a prefix); m_new = max(m, max_j s_j),
//      α = 2^(m − m_new), p_j = 2^(s_j − m_new) in log2 units
//      (s = scale·log2(e)·S); P = bf16(p); l = l·α + Σ bf16(p) (the sum of the
//      weights actually multiplied, so a row is an exact convex combination of
//      its value rows up to the bf16 rounding of the weights); O row ·= α.
//   4. O += P·V: each warp loads an fp32 16×16 tile of Os as its accumulator
//      fragment, multiplies P (row-major) by Vs (row-major) over the tile's key
//      steps, stores it back. The α scaling happened in shared memory before,
//      since a WMMA accumulator's element-to-row map is opaque.
//   5. The next tile's V rows are gathered into Vs.
// The cp.async groups are committed in the order K0, V0, K1, V1, …: "all but
// the newest group done" (__pipeline_wait_prior(1)) before step 1 means K of
// this tile has landed, before step 4 that V of this tile has; a
// __syncthreads after each wait publishes every thread's copies.
// Causal skipping: the rows of a 16-row strip all see nothing of a tile when
// its last row sees nothing (nvis is nondecreasing in r); such strips skip
// steps 1 and 4 (their P rows are 0 and their α is 1). Key steps past the
// tile's last key (partial tiles) are skipped too; their Ks / Vs rows are zero
// so a skipped-or-not step adds exactly 0.
// Finally out row = O / l, or, for a row with nvis = 0, the value row of t
// itself (weight 1, fp32 of the bf16 v).
//
// Deliberately simple, first version (room left): legacy WMMA (mma.sync)
// rather than Hopper's wgmma/TMA; one K and one V buffer (the next tile's
// gather overlaps only the softmax and P·V of this one); A fragments re-read
// from shared memory for every output tile; K/V gathered once per query head,
// not once per KV group (L2 is relied on instead).
#include <cuda_bf16.h>
#include <cuda_pipeline_primitives.h>
#include <limits.h>
#include <math.h>
#include <mma.h>
#include <stdint.h>

#include "cuda_check.cuh"
#include "oracle_cuda.h"

namespace wmma = nvcuda::wmma;

enum {
    TC_WARPS = 8, TC_THREADS = TC_WARPS * 32,
    TC_BK = 64,        // gathered keys per tile
    TC_MAX_M = 128,    // largest bsel (query rows per thread block)
    TC_PAD_H = 8,      // bf16 row padding: 16 bytes
    TC_PAD_F = 4,      // fp32 row padding: 16 bytes
};

// Byte offsets of the shared-memory regions for M rows and head dim D.
struct TcLayout {
    size_t q, k, v, s, p, o, nvis, m, l, total;
};

__host__ __device__ static inline size_t tc_align(size_t x) { return (x + 127) & ~(size_t)127; }

__host__ __device__ static inline TcLayout tc_layout(int M, int D) {
    TcLayout L;
    size_t at = 0;
    L.q = at, at = tc_align(at + sizeof(__nv_bfloat16) * (size_t)M * (D + TC_PAD_H));
    L.k = at, at = tc_align(at + sizeof(__nv_bfloat16) * (size_t)TC_BK * (D + TC_PAD_H));
    L.v = at, at = tc_align(at + sizeof(__nv_bfloat16) * (size_t)TC_BK * (D + TC_PAD_H));
    L.s = at, at = tc_align(at + sizeof(float) * (size_t)M * (TC_BK + TC_PAD_F));
    L.p = at, at = tc_align(at + sizeof(__nv_bfloat16) * (size_t)M * (TC_BK + TC_PAD_H));
    L.o = at, at = tc_align(at + sizeof(float) * (size_t)M * (D + TC_PAD_F));
    L.nvis = at, at = tc_align(at + sizeof(int) * (size_t)M);
    L.m = at, at = tc_align(at + sizeof(float) * (size_t)M);
    L.l = at, at = tc_align(at + sizeof(float) * (size_t)M);
    L.total = at;
    return L;
}

// ---- device helpers ------------------------------------------------------------------

// Number of entries ≤ t in the ascending keys[0..n).
static __device__ __forceinline__ int tc_count_le(const int32_t *keys, int n, int t) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (keys[mid] <= t) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static __device__ __forceinline__ float tc_warp_sum(float x) {
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

static __device__ __forceinline__ float tc_warp_max(float x) {
    for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}

// Rows keys[c0 .. c0 + nk) of src (KV head kh) into dst [64][D + 8] with
// cp.async (16-byte chunks; every row of src starts on a 128-byte multiple of
// a 16-byte aligned base), rows nk..63 set to zero. Not waited for here.
template <int D>
static __device__ __forceinline__ void tc_gather(__nv_bfloat16 *dst, const __nv_bfloat16 *src,
                                                 const int32_t *keys, int c0, int nk, int64_t nkv, int kh) {
    constexpr int CH = D / 8, LDH = D + TC_PAD_H;
    for (int e = threadIdx.x; e < TC_BK * CH; e += TC_THREADS) {
        const int j = e / CH, c = e % CH;
        __nv_bfloat16 *d = dst + j * LDH + 8 * c;
        if (j < nk) __pipeline_memcpy_async(d, src + (int64_t)keys[c0 + j] * nkv + (int64_t)kh * D + 8 * c, 16);
        else *(uint4 *)d = make_uint4(0u, 0u, 0u, 0u);
    }
}

// ---- kernel ---------------------------------------------------------------------------

// Block b = blockIdx.x / Hq, head h = blockIdx.x % Hq; M = bsel rows
// t = b·bsel + r (r < nt = rows inside T). scale_log2 = scale·log2(e).
template <int D>
__global__ void __launch_bounds__(TC_THREADS)
    support_attention_block_tc_kernel1(float *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                       const __nv_bfloat16 *v, int T, int Hq, int Hkv, float scale_log2, int topk,
                                       int bsel, const int32_t *sel, const int32_t *n_sel) {
    constexpr int LDH = D + TC_PAD_H;      // Qs, Ks, Vs (bf16 elements)
    constexpr int LDS = TC_BK + TC_PAD_F;  // Ss (fp32)
    constexpr int LDP = TC_BK + TC_PAD_H;  // Ps (bf16)
    constexpr int LDO = D + TC_PAD_F;      // Os (fp32)
    constexpr int CH = D / 8;              // 16-byte chunks per bf16 row
    constexpr int NCT = TC_BK / 16;        // key column tiles per key tile
    constexpr int NDT = D / 16;            // 16-wide tiles of the head dim

    extern __shared__ __align__(128) unsigned char tc_smem[];
    const int M = bsel;
    const TcLayout lay = tc_layout(M, D);
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)(tc_smem + lay.q);
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)(tc_smem + lay.k);
    __nv_bfloat16 *Vs = (__nv_bfloat16 *)(tc_smem + lay.v);
    float *Ss = (float *)(tc_smem + lay.s);
    __nv_bfloat16 *Ps = (__nv_bfloat16 *)(tc_smem + lay.p);
    float *Os = (float *)(tc_smem + lay.o);
    int *nvis = (int *)(tc_smem + lay.nvis);
    float *row_m = (float *)(tc_smem + lay.m), *row_l = (float *)(tc_smem + lay.l);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, kh = h / (Hq / Hkv);
    const int t0 = b * bsel, nt = min(bsel, T - t0);
    const int64_t nq = (int64_t)Hq * D, nkv = (int64_t)Hkv * D;
    const int32_t *keys = sel + (int64_t)b * topk;
    const int n_all = min(max(n_sel[b], 0), topk);
    const int n_keys = tc_count_le(keys, n_all, t0 + nt - 1);  // keys visible to some row here

    // The block's q rows (zeros past T), each row's visible prefix, the running
    // max and sum, the output accumulator.
    for (int e = threadIdx.x; e < M * CH; e += TC_THREADS) {
        const int r = e / CH, c = e % CH;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (r < nt) val = *(const uint4 *)(q + (int64_t)(t0 + r) * nq + (int64_t)h * D + 8 * c);
        *(uint4 *)(Qs + r * LDH + 8 * c) = val;
    }
    for (int r = threadIdx.x; r < M; r += TC_THREADS) {
        nvis[r] = r < nt ? tc_count_le(keys, n_all, t0 + r) : 0;
        row_m[r] = -INFINITY;
        row_l[r] = 0.0f;
    }
    for (int e = threadIdx.x; e < M * LDO; e += TC_THREADS) Os[e] = 0.0f;
    if (n_keys > 0) {
        tc_gather<D>(Ks, k, keys, 0, min(TC_BK, n_keys), nkv, kh);
        __pipeline_commit();
        tc_gather<D>(Vs, v, keys, 0, min(TC_BK, n_keys), nkv, kh);
        __pipeline_commit();
    }

    for (int c0 = 0; c0 < n_keys; c0 += TC_BK) {
        const int nk = min(TC_BK, n_keys - c0), nkt = (nk + 15) / 16;  // keys, 16-key steps in this tile
        // A strip of 16 rows takes part in this tile when its last row sees a key of it.
        auto strip_active = [&](int i) {
            const int r_last = min(16 * i + 15, nt - 1);
            return 16 * i < nt && c0 < nvis[r_last];
        };

        __pipeline_wait_prior(1);  // this tile's K (its V may still be in flight)
        __syncthreads();           // … from every thread; Qs, nvis, Os ready on the first tile

        // 1. S = Q·Kᵀ, raw dot products.
        for (int e = warp; e < (M / 16) * NCT; e += TC_WARPS) {
            const int i = e / NCT, j = e % NCT;
            if (j >= nkt || !strip_active(i)) continue;  // warp-uniform
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
#pragma unroll
            for (int kk = 0; kk < NDT; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> bt;
                wmma::load_matrix_sync(a, Qs + 16 * i * LDH + 16 * kk, LDH);
                wmma::load_matrix_sync(bt, Ks + 16 * j * LDH + 16 * kk, LDH);
                wmma::mma_sync(acc, a, bt, acc);
            }
            wmma::store_matrix_sync(Ss + 16 * i * LDS + 16 * j, acc, LDS, wmma::mem_row_major);
        }
        __syncthreads();  // S complete; Ks free

        // 2. Next tile's keys.
        if (c0 + TC_BK < n_keys) tc_gather<D>(Ks, k, keys, c0 + TC_BK, min(TC_BK, n_keys - c0 - TC_BK), nkv, kh);
        __pipeline_commit();  // possibly empty: keeps the group count uniform

        // 3. Online softmax, one warp per row.
        for (int r = warp; r < M; r += TC_WARPS) {
            const int nv = min(max(nvis[r] - c0, 0), TC_BK);  // visible columns of this tile (≤ nk)
            __nv_bfloat16 *prow = Ps + r * LDP;
            if (nv == 0) {  // nothing visible: weights 0, m, l and the O row unchanged
                prow[lane] = __float2bfloat16_rn(0.0f);
                prow[lane + 32] = __float2bfloat16_rn(0.0f);
                continue;
            }
            const float *srow = Ss + r * LDS;
            const float s0 = lane < nv ? srow[lane] * scale_log2 : -INFINITY;
            const float s1 = lane + 32 < nv ? srow[lane + 32] * scale_log2 : -INFINITY;
            const float m_old = row_m[r], l_old = row_l[r];
            const float m_new = fmaxf(m_old, tc_warp_max(fmaxf(s0, s1)));  // finite: column 0 is visible
            const float alpha = exp2f(m_old - m_new);                      // 0 on the row's first keys
            const __nv_bfloat16 p0 = __float2bfloat16_rn(exp2f(s0 - m_new));
            const __nv_bfloat16 p1 = __float2bfloat16_rn(exp2f(s1 - m_new));
            prow[lane] = p0;
            prow[lane + 32] = p1;
            const float l_new = l_old * alpha + tc_warp_sum(__bfloat162float(p0) + __bfloat162float(p1));
            if (alpha != 1.0f) {  // warp-uniform
                float *orow = Os + r * LDO;
                for (int d = lane; d < D; d += 32) orow[d] *= alpha;
            }
            __syncwarp();
            if (lane == 0) row_m[r] = m_new, row_l[r] = l_new;
        }

        __pipeline_wait_prior(1);  // this tile's V (the next K may still be in flight)
        __syncthreads();           // … from every thread; P and the scaled O rows ready

        // 4. O += P·V.
        for (int e = warp; e < (M / 16) * NDT; e += TC_WARPS) {
            const int i = e / NDT, j = e % NDT;
            if (!strip_active(i)) continue;  // warp-uniform
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            float *otile = Os + 16 * i * LDO + 16 * j;
            wmma::load_matrix_sync(acc, otile, LDO, wmma::mem_row_major);
            for (int kk = 0; kk < nkt; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> bv;
                wmma::load_matrix_sync(a, Ps + 16 * i * LDP + 16 * kk, LDP);
                wmma::load_matrix_sync(bv, Vs + 16 * kk * LDH + 16 * j, LDH);
                wmma::mma_sync(acc, a, bv, acc);
            }
            wmma::store_matrix_sync(otile, acc, LDO, wmma::mem_row_major);
        }
        __syncthreads();  // Vs free; Os updated

        // 5. Next tile's values.
        if (c0 + TC_BK < n_keys) tc_gather<D>(Vs, v, keys, c0 + TC_BK, min(TC_BK, n_keys - c0 - TC_BK), nkv, kh);
        __pipeline_commit();
    }
    __pipeline_wait_prior(0);  // nothing real is in flight here; no copy outlives the block
    __syncthreads();           // nvis, Os, row_l ready even when no tile ran

    for (int r = warp; r < nt; r += TC_WARPS) {
        const int t = t0 + r;
        float *o = out + (int64_t)t * nq + (int64_t)h * D;
        if (nvis[r] == 0) {  // no selected key ≤ t: the row attends to t alone, weight 1
            const __nv_bfloat16 *vr = v + (int64_t)t * nkv + (int64_t)kh * D;
            for (int d = lane; d < D; d += 32) o[d] = __bfloat162float(vr[d]);
            continue;
        }
        const float inv = 1.0f / row_l[r];  // ≥ 1: the row's maximum has weight bf16(1) = 1
        const float *orow = Os + r * LDO;
        for (int d = lane; d < D; d += 32) o[d] = orow[d] * inv;
    }
}

// ---- launcher ---------------------------------------------------------------------------

template <int D>
static int support_attention_block_tc_launch(float *out, const void *q, const void *k, const void *v, int T, int Hq,
                                             int Hkv, float scale, int topk, int bsel, const int32_t *sel,
                                             const int32_t *n_sel) {
    const TcLayout lay = tc_layout(bsel, D);
    int dev = 0, max_smem = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (lay.total > (size_t)max_smem) return -1;
    const int64_t n_blocks = (T + (int64_t)bsel - 1) / bsel, grid = n_blocks * Hq;
    if (grid > INT_MAX) return -1;
    CUDA_CHECK(cudaFuncSetAttribute(support_attention_block_tc_kernel1<D>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)lay.total));
    support_attention_block_tc_kernel1<D><<<(unsigned)grid, TC_THREADS, lay.total>>>(
        out, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)v, T, Hq, Hkv,
        scale * 1.4426950408889634f, topk, bsel, sel, n_sel);
    CUDA_CHECK(cudaGetLastError());
    return 0;
}

extern "C" int support_attention_block_tc_cuda(float *out, const void *q, const void *k, const void *v, int T,
                                               int Hq, int Hkv, int dh, float scale, int topk, int bsel,
                                               const int32_t *sel, const int32_t *n_sel) {
    if ((dh != 64 && dh != 128) || bsel < 16 || bsel > TC_MAX_M || bsel % 16 != 0 || Hkv <= 0 || Hq <= 0 ||
        Hq % Hkv != 0 || topk < 1)
        return -1;
    // cp.async and the uint4 loads of q need 16-byte aligned rows (cudaMalloc gives 256).
    if (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15) return -1;
    if (T <= 0) return 0;
    if (dh == 64) return support_attention_block_tc_launch<64>(out, q, k, v, T, Hq, Hkv, scale, topk, bsel, sel, n_sel);
    return support_attention_block_tc_launch<128>(out, q, k, v, T, Hq, Hkv, scale, topk, bsel, sel, n_sel);
}
