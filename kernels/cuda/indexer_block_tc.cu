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
// One thread block per NB = ⌊128 / bsel⌋ consecutive query blocks (bsel a
// multiple of 16, at most 128): NB·bsel ≤ 128 query rows, one warp per 16 of
// them (a warp's rows lie in one query block). At bsel = 64 that is two blocks
// and 8 warps sharing every key tile: half the key traffic and, with 70 KB of
// shared memory, 24 resident warps per SM where one block per thread block
// had 16 (ncu: latency-bound at 16). The rows' q sit in shared memory; key
// tiles of 64 rows of k stream through a double buffer (cp.async; rows past
// the last query are zero). Two passes over the tiles, with mma.sync
// m16n8k16 (mma.cuh) and keys after a query's position masked:
//   pass 1 (query rows × keys): each warp its 16 q rows × the 64 keys of the
//           tile; per row, the running maximum and sum of 2^(s·c·log2 e) (the
//           maximum over the raw products, scaled once; fma into fast_exp2):
//           lse in log2 units, fp32, then into shared memory;
//   pass 2 (key rows × queries): work items (query block, group of 16 keys
//           of the tile), shared out over the warps; an item is its 16 keys ×
//           the block's queries, up to 64 at a time (S transposed: k is the A
//           operand, q the B operand), p = 2^(s·c·log2 e − lse) (masked: 0).
//           A key's sum over the block's queries is a row sum of the warp's C
//           fragments: in registers across the n-tiles, then over the 4 lanes
//           of a quad. No shared memory, no barrier and no cross-warp step per
//           tile, and the order of the additions is fixed (A does not depend
//           on timing). Summing columns across lanes and warps through
//           shared memory instead would cost two barriers per tile.
// Tiles (pass 1) or items (pass 2) wholly after a warp's last query are
// skipped by that warp (it still copies and waits with the others); tiles
// (pass 1) or query chunks (pass 2) wholly at or after the keys skip the
// causal mask. One barrier per tile: the next tile's copy is issued after it,
// into the buffer every warp has finished with.
#include <cuda_bf16.h>
#include <cuda_pipeline_primitives.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda_check.cuh"
#include "device_util.cuh"
#include "env.h"
#include "indexer_cuda.h"
#include "mma.cuh"

enum {
    IB_BK = 64,       // keys per tile
    IB_MAX_ROWS = 128, // bsel limit: 8 warps
};

// Query blocks per thread block.
static inline int ib_blocks_per_cta(int bsel) { return IB_MAX_ROWS / bsel; }

// S = q·k (unscaled) for the warp's 16 rows × the 64 keys of the tile, masked
// (−∞ after a row's position): s[j] holds keys c0 + 8j + 2c, +1 of rows
// ta (0, 1) and tb (2, 3). Pass 1 takes the maximum over these raw products and
// scales it once (c_log2 > 0 commutes with the maximum), so that a score costs
// one maximum, one fused multiply-add into fast_exp2 and one add.
// MASK = false: every key of the tile is at or before the warp's first row.
template <int D, bool MASK>
static __device__ __forceinline__ void ib_scores(float s[IB_BK / 8][4], const __nv_bfloat16 *qrow,
                                                 const __nv_bfloat16 *Ks, int c0, int ta, int tb) {
    constexpr int LDH = D + TILE_PAD, NS = IB_BK / 8;
    const int c = threadIdx.x % 4;
    mma_qk_tile<D, NS>(s, qrow, Ks, LDH);
    if (MASK) {
#pragma unroll
        for (int j = 0; j < NS; j++) {
            const int col = c0 + 8 * j + 2 * c;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                if (col + e > ta) s[j][e] = -INFINITY;
                if (col + e > tb) s[j][2 + e] = -INFINITY;
            }
        }
    }
}

