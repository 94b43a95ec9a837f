// indexer_block_wg.cu: the block-shared selection's ranking values on Hopper's warpgroup MMA
// (indexer_block_scores_wg_cuda, indexer_cuda.h) — the function of indexer_block_tc.cu,
//   A_B(j) = Σ_{t ∈ B, t ≥ j} exp(c·q_t·k_j − lse_t),  lse_t = log Σ_{j ≤ t} exp(c·q_t·k_j),  j < end(B),
// from bf16 q, k with fp32 products and sums, with both passes on wgmma (kernels/cuda/wgmma.cuh).
// Opt-in while it is measured: indexer_block_scores_bf16_cuda runs it under SPINDLE_SELECT_WGMMA=1 for
// the shapes it takes (d_I 64 or 128, b_sel 64: the shape of the TTFT target).
//
// One thread block per two query blocks of 64 rows, one warpgroup per block.
// The rows' q and each 64-key tile of k sit in shared memory in wgmma's core-matrix layout without
// swizzling (row r's 16-byte chunk ch at (r / 8)·16·D + 128·ch + 16·(r % 8)), which serves them both as
// descriptors' B operands and as ldmatrix rows for A fragments:
//   pass 1 (query rows × keys): per warpgroup its 64 q rows (A, registers) × the tile's 64 keys (B,
//     K-major): per row the running maximum and sum of 2^(s·c·log2 e), then lse in log2 units;
//   pass 2 (keys × query rows): per warpgroup the tile's 64 keys (A, registers) × its block's 64 queries
//     (B, K-major), p = 2^(s·c·log2 e − lse) (0 where the key is after the
//     query), summed over the chunk's queries in registers and over the quad of lanes: a key's value for
//     the block, in a fixed order (A does not depend on timing). The warp's 16 keys are its fragments' rows,
//     as in the mma.sync kernel's pass 2.
// A warpgroup skips a tile none of its rows sees (pass 1) or none of its block's queries sees (pass 2); masks
// only where a key can follow a query. Each warpgroup writes its own block's row of A. Products are issued,
// committed and waited for per pass and tile (no overlap across warpgroups yet).
#include <cuda_bf16.h>
#include <cuda_pipeline_primitives.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda_check.cuh"
#include "device_util.cuh"
#include "indexer_cuda.h"
#include "mma.cuh"
#include "wgmma.cuh"

enum {
    IW_BK = 64,    // keys per tile
    IW_BSEL = 64,  // queries per block: the b_sel the kernel takes
    IW_ROWS = 128, // query rows per thread block: two blocks, a warpgroup each
};

// Rows src[0 … n) (row stride D) into dst in the core-matrix layout, rows n … ROWS − 1 zero; every thread
// takes part; cp.async, not waited for.
template <int D, int ROWS>
static __device__ __forceinline__ void iw_stage(__nv_bfloat16 *dst, const __nv_bfloat16 *src, int n) {
    constexpr int CH = D / 8;
    for (int e = threadIdx.x; e < ROWS * CH; e += blockDim.x) {
        const int r = e / CH, ch = e % CH;
        __nv_bfloat16 *d = dst + (r / 8) * 8 * D + 64 * ch + 8 * (r % 8);
        if (r < n) __pipeline_memcpy_async(d, src + (int64_t)r * D + 8 * ch, 16);
        else *(uint4 *)d = make_uint4(0u, 0u, 0u, 0u);
    }
}

// This lane's ldmatrix row for the A fragments of 16 rows starting at row r0 of a core-layout tile, k-step kk.
template <int D>
static __device__ __forceinline__ const __nv_bfloat16 *iw_arow(const __nv_bfloat16 *tile, int r0, int kk) {
    const int lane = threadIdx.x % 32, r = r0 + (lane % 8) + 8 * ((lane / 8) % 2), ch = 2 * kk + lane / 16;
    return tile + (r / 8) * 8 * D + 64 * ch + 8 * (r % 8);
}

