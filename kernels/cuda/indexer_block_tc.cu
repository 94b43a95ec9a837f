// indexer_block_tc.cu: the block-shared indexer selection's ranking values,
// computed where the scores are (indexer_block_scores_bf16_cuda, indexer_cuda.h),
// instead of through a [chunk, T] score buffer in HBM. For the query block
// B = {t0, …, end − 1} (t0 = b·bsel, end = min(t0 + bsel, T)) it writes
//   A_B(j) = Σ_{t ∈ B, t ≥ j} exp(c·q_t·k_j − lse_t),  j < end,
//   lse_t  = log Σ_{j ≤ t} exp(c·q_t·k_j),
// what indexer_select_cpu ranks for bsel > 1 (kernels/cpu/indexer_ops.c),
// from bf16 q and k (d_I 64 or 128) with fp32 products and sums.
//
// Why: at 128K the buffered path writes 34 GB of fp32 scores and reads them
// twice (row softmax statistics, then the block sums): 108 ms of the 237 ms a
// block-shared layer takes (docs/performance.md). Here the scores are
// computed twice on tensor cores instead (2 × T²/2 × d_I × 2 FLOP, ~4.4 TFLOP
// at 128K) and only A (T/bsel × T floats) leaves the chip.
//
// One thread block per query block, one warp per 16 query rows (bsel a
// multiple of 16, at most 128). The block's q rows sit in shared memory; key
// tiles of 64 rows of k stream through a double buffer (cp.async; rows past
// end are zero). Each warp computes its 16 × 64 tile of S = q·kᵀ with mma.sync
// m16n8k16 (mma.cuh), keys after a row's position masked:
//   pass 1: per row, the running maximum and sum of 2^(s·c·log2 e) over the
//           tiles: lse in log2 units, fp32;
//   pass 2: the same tiles again; p = 2^(s·c·log2 e − lse) (masked: 0); each
//           warp sums its 16 rows per key column (registers, then shuffles
//           across the 8 lanes that share a column), the warps' sums go
//           through shared memory and are added in warp order (so A does not
//           depend on timing), and one row of A is written per tile.
// Tiles wholly after a warp's last row are skipped by that warp (it still
// copies and waits with the others).
#include <cuda_bf16.h>
#include <cuda_pipeline_primitives.h>
#include <math.h>
#include <stdint.h>

#include "cuda_check.cuh"
#include "indexer_cuda.h"
#include "mma.cuh"

enum {
    IB_BK = 64,       // keys per tile
    IB_MAX_ROWS = 128, // bsel limit: 8 warps
};

// S for the warp's 16 rows × the 64 keys of the tile, masked (−∞ after a
// row's position), in log2 units: s[j] holds keys c0 + 8j + 2c, +1 of rows
// ta (0, 1) and tb (2, 3).
template <int D>
static __device__ __forceinline__ void ib_scores(float s[IB_BK / 8][4], const __nv_bfloat16 *qrow,
                                                 const __nv_bfloat16 *Ks, int c0, int ta, int tb, float c_log2) {
    constexpr int LDH = D + TILE_PAD, NS = IB_BK / 8;
    const int c = threadIdx.x % 4;
    mma_qk_tile<D, NS>(s, qrow, Ks, LDH);
#pragma unroll
    for (int j = 0; j < NS; j++) {
        const int col = c0 + 8 * j + 2 * c;
#pragma unroll
        for (int e = 0; e < 2; e++) {
            s[j][e] = col + e <= ta ? s[j][e] * c_log2 : -INFINITY;
            s[j][2 + e] = col + e <= tb ? s[j][2 + e] * c_log2 : -INFINITY;
        }
    }
}