// Grid: ⌈nb / NB⌉ thread blocks over query blocks b0 … b0 + nb − 1, the last
// group first; A row b − b0 at A + (b − b0)·ld. 32·NB·bsel/16 threads.
template <int D>
__global__ void __launch_bounds__(IB_MAX_ROWS * 2)
    indexer_block_scores_kernel2(float *A, int64_t ld, const __nv_bfloat16 *q, const __nv_bfloat16 *k, int T,
                                 float c_log2, int bsel, int b0, int nb, int NB) {
    constexpr int LDH = D + TILE_PAD, CH = D / 8, NS = IB_BK / 8;
    DYNAMIC_SMEM_AS(unsigned char, ib_smem);
    const int W = blockDim.x / 32, R = NB * bsel;   // warps, rows
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)ib_smem;  // [R][LDH]
    __nv_bfloat16 *Kb = Qs + R * LDH;               // two key tiles: Kb + (i & 1)·64·LDH
    float *lse_sm = (float *)(Kb + 2 * IB_BK * LDH);  // [R], log2 units; +∞: no query

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    // Longest first: thread block x takes the group of query blocks
    // counted from the end, so the groups with the most key tiles start in
    // the first wave and the short ones fill in behind them.
    const int bf = b0 + (gridDim.x - 1 - blockIdx.x) * NB;  // first query block here
    const int nbc = min(NB, b0 + nb - bf);                     // query blocks here
    const int t0 = bf * bsel, nt = min(nbc * bsel, T - t0), end = t0 + nt;  // rows t0 … end − 1
    const int n_tiles = (end + IB_BK - 1) / IB_BK;

    for (int e = threadIdx.x; e < R * CH; e += blockDim.x) {
        const int r = e / CH, ch = e % CH;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (r < nt) val = *(const uint4 *)(q + (int64_t)(t0 + r) * D + 8 * ch);
        *(uint4 *)(Qs + r * LDH + 8 * ch) = val;
    }
    for (int r = threadIdx.x; r < R; r += blockDim.x) lse_sm[r] = INFINITY;
    // Pass 1: this lane's rows (positions; −1 past the last query: every key masked).
    const int r0 = 16 * warp;
    const int ta = r0 + g < nt ? t0 + r0 + g : -1, tb = r0 + g + 8 < nt ? t0 + r0 + g + 8 : -1;
    const int t_warp = r0 < nt ? t0 + min(r0 + 15, nt - 1) : -1;  // the warp's last row
    const __nv_bfloat16 *qrow = Qs + (r0 + (lane % 8) + 8 * ((lane / 8) % 2)) * LDH + 8 * (lane / 16);
    const int n_items = nbc * (IB_BK / 16);  // pass 2: (query block, key group) pairs

    float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
    for (int pass = 0; pass < 2; pass++) {
        cp_async_rows<D, IB_BK, false>(Kb, k, D, NULL, end);
        __pipeline_commit();
        for (int it = 0; it < n_tiles; it++) {
            const int c0 = it * IB_BK;
            __pipeline_wait_prior(0);  // this tile's copies (this thread's) …
            __syncthreads();           // … and everyone's; Qs, lse_sm on the first tile; every warp is done with
                                       // tile it − 1, whose buffer the next copy takes
            if (it + 1 < n_tiles) {
                cp_async_rows<D, IB_BK, false>(Kb + ((it + 1) & 1) * IB_BK * LDH, k + (int64_t)(c0 + IB_BK) * D, D, NULL,
                                        end - c0 - IB_BK);
                __pipeline_commit();
            }
            const __nv_bfloat16 *Ks = Kb + (it & 1) * IB_BK * LDH;
            if (pass == 0) {
                if (c0 <= t_warp) {  // warp-uniform
                    float s[NS][4];
                    if (c0 + IB_BK - 1 > t0 + r0) ib_scores<D, true>(s, qrow, Ks, c0, ta, tb);
                    else ib_scores<D, false>(s, qrow, Ks, c0, ta, tb);
                    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
                    for (int j = 0; j < NS; j++) {
                        mx_a = fmaxf(mx_a, fmaxf(s[j][0], s[j][1]));
                        mx_b = fmaxf(mx_b, fmaxf(s[j][2], s[j][3]));
                    }
                    const float mn_a = fmaxf(m_a, quad_max(mx_a) * c_log2), mn_b = fmaxf(m_b, quad_max(mx_b) * c_log2);
                    // A row that has seen nothing yet keeps m = −∞ and l = 0.
                    const float nb_a = mn_a == -INFINITY ? 0.0f : -mn_a, nb_b = mn_b == -INFINITY ? 0.0f : -mn_b;
                    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
                    for (int j = 0; j < NS; j++) {
                        sum_a += fast_exp2(fmaf(s[j][0], c_log2, nb_a)) + fast_exp2(fmaf(s[j][1], c_log2, nb_a));
                        sum_b += fast_exp2(fmaf(s[j][2], c_log2, nb_b)) + fast_exp2(fmaf(s[j][3], c_log2, nb_b));
                    }
                    l_a = l_a * fast_exp2(m_a + nb_a) + quad_sum(sum_a);  // exp2(−∞) = 0 on a first tile
                    l_b = l_b * fast_exp2(m_b + nb_b) + quad_sum(sum_b);
                    m_a = mn_a, m_b = mn_b;
                }
            } else {
                for (int item = warp; item < n_items; item += W) {
                    const int jb = item / (IB_BK / 16), kg = item % (IB_BK / 16);  // query block, key group
                    const int qt0 = t0 + jb * bsel, qend = min(qt0 + bsel, end);   // its queries
                    const int k0 = c0 + 16 * kg, ka = k0 + g, kb = k0 + g + 8;
                    if (k0 >= qend) continue;  // no query of the block sees these keys
                    const __nv_bfloat16 *krow = Ks + (16 * kg + (lane % 8) + 8 * ((lane / 8) % 2)) * LDH + 8 * (lane / 16);
                    float sum_a = 0.0f, sum_b = 0.0f;
                    for (int qc = 0; qc < bsel; qc += 64) {  // 64 queries (the last chunk: 16, 32 or 48) at a time
                        const int qr = jb * bsel + qc, tq0 = qt0 + qc, n = min(64, bsel - qc);
                        if (tq0 + n - 1 < k0 || tq0 >= qend) continue;  // every query precedes the keys, or none left
                        key_sums_chunk<D>(&sum_a, &sum_b, krow, Qs + qr * LDH, lse_sm + qr, n, tq0, ka, kb, c_log2,
                                          k0 + 15 > tq0);  // mask: some key after the chunk's first query
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
            // lse in log2 units; rows past the last query (and rows without
            // keys, which cannot happen: key t is always there) keep +∞: p = 0.
            if (ta >= 0 && l_a > 0.0f) lse_sm[r0 + g] = m_a + log2f(l_a);
            if (tb >= 0 && l_b > 0.0f) lse_sm[r0 + g + 8] = m_b + log2f(l_b);
        }
        __syncthreads();  // every warp is done with the last tile's buffer; lse_sm is complete for pass 2
    }
}

template <int D>
static int launch(float *A, int64_t ld, const void *q, const void *k, int T, float c_col, int bsel, int b0, int nb) {
    const int NB = ib_blocks_per_cta(bsel), rows = NB * bsel;
    const size_t smem = sizeof(__nv_bfloat16) * (size_t)(rows + 2 * IB_BK) * (D + TILE_PAD) + sizeof(float) * rows;
    CUDA_CHECK(cudaFuncSetAttribute(indexer_block_scores_kernel2<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem));
    launch_checked(indexer_block_scores_kernel2<D>, dim3((nb + NB - 1) / NB), dim3(32 * (rows / 16)), smem, A, ld,
                   (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, T, c_col * LOG2E, bsel, b0, nb,
                   NB);
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
    // SPINDLE_SELECT_WGMMA=1: the warpgroup-MMA kernel (indexer_block_wg.cu) where it takes the call.
    if (env_long("SPINDLE_SELECT_WGMMA", 0, 0, 1) == 1 &&
        indexer_block_scores_wg_cuda(A, ld, q, k, T, d_index, c_col, bsel, b0, nb) == 0)
        return 0;
    return d_index == 64 ? launch<64>(A, ld, q, k, T, c_col, bsel, b0, nb)
                         : launch<128>(A, ld, q, k, T, c_col, bsel, b0, nb);
}