// s[32] (64 × 64 accumulators of one warpgroup) = the 64 A rows at Ar (core layout, rows ar0 …) × the 64 B
// rows at Bs (core layout, descriptor), over D.
template <int D>
static __device__ __forceinline__ void iw_product(float s[32], const __nv_bfloat16 *Ar, int ar0,
                                                  const __nv_bfloat16 *Bs) {
    constexpr int KQ = D / 16;
    const int warp_in = (threadIdx.x / 32) % 4;
    uint32_t a[KQ][4];
#pragma unroll
    for (int kk = 0; kk < KQ; kk++) ldsm_x4(a[kk], iw_arow<D>(Ar, ar0 + 16 * warp_in, kk));
    const WgDesc bd = wg_desc(Bs, 128, 16 * D);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < KQ; kk++) wgmma_m64n64k16<0>(s, a[kk], wg_desc_add(bd, 256 * kk), kk > 0);
    wg_commit();
    wg_wait<0>();
    wg_pin(s, 32);
    wg_pin(&a[0][0], 4 * KQ);
}

// Grid: ⌈nb / 2⌉ thread blocks over query blocks b0 … b0 + nb − 1 of 64 rows (two each, the last pair
// first); A row b − b0 at A + (b − b0)·ld. 256 threads.
template <int D>
__global__ void __launch_bounds__(IW_ROWS * 2, 2)
    indexer_block_scores_wg_kernel(float *A, int64_t ld, const __nv_bfloat16 *q, const __nv_bfloat16 *k, int T,
                                   float c_log2, int b0, int nb) {
    DYNAMIC_SMEM_AS(unsigned char, iw_smem);
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)iw_smem;  // 128 rows, core layout
    __nv_bfloat16 *Kb = Qs + IW_ROWS * D;          // two key tiles: Kb + (i & 1)·64·D
    float *lse_sm = (float *)(Kb + 2 * IW_BK * D);  // [128], log2 units; +∞: no query

    constexpr int NB = IW_ROWS / IW_BSEL;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const int wgi = warp / 4, w_in = warp % 4;  // warpgroup, warp in it
    const int bf = b0 + (gridDim.x - 1 - blockIdx.x) * NB;  // first query block here (longest first)
    const int nbc = min(NB, b0 + nb - bf);
    const int t0 = bf * IW_BSEL, nt = min(nbc * IW_BSEL, T - t0), end = t0 + nt;  // rows t0 … end − 1
    const int n_tiles = (end + IW_BK - 1) / IW_BK;

    iw_stage<D, IW_ROWS>(Qs, q + (int64_t)t0 * D, nt);
    for (int r = threadIdx.x; r < IW_ROWS; r += blockDim.x) lse_sm[r] = INFINITY;
    // Pass 1: this lane's rows (−1 past the last query: every key masked), the warpgroup's first and last.
    const int r0 = 64 * wgi + 16 * w_in;
    const int ta = r0 + g < nt ? t0 + r0 + g : -1, tb = r0 + g + 8 < nt ? t0 + r0 + g + 8 : -1;
    const int g_first = t0 + 64 * wgi, g_last = 64 * wgi < nt ? t0 + min(64 * wgi + 63, nt - 1) : -1;

    float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
    for (int pass = 0; pass < 2; pass++) {
        iw_stage<D, IW_BK>(Kb, k, min(IW_BK, end));
        __pipeline_commit();
        for (int it = 0; it < n_tiles; it++) {
            const int c0 = it * IW_BK;
            __pipeline_wait_prior(0);
            wg_fence_proxy();
            __syncthreads();  // every thread's copies (and Qs, lse_sm); tile it − 1's buffer is free
            if (it + 1 < n_tiles) {
                iw_stage<D, IW_BK>(Kb + ((it + 1) & 1) * IW_BK * D, k + (int64_t)(c0 + IW_BK) * D,
                                   min(IW_BK, end - c0 - IW_BK));
                __pipeline_commit();
            }
            const __nv_bfloat16 *Ks = Kb + (it & 1) * IW_BK * D;
            if (pass == 0) {
                if (c0 <= g_last) {  // warpgroup-uniform
                    float s[32];
                    iw_product<D>(s, Qs, 64 * wgi, Ks);
                    const bool mask = c0 + IW_BK - 1 > g_first;  // some key after some row's position
                    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
                    for (int j = 0; j < 8; j++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int col = c0 + 8 * j + 2 * c + e;
                            const bool va = ta >= 0 && (!mask || col <= ta), vb = tb >= 0 && (!mask || col <= tb);
                            s[4 * j + e] = va ? s[4 * j + e] * c_log2 : -INFINITY;
                            s[4 * j + 2 + e] = vb ? s[4 * j + 2 + e] * c_log2 : -INFINITY;
                            mx_a = fmaxf(mx_a, s[4 * j + e]);
                            mx_b = fmaxf(mx_b, s[4 * j + 2 + e]);
                        }
                    const float mn_a = fmaxf(m_a, quad_max(mx_a)), mn_b = fmaxf(m_b, quad_max(mx_b));
                    const float base_a = mn_a == -INFINITY ? 0.0f : mn_a, base_b = mn_b == -INFINITY ? 0.0f : mn_b;
                    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
                    for (int j = 0; j < 8; j++) {
                        sum_a += fast_exp2(s[4 * j] - base_a) + fast_exp2(s[4 * j + 1] - base_a);
                        sum_b += fast_exp2(s[4 * j + 2] - base_b) + fast_exp2(s[4 * j + 3] - base_b);
                    }
                    l_a = l_a * fast_exp2(m_a - base_a) + quad_sum(sum_a);
                    l_b = l_b * fast_exp2(m_b - base_b) + quad_sum(sum_b);
                    m_a = mn_a, m_b = mn_b;
                }
            } else {
                // Warpgroup wgi: query block wgi of the thread block (b_sel 64: its 64 rows are one block).
                const int jb = wgi, tq0 = t0 + IW_BSEL * jb, qend = min(tq0 + IW_BSEL, end);
                if (jb < nbc && c0 < qend) {  // warpgroup-uniform: some query of the block sees a key here
                    float s[32];
                    iw_product<D>(s, Ks, 0, Qs + 64 * jb * D);
                    // This lane's keys ka, kb (rows g, g + 8 of its warp's 16) against queries tq0 + 8j + 2c + e.
                    const int ka = c0 + 16 * w_in + g, kb = ka + 8;
                    const bool mask = c0 + IW_BK - 1 > tq0;
                    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
                    for (int j = 0; j < 8; j++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int r = 64 * jb + 8 * j + 2 * c + e, tq = t0 + r;  // the query row
                            const float L = lse_sm[r];
                            const float pa = fast_exp2(fmaf(s[4 * j + e], c_log2, -L));
                            const float pb = fast_exp2(fmaf(s[4 * j + 2 + e], c_log2, -L));
                            sum_a += !mask || ka <= tq ? pa : 0.0f;
                            sum_b += !mask || kb <= tq ? pb : 0.0f;
                        }
                    sum_a = quad_sum(sum_a), sum_b = quad_sum(sum_b);
                    if (c == 0) {
                        float *arow = A + (int64_t)(bf + jb - b0) * ld;
                        if (ka < qend) arow[ka] = sum_a;
                        if (kb < qend) arow[kb] = sum_b;
                    }
                }
            }
        }
        if (pass == 0 && c == 0) {
            if (ta >= 0 && l_a > 0.0f) lse_sm[r0 + g] = m_a + log2f(l_a);
            if (tb >= 0 && l_b > 0.0f) lse_sm[r0 + g + 8] = m_b + log2f(l_b);
        }
        __syncthreads();
    }
}