// Grid: nb thread blocks, query blocks b0 … b0 + nb − 1 (in reverse); A row b − b0 at A + (b − b0)·ld.
template <int D>
__global__ void __launch_bounds__(IB_MAX_ROWS * 2)
    indexer_block_scores_kernel1(float *A, int64_t ld, const __nv_bfloat16 *q, const __nv_bfloat16 *k, int T,
                                 float c_log2, int bsel, int b0) {
    constexpr int LDH = D + TILE_PAD, CH = D / 8, NS = IB_BK / 8;
    extern __shared__ __align__(128) unsigned char ib_smem[];
    const int W = blockDim.x / 32;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)ib_smem;
    __nv_bfloat16 *Kb = Qs + bsel * LDH;  // two key tiles: Kb + (i & 1)·64·LDH
    float *colsum = (float *)(Qs + bsel * LDH + 2 * IB_BK * LDH);  // [W][64]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    // Longest first: thread block x takes query block b0 + nb − 1 − x, so the
    // blocks with the most key tiles start in the first wave and the short
    // ones fill in behind them (the work of block b grows with b).
    const int b = b0 + gridDim.x - 1 - blockIdx.x, t0 = b * bsel, nt = min(bsel, T - t0), end = t0 + nt;
    const int n_tiles = (end + IB_BK - 1) / IB_BK;
    float *arow = A + (int64_t)(b - b0) * ld;

    for (int e = threadIdx.x; e < bsel * CH; e += blockDim.x) {
        const int r = e / CH, ch = e % CH;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (r < nt) val = *(const uint4 *)(q + (int64_t)(t0 + r) * D + 8 * ch);
        *(uint4 *)(Qs + r * LDH + 8 * ch) = val;
    }
    // This lane's rows (positions; −1 past the block: every key masked).
    const int r0 = 16 * warp;
    const int ta = r0 + g < nt ? t0 + r0 + g : -1, tb = r0 + g + 8 < nt ? t0 + r0 + g + 8 : -1;
    const int t_warp = r0 < nt ? t0 + min(r0 + 15, nt - 1) : -1;  // the warp's last row
    const __nv_bfloat16 *qrow = Qs + (r0 + (lane % 8) + 8 * ((lane / 8) % 2)) * LDH + 8 * (lane / 16);

    float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
    float lse_a = INFINITY, lse_b = INFINITY;
    for (int pass = 0; pass < 2; pass++) {
        cp_async_rows<D, IB_BK, false>(Kb, k, D, NULL, end);
        __pipeline_commit();
        for (int it = 0; it < n_tiles; it++) {
            const int c0 = it * IB_BK;
            if (it + 1 < n_tiles)
                cp_async_rows<D, IB_BK, false>(Kb + ((it + 1) & 1) * IB_BK * LDH, k + (int64_t)(c0 + IB_BK) * D, D, NULL,
                                        end - c0 - IB_BK);
            __pipeline_commit();       // possibly empty: keeps the group count uniform
            __pipeline_wait_prior(1);  // this tile's copies (this thread's) …
            __syncthreads();           // … and everyone's; Qs on the first tile
            const __nv_bfloat16 *Ks = Kb + (it & 1) * IB_BK * LDH;
            float s[NS][4];
            const bool active = c0 <= t_warp;  // warp-uniform
            if (active) ib_scores<D>(s, qrow, Ks, c0, ta, tb, c_log2);
            if (pass == 0) {
                if (active) {
                    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
                    for (int j = 0; j < NS; j++) {
                        mx_a = fmaxf(mx_a, fmaxf(s[j][0], s[j][1]));
                        mx_b = fmaxf(mx_b, fmaxf(s[j][2], s[j][3]));
                    }
                    const float mn_a = fmaxf(m_a, quad_max(mx_a)), mn_b = fmaxf(m_b, quad_max(mx_b));
                    // A row that has seen nothing yet keeps m = −∞ and l = 0.
                    const float base_a = mn_a == -INFINITY ? 0.0f : mn_a, base_b = mn_b == -INFINITY ? 0.0f : mn_b;
                    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
                    for (int j = 0; j < NS; j++) {
                        sum_a += exp2f(s[j][0] - base_a) + exp2f(s[j][1] - base_a);
                        sum_b += exp2f(s[j][2] - base_b) + exp2f(s[j][3] - base_b);
                    }
                    l_a = l_a * exp2f(m_a - base_a) + quad_sum(sum_a);  // exp2(−∞) = 0 on a first tile
                    l_b = l_b * exp2f(m_b - base_b) + quad_sum(sum_b);
                    m_a = mn_a, m_b = mn_b;
                }
            } else {
                // Column sums of p over the warp's rows: lanes with g = 0 end up
                // holding columns 8j + 2c, +1.
#pragma unroll
                for (int j = 0; j < NS; j++) {
                    float v0 = 0.0f, v1 = 0.0f;
                    if (active) {
                        v0 = exp2f(s[j][0] - lse_a) + exp2f(s[j][2] - lse_b);
                        v1 = exp2f(s[j][1] - lse_a) + exp2f(s[j][3] - lse_b);
                    }
                    warp_colsum_store(colsum + warp * IB_BK, j, v0, v1);
                }
                __syncthreads();  // every warp's column sums are in
                for (int col = threadIdx.x; col < IB_BK && c0 + col < end; col += blockDim.x) {
                    float a = 0.0f;
                    for (int w = 0; w < W; w++) a += colsum[w * IB_BK + col];
                    arow[c0 + col] = a;
                }
            }
            __syncthreads();  // the tile's buffer (and colsum) are free for reuse
        }
        __pipeline_wait_prior(0);
        if (pass == 0) {
            // lse in log2 units; rows past the block (and rows without keys,
            // which cannot happen: key t is always there) get +∞: p = 0.
            lse_a = ta >= 0 && l_a > 0.0f ? m_a + log2f(l_a) : INFINITY;
            lse_b = tb >= 0 && l_b > 0.0f ? m_b + log2f(l_b) : INFINITY;
        }
    }
}

template <int D>
static int launch(float *A, int64_t ld, const void *q, const void *k, int T, float c_col, int bsel, int b0, int nb) {
    const size_t smem = sizeof(__nv_bfloat16) * (size_t)(bsel + 2 * IB_BK) * (D + TILE_PAD) +
                        sizeof(float) * (size_t)(bsel / 16) * IB_BK;
    CUDA_CHECK(cudaFuncSetAttribute(indexer_block_scores_kernel1<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem));
    indexer_block_scores_kernel1<D><<<nb, 32 * (bsel / 16), smem>>>(
        A, ld, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, T, c_col * 1.4426950408889634f, bsel, b0);
    CUDA_CHECK(cudaGetLastError());
    return 0;
}

extern "C" int indexer_block_scores_bf16_cuda(float *A, int64_t ld, const void *q, const void *k, int T, int d_index,
                                              float c_col, int bsel, int b0, int nb) {
    if ((d_index != 64 && d_index != 128) || bsel < 16 || bsel > IB_MAX_ROWS || bsel % 16 != 0) return -1;
    if (((uintptr_t)q | (uintptr_t)k) & 15) return -1;  // cp.async and uint4 loads: 16-byte rows
    if (T <= 0 || nb <= 0) return 0;
    if (b0 < 0 || (int64_t)(b0 + nb - 1) * bsel >= T || ld < T) {
        fprintf(stderr, "spindle: %s: bad arguments T = %d, bsel = %d, b0 = %d, nb = %d, ld = %lld\n", __func__, T,
                bsel, b0, nb, (long long)ld);
        abort();
    }
    return d_index == 64 ? launch<64>(A, ld, q, k, T, c_col, bsel, b0, nb)
                         : launch<128>(A, ld, q, k, T, c_col, bsel, b0, nb);
}