template <int D>
static int iw_launch(float *A, int64_t ld, const void *q, const void *k, int T, float c_col, int b0, int nb) {
    const size_t smem = sizeof(__nv_bfloat16) * (size_t)(IW_ROWS + 2 * IW_BK) * D + sizeof(float) * IW_ROWS;
    CUDA_CHECK(cudaFuncSetAttribute(indexer_block_scores_wg_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem));
    launch_checked(indexer_block_scores_wg_kernel<D>, dim3((nb + 1) / 2), dim3(2 * IW_ROWS), smem, A, ld,
                   (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, T, c_col * LOG2E, b0, nb);
    return 0;
}

extern "C" int indexer_block_scores_wg_cuda(float *A, int64_t ld, const void *q, const void *k, int T, int d_index,
                                            float c_col, int bsel, int b0, int nb) {
    if ((d_index != 64 && d_index != 128) || bsel != IW_BSEL) return -1;
    if (((uintptr_t)q | (uintptr_t)k) & 15) return -1;
    if (!wg_device_ok()) return -1;  // the code is sm_90a's
    if (T <= 0 || nb <= 0) return 0;
    if (b0 < 0 || (int64_t)(b0 + nb - 1) * bsel >= T || ld < T) {
        fprintf(stderr, "spindle: %s: bad arguments T = %d, bsel = %d, b0 = %d, nb = %d, ld = %lld\n", __func__, T,
                bsel, b0, nb, (long long)ld);
        abort();
    }
    return d_index == 64 ? iw_launch<64>(A, ld, q, k, T, c_col, b0, nb) : iw_launch<128>(A, ld, q, k, T, c_col, b0, nb);
}
